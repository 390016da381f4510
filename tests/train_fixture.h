/* train_fixture.h — what the trainable drafters' tests share (test_train.c, test_mtp.c, test_medusa.c,
 * test_vanilla.c): a tiny target, the target's states over a sequence, and the overfit gates' frame
 * (the cached sequence, the serving check, the decoding loop against autoregression).
 *
 * The serving check: a drafter trained until it memorised one sequence is driven through its own ops on that
 * sequence: at every cut c, begin() on the prompt seq[0..c) (with the target's captured states of
 * those rows) and propose() must give seq[c+1..]; then j drafts "accepted" (the rows c..c+j handed
 * to commit(), as the decoding loop packs them) and propose() must give seq[c+j+2..]. Decoding
 * a memorised sequence instead would not do: a random tiny target's greedy continuation is one token
 * repeated (tied embeddings copy), which a drafter that ignores its state drafts back as well. */
#ifndef DS_TRAIN_FIXTURE_H
#define DS_TRAIN_FIXTURE_H

#include "../datasets/traindata.h"
#include "../drafters/drafter.h"
#include "../engine/decode.h"
#include "../engine/train.h"
#include "../schedulers/scheduler.h"

typedef struct {
    target t;
    char path[512];
} tiny_target;

/* a tiny target of spec s, opened like the real one */
static tiny_target *tiny_open_spec(const tiny_spec *s) {
    tiny_target *tt = calloc(1, sizeof *tt);
    size_t n;
    uint8_t *img = tiny_model_gguf(s, 21, &n);
    snprintf(tt->path, sizeof tt->path, "%s", tmp_path("tiny-target.gguf"));
    write_file(tt->path, img, n);
    free(img);
    if (target_open(&tt->t, tt->path, &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    return tt;
}

/* the tiny target of a family (tiny_model.h: 0 Llama, 2 Qwen2 with q/k/v biases and half-rotation RoPE;
 * F32 so its logits are smooth in the inputs) */
static tiny_target *tiny_open_family(int family) {
    tiny_spec s = {32, 3, 4, 2, 64, 48, GGML_F32, GGML_F32, family, 10000};
    return tiny_open_spec(&s);
}

static tiny_target *tiny_open(void) { return tiny_open_family(0); }

static void tiny_close(tiny_target *tt) {
    target_close(&tt->t);
    remove(tt->path);
    free(tt);
}

/* hid: [n_capture][n][dim], the target's states at the drafter's capture layers over seq. Counts
 * drafted tokens equal to seq's (hit) among all drafted (tried). */
static void teacher_forced(drafter *dr, target *t, const int *seq, int n, int np, int gamma, const float *hid, long *hit,
                           long *tried) {
    int D = t->m.cfg.dim, nc = dr->n_capture;
    float *pref = malloc(sizeof(float) * (size_t)(nc ? nc : 1) * n * D);
    float *rows = malloc(sizeof(float) * (size_t)(nc ? nc : 1) * (gamma + 1) * D);
    sampling_params greedy = {0, 0, 1};
    draft_block blk;
    assert_int_equal(draft_block_init(&blk, gamma, t->m.cfg.vocab_size, dr->has_conf), 0);
    *hit = *tried = 0;
    for (int c = np; c + 1 + gamma < n; c++) {
        request req;
        assert_int_equal(request_init(&req, t, 0, seq, c, 8, 1), 0);
        assert_int_equal(ivec_push(&req.toks, seq[c]), 0); /* the anchor */
        for (int ci = 0; ci < nc; ci++)
            memcpy(pref + (size_t)ci * c * D, hid + (size_t)ci * n * D, sizeof(float) * (size_t)c * D);
        if (dr->ops->begin(dr, &req, nc ? pref : NULL)) fail_msg("%s", ds_errmsg());
        if (dr->ops->propose(dr, &req, gamma, &greedy, &blk)) fail_msg("%s", ds_errmsg());
        for (int k = 0; k < blk.n; k++) *hit += blk.tok[k] == seq[c + 1 + k], (*tried)++;
        int j = c % gamma; /* j drafts accepted: rows c .. c + j; the last drew the new anchor seq[c + j + 1] */
        if (c + j + 2 + gamma <= n) {
            for (int i = 1; i <= j + 1; i++) assert_int_equal(ivec_push(&req.toks, seq[c + i]), 0);
            for (int ci = 0; ci < nc; ci++)
                memcpy(rows + (size_t)ci * (j + 1) * D, hid + ((size_t)ci * n + c) * D, sizeof(float) * (size_t)(j + 1) * D);
            if (dr->ops->commit(dr, &req, j, seq[c + j + 1], nc ? rows : NULL)) fail_msg("%s", ds_errmsg());
            if (dr->ops->propose(dr, &req, gamma, &greedy, &blk)) fail_msg("%s", ds_errmsg());
            for (int k = 0; k < blk.n; k++) *hit += blk.tok[k] == seq[c + j + 2 + k], (*tried)++;
        }
        dr->ops->end(dr, &req);
        request_free(&req, t);
    }
    draft_block_free(&blk);
    free(pref), free(rows);
}

/* the target's states at layers ids[0..nc) over seq: [nc][n][dim] (caller frees) */
static float *target_states(target *t, const int *seq, int n, int nc, const int *ids) {
    float *hid = malloc(sizeof(float) * (size_t)nc * n * t->m.cfg.dim);
    float *logits = malloc(sizeof(float) * (size_t)n * t->m.cfg.vocab_size);
    kv_cache *kv = kv_cache_new(t->be, &t->m.cfg, n);
    fwd_batch b = {.n_seq = 1, .kv = &kv, .n_new = &n, .tokens = seq, .all_logits = 1, .logits = logits,
                   .n_capture = nc, .capture_layers = ids, .capture = hid};
    assert_int_equal(model_forward(&t->m, &t->fs, &b), 0);
    kv_cache_free(t->be, kv);
    free(logits);
    return hid;
}

/* One tensor's gradient check: the analytic gradient gd (double) projected on a random direction
 * against the central difference of loss(ctx) along it (p: the tensor's double parameters, which
 * loss reads), and the float gradient gf against gd. Fails the test beyond the bounds; returns the
 * relative error of the directional derivative, *rel_f the float-vs-double one. */
static double fd_check_tensor(double (*loss)(void *), void *ctx, double *p, const double *gd, const float *gf,
                              size_t numel, rng_t *r, const char *what, double *rel_f) {
    double *dir = malloc(sizeof(double) * numel), *keep = malloc(sizeof(double) * numel);
    double an = 0, gnorm = 0, diff = 0;
    for (size_t i = 0; i < numel; i++) {
        dir[i] = rng_uniform(r) - 0.5;
        an += dir[i] * gd[i];
        gnorm += gd[i] * gd[i];
        diff += (gd[i] - gf[i]) * (gd[i] - gf[i]);
    }
    const double eps = 1e-5;
    memcpy(keep, p, sizeof(double) * numel);
    for (size_t i = 0; i < numel; i++) p[i] = keep[i] + eps * dir[i];
    double lp = loss(ctx);
    for (size_t i = 0; i < numel; i++) p[i] = keep[i] - eps * dir[i];
    double lm = loss(ctx);
    memcpy(p, keep, sizeof(double) * numel);
    double num = (lp - lm) / (2 * eps), rel = fabs(num - an) / fmax(fmax(fabs(num), fabs(an)), 1e-7);
    *rel_f = sqrt(diff) / fmax(sqrt(gnorm), 1e-7);
    if (rel > 1e-5) fail_msg("%s: directional derivative %.9g, finite difference %.9g (rel %.3g)", what, an, num, rel);
    if (*rel_f > 1e-3) fail_msg("%s: float gradient differs from double by %.3g (relative norm)", what, *rel_f);
    free(dir), free(keep);
    return rel;
}

/* the decoding loop with the drafter (fixed gamma) at T = 0 emits exactly the target's own greedy
 * output of prompt, whatever is drafted */
static void decode_matches_ar(target *t, drafter *dr, const int *prompt, int np, int max_new, int gamma) {
    sampling_params greedy = {0, 0, 1};
    request req, *rp = &req;
    decode_stats st;
    memset(&st, 0, sizeof st);
    assert_int_equal(request_init(&req, t, 0, prompt, np, max_new, 1), 0);
    decode_cfg ar = {greedy, 0, NULL, NULL, NULL, NULL, MODE_AR};
    if (decode_run(t, &rp, 1, &ar, &st)) fail_msg("%s", ds_errmsg());
    int na = req.toks.n, *out = malloc(sizeof(int) * (size_t)na);
    memcpy(out, req.toks.v, sizeof(int) * (size_t)na);
    request_free(&req, t);
    scheduler sc;
    assert_int_equal(scheduler_open(&sc, "fixed", NULL, 0), 0);
    assert_int_equal(request_init(&req, t, 0, prompt, np, max_new, 1), 0);
    decode_cfg spec = {greedy, gamma, dr, &sc, NULL, NULL, MODE_SPEC};
    memset(&st, 0, sizeof st);
    if (decode_run(t, &rp, 1, &spec, &st)) fail_msg("%s", ds_errmsg());
    assert_int_equal(req.toks.n, na);
    assert_memory_equal(req.toks.v, out, sizeof(int) * (size_t)na);
    assert_true(st.drafted > 0);
    request_free(&req, t);
    scheduler_close(&sc);
    free(out);
}

/* dir, a checkpoint, opens through the registry as kind into d (the caller checks and closes it);
 * with `extra` beside its path (a JSON field of the untrained form: a checkpoint carries its
 * architecture) it is refused, naming `says` */
static void checkpoint_serves(target *t, const char *kind, const char *dir, const char *extra, const char *says,
                              drafter *d) {
    char dj[900];
    snprintf(dj, sizeof dj, "{\"checkpoint\": \"%s\"}", dir);
    cJSON *dc = cJSON_Parse(dj);
    assert_non_null(dc);
    if (drafter_open(d, kind, dc, t)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(dc);
    snprintf(dj, sizeof dj, "{\"checkpoint\": \"%s\", %s}", dir, extra);
    assert_non_null(dc = cJSON_Parse(dj));
    drafter d2;
    assert_int_equal(drafter_open(&d2, kind, dc, t), -1);
    if (!strstr(ds_errmsg(), says)) fail_msg("%s: '%s' does not name '%s'", extra, ds_errmsg(), says);
    cJSON_Delete(dc);
}

/* a drafter family's checkpoint loader: 0 when dir loads (the model freed again), -1 with a message */
typedef int (*checkpoint_load_fn)(const char *dir, const model *t);

/* each bad[i][0] written as dir's config.json is refused by load with a message naming bad[i][1] */
static void checkpoint_refusals(const char *dir, const model *t, checkpoint_load_fn load, const char *const (*bad)[2],
                                size_t n) {
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir);
    for (size_t i = 0; i < n; i++) {
        write_file(p, bad[i][0], strlen(bad[i][0]));
        assert_int_equal(load(dir, t), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("case %zu: '%s' does not name '%s'", i, ds_errmsg(), bad[i][1]);
    }
}

/* the checkpoint in dir served as `kind`: {"checkpoint": dir EXTRA} (a failure fails the test) */
/* params[0..n) moved by amp * U(-1/2, 1/2) from seed: a model away from its init, so a value served from
 * the wrong place shows */
static void jitter_params(float *params, size_t n, uint64_t seed, float amp) {
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) params[i] += amp * (float)(rng_uniform(&r) - 0.5);
}

static void serve_checkpoint(drafter *dr, target *t, const char *kind, const char *dir, const char *extra) {
    char cj[1200];
    snprintf(cj, sizeof cj, "{\"checkpoint\": \"%s\"%s}", dir, extra);
    cJSON *cfg = cJSON_Parse(cj);
    assert_non_null(cfg);
    if (drafter_open(dr, kind, cfg, t)) fail_msg("%s: %s", kind, ds_errmsg());
    cJSON_Delete(cfg);
}

/* softmax at T = 1 of the logits z[0..n) (in double): entry i's probability */
static double softmax_at(const float *z, int n, int i) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) mx = fmax(mx, z[j]);
    for (int j = 0; j < n; j++) sum += exp(z[j] - mx);
    return exp(z[i] - mx) / sum;
}

