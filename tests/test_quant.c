/* test_quant — dequantization of F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K and Q5_0 against gguf-py's
 * independent decoders (tests/fixtures/dequant.json, made by tests/ref/make_fixtures.py), the
 * vectorised decoders against the scalar ones, and the type table. */
#include "testutil.h"

#include <cJSON.h>

static int hexval(char c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static void test_against_gguf_py(void **state) {
    (void)state;
    char *txt;
    size_t n;
    if (ds_read_file(FIXTURE("dequant.json"), &txt, &n)) fail_msg("%s", ds_errmsg());
    cJSON *j = cJSON_ParseWithLength(txt, n);
    free(txt);
    assert_non_null(j);
    int seen = 0;
    for (const cJSON *t = cJSON_GetObjectItem(j, "types")->child; t; t = t->next) {
        const char *name = cJSON_GetObjectItem(t, "type")->valuestring;
        uint32_t id = (uint32_t)cJSON_GetObjectItem(t, "type_id")->valueint;
        const ggml_type_info *ti = ggml_type_get(id);
        assert_non_null(ti);
        assert_string_equal(ti->name, name);
        assert_int_equal(ti->size, cJSON_GetObjectItem(t, "block_bytes")->valueint);
        assert_int_equal(ti->blck, cJSON_GetObjectItem(t, "block_elems")->valueint);
        const char *hex = cJSON_GetObjectItem(t, "bytes")->valuestring;
        size_t nb = strlen(hex) / 2;
        uint8_t *bytes = malloc(nb);
        for (size_t i = 0; i < nb; i++) bytes[i] = (uint8_t)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]));
        const cJSON *vals = cJSON_GetObjectItem(t, "values");
        int ne = cJSON_GetArraySize(vals);
        assert_int_equal((size_t)ne / (size_t)ti->blck * (size_t)ti->size, nb);
        float *out = malloc(sizeof(float) * (size_t)ne);
        ti->to_float(bytes, out, ne);
        int i = 0;
        for (const cJSON *v = vals->child; v; v = v->next, i++) {
            float want = (float)v->valuedouble;
            if (memcmp(&out[i], &want, 4) != 0 && !(out[i] != out[i] && want != want))
                fail_msg("%s element %d: %.9g, gguf-py %.9g", name, i, (double)out[i], (double)want);
        }
        free(out);
        free(bytes);
        seen++;
    }
    assert_int_equal(seen, 8);
    cJSON_Delete(j);
}

/* the AVX2 decoders in the type table agree bit for bit with the scalar reference */
static void test_vector_equals_scalar(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 3);
    enum { NB = 64 };
    uint8_t raw[NB * 34];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)rng_u64(&r);
    /* keep the f16 scales finite */
    for (int b = 0; b < NB; b++) {
        ds_f16 d = ds_f32_to_f16((float)(rng_uniform(&r) - 0.5)), m = ds_f32_to_f16((float)(rng_uniform(&r) - 0.5));
        memcpy(raw + b * 20, &d, 2);
        memcpy(raw + b * 20 + 2, &m, 2);
    }
    float a[NB * 32], b[NB * 32];
    dequant_q4_1_ref(raw, a, NB * 32);
    ggml_type_get(GGML_Q4_1)->to_float(raw, b, NB * 32);
    assert_memory_equal(a, b, sizeof a);
    for (int k = 0; k < NB; k++) {
        ds_f16 d = ds_f32_to_f16((float)(rng_uniform(&r) - 0.5));
        memcpy(raw + k * 34, &d, 2);
    }
    dequant_q8_0_ref(raw, a, NB * 32);
    ggml_type_get(GGML_Q8_0)->to_float(raw, b, NB * 32);
    assert_memory_equal(a, b, sizeof a);
}

static void test_type_table(void **state) {
    (void)state;
    assert_null(ggml_type_get(4));   /* removed Q4_2 */
    assert_null(ggml_type_get(63));
    assert_null(ggml_type_get(1000));
    assert_non_null(ggml_type_get(GGML_Q5_K));
    assert_null(ggml_type_get(GGML_Q5_K)->to_float); /* known size, not decodable here */
    assert_string_equal(ggml_type_name(GGML_Q6_K), "Q6_K");
    assert_string_equal(ggml_type_name(77), "unknown");
}

/* The quantizers (synthetic models of every type, and subvocab's Q5_0 / Q8_0 heads in production)
 * against what they promise: decoded by the decoders checked above against gguf-py, every element
 * of every block lies within its format's rounding bound, derived from the block's own range
 *   Q8_0 / Q5_0 (absmax a, d = a/127, a/15; f16 d):   |e| <= d/2 + (127 | 15) d 2^-11
 *   Q4_1 (min m, d = (max - m)/15; f16 d, m):          |e| <= d/2 + 15 d 2^-11 + |m| 2^-11
 *   Q4_K (sub-block range s = (hi - lo)/15, super-block D = max s / 63, Dm = max(-lo) / 63; 6-bit
 *         scale and min): |e| <= s/2 + 8 D + Dm/2        (a scale or min rounded, a code clamped)
 *   Q6_K (sub-block absmax a, s = a/31, d = max s / 127; int8 scale): |e| <= s/2 + 16 d
 * plus what rounding each f16 costs (f16_err: subnormal scales at the smallest magnitude),
 * on data of three magnitudes, with a sub-block's first element its extreme in some blocks and an
 * all-zero block; the buffer starts as garbage, so a block left unwritten shows. */
