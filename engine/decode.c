#include "decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

int request_init(request *r, target *t, int id, const int *prompt, int n_prompt, int max_new, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->id = id;
    r->n_prompt = n_prompt;
    r->max_new = max_new;
    if (n_prompt < 1) {
        ds_error("request %d: empty prompt", id);
        return -1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (ivec_push(&r->toks, prompt[i])) goto fail;
    int cap = DS_MIN(n_prompt + max_new + DRAFT_TREE_MAX + 8, t->m.cfg.max_seq); /* + a round's rows */
    if (!(r->tkv = kv_cache_new(t->be, &t->m.cfg, cap))) goto fail;
    request_seed(r, seed);
    return 0;
fail:
    request_free(r, t);
    return -1;
}

void request_seed(request *r, uint64_t seed) {
    /* independent streams: drafting, accept tests, residual/bonus draws */
    rng_seed(&r->rng_draft, seed * 0x9e3779b97f4a7c15ull + 1);
    rng_seed(&r->vr.accept, seed * 0x9e3779b97f4a7c15ull + 2);
    rng_seed(&r->vr.resample, seed * 0x9e3779b97f4a7c15ull + 3);
}

void request_free(request *r, target *t) {
    if (r->tkv) kv_cache_free(t->be, r->tkv);
    ivec_free(&r->toks);
    memset(r, 0, sizeof *r);
}

/* 1 - TV between processed target and draft rows: the analytic acceptance probability c*_k */
static float c_star(const float *p, const float *q, int V) {
    double sp = row_sum(p, V), sq = row_sum(q, V), l1 = 0;
    for (int i = 0; i < V; i++) l1 += fabs((p[i] > 0 ? p[i] / sp : 0) - (q[i] > 0 ? q[i] / sq : 0));
    double c = 1 - 0.5 * l1;
    return (float)(c < 0 ? 0 : c > 1 ? 1 : c);
}

/* Append the tokens a request emits this round, stopping at end-of-generation or the budget.
 * (Exposed for the sampling tests, which restart one prefilled request many times.)
 * Returns how many were appended. */
int append_emitted(target *t, request *r, const int *tok, int n) {
    int k = 0;
    for (; k < n && !r->done; k++) {
        if (ivec_push(&r->toks, tok[k])) return -1;
        if ((t->has_tokenizer && tokenizer_is_eog(&t->tk, tok[k])) || request_n_out(r) >= r->max_new ||
            (r->stop_at > 0 && request_n_out(r) >= r->stop_at) || r->toks.n >= t->m.cfg.max_seq)
            r->done = 1;
    }
    return k;
}

/* Prefill one request: the prompt through the target, first token drawn from its last row (whose
 * logits are left in last_logits, [V]), then the drafter's per-request state. */
/* the head's rows of the prompt's last positions for a drafter that observes them (their final
 * states from the prefill), 64 rows at a time */
static int observe_prompt(target *t, request *r, drafter *d, const float *fin, int n) {
    backend *be = t->be;
    int D = t->m.cfg.dim, V = t->m.cfg.vocab_size, from = n - DS_MIN(d->observe_prompt, n), rc = -1;
    float *X = NULL, *Z = NULL, *hz = NULL;
    DS_TRYP(X = be->alloc(be, sizeof(float) * 64 * (size_t)D));
    DS_TRYP(Z = be->alloc(be, sizeof(float) * 64 * (size_t)V));
    DS_TRYP(hz = ds_malloc(sizeof(float) * 64 * (size_t)V, "prompt logits"));
    for (int i0 = from; i0 < n; i0 += 64) {
        int m = DS_MIN(64, n - i0);
        float *o[1] = {Z};
        const qmat *w[1] = {&t->m.output};
        DS_TRY(be->to_device(be, X, fin + (size_t)i0 * D, sizeof(float) * (size_t)m * D));
        DS_TRY(be->matmul(be, 1, o, w, X, m));
        DS_TRY(be->to_host(be, hz, Z, sizeof(float) * (size_t)m * V));
        DS_TRY(d->ops->observe(d, r, r->toks.v + i0, hz, m, 1));
    }
    rc = 0;
fail:
    if (X) be->release(be, X);
    if (Z) be->release(be, Z);
    free(hz);
    return rc;
}

int decode_prefill(target *t, request *r, const decode_cfg *cfg, float *last_logits, decode_stats *st) {
    drafter *d = cfg->d;
    int V = t->m.cfg.vocab_size, n = r->n_prompt;
    float *hidden = NULL, *probs = NULL, *fin = NULL;
    lp_scratch scr = {0};
    int rc = -1;
    if (d && d->ops->observe && d->observe_prompt > 0) DS_TRYP(fin = ds_malloc(sizeof(float) * (size_t)n * t->m.cfg.dim, "prompt states"));
    if (d && d->n_capture > 0)
        DS_TRYP(hidden = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)n * (size_t)t->m.cfg.dim, "prompt states"));
    DS_TRYP(probs = ds_malloc(sizeof(float) * (size_t)V, "probs"));
    double t0 = ds_now();
    if (r->t0 == 0) r->t0 = t0; /* admission, when the caller did not set it */
    kv_cache *kv[1] = {r->tkv};
    fwd_batch b = {.n_seq = 1, .kv = kv, .n_new = &n, .tokens = r->toks.v, .all_logits = 0, .logits = last_logits,
                   .n_capture = hidden ? d->n_capture : 0, .capture_layers = d ? d->capture_layers : NULL, .capture = hidden,
                   .final_hidden = fin};
    DS_TRY(model_forward(&t->m, &t->fs, &b));
    if (logits_process(last_logits, V, &cfg->sp, probs, &scr)) {
        ds_error_prefix("request %d, output position 0: the target's row", r->id);
        goto fail;
    }
    int first = rng_draw(&r->vr.resample, probs, V);
    if (first < 0) goto fail;
    if (append_emitted(t, r, &first, 1) < 0) goto fail;
    if (st) st->t_prefill += ds_now() - t0;
    if (d) DS_TRY(d->ops->begin(d, r, hidden));
    if (fin) DS_TRY(observe_prompt(t, r, d, fin, n)); /* the drafter's, as its begin: in the wall time */
    rc = 0;
