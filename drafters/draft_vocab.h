/* draft_vocab.h — the draft vocabulary (FR-Spec style): the V' tokens the drafter's head covers,
 * chosen from the training cache. Draft q is 0 outside it, so verification stays exact; the
 * drafter simply cannot propose the other tokens. */
#ifndef DS_DRAFT_VOCAB_H
#define DS_DRAFT_VOCAB_H

#include "../datasets/traindata.h"
#include "../runtime/text/tokenizer.h"

typedef struct {
    int pinned;              /* special, end-of-generation and single-byte tokens, always in */
    double token_coverage;   /* share of the cache's response tokens inside */
    double mass_coverage;    /* mean share of the target's top-K mass inside, over response positions */
} draft_vocab_report;

/* ids[0..Vd) ascending: the pinned tokens, then the most frequent response tokens of the cache
 * (ties to the smaller id). */
int draft_vocab_choose(const train_cache *d, const tokenizer *tk, int Vd, int *ids, draft_vocab_report *rep);

#endif
