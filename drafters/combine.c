/* combine — several drafters asked every round; the one draft with the highest expected accepted
 * length goes to the scheduler and the verifier, with exactly the q its member reported.
 *
 * Expected accepted length of a chain with conditional survival estimates c_1..c_n (the members'
 * calibrated confidences): E = sum_k prod_{i<=k} c_i.
 *
 * Why the choice stays lossless. Verification is exact for a draft x ~ q when nothing that decides
 * whether x is the one verified depends on x's own draw (or on the verifier's). A deterministic
 * member (ngram, suffix, recycling) draws nothing: its draft and its confidences are functions of
 * the request's history, so its E may decide. A stochastic member's c_2.. read its own draws (c_k
 * is computed after x_{k-1} is drawn), so choosing by them would keep draws that promise long runs
 * and drop others: the kept x_1 would no longer follow q_1. Its E is therefore estimated from its
 * past proposals only (per position, the mean of the confidences it reported in this request,
 * shrunk toward the mean over finished requests, `prior` before any), and it proposes — draws —
 * only when chosen. Everything the choice reads is fixed before the round's first draw.
 * The gate's control FAULT_COMBINE_PEEKS asks every member, runs the target on the anchor and keeps
 * the draft whose x_1 the target favours most (p(x_1) / q(x_1)): that must go red.
 *
 * Choosing the largest of several estimates favours the ones that came out too high (measured: a
 * member's c_1 of 0.70 survived 0.65 of the time alone, 0.55 as combine's choice), so each member's
 * confidences are recalibrated on its chosen drafts: per member, position and bucket of the c it
 * claimed, c' = (hits + w c) / (observations + w) over the positions the committed tokens observed
 * (accepted while they equal the draft, a miss at the first difference: accept_stats.h's rule), in
 * this request and the finished ones. c' decides the choice and is what the scheduler reads
 * (conf_raw keeps the member's own); both depend on the history only.
 *
 * Members keep their own per-request state (swapped into r->dstate around each call) and see every
 * round's commit, whether or not they proposed or their draft was verified (drafter.h); each gets
 * the captured target layers it asked for, repacked from the union combine requests.
 *
 * Union mode ("tree_nodes": N > 0; SpecInfer's merged token tree): every member drafts every round and
 * their drafts become one tree of up to N nodes, a path shared by two members one branch. Every node is
 * verified as a deterministic child (TREE_TOPK): that rule (accept child x with the residual's p(x), else
 * remove x from the residual and try the next sibling) is exact for any set of children fixed before the
 * target's draws, however they were chosen, so the union of deterministic chains (ngram, suffix,
 * recycling) and top-k trees (medusa, mtp, eagle3, dflash, dspark-markov in tree mode) is exact, and a
 * sampled chain merged in stays exact too, only accepted with p(x) instead of min(1, p(x) / q(x)) at
 * T > 0. Refused: tree modes that calibrate on their own trees' verified nodes (tree_counts: recycling,
 * suffix, vanilla), which the union's rounds would misattribute. A node's confidence is its path
 * probability, the largest any member gives it (a chain's is the product of its conditional c_k), never
 * above its parent's; the nodes are ordered by it, parents first, so the scheduler's prefix is a tree
 * and the most probable nodes are verified first. (Tried on purpose: a sampled chain merged as
 * deterministic children, and parents left at their pre-sort indices; both stay exact in the gate, as
 * the rule says: a wrong tree is still a tree the forward and the verifier agree on.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/forward.h"
#include "../runtime/base/jcfg.h"
#include "drafter.h"

#define CB_MAX 8   /* members */
#define CB_POS 16  /* positions with their own confidence means (later ones share the last) */
#define CB_BK 8    /* buckets of a member's claimed c in its chosen-draft calibration */

