/* contract.h — what a learned drafter's checkpoint promises about where it may serve, one struct in
 * every learned family's config (block drafters, Medusa, MTP / EAGLE-3, the vanilla LM): the target
 * it was trained against, the tokenizer and chat template its data was rendered with, its draft
 * vocabulary (FR-Spec style, subvocab.h) and its per-position calibration temperatures (`calibrate`).
 * Read from and written to a checkpoint's config.json here, with the same keys for every family,
 * and checked against the target when the drafter opens. */
#ifndef DS_CONTRACT_H
#define DS_CONTRACT_H

#include <cJSON.h>

#include "../runtime/base/jcfg.h"
#include "../runtime/model/model.h"
#include "../runtime/target.h"
#include "subvocab.h"

#define CONTRACT_MAX_CALIB 16

typedef struct {
    char target_fingerprint[64];
    char chat_template[16];  /* what the training data was rendered with ("" = not recorded) */
    char tokenizer[20];      /* tokenizer_fingerprint of the target it was trained with ("" = not recorded) */
    int draft_vocab;         /* rows of the head the drafts come from (0: the whole vocabulary) */
    char vocab_hash[20];     /* FNV-1a of their ids, "" when whole */
    int n_calib;             /* calibration temperatures per position (0 = none) */
    float calib[CONTRACT_MAX_CALIB];
} draft_contract;

/* the head's rows out of a target vocabulary of V: the draft vocabulary's, or all V */
static inline int contract_rows(const draft_contract *k, int V) { return k->draft_vocab ? k->draft_vocab : V; }
/* a fresh drafter's: trained against this target, nothing else recorded */
void contract_init(draft_contract *k, const model *target);
/* the contract's keys of an open config object (target_fingerprint, chat_template, tokenizer,
 * draft_vocab, vocab_hash, calibration); absent keys keep what *k holds */
int contract_read(jcfg *r, draft_contract *k);
/* after reading: trained against this target (else -1 naming `what` and both fingerprints); a draft
 * vocabulary as large as the target's is the whole one */
int contract_check_target(draft_contract *k, const model *target, int vocab, const char *what);
/* the contract's keys into a config object (draft_vocab and vocab_hash only with a draft vocabulary,
 * the template and tokenizer only when recorded: absent reads back as the same) */
void contract_json(cJSON *j, const draft_contract *k);
/* the data's side, at training: the target's chat template family and tokenizer fingerprint */
void contract_stamp(draft_contract *k, const target *t);
/* at serving: the recorded template and tokenizer ("" = not recorded) must be the target's; -1 with
 * a message naming `what` */
int contract_check_serving(const draft_contract *k, const target *t, const char *what);
/* the draft vocabulary of a target vocabulary of V: from its ids (NULL: the whole one), or from a
 * checkpoint's safetensors file at path, checked against the recorded hash */
int contract_vocab_set(const draft_contract *k, subvocab *sv, int V, const int *ids, const char *what);
int contract_vocab_read(const draft_contract *k, subvocab *sv, int V, const char *path);
/* "-w" and 16 hex digits of FNV-1a over the weights, the calibration temperatures and the draft
 * vocabulary, appended to a drafter's fingerprint: two checkpoints of one architecture told apart in a
 * trace (kind and parameter count alone named them alike) */
void contract_weights_tag(const draft_contract *k, const float *params, size_t n, char *fp, size_t cap);

#endif
