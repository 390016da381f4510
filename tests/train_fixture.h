/* train_fixture.h — what the trainable drafters' tests share (test_train.c, test_medusa.c): a tiny
 * target, the target's states over a sequence, and the overfit gates' serving check.
 *
 * The serving check: a drafter trained until it memorised one sequence is driven through its own ops on that
 * sequence: at every cut c, begin() on the prompt seq[0..c) (with the target's captured states of
 * those rows) and propose() must give seq[c+1..]; then j drafts "accepted" (the rows c..c+j handed
 * to commit(), as the decoding loop packs them) and propose() must give seq[c+j+2..]. Decoding
 * a memorised sequence instead would not do: a random tiny target's greedy continuation is one token
 * repeated (tied embeddings copy), which a drafter that ignores its state drafts back as well. */
#ifndef DS_TRAIN_FIXTURE_H
#define DS_TRAIN_FIXTURE_H

#include "../drafters/drafter.h"
#include "../engine/decode.h"
#include "../schedulers/scheduler.h"

typedef struct {
    target t;
    char path[512];
} tiny_target;

/* a tiny Llama target (F32 so its logits are smooth in the inputs), opened like the real one */
static tiny_target *tiny_open(void) {
    tiny_target *tt = calloc(1, sizeof *tt);
    tiny_spec s = {32, 3, 4, 2, 64, 48, GGML_F32, GGML_F32, 0, 10000};
    size_t n;
    uint8_t *img = tiny_model_gguf(&s, 21, &n);
    snprintf(tt->path, sizeof tt->path, "%s", tmp_path("tiny-target.gguf"));
    write_file(tt->path, img, n);
    free(img);
    if (target_open(&tt->t, tt->path, &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    return tt;
}

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

#endif
