/* test_reference — the runtime on the real SmolLM2-135M against an independent implementation:
 * the float64 numpy forward of tests/ref/ref_forward.py (GGUF read and dequantized by gguf-py),
 * fixtures from tests/ref/make_fixtures.py.
 *  - exact (fp32) contract: for every prompt the 64-token greedy continuation equals the reference
 *    token for token, and over all teacher-forced positions (>= 512) the top-1 next token agrees
 *    >= 99.5 %, max |logit difference| < 2e-3 (rounding only);
 *  - int8 contract (the default): the teacher-forced top-1 agreement with float64 is at least
 *    llama.cpp's (which also quantizes activations to 8 bits; its top-1 is in the fixture) less
 *    one position in 200; max and mean |logit difference| are printed (and bounded loosely: a
 *    wrong kernel moves logits by whole units on every position). */
#include "testutil.h"

#include <cJSON.h>

#include "../runtime/target.h"

typedef struct {
    target t, ti8; /* exact and int8 contracts */
    cJSON *ref;
} ctx;

static int setup(void **state) {
    if (!need_real_model()) return -1;
    ctx *c = calloc(1, sizeof *c);
    if (target_open(&c->t, real_model_path(), &(backend_opts){.exact = 1}) ||
        target_open(&c->ti8, real_model_path(), &(backend_opts){.exact = 0})) {
        fprintf(stderr, "%s\n", ds_errmsg());
        return -1;
    }
    char *txt;
    size_t n;
    if (ds_read_file(FIXTURE("smollm2_ref.json"), &txt, &n)) return -1;
    c->ref = cJSON_ParseWithLength(txt, n);
    free(txt);
    *state = c;
    return c->ref ? 0 : -1;
}

static int teardown(void **state) {
    ctx *c = *state;
    cJSON_Delete(c->ref);
    target_close(&c->t);
    target_close(&c->ti8);
    free(c);
    return 0;
}

static int *ids_of(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof(int) * (size_t)(*n + 1));
    int i = 0;
    for (const cJSON *e = a->child; e; e = e->next) v[i++] = e->valueint;
    return v;
}

static void test_greedy_continuations(void **state) {
    ctx *c = *state;
    target *t = &c->t;
    int V = t->m.cfg.vocab_size, k = 0;
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (const cJSON *p = cJSON_GetObjectItem(c->ref, "prompts")->child; p; p = p->next, k++) {
        int np, ng;
        int *prompt = ids_of(cJSON_GetObjectItem(p, "prompt_ids"), &np);
        int *want = ids_of(cJSON_GetObjectItem(p, "greedy_ref"), &ng);
        assert_int_equal(ng, 64);
        kv_cache *kv = kv_cache_new(t->be, &t->m.cfg, np + ng);
        assert_int_equal(model_forward_one(&t->m, &t->fs, kv, prompt, np, 0, logits), 0);
        for (int i = 0; i < ng; i++) {
            int tok = argmax_f32(logits, V);
            if (tok != want[i]) fail_msg("prompt %d: greedy token %d is %d, reference %d", k, i, tok, want[i]);
            assert_int_equal(model_forward_one(&t->m, &t->fs, kv, &tok, 1, 0, logits), 0);
        }
        kv_cache_free(t->be, kv);
        free(prompt);
        free(want);
    }
    assert_true(k >= 4);
    free(logits);
}

static void teacher_forced(ctx *c, target *t) {
    int V = t->m.cfg.vocab_size, positions = 0, agree = 0, agree_llama = 0, llama_ref = 0, k = 0;
    double max_d = 0, sum_d = 0;
    long n_d = 0;
    for (const cJSON *p = cJSON_GetObjectItem(c->ref, "prompts")->child; p; p = p->next, k++) {
        int np, ng;
        int *prompt = ids_of(cJSON_GetObjectItem(p, "prompt_ids"), &np);
        int *gen = ids_of(cJSON_GetObjectItem(p, "greedy_ref"), &ng);
        int T = np + ng, *seq = malloc(sizeof(int) * (size_t)T);
        memcpy(seq, prompt, sizeof(int) * (size_t)np);
        memcpy(seq + np, gen, sizeof(int) * (size_t)ng);
        const cJSON *tf = cJSON_GetObjectItem(p, "tf");
        const cJSON *top1 = cJSON_GetObjectItem(tf, "top1_ref"), *top1l = cJSON_GetObjectItem(tf, "top1_llamacpp");
        const cJSON *tki = cJSON_GetObjectItem(tf, "topk_ids"), *tkl = cJSON_GetObjectItem(tf, "topk_logits");
        assert_int_equal(cJSON_GetArraySize(top1), T);
        float *lg = malloc(sizeof(float) * (size_t)T * V);
        kv_cache *kv = kv_cache_new(t->be, &t->m.cfg, T);
        /* the whole sequence in one call (the prefill/GEMM path) */
        assert_int_equal(model_forward_one(&t->m, &t->fs, kv, seq, T, 1, lg), 0);
        for (int i = 0; i < T; i++) {
            const float *row = lg + (size_t)i * V;
            int mine = argmax_f32(row, V);
            positions++;
            agree += mine == cJSON_GetArrayItem(top1, i)->valueint;
            agree_llama += mine == cJSON_GetArrayItem(top1l, i)->valueint;
            llama_ref += cJSON_GetArrayItem(top1l, i)->valueint == cJSON_GetArrayItem(top1, i)->valueint;
            const cJSON *ids = cJSON_GetArrayItem(tki, i), *vals = cJSON_GetArrayItem(tkl, i);
            for (int j = 0; j < cJSON_GetArraySize(ids); j++) {
                double d = fabs(row[cJSON_GetArrayItem(ids, j)->valueint] - cJSON_GetArrayItem(vals, j)->valuedouble);
                max_d = fmax(max_d, d);
                sum_d += d;
                n_d++;
            }
        }
        kv_cache_free(t->be, kv);
        free(lg), free(seq), free(prompt), free(gen);
    }
    double rate = (double)agree / positions;
    printf("%s: teacher-forced positions %d: top-1 agreement with the float64 reference %.4f (%d/%d) "
           "[llama.cpp's: %.4f (%d/%d)], with llama.cpp %.4f; |delta logit| over the reference top-8: max %.5f, mean %.6f\n",
           t->be->kernels, positions, rate, agree, positions, (double)llama_ref / positions, llama_ref, positions,
           (double)agree_llama / positions, max_d, sum_d / (double)n_d);
    assert_true(positions >= 512);
    if (t->be->exact) {
        assert_true(rate >= 0.995);
        /* fp32 activations against a float64 reference: rounding only (logits are O(10..40)) */
        assert_true(max_d < 2e-3); /* measured 7e-5 on x86-64 AVX2 */
    } else {
        assert_true(rate >= (double)llama_ref / positions - 0.005); /* measured: 840/856, llama.cpp's 840/856 */
        assert_true(sum_d / (double)n_d < 0.5);                     /* measured 0.23 */
    }
}

static void test_teacher_forced(void **state) { teacher_forced(*state, &((ctx *)*state)->t); }
static void test_teacher_forced_int8(void **state) { teacher_forced(*state, &((ctx *)*state)->ti8); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_continuations),
        cmocka_unit_test(test_teacher_forced),
        cmocka_unit_test(test_teacher_forced_int8),
    };
    return cmocka_run_group_tests_name("reference (SmolLM2 vs float64 numpy)", tests, setup, teardown);
}