/* a served q row over the V ids against softmax of the trained logits z over Vd draft rows (row j is id
 * vid[j]; vid NULL: id j): the worst |difference|; q must put all its mass on the draft rows */
static double law_gap(const float *z, int Vd, const int *vid, const float *q) {
    double worst = 0, mass = 0;
    for (int j = 0; j < Vd; j++) {
        double qj = q[vid ? vid[j] : j];
        mass += qj;
        worst = fmax(worst, fabs(qj - softmax_at(z, Vd, j)));
    }
    if (fabs(mass - 1) > 1e-4) fail_msg("a q row holds %g of its mass outside the draft vocabulary", 1 - mass);
    return worst;
}

/* node i's path from the anchor (tokens into path[0..depth)): its depth */
static int tree_path(const draft_block *b, int i, int *path) {
    int d = 0;
    for (int u = i; u >= 0; u = b->parent[u]) d++;
    for (int u = i, k = d - 1; u >= 0; u = b->parent[u], k--) path[k] = b->tok[u];
    return d;
}

/* a top-k tree's budget of one node: the anchor's best child, the full tree's first node (the tree is a
 * function of the context) */
static void tree_budget_one(drafter *dr, request *rq, const sampling_params *sp, const draft_block *full) {
    draft_block one;
    assert_int_equal(draft_block_init(&one, 4, full->V, 1), 0);
    if (dr->ops->propose(dr, rq, 1, sp, &one)) fail_msg("%s", ds_errmsg());
    assert_int_equal(one.n, 1);
    assert_int_equal(one.parent[0], -1);
    assert_int_equal(one.tok[0], full->tok[0]);
    draft_block_free(&one);
}

