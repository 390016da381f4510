/* train.h — the drafter training loop: AdamW with linear warmup and cosine decay, global-norm
 * gradient clipping, fixed seeds, periodic held-out evaluation, checkpoints, resume.
 *
 * Everything random is a function of (seed, step, slot): the epoch order of sequences and the
 * anchors of each sequence, so a run resumed from a checkpoint continues the same loss curve as
 * an uninterrupted one. Throughput (tok/s on the progress line, "rows" in train_log.jsonl) counts
 * supervised draft positions: block rows with a target token, forward and backward. */
#ifndef DS_TRAIN_H
#define DS_TRAIN_H

#include <stdint.h>

#include "../datasets/traindata.h"
#include "../runtime/sampling.h"
#include "../drafters/trainable.h"

typedef struct {
    int steps;
    int seqs_per_step;
    int anchors;           /* blocks per sequence (fewer when the response is short) */
    float lr, min_lr_frac, warmup_frac, weight_decay, clip, beta1, beta2;
    uint64_t seed;
    int eval_every, ckpt_every, log_every;
    float holdout;         /* fraction of sequences kept out of training for evaluation */
    int eval_seqs;
    int stop_after;        /* > 0: stop (as if killed) after this many steps of this run; for tests */
    const char *out;       /* run folder: last/ checkpoint, train_log.jsonl, eval_log.jsonl */
    int quiet;
    int warm_start;        /* with a checkpoint in out/last: its weights only, a new run from step 0 */
    struct train_profile *prof; /* when set: seconds spent loading, in the drafter's step, in the optimizer */
    int reference;         /* the target side from its cached final states over the full vocabulary
                            * (the pre-top-K path; bench-train's reference), not the top-K rows */
} train_opts;

typedef struct train_profile {
    double load, step, opt;
    long rows, steps;
} train_profile;

/* one training sequence with its sampled anchors, in buffers reused from sequence to sequence */
typedef struct {
    float *taps, *final;
    size_t cap_taps, cap_final;
    int *cand, cap_cand;
    int anchor[512], n_valid[512];
    int sel[8], n_sel;          /* the cache's taps the drafter reads, in its order (n_sel 0: all, -1: none) */
    train_seq s;
} train_seq_buf;
/* load sequence i of the cache with max_a anchors drawn by r (reference: final states, not top-K);
 * the taps are b->sel's when b->n_sel > 0 */
int train_load_seq(const train_cache *d, int i, int positions, int max_a, int reference, rng_t *r, train_seq_buf *b);
void train_seq_buf_free(train_seq_buf *b);
/* 1 + sum_k mean prod_{j<=k} alpha_j: the acceptance length the verifier would give */
double tau_proxy(const train_stats *st);

typedef struct {
    int step;
    double loss, ce, l1, bce, tau_proxy, grad_norm, rows_per_s;
} train_point;

/* Train the drafter tr (already initialised, or replaced by the checkpoint in out/last when resuming) on the
 * cache. A checkpoint records the run's contract (every option that shapes the loss curve, the
 * drafter's architecture, the data); resuming under another contract is an error naming the field,
 * unless warm_start. Resuming trims the logs to the checkpoint's step (no duplicate steps). history, when not NULL, receives one point per step of this run (cap entries). */
int train_run(trainable *tr, const train_cache *data, const train_opts *o, train_point *history, int cap, int *n_history);

#endif
