/* sampling.h — reproducible randomness and the sampling primitives every decoder shares.
 *
 * xoshiro256** seeded through splitmix64: one stream per purpose (accept tests, residual draws,
 * bonus draws) so that a decision never reuses the uniform of another. */
#ifndef DS_SAMPLING_H
#define DS_SAMPLING_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng_t;

void rng_seed(rng_t *r, uint64_t seed);
uint64_t rng_u64(rng_t *r);
double rng_uniform(rng_t *r);       /* [0, 1) with 53 random bits */
double rng_uniform_pos(rng_t *r);   /* (0, 1) */

/* Index of the largest value; ties go to the lowest index. */
int argmax_f32(const float *x, int n);
/* Inverse-CDF draw from probs[n] / sum(probs) with uniform u in [0,1) (probs need not be
 * normalised; non-positive entries are never drawn). The result is < n and has probs[i] > 0
 * whenever any entry is positive. */
int sample_probs(const float *probs, int n, double u);
int sample_probs_d(const double *probs, int n, double u); /* the same for double weights */

#endif
