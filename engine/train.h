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
#include "../drafters/blockdraft.h"

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
} train_opts;

typedef struct {
    int step;
    double loss, ce, l1, bce, tau_proxy, grad_norm, rows_per_s;
} train_point;

/* Train m (already initialised, or replaced by the checkpoint in out/last when resuming) on the
 * cache. A checkpoint records the run's contract (every option that shapes the loss curve, the
 * drafter's architecture, the data); resuming under another contract is an error naming the field,
 * unless warm_start. Resuming trims the logs to the checkpoint's step (no duplicate steps). history, when not NULL, receives one point per step of this run (cap entries). */
int train_run(bd_model *m, const train_cache *data, const train_opts *o, train_point *history, int cap, int *n_history);

#endif
