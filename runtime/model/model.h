/* model.h — transformer configuration and weights (Llama family, Qwen2 and Qwen3), loaded from GGUF or
 * from safetensors + HF config.json.
 *
 * Weight matrices stay in their file format (a GGUF Q4_1 matrix is used as Q4_1: the backend
 * repacks it for its kernels); norms are always fp32. */
#ifndef DS_MODEL_H
#define DS_MODEL_H

#include <stdint.h>

#include "../formats/gguf.h"
#include "../formats/quant.h"
#include "../formats/safetensors.h"

/* qwen2 = the Llama block + F32 biases on the Q, K and V projections, NEOX RoPE, untied head */
typedef enum { ARCH_LLAMA = 0, ARCH_QWEN3 = 1, ARCH_QWEN2 = 2 } model_arch;

typedef struct {
    model_arch arch;
    int dim;          /* residual width */
    int n_layers;
    int n_heads, n_kv_heads, head_dim;
    int hidden_dim;   /* SwiGLU width */
    int vocab_size;
    int max_seq;      /* context length from the file */
    float norm_eps;
    float rope_theta;
    float rope_scale; /* linear position scaling factor (1 = none) */
    int rope_neox;    /* 1: rotate halves (HF layout); 0: rotate adjacent pairs (GGUF llama layout) */
    int tied;         /* LM head is the token embedding */
} model_config;

typedef struct {
    float *attn_norm, *ffn_norm; /* [dim] */
    float *q_norm, *k_norm;      /* [head_dim], Qwen3 only */
    float *bq, *bk, *bv;         /* [n_heads*hd], [n_kv*hd], [n_kv*hd]: Qwen2 only (added before RoPE) */
    qmat wq, wk, wv, wo;         /* [n_heads*hd][dim], [n_kv*hd][dim], [n_kv*hd][dim], [dim][n_heads*hd] */
    qmat w_gate, w_up, w_down;   /* [hidden][dim], [hidden][dim], [dim][hidden] */
} layer_weights;

typedef struct model {
    model_config cfg;
    qmat tok_embd;               /* [vocab][dim] */
    qmat output;                 /* [vocab][dim]; aliases tok_embd when tied */
    float *out_norm;             /* [dim] */
    float *rope_freqs;           /* [head_dim/2] frequency divisors, or NULL */
    layer_weights *layers;
    char *path;
    char fingerprint[17];        /* 64-bit FNV-1a of the file's header region and size, hex */
    int format;                  /* 0 = GGUF, 1 = safetensors */
    gguf_file gguf;
    st_file st;
    void **owned;                /* buffers converted at load, freed with the model */
    int n_owned;
    uint8_t *taken;              /* while a GGUF loads: 1 for each of its tensors the loader took */
} model;

/* Load by path: a .gguf file, or a directory (or its model.safetensors) holding config.json; or by a
 * registered name (models.h: smollm2-135m, qwen2.5-coder-1.5b, ...), resolved to its file in the cache
 * and printed on stderr. On failure *m is left empty (model_free on it is a no-op). */
int model_load(model *m, const char *name_or_path);
int model_load_gguf(model *m, const char *path);
int model_load_safetensors(model *m, const char *dir);
/* -1 with a message naming the tensor, layer and index of the first NaN/Inf weight (model_load
 * runs it; the format-specific loaders do not) */
int model_check_finite(const model *m);
void model_free(model *m);
/* A backend that holds its own copy of the bytes [p, p + n) of m's file hands their pages back (they stay
 * readable: the file's read-only mapping faults them in again when touched). Bytes released; 0 for a
 * model parsed from a buffer, or a range outside its file. */
size_t model_release_mapped(const model *m, const void *p, size_t n);
const char *model_arch_name(model_arch a);
uint64_t model_n_params(const model *m);

/* Decode one row of a weight matrix (or the embedding table) into fp32. */
void qmat_row_f32(const qmat *w, int row, float *dst);
/* The whole matrix into fp32, [rows][cols] (a trainable copy of a frozen or initial weight). */
void qmat_to_f32(const qmat *w, float *dst);
/* a layer as fp32 into dst[9], in the order attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down
 * (a drafter's trainable layer that starts as a target layer; dim: the norms' length) */
void layer_to_f32(const layer_weights *l, int dim, float *const dst[9]);

#endif
