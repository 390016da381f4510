#include "sampling.h"

#include <math.h>
#include <stddef.h>

#include "kernels/kernels_cpu.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
    r->en = NULL;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(rng_t *r) {
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1p-53; }

double rng_uniform_pos(rng_t *r) {
    double u;
    do u = rng_uniform(r);
    while (u == 0.0);
    return u;
}

double rng_normal(rng_t *r) {
    double u1 = rng_uniform_pos(r), u2 = rng_uniform(r);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

int argmax_f32(const float *x, int n) { return qk_argmax(x, n); }

/* inverse CDF over weights w (float or double), normalised by their positive total */
#define SAMPLE_BODY(w, n, u)                                                                                 \
    double total = 0;                                                                                        \
    for (int i = 0; i < n; i++)                                                                              \
        if (w[i] > 0) total += w[i];                                                                         \
    double target = u * total, c = 0;                                                                        \
    int last = 0;                                                                                            \
    for (int i = 0; i < n; i++) {                                                                            \
        if (w[i] <= 0) continue;                                                                             \
        c += w[i];                                                                                           \
        last = i;                                                                                            \
        if (target < c) return i;                                                                            \
    }                                                                                                        \
    return last; /* rounding left target at the total: the last token with mass */

int sample_probs(const float *probs, int n, double u) { SAMPLE_BODY(probs, n, u) }
int sample_probs_d(const double *probs, int n, double u) { SAMPLE_BODY(probs, n, u) }

int rng_draw(rng_t *r, const float *probs, int n) {
    if (r->en) return r->en->pick_f(r->en, probs, n);
    return sample_probs(probs, n, rng_uniform(r));
}

int rng_draw_ids(rng_t *r, const float *probs, const int *ids, int n) {
    if (r->en) return r->en->pick_ids_f(r->en, probs, ids, n);
    return ids[sample_probs(probs, n, rng_uniform(r))];
}

int rng_draw_d(rng_t *r, const double *probs, int n) {
    if (r->en) return r->en->pick_d(r->en, probs, n);
    return sample_probs_d(probs, n, rng_uniform(r));
}

int rng_accept(rng_t *r, double log_thr, double *u) {
    if (r->en) {
        *u = NAN;
        return r->en->pick_accept(r->en, log_thr);
    }
    *u = rng_uniform_pos(r);
    return log(*u) < log_thr;
}