fail:
    free(fin);
    free(hidden);
    free(probs);
    lp_scratch_free(&scr);
    return rc;
}

int decode_run(target *t, request **reqs, int R, const decode_cfg *cfg, decode_stats *st) {
    float *logits = ds_malloc(sizeof(float) * (size_t)t->m.cfg.vocab_size, "logits");
    int rc = -1;
    if (!logits) return -1;
    for (int r = 0; r < R; r++) {
        reqs[r]->t0 = ds_now(); /* wall_s runs from here: prefill and every round */
        if (decode_prefill(t, reqs[r], cfg, logits, st)) goto done;
    }
    rc = decode_rounds(t, reqs, R, cfg, st);
done:
    for (int r = 0; r < R; r++)
        if (cfg->d && reqs[r]->dstate) cfg->d->ops->end(cfg->d, reqs[r]);
    free(logits);
    return rc;
}

/* the draft_block.more hook: the scheduler's draft_more, priced with the loop's measured cost of a
 * draft (the time between the drafter's consecutive asks: one forward and its sampling) */
typedef struct {
    scheduler *s;
    const sps_table *sps;
    int rows_other;
    double t_last, *draft_s; /* the running mean lives in the decode context */
    double sps_scale;        /* the decode context's: the target's measured forward time over the table's */
} draft_pace;

static int pace_more(void *ctx, int k, const float *conf) {
    draft_pace *p = ctx;
    double now = ds_now();
    if (k > 1) { /* an interval of one draft step */
        double dt = now - p->t_last;
        *p->draft_s = *p->draft_s > 0 ? 0.8 * *p->draft_s + 0.2 * dt : dt;
    }
    p->t_last = now;
    sched_draft q = {k, conf, p->rows_other, *p->draft_s, p->sps, p->sps_scale};
    return p->s->ops->draft_more(p->s, &q);
}