typedef struct {
    drafter d;
    draft_block b;        /* its proposal this round */
    int slot[16];         /* its captured layers' places in combine's list */
    int same_taps;        /* ... which are combine's whole list, in order: hidden passes as is */
    double run_sum[CB_POS], run_n[CB_POS]; /* stochastic: confidences over finished requests */
    double run_hit[CB_BK][CB_POS], run_obs[CB_BK][CB_POS]; /* its chosen drafts' outcomes, finished requests */
    long chosen;          /* rounds whose draft was this member's (over the run) */
} cb_member;

typedef struct {
    int n;
    cb_member m[CB_MAX];
    float prior, prior_n; /* a stochastic member's estimate before any proposal, and its weight */
    float choice_n;       /* pseudo-observations of a member's own c in its recalibration (0: none) */
    float *hbuf;          /* a member's repacked captured states */
    size_t hcap;
    float *prow, *zrow;   /* the peek control's target row */
    lp_scratch scr;
    long rounds;
    int union_nodes;                   /* > 0: union mode, a tree of up to this many nodes */
    long u_nodes[CB_MAX], u_acc[CB_MAX]; /* union: the nodes each member put first in the tree, and accepted */
} combine;

typedef struct {
    void *ms[CB_MAX];                        /* the members' request states */
    double sum[CB_MAX][CB_POS], cnt[CB_MAX][CB_POS]; /* stochastic members' confidences in this request */
    double hit[CB_MAX][CB_BK][CB_POS], obs[CB_MAX][CB_BK][CB_POS]; /* chosen drafts' outcomes here */
    int chosen, n0, n, tok[64];                      /* the last proposal: member, committed tokens then, draft */
    float conf[64];                                  /* ... and the member's own confidences */
    int un, utok[DRAFT_TREE_MAX], upar[DRAFT_TREE_MAX], uown[DRAFT_TREE_MAX]; /* union: the last tree */
} cb_state;

/* ------------------------------------------------------------------------------- calls */

/* run `call` as member i of request r: its state in r->dstate for the call's duration */
#define AS_MEMBER(r, st, i, call)          \
    do {                                   \
        void *own_ = (r)->dstate;          \
        (r)->dstate = (st)->ms[i];         \
        int rc_ = (call);                  \
        (st)->ms[i] = (r)->dstate;         \
        (r)->dstate = own_;                \
        if (rc_) goto fail;                \
    } while (0)

/* member i's captured states, rows [n_rows] of each of its layers, from combine's [n_cap][n_rows][dim] */
static const float *member_hidden(drafter *d, int i, const float *hidden, int n_rows) {
    combine *c = d->impl;
    cb_member *mb = &c->m[i];
    if (!hidden || mb->d.n_capture == 0) return NULL;
    if (mb->same_taps) return hidden;
    size_t dim = (size_t)d->t->m.cfg.dim, slab = (size_t)n_rows * dim, need = (size_t)mb->d.n_capture * slab;
    if (need > c->hcap) {
        float *h = ds_realloc(c->hbuf, sizeof(float) * need, "combine: captured states");
        if (!h) return NULL;
        c->hbuf = h, c->hcap = need;
    }
    for (int j = 0; j < mb->d.n_capture; j++)
        memcpy(c->hbuf + (size_t)j * slab, hidden + (size_t)mb->slot[j] * slab, sizeof(float) * slab);
    return c->hbuf;
}

/* E = sum_k prod_{i<=k} c_i */
static double expected_len(const float *conf, int n) {
    double e = 0, s = 1;
    for (int k = 0; k < n; k++) e += (s *= conf[k]);
    return e;
}

static int bucket(float c) { return DS_MAX(0, DS_MIN(CB_BK - 1, (int)(c * CB_BK))); }

/* member i's claim c at 0-based position k, recalibrated on its chosen drafts, in [0.001, 0.999] */
static float recal(const combine *c, const cb_state *st, int i, int k, float cl) {
    if (c->choice_n <= 0) return cl;
    int p = DS_MIN(k, CB_POS - 1), b = bucket(cl);
    const cb_member *mb = &c->m[i];
    double h = st->hit[i][b][p] + mb->run_hit[b][p], o = st->obs[i][b][p] + mb->run_obs[b][p];
    return DS_MIN(0.999f, DS_MAX(0.001f, (float)((h + c->choice_n * cl) / (o + c->choice_n))));
}

