/* medusa.h — Medusa-1 heads (drafters-reference §4): K residual blocks on the target's last hidden
 * state, each followed by the target's own frozen head.
 *
 * The target's state h at the position before the anchor (the one whose head drew the anchor) goes
 * through the target's final RMSNorm (frozen), then head k (1-based) predicts the token k places
 * after the anchor:
 *     r_k = hn + SiLU(W_k hn + b_k),   z_k = E r_k   (E: the target's output matrix, frozen)
 * Heads read only h, never the drafted tokens, so q_k does not depend on x_{<k}: the chain's q_k is
 * the processed softmax(z_k) whatever was drafted before it (the lossless variant: each token is
 * drawn from that q_k and q_k is reported; Medusa's "typical acceptance" is not used).
 * The confidence c_k is the head's top probability max softmax(z_k) (temperature 1), optionally
 * temperature-scaled per position by `calibrate`: a function of the state alone, never of the drawn
 * x_k (a scheduler's stop that read x_k would bias what is verified; the gate rejects it).
 * Training: CE on the data token and L1 = 2 TV against the target's cached top-K law of that token,
 * every supervised position weighted 1 (Medusa's train_legacy sums the heads' losses unweighted);
 * W_k starts at zero (r_k = hn: every head starts as the target's own next-token law), b_k at zero. */
#ifndef DS_MEDUSA_H
#define DS_MEDUSA_H

#include <cJSON.h>
#include <stddef.h>

#include "../runtime/model/model.h"
#include "contract.h"
#include "subvocab.h"
#include "trainable.h"

#define MD_MAX_HEADS 16

typedef struct {
    int dim, vocab, heads;
    int tap;               /* the target layer read: its last (the residual stream before the final norm) */
    float eps;             /* the target's RMSNorm eps */
    float w_ce, w_l1;
    draft_contract contract; /* target, tokenizer, template, draft vocabulary, calibration */
} md_config;

/* the training step's buffers, for float (training) and double (the finite-difference check) */
#define MD_WS_TYPE(REAL, SFX)                                                                            \
    typedef struct {                                                                                      \
        size_t cap_rows, cap_a;                                                                           \
        REAL *tap, *rstd, *hn, *X, *U, *R, *Z, *dZ, *dR, *dU, *tf, *Tp, *tk_p, *scr, *scr2;                                \
        int *arow, *label, *tpos, *tk_sub, *kof;                                                           \
        double *alpha_prod;                                                                                \
    } md_ws##SFX;
MD_WS_TYPE(float, _f)
MD_WS_TYPE(double, _d)

typedef struct {
    md_config cfg;
    size_t n_params;
    float *params;         /* heads x (W [dim][dim], b [dim]), one allocation */
    int n_t;
    char names[2 * MD_MAX_HEADS][32];
    train_tensor tt[2 * MD_MAX_HEADS];
    float *norm;           /* [dim] the target's final norm (frozen copy) */
    subvocab sv;           /* the draft vocabulary (the whole one when cfg.draft_vocab is 0) */
    float *E;              /* [sv.Vd][dim] fp32 copy of the target's head rows (training only; NULL when serving) */
    md_ws_f ws;
} md_model;

/* Defaults for a target (heads 4, the last layer), JSON fields (heads, w_ce, w_l1, calibration)
 * override them; unknown keys are refused. */
int md_config_init(md_config *c, const model *target, const cJSON *j);
cJSON *md_config_json(const md_config *c);
/* W_k = 0 and b_k = 0 (Medusa's init); init_std > 0 draws W_k from N(0, init_std^2 / dim) instead
 * (an untrained head whose blocks matter, for tests and the gate). with_head: keep the fp32 head
 * copy the training step needs. ids: the draft vocabulary's c->contract.draft_vocab ids (NULL: the whole). */
int md_model_init(md_model *m, const md_config *c, const model *target, uint64_t seed, float init_std, int with_head,
                  const int *ids);
int md_load(md_model *m, const char *dir, const model *target, int with_head);
int md_save(const md_model *m, const char *dir);
int md_read_params(md_model *m, const char *dir);
void md_model_free(md_model *m);
/* the model as the trainer sees it (tr points into m) */
int md_trainable(md_model *m, trainable *tr);

/* One sequence, forward (and backward into grad when grad != NULL, scaled by 1/norm): the float
 * step, and the same code in double over double copies of params, norm and E (tests/test_medusa.c).
 * E holds the head's Vd draft rows; vmap maps a vocabulary id to its row (-1 outside; NULL when
 * Vd is the whole vocabulary, which the reference path without top-K needs). */
int md_step_f(const md_config *c, const float *P, float *G, const float *norm, const float *E, int Vd, const int *vmap,
              const train_seq *s, double norm_w, train_stats *st, md_ws_f *w);
int md_step_d(const md_config *c, const double *P, double *G, const double *norm, const double *E, int Vd,
              const int *vmap, const train_seq_d *s, double norm_w, train_stats *st, md_ws_d *w);
void md_ws_free_d(md_ws_d *w);
double md_seq_weight(int A, const int *n_valid);

#endif
