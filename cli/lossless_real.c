/* lossless --two-sample — two-sample tests of speculative against autoregressive sampling on the
 * real target: the first three emitted tokens of many continuations of each prompt, drawn with the
 * production loop (one prefill per prompt and arm, then the request is rewound for every draw).
 * Its power is stated with the result; against small effects (a reused uniform when few drafts are
 * accepted) it has none, which is why the gate's real-model cases are exact (gate_round_real). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/decode.h"
#include "../runtime/base/common.h"
#include "../verify/stats.h"
#include "lossless_real.h"

#define N_TOK 3

typedef struct {
    int t[N_TOK];
} triple;

static int cmp_triple(const void *a, const void *b) { return memcmp(a, b, sizeof(triple)); }

/* draws continuations of one prompt: arm 0 = autoregressive, arm 1 = speculative */
static int draw(target *t, const decode_cfg *cfg, const int *prompt, int n_prompt, int gamma, int N, uint64_t seed,
                triple *out) {
    request r;
    float *l0 = ds_malloc(sizeof(float) * (size_t)t->m.cfg.vocab_size, "logits");
    float *p0 = ds_malloc(sizeof(float) * (size_t)t->m.cfg.vocab_size, "probs");
    lp_scratch scr = {0};
    int rc = -1, V = t->m.cfg.vocab_size;
    if (!l0 || !p0 || request_init(&r, t, 0, prompt, n_prompt, N_TOK + gamma, seed)) goto done;
    r.stop_at = N_TOK;
    decode_stats st;
    memset(&st, 0, sizeof st);
    if (decode_prefill(t, &r, cfg, l0, &st)) goto done_req;
    if (logits_process(l0, V, &cfg->sp, p0, &scr)) goto done_req;
    ds_progress pr;
    ds_progress_start(&pr, cfg->d ? "  speculative" : "  autoregressive", "draws", N);
    for (int i = 0; i < N; i++) {
        if (i > 0) { /* rewind to the prompt and draw the first token afresh */
            r.toks.n = n_prompt;
            r.done = 0;
            kv_cache_crop(r.tkv, n_prompt);
            if (cfg->d && cfg->d->ops->rewind(cfg->d, &r)) goto done_req;
            int first = rng_draw(&r.vr.resample, p0, V);
            if (append_emitted(t, &r, &first, 1) < 0) goto done_req;
        }
        request *rp = &r;
        if (!r.done && decode_rounds(t, &rp, 1, cfg, &st)) goto done_req;
        for (int k = 0; k < N_TOK; k++) out[i].t[k] = k < request_n_out(&r) ? r.toks.v[n_prompt + k] : -1;
        ds_progress_update(&pr, i + 1, NULL);
    }
    ds_progress_end(&pr);
    rc = 0;
done_req:
    if (cfg->d && r.dstate) cfg->d->ops->end(cfg->d, &r);
    request_free(&r, t);
done:
    free(l0);
    free(p0);
    lp_scratch_free(&scr);
    return rc;
}

/* counts of both samples over the union of their categories (k = which token, or -1: the triple) */
static int compare(const triple *a, const triple *b, int N, int k, gof_result *g) {
    triple *all = ds_malloc(sizeof(triple) * 2 * (size_t)N, "categories");
    long *ca = ds_calloc(2 * (size_t)N, sizeof(long), "counts"), *cb = ds_calloc(2 * (size_t)N, sizeof(long), "counts");
    int rc = -1;
    if (!all || !ca || !cb) goto done;
    for (int i = 0; i < 2 * N; i++) {
        const triple *s = i < N ? &a[i] : &b[i - N];
        memset(&all[i], 0xff, sizeof(triple));
        if (k < 0) all[i] = *s;
        else all[i].t[0] = s->t[k];
    }
    qsort(all, 2 * (size_t)N, sizeof(triple), cmp_triple);
    int K = 0;
    for (int i = 0; i < 2 * N; i++)
        if (i == 0 || cmp_triple(&all[i], &all[i - 1])) all[K++] = all[i];
    for (int i = 0; i < 2 * N; i++) {
        triple key;
        const triple *s = i < N ? &a[i] : &b[i - N];
        memset(&key, 0xff, sizeof key);
        if (k < 0) key = *s;
        else key.t[0] = s->t[k];
        triple *hit = bsearch(&key, all, (size_t)K, sizeof(triple), cmp_triple);
        (i < N ? ca : cb)[hit - all]++;
    }
    rc = chi2_two_sample(ca, cb, K, g);
done:
    free(all), free(ca), free(cb);
    return rc;
}

