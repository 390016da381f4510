/* gate_round.c — the losslessness gate on the production round: see gate_round.h. */
#include "gate_round.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/quant.h"
#include "../runtime/tiny_model.h"
#include "../verify/enumerate.h"
#include "../verify/stats.h"
#include "decode.h"

#define RV 8            /* vocabulary of the tiny target */
#define RNMAX 4         /* tokens compared after the prefill token, at most */
#define RN 3            /* ... on the tiny target (first round: RN - 1 drafts) */
#define RPROMPT 6
#define RBATCH 16       /* requests per decode_rounds call in the sampling cases */
#define RGAMMA 3
#define MAX_OUT 4096    /* outcomes of a world: sequences of N tokens the target can emit */

/* the sampling settings of the cases; top-k keeps the enumeration small, so every setting can run
 * in CI; "full" (every token possible) is the slow one */
enum { S_TOPK, S_TOPP, S_GREEDY, S_FULL, S_REAL, S_MINP, S_REAL_MINP, S_COUNT };
static const sampling_params SETTINGS[S_COUNT] = {
    {1.0f, 4, 1.0f}, {0.8f, 5, 0.85f}, {0.0f, 0, 1.0f}, {1.0f, 0, 1.0f}, {1.0f, 3, 1.0f}, {1.2f, 0, 1.0f, 0.25f},
    {1.0f, 3, 1.0f, 0.2f}};
static const char *const SETTING_NAMES[S_COUNT] = {"T=1 top-k=4", "T=0.8 top-k=5 top-p=0.85", "T=0 (greedy)", "T=1",
                                                   "T=1 top-k=3", "T=1.2 min-p=0.25", "T=1 top-k=3 min-p=0.2"};

/* The target's law of the N tokens after the prefill token, over its support: sequences in
 * lexicographic order (so a sequence is found by binary search). */
typedef struct {
    int n, N;
    int seq[MAX_OUT][RNMAX];
    long double p[MAX_OUT];
} outcomes;

typedef struct {
    target *t, own;          /* the tiny target is the world's own; a real one is shared */
    int V, N;
    drafter d;
    scheduler s;
    sps_table sps;
    decode_cfg cfg;
    request req[RBATCH];
    int n_req, has_sched, has_own;
    int tree;                /* the drafter's tree mode (0: chains; 1, 2: gate_config_tree, _tree2) */
    int curve_a;             /* a lossless scheduler on Appendix A's curve: with its early stop it may verify nothing */
    char path[256];
    outcomes *law;
    double thr;              /* the tuned threshold (reports) */
    char dname[48];          /* the drafter's name in reports ("recycling tree" in its tree mode) */
    char tuned[96];
} rworld;

static void rw_close(rworld *w) {
    for (int i = 0; i < w->n_req; i++) {
        if (w->d.ops && w->req[i].dstate) w->d.ops->end(&w->d, &w->req[i]);
        request_free(&w->req[i], w->t);
    }
    if (w->d.ops) drafter_close(&w->d);
    if (w->has_sched) scheduler_close(&w->s);
    sps_free(&w->sps);
    if (w->has_own) target_close(&w->own);
    if (w->path[0]) remove(w->path);
    free(w->law);
    memset(w, 0, sizeof *w);
}

/* back to the state right after the prefill: prompt cached, first token committed, fresh streams */
static int rw_reset(rworld *w, request *r, uint64_t seed) {
    kv_cache_crop(r->tkv, r->n_prompt);
    r->toks.n = r->n_prompt + 1;
    r->done = 0;
    r->rounds = 0;
    r->wall_s = 0;
    request_seed(r, seed); /* production's seeding: streams that shared draws would bias the chi2 cases */
    if (w->has_sched && w->s.ops->reset) w->s.ops->reset(&w->s); /* a learning scheduler starts every replay afresh */
    return w->d.ops->rewind(&w->d, r);
}

static void attach(request *r, draw_enum *e) { r->rng_draft.en = r->vr.accept.en = r->vr.resample.en = e ? &e->hooks : NULL; }