struct decode_ctx {
    int R_max, gamma, V;
    int *par, *path, *slots; /* a tree round's flat parents, one request's accepted path and its KV slots */
    int *tdepth, *ton;       /* a tree's node depths, and each node's index on the accepted path (-1: off it) */
    int *istree;             /* [R_max] the round's requests that drafted a tree (not empty) */
    double draft_s; /* measured seconds of one draft step (pace_more), 0 until seen */
    double sps_scale; /* a speculative round's target forward time over the SPS table's at its rows (running
                       * mean, 0 until seen): pace_more prices a measured draft against the table with it */
    draft_block *blocks;
    int *n_draft, *len, *n_new, *flat, *ids, *acc, *emit;
    float *conf, *logits, *p, *hidden, *hrows;
    double *scratch;
    kv_cache **kvs;
    trace_round *rows;
    lp_scratch scr;
};

void decode_ctx_free(decode_ctx *c) {
    if (!c) return;
    if (c->blocks)
        for (int r = 0; r < c->R_max; r++) draft_block_free(&c->blocks[r]);
    free(c->blocks), free(c->n_draft), free(c->len), free(c->n_new), free(c->flat), free(c->ids), free(c->acc);
    free(c->emit), free(c->conf), free(c->logits), free(c->p), free(c->hidden), free(c->hrows), free(c->scratch);
    free(c->kvs), free(c->rows), free(c->par), free(c->path), free(c->slots), free(c->tdepth), free(c->ton), free(c->istree);
    lp_scratch_free(&c->scr);
    free(c);
}

int decode_cfg_check(const decode_cfg *cfg) {
    drafter *d = cfg->d;
    DS_TRY(sampling_params_check(&cfg->sp));
    DS_CHECK(!d || (cfg->s && cfg->gamma >= 1 && cfg->gamma <= 64), "decode: a drafter needs a scheduler and gamma in 1..64");
    DS_CHECK(!d || !cfg->s->ops->needs_conf || d->has_conf,
              "scheduler '%s' needs a drafter with confidences, and '%s' has none", cfg->s ? cfg->s->ops->name : "?",
              d ? d->ops->name : "?");
    /* a tree is verified whole or cut to a prefix of its nodes by the fixed scheduler's length, or priced
     * node by node by greedy (path probabilities beside the SPS table); the others read per-position
     * conditional confidences, which a tree's nodes are not */
    DS_CHECK(!d || !d->tree_nodes || !strcmp(cfg->s->ops->name, "fixed") || !strcmp(cfg->s->ops->name, "greedy"),
             "decode: %s drafts trees (tree_nodes %d), which the fixed and greedy schedulers verify, not '%s'",
             d ? d->ops->name : "?", d ? d->tree_nodes : 0, cfg->s ? cfg->s->ops->name : "?");
    DS_CHECK(!d || d->tree_nodes <= DRAFT_TREE_MAX, "decode: a tree of %d nodes (at most %d)", d ? d->tree_nodes : 0,
             DRAFT_TREE_MAX);
    return 0;
fail:
    return -1;
}

