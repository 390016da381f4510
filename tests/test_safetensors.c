/* test_safetensors — the safetensors container and HF config.json loader on checkpoints the test
 * writes itself: round trips in F32/F16/BF16, the container rules (header cap, tiling, shape x
 * dtype), truncation at every byte, and a Llama and a Qwen3 checkpoint that must give the same
 * logits as the same weights written as GGUF (which checks both RoPE layouts against each other). */
#include "testutil.h"

#include "../runtime/backends/backend.h"
#include "../runtime/forward.h"
#include "../runtime/model/model.h"
#include "../runtime/formats/safetensors.h"

static void test_roundtrip_dtypes(void **state) {
    (void)state;
    float a[6] = {1.0f, -2.5f, 3.14159f, 65504.0f, 1e-7f, -0.0f}, b[3] = {7, 8, 9};
    st_write_tensor t[2] = {{"w.b", b, 1, {3}}, {"w.a", a, 2, {2, 3}}};
    st_dtype types[3] = {ST_F32, ST_F16, ST_BF16};
    for (int k = 0; k < 3; k++) {
        const char *p = tmp_path("rt.safetensors");
        const char *meta[2] = {"format", "pt"};
        assert_int_equal(st_write(p, t, 2, types[k], meta, 1), 0);
        st_file f;
        if (st_open(&f, p)) fail_msg("%s", ds_errmsg());
        assert_int_equal(f.n_tensors, 2);
        const st_tensor *ta = st_find(&f, "w.a");
        assert_non_null(ta);
        assert_int_equal(ta->dtype, types[k]);
        assert_int_equal(ta->n_dims, 2);
        assert_int_equal(ta->shape[1], 3);
        float out[6];
        assert_int_equal(st_to_f32(&f, ta, out), 0);
        for (int i = 0; i < 6; i++) {
            float want = types[k] == ST_F32 ? a[i] : types[k] == ST_F16 ? ds_f16_to_f32(ds_f32_to_f16(a[i]))
                                                                       : ds_bf16_to_f32(ds_f32_to_bf16(a[i]));
            assert_memory_equal(&out[i], &want, 4);
        }
        assert_null(st_find(&f, "nope"));
        st_close(&f);
        remove(p);
    }
}

/* f16 conversion is exact on every one of the 65536 encodings (NaNs stay NaN) */
static void test_f16_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ds_f16_to_f32((ds_f16)h);
        ds_f16 back = ds_f32_to_f16(f);
        if (f != f) assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        else if (back != h) fail_msg("f16 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
    /* rounding to nearest even */
    assert_int_equal(ds_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      /* halfway: down to even */
    assert_int_equal(ds_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  /* halfway: up to even */
    assert_int_equal(ds_f32_to_f16(1e6f), 0x7c00);                 /* overflow: inf */
    assert_int_equal(ds_f32_to_f16(0x1p-25f), 0x0000);             /* halfway to the smallest: even 0 */
    assert_int_equal(ds_f32_to_f16(0x1.8p-25f), 0x0001);
}

/* ----------------------------------------------------------------------------- broken files */

static uint8_t *st_image(const char *json, size_t data_len, size_t *n) {
    size_t hl = strlen(json);
    *n = 8 + hl + data_len;
    uint8_t *p = calloc(1, *n);
    uint64_t h = hl;
    memcpy(p, &h, 8);
    memcpy(p + 8, json, hl);
    return p;
}

static void reject(const char *json, size_t data_len, const char *expect) {
    size_t n;
    uint8_t *img = st_image(json, data_len, &n);
    st_file f;
    if (st_parse(&f, img, n, "bad.safetensors") == 0) {
        st_close(&f);
        fail_msg("accepted: %s", json);
    }
    if (!strstr(ds_errmsg(), expect) || !strstr(ds_errmsg(), "bad.safetensors"))
        fail_msg("for %s: message \"%s\" lacks \"%s\"", json, ds_errmsg(), expect);
    free(img);
}

static void test_broken_files(void **state) {
    (void)state;
    reject("[1,2]", 0, "does not start with '{'");
    reject("{\"a\": ", 0, "not a valid JSON object");
    /* a second object inside the header's length was ignored (cJSON stops after the first); spaces pad */
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}{\"b\":{}}", 4, "header: text after the JSON value at byte 54");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}   x", 4, "header: text after the JSON value at byte 57");
    reject("{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype 'F99'");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "not a non-negative integer");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "not inside");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "shape x F32 needs 8");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "not inside");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap before it");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[4,8]}}",
           8, "overlaps");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, "trailing bytes");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[4,8]}}",
           8, "duplicate tensor name 'a'");
    reject("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
           "overflows");
    reject("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "no string 'dtype'");
    reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions");
    /* header length past the end / over the cap */
    uint8_t buf[16] = {0};
    uint64_t h = 1000;
    memcpy(buf, &h, 8);
    st_file f;
    assert_int_equal(st_parse(&f, buf, sizeof buf, "bad.safetensors"), -1);
    assert_non_null(strstr(ds_errmsg(), "runs past the end"));
    h = ST_MAX_HEADER + 1;
    memcpy(buf, &h, 8);
    assert_int_equal(st_parse(&f, buf, sizeof buf, "bad.safetensors"), -1);
    assert_non_null(strstr(ds_errmsg(), "100 MB"));
    assert_int_equal(st_parse(&f, buf, 5, "bad.safetensors"), -1);
    assert_non_null(strstr(ds_errmsg(), "truncated"));
    /* empty and zero-rank tensors are allowed */
    size_t n;
    uint8_t *img = st_image("{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},\"s\":{\"dtype\":\"F32\","
                            "\"shape\":[],\"data_offsets\":[0,4]}}       ",
                            4, &n);
    if (st_parse(&f, img, n, "ok.safetensors")) fail_msg("%s", ds_errmsg());
    st_close(&f);
    free(img);
}

