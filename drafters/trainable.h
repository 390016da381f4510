/* trainable.h — what the training loop (engine/train.c) needs of a drafter family: one interface,
 * so a new trainable drafter (EAGLE-3, Medusa, MTP, a distilled small LM) brings its own step and
 * reuses the loop, the optimizer, the checkpoints and the resume logic.
 *
 * The loop hands the drafter one cached training sequence at a time (the target's tapped states,
 * the tokens, the target side of the losses, and the anchor positions it sampled), and the drafter
 * runs forward and backward, adding into a flat gradient laid out like its flat parameters. */
#ifndef DS_TRAINABLE_H
#define DS_TRAINABLE_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* One training sequence. The target side is the cache's top-K rows (tk_id/tk_lp, K = top_k per
 * row; row r is the law of token n_prompt + r), or, when tk_id is NULL, the target's final states
 * (its logits = final E^T: the full-vocabulary reference path). Anchors are response positions;
 * n_valid[a] predictions after anchor a stay inside the sequence. */
#define TRAIN_SEQ_TYPE(REAL, NAME)                                                                     \
    typedef struct {                                                                                    \
        int T;                                                                                          \
        const REAL *taps;        /* [T][n_tap*dim] */                                                   \
        const REAL *final;       /* [T][dim], or NULL */                                                \
        const int *tokens;       /* [T] */                                                              \
        int n_prompt, top_k;                                                                            \
        const int32_t *tk_id;    /* [T - n_prompt][top_k], or NULL */                                   \
        const float *tk_lp;                                                                             \
        int A;                                                                                          \
        const int *anchor;       /* [A] anchor positions */                                             \
        const int *n_valid;      /* [A] supervised predictions per anchor (a contiguous prefix) */      \
    } NAME;
TRAIN_SEQ_TYPE(float, train_seq)
TRAIN_SEQ_TYPE(double, train_seq_d)

/* Loss sums of a batch: three named terms (CE on the data token, L1 = 2 TV against the target,
 * BCE of the confidence head), their position weights, and the acceptance proxy. */
typedef struct {
    double ce, l1, bce, weight; /* weighted sums (divide by weight for the means) */
    double alpha_sum[17];       /* sum over blocks of prod_{i<=k} alpha_i, for the tau proxy */
    long n_at[17];              /* blocks supervised at position k */
    /* the confidence labels c*_k are detached (constants for the gradient); a gradient check must
     * hold them fixed: when label_out is set the labels are recorded there, when label_in is set
     * they are used instead of being recomputed */
    double *label_out;
    const double *label_in;
    long blocks, rows;
    long label_outside;         /* supervised tokens outside the draft vocabulary (no CE term) */
} train_stats;

typedef struct {
    size_t offset, numel;
    int decay;                  /* AdamW weight decay applies (not to norms, biases, ...) */
} train_tensor;

typedef struct trainable trainable;
struct trainable {
    void *impl;
    const char *kind;
    float *params;              /* flat */
    size_t n_params;
    int n_t;
    const train_tensor *t;
    int positions;              /* predictions supervised after each anchor (gamma) */
    int n_tap, dim;             /* the target states it reads: the cache must tap these layers */
    const int *taps;
    float w_ce, w_l1, w_bce;    /* loss weights, for the logged total */
    int full_vocab;             /* the draft covers the whole vocabulary (the reference path needs it) */
    /* forward, and backward when grad != NULL, adding grad / norm */
    int (*step)(trainable *, const train_seq *s, float *grad, double norm, train_stats *st);
    double (*seq_weight)(const trainable *, int A, const int *n_valid);
    int (*save)(const trainable *, const char *dir);
    int (*read_params)(trainable *, const char *dir);
    cJSON *(*config_json)(const trainable *); /* the architecture, for the run contract */
};

#endif
