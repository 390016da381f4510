/* test_engine — the decoding loop on the real SmolLM2: greedy speculative decoding reproduces the
 * autoregressive output token for token (batch-invariant kernels), a drafter that IS the target is
 * always accepted at temperature 1, round accounting adds up, requests decoded together equal
 * requests decoded alone, and configuration errors are clear. */
#include "testutil.h"

#include "../engine/decode.h"
#include "../engine/serve.h"
#include "../engine/trace.h"
#include "../verify/stats.h"

typedef struct {
    target t;
} ctx;

static int setup(void **state) {
    if (!need_real_model()) return -1;
    ctx *c = calloc(1, sizeof *c);
    if (target_open(&c->t, real_model_path(), NULL)) {
        fprintf(stderr, "%s\n", ds_errmsg());
        return -1;
    }
    *state = c;
    return 0;
}

static int teardown(void **state) {
    ctx *c = *state;
    target_close(&c->t);
    free(c);
    return 0;
}

static void encode(target *t, const char *text, ivec *ids) {
    chat_msg m = {"user", text};
    ids->n = 0;
    assert_int_equal(chat_encode(&t->ct, &t->tk, &m, 1, 1, ids), 0);
}

static const char *PROMPTS[3] = {"Write a haiku about autumn.", "What is 17 times 3? Answer briefly.",
                                 "Write a Python function that sums a list."};

/* decode the prompts, R at a time, and return each output (caller frees) */
static int **decode_all(target *t, drafter *d, scheduler *s, int gamma, sampling_params sp, int max_new, int R,
                        int *n_out, decode_stats *st, uint64_t seed) {
    int **outs = calloc(3, sizeof(int *));
    decode_cfg cfg = {sp, gamma, d, s, NULL, NULL, d ? MODE_SPEC : MODE_AR};
    memset(st, 0, sizeof *st);
    for (int g = 0; g < 3; g += R) {
        int n = DS_MIN(R, 3 - g);
        request reqs[3];
        request *rp[3];
        ivec ids = {0};
        for (int i = 0; i < n; i++) {
            encode(t, PROMPTS[g + i], &ids);
            assert_int_equal(request_init(&reqs[i], t, g + i, ids.v, ids.n, max_new, seed + (uint64_t)(g + i)), 0);
            rp[i] = &reqs[i];
        }
        ivec_free(&ids);
        if (decode_run(t, rp, n, &cfg, st)) fail_msg("%s", ds_errmsg());
        for (int i = 0; i < n; i++) {
            n_out[g + i] = request_n_out(&reqs[i]);
            outs[g + i] = malloc(sizeof(int) * (size_t)n_out[g + i]);
            memcpy(outs[g + i], reqs[i].toks.v + reqs[i].n_prompt, sizeof(int) * (size_t)n_out[g + i]);
            /* accounting: the first token comes from the prefill, the rest from rounds */
            assert_true(n_out[g + i] <= max_new);
            for (int k = 0; k + 1 < n_out[g + i]; k++) assert_false(tokenizer_is_eog(&t->tk, outs[g + i][k]));
            request_free(&reqs[i], t);
        }
    }
    return outs;
}

static void free_outs(int **o) {
    for (int i = 0; i < 3; i++) free(o[i]);
    free(o);
}

static void test_greedy_equals_autoregressive(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"layers\": 20}");
    assert_int_equal(drafter_open(&d, "vanilla", dc, &c->t), 0);
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    sampling_params greedy = {0, 0, 1};
    int na[3], ns[3];
    decode_stats sa, ss;
    int **ar = decode_all(&c->t, NULL, NULL, 0, greedy, 40, 1, na, &sa, 1);
    int **sp = decode_all(&c->t, &d, &s, 4, greedy, 40, 1, ns, &ss, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(na[i], ns[i]);
        assert_memory_equal(ar[i], sp[i], sizeof(int) * (size_t)na[i]);
    }
    /* speculative rounds emitted every output token after the first */
    assert_int_equal(ss.emitted, ns[0] + ns[1] + ns[2] - 3);
    assert_int_equal(sa.rounds, sa.emitted);
    assert_true(ss.rounds < sa.rounds);
    /* several requests in one varlen batch decode exactly as alone */
    int nb[3];
    decode_stats sb;
    int **batched = decode_all(&c->t, &d, &s, 4, greedy, 40, 3, nb, &sb, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(nb[i], na[i]);
        assert_memory_equal(batched[i], ar[i], sizeof(int) * (size_t)na[i]);
    }
    free_outs(ar), free_outs(sp), free_outs(batched);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

/* greedy decoding with drafter d under scheduler s equals autoregression token for token, alone and in a
 * batch of three requests whose trees differ; the lone speculative run's statistics in ss, the batch's in
 * sb_out (NULL: not wanted) */
static void tree_equals_ar(ctx *c, drafter *d, scheduler *s, decode_stats *ss, decode_stats *sb_out) {
    sampling_params greedy = {0, 0, 1};
    int na[3], ns[3], nb[3];
    decode_stats sa, sb;
    int **ar = decode_all(&c->t, NULL, NULL, 0, greedy, 48, 1, na, &sa, 1);
    int **sp = decode_all(&c->t, d, s, 4, greedy, 48, 1, ns, ss, 1);
    int **bt = decode_all(&c->t, d, s, 4, greedy, 48, 3, nb, &sb, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(na[i], ns[i]);
        assert_memory_equal(ar[i], sp[i], sizeof(int) * (size_t)na[i]);
        assert_int_equal(na[i], nb[i]);
        assert_memory_equal(ar[i], bt[i], sizeof(int) * (size_t)na[i]);
    }
    assert_int_equal(ss->emitted, ns[0] + ns[1] + ns[2] - 3);
    assert_true(ss->accepted > 0 && ss->rounds < sa.rounds);
    free_outs(ar), free_outs(sp), free_outs(bt);
    if (sb_out) *sb_out = sb;
}

/* Recycling's static tree of 80 nodes (more than a chain's 64 rows): greedy output is autoregression's,
 * and rounds verify more than 64 nodes (the cache's slack holds them) */
static void test_static_tree_equals_autoregressive(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"tree_shape\": \"static\"}");
    assert_int_equal(drafter_open(&d, "recycling", dc, &c->t), 0);
    assert_int_equal(d.tree_nodes, 80);
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    decode_stats ss;
    tree_equals_ar(c, &d, &s, &ss, NULL);
    assert_true(ss.verified > 64 * 4); /* most rounds verify more than 64 nodes */
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

/* A recycling tree of 8 nodes, greedy: the output is autoregression's token for token, alone and in a
 * batch of three requests whose trees differ, and its trace has one row a verified node whose accepted
 * ones are the rounds' accepted paths. */