decode_ctx *decode_ctx_new(target *t, const decode_cfg *cfg, int R_max) {
    drafter *d = cfg->d;
    int V = t->m.cfg.vocab_size, dim = t->m.cfg.dim, gamma = d ? cfg->gamma : 0;
    decode_ctx *c = NULL;
    DS_TRY(decode_cfg_check(cfg));
    DS_CHECK(R_max >= 1, "decode: a batch of %d requests", R_max);
    if (d && d->tree_nodes) gamma = d->tree_nodes; /* the scheduler's length cuts nodes, not depth */
    DS_TRYP(c = ds_calloc(1, sizeof *c, "decode context"));
    c->R_max = R_max, c->gamma = gamma, c->V = V;
    int rows_max = R_max * (gamma + 1);
    DS_TRYP(c->blocks = ds_calloc((size_t)R_max, sizeof *c->blocks, "draft blocks"));
    for (int r = 0; r < R_max && d; r++) DS_TRY(draft_block_init(&c->blocks[r], gamma + 1, V, d->has_conf)); /* + a spare row */
    DS_TRYP(c->par = ds_calloc((size_t)rows_max, sizeof(int), "tree parents"));
    DS_TRYP(c->path = ds_calloc((size_t)gamma + 1, sizeof(int), "tree path"));
    DS_TRYP(c->slots = ds_calloc((size_t)gamma + 2, sizeof(int), "tree path"));
    DS_TRYP(c->tdepth = ds_calloc((size_t)gamma + 1, sizeof(int), "tree trace"));
    DS_TRYP(c->ton = ds_calloc((size_t)gamma + 1, sizeof(int), "tree trace"));
    DS_TRYP(c->istree = ds_calloc((size_t)R_max, sizeof(int), "tree flags"));
    DS_TRYP(c->n_draft = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->len = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->n_new = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->ids = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->acc = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->emit = ds_calloc((size_t)R_max, sizeof(int), "batch"));
    DS_TRYP(c->flat = ds_calloc((size_t)rows_max, sizeof(int), "batch"));
    DS_TRYP(c->kvs = ds_calloc((size_t)R_max, sizeof(kv_cache *), "batch"));
    DS_TRYP(c->rows = ds_calloc((size_t)R_max, sizeof(trace_round), "trace rows"));
    DS_TRYP(c->conf = ds_calloc((size_t)R_max * (size_t)(gamma ? gamma : 1), sizeof(float), "confidences"));
    DS_TRYP(c->logits = ds_malloc(sizeof(float) * (size_t)rows_max * (size_t)V, "verify logits"));
    DS_TRYP(c->p = ds_malloc(sizeof(float) * (size_t)(gamma + 1) * (size_t)V, "target rows"));
    DS_TRYP(c->scratch = ds_malloc(sizeof(double) * (size_t)V, "verify scratch"));
    if (d && d->n_capture > 0) {
        DS_TRYP(c->hidden = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)rows_max * dim, "captured states"));
        DS_TRYP(c->hrows = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)(gamma + 1) * dim, "captured states"));
    }
    return c;
fail:
    decode_ctx_free(c);
    return NULL;
}

