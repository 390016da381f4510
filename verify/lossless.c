#include "lossless.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "enumerate.h"
#include "stats.h"

#define MAX_V 64
#define MAX_GAMMA 8

/* ========================================================================== toy worlds */

static const int NO_PREFIX[1] = {0}; /* the empty prefix (never NULL: the worlds memcpy it) */

typedef struct {
    toy_spec s;
    lp_scratch scr;
} toy_ctx;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t prefix_hash(uint64_t seed, const int *p, int n) {
    uint64_t h = mix64(seed);
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint64_t)(p[i] + 1) * 0x9e3779b97f4a7c15ull);
    return mix64(h ^ (uint64_t)n);
}


/* target logits: N(0, 2^2), about 15 % masked (never fewer than 2 tokens left) */
static void toy_target_logits(const toy_ctx *c, uint64_t h, float *z) {
    rng_t r;
    rng_seed(&r, h);
    int alive = 0;
    for (int i = 0; i < c->s.V; i++) {
        z[i] = (float)(2 * rng_normal(&r));
        if (rng_uniform(&r) < 0.15) z[i] = -INFINITY;
        else alive++;
    }
    if (alive < 2) z[0] = z[1] = 0; /* keep the law non-degenerate */
}

static void toy_draft_logits(const toy_ctx *c, const int *prefix, int n, float *z) {
    float zt[MAX_V];
    uint64_t h = prefix_hash(c->s.seed, prefix, n);
    toy_target_logits(c, h, zt);
    rng_t r;
    rng_seed(&r, h ^ 0xd1b54a32d192ed03ull);
    for (int i = 0; i < c->s.V; i++) {
        /* the draft may favour tokens the target forbids, and forbid tokens the target allows */
        float base = isfinite(zt[i]) ? zt[i] : -1.0f;
        z[i] = c->s.mix * base + (1 - c->s.mix) * (float)(2 * rng_normal(&r));
        if (rng_uniform(&r) < 0.10) z[i] = -INFINITY;
    }
    if (!isfinite(z[0]) && !isfinite(z[1])) z[0] = 0;
}

static void toy_target(const gate_world *w, const int *prefix, int n, float *probs) {
    toy_ctx *c = w->ctx;
    float z[MAX_V];
    toy_target_logits(c, prefix_hash(c->s.seed, prefix, n), z);
    logits_process(z, c->s.V, &c->s.sp, probs, &c->scr);
}

static void toy_draft(const gate_world *w, const int *prefix, int n, float *probs) {
    toy_ctx *c = w->ctx;
    float z[MAX_V];
    toy_draft_logits(c, prefix, n, z);
    logits_process(z, c->s.V, &c->s.sp, probs, &c->scr);
}

/* control: the verifier is handed the draft law at temperature 1 while drafts were sampled at T */
static void toy_draft_t1(const gate_world *w, const int *prefix, int n, float *probs) {
    toy_ctx *c = w->ctx;
    float z[MAX_V];
    toy_draft_logits(c, prefix, n, z);
    sampling_params sp = c->s.sp;
    sp.temperature = 1.0f;
    logits_process(z, c->s.V, &sp, probs, &c->scr);
}

/* a Markov-style confidence: a function of the prefix, so of the previous draft token */
static float toy_conf(const gate_world *w, const int *prefix, int n) {
    toy_ctx *c = w->ctx;
    uint64_t h = prefix_hash(c->s.seed ^ 0x5851f42d4c957f2dull, prefix, n);
    return 0.05f + 0.9f * (float)((h >> 11) * 0x1p-53);
}

gate_world *toy_world_new(const toy_spec *spec) {
    if (spec->V < 2 || spec->V > MAX_V) {
        ds_error("toy world vocabulary %d outside 2..%d", spec->V, MAX_V);
        return NULL;
    }
    gate_world *w = ds_calloc(1, sizeof *w, "toy world");
    toy_ctx *c = ds_calloc(1, sizeof *c, "toy world");
    if (!w || !c) {
        free(w);
        free(c);
        return NULL;
    }
    c->s = *spec;
    w->V = spec->V;
    w->target = toy_target;
    w->draft = toy_draft;
    w->draft_verify = spec->one_sided ? toy_draft_t1 : toy_draft;
    w->conf = toy_conf;
    w->ctx = c;
    return w;
}

void toy_world_free(gate_world *w) {
    if (!w) return;
    toy_ctx *c = w->ctx;
    if (c) lp_scratch_free(&c->scr);
    free(c);
    free(w);
}

/* ------------------------------------------------------------------- Appendix A world */

static void aa_target(const gate_world *w, const int *prefix, int n, float *p) {
    DS_UNUSED(w), DS_UNUSED(prefix), DS_UNUSED(n);
    p[0] = 0.7f;
    p[1] = 0.3f;
}
static void aa_draft(const gate_world *w, const int *prefix, int n, float *q) {
    DS_UNUSED(w), DS_UNUSED(prefix), DS_UNUSED(n);
    q[0] = 0.5f;
    q[1] = 0.5f;
}
static float aa_conf(const gate_world *w, const int *prefix, int n) {
    DS_UNUSED(w);
    if (n == 0) return 0.8f;               /* c_1 */
    return prefix[n - 1] == 0 ? 0.9f : 0.0f; /* c_2 after A, after B */
}

gate_world *appendix_a_world(void) {
    gate_world *w = ds_calloc(1, sizeof *w, "world");
    if (!w) return NULL;
    w->V = 2;
    w->target = aa_target;
    w->draft = w->draft_verify = aa_draft;
    w->conf = aa_conf;
    return w;
}

int appendix_a_sps(sps_table *t) {
    int B[3] = {1, 2, 3};
    double s[3] = {1.0, 0.5, 0.45};
    return sps_from_arrays(t, B, s, 3);
}

/* ================================================================== exact enumeration */