static void test_tree_greedy_equals_autoregressive(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"tree_nodes\": 8}");
    assert_int_equal(drafter_open(&d, "recycling", dc, &c->t), 0);
    assert_int_equal(d.tree_nodes, 8);
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    sampling_params greedy = {0, 0, 1};
    decode_stats ss;
    tree_equals_ar(c, &d, &s, &ss, NULL);
    assert_true(ss.verified > ss.rounds); /* trees of several nodes were verified */
    /* the trace's nodes */
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("tree-trace.h5"));
    trace *tr = trace_create(path);
    assert_non_null(tr);
    decode_cfg cfg = {greedy, 4, &d, &s, NULL, tr, MODE_SPEC};
    request r;
    ivec ids = {0};
    encode(&c->t, PROMPTS[0], &ids);
    assert_int_equal(request_init(&r, &c->t, 0, ids.v, ids.n, 48, 1), 0);
    request *rp[1] = {&r};
    decode_stats st = {0};
    assert_int_equal(decode_run(&c->t, rp, 1, &cfg, &st), 0);
    request_free(&r, &c->t);
    ivec_free(&ids);
    assert_int_equal(trace_close(tr), 0);
    trace_data td;
    assert_int_equal(trace_read(path, &td), 0);
    long acc = 0;
    for (long i = 0; i < td.n_nodes; i++) {
        acc += td.nodes[i].accepted;
        assert_true(td.nodes[i].depth >= 1 && td.nodes[i].rank >= 0);
        assert_true(!td.nodes[i].led_on || (td.nodes[i].accepted && td.nodes[i].rank > 0));
    }
    assert_int_equal(td.n_nodes, st.verified);
    assert_int_equal(acc, st.accepted);
    /* each round's nodes against its round row: numbered 0.. in order, the accepted ones one a depth
     * 1..k, the anchor's children ranked 0, 1, .. in order, a node's depth at most one past the
     * deepest before it (parents come first), led_on exactly where an accepted sibling's path goes on */
    long ni = 0, rounds_with_nodes = 0, rounds_verifying = 0;
    for (long r = 0; r < td.n_rounds; r++) {
        const trace_round *tr_ = &td.rounds[r];
        int k = tr_->accepted, l = tr_->verified, seen[65] = {0}, rank1 = 0, deepest = 0;
        rounds_verifying += l > 0;
        if (l == 0 || ni == td.n_nodes || td.nodes[ni].round != tr_->round) continue; /* no draft, or a chain */
        rounds_with_nodes++;
        assert_true(l <= 64 && k <= l && ni + l <= td.n_nodes);
        for (int i = 0; i < l; i++) {
            const trace_node *n = &td.nodes[ni + i];
            assert_int_equal(n->request, tr_->request);
            assert_int_equal(n->round, tr_->round);
            assert_int_equal(n->node, i);
            assert_true(n->depth <= deepest + 1);
            deepest = DS_MAX(deepest, n->depth);
            if (n->depth == 1) assert_int_equal(n->rank, rank1++);
            if (n->accepted) seen[n->depth]++;
            assert_int_equal(n->led_on, n->accepted && n->rank > 0 && n->depth < k);
        }
        for (int j = 1; j <= 64; j++) assert_int_equal(seen[j], j <= k);
        ni += l;
    }
    assert_int_equal(ni, td.n_nodes);
    assert_true(rounds_with_nodes > st.rounds / 2);
    /* the per-depth table: every accepted node counted once, depth j + 1 tried only after j was accepted */
    long pacc = 0;
    for (int j = 1; j <= 64; j++) {
        pacc += st.pos_accepted[j];
        assert_true(st.pos_accepted[j] <= st.pos_attempted[j]);
        if (j < 64) assert_true(st.pos_attempted[j + 1] <= st.pos_accepted[j]);
    }
    assert_int_equal(pacc, st.accepted);
    assert_int_equal(st.pos_attempted[1], rounds_verifying);
    trace_data_free(&td);
    remove(path);
    /* fixed and greedy verify trees; a scheduler that reads conditional confidences is refused by name */
    scheduler g;
    assert_int_equal(scheduler_open(&g, "threshold", NULL, 0), 0);
    decode_cfg bad = {greedy, 4, &d, &g, NULL, NULL, MODE_SPEC};
    assert_null(decode_ctx_new(&c->t, &bad, 1));
    assert_non_null(strstr(ds_errmsg(), "threshold"));
    scheduler_close(&g);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

/* Continuous batching: requests joining and leaving a running batch (closed loop at 2, and an open
 * loop so slow that each request runs alone) decode greedily exactly what each decodes alone: a chain
 * drafter under a learning per-request scheduler, and a tree drafter verified whole. */
static void serve_matches_alone(ctx *c, const char *dname, const char *djson, const char *sname) {
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse(djson);
    assert_int_equal(drafter_open(&d, dname, dc, &c->t), 0);
    assert_int_equal(scheduler_open(&s, sname, NULL, 0), 0);
    sampling_params greedy = {0, 0, 1};
    int na[3];
    decode_stats sa;
    int **ar = decode_all(&c->t, NULL, NULL, 0, greedy, 24, 1, na, &sa, 1);
    ivec prompts[3] = {{0}};
    for (int i = 0; i < 3; i++) encode(&c->t, PROMPTS[i], &prompts[i]);
    int B[2] = {1, 8};
    double steps[2] = {100, 40};
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 2), 0);
    decode_cfg cfg = {greedy, 4, &d, &s, &sps, NULL, MODE_SPEC};
    trace_request meta[3] = {{.dataset = "d0", .index = 10}, {.dataset = "d1", .index = 11}, {.dataset = "d2", .index = 12}};
    for (int closed = 1; closed >= 0; closed--) {
        uint64_t hash[5];
        serve_params sp = {closed, closed ? 2 : 4, closed ? 0 : 0.01, 5, 24, 1, hash, meta};
        serve_result res;
        /* what cannot be simulated is an error, not an empty result */
        serve_params bad = sp;
        if (closed) bad.concurrency = 0;
        else bad.rate = 0;
        assert_int_equal(serve_simulate(&c->t, &cfg, prompts, 3, &bad, "test serve", &res), -1);
        const char *h5 = tmp_path("serve.h5");
        assert_non_null(cfg.tr = trace_create(h5));
        if (serve_simulate(&c->t, &cfg, prompts, 3, &sp, "test serve", &res)) fail_msg("%s", ds_errmsg());
        assert_int_equal(trace_close(cfg.tr), 0);
        cfg.tr = NULL;
        for (int i = 0; i < 5; i++) {
            uint64_t h = 0xcbf29ce484222325ull;
            for (int k = 0; k < na[i % 3]; k++) h = (h ^ (uint64_t)(uint32_t)ar[i % 3][k]) * 0x100000001b3ull;
            assert_true(hash[i] == h);
        }
        /* the trace: a request row per request with its prompt's metadata, a round row per request
         * round, and the rows' times summing to at most the time spent in rounds: a batch round's
         * time is split over its requests, not charged to each (that would be ~2x here) */
        trace_data td;
        assert_int_equal(trace_read(h5, &td), 0);
        assert_int_equal(td.n_requests, 5);
        long rounds = 0;
        for (long i = 0; i < td.n_requests; i++) {
            const trace_request *q = &td.requests[i];
            assert_true(q->request >= 0 && q->request < 5 && (uint64_t)q->output_hash == hash[q->request]);
            assert_int_equal(q->index, 10 + q->request % 3);
            assert_int_equal(q->output_tokens, na[q->request % 3]);
            rounds += q->rounds;
        }
        assert_int_equal(td.n_rounds, rounds);
        assert_int_equal(td.n_rounds, res.req_rounds);
        assert_int_equal(td.n_positions, 4);
        double row_s = 0;
        for (long i = 0; i < td.n_rounds; i++)
            row_s += 1e-6 * (td.rounds[i].t_draft_us + td.rounds[i].t_sched_us + td.rounds[i].t_verify_us);
        double in_rounds = res.clock_s - res.prefill_s - res.idle_s, in_batch = 0, speed = 0, slowest = INFINITY;
        for (long i = 0; i < td.n_requests; i++) {
            const trace_request *q = &td.requests[i];
            in_batch += q->wall_s;
            speed += q->output_tokens / q->wall_s;
            slowest = fmin(slowest, q->output_tokens / q->wall_s);
        }
        /* a request's latency is its wait plus its time in the batch (the trace's wall_s), a user's
         * speed its output over that time; the 10th percentile of 5 users is the slowest */
        assert_true(fabs(res.latency_s - res.wait_s - in_batch / td.n_requests) < 1e-6);
        assert_true(fabs(res.user_tok_s - speed / td.n_requests) < 1e-9 * res.user_tok_s);
        assert_true(fabs(res.user_p10_tok_s - slowest) < 1e-9 * slowest);
        fprintf(stderr, "serve trace: rows sum to %.3f s of %.3f s in rounds\n", row_s, in_rounds);
        assert_true(row_s > 0.5 * in_rounds && row_s <= in_rounds * 1.001);
        trace_data_free(&td);
        remove(h5);
        fprintf(stderr, "serve %s: mean batch %.2f, idle %.1f s, wait %.3f s, %.1f tok/s aggregate\n",
                closed ? "closed" : "open", res.mean_batch, res.idle_s, res.wait_s, res.agg_tok_s);
        assert_int_equal(res.requests, 5);
        assert_int_equal(res.tokens, na[0] + na[1] + na[2] + na[0] + na[1]);
        if (closed) assert_true(res.mean_batch > 1.5 && res.mean_batch <= 2 && res.idle_s == 0);
        else assert_true(res.mean_batch < 1.2 && res.idle_s > 100 && res.wait_s < 0.5); /* arrivals ~100 s apart */
        assert_true(res.agg_tok_s > 0 && res.user_tok_s > 0 && res.tau >= 1);
        /* the summary's accounting, by its identities: the prefill emits each request's first token and
         * every request-round the rest; a request-round verifies its drafts beside its own token; each
         * round's batch counts its request-rounds */
        assert_int_equal(res.tokens, res.requests + llround(res.tau * res.req_rounds));
        assert_int_equal(res.batch_rows, res.req_rounds + res.verified);
        assert_true(res.verified <= res.drafted && res.accepted <= res.verified && res.batch_rounds <= res.req_rounds);
        assert_true(fabs(res.verify_per_req * res.req_rounds - res.verified) < 1e-6 * res.verified + 1e-9);
        assert_true(fabs(res.mean_batch * res.batch_rounds - res.req_rounds) < 1e-6 * res.req_rounds);
        assert_true(fabs(res.agg_tok_s * res.clock_s - res.tokens) < 1e-6 * res.tokens);
        /* the slowest of 5 users (the 10th percentile) is no faster than the mean, a request's latency
         * includes its wait, and a closed loop admits a newcomer the moment its predecessor leaves */
        assert_true(res.user_p10_tok_s > 0 && res.user_p10_tok_s <= res.user_tok_s);
        assert_true(res.wait_s >= 0 && res.latency_s > res.wait_s && res.prefill_s > 0);
        if (closed) assert_true(res.wait_s < 0.05);
        /* an open loop's requests arrive ~100 s apart and each runs alone: the clock is mostly idle and
         * a request's latency is its own time, far below the gaps */
        else assert_true(res.idle_s < res.clock_s && res.latency_s < 50);
    }
    for (int i = 0; i < 3; i++) ivec_free(&prompts[i]);
    sps_free(&sps);
    free_outs(ar);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