static void scale_conf(const combine *c, const cb_state *st, int i, const float *in, float *out, int n) {
    for (int k = 0; k < n; k++) out[k] = recal(c, st, i, k, in[k]);
}

/* a stochastic member's E for g drafts, from its past confidences only */
static double history_len(const combine *c, const cb_state *st, int i, int g) {
    const cb_member *mb = &c->m[i];
    double e = 0, s = 1;
    for (int k = 0; k < g; k++) {
        int p = DS_MIN(k, CB_POS - 1);
        double run = mb->run_n[p] > 0 ? mb->run_sum[p] / mb->run_n[p] : c->prior;
        s *= recal(c, st, i, k, (float)((st->sum[i][p] + c->prior_n * run) / (st->cnt[i][p] + c->prior_n)));
        e += s;
    }
    return e;
}

static int member_gamma(const cb_member *mb, int gamma) {
    return mb->d.max_gamma ? DS_MIN(gamma, mb->d.max_gamma) : gamma;
}

static int ensure_block(cb_member *mb, const draft_block *like) {
    if (mb->b.cap >= like->cap && mb->b.V == like->V) return 0;
    draft_block_free(&mb->b);
    return draft_block_init(&mb->b, like->cap, like->V, 1);
}

/* member i drafts g tokens (a chain) or nodes (a tree) */
static int member_propose(drafter *d, request *r, int i, int g, const sampling_params *sp) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    cb_member *mb = &c->m[i];
    /* the generic drafter mutants reach the members; combine's own is combine's */
    mb->d.fault = d->fault == FAULT_COMBINE_PEEKS ? FAULT_NONE : d->fault;
    mb->b.tree = TREE_CHAIN;
    AS_MEMBER(r, st, i, mb->d.ops->propose(&mb->d, r, g, sp, &mb->b));
    return 0;
fail:
    mb->b.n = 0;
    return -1;
}

/* the target's processed row after the anchor (the peek control only): one forward, then rolled back */
static int peek_row(drafter *d, request *r, const sampling_params *sp) {
    combine *c = d->impl;
    target *t = d->t;
    int V = t->m.cfg.vocab_size, len = r->tkv->len, anchor = request_anchor(r);
    if (!c->prow) {
        DS_TRYP(c->prow = ds_malloc(sizeof(float) * (size_t)V, "combine: target row"));
        DS_TRYP(c->zrow = ds_malloc(sizeof(float) * (size_t)V, "combine: target row"));
    }
    int rc = model_forward_one(&t->m, &t->fs, r->tkv, &anchor, 1, 0, c->zrow);
    kv_cache_crop(r->tkv, len);
    DS_TRY(rc);
    DS_TRY(logits_process(c->zrow, V, sp, c->prow, &c->scr));
    return 0;
fail:
    return -1;
}

/* a proposal made: the round counted, the members' sequential-loop seconds summed */
static void round_done(drafter *d) {
    combine *c = d->impl;
    c->rounds++;
    d->t_seq_loop = 0;
    for (int i = 0; i < c->n; i++) d->t_seq_loop += c->m[i].d.t_seq_loop;
}