typedef struct {
    const gate_world *w;
    scheduler *s;
    const sps_table *sps;
    int gamma, N, V;
    long double **memo;   /* law of the next (N - len) tokens after each shorter prefix */
    enum_law *first;      /* first-round laws */
    verify_fault fault;   /* enumerable controls: accept bias, bonus row */
    chain_rule rule;      /* token-wise or block verification */
    draw_enum en;         /* walks the production verifier's draws */
    int failed;
} ectx;

static size_t ipow(int v, int e) {
    size_t r = 1;
    while (e-- > 0) r *= (size_t)v;
    return r;
}

/* index of a prefix among all prefixes shorter than N: offset by length, then base-V digits */
static size_t prefix_slot(const ectx *e, const int *p, int n) {
    size_t off = 0;
    for (int l = 0; l < n; l++) off += ipow(e->V, l);
    size_t idx = 0;
    for (int i = 0; i < n; i++) idx = idx * (size_t)e->V + (size_t)p[i];
    return off + idx;
}

static long double *law_after(ectx *e, const int *prefix, int n);

/* add `pr` times the law of continuing `seq` (emitted this round after `prefix`) into law[] */
static void emit(ectx *e, const int *prefix, int n, const int *seq, int len, long double pr, long double *law) {
    int need = e->N - n;
    int tmp[16];
    if (len >= need) {
        size_t idx = 0;
        for (int i = 0; i < need; i++) idx = idx * (size_t)e->V + (size_t)seq[i];
        law[idx] += pr;
        return;
    }
    memcpy(tmp, prefix, sizeof(int) * (size_t)n);
    memcpy(tmp + n, seq, sizeof(int) * (size_t)len);
    long double *sub = law_after(e, tmp, n + len);
    if (!sub) return;
    size_t tail = ipow(e->V, need - len), head = 0;
    for (int i = 0; i < len; i++) head = head * (size_t)e->V + (size_t)seq[i];
    for (size_t t = 0; t < tail; t++) law[head * tail + t] += pr * sub[t];
}

typedef struct {
    const int *prefix;
    int n;
    int x[MAX_GAMMA];
    float q[MAX_GAMMA][MAX_V], qv[MAX_GAMMA][MAX_V], c[MAX_GAMMA];
    long double *law;
    int first;
} frame;

/* One draft path: the production scheduler picks l, then the production verifier (verify_round)
 * runs once per branch of its own draws, each branch weighted by its exact probability. */
static void leaf(ectx *e, frame *f, long double wd) {
    int V = e->V, l, n_draft = e->gamma, tok[32];
    sched_batch b = {1, e->gamma, &n_draft, e->w->conf ? f->c : NULL, e->sps};
    if (e->s->ops->schedule(e->s, &b, &l)) {
        e->failed = 1;
        return;
    }
    float p[(MAX_GAMMA + 1) * MAX_V], qv[MAX_GAMMA * MAX_V];
    double scratch[MAX_V];
    memcpy(tok, f->prefix, sizeof(int) * (size_t)f->n);
    memcpy(tok + f->n, f->x, sizeof(int) * (size_t)l);
    for (int k = 0; k <= l; k++) e->w->target(e->w, tok, f->n + k, p + (size_t)k * V); /* p_k judges x_{k+1} */
    for (int k = 0; k < l; k++) memcpy(qv + (size_t)k * V, f->qv[k], sizeof(float) * (size_t)V);
    verify_rng vr;
    rng_seed(&vr.accept, 1);
    rng_seed(&vr.resample, 2);
    vr.accept.en = vr.resample.en = &e->en.hooks;
    /* all branches first: emit() recurses into later rounds, which use the same enumerator */
    struct { int em[MAX_GAMMA + 1], n, acc, bonus, tok; long double pr; } out[(MAX_GAMMA + 1) * MAX_V];
    int n_out = 0;
    do {
        draw_enum_begin(&e->en);
        verify_result res;
        int n = verify_round(p, qv, f->x, l, V, 0, e->rule, &vr, scratch, e->fault, &res, out[n_out].em);
        if (n >= 0 && verify_result_check(&res, l, V, 1)) n = -1;
        if (n < 0 || draw_enum_end(&e->en) || n_out == (int)(sizeof out / sizeof *out)) {
            if (n_out == (int)(sizeof out / sizeof *out)) ds_error("enumeration: too many verifier branches");
            e->failed = 1;
            e->en.n = 0;
            return;
        }
        out[n_out].n = n;
        out[n_out].acc = res.n_accepted;
        out[n_out].bonus = res.bonus;
        out[n_out].tok = res.token;
        out[n_out++].pr = wd * e->en.weight;
    } while (draw_enum_next(&e->en));
    for (int i = 0; i < n_out; i++) {
        emit(e, f->prefix, f->n, out[i].em, out[i].n, out[i].pr, f->law);
        if (f->first) {
            e->first->accepted[out[i].acc] += out[i].pr;
            if (!out[i].bonus) e->first->resid[(size_t)out[i].acc * V + out[i].tok] += out[i].pr;
        }
    }
}

static void dfs(ectx *e, frame *f, int k, long double wd) {
    if (e->failed) return;
    if (k == e->gamma) {
        leaf(e, f, wd);
        return;
    }
    int tok[32];
    memcpy(tok, f->prefix, sizeof(int) * (size_t)f->n);
    memcpy(tok + f->n, f->x, sizeof(int) * (size_t)k);
    e->w->draft(e->w, tok, f->n + k, f->q[k]);
    if (e->w->draft_verify != e->w->draft) e->w->draft_verify(e->w, tok, f->n + k, f->qv[k]);
    else memcpy(f->qv[k], f->q[k], sizeof(float) * (size_t)e->V);
    f->c[k] = e->w->conf ? e->w->conf(e->w, tok, f->n + k) : 1.0f;
    long double sq = row_sum(f->q[k], e->V); /* drafts are drawn from q / sum(q) */
    for (int v = 0; v < e->V; v++) {
        if (f->q[k][v] <= 0) continue;
        f->x[k] = v;
        dfs(e, f, k + 1, wd * f->q[k][v] / sq);
    }
}

