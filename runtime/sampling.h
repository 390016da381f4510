/* sampling.h — reproducible randomness and the sampling primitives every decoder shares.
 *
 * xoshiro256** seeded through splitmix64: one stream per purpose (accept tests, residual draws,
 * bonus draws) so that a decision never reuses the uniform of another. */
#ifndef DS_SAMPLING_H
#define DS_SAMPLING_H

#include <stdint.h>

/* A path enumerator's hooks: under one, a draw consumes no random bits and follows the branch the
 * enumerator picks (verify/enumerate.c implements them; this layer only calls them). */
typedef struct rng_branches rng_branches;
struct rng_branches {
    int (*pick_f)(rng_branches *b, const float *probs, int n);
    int (*pick_d)(rng_branches *b, const double *probs, int n);
    int (*pick_ids_f)(rng_branches *b, const float *probs, const int *ids, int n);
    int (*pick_accept)(rng_branches *b, double log_thr);
};

/* A random stream. `en` is NULL in production; the losslessness gate sets it to a path enumerator's
 * hooks, and then the draw functions below consume no random bits: each follows one branch, and the
 * enumerator walks every branch with its exact probability (so the gate enumerates the production
 * code itself, not a model of it). */
typedef struct {
    uint64_t s[4];
    rng_branches *en;
} rng_t;

void rng_seed(rng_t *r, uint64_t seed); /* also detaches any enumerator */
uint64_t rng_u64(rng_t *r);
double rng_uniform(rng_t *r);       /* [0, 1) with 53 random bits */
double rng_uniform_pos(rng_t *r);   /* (0, 1) */
double rng_normal(rng_t *r);        /* N(0, 1): Box-Muller's cosine branch, two uniforms a draw */

/* Index of the largest value; ties go to the lowest index. */
int argmax_f32(const float *x, int n);
/* Inverse-CDF draw from probs[n] / sum(probs) with uniform u in [0,1) (probs need not be
 * normalised; non-positive entries are never drawn). The result is < n and has probs[i] > 0
 * whenever any entry is positive. */
int sample_probs(const float *probs, int n, double u);
int sample_probs_d(const double *probs, int n, double u); /* the same for double weights */

/* Every random decision of a decoder goes through these, so that the gate can enumerate it.
 * rng_draw: one index from probs / sum(probs) (= sample_probs with a fresh uniform); -1 (message
 * set) only under an enumerator, when the replayed path no longer matches the program. */
int rng_draw(rng_t *r, const float *probs, int n);
int rng_draw_d(rng_t *r, const double *probs, int n);
/* ids[j] for j drawn from probs[0..n) (a law over a subset of the vocabulary, e.g. a draft
 * vocabulary): under an enumerator the branches are the ids, so the gate sees token ids */
int rng_draw_ids(rng_t *r, const float *probs, const int *ids, int n);
/* 1 with probability min(1, exp(log_thr)): log(u) < log_thr for u uniform in (0, 1). *u gets the
 * uniform (NAN under an enumerator, which has none); -1 as above. */
int rng_accept(rng_t *r, double log_thr, double *u);

#endif