/* union mode: every member's draft into one tree (the header's rule), its most probable nodes kept */
static int union_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    enum { UMAX = CB_MAX * DRAFT_TREE_MAX };
    combine *c = d->impl;
    cb_state *st = r->dstate;
    int tok[UMAX], par[UMAX], own[UMAX], ord[UMAX], nid[UMAX], where[DRAFT_TREE_MAX], n = 0;
    float pc[UMAX];
    /* a member's nodes past the budget are less probable than its first ones: never kept */
    int budget = DS_MIN(DS_MIN(gamma, c->union_nodes), out->cap);
    out->n = 0;
    st->un = 0;
    for (int i = 0; i < c->n && budget > 0; i++) {
        cb_member *mb = &c->m[i];
        draft_block *b = &mb->b;
        int tree = mb->d.tree_nodes > 0;
        b->n = 0;
        b->more = NULL; /* the union asks every member for its whole draft */
        DS_TRY(member_propose(d, r, i, DS_MIN(budget, tree ? mb->d.tree_nodes : member_gamma(mb, 64)), sp));
        DS_CHECK(b->n == 0 || tree || b->tree == TREE_CHAIN, "combine: members[%d] (%s) drafted a tree without tree_nodes",
                 i, mb->d.ops->name);
        double s = 1;
        for (int k = 0; k < DS_MIN(b->n, DRAFT_TREE_MAX); k++) {
            int p = tree ? b->parent[k] : k - 1, up = p < 0 ? -1 : where[p], j = 0;
            float cf = tree ? b->conf[k] : (float)(s *= b->conf[k]);
            while (j < n && !(par[j] == up && tok[j] == b->tok[k])) j++;
            if (j == n) tok[n] = b->tok[k], par[n] = up, own[n] = i, pc[n++] = cf;
            else pc[j] = DS_MAX(pc[j], cf);
            where[k] = j;
        }
    }
    for (int j = 0; j < n; j++) { /* never above the parent (inserted before it), then by confidence */
        if (par[j] >= 0) pc[j] = DS_MIN(pc[j], pc[par[j]]);
        int k = j;
        while (k > 0 && pc[ord[k - 1]] < pc[j]) ord[k] = ord[k - 1], k--;
        ord[k] = j; /* stable: on a tie the earlier node, so a parent precedes its children */
    }
    int m = DS_MIN(n, budget);
    for (int k = 0; k < m; k++) {
        int j = ord[k];
        nid[j] = k;
        out->tok[k] = tok[j];
        out->parent[k] = par[j] < 0 ? -1 : nid[par[j]];
        if (out->conf) out->conf[k] = pc[j];
        if (out->conf_raw) out->conf_raw[k] = pc[j];
        st->utok[k] = tok[j], st->upar[k] = out->parent[k], st->uown[k] = own[j];
        c->u_nodes[own[j]]++;
    }
    out->n = st->un = m;
    out->tree = TREE_TOPK;
    st->n0 = r->toks.n;
    round_done(d);
    return 0;
fail:
    out->n = 0;
    return -1;
}

/* ------------------------------------------------------------------------------- ops */

