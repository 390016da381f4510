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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_gguf_py),
        cmocka_unit_test(test_vector_equals_scalar),
        cmocka_unit_test(test_type_table),
    };
    return cmocka_run_group_tests_name("quant", tests, NULL, NULL);
}