static int cmp_seq(const int *a, const int *b, int N) {
    for (int i = 0; i < N; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* index of a sequence among the outcomes, -1 when the target cannot emit it */
static int find_outcome(const outcomes *o, const int *y) {
    int lo = 0, hi = o->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = cmp_seq(o->seq[mid], y, o->N);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* depth-first over the target's support: one forward of [anchor, prefix] per node, its last row
 * processed as the loop processes rows; children in increasing token order */
static int law_dfs(rworld *w, int *seq, int n, long double pr, float *logits, float *row, lp_scratch *scr) {
    outcomes *o = w->law;
    if (n == w->N) {
        if (o->n == MAX_OUT) {
            ds_error("gate: the target's support has more than %d sequences of %d tokens", MAX_OUT, w->N);
            return -1;
        }
        memcpy(o->seq[o->n], seq + 1, sizeof(int) * (size_t)w->N);
        o->p[o->n++] = pr;
        return 0;
    }
    request *r = &w->req[0];
    int base = r->tkv->len, V = w->V;
    if (model_forward_one(&w->t->m, &w->t->fs, r->tkv, seq, 1 + n, 0, logits)) return -1;
    kv_cache_crop(r->tkv, base);
    if (logits_process(logits, V, &w->cfg.sp, row + (size_t)n * V, scr)) return -1;
    const float *p = row + (size_t)n * V;
    long double sum = row_sum(p, V);
    for (int y = 0; y < V; y++) {
        if (!(p[y] > 0)) continue;
        seq[1 + n] = y;
        if (law_dfs(w, seq, n + 1, pr * (p[y] / sum), logits, row, scr)) return -1;
        p = row + (size_t)n * V; /* (the row of this depth is intact: deeper calls use later rows) */
    }
    return 0;
}

static int rw_target_law(rworld *w) {
    float *logits = ds_malloc(sizeof(float) * (size_t)w->V, "gate logits");
    float *rows = ds_malloc(sizeof(float) * (size_t)w->V * RNMAX, "gate rows");
    lp_scratch scr = {0};
    int seq[RNMAX + 1] = {request_anchor(&w->req[0])}, rc = -1;
    w->law = ds_calloc(1, sizeof *w->law, "gate outcomes");
    if (logits && rows && w->law) {
        w->law->N = w->N;
        rc = law_dfs(w, seq, 0, 1.0L, logits, rows, &scr);
    }
    free(logits);
    free(rows);
    lp_scratch_free(&scr);
    return rc;
}

/* Scheduler parameters under which it really verifies and its stopping rule binds: from the
 * drafter's own confidences (c_1 is fixed by the context, c_2 depends on x_1), the threshold
 * c_1 * median(c_2) and an SPS curve on which Algorithm 1 verifies x_2 exactly when c_2 is above
 * its median (and x_1 always). Without confidences a plain falling curve. */
static int rw_tune(rworld *w, int retro) {
    /* per request: a batch of n_req requests pays for its i-th draft each at B = (i + 1) n_req, so
     * the batch search admits what a lone request's would (on B = 1..4 a batch of 16 sits on the
     * curve's far end, where no draft paid: its sampled cases verified nothing) */
    int B[4] = {w->n_req, 2 * w->n_req, 3 * w->n_req, 4 * w->n_req};
    double S[4] = {1.0, 0.9, 0.8, 0.7};
    if (w->d.has_conf) {
        draft_block blk;
        float c2[128], a1 = 0;
        request *r = &w->req[0];
        int ns = w->has_own ? 128 : 32; /* proposals on the real target cost milliseconds each */
        if (draft_block_init(&blk, RGAMMA + 1, w->V, 1)) return -1;
        for (int i = 0; i < ns; i++) {
            if (rw_reset(w, r, 1000 + (uint64_t)i) || w->d.ops->propose(&w->d, r, 2, &w->cfg.sp, &blk)) {
                draft_block_free(&blk);
                return -1;
            }
            a1 = blk.conf[0];
            c2[i] = blk.conf[1];
        }
        draft_block_free(&blk);
        for (int i = 1; i < ns; i++) /* insertion sort: a few values */
            for (int j = i; j > 0 && c2[j] < c2[j - 1]; j--) {
                float t = c2[j];
                c2[j] = c2[j - 1];
                c2[j - 1] = t;
            }
        /* the most balanced split between two distinct values of c_2; a deterministic drafter's c_2
         * does not depend on the seed, so the split falls between c_2 and 1: x_1 alone is verified
         * in the first round, and later rounds' confidences (updated from what was committed)
         * decide by path */
        double m = 0.5 * ((double)c2[0] + 1);
        for (int i = 1, best = 1 << 30; i < ns; i++)
            if (c2[i] > c2[i - 1] && abs(i - ns / 2) < best) best = abs(i - ns / 2), m = 0.5 * ((double)c2[i - 1] + c2[i]);
        w->thr = a1 * m;
        if (retro) { /* Appendix A's shape: verifying x_1 alone never pays, x_1 + x_2 pays iff c_2 > m;
                      * with the early stop nothing is verified, without it x_1's fate depends on x_1 */
            S[1] = 0.1;
            S[2] = 1.0 / (1 + a1 + a1 * m);
            S[3] = 1e-3;
        } else {
            S[1] = 1.1 / (1 + a1);
            S[2] = (1 + a1) * S[1] / (1 + a1 + a1 * m);
            S[3] = 0.8 * S[2];
        }
        snprintf(w->tuned, sizeof w->tuned, "c1=%.3f median c2=%.3f", (double)a1, m);
    }
    return sps_from_arrays(&w->sps, B, S, 4);
}

/* the matmul contract of the targets the worlds open (gate_report.exact), set by the entry points */
static int g_exact;
static const char *g_backend;
static int g_verbose; /* each case's time on stderr (what CI's budget is spent on) */

/* the report labels every case with the contract asked for: a backend that has only the other one
 * must not run under the wrong label */
static int contract_matches(const backend *be) {
    DS_CHECK(be->exact == g_exact, "gate: backend '%s' computes on the %s contract, not the %s one asked for (%s)",
             be->name, be->exact ? "fp32" : "int8", g_exact ? "fp32" : "int8", be->exact ? "add --exact" : "drop --exact");
    return 0;
fail:
    return -1;
}

/* What a world is made of: the scheduler (NULL: none, the probes), the sampling setting, n_req
 * prefilled requests with one seed (so all share the first token), a shared real target or NULL for
 * the tiny random one, N tokens after the prefill, the drafter's tree mode (0: its gate_config; 1, 2:
 * gate_config_tree, _tree2) and whether the world is Appendix A's SPS curve. */
typedef struct {
    const char *sched;
    int setting, n_req;
    uint64_t seed;
    target *real;
    int N, tree, curve_a;
} world_opts;

/* A world: the tiny random target (real == NULL, its own GGUF file, random prompt) or a shared
 * real target (a chat prompt); the drafter opened with its gate_config. */
static int rw_open(rworld *w, const drafter_ops *dops, const world_opts *o) {
    const char *sched = o->sched; /* NULL: no scheduler (the probes) */
    memset(w, 0, sizeof *w);
    float *logits = NULL;
    int prompt[64], n_prompt = RPROMPT;
    if (o->real) {
        w->t = o->real;
        chat_msg msg = {"user", "Tell me a short story about a lighthouse keeper."};
        ivec ids = {0};
        if (chat_encode(&o->real->ct, &o->real->tk, &msg, 1, 1, &ids)) goto fail;
        n_prompt = DS_MIN(ids.n, 64);
        memcpy(prompt, ids.v + ids.n - n_prompt, sizeof(int) * (size_t)n_prompt);
        ivec_free(&ids);
    } else {
        snprintf(w->path, sizeof w->path, "/tmp/dsb-gate-%d-%llu.gguf", (int)getpid(), (unsigned long long)o->seed);
        /* Q8_0 layers and head: the fused kernels of the contract under test compute it; flat enough to branch */
        tiny_spec ts = {32, 2, 4, 2, 64, RV, GGML_Q8_0, GGML_Q8_0, 0, 10000, 0.15f};
        if (tiny_model_write(w->path, &ts, o->seed) || target_open(&w->own, w->path, &(backend_opts){.name = g_backend, .n_threads = 1, .exact = g_exact})) goto fail;
        w->t = &w->own;
        w->has_own = 1;
        DS_TRY(contract_matches(w->t->be));
        rng_t pr;
        rng_seed(&pr, o->seed ^ 0xabcdef);
        for (int i = 0; i < RPROMPT; i++) prompt[i] = (int)(rng_u64(&pr) % (RV - 1)); /* the last id is the mask token */
    }
    w->V = w->t->m.cfg.vocab_size;
    w->N = o->N;
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)w->V, "gate logits"));
    const char *gc = o->tree == 2 ? dops->gate_config_tree2
                     : o->tree   ? dops->gate_config_tree
                     : o->real && dops->gate_config_real ? dops->gate_config_real : dops->gate_config;
    cJSON *dc = gc ? ds_json_parse(gc, strlen(gc), NULL, NULL) : NULL; /* the whole string: a typo'd tail is no config */
    if (!dc) {
        ds_error("drafter '%s' has no valid gate_config (every registered drafter needs one)", dops->name);
        goto fail;
    }
    int orc = drafter_open(&w->d, dops->name, dc, w->t);
    cJSON_Delete(dc);
    if (orc) goto fail;
    snprintf(w->dname, sizeof w->dname, "%s%s", dops->name, o->tree == 2 ? " tree2" : o->tree ? " tree" : "");
    w->tree = o->tree;
    w->curve_a = o->curve_a;
    w->cfg = (decode_cfg){SETTINGS[o->setting], RGAMMA, &w->d, NULL, NULL, NULL, MODE_SPEC, FAULT_NONE};
    { /* one finished request first (the prompt, then its tokens again as the output): a drafter that
       * keeps state across requests (suffix's corpus of finished outputs) drafts from it in every case
       * below, as it does in a run after the first request */
        request warm;
        if (request_init(&warm, w->t, RBATCH, prompt, n_prompt, n_prompt + 1, 4242)) goto fail;
        int rc = decode_prefill(w->t, &warm, &w->cfg, logits, NULL);
        for (int i = 0; rc == 0 && i < n_prompt; i++) rc = ivec_push(&warm.toks, prompt[i]);
        if (warm.dstate) w->d.ops->end(&w->d, &warm);
        request_free(&warm, w->t);
        if (rc) goto fail;
    }
    for (int i = 0; i < o->n_req; i++) {
        if (request_init(&w->req[i], w->t, i, prompt, n_prompt, 1 + o->N, 4242)) goto fail;
        w->n_req = i + 1;
        if (decode_prefill(w->t, &w->req[i], &w->cfg, logits, NULL)) goto fail;
        DS_CHECK(request_anchor(&w->req[i]) == request_anchor(&w->req[0]), "gate: prefill is not reproducible");
    }
    /* one proposal and a rewind: a drafter that caches the prompt lazily (vanilla) now starts every
     * replay from the same cache (a batched prompt forward and a one-token forward round differently) */
    {
        draft_block blk;
        if (draft_block_init(&blk, RGAMMA + 1, w->V, w->d.has_conf)) goto fail;
        for (int i = 0; i < o->n_req; i++)
            if (rw_reset(w, &w->req[i], 0) || w->d.ops->propose(&w->d, &w->req[i], 1, &w->cfg.sp, &blk)) {
                draft_block_free(&blk);
                goto fail;
            }
        draft_block_free(&blk);
    }
    /* the schedulers without an early stop get Appendix A's curve, on which that leaks; a lossless one
     * asked for it (curve_a) must show it has the early stop there */
    if (rw_target_law(w) ||
        rw_tune(w, o->curve_a || (sched && (!strcmp(sched, "retrospective") || !strcmp(sched, "async-topk-now")))))
        goto fail;
    if (sched) {
        const scheduler_ops *so = scheduler_find(sched, 1);
        cJSON *sc = so && so->gate_config ? ds_json_parse(so->gate_config, strlen(so->gate_config), NULL, NULL) : NULL;
        DS_CHECK(!so || !so->gate_config || sc, "scheduler '%s': its gate_config is not valid JSON", sched);
        int src = so ? scheduler_open(&w->s, sched, sc, 1) : -1;
        cJSON_Delete(sc);
        if (src) goto fail;
        w->has_sched = 1;
        if (w->d.has_conf) w->s.threshold = w->thr;
        /* a scheduler that prices drafts gets a fixed cost (the loop's measured one would make replays
         * differ); a negligible one: the verify forward's growth in the tuned SPS curve alone stops
         * blocks by path (vanilla + greedy: 59 % of the asked drafts made, a tuned cost changed none) */
        w->s.draft_cost = 1e-9;
    }
    w->cfg.s = &w->s;
    w->cfg.sps = &w->sps;
    free(logits);
    return 0;
fail:
    free(logits);
    ds_error_prefix("gate world (%s, %s)", dops->name, sched ? sched : "-");
    rw_close(w);
    return -1;
}

