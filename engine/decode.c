#include "decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"

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
    int cap = DS_MIN(n_prompt + max_new + 72, t->m.cfg.max_seq);
    if (!(r->tkv = kv_cache_new(t->be, &t->m.cfg, cap))) goto fail;
    /* independent streams: drafting, accept tests, residual/bonus draws */
    rng_seed(&r->rng_draft, seed * 0x9e3779b97f4a7c15ull + 1);
    rng_seed(&r->vr.accept, seed * 0x9e3779b97f4a7c15ull + 2);
    rng_seed(&r->vr.resample, seed * 0x9e3779b97f4a7c15ull + 3);
    return 0;
fail:
    request_free(r, t);
    return -1;
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
int decode_prefill(target *t, request *r, const decode_cfg *cfg, float *last_logits, decode_stats *st) {
    drafter *d = cfg->d;
    int V = t->m.cfg.vocab_size, n = r->n_prompt;
    float *hidden = NULL, *probs = NULL;
    lp_scratch scr = {0};
    int rc = -1;
    if (d && d->n_capture > 0)
        DS_TRYP(hidden = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)n * (size_t)t->m.cfg.dim, "prompt states"));
    DS_TRYP(probs = ds_malloc(sizeof(float) * (size_t)V, "probs"));
    double t0 = ds_now();
    kv_cache *kv[1] = {r->tkv};
    fwd_batch b = {.n_seq = 1, .kv = kv, .n_new = &n, .tokens = r->toks.v, .all_logits = 0, .logits = last_logits,
                   .n_capture = hidden ? d->n_capture : 0, .capture_layers = d ? d->capture_layers : NULL, .capture = hidden};
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
    rc = 0;
fail:
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
        double t0 = ds_now();
        if (decode_prefill(t, reqs[r], cfg, logits, st)) goto done;
        reqs[r]->wall_s = ds_now() - t0; /* decode_rounds adds the rest */
    }
    rc = decode_rounds(t, reqs, R, cfg, st);
done:
    for (int r = 0; r < R; r++)
        if (cfg->d && reqs[r]->dstate) cfg->d->ops->end(cfg->d, reqs[r]);
    free(logits);
    return rc;
}

