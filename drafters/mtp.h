/* mtp.h — a DeepSeek-V3-style multi-token-prediction module as a drafter (drafters-reference §6).
 *
 * One module, reused for every draft position (as vLLM and SGLang serve DeepSeek's single MTP layer
 * for more than one speculative token), trained unrolled to `depth` positions so that what it sees
 * in training is what it sees when drafting. Position i of the module's sequence reads the target's
 * state h_i (its last layer, before the final norm) and the next token t_{i+1}:
 *     x_i = P [RMSNorm_h(h_i); RMSNorm_e(Emb(t_{i+1}))]      P: [dim][2 dim]
 *     y_i = Block(x_i)        one pre-norm transformer block (attention with RoPE + SwiGLU) with
 *                             its own KV cache over the module's positions 0..i
 *     z_i = E RMSNorm_f(y_i)  E: the target's frozen head, Emb the target's frozen embedding
 * and predicts t_{i+2}. Drafting after the anchor x_0 = t_n (drawn from h_{n-1}): step 1 is the
 * module's row n-1 (h_{n-1}, x_0), made at commit time, so its KV entry stays committed; step k >= 2
 * is a speculative row at position n+k-2 reading the module's own y of step k-1 in place of a target
 * state, and x_{k-1} as its token; its KV entry is dropped at the next commit. Each x_k is drawn from
 * the processed softmax(z) and that exact q_k is reported (q_k depends on x_{<k}: a chain).
 * The confidence c_k is the top probability of softmax(z) at temperature 1 (never a function of the
 * drawn x_k), temperature-scaled per position by `calibrate`.
 * Training: every anchor runs the chain over the data's own tokens (teacher forcing of the tokens,
 * the module's own states: EAGLE's training-time test), CE + L1 against the cached top-K law, each
 * supervised position weight 1. The block starts as a copy of the target's last layer (where its
 * geometry and RoPE layout allow), the norms at 1 (the final norm at the target's), P at N(0, 0.02).
 *
 * The same module is EAGLE-3 (kind "eagle3", drafters/eagle3.c) when the state it reads at the
 * target's positions is not one layer's but the fusion of a low, a middle and a high one,
 *     g_i = F [h_i^low; h_i^mid; h_i^high]      F: [dim][3 dim], started as [0 0 I]
 * and its own y at the speculative ones, trained with the same unrolled chain (EAGLE-3's training-
 * time test). */
#ifndef DS_MTP_H
#define DS_MTP_H

#include <cJSON.h>
#include <stddef.h>

#include "../runtime/model/model.h"
#include "drafter.h"
#include "contract.h"
#include "subvocab.h"
#include "trainable.h"

#define MTP_MAX_DEPTH 16
#define MTP_MAX_TAPS 4
#define MTP_N_TENSORS 14

typedef struct {
    char kind[8];          /* "mtp", or "eagle3" (fused taps) */
    int dim, vocab, n_heads, n_kv_heads, head_dim, hidden_dim;
    int depth;             /* chained positions trained and drafted */
    int n_tap;             /* the target layers read: mtp its last (1); eagle3 low, mid, high, fused by F */
    int taps[MTP_MAX_TAPS];
    int init_layer;        /* the target layer the block started from (-1: random) */
    float eps, rope_theta;
    int rope_neox;         /* RoPE's pair layout (train_ops.h): the distilled LM keeps its target's, the rest 0 */
    float w_ce, w_l1;
    draft_contract contract; /* target, tokenizer, template, draft vocabulary, calibration */
} mtp_config;

/* named views of the flat parameters (or of a gradient laid out like them) */
#define MTP_PV_TYPE(REAL, SFX)                                                                           \
    typedef struct {                                                                                      \
        REAL *hnorm, *enorm, *proj, *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down,  \
            *final_norm, *fc;                                                                             \
        REAL *bq, *bk, *bv; /* the projections' biases (the distilled LM of a Qwen2 target), else NULL */     \
    } mtp_pv##SFX;
MTP_PV_TYPE(float, _f)
MTP_PV_TYPE(double, _d)

/* the block's matrix groups, as a serving pass hands them to its hook (outputs in this order) */
enum { MTP_MM_PROJ, MTP_MM_QKV /* q, k, v */, MTP_MM_O, MTP_MM_GU /* gate, up */, MTP_MM_DOWN, MTP_MM_FC /* eagle3's F */,
       MTP_MM_GROUPS };