/* A scheduler marked gate_sparse runs its costly cases with these drafters only (every drafter when
 * --drafter asks for one): a model drafter and a training-free one */
static int representative(const drafter_ops *d) { return !strcmp(d->name, "vanilla") || !strcmp(d->name, "suffix"); }

static void set_fault(rworld *w, verify_fault f) {
    w->cfg.fault = f;
    w->d.fault = f;
}

/* ------------------------------------------------------------------------- exact */

typedef struct {
    double tv, verify_ratio; /* E[verified] / E[drafted] over the whole run */
    double accept_ratio;     /* E[accepted] / E[verified] */
    double draft_ratio;      /* E[drafted] / E[asked]: < 1 where draft_more stopped blocks */
    long paths;
} exact_out;

static int rw_exact(rworld *w, exact_out *o) {
    draw_enum en;
    const outcomes *L = w->law;
    long double *law = ds_calloc((size_t)L->n, sizeof(long double), "gate law"), outside = 0, ev = 0, ed = 0, ea = 0,
                eq = 0;
    request *r = &w->req[0], *rs[1] = {r};
    int rc = -1;
    if (!law || draw_enum_init(&en)) {
        free(law);
        return -1;
    }
    do {
        draw_enum_begin(&en);
        if (rw_reset(w, r, 0)) goto done;
        attach(r, &en);
        w->s.rng.en = &en.hooks; /* a randomised scheduler's draws are branches too (rw_reset reseeded it) */
        decode_stats st = {0};
        if (decode_rounds(w->t, rs, 1, &w->cfg, &st)) goto done;
        attach(r, NULL);
        w->s.rng.en = NULL;
        if (draw_enum_end(&en)) goto done;
        DS_CHECK(request_n_out(r) == 1 + w->N, "gate: a run emitted %d tokens, not %d", request_n_out(r), 1 + w->N);
        int i = find_outcome(L, r->toks.v + r->n_prompt + 1);
        if (i < 0) outside += en.weight; /* a sequence the target cannot emit */
        else law[i] += en.weight;
        ev += en.weight * st.verified;
        ed += en.weight * st.drafted;
        ea += en.weight * st.accepted;
        eq += en.weight * st.asked;
    } while (draw_enum_next(&en));
    long double d = outside;
    for (int i = 0; i < L->n; i++) d += fabsl(law[i] - L->p[i]);
    o->tv = (double)(d / 2);
    o->verify_ratio = ed > 0 ? (double)(ev / ed) : 0;
    o->accept_ratio = ev > 0 ? (double)(ea / ev) : 0;
    o->draft_ratio = eq > 0 ? (double)(ed / eq) : 0;
    o->paths = en.paths;
    rc = 0;
fail:
done:
    attach(r, NULL);
    w->s.rng.en = NULL;
    draw_enum_free(&en);
    free(law);
    return rc;
}

/* ---------------------------------------------------------------------- sampling */

typedef struct {
    double p_joint, p_marg[RNMAX], p_min;
    double verify_ratio;
} sample_out;

static int rw_sample(rworld *w, long draws, uint64_t seed, sample_out *o) {
    const outcomes *L = w->law;
    int K = L->n + 1, V = w->V; /* the last bin: sequences the target cannot emit */
    long *joint = ds_calloc((size_t)K, sizeof(long), "gate counts"), *marg = ds_calloc((size_t)RN * V, sizeof(long), "gate counts");
    double *prob = ds_calloc((size_t)K, sizeof(double), "gate probs"), *pm = ds_calloc((size_t)V, sizeof(double), "gate probs");
    request *rs[RBATCH];
    decode_stats st = {0};
    int rc = -1;
    if (!joint || !marg || !prob || !pm) goto done;
    for (int j = 0; j < w->n_req; j++) rs[j] = &w->req[j];
    for (long i = 0; i < draws; i += w->n_req) {
        int nb = (int)DS_MIN((long)w->n_req, draws - i);
        for (int j = 0; j < nb; j++)
            if (rw_reset(w, rs[j], seed + (uint64_t)(i + j))) goto done;
        if (decode_rounds(w->t, rs, nb, &w->cfg, &st)) goto done;
        for (int j = 0; j < nb; j++) {
            const int *y = rs[j]->toks.v + rs[j]->n_prompt + 1;
            int c = find_outcome(L, y);
            joint[c < 0 ? L->n : c]++;
            for (int k = 0; k < w->N; k++) marg[k * V + y[k]]++;
        }
    }
    long counted = 0; /* every replay's outcome in a bin: a request left out of the count hides its law */
    for (int c = 0; c < K; c++) counted += joint[c];
    DS_CHECK(counted == draws, "gate: %ld outcomes counted of %ld replays", counted, draws);
    gof_result g;
    for (int c = 0; c < L->n; c++) prob[c] = (double)L->p[c];
    chi2_gof(joint, prob, K, &g);
    o->p_joint = o->p_min = g.p;
    for (int k = 0; k < w->N; k++) {
        memset(pm, 0, sizeof(double) * (size_t)V);
        for (int c = 0; c < L->n; c++) pm[L->seq[c][k]] += prob[c];
        chi2_gof(marg + (size_t)k * V, pm, V, &g);
        o->p_marg[k] = g.p;
        o->p_min = fmin(o->p_min, g.p);
    }
    o->verify_ratio = st.drafted ? (double)st.verified / (double)st.drafted : 0;
    rc = 0;
fail:
done:
    free(joint), free(marg), free(prob), free(pm);
    return rc;
}

/* ----------------------------------------------------------------- q-consistency */

/* three requests, one sampling setting each, proposals interleaved request by request */
static const sampling_params QSETS[3] = {{1.0f, 0, 1.0f}, {0.7f, 5, 1.0f}, {1.3f, 0, 0.8f}};