/* law of the next N - n emitted tokens after `prefix` (memoised per prefix) */
static long double *law_after(ectx *e, const int *prefix, int n) {
    size_t slot = prefix_slot(e, prefix, n);
    if (e->memo[slot]) return e->memo[slot];
    long double *law = calloc(ipow(e->V, e->N - n), sizeof(long double));
    frame *f = calloc(1, sizeof *f);
    if (!law || !f) {
        free(law);
        free(f);
        e->failed = 1;
        return NULL;
    }
    f->prefix = prefix;
    f->n = n;
    f->law = law;
    f->first = n == 0;
    dfs(e, f, 0, 1.0L);
    free(f);
    e->memo[slot] = law;
    return law;
}

int enum_spec(const gate_world *w, scheduler *s, const sps_table *sps, int gamma, int N, verify_fault fault,
              chain_rule rule, enum_law *out) {
    memset(out, 0, sizeof *out);
    if (gamma < 1 || gamma > MAX_GAMMA || N < 1 || N > 4 || w->V > MAX_V) {
        ds_error("enumeration: gamma %d / N %d / V %d out of range", gamma, N, w->V);
        return -1;
    }
    ectx e = {w, s, sps, gamma, N, w->V, NULL, out, fault, rule, {{0}}, 0};
    if (draw_enum_init(&e.en)) return -1;
    size_t slots = 0;
    for (int l = 0; l < N; l++) slots += ipow(w->V, l);
    e.memo = calloc(slots, sizeof(long double *));
    out->N = N;
    out->accepted = calloc((size_t)gamma + 1, sizeof(long double));
    out->resid = calloc((size_t)gamma * (size_t)w->V, sizeof(long double));
    if (!e.memo || !out->accepted || !out->resid) {
        ds_error("out of memory in enumeration");
        free(e.memo);
        draw_enum_free(&e.en);
        enum_law_free(out);
        return -1;
    }
    long double *law = law_after(&e, NO_PREFIX, 0);
    for (size_t i = 0; i < slots; i++)
        if (e.memo[i] != law) free(e.memo[i]);
    free(e.memo);
    draw_enum_free(&e.en);
    if (e.failed || !law) {
        free(law);
        enum_law_free(out);
        if (!e.failed) ds_error("out of memory in enumeration");
        return -1;
    }
    out->first_n = law;
    return 0;
}

void enum_law_free(enum_law *l) {
    free(l->first_n);
    free(l->accepted);
    free(l->resid);
    memset(l, 0, sizeof *l);
}

int enum_target(const gate_world *w, int N, long double *law) {
    size_t n = ipow(w->V, N);
    float p[MAX_V];
    for (size_t idx = 0; idx < n; idx++) {
        int seq[8];
        size_t t = idx;
        for (int i = N - 1; i >= 0; i--) {
            seq[i] = (int)(t % (size_t)w->V);
            t /= (size_t)w->V;
        }
        long double pr = 1;
        for (int i = 0; i < N && pr > 0; i++) {
            w->target(w, seq, i, p);
            pr *= p[seq[i]] / (long double)row_sum(p, w->V);
        }
        law[idx] = pr;
    }
    return 0;
}

/* ======================================================================= sampling */

/* One speculative round from a prefix with the production sampler (verify_round). */
typedef struct {
    int accepted, verified;
    int bonus;
    int emitted[16], n_emitted;
} sim_round_out;

static int sim_round(const gate_world *w, scheduler *s, const sps_table *sps, int gamma, const int *prefix, int n,
              rng_t *draft_rng, verify_rng *vr, verify_fault fault, chain_rule rule, sim_round_out *out) {
    int V = w->V, tok[64], x[MAX_GAMMA], l, n_draft = gamma;
    float q[MAX_GAMMA][MAX_V], qv[MAX_GAMMA][MAX_V], p[(MAX_GAMMA + 1) * MAX_V], c[MAX_GAMMA];
    double scratch[MAX_V];
    memcpy(tok, prefix, sizeof(int) * (size_t)n);
    for (int k = 0; k < gamma; k++) {
        w->draft(w, tok, n + k, q[k]);
        if (w->draft_verify != w->draft) w->draft_verify(w, tok, n + k, qv[k]);
        else memcpy(qv[k], q[k], sizeof(float) * (size_t)V);
        c[k] = w->conf ? w->conf(w, tok, n + k) : 1.0f;
        if ((x[k] = rng_draw(draft_rng, q[k], V)) < 0) return -1;
        tok[n + k] = x[k];
    }
    sched_batch b = {1, gamma, &n_draft, w->conf ? c : NULL, sps};
    if (s->ops->schedule(s, &b, &l)) return -1;
    for (int k = 0; k <= l; k++) w->target(w, tok, n + k, p + (size_t)k * V);
    float qrows[MAX_GAMMA * MAX_V];
    for (int k = 0; k < l; k++) memcpy(qrows + (size_t)k * V, qv[k], sizeof(float) * (size_t)V);
    verify_result res;
    if (verify_round(p, qrows, x, l, V, 0, rule, vr, scratch, fault, &res, out->emitted) < 0 ||
        verify_result_check(&res, l, V, 1))
        return -1;
    out->accepted = res.n_accepted;
    out->verified = l;
    out->bonus = res.bonus;
    out->n_emitted = res.n_accepted + 1;
    return 0;
}

/* ========================================================================== the gate */