static void test_serve_continuous_batching(void **state) {
    ctx *c = *state;
    serve_matches_alone(c, "vanilla", "{\"layers\": 20}", "hedge");
    /* a tree drafter: each request's tree rows and their compaction inside a batch whose members change */
    serve_matches_alone(c, "recycling", "{\"tree_nodes\": 8}", "fixed"); /* fixed: whole trees, siblings accepted */
}

/* The per-position acceptance a chain run reports (the paper's alpha_k: decode_stats' pos_attempted /
 * pos_accepted, the trace's positions table) recounted from the trace's own round rows, and the trace's
 * calibration rows against them: a vanilla self-draft of 26 layers under the threshold scheduler at
 * T = 1, so rounds verify different lengths and end in rejections and in bonus tokens. */
static void test_chain_positions_recount(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"layers\": 26}");
    assert_int_equal(drafter_open(&d, "vanilla", dc, &c->t), 0);
    assert_int_equal(scheduler_open(&s, "threshold", NULL, 0), 0);
    assert_true(d.has_conf);
    const int gamma = 4;
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("chain-trace.h5"));
    trace *tr = trace_create(path);
    assert_non_null(tr);
    decode_cfg cfg = {{1.0f, 0, 1.0f}, gamma, &d, &s, NULL, tr, MODE_SPEC};
    request r;
    request *rp = &r;
    ivec ids = {0};
    encode(&c->t, PROMPTS[2], &ids);
    assert_int_equal(request_init(&r, &c->t, 0, ids.v, ids.n, 64, 7), 0);
    decode_stats st = {0};
    assert_int_equal(decode_run(&c->t, &rp, 1, &cfg, &st), 0);
    int n_out = request_n_out(&r);
    request_free(&r, &c->t);
    ivec_free(&ids);
    assert_int_equal(trace_close(tr), 0);
    trace_data td;
    assert_int_equal(trace_read(path, &td), 0);
    assert_int_equal(td.n_rounds, st.rounds);
    long att[65] = {0}, acc[65] = {0}, emitted = 0, rejected = 0, full = 0, ci = 0, lens[65] = {0};
    double cs_sum = 0, cs_var = 0, cs_acc = 0; /* c* over the verified positions reached, and their outcomes */
    for (long i = 0; i < td.n_rounds; i++) {
        const trace_round *q = &td.rounds[i];
        int k = q->accepted, l = q->verified;
        assert_int_equal(q->round, i);
        assert_true(0 <= k && k <= l && l <= q->proposed && q->proposed <= gamma);
        assert_true(q->emitted >= 1 && q->emitted <= k + 1);
        emitted += q->emitted;
        rejected += k < l, full += l > 0 && k == l, lens[l]++;
        for (int j = 1; j <= l; j++) att[j] += k >= j - 1, acc[j] += k >= j;
        /* its calibration rows: every drafted position (a confidence head), in order */
        for (int j = 1; j <= q->proposed; j++, ci++) {
            assert_true(ci < td.n_conf);
            const trace_conf *cr = &td.conf[ci];
            assert_int_equal(cr->round, i);
            assert_int_equal(cr->position, j);
            assert_true(cr->c_raw >= 0 && cr->c_raw <= 1);
            assert_int_equal(cr->survived, j <= l ? k >= j : k < l ? 0 : -1);
            if (j <= l) assert_true(cr->c_star >= 0 && cr->c_star <= 1.0001f);
            else assert_true(isnan(cr->c_star));
            if (j <= l && k >= j - 1) cs_sum += cr->c_star, cs_var += cr->c_star * (1 - cr->c_star), cs_acc += k >= j;
        }
    }
    assert_int_equal(ci, td.n_conf);
    /* c* = 1 - TV(p, q) is the chance a reached draft x ~ q is accepted: the accepted count minus the c*
     * sum over reached positions is a martingale (std sqrt(sum c* (1 - c*))). A c* off by a constant or a
     * wrong normalisation passed every suite (the range check above was the only one) */
    printf("  c*: %.1f expected acceptances over the reached positions, %.0f accepted (std %.1f)\n", cs_sum, cs_acc,
           sqrt(cs_var));
    assert_true(fabs(cs_acc - cs_sum) <= 4 * sqrt(cs_var) + 1);
    assert_int_equal(emitted + 1, n_out); /* the first token comes from the prefill */
    assert_true(rejected > 0 && full > 0 && lens[gamma] > 0 && lens[gamma] < td.n_rounds); /* every case met */
    for (int j = 1; j <= 64; j++) {
        assert_int_equal(st.pos_attempted[j], att[j]);
        assert_int_equal(st.pos_accepted[j], acc[j]);
    }
    printf("  chain positions: %ld rounds (%ld rejected, %ld all accepted), alpha_1..4 = %.2f %.2f %.2f %.2f\n",
           td.n_rounds, rejected, full, (double)acc[1] / (double)DS_MAX(1, att[1]), (double)acc[2] / (double)DS_MAX(1, att[2]),
           (double)acc[3] / (double)DS_MAX(1, att[3]), (double)acc[4] / (double)DS_MAX(1, att[4]));
    trace_data_free(&td);
    remove(path);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

static void test_full_depth_draft_always_accepted(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    char cfg[64];
    snprintf(cfg, sizeof cfg, "{\"layers\": %d}", c->t.m.cfg.n_layers);
    cJSON *dc = cJSON_Parse(cfg);
    assert_int_equal(drafter_open(&d, "vanilla", dc, &c->t), 0);
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    sampling_params sp = {1.0f, 0, 1.0f};
    int n[3];
    decode_stats st;
    int **o = decode_all(&c->t, &d, &s, 3, sp, 24, 1, n, &st, 7);
    /* q = p exactly (same kernels, batch-invariant): every verified draft is accepted */
    assert_true(st.verified > 0);
    assert_int_equal(st.accepted, st.verified);
    free_outs(o);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
}