/* The overfit gate's frame: one sequence of OVERFIT_N tokens (a prompt of OVERFIT_NP, then random
 * ones) cached for training until a drafter memorises it; overfit_serve then serves the run's last
 * checkpoint through the registry. */
#define OVERFIT_N 46
#define OVERFIT_NP 6
typedef struct {
    tiny_target *tt;
    char cache[512], run[520], cmd[1200];
    int seq[OVERFIT_N];
    train_cache d;
    train_opts o;           /* 400 steps at lr 1e-2 into run/ (a gate may change them) */
    train_point h[400];
    int nh;
} overfit;

/* the tiny target and the cache (folders named by tag), tokens lo + (a draw mod span), the cache's
 * layers taps[0..n_tap) (a negative one counts from the end: -1 is the last) */
static void overfit_open(overfit *g, const char *tag, int lo, int span, int n_tap, const int *taps) {
    memset(g, 0, sizeof *g);
    g->tt = tiny_open();
    snprintf(g->cache, sizeof g->cache, "%s", tmp_path(tag));
    snprintf(g->run, sizeof g->run, "%s-run", g->cache);
    snprintf(g->cmd, sizeof g->cmd, "rm -rf '%s' '%s'", g->cache, g->run);
    assert_int_equal(system(g->cmd), 0);
    rng_t r;
    rng_seed(&r, 11);
    for (int i = 0; i < OVERFIT_N; i++) g->seq[i] = lo + (int)(rng_u64(&r) % (uint64_t)span);
    traindata_layout lay = {.n_tap = n_tap, .top_k = 8};
    for (int i = 0; i < n_tap; i++) lay.taps[i] = taps[i] < 0 ? g->tt->t.m.cfg.n_layers + taps[i] : taps[i];
    char shard[600];
    snprintf(shard, sizeof shard, "%s/shard-0000", g->cache);
    if (traindata_append(&g->tt->t, shard, g->seq, OVERFIT_N, OVERFIT_NP, 0, &lay)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&g->d, g->cache, &g->tt->t, 0)) fail_msg("%s", ds_errmsg());
    g->o = (train_opts){400, 1, 64, 1e-2f, 0.1f, 0.05f, 0.0f, 1.0f, 0.9f, 0.95f, 3, 0, 0, 1, 0.0f, 1, 0, g->run, 1};
}