/* for a tree whose children are drawn (TREE_WOR) the settings truncate the rows (top-k, top-p, min-p),
 * which keeps the number of trees small and puts the reported rows' truncation under test */
static const sampling_params QSETS_TREE[3] = {{0.8f, 5, 0.85f}, {1.0f, 3, 1.0f}, {1.2f, 0, 1.0f, 0.25f}};

/* a draw's law over the tiny vocabulary */
static void frame_law(const draw_frame *f, long double *law) {
    for (int v = 0; v < RV; v++) law[v] = 0;
    for (int i = 0; i < f->n_opt; i++) law[f->opt[i]] = f->w[i];
}

/* the largest difference between a reported row (normalised by its positive mass) and a law */
static long double row_vs_law(const float *q, const long double *law) {
    long double s = 0, d = 0;
    for (int v = 0; v < RV; v++) s += q[v] > 0 ? q[v] : 0;
    for (int v = 0; v < RV; v++) d = fmaxl(d, fabsl((s > 0 && q[v] > 0 ? q[v] / s : 0) - law[v]));
    return d;
}

/* one chain's drafts: draw k made draft k. A deterministic drafter draws nothing: its law at every
 * position is delta(x_k); so does combine when it chose a deterministic member's draft (a proposal that
 * drew nothing is judged as one-hot rows, which a q that is not one-hot fails). The one-hot law is a row,
 * not a one-option draw_frame on the stack: GCC 12.2 at -O2 deleted such a frame's `w[0] = 1` store as
 * dead (its dse2 pass, long double weights only; -fno-tree-dse or double weights kept it) and the
 * check read TV 1 for every deterministic drafter */
static int q_judge_chain(const rworld *w, const draw_enum *en, const draft_block *blk, double *worst) {
    int det = w->d.deterministic || en->n == 0;
    DS_CHECK(en->n == (det ? 0 : blk->n), "gate: %s drew %d times for %d drafts", w->d.ops->name, en->n, blk->n);
    for (int k = 0; k < blk->n; k++) {
        long double law[RV] = {0};
        if (det) law[blk->tok[k]] = 1;
        else frame_law(&en->f[k], law);
        *worst = fmax(*worst, (double)row_vs_law(blk->q + (size_t)k * RV, law));
    }
    return 0;
fail:
    return -1;
}

/* one drawn tree: nodes come best first, not in the order they were drawn, so each is matched to an
 * unused draw that took its token, the closest law first (draws with equal laws and tokens are
 * interchangeable). A node with no draw of its own (a token placed, not drawn) or a draw with no node
 * is an error: the verifier's rule for drawn children needs every node's law. */
static int q_judge_tree(const rworld *w, const draw_enum *en, const draft_block *blk, double *worst) {
    DS_CHECK(blk->n == 0 || blk->tree == TREE_WOR, "gate: %s drew a tree at T > 0 that is not marked as drawn "
             "without replacement (kind %d)", w->d.ops->name, (int)blk->tree);
    int used[DRAFT_TREE_MAX + 1] = {0}, n_cat = 0;
    for (int j = 0; j < en->n; j++) n_cat += en->f[j].kind == 0;
    DS_CHECK(n_cat == blk->n && en->n <= DRAFT_TREE_MAX, "gate: %s drew %d times for a tree of %d nodes",
             w->d.ops->name, n_cat, blk->n);
    for (int i = 0; i < blk->n; i++) {
        long double best = 1;
        int bj = -1;
        for (int j = 0; j < en->n; j++) {
            const draw_frame *f = &en->f[j];
            if (used[j] || f->kind != 0 || f->opt[f->pick] != blk->tok[i]) continue;
            long double law[RV], d;
            frame_law(f, law);
            d = row_vs_law(blk->q + (size_t)i * RV, law);
            if (bj < 0 || d < best) best = d, bj = j;
        }
        if (bj >= 0) used[bj] = 1;
        *worst = fmax(*worst, (double)best);
    }
    return 0;
fail:
    return -1;
}

/* exact: every draft path of propose (every tree, in a tree world); each draw's law against the row
 * reported for what it drew */
static int q_exact(rworld *w, double *worst, long *paths) {
    draw_enum en;
    draft_block blk;
    int rc = -1, g = w->tree ? w->d.tree_nodes : RGAMMA;
    *worst = 0;
    *paths = 0;
    if (draw_enum_init(&en)) return -1;
    if (draft_block_init(&blk, g + 1, RV, w->d.has_conf)) {
        draw_enum_free(&en);
        return -1;
    }
    for (int ri = 0; ri < 3; ri++) {
        request *r = &w->req[ri];
        do {
            draw_enum_begin(&en);
            if (rw_reset(w, r, 0)) goto done;
            attach(r, &en);
            int prc = w->d.ops->propose(&w->d, r, g, w->tree ? &QSETS_TREE[ri] : &QSETS[ri], &blk);
            attach(r, NULL);
            if (prc || draw_enum_end(&en)) goto done;
            if ((w->tree ? q_judge_tree : q_judge_chain)(w, &en, &blk, worst)) goto done;
        } while (draw_enum_next(&en));
        *paths += en.paths;
        en.paths = 0;
    }
    rc = 0;
done:
    draft_block_free(&blk);
    draw_enum_free(&en);
    return rc;
}

/* seed-matched resampling: propose with seeds 0..S-1 from the same state; q_1 must not depend on
 * the seed, q_2 only on x_1; chi-square of x_1 against q_1 and of (x_1, x_2) against q_1 q_2 */
typedef struct {
    double p1[3], p12[3], p_min, mean_max_q1;
    int seed_dependent; /* a reported row changed with the seed alone */
} qstat_out;

static int q_sample(rworld *w, long S, qstat_out *o) {
    draft_block blk[3];
    float q1[3][RV], q2[3][RV][RV];
    unsigned char seen[3][RV] = {{0}};
    long c1[3][RV] = {{0}}, c12[3][RV * RV] = {{0}};
    int rc = -1, nb = 0, x1_first[3] = {0}, x2_first[3] = {0};
    memset(o, 0, sizeof *o);
    for (; nb < 3; nb++)
        if (draft_block_init(&blk[nb], RGAMMA + 1, RV, w->d.has_conf)) goto done;
    for (long s = 0; s < S; s++)
        for (int ri = 0; ri < 3; ri++) {
            request *r = &w->req[ri];
            if (rw_reset(w, r, 7000 + (uint64_t)s) || w->d.ops->propose(&w->d, r, 2, &QSETS[ri], &blk[ri])) goto done;
            DS_CHECK(blk[ri].n == 2, "gate: %s proposed %d drafts, asked for 2", w->d.ops->name, blk[ri].n);
            if (s > 0 && w->d.deterministic && (blk[ri].tok[0] != x1_first[ri] || blk[ri].tok[1] != x2_first[ri]))
                o->seed_dependent = 1; /* a deterministic draft changed with the seed alone */
            if (s == 0) x1_first[ri] = blk[ri].tok[0], x2_first[ri] = blk[ri].tok[1];
            int x1 = blk[ri].tok[0], x2 = blk[ri].tok[1];
            DS_CHECK(x1 >= 0 && x1 < RV && x2 >= 0 && x2 < RV, "gate: %s drafted a token outside the vocabulary",
                     w->d.ops->name);
            if (s == 0) memcpy(q1[ri], blk[ri].q, sizeof q1[ri]);
            else if (memcmp(q1[ri], blk[ri].q, sizeof q1[ri])) o->seed_dependent = 1;
            if (!seen[ri][x1]) memcpy(q2[ri][x1], blk[ri].q + RV, sizeof q2[ri][x1]), seen[ri][x1] = 1;
            else if (memcmp(q2[ri][x1], blk[ri].q + RV, sizeof q2[ri][x1])) o->seed_dependent = 1;
            c1[ri][x1]++;
            c12[ri][x1 * RV + x2]++;
        }
    o->p_min = 1;
    for (int ri = 0; ri < 3; ri++) {
        double p1[RV], p12[RV * RV] = {0}, s1 = row_sum(q1[ri], RV), mx = 0;
        gof_result g;
        for (int v = 0; v < RV; v++) p1[v] = q1[ri][v] > 0 ? q1[ri][v] / s1 : 0, mx = fmax(mx, p1[v]);
        o->mean_max_q1 += mx / 3;
        chi2_gof(c1[ri], p1, RV, &g);
        o->p1[ri] = g.p;
        for (int a = 0; a < RV; a++) {
            if (!seen[ri][a]) { /* never drawn: its mass in one cell (its count is 0 anyway) */
                p12[a * RV] = p1[a];
                continue;
            }
            double s2 = row_sum(q2[ri][a], RV);
            for (int b = 0; b < RV; b++) p12[a * RV + b] = p1[a] * (q2[ri][a][b] > 0 ? q2[ri][a][b] / s2 : 0);
        }
        chi2_gof(c12[ri], p12, RV * RV, &g);
        o->p12[ri] = g.p;
        o->p_min = fmin(o->p_min, fmin(o->p1[ri], o->p12[ri]));
    }
    rc = 0;
fail:
done:
    for (int i = 0; i < nb; i++) draft_block_free(&blk[i]);
    return rc;
}