/* The target states a capturing drafter (eagle3, mtp, dflash, dspark) is handed at commit: the anchor's
 * and each accepted draft's rows of the captured layers, taken out of the verify forward by the
 * accepted path. A wrong row is lossless (the drafter reports its q honestly), so no gate can see it:
 * it shows only as lower acceptance (vLLM #9730's class). Here a vanilla self-draft (accepted often)
 * is made to capture two layers and every commit's rows are compared with one fresh forward over the
 * finished sequence, for chain rounds and for top-k tree rounds. */
typedef struct {
    const drafter_ops *inner;
    int rounds, n_acc2, bad;
    float max_err;
    float *ref;   /* [2][n_ref][dim] the fresh forward's captured states */
    int n_ref, dim;
} capture_check;
static capture_check g_cap;

static int capture_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    capture_check *cc = &g_cap;
    int dim = cc->dim, len = r->tkv->len; /* the cache holds the anchor and the accepted drafts now */
    if (!hidden) cc->bad++;
    for (int ci = 0; ci < 2 && hidden; ci++)
        for (int i = 0; i <= n_accepted; i++) {
            int pos = len - (n_accepted + 1) + i;
            const float *got = hidden + ((size_t)ci * (n_accepted + 1) + i) * dim;
            const float *want = cc->ref + ((size_t)ci * cc->n_ref + pos) * dim;
            float scale = 1e-6f, err = 0;
            for (int j = 0; j < dim; j++) scale = fmaxf(scale, fabsf(want[j]));
            for (int j = 0; j < dim; j++) err = fmaxf(err, fabsf(got[j] - want[j]) / scale);
            cc->max_err = fmaxf(cc->max_err, err);
        }
    cc->rounds++;
    cc->n_acc2 += n_accepted >= 2;
    return cc->inner->commit(d, r, n_accepted, next_token, hidden);
}

static void test_commit_rows_are_the_accepted_states(void **state) {
    ctx *c = *state;
    const int layers[2] = {3, 17}, dim = c->t.m.cfg.dim;
    const char *cfgs[2] = {"{\"layers\": 24}", "{\"layers\": 24, \"tree_nodes\": 8}"};
    for (int tree = 0; tree < 2; tree++) {
        drafter d;
        scheduler s;
        cJSON *dc = cJSON_Parse(cfgs[tree]);
        assert_int_equal(drafter_open(&d, "vanilla", dc, &c->t), 0);
        assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
        drafter_ops ops = *d.ops;
        memset(&g_cap, 0, sizeof g_cap);
        g_cap.inner = d.ops, g_cap.dim = dim;
        ops.commit = capture_commit;
        d.ops = &ops;
        d.n_capture = 2, d.capture_layers[0] = layers[0], d.capture_layers[1] = layers[1];
        /* the autoregressive tokens first: the reference forward needs the finished sequence, and greedy
         * speculation emits exactly these */
        ivec ids = {0};
        encode(&c->t, PROMPTS[2], &ids);
        request r;
        request *rp = &r;
        decode_stats st;
        decode_cfg ar = {{0, 0, 1}, 0, NULL, NULL, NULL, NULL, MODE_AR};
        assert_int_equal(request_init(&r, &c->t, 0, ids.v, ids.n, 40, 1), 0);
        memset(&st, 0, sizeof st);
        assert_int_equal(decode_run(&c->t, &rp, 1, &ar, &st), 0);
        int n = r.toks.n;
        g_cap.n_ref = n;
        g_cap.ref = malloc(sizeof(float) * 2 * (size_t)n * dim);
        kv_cache *kv = kv_cache_new(c->t.be, &c->t.m.cfg, n + 8);
        assert_non_null(kv);
        float *lg = malloc(sizeof(float) * (size_t)c->t.m.cfg.vocab_size);
        fwd_batch fb = {.n_seq = 1, .kv = &kv, .n_new = &n, .tokens = r.toks.v, .logits = lg, .n_capture = 2,
                        .capture_layers = layers, .capture = g_cap.ref};
        assert_int_equal(model_forward(&c->t.m, &c->t.fs, &fb), 0);
        kv_cache_free(c->t.be, kv);
        free(lg);
        ivec want = {0};
        for (int i = 0; i < n; i++) ivec_push(&want, r.toks.v[i]);
        request_free(&r, &c->t);
        /* speculative, greedy: the same tokens, each commit's rows checked */
        decode_cfg sp = {{0, 0, 1}, 4, &d, &s, NULL, NULL, MODE_SPEC};
        assert_int_equal(request_init(&r, &c->t, 0, ids.v, ids.n, 40, 1), 0);
        memset(&st, 0, sizeof st);
        assert_int_equal(decode_run(&c->t, &rp, 1, &sp, &st), 0);
        assert_int_equal(r.toks.n, n);
        assert_memory_equal(r.toks.v, want.v, sizeof(int) * (size_t)n);
        request_free(&r, &c->t);
        if (g_cap.bad || g_cap.max_err > 1e-3f || g_cap.n_acc2 == 0)
            fail_msg("%s rounds: %d commits, %d without rows, %d with 2+ accepted, max relative error %g",
                     tree ? "tree" : "chain", g_cap.rounds, g_cap.bad, g_cap.n_acc2, (double)g_cap.max_err);
        d.ops = g_cap.inner;
        free(g_cap.ref);
        ivec_free(&ids), ivec_free(&want);
        drafter_close(&d);
        scheduler_close(&s);
        cJSON_Delete(dc);
    }
}

/* the target's GGUF image, edited, as a vanilla drafter's separate model: refused; the message (img freed) */
static const char *edited_draft_refused(ctx *c, char *img, size_t n) {
    const char *p = tmp_path("edited-draft.gguf");
    write_file(p, img, n);
    free(img);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "{\"model\": \"%s\"}", p);
    cJSON *j = cJSON_Parse(cfg);
    drafter d;
    assert_int_equal(drafter_open(&d, "vanilla", j, &c->t), -1);
    cJSON_Delete(j);
    remove(p);
    return ds_errmsg();
}