int decode_rounds(target *t, request **reqs, int R, const decode_cfg *cfg, decode_stats *st) {
    drafter *d = cfg->d;
    int V = t->m.cfg.vocab_size, dim = t->m.cfg.dim, gamma = d ? cfg->gamma : 0;
    int greedy = sampling_is_greedy(&cfg->sp), rc = -1;
    draft_block *blocks = NULL;
    int *n_draft = NULL, *len = NULL, *n_new = NULL, *flat = NULL, *active = NULL;
    float *conf = NULL, *logits = NULL, *p = NULL, *hidden = NULL, *hrows = NULL;
    double *scratch = NULL, *t_start = NULL;
    kv_cache **kvs = NULL;
    lp_scratch scr = {0};
    if (sampling_params_check(&cfg->sp)) return -1;
    DS_CHECK(!d || (cfg->s && gamma >= 1 && gamma <= 64), "decode: a drafter needs a scheduler and gamma in 1..64");
    DS_CHECK(!d || !cfg->s->ops->needs_conf || d->has_conf,
             "scheduler '%s' needs a drafter with confidences, and '%s' has none", cfg->s ? cfg->s->ops->name : "?",
             d ? d->ops->name : "?");
    int rows_max = R * (gamma + 1);
    DS_TRYP(blocks = ds_calloc((size_t)R, sizeof *blocks, "draft blocks"));
    for (int r = 0; r < R && d; r++) DS_TRY(draft_block_init(&blocks[r], gamma + 1, V, d->has_conf)); /* + a spare row */
    DS_TRYP(n_draft = ds_calloc((size_t)R, sizeof(int), "batch"));
    DS_TRYP(len = ds_calloc((size_t)R, sizeof(int), "batch"));
    DS_TRYP(n_new = ds_calloc((size_t)R, sizeof(int), "batch"));
    DS_TRYP(active = ds_calloc((size_t)R, sizeof(int), "batch"));
    DS_TRYP(flat = ds_calloc((size_t)rows_max, sizeof(int), "batch"));
    DS_TRYP(kvs = ds_calloc((size_t)R, sizeof(kv_cache *), "batch"));
    DS_TRYP(t_start = ds_calloc((size_t)R, sizeof(double), "batch"));
    DS_TRYP(conf = ds_calloc((size_t)R * (size_t)(gamma ? gamma : 1), sizeof(float), "confidences"));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)rows_max * (size_t)V, "verify logits"));
    DS_TRYP(p = ds_malloc(sizeof(float) * (size_t)(gamma + 1) * (size_t)V, "target rows"));
    DS_TRYP(scratch = ds_malloc(sizeof(double) * (size_t)V, "verify scratch"));
    if (d && d->n_capture > 0) {
        DS_TRYP(hidden = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)rows_max * dim, "captured states"));
        DS_TRYP(hrows = ds_malloc(sizeof(float) * (size_t)d->n_capture * (size_t)(gamma + 1) * dim, "captured states"));
    }

    for (int r = 0; r < R; r++) t_start[r] = ds_now() - reqs[r]->wall_s; /* wall_s so far: the prefill */
    for (;;) {
        int na = 0;
        for (int r = 0; r < R; r++)
            if (!reqs[r]->done) active[na++] = r;
        if (na == 0) break;
        /* draft */
        double t0 = ds_now();
        for (int a = 0; a < na; a++) {
            request *q = reqs[active[a]];
            int budget = q->max_new - request_n_out(q) - 1; /* the round's own token is always emitted */
            int room = t->m.cfg.max_seq - q->tkv->len - 1;
            int g = DS_MAX(0, DS_MIN(gamma, DS_MIN(budget, room)));
            n_draft[a] = 0;
            if (d && g > 0) {
                DS_TRY(d->ops->propose(d, q, g, &cfg->sp, &blocks[active[a]]));
                n_draft[a] = blocks[active[a]].n;
                if (d->has_conf) memcpy(conf + (size_t)a * gamma, blocks[active[a]].conf, sizeof(float) * (size_t)n_draft[a]);
            }
        }
        double t1 = ds_now();
        /* schedule */
        if (d) {
            sched_batch sb = {na, gamma, n_draft, d->has_conf ? conf : NULL, cfg->sps};
            DS_TRY(cfg->s->ops->schedule(cfg->s, &sb, len));
            for (int a = 0; a < na; a++) len[a] = DS_MAX(0, DS_MIN(len[a], n_draft[a]));
        } else {
            for (int a = 0; a < na; a++) len[a] = 0;
        }
        double t2 = ds_now();
        /* one target forward over [anchor, x_1..x_l] of every active request */
        int T = 0;
        for (int a = 0; a < na; a++) {
            request *q = reqs[active[a]];
            kvs[a] = q->tkv;
            n_new[a] = 1 + len[a];
            flat[T++] = request_anchor(q);
            for (int k = 0; k < len[a]; k++) flat[T++] = blocks[active[a]].tok[k];
        }
        fwd_batch fb = {.n_seq = na, .kv = kvs, .n_new = n_new, .tokens = flat, .all_logits = 1, .logits = logits,
                        .n_capture = hidden ? d->n_capture : 0, .capture_layers = d ? d->capture_layers : NULL,
                        .capture = hidden};
        DS_TRY(model_forward(&t->m, &t->fs, &fb));
        /* verify and commit, request by request */
        for (int a = 0, row = 0; a < na; row += n_new[a], a++) {
            request *q = reqs[active[a]];
            draft_block *blk = &blocks[active[a]];
            int l = len[a], base = q->tkv->len - n_new[a]; /* cache length before this round */
            for (int k = 0; k <= l; k++)
                if (logits_process(logits + (size_t)(row + k) * V, V, &cfg->sp, p + (size_t)k * V, &scr)) {
                    ds_error_prefix("request %d, output position %d: the target's row", q->id, request_n_out(q) + k);
                    goto fail;
                }
            verify_result vres;
            int emitted[66];
            /* the shifted-q control hands row k+1 as row k (the block has a spare zero row) */
            const float *qrows = blk->q ? blk->q + (cfg->fault == FAULT_SHIFTED_Q ? (size_t)V : 0) : NULL;
            DS_TRY(verify_round(p, qrows, blk->tok, l, V, greedy, &q->vr, scratch, cfg->fault, &vres, emitted) < 0);
            int k = vres.n_accepted;
            int n_emit = append_emitted(t, q, emitted, k + 1);
            DS_CHECK(n_emit >= 0, "out of memory");
            /* the target keeps the anchor and the accepted drafts */
            kv_cache_crop(q->tkv, base + 1 + k);
            if (d) {
                const float *h = NULL;
                if (hidden) { /* rows row..row+k of every captured layer, packed for the drafter */
                    for (int c = 0; c < d->n_capture; c++)
                        memcpy(hrows + ((size_t)c * (k + 1)) * dim, hidden + ((size_t)c * T + row) * dim,
                               sizeof(float) * (size_t)(k + 1) * dim);
                    h = hrows;
                }
                DS_TRY(d->ops->commit(d, q, k, vres.token, h));
            }
            /* statistics and trace rows */
            q->rounds++;
            st->rounds++;
            st->emitted += n_emit;
            st->drafted += n_draft[a];
            st->verified += l;
            st->accepted += k;
            for (int j = 1; j <= l; j++) {
                if (k >= j - 1) st->pos_attempted[j]++;
                if (k >= j) st->pos_accepted[j]++;
            }
            if (cfg->tr) {
                trace_round tr = {q->id, q->rounds - 1, cfg->mode, n_draft[a], l, k, n_emit, T,
                                  1e6 * (t1 - t0) / na, 1e6 * (t2 - t1), 0};
                tr.t_verify_us = 1e6 * (ds_now() - t2); /* the batch's forward and verification so far */
                DS_TRY(trace_add_round(cfg->tr, &tr));
                /* every verified position, and with a confidence head every drafted one: a scheduler
                 * that prunes must not erase what calibration needs. survived: 1 / 0 when known (a
                 * position past the verified ones is known dead if an earlier one was rejected), -1
                 * when not; c* needs the target's row, so it exists only for verified positions */
                int n_rows = d && d->has_conf ? n_draft[a] : l; /* no drafter (baseline): none */
                for (int j = 1; j <= n_rows; j++) {
                    float cc = d->has_conf ? blk->conf[j - 1] : NAN;
                    float cr = d->has_conf && blk->conf_raw ? blk->conf_raw[j - 1] : cc;
                    float cs = j <= l ? c_star(p + (size_t)(j - 1) * V, blk->q + (size_t)(j - 1) * V, V) : NAN;
                    trace_conf tc = {q->id, q->rounds - 1, j, cr, cc, cs, j <= l ? k >= j : k < l ? 0 : -1};
                    DS_TRY(trace_add_conf(cfg->tr, &tc));
                }
            }
            if (q->done) q->wall_s = ds_now() - t_start[active[a]];
        }
        double t3 = ds_now();
        st->t_draft += t1 - t0;
        st->t_sched += t2 - t1;
        st->t_verify += t3 - t2;
    }
    rc = 0;
fail:
    if (blocks)
        for (int r = 0; r < R; r++) draft_block_free(&blocks[r]);
    free(blocks), free(n_draft), free(len), free(n_new), free(active), free(flat), free(kvs), free(t_start);
    free(conf), free(logits), free(p), free(scratch), free(hidden), free(hrows);
    lp_scratch_free(&scr);
    return rc;
}