/* one pass of the module over N rows: what the backward pass needs, grown on demand. mm, when set,
 * runs the block's matrices instead of the host's fp32 GEMMs (serving on the backend): group G's
 * outputs out[] from N input rows, 0 or -1 with a message. */
#define MTP_ACTS_TYPE(REAL, SFX)                                                                          \
    typedef struct {                                                                                      \
        int cap, cap_l;                                                                                   \
        int (*mm)(void *ctx, int group, REAL *const *out, const REAL *in, int N);                         \
        void *mm_ctx;                                                                                     \
        REAL *hin, *ein, *hn, *en, *rstd_h, *rstd_e, *cat, *x_in, *xn, *rstd1, *q, *k, *v, *prob, *att,   \
            *x_mid, *xn2, *rstd2, *g, *u, *hm, *y, *dy;                                                   \
        int *pos, *ctx_len, *lo, *hi, *bidx, *tok, *prev;                                                 \
    } mtp_acts##SFX;
MTP_ACTS_TYPE(float, _f)
MTP_ACTS_TYPE(double, _d)

/* the training step's buffers: one pass per chain position, the KV rows, the supervised rows */
#define MTP_WS_TYPE(REAL, SFX)                                                                            \
    typedef struct {                                                                                      \
        mtp_acts##SFX step[MTP_MAX_DEPTH];                                                                \
        size_t cap_kv, cap_m, cap_a, cap_r, cap_vd;                                                               \
        REAL *K1, *V1, *Kc, *Vc, *dK1, *dV1, *dKc, *dVc;                                                  \
        REAL *Ys, *hf, *rstd_f, *Z, *dZ, *dhf, *dYs, *tf, *Tp, *tk_p, *scr, *scr2;                        \
        REAL *dx, *dcat, *dtmp, *dq, *dk, *dv, *datt, *dxn, *dhm, *dg, *du, *dxm, *dxn2, *dh;         \
        int *src, *label, *tpos, *kof, *arow, *tk_sub, *row_of;                                          \
        double *alpha_prod;                                                                               \
    } mtp_ws##SFX;
MTP_WS_TYPE(float, _f)
MTP_WS_TYPE(double, _d)

typedef struct {
    mtp_config cfg;
    size_t n_params;
    float *params;         /* one allocation, laid out by tt */
    train_tensor tt[MTP_N_TENSORS];
    mtp_pv_f pv;
    float *Ein;            /* [vocab][dim] fp32 copy of the target's embedding (training only) */
    subvocab sv;           /* the draft vocabulary (the whole one when cfg.draft_vocab is 0) */
    float *E;              /* [sv.Vd][dim] fp32 copy of the target head's draft rows (training only; may alias Ein) */
    mtp_ws_f ws;
} mtp_model;

extern const char *const MTP_TENSOR_NAMES[MTP_N_TENSORS];

/* Defaults for a target (depth 3, the last layer, the block from it; with "kind": "eagle3" the taps
 * 1, n_layers / 2 - 1, n_layers - 3 fused), JSON fields override them; unknown keys are refused. */
int mtp_config_init(mtp_config *c, const model *target, const char *kind, const cJSON *j);
/* the fused width (0: mtp reads its one tap as it is) */
static inline int mtp_fused(const mtp_config *c) { return c->kind[0] == 'e' ? c->n_tap : 0; }
cJSON *mtp_config_json(const mtp_config *c);
/* the initial module (see the header comment); with_embed: keep the fp32 embedding and head copies
 * the training step needs; ids: the draft vocabulary's c->contract.draft_vocab ids (NULL: the whole) */
int mtp_model_init(mtp_model *m, const mtp_config *c, const model *target, uint64_t seed, int with_embed,
                   const int *ids);
int mtp_load(mtp_model *m, const char *dir, const model *target, const char *kind, int with_embed);
int mtp_save(const mtp_model *m, const char *dir);
int mtp_read_params(mtp_model *m, const char *dir);
void mtp_model_free(mtp_model *m);
int mtp_trainable(mtp_model *m, trainable *tr);
/* mtp's and eagle3's training for `train` (train_family.h) */
extern const struct train_family mtp_train_family;
void mtp_pv_set_f(mtp_pv_f *v, const mtp_model *m, float *base);
void mtp_pv_set_d(mtp_pv_d *v, const mtp_model *m, double *base);

