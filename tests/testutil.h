/* testutil.h — shared by the CMocka suites: an in-memory GGUF writer, small quantizers for building
 * valid blocks, a tiny random Llama model, and the location of the real model and fixtures.
 * Header-only (static functions) so every suite is one .c file. */
#ifndef DS_TESTUTIL_H
#define DS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka 1.1.5 needs the four headers above first */
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "../runtime/gguf.h"
#include "../runtime/quant.h"
#include "../runtime/sampling.h"
#include "../runtime/target.h"

/* every helper is static; not every suite uses all of them */
#pragma GCC diagnostic ignored "-Wunused-function"

/* ------------------------------------------------------------------------------ byte buffers */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} tbuf;

static void tb_put(tbuf *t, const void *p, size_t n) {
    if (t->n + n > t->cap) {
        t->cap = (t->n + n) * 2 + 64;
        t->b = realloc(t->b, t->cap);
        assert_non_null(t->b);
    }
    if (n) memcpy(t->b + t->n, p, n);
    t->n += n;
}
static void tb_u32(tbuf *t, uint32_t v) { tb_put(t, &v, 4); }
static void tb_u64(tbuf *t, uint64_t v) { tb_put(t, &v, 8); }
static void tb_str(tbuf *t, const char *s) {
    tb_u64(t, strlen(s));
    tb_put(t, s, strlen(s));
}

/* ------------------------------------------------------------------------------- GGUF writer */

typedef struct {
    tbuf kv;          /* serialized key/value pairs */
    uint64_t n_kv;
    tbuf info;        /* serialized tensor infos (offsets patched in gb_finish) */
    tbuf data;        /* tensor data, each padded to the alignment */
    uint64_t n_tensors;
    uint32_t alignment;
} gguf_builder;

static void gb_init(gguf_builder *g) {
    memset(g, 0, sizeof *g);
    g->alignment = 32;
}
static void gb_free(gguf_builder *g) {
    free(g->kv.b);
    free(g->info.b);
    free(g->data.b);
}
static void gb_key(gguf_builder *g, const char *key, uint32_t type) {
    tb_str(&g->kv, key);
    tb_u32(&g->kv, type);
    g->n_kv++;
}
static void gb_u32(gguf_builder *g, const char *key, uint32_t v) { gb_key(g, key, GGUF_U32); tb_u32(&g->kv, v); }
static void gb_i32(gguf_builder *g, const char *key, int32_t v) { gb_key(g, key, GGUF_I32); tb_put(&g->kv, &v, 4); }
static void gb_f32(gguf_builder *g, const char *key, float v) { gb_key(g, key, GGUF_F32); tb_put(&g->kv, &v, 4); }
static void gb_bool(gguf_builder *g, const char *key, int v) {
    uint8_t b = (uint8_t)v;
    gb_key(g, key, GGUF_BOOL);
    tb_put(&g->kv, &b, 1);
}
static void gb_str(gguf_builder *g, const char *key, const char *v) { gb_key(g, key, GGUF_STRING); tb_str(&g->kv, v); }
static void gb_arr_str(gguf_builder *g, const char *key, const char *const *v, int n) {
    gb_key(g, key, GGUF_ARRAY);
    tb_u32(&g->kv, GGUF_STRING);
    tb_u64(&g->kv, (uint64_t)n);
    for (int i = 0; i < n; i++) tb_str(&g->kv, v[i]);
}
static void gb_arr_i32(gguf_builder *g, const char *key, const int32_t *v, int n) {
    gb_key(g, key, GGUF_ARRAY);
    tb_u32(&g->kv, GGUF_I32);
    tb_u64(&g->kv, (uint64_t)n);
    tb_put(&g->kv, v, 4 * (size_t)n);
}
/* Add a tensor: ne[0] innermost. bytes = the encoded data of the given ggml type. */
static void gb_tensor(gguf_builder *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *bytes,
                      size_t nbytes) {
    tb_str(&g->info, name);
    tb_u32(&g->info, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) tb_u64(&g->info, (uint64_t)ne[d]);
    tb_u32(&g->info, type);
    tb_u64(&g->info, g->data.n); /* offset: running sum of padded sizes */
    tb_put(&g->data, bytes, nbytes);
    while (g->data.n % g->alignment) tb_put(&g->data, "\0", 1);
    g->n_tensors++;
}
/* The whole file image (caller frees). */
static uint8_t *gb_finish(gguf_builder *g, size_t *size) {
    tbuf out = {0};
    tb_put(&out, "GGUF", 4);
    tb_u32(&out, 3);
    tb_u64(&out, g->n_tensors);
    tb_u64(&out, g->n_kv);
    tb_put(&out, g->kv.b, g->kv.n);
    tb_put(&out, g->info.b, g->info.n);
    while (out.n % g->alignment) tb_put(&out, "\0", 1);
    tb_put(&out, g->data.b, g->data.n);
    *size = out.n;
    return out.b;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* --------------------------------------------------------------------- block quantizers (tests) */

/* Q4_1 with per-block min/max; Q8_0 with absmax. Only need to produce valid blocks. */
static void quant_q4_1(const float *x, block_q4_1 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *v = x + 32 * i;
        float mn = v[0], mx = v[0];
        for (int j = 1; j < 32; j++) {
            mn = fminf(mn, v[j]);
            mx = fmaxf(mx, v[j]);
        }
        float d = (mx - mn) / 15.0f, id = d > 0 ? 1.0f / d : 0.0f;
        b[i].d = ds_f32_to_f16(d);
        b[i].m = ds_f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            int lo = (int)lroundf((v[j] - mn) * id), hi = (int)lroundf((v[j + 16] - mn) * id);
            lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
            hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
            b[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}
static void quant_q8_0(const float *x, block_q8_0 *b, int64_t n) {
    for (int64_t i = 0; i < n / 32; i++) {
        const float *v = x + 32 * i;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        b[i].d = ds_f32_to_f16(d);
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)lroundf(v[j] * id);
    }
}

/* ----------------------------------------------------------------------------- tiny model */

typedef struct {
    int dim, n_layers, n_heads, n_kv_heads, hidden, vocab;
    uint32_t mat_type;   /* GGML_F32, GGML_Q4_1 or GGML_Q8_0 for the layer matrices */
    uint32_t emb_type;
    int qwen3;           /* per-head q/k norms */
    float rope_base;
} tiny_spec;

static void randn_fill(rng_t *r, float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = rng_uniform_pos(r), u2 = rng_uniform(r), rad = sqrt(-2 * log(u1));
        x[i] = (float)(rad * cos(2 * M_PI * u2)) * scale;
        if (i + 1 < n) x[i + 1] = (float)(rad * sin(2 * M_PI * u2)) * scale;
    }
}