/* st_check_taken: the first tensor left (by the file's order, which st_parse sorts by name), how many,
 * and the one name a reader may leave */
static void test_unread_tensors(void **state) {
    (void)state;
    size_t n;
    uint8_t *img = st_image("{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                            "\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                            12, &n);
    st_file f;
    if (st_parse(&f, img, n, "ck.safetensors")) fail_msg("%s", ds_errmsg());
    assert_int_equal(f.n_tensors, 3);
    int ia = (int)(st_find(&f, "a") - f.tensors), ib = (int)(st_find(&f, "b") - f.tensors), ic = (int)(st_find(&f, "c") - f.tensors);
    uint8_t taken[3] = {0};
    taken[ib] = taken[ic] = 1;
    assert_int_equal(st_check_taken(&f, taken, NULL), -1);
    assert_non_null(strstr(ds_errmsg(), "ck.safetensors: tensor 'a' is not read by this model's configuration (1 of 3 tensors unread)"));
    assert_int_equal(st_check_taken(&f, taken, "a"), 0);
    memset(taken, 0, 3);
    taken[ia] = 1;
    assert_int_equal(st_check_taken(&f, taken, NULL), -1);
    assert_non_null(strstr(ds_errmsg(), "tensor 'b' is not read by this model's configuration (2 of 3 tensors unread)"));
    assert_int_equal(st_check_taken(&f, taken, "b"), -1);
    assert_non_null(strstr(ds_errmsg(), "tensor 'c' is not read by this model's configuration (1 of 3 tensors unread)"));
    memset(taken, 1, 3);
    assert_int_equal(st_check_taken(&f, taken, NULL), 0);
    st_close(&f);
    free(img);
}

static void test_truncation_every_byte(void **state) {
    (void)state;
    float a[5] = {1, 2, 3, 4, 5};
    st_write_tensor t[2] = {{"x", a, 1, {5}}, {"y", a, 1, {2}}};
    const char *p = tmp_path("trunc.safetensors");
    assert_int_equal(st_write(p, t, 2, ST_F32, NULL, 0), 0);
    char *full;
    size_t n;
    assert_int_equal(ds_read_file(p, &full, &n), 0);
    for (size_t k = 0; k < n; k++) {
        uint8_t *q = malloc(k ? k : 1);
        memcpy(q, full, k);
        st_file f;
        if (st_parse(&f, q, k, "prefix.safetensors") == 0) fail_msg("prefix of %zu/%zu bytes accepted", k, n);
        free(q);
    }
    free(full);
    remove(p);
}