/* One sequence, forward (and backward into G when G has its pointers set), scaled by 1/norm_w: the
 * float step, and the same code in double (tests/test_mtp.c). Ein: the frozen embedding [vocab][dim];
 * E: the head's Vd draft rows, vmap a vocabulary id's row (-1 outside; NULL for the whole vocabulary,
 * which the reference path without top-K needs). */
int mtp_step_f(const mtp_config *c, const mtp_pv_f *P, const mtp_pv_f *G, const float *Ein, const float *E, int Vd,
               const int *vmap, const train_seq *s, double norm_w, train_stats *st, mtp_ws_f *w);
int mtp_step_d(const mtp_config *c, const mtp_pv_d *P, const mtp_pv_d *G, const double *Ein, const double *E, int Vd,
               const int *vmap, const train_seq_d *s, double norm_w, train_stats *st, mtp_ws_d *w);

/* The pieces vanilla_lm.c's distilled layers share (one pre-norm transformer block in its trainable form,
 * and the frozen head with its losses), in float and double. block_forward: a->x_in [N][dim] -> a->y,
 * with a->pos, ->bidx, ->ctx_len, ->lo, ->hi set as for a pass (the block fields of P only: attn_norm ..
 * w_down). block_backward: a->dy in, gradients added into G and the KV rows', the gradient of a->x_in
 * left in w->dx (w reserved for N rows). head_losses: the M rows w->Ys with w->kof (position), ->arow
 * (anchor), ->label (draft row or -1), ->tpos (the row whose next token is predicted) set, through the
 * final norm and E into the losses of st; with dfinal_norm, the gradients of w->Ys into w->dYs. */
#define MTP_SHARED_DECL(REAL, SFX, SEQT)                                                                          \
    int mtp_block_forward##SFX(const mtp_config *c, const mtp_pv##SFX *P, mtp_acts##SFX *a, int N, REAL *kc,    \
                               REAL *vc, REAL *kb, REAL *vb, int L);                                            \
    void mtp_block_backward##SFX(const mtp_config *c, const mtp_pv##SFX *P, const mtp_pv##SFX *G,                \
                                 mtp_acts##SFX *a, int N, const REAL *kc, const REAL *vc, const REAL *kb,         \
                                 const REAL *vb, REAL *dkc, REAL *dvc, REAL *dkb, REAL *dvb, int L,               \
                                 mtp_ws##SFX *w);                                                                 \
    int mtp_head_losses##SFX(const mtp_config *c, const REAL *final_norm, REAL *dfinal_norm, const REAL *E,      \
                             int Vd, const int *vmap, const SEQT *s, size_t M, int A, double norm_w,             \
                             train_stats *st, mtp_ws##SFX *w);                                                    \
    /* room for kv KV rows, M supervised rows, A anchors, passes of R rows, top-K, the full law, Vd rows */   \
    int mtp_ws_reserve##SFX(mtp_ws##SFX *w, const mtp_config *c, size_t kv, size_t M, size_t A, size_t R, int K, \
                            int full, int Vd);                                                                    \
    int mtp_acts_reserve##SFX(mtp_acts##SFX *a, const mtp_config *c, int N, int L);                              \
    void mtp_ws_free##SFX(mtp_ws##SFX *w);
MTP_SHARED_DECL(float, _f, train_seq)
MTP_SHARED_DECL(double, _d, train_seq_d)

/* The serving pass: N rows at positions pos0.. of one request (hin: states [N][dim], tok: the next
 * tokens' embedding rows ein [N][dim]), their K/V written into the cache at pos0.., each row
 * attending to cache rows [0, its position]; y [N][dim] left in a->y. */
int mtp_rows_forward_f(const mtp_config *c, const mtp_pv_f *P, mtp_acts_f *a, int N, int pos0, float *Kcache,
                       float *Vcache);
void mtp_acts_free_f(mtp_acts_f *a);

/* The drafter (registered as "mtp"; eagle3.c registers the same operations as "eagle3"): open a
 * checkpoint or an untrained module of the given kind, then the usual operations. */
int mtp_drafter_open(drafter *d, const cJSON *cfg, target *t, const char *kind);
int mtp_drafter_begin(drafter *d, request *r, const float *prompt_hidden);
int mtp_drafter_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out);
int mtp_drafter_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden);
int mtp_drafter_rewind(drafter *d, request *r);
void mtp_drafter_end(drafter *d, request *r);
void mtp_drafter_close(drafter *d);

#endif
