/* traindata.h — the drafter training set: token sequences (prompt + response) with the target's
 * states at the tapped layers (bf16) and its final normed state (fp32) for every position, cached
 * on disk and memory-mapped. Full-vocabulary logits are never stored: training recomputes the
 * target's logits from the final state through the frozen head.
 *
 * Cache folder: tokens.bin (int32), taps.bin (bf16 [tok][n_tap][dim]), final.bin (f32 [tok][dim]),
 * index.json (sequence lengths, prompt lengths, provenance), built_from.json (everything the cache
 * was built from: prompt set and a hash of its texts, sampling, lengths, seed, taps, target,
 * tokenizer and chat template). Building appends and rewrites the index after every sequence, so
 * an interrupted build resumes where it stopped; a build asked with other settings is refused,
 * naming the field (data.rebuild replaces the cache). */
#ifndef DS_TRAINDATA_H
#define DS_TRAINDATA_H

#include <stdint.h>

#include "../runtime/target.h"
#include "../verify/logits.h"

typedef struct {
    const char *dir;
    const char *dataset;     /* prompts: a dataset name or .jsonl path */
    const char *data_root;
    int limit;               /* prompts, 0 = all */
    int given;               /* 1: use each record's second turn as the response (teacher forcing on text) */
    int skip_bad;            /* skip malformed prompt lines (counted) instead of failing */
    int rebuild;             /* replace a cache built from other settings instead of refusing it */
    sampling_params sp;      /* response generation */
    int max_new;
    int max_prompt;          /* longer prompts are skipped */
    uint64_t seed;
    int n_tap, taps[8];
} traindata_opts;

typedef struct {
    int n_seq;
    long n_tok;
    int n_tap, dim;
    int taps[8];
    int *len, *n_prompt, *source;  /* per sequence; source = prompt index in the dataset */
    long *off;                     /* first token of each sequence */
    const int *tokens;
    const uint16_t *taps16;
    const float *final;
    const uint8_t *maps[3];
    size_t map_len[3];
    char target_fingerprint[64];
} train_cache;

/* Build (or resume building) the cache from prompts and the target. */
int traindata_build(target *t, const traindata_opts *o);
/* Append one sequence (teacher-forced capture with the target). */
int traindata_append(target *t, const char *dir, const int *tokens, int n, int n_prompt, int source, int n_tap,
                     const int *taps);
int traindata_open(train_cache *c, const char *dir, const target *t);
void traindata_close(train_cache *c);
/* a sequence's states as fp32: taps [len][n_tap*dim], final [len][dim] */
void traindata_seq(const train_cache *c, int i, float *taps, float *final);

#endif