gate_record *gate_add(gate_report *rep, const char *test, const char *kind, long N, double stat, double p, int control,
                      int pass) {
    if (rep->n == rep->cap) {
        int nc = rep->cap ? 2 * rep->cap : 64;
        gate_record *nr = realloc(rep->rec, sizeof *nr * (size_t)nc);
        if (!nr) return NULL;
        rep->rec = nr;
        rep->cap = nc;
    }
    gate_record *r = &rep->rec[rep->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->test, sizeof r->test, "%s", test);
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    r->N = N;
    r->statistic = stat;
    r->p = p;
    r->control = control;
    r->pass = pass;
    return r;
}

void gate_report_free(gate_report *rep) {
    free(rep->rec);
    rep->rec = NULL;
    rep->n = rep->cap = 0;
}

static double tv(const long double *a, const long double *b, size_t n) {
    long double s = 0;
    for (size_t i = 0; i < n; i++) s += fabsl(a[i] - b[i]);
    return (double)(s / 2);
}

static const char *proc_name(const sampling_params *sp, char *buf, size_t n) {
    int w = snprintf(buf, n, "T=%.1f", (double)sp->temperature);
    if (sp->top_k) w += snprintf(buf + w, n - (size_t)w, " top-k=%d", sp->top_k);
    if (sp->top_p < 1) snprintf(buf + w, n - (size_t)w, " top-p=%.2f", (double)sp->top_p);
    return buf;
}

/* smooth synthetic SPS curve for the toy worlds: a step costs 1 + 0.15 (B - 1) */
static int toy_sps(sps_table *t) {
    int B[2] = {1, 64};
    double s[2] = {1.0, 1.0 / (1 + 0.15 * 63)};
    return sps_from_arrays(t, B, s, 2);
}

/* a curve with a cliff (as Appendix A's): Theta is not unimodal, so searching past the first
 * drop (the retrospective control) finds later optima that depend on drafted tokens */
static int jagged_sps(sps_table *t) {
    int B[4] = {1, 2, 3, 4};
    double s[4] = {1.0, 0.5, 0.45, 0.44};
    return sps_from_arrays(t, B, s, 4);
}

static int gate_exact_world(gate_report *rep, const gate_world *w, const char *sched, const sps_table *sps, int gamma, int N,
                     verify_fault fault, chain_rule rule, const char *label, int control) {
    scheduler s;
    enum_law law;
    if (scheduler_open(&s, sched, NULL, 1)) return -1;
    if (enum_spec(w, &s, sps, gamma, N, fault, rule, &law)) {
        scheduler_close(&s);
        return -1;
    }
    size_t n = ipow(w->V, N);
    long double *target = calloc(n, sizeof(long double));
    if (!target) {
        enum_law_free(&law);
        scheduler_close(&s);
        return -1;
    }
    enum_target(w, N, target);
    double d = tv(law.first_n, target, n);
    gate_add(rep, label, "exact-tv", 0, d, NAN, control, control ? d > 1e-6 : d < 1e-12);
    free(target);
    enum_law_free(&law);
    scheduler_close(&s);
    return 0;
}

/* exact: TV between the enumerated law and the target law */
static int exact_case(gate_report *rep, const toy_spec *ts, const char *sched, int gamma, int N, int control,
                      int jagged) {
    gate_world *w = toy_world_new(ts);
    sps_table sps;
    char name[160], pn[48];
    if (!w || (jagged ? jagged_sps(&sps) : toy_sps(&sps))) return -1;
    snprintf(name, sizeof name, "enumerate V=%d gamma=%d N=%d %s %s%s%s", ts->V, gamma, N,
             proc_name(&ts->sp, pn, sizeof pn), sched, jagged ? " jagged-SPS" : "", ts->one_sided ? " one-sided-T" : "");
    int rc = gate_exact_world(rep, w, sched, &sps, gamma, N, FAULT_NONE, VERIFY_TOKEN, name, control);
    sps_free(&sps);
    toy_world_free(w);
    return rc;
}

/* Block verification exact (TV of its law from the target's), and the two rules' expected accepted
 * drafts in the first round from the same enumeration: block must never accept fewer. */
static int block_exact_case(gate_report *rep, const toy_spec *ts, const char *sched, int gamma, int N,
                            verify_fault fault) {
    gate_world *w = toy_world_new(ts);
    sps_table sps;
    scheduler s;
    char name[200], pn[48];
    if (!w || toy_sps(&sps)) return -1;
    int control = fault != FAULT_NONE, rc = -1;
    snprintf(name, sizeof name, "%senumerate block-verify V=%d gamma=%d N=%d %s %s%s%s", control ? "control " : "", ts->V,
             gamma, N, proc_name(&ts->sp, pn, sizeof pn), sched, control ? " mutant " : "",
             control ? VERIFY_FAULT_NAMES[fault] : "");
    if (gate_exact_world(rep, w, sched, &sps, gamma, N, fault, VERIFY_BLOCK, name, control)) goto out;
    if (!control) {
        enum_law lt, lb;
        if (scheduler_open(&s, sched, NULL, 1)) goto out;
        if (enum_spec(w, &s, &sps, gamma, 1, FAULT_NONE, VERIFY_TOKEN, &lt)) {
            scheduler_close(&s);
            goto out;
        }
        if (enum_spec(w, &s, &sps, gamma, 1, FAULT_NONE, VERIFY_BLOCK, &lb)) {
            enum_law_free(&lt);
            scheduler_close(&s);
            goto out;
        }
        long double et = 0, eb = 0;
        for (int k = 0; k <= gamma; k++) et += k * lt.accepted[k], eb += k * lb.accepted[k];
        snprintf(name, sizeof name, "block-verify accepts >= token-wise V=%d gamma=%d %s %s: E[accepted] %.6f vs %.6f",
                 ts->V, gamma, proc_name(&ts->sp, pn, sizeof pn), sched, (double)eb, (double)et);
        gate_add(rep, name, "exact-acc", 0, (double)(eb - et), NAN, 0, eb >= et - 1e-12L);
        enum_law_free(&lt);
        enum_law_free(&lb);
        scheduler_close(&s);
    }
    rc = 0;
out:
    sps_free(&sps);
    toy_world_free(w);
    return rc;
}

