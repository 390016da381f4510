/* gate_models.c — the losslessness gate on the real modules: a tiny random Llama target and an
 * untrained (perturbed, so every head is active) DFlash / DSpark-Markov / DSpark-RNN drafter.
 * Every distribution comes from production code: the target forward and logit processing, the
 * drafter's block pass, head and confidence (dspark_dist). The context is a fixed prompt and
 * anchor; a world prefix is the round's drafted tokens, so these cases check the first emitted
 * token's law of one round, exactly (enumeration) and by sampling (KS). */
#include "gate_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/common.h"
#include "../runtime/quant.h"
#include "../runtime/tiny_model.h"
#include "../verify/lossless.h"
#include "decode.h"

#define GV 16     /* vocabulary of the tiny target */
#define GGAMMA 3

typedef struct {
    target t;
    drafter d;
    request r;
    sampling_params sp;
    char path[512];
    float *tcache, *qcache, *ccache; /* per prefix of length <= GGAMMA: target, draft, confidence */
    unsigned char *have_t, *have_q;
    float *logits;
    lp_scratch scr;
} mworld;

static size_t slot(const int *p, int n) {
    size_t off = 0, idx = 0;
    for (int l = 0; l < n; l++) off += (size_t)1 << (4 * l);
    for (int i = 0; i < n; i++) idx = idx * GV + (size_t)p[i];
    return off + idx;
}
static size_t n_slots(void) {
    size_t s = 0;
    for (int l = 0; l <= GGAMMA; l++) s += (size_t)1 << (4 * l);
    return s;
}

static void mw_target(const gate_world *w, const int *prefix, int n, float *probs) {
    mworld *m = w->ctx;
    size_t k = slot(prefix, n);
    if (!m->have_t[k]) {
        int seq[8] = {request_anchor(&m->r)};
        memcpy(seq + 1, prefix, sizeof(int) * (size_t)n);
        int base = m->r.tkv->len;
        if (model_forward_one(&m->t.m, &m->t.fs, m->r.tkv, seq, 1 + n, 0, m->logits) ||
            logits_process(m->logits, GV, &m->sp, m->tcache + k * GV, &m->scr))
            fprintf(stderr, "gate world: %s\n", ds_errmsg());
        kv_cache_crop(m->r.tkv, base);
        m->have_t[k] = 1;
    }
    memcpy(probs, m->tcache + k * GV, sizeof(float) * GV);
}

static void mw_fill_draft(mworld *m, const int *prefix, int n) {
    size_t k = slot(prefix, n);
    if (m->have_q[k]) return;
    float conf = 1;
    if (dspark_dist(&m->d, &m->r, prefix, n, &m->sp, m->qcache + k * GV, &conf)) fprintf(stderr, "gate world: %s\n", ds_errmsg());
    m->ccache[k] = conf;
    m->have_q[k] = 1;
}

static void mw_draft(const gate_world *w, const int *prefix, int n, float *probs) {
    mworld *m = w->ctx;
    mw_fill_draft(m, prefix, n);
    memcpy(probs, m->qcache + slot(prefix, n) * GV, sizeof(float) * GV);
}

static float mw_conf(const gate_world *w, const int *prefix, int n) {
    mworld *m = w->ctx;
    mw_fill_draft(m, prefix, n);
    return m->ccache[slot(prefix, n)];
}

static void mworld_free(gate_world *w) {
    if (!w) return;
    mworld *m = w->ctx;
    if (m) {
        if (m->d.ops) {
            if (m->r.dstate) m->d.ops->end(&m->d, &m->r);
            drafter_close(&m->d);
        }
        if (m->r.tkv) request_free(&m->r, &m->t);
        target_close(&m->t);
        remove(m->path);
        free(m->tcache), free(m->qcache), free(m->ccache), free(m->have_t), free(m->have_q), free(m->logits);
        lp_scratch_free(&m->scr);
        free(m);
    }
    free(w);
}


