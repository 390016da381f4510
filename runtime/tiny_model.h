/* tiny_model.h — random Llama / Qwen2 / Qwen3 models small enough to build in memory: the forward tests,
 * the training tests and the losslessness gate's model-backed worlds use them. */
#ifndef DS_TINY_MODEL_H
#define DS_TINY_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, hidden, vocab;
    uint32_t mat_type;   /* GGML_F32, Q4_1, Q8_0, Q5_0, Q4_K or Q6_K for the layer matrices (K types: dim and
                          * hidden multiples of 256) */
    uint32_t emb_type;
    int family;          /* 0 llama; 1 qwen3 (per-head q/k norms); 2 qwen2 (q/k/v biases, an untied head) */
    float rope_base;
    float emb_scale;     /* std of the (tied) embedding; 0: 0.5. Smaller: flatter output laws */
    int norm_f16;        /* 1: the norm vectors stored as F16 (the loader's conversion path), else F32 */
    float rope_linear;   /* > 0: RoPE scaling "linear" with this factor (positions divided by it) */
    int rope_freqs;      /* 1: Llama-3-style frequency factors (rope_freqs.weight, 1 + i / 4 for pair i) */
} tiny_spec;

/* the GGUF image (no tokenizer) of a random model; NULL with a message */
uint8_t *tiny_model_gguf(const tiny_spec *s, uint64_t seed, size_t *size);
int tiny_model_write(const char *path, const tiny_spec *s, uint64_t seed);


#endif