/* exact, two requests scheduled together by one batch scheduler: joint law of their first tokens */
static int exact_batch_case(gate_report *rep, const char *sched, int control) {
    toy_spec a = {4, 101, {1.0f, 0, 1.0f}, 0.6f, 0}, bsp = {4, 202, {0.6f, 0, 1.0f}, 0.4f, 0};
    gate_world *w[2] = {toy_world_new(&a), toy_world_new(&bsp)};
    scheduler s;
    sps_table sps;
    int B[3] = {2, 4, 6};
    double st[3] = {1.0, 0.8, 0.5}; /* a curve with a cliff, so the batch search has choices to make */
    if (!w[0] || !w[1] || sps_from_arrays(&sps, B, st, 3) || scheduler_open(&s, sched, NULL, 1)) return -1;
    int gamma = 2, V = 4, rc = -1;
    long double law[16] = {0}, target[16];
    draw_enum en;
    verify_rng vr;
    double scratch[MAX_V];
    if (draw_enum_init(&en)) return -1;
    rng_seed(&vr.accept, 1);
    rng_seed(&vr.resample, 2);
    vr.accept.en = vr.resample.en = &en.hooks;
    float p0[MAX_V], p1[MAX_V];
    w[0]->target(w[0], NO_PREFIX, 0, p0);
    w[1]->target(w[1], NO_PREFIX, 0, p1);
    long double s0 = row_sum(p0, V), s1 = row_sum(p1, V);
    for (int i = 0; i < V; i++)
        for (int j = 0; j < V; j++) target[i * V + j] = (long double)p0[i] / s0 * p1[j] / s1;
    /* enumerate both requests' draft paths jointly */
    float q[2][MAX_GAMMA][MAX_V], c[2 * MAX_GAMMA];
    int x[2][MAX_GAMMA];
    for (int path = 0; path < V * V * V * V; path++) {
        int t = path;
        long double wd = 1;
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < gamma; k++) {
                x[r][k] = t % V;
                t /= V;
            }
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < gamma; k++) {
                w[r]->draft(w[r], x[r], k, q[r][k]);
                c[r * gamma + k] = w[r]->conf(w[r], x[r], k);
                wd *= q[r][k][x[r][k]] / (long double)row_sum(q[r][k], V);
            }
        if (wd <= 0) continue;
        int nd[2] = {gamma, gamma}, l[2];
        sched_batch b = {2, gamma, nd, c, &sps};
        if (s.ops->schedule(&s, &b, l)) goto fail;
        /* the production verifier on both requests, every branch of its draws */
        float p[2][(MAX_GAMMA + 1) * MAX_V], qr[2][MAX_GAMMA * MAX_V];
        for (int r = 0; r < 2; r++) {
            for (int k = 0; k <= l[r]; k++) w[r]->target(w[r], x[r], k, p[r] + (size_t)k * V);
            for (int k = 0; k < l[r]; k++) memcpy(qr[r] + (size_t)k * V, q[r][k], sizeof(float) * (size_t)V);
        }
        do {
            draw_enum_begin(&en);
            int first[2];
            for (int r = 0; r < 2; r++) {
                verify_result res;
                int em[MAX_GAMMA + 1];
                if (verify_round(p[r], qr[r], x[r], l[r], V, 0, VERIFY_TOKEN, &vr, scratch, FAULT_NONE, &res, em) < 0) goto fail;
                first[r] = em[0];
            }
            if (draw_enum_end(&en)) goto fail;
            law[first[0] * V + first[1]] += wd * en.weight;
        } while (draw_enum_next(&en));
    }
    double d = tv(law, target, 16);
    char name[160];
    snprintf(name, sizeof name, "enumerate batch of 2 requests V=4 gamma=2 %s", sched);
    gate_add(rep, name, "exact-tv", 0, d, NAN, control, control ? d > 1e-6 : d < 1e-12);
    rc = 0;
fail:
    draw_enum_free(&en);
    scheduler_close(&s);
    sps_free(&sps);
    toy_world_free(w[0]);
    toy_world_free(w[1]);
    return rc;
}

/* the paper's Appendix A: exact first-token law under a scheduler */
int appendix_a_first_token(const char *sched, double *pA) {
    gate_world *w = appendix_a_world();
    scheduler s;
    sps_table sps;
    enum_law law;
    if (!w || appendix_a_sps(&sps) || scheduler_open(&s, sched, NULL, 1) || enum_spec(w, &s, &sps, 2, 1, FAULT_NONE, VERIFY_TOKEN, &law)) {
        free(w);
        return -1;
    }
    *pA = (double)law.first_n[0];
    enum_law_free(&law);
    scheduler_close(&s);
    sps_free(&sps);
    free(w);
    return 0;
}

/* sampling: N first rounds (and a second when the first emits one token) with the production
 * sampler; chi-square on the first-two-token joint, the accepted-count law and the residual law
 * per stop position, against the target law and the enumeration. */
typedef struct {
    long *joint, *acc, *res, *first;
} counts;