/* ------------------------------------------------------------------------ records */

/* Lossless exact cases must agree to rounding: the enumerated law sums long-double path weights
 * computed from the same float rows the reference law uses (the verify forward and the reference
 * forwards give identical rows on this F32 target; measured TV <= 1e-16). A control is flagged
 * above 1000x that tolerance; the smallest effect seen is ~7e-5. */
#define EXACT_TOL 1e-12
#define CONTROL_P 1e-6  /* a statistical control is flagged below this p */

typedef enum { K_EXACT, K_SAMPLE, K_QCONS } case_kind;
typedef struct {
    const char *drafter, *sched; /* NULL drafter: every registered one (lossless cases) */
    int setting;
    case_kind kind;
    verify_fault fault;
    int tree;                    /* the drafter's tree mode (gate_config_tree; 2: gate_config_tree2) */
    int block;                   /* chains verified by block verification */
} control_case;

/* each mutant through at least two checks */
static const control_case CONTROLS[] = {
    {"dspark-markov", "fixed", S_TOPK, K_EXACT, FAULT_SHIFTED_Q},
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_SHIFTED_Q},
    {"dspark-markov", "fixed", S_TOPK, K_SAMPLE, FAULT_SHIFTED_Q},
    {"dspark-markov", "fixed", S_TOPP, K_EXACT, FAULT_DRAFT_NO_TOP_P},
    {"dspark-rnn", "threshold", S_TOPP, K_EXACT, FAULT_DRAFT_NO_TOP_P},
    {"dspark-markov", NULL, 0, K_QCONS, FAULT_DRAFT_NO_TOP_P},
    {"ngram", "fixed", S_TOPK, K_EXACT, FAULT_DRAFT_WRONG_Q},
    {"ngram", "threshold", S_TOPP, K_EXACT, FAULT_DRAFT_WRONG_Q},
    {"ngram", NULL, 0, K_QCONS, FAULT_DRAFT_WRONG_Q},
    {"suffix", "greedy", S_TOPK, K_EXACT, FAULT_DRAFT_WRONG_Q},
    {"suffix", NULL, 0, K_QCONS, FAULT_DRAFT_WRONG_Q},
    {"medusa", "fixed", S_TOPP, K_EXACT, FAULT_DRAFT_NO_TOP_P},
    {"medusa", NULL, 0, K_QCONS, FAULT_DRAFT_NO_TOP_P},
    {"mtp", "greedy", S_TOPP, K_EXACT, FAULT_DRAFT_NO_TOP_P},
    {"mtp", NULL, 0, K_QCONS, FAULT_DRAFT_NO_TOP_P},
    {"eagle3", "fixed", S_TOPP, K_EXACT, FAULT_DRAFT_NO_TOP_P},
    {"eagle3", NULL, 0, K_QCONS, FAULT_DRAFT_NO_TOP_P},
    {"dflash", "fixed", S_TOPK, K_EXACT, FAULT_ACCEPT_BIAS},
    {"dspark-markov", "greedy", S_TOPK, K_EXACT, FAULT_ACCEPT_BIAS},
    {"vanilla", "fixed", S_TOPP, K_EXACT, FAULT_ACCEPT_BIAS},
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_BONUS_ROW},
    {"dspark-rnn", "greedy", S_TOPP, K_EXACT, FAULT_BONUS_ROW},
    {"dspark-markov", "retrospective", S_TOPK, K_EXACT, FAULT_NONE}, /* Algorithm 1 without its early stop */
    {"dspark-rnn", "retrospective", S_TOPK, K_EXACT, FAULT_NONE},
    {"dspark-markov", "async-topk-now", S_TOPK, K_EXACT, FAULT_NONE}, /* async-topk with no delay */
    {"combine", "fixed", S_TOPK, K_EXACT, FAULT_COMBINE_PEEKS}, /* the choice reads the target's row and the draws */
    {"combine", "fixed", S_TOPK, K_SAMPLE, FAULT_COMBINE_PEEKS},
    {"combine", "greedy", S_TOPK, K_EXACT, FAULT_DRAFT_STOP_PEEKS}, /* its chosen member stops by the scheduler's rule */
    {"vanilla", "greedy", S_TOPK, K_EXACT, FAULT_DRAFT_STOP_PEEKS}, /* the draft-length stop reads x_k */
    {"vanilla", "greedy", S_TOPP, K_EXACT, FAULT_DRAFT_STOP_PEEKS},
    {"vanilla", "fixed", S_TOPK, K_SAMPLE, FAULT_REUSED_UNIFORM},
    {"dspark-markov", "threshold", S_TOPK, K_SAMPLE, FAULT_REUSED_UNIFORM},
    {"recycling", "fixed", S_TOPK, K_EXACT, FAULT_TREE_RATIO, 1}, /* top-k children judged by p/q */
    {"recycling", "fixed", S_TOPP, K_EXACT, FAULT_TREE_RATIO, 1},
    {"recycling", "fixed", S_TOPK, K_EXACT, FAULT_TREE_SIBLING_ROW, 1}, /* a node sees its sibling's row */
    {"recycling", "fixed", S_TOPP, K_EXACT, FAULT_TREE_SIBLING_ROW, 1},
    {"recycling", "fixed", S_TOPK, K_EXACT, FAULT_TREE_KV_KEPT, 1}, /* a rejected branch's rows kept */
    {"recycling", "fixed", S_TOPP, K_EXACT, FAULT_TREE_KV_KEPT, 1},
    {"vanilla", "fixed", S_TOPP, K_EXACT, FAULT_TREE_WOR_PARENT_Q, 2}, /* a drawn child's law with its siblings */
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_TREE_WOR_PARENT_Q, 2},
    {"vanilla", "fixed", S_TOPK, K_SAMPLE, FAULT_TREE_WOR_PARENT_Q, 2},
    {"vanilla", "fixed", S_TOPP, K_EXACT, FAULT_TREE_CONF_TOKEN, 2}, /* a drawn node's place reads its token */
    {"vanilla", "greedy", S_TOPK, K_SAMPLE, FAULT_TREE_CONF_TOKEN, 2},
    {"vanilla", "greedy", S_TOPP, K_EXACT, FAULT_TREE_KEEP_TOKEN, 2}, /* a drawn sibling's existence reads its token */
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_TREE_KEEP_TOKEN, 2},
    /* ... by its token's share of what its earlier siblings left: rarely triggered where top-p leaves a
     * sibling little room (T = 0.8 top-p: TV 6e-20, 12 paths; chi-square at 40,000 draws p = 0.08-0.3),
     * so its checks are the top-k worlds' enumerations (TV 0.005 fixed, 0.02 greedy) */
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_TREE_KEEP_SHARE, 2},
    {"vanilla", "greedy", S_TOPK, K_EXACT, FAULT_TREE_KEEP_SHARE, 2},
    {"vanilla", "fixed", S_TOPK, K_EXACT, FAULT_BLOCK_TOKENWISE, 0, 1}, /* block verification, token-wise tests */
    {"vanilla", "fixed", S_TOPK, K_SAMPLE, FAULT_BLOCK_TOKENWISE, 0, 1},
    {"dspark-markov", "fixed", S_MINP, K_EXACT, FAULT_DRAFT_NO_MIN_P}, /* a draft sampled without min-p */
    {"vanilla", "fixed", S_MINP, K_EXACT, FAULT_DRAFT_NO_MIN_P},
    {"vanilla", "fixed", S_MINP, K_EXACT, FAULT_VERIFY_NO_MIN_P}, /* the target's verified rows without it */
    {"dspark-markov", "greedy", S_MINP, K_EXACT, FAULT_VERIFY_NO_MIN_P},
    {"vanilla", NULL, 0, K_QCONS, FAULT_TREE_WOR_PARENT_Q, 2}, /* a drawn child's row with its siblings, reported */
    {"vanilla", NULL, 0, K_QCONS, FAULT_TREE_WOR_PARENT_Q, 1}, /* a sibling reported with its draft's row q_k */
    {"vanilla", "fixed", S_TOPP, K_EXACT, FAULT_TREE_WOR_PARENT_Q, 1},
};
#define N_CONTROLS (int)(sizeof CONTROLS / sizeof *CONTROLS)