static int combine_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    int peek = d->fault == FAULT_COMBINE_PEEKS, best = -1;
    double best_e = 0;
    out->n = 0;
    for (int i = 0; i < c->n; i++) DS_TRY(ensure_block(&c->m[i], out));
    if (c->union_nodes) return union_propose(d, r, gamma, sp, out);
    if (peek) DS_TRY(peek_row(d, r, sp));
    for (int i = 0; i < c->n; i++) {
        cb_member *mb = &c->m[i];
        double e;
        mb->b.n = 0;
        mb->b.more = NULL; /* a member asked before the choice drafts its whole chain */
        if (mb->d.deterministic || peek) {
            DS_TRY(member_propose(d, r, i, member_gamma(mb, gamma), sp));
            float sc[64];
            scale_conf(c, st, i, mb->b.conf, sc, DS_MIN(mb->b.n, 64));
            e = expected_len(sc, DS_MIN(mb->b.n, 64));
            if (peek && mb->b.n > 0) { /* the mutant: what the target thinks of the drawn x_1 */
                int x = mb->b.tok[0];
                e = c->prow[x] / DS_MAX(mb->b.q[x], 1e-30f);
            }
        } else {
            e = history_len(c, st, i, member_gamma(mb, gamma));
        }
        if (e > best_e) best_e = e, best = i;
    }
    if (best < 0) return 0;
    cb_member *mb = &c->m[best];
    if (!mb->d.deterministic && !peek) { /* chosen before it draws: now it drafts */
        /* with the scheduler's stop rule, as it would alone (its own confidences, read after each draw:
         * the rule the gate checks for a drafter that asks it) */
        mb->b.more = out->more, mb->b.more_ctx = out->more_ctx;
        DS_TRY(member_propose(d, r, best, member_gamma(mb, gamma), sp));
        for (int k = 0; k < mb->b.n; k++) {
            int p = DS_MIN(k, CB_POS - 1);
            st->sum[best][p] += mb->b.conf[k];
            st->cnt[best][p] += 1;
        }
    }
    int n = DS_MIN(DS_MIN(mb->b.n, out->cap), 64);
    memcpy(out->tok, mb->b.tok, sizeof(int) * (size_t)n);
    memcpy(out->q, mb->b.q, sizeof(float) * (size_t)n * (size_t)out->V);
    if (out->conf) scale_conf(c, st, best, mb->b.conf, out->conf, n);
    if (out->conf_raw) memcpy(out->conf_raw, mb->b.conf_raw, sizeof(float) * (size_t)n);
    out->n = n;
    st->chosen = best, st->n0 = r->toks.n, st->n = n; /* what commit scores the factor with */
    memcpy(st->tok, mb->b.tok, sizeof(int) * (size_t)n);
    memcpy(st->conf, mb->b.conf, sizeof(float) * (size_t)n);
    mb->chosen++;
    round_done(d);
    return 0;
fail:
    out->n = 0;
    return -1;
}

static int combine_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    /* the chosen draft against the committed tokens: accepted while equal, a miss at the first difference */
    const int *com = r->toks.v + st->n0;
    int m = r->toks.n - st->n0;
    for (int k = 0, cur = -1; k < n_accepted && k < m && st->un; k++) { /* union: whose nodes the path took */
        int j = 0;
        while (j < st->un && !(st->upar[j] == cur && st->utok[j] == com[k])) j++;
        if (j == st->un) break;
        c->u_acc[st->uown[j]]++, cur = j;
    }
    st->un = 0;
    for (int k = 0; k < st->n && k < m; k++) {
        int p = DS_MIN(k, CB_POS - 1), b = bucket(st->conf[k]), hit = com[k] == st->tok[k];
        st->hit[st->chosen][b][p] += hit;
        st->obs[st->chosen][b][p] += 1;
        if (!hit) break;
    }
    st->n = 0;
    for (int i = 0; i < c->n; i++) {
        cb_member *mb = &c->m[i];
        const float *h = member_hidden(d, i, hidden, n_accepted + 1);
        DS_CHECK(h || !hidden || !mb->d.n_capture, "out of memory");
        AS_MEMBER(r, st, i, mb->d.ops->commit(&mb->d, r, n_accepted, next_token, h));
    }
    return 0;
fail:
    return -1;
}

static int combine_observe(drafter *d, request *r, const int *in, const float *logits, int n, int prefill) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    int V = d->t->m.cfg.vocab_size, at = prefill ? (int)(in - r->toks.v) : 0;
    for (int i = 0; i < c->n; i++) {
        cb_member *mb = &c->m[i];
        if (!mb->d.ops->observe) continue;
        int skip = 0; /* at prefill each member gets only the prompt's last rows it asked for */
        if (prefill) {
            int from = r->n_prompt - DS_MIN(mb->d.observe_prompt, r->n_prompt);
            skip = DS_MAX(0, from - at);
            if (skip >= n) continue;
        }
        AS_MEMBER(r, st, i,
                  mb->d.ops->observe(&mb->d, r, in + skip, logits + (size_t)skip * (size_t)V, n - skip, prefill));
    }
    return 0;
fail:
    return -1;
}