static int sample_case(gate_report *rep, const toy_spec *ts, const char *sched, int gamma, long N, verify_fault fault,
                       chain_rule rule, int control, uint64_t seed, double alpha_each) {
    gate_world *w = toy_world_new(ts);
    scheduler s;
    sps_table sps;
    enum_law law;
    int V = ts->V;
    if (!w || toy_sps(&sps) || scheduler_open(&s, sched, NULL, 1) || enum_spec(w, &s, &sps, gamma, 2, FAULT_NONE, rule, &law)) return -1;
    long double *target = calloc((size_t)V * V, sizeof(long double));
    enum_target(w, 2, target);
    counts c = {calloc((size_t)V * V, sizeof(long)), calloc((size_t)gamma + 1, sizeof(long)),
                calloc((size_t)gamma * V, sizeof(long)), calloc((size_t)V, sizeof(long))};
    rng_t dr;
    verify_rng vr;
    rng_seed(&dr, seed);
    rng_seed(&vr.accept, seed ^ 0x1111);
    rng_seed(&vr.resample, seed ^ 0x2222);
    sim_round_out o, o2;
    for (long i = 0; i < N; i++) {
        if (sim_round(w, &s, &sps, gamma, NO_PREFIX, 0, &dr, &vr, fault, rule, &o)) return -1;
        c.acc[o.accepted]++;
        if (!o.bonus) c.res[(size_t)o.accepted * V + o.emitted[o.accepted]]++;
        int t0 = o.emitted[0], t1;
        c.first[t0]++;
        if (o.n_emitted >= 2) t1 = o.emitted[1];
        else {
            if (sim_round(w, &s, &sps, gamma, &t0, 1, &dr, &vr, fault, rule, &o2)) return -1;
            t1 = o2.emitted[0];
        }
        c.joint[t0 * V + t1]++;
    }
    char base[100], pn[48], name[160];
    snprintf(base, sizeof base, "V=%d gamma=%d %s %s%s%s%s%s", V, gamma, proc_name(&ts->sp, pn, sizeof pn), sched,
             rule == VERIFY_BLOCK ? " block-verify" : "", fault ? " " : "", fault ? VERIFY_FAULT_NAMES[fault] : "",
             ts->one_sided ? " one-sided-T" : "");
    double *prob = malloc(sizeof(double) * (size_t)V * V);
    gof_result g;
    double pmin = 1;
    /* joint of the first two emitted tokens */
    for (int i = 0; i < V * V; i++) prob[i] = (double)target[i];
    chi2_gof(c.joint, prob, V * V, &g);
    snprintf(name, sizeof name, "chi2 first-two joint %s", base);
    if (!control) gate_add(rep, name, "chi2", N, g.stat, g.p, 0, g.p >= alpha_each);
    pmin = fmin(pmin, g.p);
    /* accepted-count law of the first round */
    for (int k = 0; k <= gamma; k++) prob[k] = (double)law.accepted[k];
    chi2_gof(c.acc, prob, gamma + 1, &g);
    snprintf(name, sizeof name, "chi2 accepted-count %s", base);
    if (!control) gate_add(rep, name, "chi2", N, g.stat, g.p, 0, g.p >= alpha_each);
    pmin = fmin(pmin, g.p);
    /* residual law at each stop position (first round rejected after k accepted) */
    for (int k = 0; k < gamma; k++) {
        long nk = 0;
        long double mk = 0;
        for (int y = 0; y < V; y++) {
            nk += c.res[(size_t)k * V + y];
            mk += law.resid[(size_t)k * V + y];
        }
        if (nk < 200 || mk <= 0) continue;
        for (int y = 0; y < V; y++) prob[y] = (double)(law.resid[(size_t)k * V + y] / mk);
        chi2_gof(c.res + (size_t)k * V, prob, V, &g);
        snprintf(name, sizeof name, "chi2 residual@%d %s", k + 1, base);
        if (!control) gate_add(rep, name, "chi2", nk, g.stat, g.p, 0, g.p >= alpha_each);
        pmin = fmin(pmin, g.p);
    }
    if (control) {
        snprintf(name, sizeof name, "control %s (min p over chi2 tests)", base);
        gate_add(rep, name, "chi2", N, NAN, pmin, 1, pmin < 1e-6);
    }
    free(prob);
    free(c.joint), free(c.acc), free(c.res), free(c.first), free(target);
    enum_law_free(&law);
    scheduler_close(&s);
    sps_free(&sps);
    toy_world_free(w);
    return 0;
}

static int ks_world(gate_report *rep, const gate_world *w, const char *sched, const sps_table *sps, int gamma, long N,
                    verify_fault fault, uint64_t seed, double alpha_each, const char *label, int control) {
    scheduler s;
    int V = w->V;
    if (scheduler_open(&s, sched, NULL, 1)) return -1;
    long *cnt = calloc((size_t)V, sizeof(long));
    double prob[MAX_V];
    float p[MAX_V];
    w->target(w, NO_PREFIX, 0, p);
    double sp = row_sum(p, V);
    for (int i = 0; i < V; i++) prob[i] = p[i] / sp;
    rng_t dr;
    verify_rng vr;
    rng_seed(&dr, seed);
    rng_seed(&vr.accept, seed ^ 0x3333);
    rng_seed(&vr.resample, seed ^ 0x4444);
    sim_round_out o;
    for (long i = 0; i < N; i++) {
        if (sim_round(w, &s, sps, gamma, NO_PREFIX, 0, &dr, &vr, fault, VERIFY_TOKEN, &o)) {
            free(cnt);
            scheduler_close(&s);
            return -1;
        }
        cnt[o.emitted[0]]++;
    }
    double D, pk = ks_gof(cnt, prob, V, &D);
    gof_result g;
    chi2_gof(cnt, prob, V, &g);
    double pm = control ? fmin(pk, g.p) : pk;
    gate_add(rep, label, control ? "ks+chi2" : "ks", N, D, pm, control, control ? pm < 1e-6 : pk >= alpha_each);
    free(cnt);
    scheduler_close(&s);
    return 0;
}

/* KS (and chi-square) on the first emitted token, larger vocabulary and gamma up to 7 */
static int ks_case(gate_report *rep, const toy_spec *ts, int gamma, long N, verify_fault fault, int control, uint64_t seed,
                   double alpha_each) {
    gate_world *w = toy_world_new(ts);
    sps_table sps;
    if (!w || toy_sps(&sps)) return -1;
    char pn[48], name[160];
    snprintf(name, sizeof name, "%s first-token V=%d gamma=%d %s%s%s", control ? "control" : "ks", ts->V, gamma,
             proc_name(&ts->sp, pn, sizeof pn),
             fault == FAULT_UNNORMALISED_RESIDUAL ? " unnormalised-residual"
             : fault == FAULT_REUSED_UNIFORM      ? " reused-uniform"
                                                  : "",
             ts->one_sided ? " one-sided-T" : "");
    int rc = ks_world(rep, w, "fixed", &sps, gamma, N, fault, seed, alpha_each, name, control);
    sps_free(&sps);
    toy_world_free(w);
    return rc;
}