static void test_config_errors(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    assert_int_equal(drafter_open(&d, "medusa-9", NULL, &c->t), -1);
    assert_non_null(strstr(ds_errmsg(), "unknown drafter 'medusa-9' (known: vanilla"));
    assert_int_equal(scheduler_open(&s, "retrospective", NULL, 0), -1); /* a control, not offered to users */
    assert_non_null(strstr(ds_errmsg(), "unknown scheduler 'retrospective'"));
    cJSON *bad = cJSON_Parse("{\"layers\": 99}");
    assert_int_equal(drafter_open(&d, "vanilla", bad, &c->t), -1);
    assert_non_null(strstr(ds_errmsg(), "\"layers\" 99 must be in 1..30"));
    cJSON_Delete(bad);
    /* a draft model with another vocabulary */
    tiny_spec ts = {64, 1, 4, 2, 96, 300, GGML_F32, GGML_F32, 0, 10000};
    size_t n;
    uint8_t *img = tiny_model_gguf(&ts, 3, &n);
    const char *p = tmp_path("tiny-draft.gguf");
    write_file(p, img, n);
    free(img);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "{\"model\": \"%s\"}", p);
    bad = cJSON_Parse(cfg);
    assert_int_equal(drafter_open(&d, "vanilla", bad, &c->t), -1);
    assert_non_null(strstr(ds_errmsg(), "vocabulary of 300 tokens, the target has 49152"));
    cJSON_Delete(bad);
    remove(p);
    /* the target's vocabulary size and no tokenizer in the file: the size is all there is to check, and it
     * opens (and the unknown-drafter message lists every family, the training-free ones too) */
    ts.vocab = c->t.m.cfg.vocab_size, ts.dim = 32, ts.hidden = 64;
    img = tiny_model_gguf(&ts, 3, &n);
    write_file(p, img, n);
    free(img);
    bad = cJSON_Parse(cfg);
    if (drafter_open(&d, "vanilla", bad, &c->t)) fail_msg("a tokenizer-less draft of the target's size: %s", ds_errmsg());
    drafter_close(&d);
    cJSON_Delete(bad);
    remove(p);
    assert_int_equal(drafter_open(&d, "nope", NULL, &c->t), -1);
    assert_non_null(strstr(ds_errmsg(), "ngram, suffix"));
    /* the target's own file with token 0's text changed: the same size, another vocabulary (ids below 5
     * went unchecked) */
    {
        char *img2;
        size_t n2;
        assert_int_equal(ds_read_file(real_model_path(), &img2, &n2), 0);
        char *k = memmem(img2, n2, "tokenizer.ggml.tokens", 21);
        assert_non_null(k);
        char *first = k + 21 + 4 + 4 + 8 + 8; /* array type, element type, count, first string's length */
        assert_int_equal(first[0], '<');
        first[0] = '[';
        assert_non_null(strstr(edited_draft_refused(c, img2, n2), "vocabulary differs from the target's at token id 0 ('[|endoftext|>' vs '<|endoftext|>')"));
    }
    /* the same texts with the end or the start token moved, each alone: another model's specials */
    const char *special[2] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"};
    for (int sp = 0; sp < 2; sp++) {
        char *img2;
        size_t n2;
        assert_int_equal(ds_read_file(real_model_path(), &img2, &n2), 0);
        size_t kl = strlen(special[sp]);
        char *k = memmem(img2, n2, special[sp], kl);
        assert_non_null(k);
        uint32_t ty, id;
        memcpy(&ty, k + kl, 4);
        assert_int_equal(ty, 4); /* GGUF uint32 */
        memcpy(&id, k + kl + 4, 4);
        id += 7;
        memcpy(k + kl + 4, &id, 4);
        const char *msg = edited_draft_refused(c, img2, n2);
        if (!strstr(msg, "special ids differ")) fail_msg("%s moved: %s", special[sp], msg);
    }
    /* a scheduler that needs confidences with a drafter that has none (DFlash: no confidence head) */
    cJSON *ok = cJSON_Parse("{\"layers\": 1, \"gamma\": 3, \"taps\": [0, 1]}");
    assert_int_equal(drafter_open(&d, "dflash", ok, &c->t), 0);
    assert_int_equal(d.has_conf, 0);
    assert_int_equal(scheduler_open(&s, "greedy", NULL, 0), 0);
    int nn[3];
    decode_stats st;
    decode_cfg cfgd = {{0, 0, 1}, 3, &d, &s, NULL, NULL, MODE_SPEC};
    request r;
    ivec ids = {0};
    encode(&c->t, "hi", &ids);
    assert_int_equal(request_init(&r, &c->t, 0, ids.v, ids.n, 8, 1), 0);
    request *rp = &r;
    memset(&st, 0, sizeof st);
    assert_int_equal(decode_run(&c->t, &rp, 1, &cfgd, &st), -1);
    assert_non_null(strstr(ds_errmsg(), "needs a drafter with confidences"));
    request_free(&r, &c->t);
    ivec_free(&ids);
    DS_UNUSED(nn);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(ok);
}

/* how many rounds combine's report says member `name` was chosen in */
static long chosen_rounds(const drafter *d, const char *name) {
    char line[512], key[80];
    d->ops->report(d, line, sizeof line);
    snprintf(key, sizeof key, " %s ", name);
    const char *p = strstr(line, key);
    return p ? atol(p + strlen(key)) : -1;
}

/* each configuration bad[i][0] is refused by combine with an error naming bad[i][1] */
static void combine_refuses(ctx *c, const char *const (*bad)[2], size_t n) {
    drafter d;
    for (size_t i = 0; i < n; i++) {
        cJSON *b = cJSON_Parse(bad[i][0]);
        assert_non_null(b);
        assert_int_equal(drafter_open(&d, "combine", b, &c->t), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("%s: '%s' lacks '%s'", bad[i][0], ds_errmsg(), bad[i][1]);
        cJSON_Delete(b);
    }
}

/* combine over members of both kinds (two deterministic; two stochastic tapping different target
 * layers, so combine repacks the captured states for each): greedy decoding equals autoregression,
 * alone and three requests batched, so every member's state followed the committed text through
 * rounds it did not propose in or whose draft was not verified; a deterministic and a stochastic
 * member were both chosen; and configuration errors name the member */
static void test_combine(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"members\": [{\"name\": \"ngram\"}, {\"name\": \"recycling\"}, {\"name\": \"dspark-markov\", "
                            "\"layers\": 1, \"gamma\": 3, \"taps\": [3, 7], \"rank\": 8}, {\"name\": \"mtp\", \"depth\": 3}]}");
    assert_int_equal(drafter_open(&d, "combine", dc, &c->t), 0);
    assert_true(d.has_conf && !d.deterministic && d.n_capture == 3 && d.observe_prompt == 256);
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    sampling_params greedy = {0, 0, 1};
    int na[3], ns[3], nb[3];
    decode_stats sa, ss, sb;
    int **ar = decode_all(&c->t, NULL, NULL, 0, greedy, 40, 1, na, &sa, 1);
    int **sp = decode_all(&c->t, &d, &s, 4, greedy, 40, 1, ns, &ss, 1);
    int **bt = decode_all(&c->t, &d, &s, 4, greedy, 40, 3, nb, &sb, 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(na[i], ns[i]);
        assert_memory_equal(ar[i], sp[i], sizeof(int) * (size_t)na[i]);
        assert_int_equal(na[i], nb[i]);
        assert_memory_equal(ar[i], bt[i], sizeof(int) * (size_t)na[i]);
    }
    char line[512];
    d.ops->report(&d, line, sizeof line);
    printf("  %s; tau %.3f\n", line, (double)ss.emitted / (double)ss.rounds);
    assert_true(chosen_rounds(&d, "ngram") + chosen_rounds(&d, "recycling") > 0);
    assert_true(chosen_rounds(&d, "dspark-markov") > 0);
    free_outs(ar), free_outs(sp), free_outs(bt);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
    /* errors: each names what is wrong */
    static const char *const bad[][2] = {
        {"{}", "'members' must be an array"},
        {"{\"members\": []}", "'members' must be an array of 1..8"},
        {"{\"members\": [\"ngram\"]}", "members[0] must be an object with a \"name\""},
        {"{\"members\": [{\"name\": \"ngram\"}, {\"name\": \"nope\"}]}", "unknown drafter 'nope'"},
        {"{\"members\": [{\"name\": \"ngram\", \"nmax\": 3}]}", "nmax"},
        {"{\"members\": [{\"name\": \"combine\", \"members\": []}]}", "members[0] is a combine"},
        {"{\"members\": [{\"name\": \"dflash\", \"layers\": 1, \"gamma\": 3, \"taps\": [0, 1]}]}",
         "members[0] (dflash) has no confidences"},
        {"{\"members\": [{\"name\": \"recycling\", \"tree_nodes\": 4}]}", "members[0] (recycling) drafts trees"},
        {"{\"members\": [{\"name\": \"ngram\"}], \"prior\": 2}", "prior"},
        {"{\"members\": [{\"name\": \"ngram\"}], \"member\": 1}", "member"},
    };
    combine_refuses(c, bad, sizeof bad / sizeof *bad);
}

/* combine's union mode: ngram's and recycling's chains and an untrained Medusa's top-k tree merged
 * into one tree; greedy decoding equals autoregression alone and batched, trees of several nodes were
 * verified, the report says whose nodes they were, and a tree mode that calibrates on its own trees is
 * refused */