/* pending statistical records of lossless cases: their pass is decided once the count is known */
typedef struct {
    int idx[512];
    int n;
} pending;

static void add_pending(pending *pd, gate_report *rep) {
    if (pd->n < (int)(sizeof pd->idx / sizeof *pd->idx)) pd->idx[pd->n++] = rep->n - 1;
}

static int run_exact(gate_report *rep, rworld *w, const char *sched, int setting, verify_fault fault, int control) {
    exact_out o;
    set_fault(w, fault);
    int rc = rw_exact(w, &o);
    set_fault(w, FAULT_NONE);
    if (rc) return -1;
    char name[160];
    /* every scheduler but fixed has a rule that stops short of the proposed drafts: it must bind */
    /* (or a draft-side rule: drafts made fewer than asked) */
    int binds = o.verify_ratio > 0 && (!strcmp(w->s.ops->name, "fixed") || o.verify_ratio < 1 || o.draft_ratio < 1);
    snprintf(name, sizeof name, "%s%sround exact %s %s %s%s%s: %ld paths, verifies %.0f%% of drafts, accepts %.0f%%",
             control ? "control " : "", w->has_own ? "" : "SmolLM2 ", w->dname, sched, SETTING_NAMES[setting],
             fault ? " mutant " : "", fault ? VERIFY_FAULT_NAMES[fault] : "", o.paths, 100 * o.verify_ratio,
             100 * o.accept_ratio);
    if (o.draft_ratio < 1)
        snprintf(name + strlen(name), sizeof name - strlen(name), ", drafts %.0f%% of asked", 100 * o.draft_ratio);
    /* a lossless case must also exercise the scheduler: it verifies, and a stopping rule binds */
    /* (on the real target at N = 2 the first round has one draft: no stopping rule can bind there,
     * which the tiny worlds check; on Appendix A's curve greedy's early stop verifies nothing, and the
     * case is there to go red when a search does not stop) */
    int pass = control ? o.tv > 1000 * EXACT_TOL
                       : o.tv < EXACT_TOL && (setting == S_GREEDY || !w->has_own || binds || w->curve_a);
    if (control && !fault) snprintf(name + strlen(name), sizeof name - strlen(name), " (%s)", w->tuned);
    gate_add(rep, name, "exact-tv", o.paths, o.tv, NAN, control, pass);
    return 0;
}

static int run_sample(gate_report *rep, pending *pd, rworld *w, const char *sched, long draws, verify_fault fault,
                      int control, uint64_t seed) {
    sample_out o;
    set_fault(w, fault);
    int rc = rw_sample(w, draws, seed, &o);
    set_fault(w, FAULT_NONE);
    if (rc) return -1;
    char name[200], base[128];
    snprintf(base, sizeof base, "%s %s %s%s%s (batch %d, verifies %.0f%%)", w->dname, sched, SETTING_NAMES[S_TOPK],
             fault ? " mutant " : "", fault ? VERIFY_FAULT_NAMES[fault] : "", w->n_req, 100 * o.verify_ratio);
    if (control) {
        snprintf(name, sizeof name, "control round chi2 %s: min p of joint + %d marginals", base, RN);
        gate_add(rep, name, "chi2", draws, NAN, o.p_min, 1, o.p_min < CONTROL_P);
        return 0;
    }
    snprintf(name, sizeof name, "round chi2 joint of %d tokens %s", RN, base);
    gate_add(rep, name, "chi2", draws, NAN, o.p_joint, 0, 0);
    add_pending(pd, rep);
    for (int k = 0; k < RN; k++) {
        snprintf(name, sizeof name, "round chi2 token %d %s", k + 2, base);
        gate_add(rep, name, "chi2", draws, NAN, o.p_marg[k], 0, 0);
        add_pending(pd, rep);
    }
    return 0;
}

static int run_qcons(gate_report *rep, pending *pd, rworld *w, long S, verify_fault fault, int control) {
    double worst;
    long paths;
    qstat_out o;
    char name[256];
    const char *mut = fault ? VERIFY_FAULT_NAMES[fault] : "";
    set_fault(w, fault);
    if (w->tree) { /* a drawn tree: the exact check only (x_1, x_2 of the chain's chi-square are no path) */
        int rc = q_exact(w, &worst, &paths);
        set_fault(w, FAULT_NONE);
        if (rc) return -1;
        snprintf(name, sizeof name, "%sq-consistency exact %s%s%s: each node's reported row vs the law its token was "
                 "drawn from over %ld drawn trees, 3 requests", control ? "control " : "", w->dname,
                 fault ? " mutant " : "", mut, paths);
        gate_add(rep, name, "exact-tv", paths, worst, NAN, control, control ? worst > 1000 * EXACT_TOL : worst < EXACT_TOL);
        return 0;
    }
    int rc = q_exact(w, &worst, &paths) || q_sample(w, S, &o);
    set_fault(w, FAULT_NONE);
    if (rc) return -1;
    snprintf(name, sizeof name, "%sq-consistency exact %s%s%s: sampled law vs reported q over %ld draft paths, 3 requests",
             control ? "control " : "", w->dname, fault ? " mutant " : "", mut, paths);
    gate_add(rep, name, "exact-tv", paths, worst, NAN, control, control ? worst > 1000 * EXACT_TOL : worst < EXACT_TOL);
    if (control) {
        snprintf(name, sizeof name, "control q-consistency chi2 %s mutant %s: min p of 6 tests", w->dname, mut);
        gate_add(rep, name, "chi2", S, NAN, o.p_min, 1, o.p_min < CONTROL_P || o.seed_dependent);
        return 0;
    }
    if (w->d.deterministic) { /* the exact check above saw one-hot rows; no law to sample here */
        snprintf(name, sizeof name, "q-consistency %s: drafts and reported rows identical over %ld seeds, max q_1 %.2f "
                 "(deterministic drafts)", w->dname, S, o.mean_max_q1);
        gate_add(rep, name, "exact-tv", S, o.seed_dependent, NAN, 0, !o.seed_dependent && o.mean_max_q1 == 1);
        return 0;
    }
    snprintf(name, sizeof name, "q-consistency %s: reported rows depend only on the context and x_<k (not the seed); "
             "mean max q_1 %.2f (stochastic drafts)", w->dname, o.mean_max_q1);
    gate_add(rep, name, "exact-tv", S, o.seed_dependent, NAN, 0, !o.seed_dependent && o.mean_max_q1 < 0.95);
    for (int ri = 0; ri < 3; ri++) {
        snprintf(name, sizeof name, "q-consistency chi2 x1 %s request %d (T=%.1f top-k=%d top-p=%.1f)", w->dname, ri,
                 (double)QSETS[ri].temperature, QSETS[ri].top_k, (double)QSETS[ri].top_p);
        gate_add(rep, name, "chi2", S, NAN, o.p1[ri], 0, 0);
        add_pending(pd, rep);
        snprintf(name, sizeof name, "q-consistency chi2 (x1, x2) %s request %d", w->dname, ri);
        gate_add(rep, name, "chi2", S, NAN, o.p12[ri], 0, 0);
        add_pending(pd, rep);
    }
    return 0;
}

