#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

typedef struct {
    request r;
    double arrive, admit;
    int live;
} slot;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t seed_of(uint64_t seed, int i) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)(uint32_t)i + 0x632be59bd9b4e019ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

int serve_simulate(target *t, const decode_cfg *cfg, const ivec *prompts, int n_prompts, const serve_params *sp,
                   const char *label, serve_result *out) {
    int cap = sp->concurrency, N = sp->n_requests, rc = -1, next = 0, done = 0;
    slot *slots = NULL;
    request **act = NULL;
    double *arrive = NULL, *user = NULL;
    float *logits = NULL;
    decode_ctx *ctx = NULL;
    decode_stats st;
    memset(&st, 0, sizeof st);
    memset(out, 0, sizeof *out);
    DS_CHECK(n_prompts >= 1 && N >= 1 && cap >= 1, "serve: %d prompts, %d requests, concurrency %d", n_prompts, N, cap);
    DS_CHECK(sp->closed || sp->rate > 0, "serve: an open loop needs a positive arrival rate");
    DS_TRYP(slots = ds_calloc((size_t)cap, sizeof *slots, "serving slots"));
    DS_TRYP(act = ds_calloc((size_t)cap, sizeof *act, "serving batch"));
    DS_TRYP(arrive = ds_calloc((size_t)N, sizeof *arrive, "arrival times"));
    DS_TRYP(user = ds_calloc((size_t)N, sizeof *user, "per-user speeds"));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)t->m.cfg.vocab_size, "logits"));
    DS_TRYP(ctx = decode_ctx_new(t, cfg, cap));
    if (!sp->closed) { /* Poisson arrivals: exponential gaps from a seeded stream */
        rng_t ar;
        rng_seed(&ar, seed_of(sp->seed, -1));
        double at = 0;
        for (int i = 0; i < N; i++) arrive[i] = at += -log(rng_uniform_pos(&ar)) / sp->rate;
    }
    double t_start = ds_now(), skipped = 0, lat = 0, wait = 0, batch_sum = 0;
#define CLOCK() (ds_now() - t_start + skipped)
    ds_progress prog;
    ds_progress_start(&prog, label, "requests", N);
    while (done < N) {
        /* admissions at this round boundary */
        int live = 0;
        for (int s = 0; s < cap; s++) live += slots[s].live;
        for (int s = 0; s < cap && next < N; s++) {
            if (slots[s].live) continue;
            double now = CLOCK();
            if (sp->closed) arrive[next] = now; /* a closed loop's newcomer arrives as the last one leaves */
            else if (arrive[next] > now) {
                if (live > 0) break;
                skipped += arrive[next] - now; /* nothing to compute until it arrives */
                out->idle_s += arrive[next] - now;
            }
            slot *q = &slots[s];
            const ivec *p = &prompts[next % n_prompts];
            DS_TRY(request_init(&q->r, t, next, p->v, p->n, sp->max_new, seed_of(sp->seed, next)));
            q->live = 1, q->arrive = arrive[next], q->admit = CLOCK();
            q->r.t0 = ds_now();
            double t0 = ds_now();
            DS_TRY(decode_prefill(t, &q->r, cfg, logits, &st));
            out->prefill_s += ds_now() - t0;
            live++, next++;
        }
        /* one round over everything active */
        int na = 0;
        for (int s = 0; s < cap; s++)
            if (slots[s].live && !slots[s].r.done) act[na++] = &slots[s].r;
        if (na > 0) {
            DS_TRY(decode_round(ctx, t, act, na, cfg, &st));
            batch_sum += na;
        }
        /* departures */
        double now = CLOCK();
        for (int s = 0; s < cap; s++) {
            slot *q = &slots[s];
            if (!q->live || !q->r.done) continue;
            int nout = request_n_out(&q->r);
            uint64_t h = 0xcbf29ce484222325ull;
            for (int i = 0; i < nout; i++) h = (h ^ (uint64_t)(uint32_t)q->r.toks.v[q->r.n_prompt + i]) * 0x100000001b3ull;
            if (sp->hash) sp->hash[q->r.id] = h;
            if (cfg->tr) {
                trace_request row = {0};
                if (sp->meta) row = sp->meta[q->r.id % n_prompts];
                row.request = q->r.id, row.mode = cfg->mode, row.prompt_tokens = q->r.n_prompt;
                row.output_tokens = nout, row.rounds = q->r.rounds, row.wall_s = now - q->admit;
                row.output_hash = (int64_t)h;
                DS_TRY(trace_add_request(cfg->tr, &row));
            }
            out->tokens += nout;
            lat += now - q->arrive;
            wait += q->admit - q->arrive;
            user[done++] = nout / DS_MAX(now - q->admit, 1e-9);
            if (cfg->d && q->r.dstate) cfg->d->ops->end(cfg->d, &q->r);
            request_free(&q->r, t);
            q->live = 0;
        }
        char extra[128];
        snprintf(extra, sizeof extra, "batch %d, %.1f tok/s aggregate", na, out->tokens / DS_MAX(now, 1e-9));
        ds_progress_update(&prog, done, extra);
    }
    ds_progress_end(&prog);
    out->clock_s = CLOCK();
    for (int j = 1; cfg->tr && cfg->d && j <= cfg->gamma; j++) {
        trace_position row = {j, st.pos_attempted[j], st.pos_accepted[j]};
        DS_TRY(trace_add_position(cfg->tr, &row));
    }
#undef CLOCK
    out->requests = N;
    out->batch_rounds = st.batch_rounds;
    out->batch_rows = st.batch_tokens;
    out->req_rounds = st.rounds;
    out->drafted = st.drafted, out->verified = st.verified, out->accepted = st.accepted;
    out->agg_tok_s = out->tokens / out->clock_s;
    double us = 0;
    for (int i = 0; i < N; i++) us += user[i];
    out->user_tok_s = us / N;
    qsort(user, (size_t)N, sizeof *user, cmp_double);
    out->user_p10_tok_s = user[N / 10];
    out->latency_s = lat / N;
    out->wait_s = wait / N;
    out->mean_batch = st.batch_rounds ? batch_sum / st.batch_rounds : 0;
    out->verify_per_req = st.rounds ? (double)st.verified / st.rounds : 0;
    out->tau = st.rounds ? (double)st.emitted / st.rounds : 0;
    rc = 0;
fail:
    if (slots)
        for (int s = 0; s < cap; s++)
            if (slots[s].live) {
                if (cfg->d && slots[s].r.dstate) cfg->d->ops->end(cfg->d, &slots[s].r);
                request_free(&slots[s].r, t);
            }
    decode_ctx_free(ctx);
    free(slots), free(act), free(arrive), free(user), free(logits);
    return rc;
}