/* tr trained on the cache (a failure fails the test) */
static void overfit_train(overfit *g, trainable *tr) {
    if (train_run(tr, &g->d, &g->o, g->h, 400, &g->nh)) fail_msg("%s", ds_errmsg());
}

/* run/last served as `kind` ({"checkpoint": ...extra}) into dr: teacher-forced serving must draft at
 * least 90 % of the memorised tokens back, and the decoding loop at T = 0 (gamma a round) must emit
 * the target's own output; what: the drafter, for the printed line. The caller closes dr. */
static void overfit_serve(overfit *g, const char *kind, const char *extra, int gamma, const char *what, drafter *dr) {
    char dj[800];
    snprintf(dj, sizeof dj, "{\"checkpoint\": \"%s/last\"%s}", g->run, extra);
    cJSON *dc = cJSON_Parse(dj);
    assert_non_null(dc);
    if (drafter_open(dr, kind, dc, &g->tt->t)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(dc);
    target *t = &g->tt->t;
    float *hid = dr->n_capture ? target_states(t, g->seq, OVERFIT_N, dr->n_capture, dr->capture_layers) : NULL;
    long hit, tried;
    teacher_forced(dr, t, g->seq, OVERFIT_N, OVERFIT_NP, gamma, hid, &hit, &tried);
    free(hid);
    const train_point *h0 = &g->h[0], *hn = &g->h[g->nh - 1];
    printf("  overfit gate, %s: %d random tokens memorised (train loss %.3f -> %.4f); teacher-forced serving drafts "
           "%ld of %ld back\n",
           what, OVERFIT_N - OVERFIT_NP, h0->loss, hn->loss, hit, tried);
    if (hit < 0.9 * tried) fail_msg("%s: the memorised sequence is not drafted back (%ld of %ld)", what, hit, tried);
    decode_matches_ar(t, dr, g->seq, OVERFIT_NP, 30, gamma);
}

static void overfit_close(overfit *g) {
    traindata_close(&g->d);
    assert_int_equal(system(g->cmd), 0);
    tiny_close(g->tt);
}

#endif
