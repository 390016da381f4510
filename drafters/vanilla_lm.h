/* vanilla_lm.h — the distilled small LM behind `vanilla` {"checkpoint": DIR} (drafters-reference §7).
 *
 * A causal LM of its own: n_layers pre-norm transformer blocks (mtp.h's block in its trainable form)
 * at the target's residual width and attention geometry, its own FFN width, its own final norm; it
 * reads the target's frozen token embedding and drafts through the target's frozen head (or that
 * head's draft-vocabulary rows). Sharing the embedding and head is what makes a few layers enough:
 * the LM learns only the map from token context to the target's last state. Layers start as copies
 * of the target's first n_layers (where the FFN width matches), the final norm as the target's, so
 * step 0 is the self-draft of those layers.
 *
 * A Qwen2 target's layers come with their q/k/v biases and half-rotation RoPE: the LM keeps both
 * (the training ops rotate either pair layout), so its layers stay the target's convention.
 *
 * Training is distillation on the training cache through the shared loop: teacher forcing over the
 * sequence's own tokens (row i reads t_0..t_i and predicts t_{i+1}), CE on the data token plus L1
 * against the target's cached top-K law, at `depth` consecutive positions after each sampled anchor
 * (anchor a, position k predicts t_{a+k} from row a+k-1), each weight 1. For an autoregressive drafter
 * teacher forcing is exactly what drafting sees while its drafts are accepted, so the product of the
 * positions' alphas is a chain's acceptance proxy. The target's states are not read (no taps).
 *
 * Served as a model on the backend (drafters/vanilla.c): its layers quantized (block_precision, Q8_0
 * where the widths allow) and run by the target runtime's forward with its own KV cache; the final
 * normed state goes through the head's draft rows. */
#ifndef DS_VANILLA_LM_H
#define DS_VANILLA_LM_H

#include "../runtime/model/model.h"
#include "mtp.h"
#include "subvocab.h"
#include "trainable.h"

#define VLM_MAX_LAYERS 16
#define VLM_PER_LAYER 12 /* attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down; bq, bk, bv (Qwen2) */
#define VLM_MAX_TENSORS (VLM_MAX_LAYERS * VLM_PER_LAYER + 1)

typedef struct {
    mtp_config c;    /* kind "vanilla": the block geometry, depth, draft vocabulary, loss weights, the
                      * train/serve contract and calibration (no taps) */
    int n_layers;
    int init_layers; /* 1: the layers started as the target's first n_layers */
    int qkv_bias;    /* the q/k/v projections have biases (as the target's layers: Qwen2) */
} vlm_config;

/* one training sequence's buffers: the shared workspace (its step[l] is layer l's pass) and each
 * layer's K/V rows with their gradients */
#define VLM_WS_TYPE(REAL, SFX)                                                                            \
    typedef struct {                                                                                      \
        mtp_ws##SFX base;                                                                                 \
        size_t cap;                                                                                       \
        REAL *K[VLM_MAX_LAYERS], *V[VLM_MAX_LAYERS], *dK[VLM_MAX_LAYERS], *dV[VLM_MAX_LAYERS];            \
    } vlm_ws##SFX;
VLM_WS_TYPE(float, _f)
VLM_WS_TYPE(double, _d)

typedef struct {
    vlm_config cfg;
    size_t n_params;
    float *params;               /* one allocation, laid out by tt */
    int n_t, per_layer;          /* tensors in all, and a layer's (9, or 12 with the biases) */
    train_tensor tt[VLM_MAX_TENSORS];
    char names[VLM_MAX_TENSORS][40];
    mtp_pv_f lay[VLM_MAX_LAYERS]; /* each layer's block view (the other fields NULL) */
    float *final_norm;
    float *Ein, *E;              /* training only: the frozen embedding, the head's draft rows (fp32) */
    subvocab sv;
    vlm_ws_f ws;
} vlm_model;

/* Defaults for a target (2 layers, depth 4, the target's FFN width, layers from the target, q/k/v
 * biases where it has them), JSON fields override them; unknown keys are refused. -1 with a message
 * when the target's layers cannot be trained by these ops (q/k norms, scaled or custom RoPE
 * frequencies). */
int vlm_config_init(vlm_config *c, const model *target, const cJSON *j);
/* the checks vlm_config_init ends with, for a config set field by field (the untrained LM's) */
int vlm_config_check(vlm_config *c, const model *target);
cJSON *vlm_config_json(const vlm_config *c);
int vlm_model_init(vlm_model *m, const vlm_config *c, const model *target, uint64_t seed, int with_embed, const int *ids);
int vlm_load(vlm_model *m, const char *dir, const model *target, int with_embed);
int vlm_save(const vlm_model *m, const char *dir);
int vlm_read_params(vlm_model *m, const char *dir);
void vlm_model_free(vlm_model *m);
int vlm_trainable(vlm_model *m, trainable *tr);
/* the distilled LM's training for `train` (train_family.h) */
extern const struct train_family vlm_train_family;
/* views of a flat parameter (or gradient) array laid out as m's: the layers' blocks and the final norm */
void vlm_views_f(const vlm_model *m, float *base, mtp_pv_f *lay, float **final_norm);
void vlm_views_d(const vlm_model *m, double *base, mtp_pv_d *lay, double **final_norm);

/* One sequence, forward (and backward into the G views when G is not NULL), scaled by 1/norm_w. */
int vlm_step_f(const vlm_config *c, const mtp_pv_f *P, const float *fnorm, const mtp_pv_f *G, float *dfnorm,
               const float *Ein, const float *E, int Vd, const int *vmap, const train_seq *s, double norm_w,
               train_stats *st, vlm_ws_f *w);
int vlm_step_d(const vlm_config *c, const mtp_pv_d *P, const double *fnorm, const mtp_pv_d *G, double *dfnorm,
               const double *Ein, const double *E, int Vd, const int *vmap, const train_seq_d *s, double norm_w,
               train_stats *st, vlm_ws_d *w);
void vlm_ws_free_f(vlm_ws_f *w);
void vlm_ws_free_d(vlm_ws_d *w);

#endif