static void test_combine_union(void **state) {
    ctx *c = *state;
    drafter d;
    scheduler s;
    cJSON *dc = cJSON_Parse("{\"tree_nodes\": 12, \"members\": [{\"name\": \"ngram\"}, {\"name\": \"recycling\"}, "
                            "{\"name\": \"medusa\", \"heads\": 3, \"init_std\": 0.02, \"tree_nodes\": 6}]}");
    assert_int_equal(drafter_open(&d, "combine", dc, &c->t), 0);
    assert_int_equal(d.tree_nodes, 12);
    assert_non_null(strstr(d.describe, "a union tree of up to 12 nodes"));
    assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
    decode_stats ss, sbt;
    tree_equals_ar(c, &d, &s, &ss, &sbt);
    assert_true(ss.verified > 3 * ss.rounds); /* more nodes than a chain member alone would give */
    char line[512];
    d.ops->report(&d, line, sizeof line);
    printf("  %s; tau %.3f\n", line, (double)ss.emitted / (double)ss.rounds);
    assert_non_null(strstr(line, "combine's union"));
    assert_non_null(strstr(line, "medusa"));
    /* the report's shares of the nodes each member put first, and of the accepted ones (rounds did accept
     * nodes): each between 0 and 100, summing to 100 */
    double shares = 0, acc = 0;
    const char *who[3] = {"ngram", "recycling", "medusa"};
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, " %s ", who[i]);
        const char *at = strstr(line, key);
        assert_non_null(at);
        double sh = atof(at + strlen(key));
        assert_true(sh >= 0 && sh <= 100);
        shares += sh;
        const char *pa = strchr(at + strlen(key), '(');
        assert_non_null(pa);
        double a = atof(pa + 1);
        assert_true(a >= 0 && a <= 100);
        acc += a;
    }
    assert_true(shares > 98 && shares < 102);
    assert_true(acc > 98 && acc < 102);
    const char *na = strstr(line, "; ");
    assert_non_null(na);
    /* every accepted node was attributed to a member (its path found in the tree, root down): at least the
     * accepted tokens emitted (a round's last ones past the output budget are not committed), at most all */
    long ta = atol(na + 2);
    assert_true(ta >= ss.emitted - ss.rounds + sbt.emitted - sbt.rounds && ta <= ss.accepted + sbt.accepted);
    drafter_close(&d);
    scheduler_close(&s);
    cJSON_Delete(dc);
    static const char *const bad[][2] = {
        {"{\"tree_nodes\": 8, \"members\": [{\"name\": \"ngram\"}, {\"name\": \"recycling\", \"tree_nodes\": 4}]}",
         "members[1] (recycling) calibrates its tree on its own trees' verified nodes"},
        {"{\"tree_nodes\": 81, \"members\": [{\"name\": \"ngram\"}]}", "tree_nodes"},
    };
    combine_refuses(c, bad, sizeof bad / sizeof *bad);
}

/* node k's tokens from the anchor down (root first) into path; its depth */
static int root_path(const draft_block *b, int k, int *path) {
    int n = 0, tmp[DRAFT_TREE_MAX];
    for (int j = k; j >= 0; j = b->tree == TREE_CHAIN ? j - 1 : b->parent[j]) tmp[n++] = b->tok[j];
    for (int i = 0; i < n; i++) path[i] = tmp[n - 1 - i];
    return n;
}

/* index of the node of b whose root path is path[0..n), -1 when none */
static int find_path(const draft_block *b, const int *path, int n) {
    int p[DRAFT_TREE_MAX];
    for (int k = 0; k < b->n; k++)
        if (root_path(b, k, p) == n && !memcmp(p, path, sizeof(int) * (size_t)n)) return k;
    return -1;
}

/* repetitive raw texts (no chat template): the first output token continues the repetition, so ngram and
 * recycling find the anchor's context in the prompt and draft at the first proposal */