/* sampling on the Appendix A world under a scheduler: first-token law vs (0.7, 0.3) */
static int appendix_a_sample(gate_report *rep, const char *sched, long N, int control, double alpha_each) {
    gate_world *w = appendix_a_world();
    scheduler s;
    sps_table sps;
    if (!w || appendix_a_sps(&sps) || scheduler_open(&s, sched, NULL, 1)) return -1;
    long cnt[2] = {0, 0};
    double prob[2] = {0.7, 0.3};
    rng_t dr;
    verify_rng vr;
    rng_seed(&dr, 77);
    rng_seed(&vr.accept, 78);
    rng_seed(&vr.resample, 79);
    sim_round_out o;
    for (long i = 0; i < N; i++) {
        if (sim_round(w, &s, &sps, 2, NO_PREFIX, 0, &dr, &vr, FAULT_NONE, VERIFY_TOKEN, &o)) return -1;
        cnt[o.emitted[0]]++;
    }
    gof_result g;
    chi2_gof(cnt, prob, 2, &g);
    char name[160];
    snprintf(name, sizeof name, "%s Appendix A world, %s scheduler (A: %.4f)", control ? "control" : "chi2", sched,
             (double)cnt[0] / (double)N);
    gate_add(rep, name, "chi2", N, g.stat, g.p, control, control ? g.p < 1e-6 : g.p >= alpha_each);
    scheduler_close(&s);
    sps_free(&sps);
    free(w);
    return 0;
}