static gate_world *mworld_new(const char *kind, sampling_params sp, uint64_t seed) {
    gate_world *w = ds_calloc(1, sizeof *w, "gate world");
    mworld *m = ds_calloc(1, sizeof *m, "gate world");
    float *cap = NULL;
    if (!w || !m) goto fail;
    w->ctx = m;
    m->sp = sp;
    snprintf(m->path, sizeof m->path, "/tmp/dsb-gate-%d-%s.gguf", (int)getpid(), kind);
    /* the tiny target: a GGUF file (F32, no tokenizer) opened like any model */
    tiny_spec ts = {32, 2, 4, 2, 64, GV, GGML_F32, GGML_F32, 0, 10000};
    if (tiny_model_write(m->path, &ts, seed) || target_open(&m->t, m->path, 1)) goto fail;
    /* a prompt of 6 tokens (captured for the drafter's context) and an anchor */
    int prompt[7];
    rng_t r;
    rng_seed(&r, seed ^ 0xabcdef);
    for (int i = 0; i < 7; i++) prompt[i] = (int)(rng_u64(&r) % (GV - 1)); /* the last id is the mask token */
    if (request_init(&m->r, &m->t, 0, prompt, 6, 8, 1)) goto fail;
    int taps[2] = {0, 1}, n = 6, D = m->t.m.cfg.dim;
    DS_TRYP(cap = ds_malloc(sizeof(float) * 2 * 6 * (size_t)D, "capture"));
    fwd_batch b = {.n_seq = 1, .kv = &m->r.tkv, .n_new = &n, .tokens = prompt, .n_capture = 2, .capture_layers = taps, .capture = cap};
    if (model_forward(&m->t.m, &m->t.fs, &b)) goto fail;
    if (ivec_push(&m->r.toks, prompt[6])) goto fail; /* the anchor: committed, not yet in the target's cache */
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"seed\": %llu, \"init_noise\": 0.5, \"layers\": 1, \"rank\": 8, \"gamma\": %d, \"taps\": [0, 1], "
             "\"mask_token\": %d}",
             (unsigned long long)seed, GGAMMA, GV - 1);
    cJSON *dc = cJSON_Parse(cfg);
    int orc = drafter_open(&m->d, kind, dc, &m->t);
    cJSON_Delete(dc);
    if (orc || m->d.ops->begin(&m->d, &m->r, cap)) goto fail;
    size_t ns = n_slots();
    DS_TRYP(m->tcache = ds_calloc(ns * GV, sizeof(float), "gate world"));
    DS_TRYP(m->qcache = ds_calloc(ns * GV, sizeof(float), "gate world"));
    DS_TRYP(m->ccache = ds_calloc(ns, sizeof(float), "gate world"));
    DS_TRYP(m->have_t = ds_calloc(ns, 1, "gate world"));
    DS_TRYP(m->have_q = ds_calloc(ns, 1, "gate world"));
    DS_TRYP(m->logits = ds_malloc(sizeof(float) * GV, "gate world"));
    w->V = GV;
    w->target = mw_target;
    w->draft = w->draft_verify = mw_draft;
    w->conf = m->d.has_conf ? mw_conf : NULL;
    free(cap);
    return w;
fail:
    free(cap);
    ds_error_prefix("gate world '%s'", kind);
    mworld_free(w);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The negative control on the same module: Algorithm 1 without its early stop. The SPS curve is
 * tuned to this module's confidences so the search without the stop verifies x1 exactly when
 * a1 * (1 + a2(x1)) is above its median: the decision to verify x1 then depends on x1 itself,
 * which biases the first token, and the enumeration must see it. (With the stop, the same curve
 * never verifies anything: SPS(2) is too low.) */
static int retro_control(gate_report *rep, const gate_world *w, const char *kind) {
    double v[GV];
    int none[1] = {0};
    float a1 = w->conf(w, none, 0);
    for (int x = 0; x < GV; x++) v[x] = a1 * (1.0 + w->conf(w, &x, 1));
    qsort(v, GV, sizeof *v, cmp_double);
    double med = 0.5 * (v[GV / 2 - 1] + v[GV / 2]);
    int B[4] = {1, 2, 3, 4};
    double curve[4] = {1.0, 0.1, 1.0 / (1.0 + med), 1e-3};
    sps_table sps;
    if (sps_from_arrays(&sps, B, curve, 4)) return -1;
    char name[160];
    snprintf(name, sizeof name, "control enumerate %s module, tiny target V=%d gamma=%d T=1.0 retrospective", kind, GV,
             GGAMMA);
    int rc = gate_exact_world(rep, w, "retrospective", &sps, GGAMMA, 1, name, 1);
    sps_free(&sps);
    return rc;
}

int gate_model_cases(gate_report *rep, long draws, double alpha_each) {
    static const char *kinds[3] = {"dflash", "dspark-markov", "dspark-rnn"};
    sampling_params procs[2] = {{1.0f, 0, 1.0f}, {0.7f, 0, 0.9f}};
    int B[4] = {1, 2, 3, 4};
    double jag[4] = {1.0, 0.6, 0.5, 0.45};
    sps_table sps;
    if (sps_from_arrays(&sps, B, jag, 4)) return -1;
    int rc = -1;
    for (int k = 0; k < 3; k++)
        for (int pi = 0; pi < 2; pi++) {
            gate_world *w = mworld_new(kinds[k], procs[pi], 100 + (uint64_t)k);
            if (!w) goto done;
            const char *scheds[3] = {"fixed", "threshold", "greedy"};
            for (int si = 0; si < (w->conf ? 3 : 1); si++) {
                char name[160];
                snprintf(name, sizeof name, "enumerate %s module, tiny target V=%d gamma=%d T=%.1f%s %s", kinds[k], GV, GGAMMA,
                         (double)procs[pi].temperature, procs[pi].top_p < 1 ? " top-p=0.9" : "", scheds[si]);
                if (gate_exact_world(rep, w, scheds[si], &sps, GGAMMA, 1, name, 0)) {
                    mworld_free(w);
                    goto done;
                }
            }
            if (pi == 0 && w->conf && retro_control(rep, w, kinds[k])) {
                mworld_free(w);
                goto done;
            }
            if (pi == 0 && draws > 0) {
                char name[160];
                snprintf(name, sizeof name, "ks first-token %s module, tiny target V=%d gamma=%d T=1.0", kinds[k], GV, GGAMMA);
                if (gate_ks_world(rep, w, "fixed", &sps, GGAMMA, draws, 4242 + (uint64_t)k, alpha_each, name, 0)) {
                    mworld_free(w);
                    goto done;
                }
            }
            mworld_free(w);
        }
    rc = 0;
done:
    sps_free(&sps);
    return rc;
}
