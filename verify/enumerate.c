#include "enumerate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

static int pick_f(rng_branches *b, const float *probs, int n);
static int pick_d(rng_branches *b, const double *probs, int n);
static int pick_ids_f(rng_branches *b, const float *probs, const int *ids, int n);
static int pick_accept(rng_branches *b, double log_thr);

int draw_enum_init(draw_enum *e) {
    memset(e, 0, sizeof *e);
    e->hooks = (rng_branches){pick_f, pick_d, pick_ids_f, pick_accept};
    e->cap = 16;
    e->f = ds_malloc(sizeof *e->f * (size_t)e->cap, "enumeration frames");
    return e->f ? 0 : -1;
}

void draw_enum_free(draw_enum *e) {
    free(e->f);
    memset(e, 0, sizeof *e);
}

void draw_enum_begin(draw_enum *e) {
    e->depth = 0;
    e->weight = 1.0L;
}

int draw_enum_end(draw_enum *e) {
    if (!e->error && e->depth != e->n) {
        ds_error("enumeration: the run made %d draws, its path has %d (the program is not deterministic given its draws)",
                 e->depth, e->n);
        e->error = 1;
    }
    e->paths++;
    return e->error ? -1 : 0;
}

int draw_enum_next(draw_enum *e) {
    while (e->n > 0 && e->f[e->n - 1].pick + 1 >= e->f[e->n - 1].n_opt) e->n--;
    if (e->n == 0) return 0;
    e->f[e->n - 1].pick++;
    return 1;
}

/* The frame of the current draw: replayed (checked against the new law) or new. The law is given
 * sparse: its m outcomes of positive probability, indices increasing, out of n. */
static int pick(draw_enum *e, int kind, int n, const int *idx, const long double *w, int m) {
    if (e->error) return -1;
    if (m == 0) {
        ds_error("enumeration: a draw from a law with no positive mass");
        e->error = 1;
        return -1;
    }
    if (m > DRAW_ENUM_MAX_OPT) {
        ds_error("enumeration: a draw with %d possible outcomes (at most %d)", m, DRAW_ENUM_MAX_OPT);
        e->error = 1;
        return -1;
    }
    if (e->depth < e->n) {
        draw_frame *f = &e->f[e->depth++];
        int same = f->kind == kind && f->n == n && f->n_opt == m;
        for (int i = 0; same && i < m; i++) same = f->opt[i] == idx[i] && f->w[i] == w[i];
        if (!same) {
            ds_error("enumeration: draw %d changed its law on replay (the program is not deterministic given its draws)",
                     e->depth);
            e->error = 1;
            return -1;
        }
        e->weight *= f->w[f->pick];
        return f->opt[f->pick];
    }
    if (e->n == e->cap) {
        draw_frame *nf = realloc(e->f, sizeof *nf * (size_t)(2 * e->cap));
        if (!nf) {
            ds_error("out of memory (enumeration frames)");
            e->error = 1;
            return -1;
        }
        e->f = nf;
        e->cap *= 2;
    }
    draw_frame *f = &e->f[e->n++];
    e->depth++;
    f->kind = kind;
    f->n = n;
    f->n_opt = m;
    f->pick = 0;
    memcpy(f->opt, idx, sizeof(int) * (size_t)m);
    memcpy(f->w, w, sizeof(long double) * (size_t)m);
    e->weight *= f->w[0];
    return f->opt[0];
}

/* normalised by the positive total, as sample_probs does; a branch is named by ID(i) */
#define PICK_BODY(probs, n, ID)                                              \
    int idx[DRAW_ENUM_MAX_OPT + 1], m = 0;                                   \
    long double w[DRAW_ENUM_MAX_OPT + 1], total = 0;                         \
    for (int i = 0; i < n; i++)                                              \
        if (probs[i] > 0) {                                                  \
            total += probs[i];                                               \
            if (m <= DRAW_ENUM_MAX_OPT) idx[m] = ID(i), w[m] = probs[i];     \
            m++;                                                             \
        }                                                                    \
    for (int i = 0; i < m && i <= DRAW_ENUM_MAX_OPT; i++) w[i] /= total;    \
    return pick(e, 0, n, idx, w, m);

/* the hooks rng_t.en points at: hooks is draw_enum's first member, so the enumerator is at its address */
#define SELF(i) (i)
#define MAPPED(i) ids[i]
static int pick_f(rng_branches *b, const float *probs, int n) {
    draw_enum *e = (draw_enum *)b;
    PICK_BODY(probs, n, SELF)
}
static int pick_d(rng_branches *b, const double *probs, int n) {
    draw_enum *e = (draw_enum *)b;
    PICK_BODY(probs, n, SELF)
}
/* a draw over n entries whose branches are named ids[i] (a draft vocabulary's token ids) */
static int pick_ids_f(rng_branches *b, const float *probs, const int *ids, int n) {
    draw_enum *e = (draw_enum *)b;
    PICK_BODY(probs, n, MAPPED)
}

static int pick_accept(rng_branches *b, double log_thr) {
    draw_enum *e = (draw_enum *)b;
    long double a = log_thr >= 0 ? 1.0L : expl((long double)log_thr); /* P(log u < t) = e^t for t < 0 */
    int idx[2], m = 0;                                                  /* index 0 reject, 1 accept */
    long double w[2];
    if (a < 1) idx[m] = 0, w[m++] = 1.0L - a;
    if (a > 0) idx[m] = 1, w[m++] = a;
    return pick(e, 1, 2, idx, w, m);
}