static const char *const REP[3] = {
    "Say it again: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.",
    "Count: one two three four, one two three four, one two three four, one two",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\nWrite def mul(a, b) the same way."};

/* drafter `name` opened with cfg (a JSON object; its "name" key ignored), prefilled on ids at T = 0, and its
 * first proposal of up to g into b */
static void first_proposal(ctx *c, const char *name, const char *cfg, const ivec *ids, int g, draft_block *b) {
    drafter d;
    cJSON *dc = cJSON_Parse(cfg);
    assert_non_null(dc);
    cJSON_DeleteItemFromObject(dc, "name");
    if (drafter_open(&d, name, dc, &c->t)) fail_msg("%s: %s", name, ds_errmsg());
    cJSON_Delete(dc);
    sampling_params greedy = {0, 0, 1};
    decode_cfg cfg_ = {greedy, g, &d, NULL, NULL, NULL, MODE_SPEC};
    float *last = malloc(sizeof(float) * (size_t)c->t.m.cfg.vocab_size);
    request r;
    assert_int_equal(request_init(&r, &c->t, 0, ids->v, ids->n, 64, 1), 0);
    if (decode_prefill(&c->t, &r, &cfg_, last, NULL)) fail_msg("%s", ds_errmsg());
    b->tree = TREE_CHAIN;
    if (d.ops->propose(&d, &r, g, &greedy, b)) fail_msg("%s", ds_errmsg());
    d.ops->end(&d, &r);
    request_free(&r, &c->t);
    drafter_close(&d);
    free(last);
}

/* combine's union is the members' drafts merged: every node of the union is a node some member drafted
 * (the same tokens from the anchor down), no two nodes share a path, a node's confidence is the largest
 * path probability a member gives it (capped by its parent's), and every member's first node is in it.
 * The members drafted here standalone, each over its own prefill of the same prompt (T = 0: their drafts
 * are functions of the context). Union trees that attached a tree member's nodes to the wrong parent, merged
 * siblings of different tokens, or asked the chain members for nothing were all lossless (the tree is the
 * tree the verifier sees) and passed every suite. */
static void test_combine_union_is_the_members_drafts(void **state) {
    ctx *c = *state;
    const char *mname[3] = {"ngram", "recycling", "medusa"};
    const char *mcfg[3] = {"{\"name\": \"ngram\"}", "{\"name\": \"recycling\"}",
                           "{\"name\": \"medusa\", \"heads\": 3, \"init_std\": 0.02, \"tree_nodes\": 6}"};
    char ucfg[512];
    snprintf(ucfg, sizeof ucfg, "{\"tree_nodes\": 40, \"members\": [%s, %s, %s]}", mcfg[0], mcfg[1], mcfg[2]);
    int V = c->t.m.cfg.vocab_size, G = 40, drafted[3] = {0, 0, 0};
    draft_block ub, mb[3];
    assert_int_equal(draft_block_init(&ub, G + 1, V, 1), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(draft_block_init(&mb[i], G + 1, V, 1), 0);
    ivec ids = {0};
    for (int pi = 0; pi < 3; pi++) {
        ids.n = 0;
        assert_int_equal(tokenizer_encode(&c->t.tk, REP[pi], strlen(REP[pi]), 0, &ids), 0);
        first_proposal(c, "combine", ucfg, &ids, G, &ub);
        for (int i = 0; i < 3; i++) first_proposal(c, mname[i], mcfg[i], &ids, i == 2 ? 6 : G, &mb[i]);
        assert_int_equal(ub.tree, TREE_TOPK);
        assert_true(ub.n > 0 && ub.n <= G);
        int path[DRAFT_TREE_MAX];
        for (int k = 0; k < ub.n; k++) {
            assert_true(ub.parent[k] < k);
            int n = root_path(&ub, k, path);
            assert_int_equal(find_path(&ub, path, n), k); /* one node a path */
            double best = -1; /* the largest path probability a member gives this path */
            for (int i = 0; i < 3; i++) {
                int j = find_path(&mb[i], path, n);
                if (j < 0) continue;
                double pc = 1;
                if (mb[i].tree == TREE_CHAIN)
                    for (int m = 0; m <= j; m++) pc *= mb[i].conf[m];
                else pc = mb[i].conf[j];
                best = DS_MAX(best, pc);
            }
            if (best < 0) fail_msg("prompt %d: union node %d (depth %d) is no member's draft", pi, k, n);
            double cap = ub.parent[k] < 0 ? 1 : ub.conf[ub.parent[k]];
            assert_float_equal(ub.conf[k], DS_MIN(best, cap), 1e-6);
        }
        for (int i = 0; i < 3; i++) {
            if (mb[i].n == 0) continue; /* nothing to draft from here (ngram without a match) */
            drafted[i]++;
            int n = root_path(&mb[i], 0, path);
            if (find_path(&ub, path, n) < 0) fail_msg("prompt %d: member %d's first node is not in the union", pi, i);
        }
        printf("  union of %d nodes from drafts of %d, %d and %d (prompt %d)\n", ub.n, mb[0].n, mb[1].n, mb[2].n, pi);
    }
    for (int i = 0; i < 3; i++) assert_true(drafted[i] > 0); /* every member's first node was checked somewhere */
    for (int i = 0; i < 3; i++) draft_block_free(&mb[i]);
    ivec_free(&ids);
    draft_block_free(&ub);
}

/* E = sum_k prod_{i<=k} c_i of a chain's first n confidences */
static double chain_len(const draft_block *b) {
    double e = 0, s = 1;
    for (int k = 0; k < b->n; k++) e += (s *= b->conf[k]);
    return e;
}

/* combine's choice between deterministic members, before any recalibration (choice_weight 0): the draft
 * of the member whose expected accepted length E = sum_k prod_{i<=k} c_i is the largest, whole, with its
 * own confidences; members drafted standalone on the same prompt. A choice by E without c_1, or by
 * products that started at 0, was lossless and passed every suite. */
static void test_combine_chooses_the_longest_expected(void **state) {
    ctx *c = *state;
    /* their first confidences are their priors: recycling's higher, ngram's chain longer where it is; the
     * winner first (a choice that returned nothing when member 0 won passed every suite) */
    const char *mname[2] = {"recycling", "ngram"};
    const char *mcfg[2] = {"{\"name\": \"recycling\", \"prior\": 0.35}", "{\"name\": \"ngram\", \"prior\": 0.3}"};
    char ccfg[512];
    snprintf(ccfg, sizeof ccfg, "{\"choice_weight\": 0, \"members\": [%s, %s]}", mcfg[0], mcfg[1]);
    int V = c->t.m.cfg.vocab_size, G = 8, won[2] = {0, 0};
    draft_block cb, mb[2];
    assert_int_equal(draft_block_init(&cb, G + 1, V, 1), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(draft_block_init(&mb[i], G + 1, V, 1), 0);
    ivec ids = {0};
    for (int pi = 0; pi < 3; pi++)
        for (int g = 2; g <= G; g += 3) {
            ids.n = 0;
            assert_int_equal(tokenizer_encode(&c->t.tk, REP[pi], strlen(REP[pi]), 0, &ids), 0);
            first_proposal(c, "combine", ccfg, &ids, g, &cb);
            double e[2];
            for (int i = 0; i < 2; i++) {
                first_proposal(c, mname[i], mcfg[i], &ids, g, &mb[i]);
                e[i] = chain_len(&mb[i]);
            }
            if (e[0] == e[1] || (e[0] <= 0 && e[1] <= 0)) continue;
            int w = e[1] > e[0];
            won[w]++;
            printf("  prompt %d, gamma %d: E %s %.3f (%d drafts), %s %.3f (%d): combine drafted %d\n", pi, g, mname[0], e[0],
                   mb[0].n, mname[1], e[1], mb[1].n, cb.n);
            assert_int_equal(cb.n, mb[w].n);
            assert_memory_equal(cb.tok, mb[w].tok, sizeof(int) * (size_t)cb.n);
            assert_memory_equal(cb.conf, mb[w].conf, sizeof(float) * (size_t)cb.n);
        }
    assert_true(won[0] + won[1] >= 4);
    for (int i = 0; i < 2; i++) draft_block_free(&mb[i]);
    ivec_free(&ids);
    draft_block_free(&cb);
}

/* a tiny random model written to the temporary file `name` (its path in path[600]) and opened, one thread */
static void open_tiny(target *t, char *path, const char *name, const tiny_spec *ts, uint64_t seed) {
    snprintf(path, 600, "%s", tmp_path(name));
    assert_int_equal(tiny_model_write(path, ts, seed), 0);
    if (target_open(t, path, &(backend_opts){.n_threads = 1})) fail_msg("%s", ds_errmsg());
}

/* A request that asks for more tokens than the model's context holds ends at the context's last position,
 * in autoregression and in speculative rounds (a chain and a tree) alike, with the same greedy tokens:
 * no round drafts or forwards a row past the cache (a tiny model of 512 positions) */
static void test_context_limit(void **state) {
    (void)state;
    char path[600];
    target t;
    open_tiny(&t, path, "engine-ctx.gguf", &(tiny_spec){64, 2, 4, 2, 128, 64, GGML_Q8_0, GGML_Q8_0, 0, 10000, 0}, 5);
    int L = t.m.cfg.max_seq, prompt[16], *ref = NULL;
    assert_int_equal(L, 512);
    for (int i = 0; i < 16; i++) prompt[i] = (5 * i + 2) % 64;
    const char *names[3] = {NULL, "ngram", "vanilla"}, *cfgs[3] = {NULL, "{}", "{\"layers\": 1, \"tree_nodes\": 4}"};
    for (int v = 0; v < 3; v++) {
        drafter d;
        scheduler s;
        cJSON *dc = cfgs[v] ? cJSON_Parse(cfgs[v]) : NULL;
        if (names[v] && drafter_open(&d, names[v], dc, &t)) fail_msg("%s", ds_errmsg());
        cJSON_Delete(dc);
        assert_int_equal(scheduler_open(&s, "fixed", NULL, 0), 0);
        decode_cfg cfg = {{0, 0, 1.0f}, 4, names[v] ? &d : NULL, &s, NULL, NULL, names[v] ? MODE_SPEC : MODE_AR};
        decode_stats st = {0};
        request r, *rp = &r;
        assert_int_equal(request_init(&r, &t, 0, prompt, 16, 2 * L, 9), 0);
        if (decode_run(&t, &rp, 1, &cfg, &st)) fail_msg("%s: %s", names[v] ? names[v] : "autoregression", ds_errmsg());
        assert_true(r.done);
        assert_int_equal(r.toks.n, L);
        if (!ref) {
            ref = malloc(sizeof(int) * (size_t)L);
            memcpy(ref, r.toks.v, sizeof(int) * (size_t)L);
        } else {
            assert_memory_equal(ref, r.toks.v, sizeof(int) * (size_t)L);
            assert_true(st.rounds < L - 17); /* some round emitted more than its own token */
        }
        request_free(&r, &t);
        /* a round with one token left to emit drafts nothing (chain or tree) and asks the drafter for
         * nothing: it would pay for rows whose tokens the output budget cuts away (a floor of one
         * draft there, or a proposal of none, passed every suite) */
        decode_stats st2 = {0};
        char rep[2][256] = {"", ""}; /* vanilla's count of draft-LM forwards: the drafter is not even asked */
        if (names[v] && d.ops->report) d.ops->report(&d, rep[0], sizeof rep[0]);
        assert_int_equal(request_init(&r, &t, 1, prompt, 16, 2, 9), 0);
        if (decode_run(&t, &rp, 1, &cfg, &st2)) fail_msg("%s: %s", names[v] ? names[v] : "autoregression", ds_errmsg());
        if (names[v] && d.ops->report) d.ops->report(&d, rep[1], sizeof rep[1]);
        assert_int_equal(r.toks.n, 18);
        assert_memory_equal(ref, r.toks.v, sizeof(int) * 18);
        assert_int_equal(st2.asked, 0);
        assert_int_equal(st2.drafted, 0);
        assert_string_equal(rep[0], rep[1]);
        request_free(&r, &t);
        if (names[v]) drafter_close(&d);
        scheduler_close(&s);
    }
    printf("  context limit: %d tokens (16 of prompt), autoregression, ngram's chain and vanilla's tree equal\n", L);
    free(ref);
    target_close(&t);
    remove(path);
}

/* The prefill's token, the first of every output, follows the target's processed law: the gate compares
 * the tokens after it (every world shares it) and autoregression and speculation draw it alike, so a
 * sampler that dropped top-k, drew from another row or skipped the temperature there passed them all.
 * 20,000 prefills of a tiny model (flat rows) at T = 0.9, top-k 6, their first tokens against the law
 * computed here in double from the prompt's last row; none outside the top 6; at T = 0 the argmax. */
static void test_prefill_token_law(void **state) {
    (void)state;
    char path[600];
    target t;
    open_tiny(&t, path, "engine-prefill.gguf", &(tiny_spec){32, 2, 4, 2, 64, 48, GGML_Q8_0, GGML_Q8_0, 0, 10000, 0.15f}, 11);
    enum { V = 48, K = 6, S = 20000 };
    int prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = (7 * i + 3) % V;
    /* the last row, by a forward of its own */
    float z[V];
    request r;
    assert_int_equal(request_init(&r, &t, 0, prompt, 8, 4, 1), 0);
    assert_int_equal(model_forward_one(&t.m, &t.fs, r.tkv, prompt, 8, 0, z), 0);
    request_free(&r, &t);
    const double temp = 0.9;
    int ord[V], top = 0;
    for (int i = 0; i < V; i++) ord[i] = i;
    for (int i = 0; i < V; i++) /* by logit, descending; ties by id */
        for (int j = i + 1; j < V; j++)
            if (z[ord[j]] > z[ord[i]] || (z[ord[j]] == z[ord[i]] && ord[j] < ord[i])) {
                int x = ord[i];
                ord[i] = ord[j], ord[j] = x;
            }
    top = ord[0];
    double p[V] = {0}, sum = 0;
    for (int k = 0; k < K; k++) sum += p[ord[k]] = exp(((double)z[ord[k]] - z[top]) / temp);
    for (int k = 0; k < K; k++) p[ord[k]] /= sum;
    long obs[V] = {0};
    float last[V];
    decode_cfg cfg = {{(float)temp, K, 1.0f}, 1, NULL, NULL, NULL, NULL, MODE_AR};
    for (int s = 0; s < S; s++) {
        assert_int_equal(request_init(&r, &t, s, prompt, 8, 4, 1000 + (uint64_t)s), 0);
        if (decode_prefill(&t, &r, &cfg, last, NULL)) fail_msg("%s", ds_errmsg());
        assert_int_equal(r.toks.n, 9);
        obs[r.toks.v[8]]++;
        request_free(&r, &t);
    }
    assert_memory_equal(last, z, sizeof z); /* the row it drew from is the prompt's last */
    gof_result g;
    assert_int_equal(chi2_gof(obs, p, V, &g), 0);
    long outside = 0;
    for (int i = 0; i < V; i++) outside += p[i] == 0 ? obs[i] : 0;
    printf("  prefill token: %d draws at T = %.1f top-k %d, chi2 %.1f (df %d) p = %.3f, %ld outside the top %d\n", S, temp,
           K, g.stat, g.df, g.p, outside, K);
    assert_int_equal(outside, 0);
    assert_true(g.p > 1e-4);
    /* greedy: the argmax, whatever the seed */
    cfg.sp = (sampling_params){0, 0, 1.0f};
    for (int s = 0; s < 4; s++) {
        assert_int_equal(request_init(&r, &t, s, prompt, 8, 4, 77 + (uint64_t)s), 0);
        if (decode_prefill(&t, &r, &cfg, last, NULL)) fail_msg("%s", ds_errmsg());
        assert_int_equal(r.toks.v[8], top);
        request_free(&r, &t);
    }
    target_close(&t);
    remove(path);
}

/* A drafter that observes the prompt (recycling) is handed the prompt's last observe_prompt rows at
 * prefill in chunks of 64: every row once, in order, with its own input token and the target's logits
 * for it. Every prompt in the other suites is shorter than a chunk, so the chunking never ran there. A
 * recording drafter is prefilled with a prompt of 300 tokens and its rows compared with one forward's
 * logits of every row, for recycling's default window (256 rows: four chunks of 64, the last ending at
 * the prompt's end, so no empty fifth call) and for one longer than the prompt (all 300). */
typedef struct {
    int calls, bad_flag, n;
    int *tok;
    float *rows;
    int cap, V;
} observe_rec;
static observe_rec g_obs;

static int rec_begin(drafter *d, request *r, const float *h) {
    (void)d, (void)r, (void)h;
    return 0;
}
static int rec_observe(drafter *d, request *r, const int *in, const float *logits, int n, int prefill) {
    (void)d, (void)r;
    observe_rec *o = &g_obs;
    o->calls++;
    o->bad_flag += prefill != 1;
    if (o->n + n > o->cap) return -1;
    memcpy(o->tok + o->n, in, sizeof(int) * (size_t)n);
    memcpy(o->rows + (size_t)o->n * o->V, logits, sizeof(float) * (size_t)n * o->V);
    o->n += n;
    return 0;
}

static void test_observe_prompt_rows(void **state) {
    (void)state;
    char path[600];
    target t;
    open_tiny(&t, path, "engine-observe.gguf", &(tiny_spec){32, 2, 4, 2, 64, 48, GGML_Q8_0, GGML_Q8_0, 0, 10000, 0}, 13);
    enum { V = 48, N = 300 };
    int prompt[N];
    for (int i = 0; i < N; i++) prompt[i] = (int)((7u * (unsigned)i * (unsigned)i + 3u * (unsigned)i + 1u) % V);
    float *ref = malloc(sizeof(float) * N * V), last[V];
    request r;
    assert_int_equal(request_init(&r, &t, 0, prompt, N, 4, 1), 0);
    assert_int_equal(model_forward_one(&t.m, &t.fs, r.tkv, prompt, N, 1, ref), 0);
    request_free(&r, &t);
    drafter_ops ops = {.name = "observe-recorder", .begin = rec_begin, .observe = rec_observe};
    const int windows[2] = {256, 1000};
    for (int w = 0; w < 2; w++) {
        drafter d = {.ops = &ops, .observe_prompt = windows[w]};
        int from = N - (windows[w] < N ? windows[w] : N);
        free(g_obs.tok), free(g_obs.rows);
        g_obs = (observe_rec){.cap = N, .V = V, .tok = malloc(sizeof(int) * N), .rows = malloc(sizeof(float) * N * V)};
        decode_cfg cfg = {{0, 0, 1.0f}, 4, &d, NULL, NULL, NULL, MODE_SPEC};
        assert_int_equal(request_init(&r, &t, 0, prompt, N, 4, 1), 0);
        if (decode_prefill(&t, &r, &cfg, last, NULL)) fail_msg("%s", ds_errmsg());
        request_free(&r, &t);
        float err = 0;
        for (int i = 0; i < g_obs.n && i < N - from; i++)
            for (int v = 0; v < V; v++) {
                float want = ref[(size_t)(from + i) * V + v];
                err = fmaxf(err, fabsf(g_obs.rows[(size_t)i * V + v] - want) / fmaxf(1.0f, fabsf(want)));
            }
        printf("  prompt rows observed: window %d of %d, %d rows in %d calls, max relative error %g\n", windows[w], N,
               g_obs.n, g_obs.calls, (double)err);
        assert_int_equal(g_obs.n, N - from);
        assert_int_equal(g_obs.calls, (N - from + 63) / 64);
        assert_int_equal(g_obs.bad_flag, 0);
        assert_memory_equal(g_obs.tok, prompt + from, sizeof(int) * (size_t)(N - from));
        assert_true(err < 1e-5f);
    }
    free(g_obs.tok), free(g_obs.rows);
    free(ref);
    target_close(&t);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_token_law),
        cmocka_unit_test(test_observe_prompt_rows),
        cmocka_unit_test(test_greedy_equals_autoregressive),
        cmocka_unit_test(test_tree_greedy_equals_autoregressive),
        cmocka_unit_test(test_static_tree_equals_autoregressive),
        cmocka_unit_test(test_chain_positions_recount),
        cmocka_unit_test(test_full_depth_draft_always_accepted),
        cmocka_unit_test(test_commit_rows_are_the_accepted_states),
        cmocka_unit_test(test_serve_continuous_batching),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_combine_union),
        cmocka_unit_test(test_combine_union_is_the_members_drafts),
        cmocka_unit_test(test_combine_chooses_the_longest_expected),
        cmocka_unit_test(test_context_limit),
    };
    ds_test_filter();
    return cmocka_run_group_tests_name("engine (SmolLM2)", tests, setup, teardown);
}