/* run_one's flags: the chains verified by block verification; the world on Appendix A's SPS curve */
enum { CASE_BLOCK = 1, CASE_CURVE_A = 2 };

static int run_one(gate_report *rep, pending *pd, const drafter_ops *dops, const char *sched, int setting, case_kind kind,
                   verify_fault fault, int control, long draws, uint64_t seed, int tree, int flags) {
    rworld w;
    double t0 = ds_now();
    int n_req = kind == K_SAMPLE ? RBATCH : kind == K_QCONS ? 3 : 1;
    world_opts wo = {.sched = sched ? sched : "fixed", .setting = kind == K_QCONS ? S_TOPK : setting, .n_req = n_req,
                     .seed = seed, .N = RN, .tree = tree, .curve_a = flags & CASE_CURVE_A};
    if (rw_open(&w, dops, &wo))
        return -1;
    if (flags & CASE_CURVE_A) snprintf(w.dname + strlen(w.dname), sizeof w.dname - strlen(w.dname), " Appendix-A curve");
    if (flags & CASE_BLOCK) {
        w.cfg.rule = VERIFY_BLOCK;
        snprintf(w.dname + strlen(w.dname), sizeof w.dname - strlen(w.dname), " block-verify");
    }
    int rc = kind == K_EXACT    ? run_exact(rep, &w, sched, setting, fault, control)
             : kind == K_SAMPLE ? run_sample(rep, pd, &w, sched, draws, fault, control, seed * 1000003)
                                : run_qcons(rep, pd, &w, draws / 5, fault, control);
    if (rc) ds_error_prefix("gate case (%s, %s)", dops->name, sched ? sched : "-");
    rw_close(&w);
    if (g_verbose)
        fprintf(stderr, "lossless:   %s%s %s %s %s: %.1f s\n", control ? "control " : "", w.dname, sched ? sched : "-",
                kind == K_EXACT ? "exact" : kind == K_SAMPLE ? "chi2" : "q-consistency", SETTING_NAMES[setting],
                ds_now() - t0);
    return rc;
}

