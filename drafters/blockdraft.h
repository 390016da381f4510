/* blockdraft.h — the parallel block drafter shared by DFlash and DSpark (drafters-reference §1-2).
 *
 * Context: the target's states at n_tap layers, concatenated, through fc + RMSNorm, injected as
 * extra K/V rows into every draft layer (the layer's own Wk/Wv project them). A block is the anchor
 * token followed by mask tokens at the next positions, bidirectional inside the block; each block
 * query also sees every context row before its anchor. The frozen target head gives base logits U.
 *   DFlash:        q_k = softmax(U_k); trained with CE.
 *   DSpark-Markov: z_k = U_k + W2 W1[x_{k-1}], drafted left to right; confidence head
 *                  c_k = sigmoid(w . [h_k; W1[x_{k-1}]] + b); loss 0.1 CE + 0.9 L1 + 1.0 BCE.
 *   DSpark-RNN:    s_k = sig(g) s_{k-1} + (1 - sig(g)) tanh(c), b_k = W2 tanh(o) from
 *                  [s_{k-1}; W1[x_{k-1}]; h_k].
 * anchor_first = 1 (DSpark, DeepSpec's DFlash): the anchor row is the first prediction row, B = gamma.
 * anchor_first = 0 (z-lab DFlash): only mask rows predict, B = gamma + 1. */
#ifndef DS_BLOCKDRAFT_H
#define DS_BLOCKDRAFT_H

#include <cJSON.h>

#include "../datasets/traindata.h"
#include "../runtime/model/model.h"
#include "contract.h"
#include "subvocab.h"
#include "trainable.h"

typedef enum { HEAD_NONE = 0, HEAD_MARKOV = 1, HEAD_RNN = 2 } bd_head;

typedef struct {
    char kind[32];         /* "dflash", "dspark-markov", "dspark-rnn" */
    int dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, vocab;
    int n_tap, tap[8];     /* target layers the context comes from */
    int gamma;             /* drafts per block */
    int anchor_first;
    bd_head head;
    int rank;              /* Markov / RNN rank r */
    int conf;              /* confidence head */
    int mask_token;        /* a vocabulary slot the data never uses; its embedding is frozen */
    float eps, rope_theta;
    float w_ce, w_l1, w_bce, lambda; /* loss weights; position decay exp(-(k-1)/lambda) */
    draft_contract contract; /* target, tokenizer, template, draft vocabulary (FR-Spec style), calibration */
    int n_init;            /* draft layer l starts as a copy of target layer init_layer[l] (0 = random) */
    int init_layer[16];
} bd_config;

/* Defaults for a target and a family; JSON fields (layers, rank, gamma, anchor_first, lambda,
 * mask_token, ...) override them. */
int bd_config_init(bd_config *c, const model *target, const char *kind, const cJSON *j);
cJSON *bd_config_json(const bd_config *c);
int bd_config_from_json(bd_config *c, const cJSON *j, const char *what);
int bd_rows(const bd_config *c);   /* rows per block */

/* One parameter tensor: name, shape, place in the flat array. */
typedef struct {
    char name[48];
    int n_dims;
    int64_t shape[2];
    size_t offset, numel;
} bd_tensor;

/* Parameter views and the activation workspace of the training step, for float (training) and
 * double (the finite-difference check): llm.c's named structs, filled once. */
#define BD_MAX_LAYERS 64
#define BD_TRAIN_TYPES(REAL, SFX)                                                                                  \
    typedef struct {                                                                                              \
        REAL *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;                                \
    } bd_layer_pv##SFX;                                                                                             \
    typedef struct {                                                                                              \
        REAL *fc, *hidden_norm, *final_norm, *W1, *W2, *Wr, *br, *wc, *bc;                                      \
        bd_layer_pv##SFX layer[BD_MAX_LAYERS];                                                                      \
    } bd_pv##SFX;                                                                                                   \
    typedef struct {                                                                                              \
        REAL *x_in, *xn, *rstd1, *q, *kb, *vb, *kc, *vc, *prob, *att, *x_mid, *xn2, *rstd2, *g, *u, *hm;        \
    } layer_acts##SFX;                                                                                              \
    typedef struct {                                                                                              \
        char *arena;                                                                                              \
        size_t cap;                                                                                               \
        int profile;              /* accumulate seconds per section into prof[] (BD_PROF_*) */                   \
        int loop_attention;       /* the reference attention loops instead of the GEMM attention */             \
        double prof[16], t_mark;                                                                                  \
        layer_acts##SFX *la;                                                                                        \
        REAL *fc_out, *c_rstd, *C, *x, *hF, *rstdF, *hP, *Z, *Tp, *tf, *tk_p, *E1, *bias, *S, *O, *RI, *RP, *sp; \
        REAL *hk, *cin, *clog, *scr, *scr2, *dZ, *dcl, *dhP, *dE1, *dcin, *dO, *dS, *dsp, *dhk, *dhF, *dx, *dC;   \
        REAL *dxm, *dxn, *dhm, *dg, *du, *dq, *dkb, *dvb, *dkc, *dvc, *datt, *dfc, *dprob;                       \
        double *alpha_prod;                                                                                       \
        int *tk_sub, *pos_b, *pos_c, *ctx_len, *lo, *hi, *rows, *prev, *pred, *label, *kof, *tpos, *off, *last;  \
    } bd_ws##SFX;
