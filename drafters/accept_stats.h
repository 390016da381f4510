/* accept_stats.h — online acceptance rates for deterministic drafters (ngram, suffix): the
 * confidence c_k a scheduler reads, learned from what the target committed.
 *
 * A drafter names a feature cell per drafted token (match length, source, count ratio, ...);
 * counts of (observed, accepted) are kept per cell and draft position. A round observes every
 * accepted position and the first one after them: for a deterministic draft, "the committed token
 * at position k equals x_k" has probability p(x_k) whether x_k was verified and accepted, verified
 * and rejected (the residual never emits x_k) or not verified at all (the bonus is drawn from p),
 * so a scheduler that verifies nothing still teaches the table. A request's own counts are shrunk
 * toward the run-wide ones, which take a request's counts when it ends and never during it (a
 * request's drafts then depend only on its own past, so the gate can replay it). */
#ifndef DS_ACCEPT_STATS_H
#define DS_ACCEPT_STATS_H

#include "../runtime/base/jcfg.h"
#include "drafter.h"

#define AS_POS 16 /* positions with their own counts (later ones share the last) */

typedef struct {
    int n_cells;
    float *acc, *obs; /* [n_cells][AS_POS] */
    double hits, expect; /* a request's: accepted observations, and the rates predicted for them */
} accept_counts;

/* every cell starts at rate prior with weight pseudo-observations (weight 0: all zero) */
int accept_counts_init(accept_counts *c, int n_cells, float prior, float weight);
void accept_counts_free(accept_counts *c);
void accept_counts_zero(accept_counts *c);
void accept_counts_add(accept_counts *dst, const accept_counts *src);

/* How the estimate is made: c_k of a cell at 0-based position k is the cell's rate,
 *   base = (own acc + shrink * run rate) / (own obs + shrink),
 * times the request's factor (hits + req_weight) / (expect + req_weight), the ratio of what this
 * request accepted to what base predicted for it (a request that copies more or less than the run's
 * average, in every cell), in [0.001, 0.999]. */
typedef struct {
    float prior, prior_n;   /* run-wide rates start at prior with prior_n pseudo-observations */
    float shrink, req_weight;
    int n_calib;
    float calib[AS_POS];    /* "calibration" temperatures (from `calibrate`) on logit(c_k) */
} accept_prior;

/* the defaults (0.2, 2, 8, 4, none), then the drafter object's keys prior, prior_weight, shrink,
 * request_weight and calibration */
int accept_prior_read(jcfg *r, accept_prior *ap);
float accept_conf(const accept_counts *run, const accept_counts *own, const accept_prior *ap, int cell, int k);

/* One round's outcome for the drafts tok[0..n) with cells cell[0..n): com[0..m) are the tokens the
 * round committed (the verified drafts — this drafter's own, or under `combine` possibly another
 * member's — then the residual or bonus token; fewer at an end of generation). Position k is observed
 * while the committed tokens agree with the draft up to it: accepted while com[k] == tok[k], a miss at
 * the first difference, nothing after it. Returns how many committed tokens equal the copy's (n + 1
 * when all n did and the next one equals `after`, the token the copy would have drafted next, -1 if
 * none). */
int accept_observe(accept_counts *own, const accept_counts *run, const accept_prior *ap, const int *cell, const int *tok,
                   int n, const int *com, int m, int after);

/* draft k of a deterministic drafter: x = tok with q = delta(x) (or, as the gate's draft-wrong-q
 * control, reported as a coin flip between x and x + 1), and its raw and calibrated c_k */
void accept_draft(draft_block *out, int k, int tok, int cell, verify_fault fault, const accept_counts *run,
                  const accept_counts *own, const accept_prior *ap);

#endif