int decode_round(decode_ctx *c, target *t, request **act, int na, const decode_cfg *cfg, decode_stats *st) {
    drafter *d = cfg->d;
    int V = c->V, dim = t->m.cfg.dim, gamma = c->gamma, greedy = sampling_is_greedy(&cfg->sp);
    DS_CHECK(na >= 1 && na <= c->R_max, "decode: a round of %d requests (the context holds %d)", na, c->R_max);
    /* draft */
    double t0 = ds_now();
    int rows = 0; /* the rows of the requests drafted so far (their anchors and drafts) */
    for (int a = 0; a < na; a++) {
        request *q = act[a];
        int budget = q->max_new - request_n_out(q) - 1; /* the round's own token is always emitted */
        int room = t->m.cfg.max_seq - q->tkv->len - 1;
        /* a tree's budget is nodes (cache room): the output budget cuts its accepted path instead */
        int g = d && d->tree_nodes ? (budget > 0 ? DS_MIN(gamma, room) : 0) : DS_MAX(0, DS_MIN(gamma, DS_MIN(budget, room)));
        c->n_draft[a] = 0;
        c->istree[a] = 0;
        c->ids[a] = q->id;
        if (d && g > 0) {
            st->asked += g;
            draft_pace pace = {cfg->s, cfg->sps, rows, 0, &c->draft_s, c->sps_scale};
            c->blocks[a].more = cfg->s && cfg->s->ops->draft_more ? pace_more : NULL;
            c->blocks[a].more_ctx = &pace;
            c->blocks[a].tree = TREE_CHAIN;
            int prc = d->ops->propose(d, q, g, &cfg->sp, &c->blocks[a]);
            c->blocks[a].more = NULL, c->blocks[a].more_ctx = NULL;
            DS_TRY(prc);
            c->n_draft[a] = c->blocks[a].n;
            c->istree[a] = c->n_draft[a] > 0 && c->blocks[a].tree != TREE_CHAIN;
            if (d->has_conf) memcpy(c->conf + (size_t)a * gamma, c->blocks[a].conf, sizeof(float) * (size_t)c->n_draft[a]);
        }
        rows += 1 + c->n_draft[a];
    }
    double t1 = ds_now();
    /* schedule */
    if (d) {
        sched_batch sb = {na, gamma, c->n_draft, d->has_conf ? c->conf : NULL, cfg->sps, c->ids, d->tree_nodes ? c->istree : NULL};
        DS_TRY(cfg->s->ops->schedule(cfg->s, &sb, c->len));
        for (int a = 0; a < na; a++) c->len[a] = DS_MAX(0, DS_MIN(c->len[a], c->n_draft[a]));
    } else {
        for (int a = 0; a < na; a++) c->len[a] = 0;
    }
    double t2 = ds_now();
    /* one target forward over [anchor, x_1..x_l] of every active request */
    int T = 0, any_tree = 0;
    for (int a = 0; a < na; a++) {
        request *q = act[a];
        const draft_block *blk = &c->blocks[a];
        int tree = c->istree[a];
        c->kvs[a] = q->tkv;
        c->n_new[a] = 1 + c->len[a];
        c->par[T] = -1;
        c->flat[T++] = request_anchor(q);
        for (int k = 0; k < c->len[a]; k++) {
            c->par[T] = tree ? blk->parent[k] + 1 : k; /* among the request's new tokens: the anchor is 0 */
            /* the control: every node after the first child of a parent attends as if its previous node (a
             * sibling, or a sibling's descendant) were its parent */
            if (tree && cfg->fault == FAULT_TREE_SIBLING_ROW && k > 0 && blk->parent[k] == blk->parent[k - 1]) c->par[T] = k;
            c->flat[T++] = blk->tok[k];
        }
        any_tree |= tree;
    }
    fwd_batch fb = {.n_seq = na, .kv = c->kvs, .n_new = c->n_new, .tokens = c->flat, .all_logits = 1, .logits = c->logits,
                    .n_capture = c->hidden ? d->n_capture : 0, .capture_layers = d ? d->capture_layers : NULL,
                    .capture = c->hidden, .parent = any_tree ? c->par : NULL};
    double tf = ds_now();
    DS_TRY(model_forward(&t->m, &t->fs, &fb));
    double dtf = ds_now() - tf;
    st->t_forward += dtf;
    if (d && cfg->sps && cfg->sps->n > 0) {
        double u = dtf * sps_at(cfg->sps, T);
        c->sps_scale = c->sps_scale > 0 ? 0.8 * c->sps_scale + 0.2 * u : u;
    }
    /* verify and commit, request by request */
    for (int a = 0, row = 0; a < na; row += c->n_new[a], a++) {
        request *q = act[a];
        draft_block *blk = &c->blocks[a];
        int l = c->len[a], base = q->tkv->len - c->n_new[a]; /* cache length before this round */
        float *p = c->p;
        sampling_params vsp = cfg->sp;
        if (cfg->fault == FAULT_VERIFY_NO_MIN_P) vsp.min_p = 0; /* the control: min-p dropped for verified tokens */
        for (int k = 0; k <= l; k++)
            if (logits_process(c->logits + (size_t)(row + k) * V, V, &vsp, p + (size_t)k * V, &c->scr)) {
                ds_error_prefix("request %d, output position %d: the target's row", q->id, request_n_out(q) + k);
                goto fail;
            }
        verify_result vres;
        int emitted[DRAFT_TREE_MAX + 2];
        int tree = c->istree[a], *path = c->path;
        /* the shifted-q control hands row k+1 as row k (the block has a spare zero row) */
        const float *qrows = blk->q ? blk->q + (cfg->fault == FAULT_SHIFTED_Q ? (size_t)V : 0) : NULL;
        if (tree) {
            int no_q = blk->tree == TREE_TOPK && cfg->fault != FAULT_TREE_RATIO; /* top-k children: q unused */
            DS_TRY(verify_tree(p, no_q ? NULL : qrows, blk->tok, blk->parent, l, V, blk->tree, greedy,
                               &q->vr, c->scratch, cfg->fault, path, &vres));
            for (int i = 0; i < vres.n_accepted; i++) emitted[i] = blk->tok[path[i]];
            emitted[vres.n_accepted] = vres.token;
        } else {
            if (cfg->compare_rules && !greedy && qrows && l > 0) {
                st->rule_rounds++;
                st->exp_acc_token += verify_expected_accepted(p, qrows, blk->tok, l, V, VERIFY_TOKEN);
                st->exp_acc_block += verify_expected_accepted(p, qrows, blk->tok, l, V, VERIFY_BLOCK);
            }
            DS_TRY(verify_round(p, qrows, blk->tok, l, V, greedy, cfg->rule, &q->vr, c->scratch, cfg->fault, &vres,
                                emitted) < 0);
            for (int i = 0; i < vres.n_accepted; i++) path[i] = i;
        }
        int k = vres.n_accepted;
        /* what a verifier returns is checked before a token is emitted (verify_result_check), and a
         * tree's accepted path must be a path of the tree: the gate alone can miss either, its output
         * budget ends on the round's last verified row and cuts extra tokens away (a greedy verifier
         * that read one draft past the end passed it) */
        if (verify_result_check(&vres, l, V, !tree)) {
            ds_error_prefix("request %d", q->id);
            goto fail;
        }
        for (int i = 0; i < k && tree; i++)
            DS_CHECK(path[i] >= 0 && path[i] < l && blk->parent[path[i]] == (i ? path[i - 1] : -1),
                     "request %d: the tree verifier's accepted path is not a path of the tree (node %d at depth %d)",
                     q->id, path[i], i + 1);
        int n_emit = append_emitted(t, q, emitted, k + 1);
        DS_CHECK(n_emit >= 0, "out of memory");
        c->acc[a] = k;
        c->emit[a] = n_emit;
        /* the target keeps the anchor and the accepted drafts: a chain's are in place, a tree's path is
         * moved down over the other branches */
        if (tree) {
            c->slots[0] = base;
            for (int i = 0; i < k; i++) c->slots[i + 1] = base + 1 + path[i];
            if (cfg->fault == FAULT_TREE_KV_KEPT) kv_cache_crop(q->tkv, base + 1 + k); /* the control: the first k nodes' rows */
            else DS_TRY(kv_cache_keep(t->be, q->tkv, base, c->slots, k + 1));
        } else {
            kv_cache_crop(q->tkv, base + 1 + k);
        }
        if (d) {
            const float *h = NULL;
            if (c->hidden) { /* the anchor's and the accepted drafts' rows of every captured layer, packed */
                for (int ci = 0; ci < d->n_capture; ci++)
                    for (int i = 0; i <= k; i++)
                        memcpy(c->hrows + ((size_t)ci * (k + 1) + i) * dim,
                               c->hidden + ((size_t)ci * T + row + (i ? 1 + path[i - 1] : 0)) * dim, sizeof(float) * dim);
                h = c->hrows;
            }
            if (d->ops->observe) DS_TRY(d->ops->observe(d, q, c->flat + row, c->logits + (size_t)row * V, l + 1, 0));
            DS_TRY(d->ops->commit(d, q, k, vres.token, h));
        }
        /* statistics and trace rows */
        q->rounds++;
        st->rounds++;
        st->emitted += n_emit;
        st->drafted += c->n_draft[a];
        st->verified += l;
        st->accepted += k;
        for (int j = 1; j <= l && !tree; j++) {
            if (k >= j - 1) st->pos_attempted[j]++;
            if (k >= j) st->pos_accepted[j]++;
        }
        for (int j = 1; j <= DS_MIN(64, k + !vres.bonus) && tree; j++) { /* by depth: a tree tries depth k + 1 unless it ended */
            st->pos_attempted[j]++;
            if (k >= j) st->pos_accepted[j]++;
        }
        c->rows[a] = (trace_round){q->id, q->rounds - 1, cfg->mode, c->n_draft[a], l, k, n_emit, T, 0, 0, 0};
        if (cfg->tr && tree) { /* one row a verified node */
            for (int i = 0; i < l; i++) c->ton[i] = -1;
            for (int j = 0; j < k; j++) c->ton[path[j]] = j;
            for (int i = 0; i < l; i++) {
                int u = blk->parent[i], rank = 0;
                c->tdepth[i] = u < 0 ? 1 : c->tdepth[u] + 1;
                for (int j = 0; j < i; j++) rank += blk->parent[j] == u;
                int on = c->ton[i] >= 0;
                trace_node tn = {q->id, q->rounds - 1, i, c->tdepth[i], rank, d->has_conf ? blk->conf[i] : NAN, on,
                                 on && rank > 0 && c->ton[i] + 1 < k};
                DS_TRY(trace_add_node(cfg->tr, &tn));
            }
        }
        if (cfg->tr && d && !tree) {
            /* every verified position, and with a confidence head every drafted one: a scheduler
             * that prunes must not erase what calibration needs. survived: 1 / 0 when known (a
             * position past the verified ones is known dead if an earlier one was rejected), -1
             * when not; c* needs the target's row, so it exists only for verified positions */
            int n_rows = d->has_conf ? c->n_draft[a] : l;
            for (int j = 1; j <= n_rows; j++) {
                float cc = d->has_conf ? blk->conf[j - 1] : NAN;
                float cr = d->has_conf && blk->conf_raw ? blk->conf_raw[j - 1] : cc;
                float cs = j <= l ? c_star(p + (size_t)(j - 1) * V, blk->q + (size_t)(j - 1) * V, V) : NAN;
                trace_conf tc = {q->id, q->rounds - 1, j, cr, cc, cs, j <= l ? k >= j : k < l ? 0 : -1};
                DS_TRY(trace_add_conf(cfg->tr, &tc));
            }
        }
        if (q->done) q->wall_s = ds_now() - q->t0;
    }
    double t3 = ds_now();
    st->t_draft += t1 - t0;
    st->t_sched += t2 - t1;
    st->t_verify += t3 - t2;
    st->batch_rounds++;
    st->batch_tokens += T;
    /* what a learning scheduler needs, then the finished requests leave it */
    if (d && cfg->s->ops->observe) {
        round_result rr = {na, gamma, c->ids, c->n_draft, c->len, c->acc, c->emit, d->has_conf ? c->conf : NULL, T,
                           t3 - t0, sps_seconds(cfg->sps, T), cfg->sps};
        DS_TRY(cfg->s->ops->observe(cfg->s, &rr));
    }
    for (int a = 0; a < na && d; a++)
        if (act[a]->done && cfg->s->ops->release) cfg->s->ops->release(cfg->s, act[a]->id);
    /* one row per request, each carrying its share of the batch's time: the rows of a round sum to
     * the round's time, never na times it */
    for (int a = 0; a < na && cfg->tr; a++) {
        c->rows[a].t_draft_us = 1e6 * (t1 - t0) / na;
        c->rows[a].t_sched_us = 1e6 * (t2 - t1) / na;
        c->rows[a].t_verify_us = 1e6 * (t3 - t2) / na;
        DS_TRY(trace_add_round(cfg->tr, &c->rows[a]));
    }
    return 0;
fail:
    return -1;
}

int decode_rounds(target *t, request **reqs, int R, const decode_cfg *cfg, decode_stats *st) {
    decode_ctx *c = decode_ctx_new(t, cfg, R);
    request **act = ds_malloc(sizeof *act * (size_t)R, "batch");
    int rc = -1;
    if (!c || !act) goto done;
    for (;;) {
        int na = 0;
        for (int r = 0; r < R; r++)
            if (!reqs[r]->done) act[na++] = reqs[r];
        if (na == 0) break;
        if (decode_round(c, t, act, na, cfg, st)) goto done;
    }
    rc = 0;
done:
    free(act);
    decode_ctx_free(c);
    return rc;
}
