/* traindata.h — the drafter training set: token sequences (prompt + the target's own response),
 * with what training needs of the target at every position, cached on disk and memory-mapped:
 *   - its states at the tapped layers (bf16), the drafter's context;
 *   - at every response position, its top-K log-probabilities for the next token (ids int32,
 *     log-probs fp32; the mass outside them is 1 - sum exp), so training never runs the target's
 *     head: the target side of the losses is read, not recomputed;
 *   - optionally (store_final) its final normed state, from which the full-vocabulary target
 *     distribution can be recomputed (bench-train's reference path; 2.3 KB a token, off by default).
 *
 * Layout: <cache>/built_from.json (the prompt set and a hash of its texts, sampling, lengths, seed,
 * taps, top_k, target, tokenizer, chat template, and the evaluation-overlap check), and shards
 * <cache>/shard-NNNN/ of shard_size prompts each (the prompts in a seeded shuffled order, so any
 * set of finished shards is a uniform sample of the mix), each holding tokens.bin, taps.bin,
 * topk_id.bin, topk_lp.bin, [final.bin], index.bin (per sequence: len, n_prompt, source; int32)
 * and layout.json. A shard's data files are appended first and its index last, so a build killed
 * at any point resumes after the last indexed sequence (longer files are trimmed back); a shard
 * with a "done" file is complete. Responses are generated batch requests at a time through the
 * varlen forward; each finished sequence then runs once teacher-forced for its states and logits. */
#ifndef DS_TRAINDATA_H
#define DS_TRAINDATA_H

#include <stdint.h>

#include "../runtime/target.h"
#include "../verify/logits.h"

typedef struct {
    const char *dir;
    const char *dataset;     /* prompts: a dataset name (train20k, trainmix, ...) or a .jsonl path */
    const char *data_root;
    int limit;               /* prompts after the shuffle, 0 = all */
    int given;               /* 1: use each record's second turn as the response (teacher forcing on text) */
    int skip_bad;            /* skip malformed prompt lines (counted) instead of failing */
    int rebuild;             /* replace a cache built from other settings instead of refusing it */
    sampling_params sp;      /* response generation */
    int max_new;
    int max_prompt;          /* longer prompts are skipped */
    uint64_t seed;
    int n_tap, taps[8];
    int top_k;               /* target log-probs kept per response position */
    int store_final;
    int batch;               /* requests generated together (varlen forward) */
    int shard_size;          /* prompts per shard */
    int max_shards;          /* > 0: stop after this many shards are complete (build in stages) */
    int quiet;
} traindata_opts;

/* what a shard stores per position (the same for every shard of a cache) */
typedef struct {
    int n_tap, taps[8], dim, top_k, has_final;
    char fp[64];
} traindata_layout;

typedef struct {
    const int *tokens;
    const uint16_t *taps16;
    const int32_t *tk_id;
    const float *tk_lp;
    const float *final;
    const uint8_t *maps[5];
    size_t map_len[5];
} traindata_shard;

typedef struct {
    int n_seq;
    long n_tok, n_resp;            /* tokens; response positions (top-K rows) */
    int n_tap, dim, top_k, has_final;
    int taps[8];
    int *len, *n_prompt, *source;  /* per sequence; source = prompt index in the shuffled set */
    int *shard;                    /* shard of each sequence */
    long *off, *koff;              /* first token / first top-K row of each sequence in its shard */
    int n_shard;
    traindata_shard *sh;
    char target_fingerprint[64];
} train_cache;

/* Build (or resume building) the cache from prompts and the target. */
int traindata_build(target *t, const traindata_opts *o);
/* Append one sequence to a shard folder (teacher-forced capture with the target). */
int traindata_append(target *t, const char *shard_dir, const int *tokens, int n, int n_prompt, int source,
                     const traindata_layout *lay);
/* Open the shards under dir (shard-0000, shard-0001, ... as far as they go, at most max_shards
 * when > 0: a config that names max_shards trains on the same data while later shards build). */
int traindata_open(train_cache *c, const char *dir, const target *t, int max_shards);
void traindata_close(train_cache *c);
static inline const int *traindata_tokens(const train_cache *c, int i) {
    return c->sh[c->shard[i]].tokens + c->off[i];
}
/* a sequence's tapped states as fp32 [len][n_sel*dim], the cache's taps sel[0..n_sel) in that order
 * (sel NULL: all of them); final [len][dim] when the cache has them (pass NULL otherwise) */
void traindata_seq(const train_cache *c, int i, const int *sel, int n_sel, float *taps, float *final);
/* where each of the n layers a drafter reads sits among the cache's taps (sel[n]); -1 with a
 * message naming the first missing layer */
int traindata_select_taps(const train_cache *c, const int *layers, int n, int *sel);
/* top-K rows of sequence i: row r holds the target's distribution for token n_prompt + r
 * (r < len - n_prompt), K ids and their log-probabilities, most likely first */
static inline const int32_t *traindata_topk_id(const train_cache *c, int i) {
    return c->sh[c->shard[i]].tk_id + c->koff[i] * c->top_k;
}
static inline const float *traindata_topk_lp(const train_cache *c, int i) {
    return c->sh[c->shard[i]].tk_lp + c->koff[i] * c->top_k;
}
/* Top-K of one logits row: ids (most likely first) and log-probabilities log softmax(z)_id. */
void topk_logprobs(const float *z, int V, int K, int32_t *id, float *lp);

#endif