/* what rounding x to f16 may cost: half an ulp, at least half the smallest subnormal step */
static float f16_err(float x) { return fmaxf(fabsf(x) / 2048, 2.9802322e-8f); }

static void test_quantize_roundtrip(void **state) {
    (void)state;
    enum { N = 4 * 256 };
    static const uint32_t types[] = {GGML_Q8_0, GGML_Q5_0, GGML_Q4_1, GGML_Q4_K, GGML_Q6_K};
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    uint8_t *q = malloc(N * 2);
    rng_t r;
    rng_seed(&r, 11);
    for (int t = 0; t < 5; t++)
        for (int mag = 0; mag < 3; mag++) {
            float scale = mag == 0 ? 1e-3f : mag == 1 ? 1.0f : 300.0f;
            for (int i = 0; i < N; i++) x[i] = scale * (float)(2 * rng_uniform(&r) - 1);
            for (int i = 0; i < N; i += 32) /* every other sub-block of 32 (and of 16) led by its extreme */
                if (i / 32 % 2) x[i] = scale * (i / 64 % 2 ? 4.0f : -4.0f);
            for (int i = 0; i < 16; i++) x[i] += scale * 0.5f; /* an asymmetric first sub-block */
            for (int i = 512; i < 768; i++) x[i] = 0;          /* an all-zero super-block */
            memset(q, 0xA5, N * 2);
            const ggml_type_info *ti = ggml_type_get(types[t]);
            switch (types[t]) {
            case GGML_Q8_0: quantize_q8_0(x, (block_q8_0 *)q, N); break;
            case GGML_Q5_0: quantize_q5_0(x, (block_q5_0 *)q, N); break;
            case GGML_Q4_1: quantize_q4_1(x, (block_q4_1 *)q, N); break;
            case GGML_Q4_K: quantize_q4_k(x, (block_q4_K *)q, N); break;
            default: quantize_q6_k(x, (block_q6_K *)q, N); break;
            }
            ti->to_float(q, y, N);
            for (int b0 = 0; b0 < N; b0 += ti->blck) {
                const float *v = x + b0;
                float lo[16], hi[16], am[16], top = 0, lmax = 0, bound[256];
                int sub = types[t] == GGML_Q6_K ? 16 : 32, ns = ti->blck / sub;
                for (int j = 0; j < ns; j++) {
                    lo[j] = types[t] == GGML_Q4_1 ? v[sub * j] : 0, hi[j] = lo[j], am[j] = 0;
                    for (int l = 0; l < sub; l++) {
                        float e = v[sub * j + l];
                        lo[j] = fminf(lo[j], e), hi[j] = fmaxf(hi[j], e), am[j] = fmaxf(am[j], fabsf(e));
                    }
                    top = fmaxf(top, types[t] == GGML_Q6_K ? am[j] / 31 : (hi[j] - lo[j]) / 15), lmax = fmaxf(lmax, -lo[j]);
                }
                for (int j = 0; j < ns; j++) {
                    float bd;
                    switch (types[t]) {
                    case GGML_Q8_0: bd = am[j] / 127 / 2 + 127 * f16_err(am[j] / 127); break;
                    case GGML_Q5_0: bd = am[j] / 15 / 2 + 15 * f16_err(am[j] / 15); break;
                    case GGML_Q4_1: bd = (hi[j] - lo[j]) / 15 / 2 + 15 * f16_err((hi[j] - lo[j]) / 15) + f16_err(lo[j]); break;
                    case GGML_Q4_K:
                        bd = (hi[j] - lo[j]) / 15 / 2 + 8 * top / 63 + lmax / 63 / 2 + 64 * (f16_err(top / 63) + f16_err(lmax / 63));
                        break;
                    default: bd = am[j] / 31 / 2 + 16 * top / 127 + 64 * 32 * f16_err(top / 127); break;
                    }
                    for (int l = 0; l < sub; l++) bound[sub * j + l] = bd * 1.0001f + 1e-30f;
                }
                for (int e = 0; e < ti->blck; e++) {
                    float err = fabsf(y[b0 + e] - v[e]);
                    if (!(err <= bound[e]))
                        fail_msg("%s, magnitude %g: element %d decodes to %.9g from %.9g (error %.3g, bound %.3g)", ti->name,
                                 (double)scale, b0 + e, (double)y[b0 + e], (double)v[e], (double)err, (double)bound[e]);
                }
            }
        }
    free(x), free(y), free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_gguf_py),
        cmocka_unit_test(test_vector_equals_scalar),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_quantize_roundtrip),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