int lossless_real(const real_opts *o) {
    target t;
    drafter d;
    scheduler s;
    memset(&d, 0, sizeof d);
    memset(&s, 0, sizeof s);
    triple *ar = NULL, *sp = NULL;
    int rc = -1, bad = 0;
    if (target_open(&t, o->model ? o->model : target_default_path(), &(backend_opts){.name = o->backend, .exact = o->exact})) return -1;
    if (t.be->exact != o->exact) { /* a backend with one contract only */
        ds_error("lossless: backend '%s' computes on the %s contract (%s)", t.be->name, t.be->exact ? "fp32" : "int8",
                 t.be->exact ? "add --exact" : "drop --exact");
        target_close(&t);
        return -1;
    }
    cJSON *dc = cJSON_CreateObject();
    cJSON_AddNumberToObject(dc, "layers", o->draft_layers);
    int ok = drafter_open(&d, "vanilla", dc, &t) == 0 && scheduler_open(&s, "fixed", NULL, 0) == 0;
    cJSON_Delete(dc);
    if (!ok) goto done;
    ar = ds_malloc(sizeof(triple) * (size_t)o->draws, "samples");
    sp = ds_malloc(sizeof(triple) * (size_t)o->draws, "samples");
    if (!ar || !sp) goto done;
    static const char *prompts[] = {"Tell me a short story about a lighthouse keeper.",
                                    "Write a Python function that merges two sorted lists."};
    int n_tests = 2 * (N_TOK + 1);
    double alpha = 0.01 / n_tests, zA = normal_quantile(1 - alpha / 2), zB = normal_quantile(0.9);
    double delta = (zA + zB) * sqrt(2 * 0.25 / o->draws);
    printf("lossless --two-sample: %s, vanilla self-draft of %d layers, gamma %d, T=%g top-p %g top-k %d min-p %g; N = %d draws per arm "
           "and prompt\n",
           t.m.path, o->draft_layers, o->gamma, (double)o->sp.temperature, (double)o->sp.top_p, o->sp.top_k, (double)o->sp.min_p, o->draws);
    printf("power: a two-proportion test at alpha = 0.01/%d detects a shift of %.3f in the probability of any fixed "
           "event (p near 1/2) with power 0.9; total variation 0.05 needs N >= %.0f\n\n",
           n_tests, delta, ceil(pow(zA + zB, 2) * 0.5 / (0.05 * 0.05)));
    printf("| prompt | test | chi2 | df | p | verdict |\n|---|---|---:|---:|---:|---|\n");
    for (int pi = 0; pi < 2; pi++) {
        chat_msg msg = {"user", prompts[pi]};
        ivec ids = {0};
        if (chat_encode(&t.ct, &t.tk, &msg, 1, 1, &ids)) goto done;
        decode_cfg ca = {o->sp, o->gamma, NULL, NULL, NULL, NULL, MODE_AR};
        decode_cfg cs = {o->sp, o->gamma, &d, &s, NULL, NULL, MODE_SPEC};
        int r1 = draw(&t, &ca, ids.v, ids.n, o->gamma, o->draws, o->seed * 2 + (uint64_t)pi * 1000, ar);
        int r2 = r1 ? r1 : draw(&t, &cs, ids.v, ids.n, o->gamma, o->draws, o->seed * 2 + 1 + (uint64_t)pi * 1000, sp);
        ivec_free(&ids);
        if (r1 || r2) goto done;
        for (int k = -1; k < N_TOK; k++) {
            gof_result g;
            if (compare(ar, sp, o->draws, k, &g)) goto done;
            int pass = g.p >= alpha;
            bad += !pass;
            char name[32];
            if (k < 0) snprintf(name, sizeof name, "joint of tokens 1-3");
            else snprintf(name, sizeof name, "token %d", k + 1);
            printf("| %d | %s | %.1f | %d | %.3g | %s |\n", pi + 1, name, g.stat, g.df, g.p, pass ? "same law" : "DIFFERENT");
        }
    }
    printf("\n%s\n", bad ? "FAILED: speculative sampling differs from autoregressive sampling"
                         : "speculative and autoregressive sampling agree on every test");
    rc = bad ? 1 : 0;
done:
    free(ar);
    free(sp);
    scheduler_close(&s);
    if (d.ops) drafter_close(&d);
    target_close(&t);
    return rc;
}