int gate_run(gate_report *rep, int verbose) {
    long N = rep->draws > 0 ? rep->draws : 100000;
    double alpha = rep->alpha > 0 ? rep->alpha : 0.01;
    int quick = rep->quick;
    const float temps[2] = {0.6f, 1.0f};

    /* 1. exact enumeration */
    if (verbose) fprintf(stderr, "lossless: exact enumeration\n");
    for (int ti = 0; ti < 2; ti++) {
        sampling_params plain = {temps[ti], 0, 1.0f}, topk = {temps[ti], 3, 1.0f}, topp = {temps[ti], 0, 0.9f};
        toy_spec s4 = {4, 11 + (uint64_t)ti, plain, 0.5f, 0}, s8 = {8, 21 + (uint64_t)ti, plain, 0.6f, 0};
        toy_spec s4k = {4, 31 + (uint64_t)ti, topk, 0.5f, 0}, s8p = {8, 41 + (uint64_t)ti, topp, 0.5f, 0};
        const char *scheds[3] = {"fixed", "threshold", "greedy"};
        for (int si = 0; si < 3; si++) {
            if (exact_case(rep, &s4, scheds[si], 3, 3, 0, 0) || exact_case(rep, &s8, scheds[si], 2, 2, 0, 0)) return -1;
            if (quick) continue;
            if (exact_case(rep, &s4k, scheds[si], 3, 3, 0, 0) || exact_case(rep, &s8p, scheds[si], 3, 2, 0, 0)) return -1;
        }
        if (!quick) {
            sampling_params big = {temps[ti], 20, 0.9f};
            toy_spec s32 = {32, 51 + (uint64_t)ti, big, 0.6f, 0};
            if (exact_case(rep, &s32, "fixed", 2, 2, 0, 0) || exact_case(rep, &s32, "greedy", 2, 2, 0, 0)) return -1;
        }
    }
    {
        sampling_params greedy = {0.0f, 0, 1.0f};
        toy_spec s8g = {8, 61, greedy, 0.7f, 0};
        if (exact_case(rep, &s8g, "fixed", 3, 2, 0, 0)) return -1;
    }
    if (exact_batch_case(rep, "greedy", 0) || exact_batch_case(rep, "fixed", 0)) return -1;
    /* block verification: every scheduler, both temperatures, truncated supports, T = 0; its control */
    for (int ti = 0; ti < 2; ti++) {
        sampling_params plain = {temps[ti], 0, 1.0f}, topk = {temps[ti], 3, 1.0f}, topp = {temps[ti], 0, 0.9f};
        toy_spec s4 = {4, 211 + (uint64_t)ti, plain, 0.5f, 0}, s6 = {6, 221 + (uint64_t)ti, plain, 0.3f, 0};
        toy_spec s4k = {4, 231 + (uint64_t)ti, topk, 0.5f, 0}, s8p = {8, 241 + (uint64_t)ti, topp, 0.5f, 0};
        const char *scheds[3] = {"fixed", "threshold", "greedy"};
        for (int si = 0; si < 3; si++)
            if (block_exact_case(rep, &s4, scheds[si], 3, 3, FAULT_NONE)) return -1;
        if (block_exact_case(rep, &s6, "fixed", 4, 2, FAULT_NONE) || block_exact_case(rep, &s4k, "fixed", 3, 3, FAULT_NONE) ||
            block_exact_case(rep, &s8p, "fixed", 3, 2, FAULT_NONE))
            return -1;
    }
    {
        toy_spec s8g = {8, 261, {0.0f, 0, 1.0f}, 0.7f, 0}, s4 = {4, 271, {1.0f, 0, 1.0f}, 0.4f, 0};
        if (block_exact_case(rep, &s8g, "fixed", 3, 2, FAULT_NONE)) return -1;
        if (block_exact_case(rep, &s4, "fixed", 3, 2, FAULT_BLOCK_TOKENWISE)) return -1;
    }
    if (gate_tree_cases(rep)) return -1;
    {
        double pa_greedy, pa_retro;
        if (appendix_a_first_token("greedy", &pa_greedy) || appendix_a_first_token("retrospective", &pa_retro)) return -1;
        /* the world's p(A) is the float 0.7f; normalised in double it is pa, and the
         * retrospective law is 0.5 * 1 + 0.5 * pa (0.85 up to float rounding of 0.7) */
        double pa = (double)0.7f / ((double)0.7f + (double)0.3f), retro = 0.5 + 0.5 * pa;
        gate_add(rep, "Appendix A exact, greedy scheduler: P(A) = 0.7", "exact-tv", 0, fabs(pa_greedy - pa), NAN, 0,
            fabs(pa_greedy - pa) < 1e-12);
        gate_add(rep, "control Appendix A exact, retrospective: P(A) = 0.85 (TV to target)", "exact-tv", 0,
            fabs(pa_retro - pa), NAN, 1, fabs(pa_retro - retro) < 1e-12 && fabs(pa_retro - pa) > 0.1);
    }
    /* exact controls: retrospective on a toy world, temperature on one side only */
    {
        toy_spec s4 = {4, 71, {1.0f, 0, 1.0f}, 0.5f, 0}, s4o = {4, 72, {0.6f, 0, 1.0f}, 0.5f, 1};
        /* the lossless search under the same jagged curve, then the two controls */
        if (exact_case(rep, &s4, "greedy", 3, 2, 0, 1)) return -1;
        if (exact_case(rep, &s4, "retrospective", 3, 2, 1, 1) || exact_case(rep, &s4o, "fixed", 3, 2, 1, 0)) return -1;
    }

    /* 2 + 3. sampling tests; Bonferroni over every lossless statistical test */
    int n_chi = 5, n_ks = quick ? 4 : 24;
    int n_tests_est = n_chi * (2 + 3) + n_ks + 1;
    double alpha_each = alpha / n_tests_est;
    if (verbose) fprintf(stderr, "lossless: sampling tests, N = %ld per case, alpha per test %.2g\n", N, alpha_each);
    for (int ti = 0; ti < 2; ti++) {
        const int gammas[2] = {1, 3};
        for (int gi = 0; gi < 2; gi++) {
            toy_spec s16 = {16, 81 + (uint64_t)(ti * 2 + gi), {temps[ti], 0, 1.0f}, 0.5f, 0};
            if (sample_case(rep, &s16, "fixed", gammas[gi], N, FAULT_NONE, VERIFY_TOKEN, 0, 900 + (uint64_t)(ti * 2 + gi), alpha_each))
                return -1;
        }
    }
    {
        int gammas[3] = {1, 3, 7};
        sampling_params procs[4] = {{0, 0, 1.0f}, {0, 0, 0.9f}, {0, 20, 1.0f}, {0, 20, 0.9f}};
        int cases = 0;
        for (int gi = 0; gi < 3; gi++)
            for (int ti = 0; ti < 2; ti++)
                for (int pi = 0; pi < 4; pi++) {
                    if (quick && (pi != 3 || gi == 1)) continue;
                    sampling_params sp = procs[pi];
                    sp.temperature = temps[ti];
                    toy_spec s64 = {64, 1000 + (uint64_t)cases, sp, 0.6f, 0};
                    if (ks_case(rep, &s64, gammas[gi], N, FAULT_NONE, 0, 5000 + (uint64_t)cases, alpha_each)) return -1;
                    cases++;
                    if (verbose) fprintf(stderr, "\rlossless: KS cases %d", cases);
                }
        if (verbose) fprintf(stderr, "\n");
    }
    {
        toy_spec s16 = {16, 85, {1.0f, 0, 1.0f}, 0.4f, 0};
        if (sample_case(rep, &s16, "fixed", 3, N, FAULT_NONE, VERIFY_BLOCK, 0, 905, alpha_each)) return -1;
    }
    if (appendix_a_sample(rep, "greedy", N, 0, alpha_each)) return -1;

    /* 4. negative controls through the same tests */
    if (verbose) fprintf(stderr, "lossless: negative controls\n");
    {
        toy_spec s16 = {16, 131, {1.0f, 0, 1.0f}, 0.5f, 0}, s16o = {16, 132, {0.6f, 0, 1.0f}, 0.5f, 1};
        if (sample_case(rep, &s16, "fixed", 3, N, FAULT_UNNORMALISED_RESIDUAL, VERIFY_TOKEN, 1, 7001, alpha_each)) return -1;
        if (sample_case(rep, &s16, "fixed", 3, N, FAULT_REUSED_UNIFORM, VERIFY_TOKEN, 1, 7002, alpha_each)) return -1;
        if (sample_case(rep, &s16o, "fixed", 3, N, FAULT_NONE, VERIFY_TOKEN, 1, 7003, alpha_each)) return -1;
        if (sample_case(rep, &s16, "fixed", 3, N, FAULT_BLOCK_TOKENWISE, VERIFY_BLOCK, 1, 7007, alpha_each)) return -1;
        toy_spec s64 = {64, 133, {1.0f, 20, 0.9f}, 0.6f, 0}, s64o = {64, 134, {0.6f, 20, 0.9f}, 0.6f, 1};
        if (ks_case(rep, &s64, 3, N, FAULT_UNNORMALISED_RESIDUAL, 1, 7004, alpha_each)) return -1;
        if (ks_case(rep, &s64, 3, N, FAULT_REUSED_UNIFORM, 1, 7005, alpha_each)) return -1;
        if (ks_case(rep, &s64o, 3, N, FAULT_NONE, 1, 7006, alpha_each)) return -1;
        if (appendix_a_sample(rep, "retrospective", N, 1, alpha_each)) return -1;
    }
    int ok = 1;
    for (int i = 0; i < rep->n; i++) ok &= rep->rec[i].pass;
    return ok ? 0 : 1;
}