/* --------------------------------------------------------- HF checkpoint vs the same weights as GGUF */

typedef struct {
    int dim, layers, heads, kv_heads, hidden, vocab, qwen3;
} hf_spec;

/* GGUF llama stores q/k rows permuted for adjacent-pair RoPE: row (h, 2i+s) = HF row (h, s*hd/2+i) */
static void permute_rows(const float *hf, float *gg, int n_heads, int hd, int cols) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(gg + ((size_t)h * hd + 2 * i + s) * cols, hf + ((size_t)h * hd + s * hd / 2 + i) * cols,
                       sizeof(float) * (size_t)cols);
}

static void logits_of(const char *path, const int *tk, int T, float *out) {
    model m;
    if (model_load(&m, path)) fail_msg("%s", ds_errmsg());
    backend *be = backend_cpu_new(&(backend_opts){.n_threads = 2});
    fwd_state fs;
    fwd_state_init(&fs, be);
    kv_cache *kv = kv_cache_new(be, &m.cfg, T);
    assert_int_equal(model_forward_one(&m, &fs, kv, tk, T, 1, out), 0);
    kv_cache_free(be, kv);
    fwd_state_free(&fs);
    backend_free(be);
    model_free(&m);
}

static void check_hf_equals_gguf(const hf_spec *s, st_dtype dtype) {
    rng_t r;
    rng_seed(&r, 77);
    int hd = s->dim / s->heads, q = s->heads * hd, kv = s->kv_heads * hd, L = s->layers;
    int n_t = 2 + L * (s->qwen3 ? 11 : 9);
    st_write_tensor *st = calloc((size_t)n_t + 1, sizeof *st); /* + an inv_freq buffer below */
    float **bufs = calloc((size_t)n_t * 2, sizeof(float *));
    char (*names)[96] = calloc((size_t)n_t, 96);
    int nb = 0, k = 0;
    gguf_builder g;
    gb_init(&g);
    const char *arch = s->qwen3 ? "qwen3" : "llama";
    char key[96];
    gb_str(&g, "general.architecture", arch);
#define KEY(x) (snprintf(key, sizeof key, "%s.%s", arch, x), key)
    gb_u32(&g, KEY("embedding_length"), (uint32_t)s->dim);
    gb_u32(&g, KEY("block_count"), (uint32_t)L);
    gb_u32(&g, KEY("attention.head_count"), (uint32_t)s->heads);
    gb_u32(&g, KEY("attention.head_count_kv"), (uint32_t)s->kv_heads);
    gb_u32(&g, KEY("feed_forward_length"), (uint32_t)s->hidden);
    gb_u32(&g, KEY("context_length"), 256);
    gb_f32(&g, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    gb_f32(&g, KEY("rope.freq_base"), 50000.0f);
#undef KEY
    /* weights rounded to the checkpoint dtype first, so both files hold identical values */
#define NEW(count, scale, hfname, ggname, rows, cols, perm)                                                     \
    do {                                                                                                         \
        size_t cnt = (size_t)(count);                                                                            \
        float *w = malloc(sizeof(float) * cnt);                                                                  \
        randn_fill(&r, w, cnt, scale);                                                                           \
        for (size_t i = 0; i < cnt; i++) w[i] += strstr(hfname, "norm") ? 1.0f : 0.0f; /* norms near 1 */       \
        for (size_t i = 0; i < cnt; i++)                                                                         \
            w[i] = dtype == ST_F16 ? ds_f16_to_f32(ds_f32_to_f16(w[i]))                                          \
                 : dtype == ST_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(w[i])) : w[i];                               \
        bufs[nb++] = w;                                                                                          \
        snprintf(names[k], 96, "%s", hfname);                                                                    \
        st[k] = (st_write_tensor){names[k], w, (rows) > 0 ? 2 : 1, {(rows) > 0 ? (rows) : (cols), (cols)}};      \
        k++;                                                                                                     \
        float *gw = w;                                                                                           \
        if (perm > 0) {                                                                                          \
            gw = malloc(sizeof(float) * cnt);                                                                    \
            permute_rows(w, gw, perm, hd, cols);                                                                 \
            bufs[nb++] = gw;                                                                                     \
        }                                                                                                        \
        int64_t ne[2] = {(cols), (rows)};                                                                        \
        gb_tensor(&g, ggname, GGML_F32, (rows) > 0 ? 2 : 1, ne, gw, sizeof(float) * cnt);                        \
    } while (0)
    NEW((size_t)s->vocab * s->dim, 0.5f, "model.embed_tokens.weight", "token_embd.weight", s->vocab, s->dim, 0);
    NEW(s->dim, 0.1f, "model.norm.weight", "output_norm.weight", 0, s->dim, 0);
    for (int l = 0; l < L; l++) {
        char hn[96], gn[96];
        float sc = 1.0f / sqrtf((float)s->dim);
#define HN(x) (snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l, x), hn)
#define GN(x) (snprintf(gn, sizeof gn, "blk.%d.%s.weight", l, x), gn)
        NEW(s->dim, 0.1f, HN("input_layernorm"), GN("attn_norm"), 0, s->dim, 0);
        NEW(s->dim, 0.1f, HN("post_attention_layernorm"), GN("ffn_norm"), 0, s->dim, 0);
        /* GGUF qwen3 keeps the HF (rotate-half) layout; llama is permuted */
        NEW((size_t)q * s->dim, sc, HN("self_attn.q_proj"), GN("attn_q"), q, s->dim, s->qwen3 ? 0 : s->heads);
        NEW((size_t)kv * s->dim, sc, HN("self_attn.k_proj"), GN("attn_k"), kv, s->dim, s->qwen3 ? 0 : s->kv_heads);
        NEW((size_t)kv * s->dim, sc, HN("self_attn.v_proj"), GN("attn_v"), kv, s->dim, 0);
        NEW((size_t)s->dim * q, sc, HN("self_attn.o_proj"), GN("attn_output"), s->dim, q, 0);
        NEW((size_t)s->hidden * s->dim, sc, HN("mlp.gate_proj"), GN("ffn_gate"), s->hidden, s->dim, 0);
        NEW((size_t)s->hidden * s->dim, sc, HN("mlp.up_proj"), GN("ffn_up"), s->hidden, s->dim, 0);
        NEW((size_t)s->dim * s->hidden, sc, HN("mlp.down_proj"), GN("ffn_down"), s->dim, s->hidden, 0);
        if (s->qwen3) {
            NEW(hd, 0.2f, HN("self_attn.q_norm"), GN("attn_q_norm"), 0, hd, 0);
            NEW(hd, 0.2f, HN("self_attn.k_norm"), GN("attn_k_norm"), 0, hd, 0);
        }
#undef HN
#undef GN
    }
#undef NEW
    size_t n;
    uint8_t *img = gb_finish(&g, &n);
    const char *gp = tmp_path("same.gguf");
    write_file(gp, img, n);
    free(img);
    gb_free(&g);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp_path("hfckpt"));
    mkdir(dir, 0755);
    char p[640];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(st_write(p, st, k, dtype, NULL, 0), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    char cfg[1024];
#define CONFIG(layers)                                                                                                   \
    snprintf(cfg, sizeof cfg,                                                                                            \
             "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"          \
             " \"num_key_value_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-6,"           \
             " \"rope_theta\": 50000, \"max_position_embeddings\": 256, \"tie_word_embeddings\": true,"                      \
             " \"hidden_act\": \"silu\", \"rope_scaling\": null}",                                                          \
             arch, s->dim, layers, s->heads, s->kv_heads, s->hidden, s->vocab)
    int cl = CONFIG(L);
    write_file(p, cfg, (size_t)cl);
    int T = 12, tk[12];
    for (int i = 0; i < T; i++) tk[i] = (int)(rng_u64(&r) % (uint64_t)s->vocab);
    float *a = malloc(sizeof(float) * (size_t)T * s->vocab), *b = malloc(sizeof(float) * (size_t)T * s->vocab);
    logits_of(gp, tk, T, a);
    logits_of(dir, tk, T, b);
    size_t w;
    float d = max_abs_diff(a, b, (size_t)T * s->vocab, &w);
    if (d > 1e-4f) fail_msg("%s %s: HF checkpoint and GGUF differ by %g (token %zu)", arch, st_dtype_name(dtype), d, w / (size_t)s->vocab);
    /* a weight the loader would not read: the last layer under num_hidden_layers L - 1 was left out
     * silently; an inv_freq buffer (transformers skips it too) is read past */
    model m;
    cl = CONFIG(L - 1);
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    char want[160];
    snprintf(want, sizeof want, "tensor 'model.layers.%d.", L - 1);
    if (!strstr(ds_errmsg(), want) || !strstr(ds_errmsg(), "is not part of a"))
        fail_msg("%d layers read of %d: %s", L - 1, L, ds_errmsg());
    cl = CONFIG(L);
    write_file(p, cfg, (size_t)cl);
    char stp[700];
    snprintf(stp, sizeof stp, "%s/model.safetensors", dir);
    st[k] = (st_write_tensor){"model.layers.0.self_attn.rotary_emb.inv_freq", bufs[0], 1, {hd / 2}};
    assert_int_equal(st_write(stp, st, k + 1, dtype, NULL, 0), 0);
    if (model_load(&m, dir)) fail_msg("with an inv_freq buffer: %s", ds_errmsg());
    model_free(&m);
    st[k] = (st_write_tensor){"model.layers.0.self_attn.q_proj.bias", bufs[0], 1, {q}};
    assert_int_equal(st_write(stp, st, k + 1, dtype, NULL, 0), 0);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "tensor 'model.layers.0.self_attn.q_proj.bias' is not part of a"));
    /* optional keys absent: transformers' defaults (LlamaConfig: RoPE base 10000, epsilon 1e-6, 2048
     * positions, as many KV heads as heads, head size hidden / heads) */
    assert_int_equal(st_write(stp, st, k, dtype, NULL, 0), 0);
    cl = snprintf(cfg, sizeof cfg,
                  "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
                  " \"num_key_value_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, \"tie_word_embeddings\": true}",
                  arch, s->dim, L, s->heads, s->kv_heads, s->hidden, s->vocab);
    write_file(p, cfg, (size_t)cl);
    if (model_load(&m, dir)) fail_msg("without the optional keys: %s", ds_errmsg());
    assert_true(m.cfg.rope_theta == 10000.0f && m.cfg.norm_eps == 1e-6f && m.cfg.max_seq == 2048 && m.cfg.rope_scale == 1.0f);
    assert_int_equal(m.cfg.head_dim, s->dim / s->heads);
    model_free(&m);
    memcpy(strstr(cfg, "\"num_key_value_heads\""), "\"num_key_value_headX\"", 21); /* now unknown: ignored */
    write_file(p, cfg, (size_t)cl);
    if (s->kv_heads == s->heads) {
        if (model_load(&m, dir)) fail_msg("without num_key_value_heads: %s", ds_errmsg());
        model_free(&m);
    } else { /* as many KV heads as heads: the k/v projections are then the wrong shape, named */
        assert_int_equal(model_load(&m, dir), -1);
        assert_non_null(strstr(ds_errmsg(), "self_attn.k_proj.weight' has shape"));
    }
    /* rope_scaling: linear's factor read (under either key for its type), "default" none, others refused */
    {
        static const char *const rs[][2] = {{"{\"type\": \"linear\", \"factor\": 2.5}", "2.5"},
                                            {"{\"rope_type\": \"linear\", \"factor\": 3}", "3"},
                                            {"{\"rope_type\": \"default\"}", "1"},
                                            {"{\"type\": \"yarn\", \"factor\": 4}", "rope_scaling type is not supported"}};
        for (int i = 0; i < 4; i++) {
            cl = CONFIG(L);
            char with[1200];
            int wl = snprintf(with, sizeof with, "%.*s, \"rope_scaling\": %s}", (int)(strstr(cfg, ", \"rope_scaling\"") - cfg), cfg,
                              rs[i][0]);
            write_file(p, with, (size_t)wl);
            if (i < 3) {
                if (model_load(&m, dir)) fail_msg("rope_scaling %s: %s", rs[i][0], ds_errmsg());
                assert_float_equal(m.cfg.rope_scale, atof(rs[i][1]), 0);
                model_free(&m);
            } else {
                assert_int_equal(model_load(&m, dir), -1);
                assert_non_null(strstr(ds_errmsg(), rs[i][1]));
            }
        }
    }
    cl = CONFIG(L);
    write_file(p, cfg, (size_t)cl);
    /* the checkpoint named by its model.safetensors file: the folder's */
    if (model_load(&m, stp)) fail_msg("by its model.safetensors: %s", ds_errmsg());
    assert_int_equal(m.cfg.n_layers, L);
    model_free(&m);
    /* every tensor required: each left out in turn is named missing (an HF head only when untied) */
    for (int i = 0; i < k; i++) {
        st_write_tensor *less = calloc((size_t)k, sizeof *less);
        for (int j = 0, o = 0; j < k; j++)
            if (j != i) less[o++] = st[j];
        assert_int_equal(st_write(stp, less, k - 1, dtype, NULL, 0), 0);
        free(less);
        assert_int_equal(model_load(&m, dir), -1);
        snprintf(want, sizeof want, "missing tensor '%s'", st[i].name);
        if (!strstr(ds_errmsg(), want)) fail_msg("without '%s': %s", st[i].name, ds_errmsg());
    }
    assert_int_equal(st_write(stp, st, k, dtype, NULL, 0), 0);
    cl = CONFIG(L);
    memcpy(strstr(cfg, "true"), "null", 4); /* tie_word_embeddings: null, i.e. an lm_head of its own */
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "missing tensor 'lm_head.weight'"));
    /* an unread tensor that comes first in the file */
    st_write_tensor *more = calloc((size_t)k + 1, sizeof *more);
    more[0] = (st_write_tensor){"a.extra.weight", bufs[0], 1, {4}};
    memcpy(more + 1, st, sizeof *st * (size_t)k);
    assert_int_equal(st_write(stp, more, k + 1, dtype, NULL, 0), 0);
    free(more);
    cl = CONFIG(L);
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "tensor 'a.extra.weight' is not part of a"));
#undef CONFIG
    /* broken variants of the same checkpoint */
    cl = snprintf(cfg, sizeof cfg, "{\"model_type\": \"gpt2\", \"hidden_size\": 8}");
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "model_type 'gpt2' is not supported"));
    cl = snprintf(cfg, sizeof cfg, "{\"model_type\": \"%s\", \"hidden_size\": %d}", arch, s->dim);
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "no 'num_hidden_layers'"));
    write_file(p, "{not json", 9);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "not a valid JSON object"));
    cl = snprintf(cfg, sizeof cfg, "{\"model_type\": \"gpt2\"}\n{\"model_type\": \"%s\"}\n", arch);
    write_file(p, cfg, (size_t)cl);
    assert_int_equal(model_load(&m, dir), -1);
    assert_non_null(strstr(ds_errmsg(), "config.json: text after the JSON value at byte 23"));
    remove(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    remove(p);
    rmdir(dir);
    remove(gp);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs), free(st), free(names), free(a), free(b);
}

static void test_hf_llama_f32(void **state) {
    (void)state;
    check_hf_equals_gguf(&(hf_spec){48, 2, 4, 2, 80, 200, 0}, ST_F32);
}
static void test_hf_llama_bf16(void **state) {
    (void)state;
    check_hf_equals_gguf(&(hf_spec){48, 2, 4, 2, 80, 200, 0}, ST_BF16);
}
static void test_hf_qwen3_f16(void **state) {
    (void)state;
    check_hf_equals_gguf(&(hf_spec){64, 2, 4, 2, 96, 150, 1}, ST_F16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_dtypes),  cmocka_unit_test(test_f16_all_values),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_unread_tensors),      cmocka_unit_test(test_truncation_every_byte),
        cmocka_unit_test(test_hf_llama_f32),      cmocka_unit_test(test_hf_llama_bf16),
        cmocka_unit_test(test_hf_qwen3_f16),
    };
    return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