static void combine_end(drafter *d, request *r) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    if (!st) return;
    for (int i = 0; i < c->n; i++) {
        cb_member *mb = &c->m[i];
        for (int p = 0; p < CB_POS; p++) {
            mb->run_sum[p] += st->sum[i][p], mb->run_n[p] += st->cnt[i][p];
            for (int b = 0; b < CB_BK; b++) mb->run_hit[b][p] += st->hit[i][b][p], mb->run_obs[b][p] += st->obs[i][b][p];
        }
        if (!st->ms[i]) continue;
        void *own = r->dstate;
        r->dstate = st->ms[i];
        mb->d.ops->end(&mb->d, r);
        r->dstate = own;
    }
    free(st);
    r->dstate = NULL;
}

static int combine_begin(drafter *d, request *r, const float *prompt_hidden) {
    combine *c = d->impl;
    cb_state *st = ds_calloc(1, sizeof *st, "combine state");
    if (!st) return -1;
    r->dstate = st;
    for (int i = 0; i < c->n; i++) {
        const float *h = member_hidden(d, i, prompt_hidden, r->n_prompt);
        DS_CHECK(h || !prompt_hidden || !c->m[i].d.n_capture, "out of memory");
        r->dstate = NULL;
        int rc = c->m[i].d.ops->begin(&c->m[i].d, r, h);
        st->ms[i] = r->dstate;
        r->dstate = st;
        if (rc) goto fail;
    }
    return 0;
fail:
    return -1; /* end() frees what was made */
}

static int combine_rewind(drafter *d, request *r) {
    combine *c = d->impl;
    cb_state *st = r->dstate;
    memset(st->sum, 0, sizeof st->sum);
    memset(st->cnt, 0, sizeof st->cnt);
    memset(st->hit, 0, sizeof st->hit);
    memset(st->obs, 0, sizeof st->obs);
    st->n = 0, st->un = 0;
    for (int i = 0; i < c->n; i++) AS_MEMBER(r, st, i, c->m[i].d.ops->rewind(&c->m[i].d, r));
    return 0;
fail:
    return -1;
}

static void combine_report(const drafter *d, char *buf, size_t n) {
    const combine *c = d->impl;
    if (c->union_nodes) {
        long tn = 0, ta = 0;
        for (int i = 0; i < c->n; i++) tn += c->u_nodes[i], ta += c->u_acc[i];
        int w = snprintf(buf, n, "combine's union: %.1f nodes a round over %ld rounds, first put there by", (double)tn / (double)DS_MAX(c->rounds, 1), c->rounds);
        for (int i = 0; i < c->n && w < (int)n; i++)
            w += snprintf(buf + w, n - (size_t)w, "%s %s %.0f%% (%.0f%% of the accepted)", i ? "," : "", c->m[i].d.ops->name,
                          100.0 * (double)c->u_nodes[i] / (double)DS_MAX(tn, 1), 100.0 * (double)c->u_acc[i] / (double)DS_MAX(ta, 1));
        if (w < (int)n) snprintf(buf + w, n - (size_t)w, "; %ld nodes accepted", ta);
        return;
    }
    int w = snprintf(buf, n, "combine chose");
    for (int i = 0; i < c->n && w < (int)n; i++)
        w += snprintf(buf + w, n - (size_t)w, "%s %s %ld of %ld rounds (%.0f%%)", i ? "," : "", c->m[i].d.ops->name,
                      c->m[i].chosen, c->rounds, 100.0 * (double)c->m[i].chosen / (double)DS_MAX(c->rounds, 1));
}

static void combine_close(drafter *d) {
    combine *c = d->impl;
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        drafter_close(&c->m[i].d);
        draft_block_free(&c->m[i].b);
    }
    free(c->hbuf), free(c->prow), free(c->zrow);
    lp_scratch_free(&c->scr);
    free(c);
    d->impl = NULL;
}

