#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/quant.h"
#include "sampling.h"

/* n values from N(0, scale^2) (Box-Muller) */
void randn_fill(rng_t *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = rng_uniform_pos(r), u2 = rng_uniform(r), rad = sqrt(-2 * log(u1));
        x[i] = (float)(rad * cos(2 * M_PI * u2)) * scale;
        if (i + 1 < n) x[i + 1] = (float)(rad * sin(2 * M_PI * u2)) * scale;
    }
}

static void put_mat(gguf_writer *g, const char *name, uint32_t type, int cols, int rows, const float *w) {
    int64_t ne[2] = {cols, rows};
    size_t n = (size_t)cols * rows;
    if (type == GGML_F32) {
        gw_tensor(g, name, type, 2, ne, w, n * 4);
        return;
    }
    const ggml_type_info *ti = ggml_type_get(type);
    size_t bytes = n / (size_t)ti->blck * (size_t)ti->size;
    void *b = malloc(bytes);
    if (!b) return; /* gw_finish reports the writer's state; the caller's load then fails */
    switch (type) {
    case GGML_Q4_1: quantize_q4_1(w, b, (int64_t)n); break;
    case GGML_Q5_0: quantize_q5_0(w, b, (int64_t)n); break;
    case GGML_Q4_K: quantize_q4_k(w, b, (int64_t)n); break;
    case GGML_Q6_K: quantize_q6_k(w, b, (int64_t)n); break;
    default: quantize_q8_0(w, b, (int64_t)n); break;
    }
    gw_tensor(g, name, type, 2, ne, b, bytes);
    free(b);
}

/* a norm vector of n weights, F32 or rounded to F16 */
static void put_vec(gguf_writer *g, const char *name, int n, const float *w, int f16) {
    int64_t ne[1] = {n};
    if (!f16) {
        gw_tensor(g, name, GGML_F32, 1, ne, w, (size_t)n * 4);
        return;
    }
    ds_f16 *h = malloc(sizeof(ds_f16) * (size_t)n);
    if (!h) return; /* as put_mat */
    for (int i = 0; i < n; i++) h[i] = ds_f32_to_f16(w[i]);
    gw_tensor(g, name, GGML_F16, 1, ne, h, (size_t)n * 2);
    free(h);
}