enum { BD_PROF_CONTEXT, BD_PROF_LAYERS, BD_PROF_ATTN, BD_PROF_TARGET, BD_PROF_HEAD, BD_PROF_MARKOV, BD_PROF_LOSS,
       BD_PROF_MARKOV_BWD, BD_PROF_HEAD_BWD, BD_PROF_LAYERS_BWD, BD_PROF_ATTN_BWD, BD_PROF_CONTEXT_BWD, BD_PROF_N };
extern const char *const bd_prof_names[BD_PROF_N];
BD_TRAIN_TYPES(float, _f)
BD_TRAIN_TYPES(double, _d)

typedef struct {
    bd_config cfg;
    bd_tensor *t;
    int n_t;
    size_t n_params;
    float *params;         /* one allocation, carved by the table (llm.c style) */
    /* views into params */
    float *fc, *hidden_norm, *final_norm, *W1, *W2, *Wr, *br, *wc, *bc;
    struct bd_layer {
        float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
    } * layer;
    /* frozen, shared with the target */
    const float *E;        /* [vocab][dim] fp32 copy of the target's embedding/head */
    float *E_owned;
    /* the draft vocabulary (subvocab.h): Vd = sv.Vd rows of the head (Eh); with the full
     * vocabulary Vd = vocab, Eh = E, sv.vid = sv.vmap = NULL */
    int Vd;
    subvocab sv;
    const float *Eh;
    float *Eh_owned;
    /* the training step's named views and workspace (allocated once, grown on demand) */
    bd_pv_f pv;
    bd_ws_f ws;
    train_tensor *tt;      /* the table for the trainer */
} bd_model;

/* Random init (seeded). The Markov/RNN output and the confidence head start at zero (no correction,
 * c = 1/2); zero_noise > 0 draws them from N(0, zero_noise^2) instead (an untrained but
 * non-trivial head, for tests and the losslessness gate). With init_layers, draft layer l's norms
 * and matrices then become target layer init_layer[l]'s (dequantized) and the final norm the
 * target's output norm (the draft layers share the target's geometry). */
int bd_model_init(bd_model *m, const bd_config *c, const model *target, uint64_t seed, float zero_noise);
/* the same with a draft vocabulary: ids[0..c->contract.draft_vocab) (distinct vocabulary ids), or NULL */
int bd_model_init_vocab(bd_model *m, const bd_config *c, const model *target, uint64_t seed, float zero_noise,
                        const int *ids);
/* multiply every weight but the norms and the zero-initialised head/confidence tensors by f (the
 * gate's untrained drafters: init_std) */
void bd_model_rescale(bd_model *m, float f);
void bd_model_free(bd_model *m);
/* views for another flat array with the same layout (gradients, Adam moments) */
void bd_views(const bd_model *m, float *base, float **out /* per tensor */);
int bd_save(const bd_model *m, const char *dir);  /* model.safetensors + config.json, atomically */
int bd_load(bd_model *m, const char *dir, const model *target);
/* read a checkpoint's parameters into an existing model of the same layout */
int bd_read_params(bd_model *m, const char *dir);

/* ------------------------------------------------------------------------------ training */

typedef train_seq bd_seq;
typedef train_seq_d bd_seq_d;
typedef train_stats bd_stats;

/* Forward (and, with grad != NULL, backward) of one sequence through a model's own workspace; adds
 * into grad (flat, the table's layout) scaled by 1/norm (the batch's total position weight, so a
 * batch's terms are weighted means). Returns 0 or -1. */
int bd_train_seq(bd_model *m, const bd_seq *s, float *grad, double norm, bd_stats *st);
/* the model as the trainer sees it (tr points into m; valid while m lives) */
int bd_trainable(bd_model *m, trainable *tr);
/* the families' training for `train` (train_family.h) */
extern const struct train_family bd_train_family;
/* a fresh model to train on d: its draft vocabulary chosen from d unless full_vocab (bench-train's
 * reference path); with a checkpoint in resume_dir (may be NULL), that checkpoint's model */
int bd_train_new(const bd_config *c, const target *t, const train_cache *d, int full_vocab, uint64_t seed,
                 const char *resume_dir, bd_model *m);
/* the position weights of a sequence's supervised rows, for the batch normaliser */
double bd_seq_weight(const bd_config *c, int A, const int *n_valid);

/* The same step compiled in double on a double copy of the parameters (same table layout), of the
 * frozen embedding E [vocab][dim] and of the draft head Eh [Vd][dim] (vmap: vocabulary id -> draft
 * row or -1; NULL when Vd = vocab): the model-level finite-difference check. */
int bd_train_seq_d(const bd_config *c, const bd_tensor *tab, const double *params, const double *E, const double *Eh,
                   int Vd, const int *vmap, const bd_seq_d *s, double *grad, double norm, bd_stats *st);

#endif