static void gb_mat(gguf_builder *g, const char *name, uint32_t type, int cols, int rows, const float *w) {
    int64_t ne[2] = {cols, rows};
    size_t n = (size_t)cols * rows;
    if (type == GGML_F32) {
        gb_tensor(g, name, type, 2, ne, w, n * 4);
    } else if (type == GGML_Q4_1) {
        block_q4_1 *b = malloc(sizeof *b * n / 32);
        quant_q4_1(w, b, (int64_t)n);
        gb_tensor(g, name, type, 2, ne, b, sizeof *b * n / 32);
        free(b);
    } else {
        block_q8_0 *b = malloc(sizeof *b * n / 32);
        quant_q8_0(w, b, (int64_t)n);
        gb_tensor(g, name, type, 2, ne, b, sizeof *b * n / 32);
        free(b);
    }
}

/* A random Llama (or Qwen3) GGUF with no tokenizer, in memory. */
static uint8_t *tiny_model_gguf(const tiny_spec *s, uint64_t seed, size_t *size) {
    rng_t r;
    rng_seed(&r, seed);
    gguf_builder g;
    gb_init(&g);
    const char *arch = s->qwen3 ? "qwen3" : "llama";
    char k[128];
    int hd = s->dim / s->n_heads, q = s->n_heads * hd, kv = s->n_kv_heads * hd;
    gb_str(&g, "general.architecture", arch);
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", arch, x), k)
    gb_u32(&g, KEY("embedding_length"), (uint32_t)s->dim);
    gb_u32(&g, KEY("block_count"), (uint32_t)s->n_layers);
    gb_u32(&g, KEY("attention.head_count"), (uint32_t)s->n_heads);
    gb_u32(&g, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    gb_u32(&g, KEY("feed_forward_length"), (uint32_t)s->hidden);
    gb_u32(&g, KEY("context_length"), 512);
    gb_f32(&g, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    gb_f32(&g, KEY("rope.freq_base"), s->rope_base > 0 ? s->rope_base : 10000.0f);
#undef KEY
    size_t big = (size_t)DS_MAX(s->vocab, s->hidden) * (size_t)DS_MAX(s->dim, s->hidden);
    float *w = malloc(sizeof(float) * big);
    randn_fill(&r, w, (size_t)s->vocab * s->dim, 0.5f);
    gb_mat(&g, "token_embd.weight", s->emb_type, s->dim, s->vocab, w);
    for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
    int64_t ne1[1] = {s->dim};
    gb_tensor(&g, "output_norm.weight", GGML_F32, 1, ne1, w, (size_t)s->dim * 4);
    for (int l = 0; l < s->n_layers; l++) {
        char n[96];
#define NM(x) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, x), n)
        float sc = 1.0f / sqrtf((float)s->dim);
        for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
        gb_tensor(&g, NM("attn_norm"), GGML_F32, 1, ne1, w, (size_t)s->dim * 4);
        for (int i = 0; i < s->dim; i++) w[i] = 1.0f + 0.1f * (float)(rng_uniform(&r) - 0.5);
        gb_tensor(&g, NM("ffn_norm"), GGML_F32, 1, ne1, w, (size_t)s->dim * 4);
        randn_fill(&r, w, (size_t)q * s->dim, sc);
        gb_mat(&g, NM("attn_q"), s->mat_type, s->dim, q, w);
        randn_fill(&r, w, (size_t)kv * s->dim, sc);
        gb_mat(&g, NM("attn_k"), s->mat_type, s->dim, kv, w);
        randn_fill(&r, w, (size_t)kv * s->dim, sc);
        gb_mat(&g, NM("attn_v"), s->mat_type, s->dim, kv, w);
        randn_fill(&r, w, (size_t)s->dim * q, sc);
        gb_mat(&g, NM("attn_output"), s->mat_type, q, s->dim, w);
        randn_fill(&r, w, (size_t)s->hidden * s->dim, sc);
        gb_mat(&g, NM("ffn_gate"), s->mat_type, s->dim, s->hidden, w);
        randn_fill(&r, w, (size_t)s->hidden * s->dim, sc);
        gb_mat(&g, NM("ffn_up"), s->mat_type, s->dim, s->hidden, w);
        randn_fill(&r, w, (size_t)s->dim * s->hidden, 1.0f / sqrtf((float)s->hidden));
        gb_mat(&g, NM("ffn_down"), s->mat_type, s->hidden, s->dim, w);
        if (s->qwen3) {
            int64_t neh[1] = {hd};
            for (int i = 0; i < hd; i++) w[i] = 1.0f + 0.2f * (float)(rng_uniform(&r) - 0.5);
            gb_tensor(&g, NM("attn_q_norm"), GGML_F32, 1, neh, w, (size_t)hd * 4);
            for (int i = 0; i < hd; i++) w[i] = 1.0f + 0.2f * (float)(rng_uniform(&r) - 0.5);
            gb_tensor(&g, NM("attn_k_norm"), GGML_F32, 1, neh, w, (size_t)hd * 4);
        }
#undef NM
    }
    free(w);
    uint8_t *img = gb_finish(&g, size);
    gb_free(&g);
    return img;
}

/* A temp file path unique to this process. */
static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k = 0;
    char *p = buf[k++ % 8];
    const char *dir = getenv("TMPDIR");
    snprintf(p, 512, "%s/dsb-%d-%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
    return p;
}

/* The real model and fixtures: the real-model suites fail (not skip) when the model is missing,
 * because `make test` fetches it first; DSPARK_SKIP_REAL_MODEL=1 skips them explicitly. */
static const char *real_model_path(void) { return target_default_path(); }
static int need_real_model(void) {
    const char *skip = getenv("DSPARK_SKIP_REAL_MODEL");
    if (skip && *skip == '1') return 0;
    struct stat st;
    if (stat(real_model_path(), &st) != 0) fail_msg("real model missing at %s (run `make model`)", real_model_path());
    return 1;
}

#define FIXTURE(name) ("tests/fixtures/" name)

/* max |a-b| over n, and where */
static float max_abs_diff(const float *a, const float *b, size_t n, size_t *where) {
    float m = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > m || d != d) {
            m = d != d ? INFINITY : d;
            w = i;
        }
    }
    if (where) *where = w;
    return m;
}

#endif