/* member i from its object {"name": ..., settings...}; its captured layers join combine's list */
static int open_member(drafter *d, int i, const cJSON *obj, target *t) {
    combine *c = d->impl;
    cb_member *mb = &c->m[i];
    cJSON *cfg = NULL;
    const cJSON *nm = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, "name") : NULL;
    DS_CHECK(cJSON_IsString(nm), "drafter: members[%d] must be an object with a \"name\"", i);
    DS_CHECK(strcmp(nm->valuestring, "combine") != 0, "drafter: members[%d] is a combine (members are single drafters)", i);
    DS_TRY(jcfg_check_unique(obj, "drafter: members[]"));
    DS_TRYP(cfg = cJSON_Duplicate(obj, 1));
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "name");
    if (drafter_open(&mb->d, nm->valuestring, cfg, t)) {
        ds_error_prefix("combine: members[%d]", i);
        goto fail;
    }
    cJSON_Delete(cfg);
    cfg = NULL;
    c->n = i + 1;
    DS_CHECK(mb->d.has_conf, "drafter: members[%d] (%s) has no confidences: combine compares expected accepted lengths",
             i, nm->valuestring);
    if (c->union_nodes) {
        DS_CHECK(!mb->d.tree_nodes || !mb->d.tree_counts, "drafter: members[%d] (%s) calibrates its tree on its own "
                 "trees' verified nodes, which a union (tree_nodes) would misattribute", i, nm->valuestring);
    } else {
        DS_CHECK(!mb->d.tree_nodes, "drafter: members[%d] (%s) drafts trees (tree_nodes %d): combine chooses among chains "
                 "(its \"tree_nodes\" merges them into one tree)", i, nm->valuestring, mb->d.tree_nodes);
    }
    for (int j = 0; j < mb->d.n_capture; j++) {
        int l = mb->d.capture_layers[j], s = 0;
        while (s < d->n_capture && d->capture_layers[s] != l) s++;
        if (s == d->n_capture) {
            DS_CHECK(d->n_capture < 16, "drafter: the members tap more than 16 target layers");
            d->capture_layers[d->n_capture++] = l;
        }
        mb->slot[j] = s;
    }
    return 0;
fail:
    cJSON_Delete(cfg);
    return -1;
}