int gate_round_cases(gate_report *rep, long draws, double alpha, int quick, int verbose, const char *only) {
    pending pd = {{0}, 0};
    int n0 = rep->n;
    uint64_t seed = 300;
    const int exact_settings[] = {S_TOPK, S_TOPP, S_GREEDY, S_FULL};
    int n_exact = quick ? 3 : 4; /* T = 0 (one path) stays in quick: verify_greedy must be exercised */
    g_exact = rep->exact;
    g_backend = rep->backend;
    g_verbose = verbose;
    /* dim-32 worlds: a drafter's OpenMP loops only pay a team's wake-ups here (and spin against the
     * other half of the gate when make lossless runs both at once), so its ops run on this thread */
    int omp_keep = omp_get_max_threads(), rc = -1;
    omp_set_num_threads(1);
    for (int di = 0; drafter_nth(di); di++) {
        const drafter_ops *dops = drafter_nth(di);
        if (only && strcmp(only, dops->name)) continue;
        if (verbose) fprintf(stderr, "lossless: production round, drafter %s\n", dops->name);
        /* has_conf is a property of the opened drafter: ask a world */
        rworld probe;
        if (rw_open(&probe, dops, &(world_opts){.setting = S_TOPK, .n_req = 1, .seed = seed, .N = RN})) goto done;
        int has_conf = probe.d.has_conf, has_det = probe.d.deterministic;
        rw_close(&probe);
        for (int si = 0; scheduler_nth(si); si++) {
            const scheduler_ops *so = scheduler_nth(si);
            if (!so->lossless || (so->needs_conf && !has_conf)) continue;
            int is_fixed = strcmp(so->name, "fixed") == 0;
            for (int e = 0; e < n_exact; e++) {
                int st = exact_settings[e];
                if ((st == S_GREEDY || st == S_FULL) && !is_fixed) continue; /* T = 0 and full support: fixed only */
                /* hedge's random gamma multiplies the enumerated paths (~16x, 20-50 s a case here), and
                 * top-p's interplay with each drafter is enumerated under every other scheduler; the quick
                 * matrix (make test, twice in CI: once under ASan at ~8x) enumerates hedge only with the
                 * representative drafters - the full gate (make lossless) runs it with every drafter */
                if (so->gate_sparse && !only && !representative(dops) && (st == S_TOPP || quick)) continue;
                if (run_one(rep, &pd, dops, so->name, st, K_EXACT, FAULT_NONE, 0, 0, seed++, 0, 0)) goto done;
            }
            /* min-p (the row's tokens below a share of its largest dropped) on the draft's rows and the
             * target's alike; its own seeds, so the cases above keep their worlds */
            if (is_fixed && run_one(rep, &pd, dops, so->name, S_MINP, K_EXACT, FAULT_NONE, 0, 0, 7700 + (uint64_t)di, 0, 0))
                goto done;
            /* Appendix A's curve, where verifying x_1 alone never pays and x_1 + x_2 pays only for a large
             * c_2: a scheduler with an early stop verifies nothing there, one without it (greedy searching
             * every prefix, "retrospective") lets x_1's own value decide whether x_1 is verified. On the
             * curves above no search ever passed a dip, and greedy with its break removed passed them all */
            if (so->needs_conf && (!quick || only || representative(dops)) &&
                run_one(rep, &pd, dops, so->name, S_TOPK, K_EXACT, FAULT_NONE, 0, 0, 7900 + (uint64_t)di, 0, CASE_CURVE_A))
                goto done;
            /* a deterministic drafter's batch behaviour is its scheduler's: the sampling case under
             * fixed and greedy (the batch-level search) covers it; its exact cases run everywhere */
            int sample = quick ? is_fixed : !has_det || is_fixed || !strcmp(so->name, "greedy");
            if (sample && run_one(rep, &pd, dops, so->name, S_TOPK, K_SAMPLE, FAULT_NONE, 0, draws, seed++, 0, 0)) goto done;
        }
        if (run_one(rep, &pd, dops, NULL, 0, K_QCONS, FAULT_NONE, 0, draws, seed++, 0, 0)) goto done;
        /* its tree mode: tree rounds verified whole (fixed) or priced node by node (greedy), exact at each
         * setting and sampled in a batch (requests whose trees differ in one forward) */
        for (int tv = 1; tv <= 2; tv++) { /* its tree mode, and a second one where it has one */
        if (!(tv == 1 ? dops->gate_config_tree : dops->gate_config_tree2)) continue;
        int tree_sampled = 0;
        if (rw_open(&probe, dops, &(world_opts){.setting = S_TOPK, .n_req = 1, .seed = seed, .N = RN, .tree = tv})) goto done;
        tree_sampled = probe.d.tree_sampled;
        rw_close(&probe);
        for (int ts = 0; ts < 2; ts++) {
            const char *tsn = ts ? "greedy" : "fixed";
            for (int e = 0; e < n_exact; e++) {
                if (ts && (exact_settings[e] == S_GREEDY || exact_settings[e] == S_FULL)) continue;
                /* sampled children (a draft LM's siblings): full support multiplies every draw's branches
                 * (3.5M paths, minutes); top-k and top-p enumerate the same rules over fewer tokens, and
                 * the quick matrix keeps top-p's (T = 1 top-k: 23 s, 3 min under ASan) */
                if (tree_sampled && (exact_settings[e] == S_FULL || (quick && exact_settings[e] == S_TOPK))) continue;
                if (run_one(rep, &pd, dops, tsn, exact_settings[e], K_EXACT, FAULT_NONE, 0, 0, seed++, tv, 0)) goto done;
            }
            if (run_one(rep, &pd, dops, tsn, S_TOPK, K_SAMPLE, FAULT_NONE, 0, draws, seed++, tv, 0)) goto done;
        }
        /* a drawn tree's q-consistency (its own seeds: the cases above keep their worlds) */
        if (tree_sampled && run_one(rep, &pd, dops, NULL, 0, K_QCONS, FAULT_NONE, 0, draws, 7800 + (uint64_t)(2 * di + tv), tv, 0))
            goto done;
        }
        /* block verification of its chains (Sun et al.): a stochastic draft LM, a block drafter and a
         * deterministic one, exact at T > 0 under fixed and greedy, and sampled in a batch */
        if (!strcmp(dops->name, "vanilla") || !strcmp(dops->name, "dspark-markov") || !strcmp(dops->name, "ngram")) {
            const int bset[3] = {S_TOPK, S_TOPP, S_TOPK};
            for (int b = 0; b < (has_det ? 1 : 3); b++)
                if (run_one(rep, &pd, dops, b == 2 ? "greedy" : "fixed", bset[b], K_EXACT, FAULT_NONE, 0, 0, seed++, 0, 1))
                    goto done;
            if (!has_det && run_one(rep, &pd, dops, "fixed", S_TOPK, K_SAMPLE, FAULT_NONE, 0, draws, seed++, 0, 1)) goto done;
        }
    }
    if (verbose) fprintf(stderr, "lossless: production round, negative controls\n");
    for (int i = 0; i < N_CONTROLS; i++) {
        const control_case *c = &CONTROLS[i];
        if (only && strcmp(only, c->drafter)) continue;
        const drafter_ops *dops = drafter_find(c->drafter);
        if (!dops) goto done;
        /* fixed seeds and sample sizes: a control's power does not depend on --draws or on how many
         * lossless cases ran before it (reused-uniform: p < 1e-20 at these sizes); only the sanitizer
         * run of the unit tests asks for fewer (rep->control_draws) */
        long nc = rep->control_draws > 0 ? rep->control_draws : 40000;
        long n = c->kind == K_SAMPLE ? nc : nc * 5 / 2;
        if (run_one(rep, &pd, dops, c->sched, c->setting, c->kind, c->fault, 1, n, 900 + (uint64_t)i, c->tree, c->block))
            goto done;
    }
    /* Bonferroni over this part's lossless statistical tests */
    double alpha_each = alpha / (pd.n ? pd.n : 1);
    for (int i = 0; i < pd.n; i++) rep->rec[pd.idx[i]].pass = rep->rec[pd.idx[i]].p >= alpha_each;
    if (verbose)
        fprintf(stderr, "lossless: production round: %d checks, %d statistical at alpha %.2g each\n", rep->n - n0, pd.n,
                alpha_each);
    rc = 0;
done:
    omp_set_num_threads(omp_keep);
    return rc;
}

/* ------------------------------------------------------------------ the real target */

int gate_round_real(gate_report *rep, const char *model, int N, int verbose, const char *only, int n_threads) {
    target t;
    int rc = -1, n0 = rep->n;
    DS_CHECK(N >= 1 && N <= RNMAX, "gate: --real-tokens must be in 1..%d", RNMAX);
    g_exact = rep->exact;
    g_backend = rep->backend;
    if (target_open(&t, model ? model : target_default_path(),
                    &(backend_opts){.name = g_backend, .exact = g_exact, .n_threads = n_threads}))
        return -1;
    if (contract_matches(t.be)) goto done;
    DS_CHECK(t.has_tokenizer, "gate: %s has no tokenizer (the real-model cases encode a chat prompt)", t.m.path);
    double t0 = ds_now();
    /* every registered drafter and lossless scheduler, and the bonus-row mutant as a control (a 1 %
     * accept bias changes nothing where no drafted token has q > p > 0, as on this prompt) */
    for (int di = 0; drafter_nth(di); di++)
        for (int si = 0; scheduler_nth(si); si++) {
            const drafter_ops *dops = drafter_nth(di);
            const scheduler_ops *so = scheduler_nth(si);
            if (!so->lossless || (only && strcmp(only, dops->name))) continue;
            /* hedge: 144 paths vs 9 on this prompt, 15-50 s a drafter, half of the gate's SmolLM2 time;
             * the tiny worlds run it with every drafter */
            if (so->gate_sparse && !only && !representative(dops)) continue;
            rworld w;
            world_opts wo = {.sched = so->name, .setting = S_REAL, .n_req = 1, .seed = 300 + (uint64_t)di, .real = &t, .N = N};
            if (rw_open(&w, dops, &wo)) goto done;
            int skip = so->needs_conf && !w.d.has_conf;
            if (verbose && !skip) fprintf(stderr, "lossless --real: %s, %s (%.0f s)\n", dops->name, so->name, ds_now() - t0);
            int r = skip ? 0 : run_exact(rep, &w, so->name, S_REAL, FAULT_NONE, 0);
            int vf = !skip && strcmp(so->name, "fixed") == 0 && strcmp(dops->name, "vanilla") == 0;
            if (!r && vf) r = run_exact(rep, &w, so->name, S_REAL, FAULT_BONUS_ROW, 1);
            rw_close(&w);
            if (r) goto done;
            if (vf) { /* min-p on the real rows: the self-draft and its control, min-p dropped for verified tokens */
                wo.setting = S_REAL_MINP;
                if (rw_open(&w, dops, &wo)) goto done;
                r = run_exact(rep, &w, so->name, S_REAL_MINP, FAULT_NONE, 0) ||
                    run_exact(rep, &w, so->name, S_REAL_MINP, FAULT_VERIFY_NO_MIN_P, 1);
                rw_close(&w);
                if (r) goto done;
            }
        }
    for (int i = n0; i < rep->n; i++) { /* the support covers all the processed law: say so */
        char *e = rep->rec[i].test + strlen(rep->rec[i].test);
        snprintf(e, sizeof rep->rec[i].test - strlen(rep->rec[i].test), " [%d tokens, 100%% of the top-k law]", N);
    }
    rc = 0;
fail:
done:
    target_close(&t);
    return rc;
}