/* A random Llama (or Qwen3) GGUF with no tokenizer, in memory. */
uint8_t *tiny_model_gguf(const tiny_spec *s, uint64_t seed, size_t *size) {
    rng_t r;
    rng_seed(&r, seed);
    gguf_writer g;
    gw_init(&g);
    const char *arch = s->family == 1 ? "qwen3" : s->family == 2 ? "qwen2" : "llama";
    char k[128];
    int hd = s->dim / s->n_heads, q = s->n_heads * hd, kv = s->n_kv_heads * hd;
    gw_kv_str(&g, "general.architecture", arch);
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", arch, x), k)
    gw_kv_u32(&g, KEY("embedding_length"), (uint32_t)s->dim);
    gw_kv_u32(&g, KEY("block_count"), (uint32_t)s->n_layers);
    gw_kv_u32(&g, KEY("attention.head_count"), (uint32_t)s->n_heads);
    gw_kv_u32(&g, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    gw_kv_u32(&g, KEY("feed_forward_length"), (uint32_t)s->hidden);
    gw_kv_u32(&g, KEY("context_length"), 512);
    gw_kv_f32(&g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    gw_kv_f32(&g, KEY("rope.freq_base"), s->rope_base > 0 ? s->rope_base : 10000.0f);
    if (s->rope_linear > 0) {
        gw_kv_str(&g, KEY("rope.scaling.type"), "linear");
        gw_kv_f32(&g, KEY("rope.scaling.factor"), s->rope_linear);
    }
#undef KEY
    size_t big = (size_t)DS_MAX(s->vocab, s->hidden) * (size_t)DS_MAX(s->dim, s->hidden);
    float *w = malloc(sizeof(float) * big);
    if (!w) {
        ds_error("out of memory building a tiny model");
        gw_free(&g);
        return NULL;
    }
    randn_fill(&r, w, (size_t)s->vocab * s->dim, s->emb_scale > 0 ? s->emb_scale : 0.5f);
    put_mat(&g, "token_embd.weight", s->emb_type, s->dim, s->vocab, w);
    for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
    put_vec(&g, "output_norm.weight", s->dim, w, s->norm_f16);
    if (s->rope_freqs) {
        for (int i = 0; i < hd / 2; i++) w[i] = 1.0f + (float)i / 4;
        put_vec(&g, "rope_freqs.weight", hd / 2, w, 0);
    }
    for (int l = 0; l < s->n_layers; l++) {
        char n[96];
#define NM(x) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, x), n)
        float sc = 1.0f / sqrtf((float)s->dim);
        for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
        put_vec(&g, NM("attn_norm"), s->dim, w, s->norm_f16);
        for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
        put_vec(&g, NM("ffn_norm"), s->dim, w, s->norm_f16);
        randn_fill(&r, w, (size_t)q * s->dim, sc);
        put_mat(&g, NM("attn_q"), s->mat_type, s->dim, q, w);
        randn_fill(&r, w, (size_t)kv * s->dim, sc);
        put_mat(&g, NM("attn_k"), s->mat_type, s->dim, kv, w);
        randn_fill(&r, w, (size_t)kv * s->dim, sc);
        put_mat(&g, NM("attn_v"), s->mat_type, s->dim, kv, w);
        randn_fill(&r, w, (size_t)s->dim * q, sc);
        put_mat(&g, NM("attn_output"), s->mat_type, q, s->dim, w);
        randn_fill(&r, w, (size_t)s->hidden * s->dim, sc);
        put_mat(&g, NM("ffn_gate"), s->mat_type, s->dim, s->hidden, w);
        randn_fill(&r, w, (size_t)s->hidden * s->dim, sc);
        put_mat(&g, NM("ffn_up"), s->mat_type, s->dim, s->hidden, w);
        randn_fill(&r, w, (size_t)s->dim * s->hidden, 1.0f / sqrtf((float)s->hidden));
        put_mat(&g, NM("ffn_down"), s->mat_type, s->hidden, s->dim, w);
        if (s->family == 2) { /* biases large enough that a forward without them is far off */
            char b[96];
            int64_t neq[1] = {q}, nek[1] = {kv};
            randn_fill(&r, w, (size_t)q, 0.5f);
            snprintf(b, sizeof b, "blk.%d.attn_q.bias", l);
            gw_tensor(&g, b, GGML_F32, 1, neq, w, (size_t)q * 4);
            randn_fill(&r, w, (size_t)kv, 0.5f);
            snprintf(b, sizeof b, "blk.%d.attn_k.bias", l);
            gw_tensor(&g, b, GGML_F32, 1, nek, w, (size_t)kv * 4);
            randn_fill(&r, w, (size_t)kv, 0.5f);
            snprintf(b, sizeof b, "blk.%d.attn_v.bias", l);
            gw_tensor(&g, b, GGML_F32, 1, nek, w, (size_t)kv * 4);
        }
        if (s->family == 1) {
            for (int i = 0; i < hd; i++) w[i] = 1.0f + 0.2f * (float)(rng_uniform(&r) - 0.5);
            put_vec(&g, NM("attn_q_norm"), hd, w, s->norm_f16);
            for (int i = 0; i < hd; i++) w[i] = 1.0f + 0.2f * (float)(rng_uniform(&r) - 0.5);
            put_vec(&g, NM("attn_k_norm"), hd, w, s->norm_f16);
        }
#undef NM
    }
    if (s->family == 2) { /* qwen2's head is its own matrix */
        randn_fill(&r, w, (size_t)s->vocab * s->dim, s->emb_scale > 0 ? s->emb_scale : 0.5f);
        put_mat(&g, "output.weight", s->emb_type, s->dim, s->vocab, w);
    }
    free(w);
    uint8_t *img = gw_finish(&g, size);
    gw_free(&g);
    return img;
}


int tiny_model_write(const char *path, const tiny_spec *s, uint64_t seed) {
    size_t n;
    uint8_t *img = tiny_model_gguf(s, seed, &n);
    if (!img) return -1;
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(img, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(img);
    if (!ok) ds_error("%s: cannot write the tiny model", path);
    return ok ? 0 : -1;
}