static int combine_open(drafter *d, const cJSON *cfg, target *t) {
    combine *c = ds_calloc(1, sizeof *c, "combine drafter");
    if (!c) return -1;
    d->impl = c;
    c->prior = 0.5f, c->prior_n = 2, c->choice_n = 4;
    jcfg r;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    const cJSON *mem = jcfg_get(&r, "members");
    DS_TRY(jcfg_float(&r, "prior", 0.001, 0.999, &c->prior));
    DS_TRY(jcfg_float(&r, "prior_weight", 0.01, 1e6, &c->prior_n));
    DS_TRY(jcfg_float(&r, "choice_weight", 0, 1e9, &c->choice_n));
    DS_TRY(jcfg_int(&r, "tree_nodes", 0, DRAFT_TREE_MAX, &c->union_nodes));
    DS_TRY(jcfg_close(&r));
    DS_CHECK(cJSON_IsArray(mem) && cJSON_GetArraySize(mem) >= 1 && cJSON_GetArraySize(mem) <= CB_MAX,
             "drafter: 'members' must be an array of 1..%d drafter objects ({\"name\": ..., settings})", CB_MAX);
    int i = 0, det = 1, cap = 0;
    for (const cJSON *e = mem->child; e; e = e->next, i++) {
        DS_TRY(open_member(d, i, e, t));
        det &= c->m[i].d.deterministic;
        /* a member with no limit lifts combine's; otherwise the largest member limit */
        cap = cap < 0 || !c->m[i].d.max_gamma ? -1 : DS_MAX(cap, c->m[i].d.max_gamma);
        /* the prompt's rows when a member asks for them (suffix observes rounds only) */
        if (c->m[i].d.ops->observe) d->observe_prompt = DS_MAX(d->observe_prompt, c->m[i].d.observe_prompt);
    }
    for (i = 0; i < c->n; i++) {
        cb_member *mb = &c->m[i];
        mb->same_taps = mb->d.n_capture == d->n_capture;
        for (int j = 0; j < mb->d.n_capture; j++) mb->same_taps &= mb->slot[j] == j;
    }
    d->has_conf = 1;
    d->deterministic = det;
    d->max_gamma = cap > 0 ? cap : 0;
    /* describe and fingerprint: the members', in order */
    uint64_t h = 1469598103934665603ull;
    int w = c->union_nodes ? snprintf(d->describe, sizeof d->describe, "combine: a union tree of up to %d nodes of", c->union_nodes)
                           : snprintf(d->describe, sizeof d->describe, "combine: highest expected accepted length of");
    for (i = 0; i < c->n; i++) {
        for (const char *p = c->m[i].d.fingerprint; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
        h = (h ^ '|') * 1099511628211ull;
        if (w < (int)sizeof d->describe)
            w += snprintf(d->describe + w, sizeof d->describe - (size_t)w, "%s%s", i ? " + " : " ", c->m[i].d.ops->name);
    }
    snprintf(d->fingerprint, sizeof d->fingerprint, "combine:%016llx%s", (unsigned long long)h, c->union_nodes ? ":union" : "");
    if (c->union_nodes) d->tree_nodes = c->union_nodes;
    return 0;
fail:
    return -1; /* close() frees what was made */
}

/* the gate's: a deterministic and a stochastic member whose expected lengths cross within a few
 * rounds (ngram starts above DSpark-Markov's prior and falls on a miss), so both are chosen on
 * some paths; on SmolLM2 the same pair without the draft vocabulary */
#define GATE_NGRAM "{\"name\": \"ngram\", \"n_min\": 0, \"n_max\": 3, \"prior\": 0.55}"
/* a stochastic member that asks the scheduler's stop rule (draft_more) while it drafts */
#define GATE_VANILLA "{\"name\": \"vanilla\", \"n_layers\": 1, \"draft_lookup\": 2}"
#define GATE_DSPARK "{\"name\": \"dspark-markov\", \"init_noise\": 0.5, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 3, \"taps\": [0, 1]"

const drafter_ops drafter_combine = {
    "combine",
    "the draft of the member with the highest expected accepted length, per round: {\"members\": [{\"name\": \"ngram\"}, "
    "{\"name\": \"suffix\"}, {\"name\": \"dspark-markov\", \"checkpoint\": DIR}], \"prior\": 0.5, \"prior_weight\": 2, \"choice_weight\": 4, "
    "\"tree_nodes\": 0} (tree_nodes N > 0: every member's draft merged into one tree of N nodes, verified exactly; members "
    "then are chains or top-k trees, e.g. [{\"name\": \"medusa\", \"checkpoint\": DIR, \"tree_nodes\": 16}, {\"name\": \"ngram\"}])",
    combine_open, combine_begin, combine_propose, combine_commit, combine_end, combine_rewind, combine_close,
    "{\"members\": [" GATE_NGRAM ", " GATE_VANILLA ", " GATE_DSPARK ", \"vocab_ids\": [0, 1, 2, 4, 5, 6]}], \"prior\": 0.6}",
    "{\"members\": [" GATE_NGRAM ", " GATE_VANILLA ", " GATE_DSPARK "}], \"prior\": 0.6}",
    combine_observe,
    combine_report,
    NULL,
    /* its union: a deterministic chain and a top-k tree (an untrained Medusa's) merged into 8 nodes */
    "{\"tree_nodes\": 8, \"members\": [" GATE_NGRAM ", {\"name\": \"medusa\", \"heads\": 3, \"init_std\": 2.0, "
    "\"vocab_ids\": [5, 0, 7, 2, 6, 3], \"tree_nodes\": 6, \"tree_width\": 2}]}",
};
