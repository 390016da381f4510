/* test_medusa — the Medusa heads as a trainable model and a drafter, on a tiny target the test
 * writes itself: the training loss's gradient against finite differences (both target sides),
 * the float step against the double one, checkpoints round-tripping and refused when they do not
 * belong, and the one-sequence overfit gate (trained through the shared loop, served through the
 * registry, every output equal to the target's own). */
#include "testutil.h"

#include "../datasets/traindata.h"
#include "../drafters/medusa.h"
#include "../drafters/train_family.h"
#include "../drafters/tree_build.h"
#include "../engine/decode.h"
#include "../engine/train.h"
#include "../schedulers/scheduler.h"
#include "train_fixture.h"

#define FIX_PROMPT 3
#define FIX_K 8
#define HEADS 3

/* one sequence of random tokens with the tiny target's real states at its last layer */
typedef struct {
    int T, tokens[40], anchor[6], n_valid[6];
    float *taps, *final;
    int32_t tk_id[40 * FIX_K];
    float tk_lp[40 * FIX_K];
} seq_fix;

static void make_seq(tiny_target *tt, seq_fix *f) {
    rng_t r;
    rng_seed(&r, 5);
    f->T = 36;
    for (int i = 0; i < f->T; i++) f->tokens[i] = (int)(rng_u64(&r) % 46);
    int tap = tt->t.m.cfg.n_layers - 1, D = tt->t.m.cfg.dim, V = tt->t.m.cfg.vocab_size;
    f->final = malloc(sizeof(float) * f->T * D);
    f->taps = malloc(sizeof(float) * f->T * D);
    kv_cache *kv = kv_cache_new(tt->t.be, &tt->t.m.cfg, f->T);
    float *logits = malloc(sizeof(float) * f->T * V);
    fwd_batch b = {.n_seq = 1, .kv = &kv, .n_new = &f->T, .tokens = f->tokens, .all_logits = 1, .logits = logits,
                   .n_capture = 1, .capture_layers = &tap, .capture = f->taps, .final_hidden = f->final};
    assert_int_equal(model_forward(&tt->t.m, &tt->t.fs, &b), 0);
    for (int i = 0; i < f->T - FIX_PROMPT; i++) /* the cache's rows: the law of token FIX_PROMPT + i */
        topk_logprobs(logits + (size_t)(FIX_PROMPT - 1 + i) * V, V, FIX_K, f->tk_id + i * FIX_K, f->tk_lp + i * FIX_K);
    free(logits);
    kv_cache_free(tt->t.be, kv);
    int anchors[6] = {3, 9, 14, 20, 32, 34};
    for (int a = 0; a < 6; a++) {
        f->anchor[a] = anchors[a];
        f->n_valid[a] = DS_MIN(HEADS, f->T - 1 - anchors[a]); /* the last blocks are cut short */
    }
}

typedef struct {
    const md_config *c;
    const subvocab *sv;
    double *p, *norm, *E;
    train_seq_d s;
    double w;
    md_ws_d ws;
} dctx;

static double loss_d(void *ctx) {
    dctx *x = ctx;
    train_stats st;
    memset(&st, 0, sizeof st);
    if (md_step_d(x->c, x->p, NULL, x->norm, x->E, x->sv->Vd, x->sv->vmap, &x->s, x->w, &st, &x->ws))
        fail_msg("%s", ds_errmsg());
    return (x->c->w_ce * st.ce + x->c->w_l1 * st.l1) / x->w;
}

/* Medusa heads of HEADS on the tiny target (vocab: a draft vocabulary of 40 of the 48 ids, scrambled),
 * drawn at std 1 then every parameter moved by amp (biases too), with the training head */
static void moved_model(tiny_target *tt, int vocab, uint64_t seed, float amp, md_config *c, md_model *m, int *ids) {
    assert_int_equal(md_config_init(c, &tt->t.m, NULL), 0);
    c->heads = HEADS;
    for (int j = 0; j < 40; j++) ids[j] = (j * 5 + 1) % c->vocab;
    c->contract.draft_vocab = vocab ? 40 : 0;
    assert_int_equal(md_model_init(m, c, &tt->t.m, 3, 1.0f, 1, vocab ? ids : NULL), 0);
    jitter_params(m->params, m->n_params, seed, amp);
}

/* target: 0 = the final states (full law), 1 = the cached top-8 rows; vocab: a draft vocabulary of
 * 40 of the 48 ids in a scrambled order (labels and top-K entries fall outside it) */
static void gradcheck(int target, int vocab) {
    tiny_target *tt = tiny_open();
    md_config c;
    md_model m;
    int ids[40];
    moved_model(tt, vocab, 9, 0.2f, &c, &m, ids);
    rng_t r;
    rng_seed(&r, 9); /* the finite differences' directions */
    seq_fix f;
    make_seq(tt, &f);
    int D = c.dim;
    size_t nE = (size_t)m.sv.Vd * D, nt = (size_t)f.T * D;
    dctx x;
    memset(&x, 0, sizeof x);
    x.c = &m.cfg;
    x.sv = &m.sv;
    x.p = malloc(sizeof(double) * m.n_params);
    x.E = malloc(sizeof(double) * nE);
    x.norm = malloc(sizeof(double) * D);
    double *taps = malloc(sizeof(double) * nt), *fin = malloc(sizeof(double) * nt);
    for (size_t i = 0; i < m.n_params; i++) x.p[i] = m.params[i];
    for (size_t i = 0; i < nE; i++) x.E[i] = m.E[i];
    for (int i = 0; i < D; i++) x.norm[i] = m.norm[i];
    for (size_t i = 0; i < nt; i++) taps[i] = f.taps[i], fin[i] = f.final[i];
    train_seq sf = {f.T, f.taps, target ? NULL : f.final, f.tokens, FIX_PROMPT, FIX_K, target ? f.tk_id : NULL,
                    target ? f.tk_lp : NULL, 6, f.anchor, f.n_valid};
    x.s = (train_seq_d){f.T, taps, target ? NULL : fin, f.tokens, FIX_PROMPT, FIX_K, sf.tk_id, sf.tk_lp, 6, f.anchor, f.n_valid};
    x.w = md_seq_weight(6, f.n_valid);
    double *gd = calloc(m.n_params, sizeof(double));
    float *gf = calloc(m.n_params, sizeof(float));
    train_stats st;
    memset(&st, 0, sizeof st);
    if (md_step_d(&m.cfg, x.p, gd, x.norm, x.E, m.sv.Vd, m.sv.vmap, &x.s, x.w, &st, &x.ws)) fail_msg("%s", ds_errmsg());
    assert_int_equal(st.rows, (long)x.w);
    if (vocab) assert_true(st.label_outside > 0); /* the path for tokens outside the draft vocabulary ran */
    memset(&st, 0, sizeof st);
    if (md_step_f(&m.cfg, m.params, gf, m.norm, m.E, m.sv.Vd, m.sv.vmap, &sf, x.w, &st, &m.ws)) fail_msg("%s", ds_errmsg());
    double worst = 0, worst_f = 0;
    for (int ti = 0; ti < m.n_t; ti++) {
        const train_tensor *t = &m.tt[ti];
        char what[64];
        snprintf(what, sizeof what, "medusa: tensor %s", m.names[ti]);
        double rel_f, rel = fd_check_tensor(loss_d, &x, x.p + t->offset, gd + t->offset, gf + t->offset, t->numel, &r,
                                            what, &rel_f);
        worst = fmax(worst, rel), worst_f = fmax(worst_f, rel_f);
    }
    printf("  medusa, %d heads, target %s%s: %d tensors; worst relative error vs finite differences %.2e (double); "
           "float vs double gradient %.2e\n",
           HEADS, target ? "top-8" : "final states", vocab ? ", draft vocabulary 40 of 48" : "", m.n_t, worst, worst_f);
    md_ws_free_d(&x.ws);
    free(gd), free(gf), free(x.p), free(x.E), free(x.norm), free(taps), free(fin), free(f.taps), free(f.final);
    md_model_free(&m);
    tiny_close(tt);
}

static void test_grad_final(void **state) {
    (void)state;
    gradcheck(0, 0);
}
static void test_grad_topk(void **state) {
    (void)state;
    gradcheck(1, 0);
}
static void test_grad_vocab(void **state) {
    (void)state;
    gradcheck(1, 1);
}

static int load_md(const char *dir, const model *t) {
    md_model m;
    if (md_load(&m, dir, t, 0)) return -1;
    md_model_free(&m);
    return 0;
}

/* md_model_init's draw: with init_std s every head's W_k ~ N(0, s^2 / dim) (each head's own sample
 * moments, the whole matrix), every bias b_k = 0; with 0, Medusa's zero start (the residual block is
 * then the identity); `train`'s fresh model the zero start, its step running. */
static void test_init_draw(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    md_config c;
    assert_int_equal(md_config_init(&c, &tt->t.m, NULL), 0);
    c.heads = 4;
    int D = c.dim;
    for (int pass = 0; pass < 2; pass++) {
        float s = pass ? 0.5f : 0;
        md_model m;
        assert_int_equal(md_model_init(&m, &c, &tt->t.m, 9, s, 0, NULL), 0);
        assert_int_equal(m.n_params, (size_t)c.heads * (D + 1) * D);
        for (int k = 0; k < c.heads; k++) {
            const float *w = m.params + (size_t)k * (D + 1) * D, *b = w + (size_t)D * D;
            double s1 = 0, s2 = 0;
            int zeros = 0;
            for (int i = 0; i < D * D; i++) s1 += w[i], s2 += (double)w[i] * w[i], zeros += w[i] == 0;
            for (int i = 0; i < D; i++)
                if (b[i] != 0) fail_msg("init_std %g: head %d bias %d is %g", s, k, i, b[i]);
            double n = (double)D * D, mean = s1 / n, sd = sqrt(s2 / n - mean * mean), want = s / sqrt((double)D);
            if (pass == 0) {
                assert_int_equal(zeros, D * D);
                continue;
            }
            if (zeros > 0 || fabs(sd - want) > 0.1 * want || fabs(mean) > 0.1 * want)
                fail_msg("head %d: %d zero weights, mean %g, sd %g (want 0, %g)", k, zeros, mean, sd, want);
        }
        md_model_free(&m);
    }
    /* made the way `train` makes it: Medusa's zero start, the last layer tapped, and a step that runs (the
     * training head is there) and moves the blocks */
    const train_family *tf = drafter_find("medusa")->train;
    void *fam = calloc(1, tf->state_size);
    int taps[8], n_tap = 0;
    trainable tr;
    char describe[200];
    if (tf->configure(fam, "medusa", NULL, &tt->t, taps, &n_tap) || tf->init(fam, &tt->t, NULL, 3, 1, NULL, &tr, describe, sizeof describe))
        fail_msg("%s", ds_errmsg());
    assert_int_equal(n_tap, 1);
    assert_int_equal(taps[0], tt->t.m.cfg.n_layers - 1);
    for (size_t i = 0; i < tr.n_params; i++)
        if (tr.params[i] != 0) fail_msg("a fresh Medusa's parameter %zu is %g", i, tr.params[i]);
    seq_fix f;
    make_seq(tt, &f);
    train_seq sf = {f.T, f.taps, f.final, f.tokens, FIX_PROMPT, FIX_K, NULL, NULL, 6, f.anchor, f.n_valid};
    float *g = calloc(tr.n_params, sizeof(float));
    train_stats st;
    memset(&st, 0, sizeof st);
    if (tr.step(&tr, &sf, g, tr.seq_weight(&tr, 6, f.n_valid), &st)) fail_msg("%s", ds_errmsg());
    double gn = 0;
    for (size_t i = 0; i < tr.n_params; i++) gn += (double)g[i] * g[i];
    assert_true(gn > 0);
    free(g), free(f.taps), free(f.final);
    tf->release(fam);
    free(fam);
    tiny_close(tt);
}

/* Trained and served: the training step's logits rows (the full-vocabulary reference path) and the
 * drafter's q rows, served from a checkpoint of those heads with the same target states, must agree for
 * every head at each anchor the drafter reaches: a begin on the sequence up to it, a commit of 2 drafts
 * (the hidden row it keeps), a rewind (back to the prompt's state), and gamma 1; and its tree's path
 * probabilities. The overfit gate memorises tokens,
 * which a slightly wrong norm, residual or state row can still draft back; this compares the laws.
 * Returns the worst |dq| (blocks in f32: the training step's own operations; q8_0 on the int8 kernels). */
static double train_serve(const char *precision, int vocab) {
    tiny_target *tt = tiny_open();
    md_config c;
    md_model m;
    int ids[40];
    moved_model(tt, vocab, 21, 0.3f, &c, &m, ids);
    m.cfg.eps = 1e-3f; /* not the target's, so that serving must read the checkpoint's */
    rng_t r;
    rng_seed(&r, 22);
    for (int k = 0; k < HEADS; k++) /* biases as large as the rows they add to: one left out moves q past q8_0's rounding */
        for (int i = 0; i < c.dim; i++) m.params[((size_t)k * (c.dim + 1) + c.dim) * c.dim + i] += 4.0f * (float)(rng_uniform(&r) - 0.5);
    char dir[600], prec[80], tree[160];
    snprintf(dir, sizeof dir, "%s", tmp_path("medusa-serve"));
    assert_int_equal(md_save(&m, dir), 0);
    snprintf(prec, sizeof prec, ", \"block_precision\": \"%s\"", precision);
    drafter dr;
    serve_checkpoint(&dr, &tt->t, "medusa", dir, prec);
    seq_fix f;
    make_seq(tt, &f);
    enum { A = 6 };
    int anchors[A] = {3, 6, 9, 14, 20, 30}, nv[A] = {HEADS, HEADS, HEADS, HEADS, HEADS, HEADS};
    int D = c.dim, V = c.vocab, Vd = m.sv.Vd;
    /* the reference path needs every row: the logits over the draft rows come from the full path's Z */
    md_model mf;
    md_config cf = m.cfg;
    cf.contract.draft_vocab = 0;
    assert_int_equal(md_model_init(&mf, &cf, &tt->t.m, 3, 0, 1, NULL), 0);
    memcpy(mf.params, m.params, sizeof(float) * m.n_params);
    train_seq sf = {f.T, f.taps, f.final, f.tokens, FIX_PROMPT, FIX_K, NULL, NULL, A, anchors, nv};
    train_stats st;
    memset(&st, 0, sizeof st);
    if (md_step_f(&mf.cfg, mf.params, NULL, mf.norm, mf.E, V, NULL, &sf, 1, &st, &mf.ws)) fail_msg("%s", ds_errmsg());
    float *Z = malloc(sizeof(float) * HEADS * A * Vd); /* its rows (by head, then anchor) over the draft rows */
    for (int i = 0; i < HEADS * A; i++)
        for (int j = 0; j < Vd; j++) Z[(size_t)i * Vd + j] = mf.ws.Z[(size_t)i * V + (vocab ? m.sv.vid[j] : j)];
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block b;
    assert_int_equal(draft_block_init(&b, HEADS, V, 1), 0);
    double worst = 0;
    /* (anchor index, how the drafter got there): 0 begin, 1 commit of 2 after 0, 2 commit of 2 after 1,
     * 0 again by rewind, 3..5 fresh begins */
    const int path[][2] = {{0, 'b'}, {1, 'c'}, {2, 'c'}, {0, 'r'}, {3, 'b'}, {4, 'b'}, {5, 'b'}};
    request rq;
    int open = 0;
    for (size_t pi = 0; pi < sizeof path / sizeof *path; pi++) {
        int a = path[pi][0], at = anchors[a];
        if (path[pi][1] == 'b') {
            if (open) dr.ops->end(&dr, &rq), request_free(&rq, &tt->t);
            assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, at, 8, 1), 0);
            assert_int_equal(ivec_push(&rq.toks, f.tokens[at]), 0);
            if (dr.ops->begin(&dr, &rq, f.taps)) fail_msg("%s", ds_errmsg()); /* rows 0 .. at - 1 */
            open = 1;
        } else if (path[pi][1] == 'c') { /* 2 of the last anchor's drafts accepted: rows prev .. prev + 2 */
            int prev = anchors[a - 1];
            assert_int_equal(at, prev + 3);
            if (dr.ops->commit(&dr, &rq, 2, f.tokens[at], f.taps + (size_t)prev * D)) fail_msg("%s", ds_errmsg());
        } else if (dr.ops->rewind(&dr, &rq))
            fail_msg("%s", ds_errmsg());
        int g = pi == 6 ? 1 : HEADS; /* the last with gamma 1: one draft, head 0's */
        if (dr.ops->propose(&dr, &rq, g, &sp, &b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(b.n, g);
        for (int k = 0; k < g; k++)
            worst = fmax(worst, law_gap(Z + ((size_t)k * A + a) * Vd, Vd, m.sv.vid, b.q + (size_t)k * V));
    }
    dr.ops->end(&dr, &rq), request_free(&rq, &tt->t);
    printf("  medusa, %d heads%s, blocks %s: trained vs served q at 6 anchors (begin, commits, rewind): worst |dq| %.2e\n",
           HEADS, vocab ? ", draft vocabulary 40 of 48" : "", precision, worst);
    /* its tree from the same checkpoint at anchor 9: every node's confidence is its path probability, the
     * product of the heads' T = 1 laws the training step gives for the path's tokens */
    drafter dt;
    snprintf(tree, sizeof tree, "%s, \"tree_nodes\": 10, \"tree_width\": 3", prec);
    serve_checkpoint(&dt, &tt->t, "medusa", dir, tree);
    draft_block bt;
    assert_int_equal(draft_block_init(&bt, 10, V, 1), 0);
    assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, anchors[2], 8, 1), 0);
    assert_int_equal(ivec_push(&rq.toks, f.tokens[anchors[2]]), 0);
    if (dt.ops->begin(&dt, &rq, f.taps) || dt.ops->propose(&dt, &rq, 10, &sp, &bt)) fail_msg("%s", ds_errmsg());
    tree_budget_one(&dt, &rq, &sp, &bt);
    assert_int_equal(bt.n, 10);
    double worst_t = 0;
    int deepest = 0;
    for (int i = 0; i < bt.n; i++) {
        int pt[HEADS], d = tree_path(&bt, i, pt);
        double want = 1;
        deepest = DS_MAX(deepest, d);
        for (int k = 0; k < d; k++) want *= softmax_at(Z + ((size_t)k * A + 2) * Vd, Vd, vocab ? m.sv.vmap[pt[k]] : pt[k]);
        worst_t = fmax(worst_t, fabs(bt.conf_raw[i] - want) / want);
    }
    printf("    its tree of 10 nodes (width 3, deepest %d): worst relative error of a path probability %.2e\n", deepest,
           worst_t);
    assert_int_equal(deepest, HEADS);
    assert_true(worst_t < (strcmp(precision, "f32") ? 0.2 : 1e-5));
    dt.ops->end(&dt, &rq), request_free(&rq, &tt->t);
    draft_block_free(&bt);
    drafter_close(&dt);
    draft_block_free(&b);
    drafter_close(&dr);
    md_model_free(&m), md_model_free(&mf);
    free(f.taps), free(f.final), free(Z);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

static void test_train_serve(void **state) {
    (void)state;
    assert_true(train_serve("f32", 0) < 1e-5);
    assert_true(train_serve("f32", 1) < 1e-5);
    double q8 = train_serve("q8_0", 1);
    assert_true(q8 < 0.05 && q8 > 1e-7); /* the quantized blocks really ran */
}

/* checkpoints: a round trip through the registry, and every way a config.json can fail to belong */
static void test_checkpoint(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    md_config c;
    assert_int_equal(md_config_init(&c, &tt->t.m, NULL), 0);
    c.heads = 2;
    c.contract.n_calib = 2, c.contract.calib[0] = 1.5f, c.contract.calib[1] = 0.7f;
    md_model m, m2;
    assert_int_equal(md_model_init(&m, &c, &tt->t.m, 7, 1.0f, 0, NULL), 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", tmp_path("medusa-ck"));
    assert_int_equal(md_save(&m, dir), 0);
    assert_int_equal(md_load(&m2, dir, &tt->t.m, 0), 0);
    assert_int_equal(m2.cfg.heads, 2);
    assert_int_equal(m2.cfg.contract.n_calib, 2);
    assert_true(m2.cfg.contract.calib[1] == 0.7f);
    assert_memory_equal(m.params, m2.params, sizeof(float) * m.n_params);
    md_model_free(&m2);
    /* a drafter object (train or run config) of another kind is refused, not read as medusa's */
    cJSON *jk = cJSON_Parse("{\"kind\": \"mtp\", \"heads\": 2}");
    md_config ck;
    assert_int_equal(md_config_init(&ck, &tt->t.m, jk), -1);
    if (!strstr(ds_errmsg(), "of kind 'mtp'")) fail_msg("got '%s'", ds_errmsg());
    cJSON_Delete(jk);
    /* through the registry: the checkpoint opens as a drafter with its heads as max_gamma */
    drafter d;
    checkpoint_serves(&tt->t, "medusa", dir, "\"heads\": 3", "heads", &d);
    assert_int_equal(d.max_gamma, 2);
    assert_int_equal(d.n_capture, 1);
    assert_int_equal(d.capture_layers[0], tt->t.m.cfg.n_layers - 1);
    drafter_close(&d);
    /* a config that is not this target's, a foreign kind, an unknown key: refused by name */
    const char *const bad[][2] = {{"{\"kind\": \"medusa\", \"heads\": 2, \"dim\": 64}", "dim"},
                            {"{\"kind\": \"medusa\", \"heads\": 2, \"target_fingerprint\": \"0123\"}", "trained against"},
                            {"{\"kind\": \"dflash\", \"heads\": 2}", "not a medusa checkpoint"},
                            {"{\"kind\": \"medusa\", \"heads\": 2, \"hedas\": 3}", "hedas"},
                            {"{\"kind\": \"medusa\", \"heads\": 40}", "heads"}};
    checkpoint_refusals(dir, &tt->t.m, load_md, bad, sizeof bad / sizeof *bad);
    md_model_free(&m);
    rm_dir(dir);
    tiny_close(tt);
}

/* The overfit gate: train the heads on ONE cached sequence (40 random tokens after a prompt) through
 * the shared training loop, serve the checkpoint through the registry, and require the memorised
 * tokens drafted back, teacher-forced (train_fixture.h): it catches a train/serve mismatch in the
 * tap, the final norm, which state a head reads (begin's or commit's row) and which token it
 * predicts. The decoding loop then runs the drafter at T = 0 and must emit the target's own output. */
static void overfit_gate(int vocab) {
    overfit g;
    overfit_open(&g, "medusa-overfit", 0, 46, 1, (int[]){-1});
    md_config c;
    assert_int_equal(md_config_init(&c, &g.tt->t.m, NULL), 0);
    c.heads = HEADS;
    c.w_ce = 1, c.w_l1 = 0; /* memorise the data's tokens, not the random target's law */
    /* with a draft vocabulary: the 46 ids the sequence draws from, in a scrambled order (row j is
     * not token j, so a missing mapping cannot pass), 2 of the 48 left out */
    int ids[46];
    for (int j = 0; j < 46; j++) ids[j] = (j * 7 + 3) % 46;
    c.contract.draft_vocab = vocab ? 46 : 0;
    md_model m;
    assert_int_equal(md_model_init(&m, &c, &g.tt->t.m, 5, 0, 1, vocab ? ids : NULL), 0);
    trainable tr;
    assert_int_equal(md_trainable(&m, &tr), 0);
    overfit_train(&g, &tr);
    /* the vocabulary case serves its blocks in Q4_1, the other in the default Q8_0 */
    char what[100];
    snprintf(what, sizeof what, "medusa (%d heads%s, blocks %s)", HEADS, vocab ? ", draft vocabulary 46 of 48" : "",
             vocab ? "q4_1" : "q8_0");
    drafter dr;
    overfit_serve(&g, "medusa", vocab ? ", \"block_precision\": \"q4_1\"" : "", HEADS, what, &dr);
    assert_non_null(strstr(dr.describe, vocab ? "blocks q4_1" : "blocks q8_0"));
    drafter_close(&dr);
    md_model_free(&m);
    overfit_close(&g);
}

static void test_overfit_gate(void **state) {
    (void)state;
    overfit_gate(0);
}
static void test_overfit_gate_vocab(void **state) {
    (void)state;
    overfit_gate(1);
}

/* a draft vocabulary's checkpoint: its ids round-trip, and a wrong hash or missing ids are refused */
static void test_checkpoint_vocab(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    md_config c;
    assert_int_equal(md_config_init(&c, &tt->t.m, NULL), 0);
    c.heads = 2;
    int ids[30];
    for (int j = 0; j < 30; j++) ids[j] = (j * 11 + 4) % c.vocab;
    c.contract.draft_vocab = 30;
    md_model m, m2;
    assert_int_equal(md_model_init(&m, &c, &tt->t.m, 7, 1.0f, 0, ids), 0);
    assert_int_equal(m.sv.Vd, 30);
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s", tmp_path("medusa-ck-vocab"));
    assert_int_equal(md_save(&m, dir), 0);
    assert_int_equal(md_load(&m2, dir, &tt->t.m, 0), 0);
    assert_int_equal(m2.cfg.contract.draft_vocab, 30);
    assert_memory_equal(m2.sv.vid, ids, sizeof ids);
    assert_string_equal(m2.cfg.contract.vocab_hash, m.sv.hash);
    md_model_free(&m2);
    /* through the registry: drafts come from the 30 ids only */
    char dj[800];
    snprintf(dj, sizeof dj, "{\"checkpoint\": \"%s\"}", dir);
    cJSON *dc = cJSON_Parse(dj);
    drafter d;
    if (drafter_open(&d, "medusa", dc, &tt->t)) fail_msg("%s", ds_errmsg());
    int seq[8] = {1, 5, 9, 2, 7, 3, 11, 4};
    float *hid = target_states(&tt->t, seq, 8, 1, &(int){tt->t.m.cfg.n_layers - 1});
    request rq;
    assert_int_equal(request_init(&rq, &tt->t, 0, seq, 7, 8, 3), 0);
    assert_int_equal(ivec_push(&rq.toks, seq[7]), 0); /* the anchor */
    if (d.ops->begin(&d, &rq, hid)) fail_msg("%s", ds_errmsg());
    draft_block blk;
    assert_int_equal(draft_block_init(&blk, 2, c.vocab, 1), 0);
    sampling_params sp = {1.0f, 0, 1.0f};
    for (int round = 0; round < 20; round++) {
        if (d.ops->propose(&d, &rq, 2, &sp, &blk)) fail_msg("%s", ds_errmsg());
        for (int k = 0; k < blk.n; k++) {
            assert_true(m.sv.vmap[blk.tok[k]] >= 0);
            double mass = 0;
            for (int v = 0; v < c.vocab; v++) {
                if (m.sv.vmap[v] < 0) assert_true(blk.q[(size_t)k * c.vocab + v] == 0.0f);
                mass += blk.q[(size_t)k * c.vocab + v];
            }
            assert_true(fabs(mass - 1) < 1e-4);
        }
    }
    d.ops->end(&d, &rq);
    request_free(&rq, &tt->t);
    draft_block_free(&blk);
    free(hid);
    drafter_close(&d);
    cJSON_Delete(dc);
    /* a recorded hash the ids do not have; a draft_vocab without its ids */
    snprintf(p, sizeof p, "%s/config.json", dir);
    const char *bad = "{\"kind\": \"medusa\", \"heads\": 2, \"draft_vocab\": 30, \"vocab_hash\": \"0123456789abcdef\"}";
    write_file(p, bad, strlen(bad));
    assert_int_equal(md_load(&m2, dir, &tt->t.m, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "vocab_hash"));
    bad = "{\"kind\": \"medusa\", \"heads\": 2, \"draft_vocab\": 31}";
    write_file(p, bad, strlen(bad));
    assert_int_equal(md_load(&m2, dir, &tt->t.m, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "vocab.ids"));
    md_model_free(&m);
    rm_dir(dir);
    tiny_close(tt);
}

/* The tree builder's top-k against a sort: descending, ties to the lower entry, -inf never taken,
 * probabilities of the full softmax. */
static void test_tree_topk(void **state) {
    (void)state;
    float z[9] = {1.0f, 3.0f, -INFINITY, 3.0f, 0.5f, 2.0f, -INFINITY, 2.0f, -1.0f}, tmp[9], p[16];
    int ids[16], vid[9] = {10, 11, 12, 13, 14, 15, 16, 17, 18};
    assert_int_equal(tree_topk_softmax(z, 9, NULL, 4, ids, p, tmp), 4);
    int want[4] = {1, 3, 5, 7};
    assert_memory_equal(ids, want, sizeof want);
    double sum = 0;
    for (int i = 0; i < 9; i++) sum += z[i] > -INFINITY ? exp((double)z[i] - 3.0) : 0;
    assert_float_equal(p[0], 1 / sum, 1e-6);
    assert_float_equal(p[2], exp(-1.0) / sum, 1e-6);
    assert_int_equal(tree_topk_softmax(z, 9, vid, 16, ids, p, tmp), 7); /* the 7 finite entries, as target ids */
    assert_int_equal(ids[0], 11);
    assert_int_equal(ids[6], 18);
    /* a tie at the list's last place: the earlier entry keeps it (5 before 7, both 2.0) */
    assert_int_equal(tree_topk_softmax(z, 9, NULL, 3, ids, p, tmp), 3);
    int want3[3] = {1, 3, 5};
    assert_memory_equal(ids, want3, sizeof want3);
    /* a row with no finite entry has no children */
    for (int i = 0; i < 9; i++) z[i] = -INFINITY;
    assert_int_equal(tree_topk_softmax(z, 9, NULL, 3, ids, p, tmp), 0);
}

/* tree_calib_judge by hand: nodes 5 (anchor's child), 6 and 7 (5's), 8 (6's), 9 (7's); the round
 * accepted 5 then 7 and committed 9 as its bonus. Judged: the nodes whose parent was reached, each
 * adding its row; accepted: the nodes on the path (5, 7), not the bonus's node (9 was drawn by the
 * target, never verified as a draft) nor 6's child 8 (its parent was rejected); a row < 0 is not judged. */
static void test_tree_calib_by_hand(void **state) {
    (void)state;
    int par[5] = {-1, 0, 0, 1, 2}, tok[5] = {5, 6, 7, 8, 9}, com[3] = {5, 7, 9};
    float row[5] = {0.5f, -1.0f, 0.25f, 0.125f, 0.0625f};
    tree_calib c = {0, 0};
    tree_calib_judge(&c, par, tok, row, 5, com, 2);
    assert_true(c.conf == 0.8125 && c.acc == 2);
    tree_calib_judge(&c, par, tok, row, 5, com, 0); /* nothing accepted: the anchor's children judged */
    assert_true(c.conf == 0.8125 + 0.5 && c.acc == 2);
    tree_calib_judge(&c, par, tok, row, 2, com, 2); /* two nodes verified: the path stops at 5 */
    assert_true(c.conf == 1.3125 + 0.5 && c.acc == 3);
    tree_calib run = {10, 4}, req = {c.conf, c.acc};
    assert_true(fabs(tree_calib_scale(&run, &req) - (4 + 3 + 1) / (10 + 1.8125 + 1)) < 1e-12);
}

/* The best-first builder by hand, on a fixed table of rows (a token's children, whatever its parent):
 *   anchor: 10 .5, 11 .3, 12 .2;  10: 20 .6, 21 .4;  11: 30 .9;  12: 40 .5;  20: 50 .5;  30: 60 1;
 * no children at depth 3. Path scores pick 10 (.5), then 11 and 20 tie at .3 (the earlier candidate,
 * 11), 20, 30 (.27), 60 (.27), 12 and 21 tie at .2 (12, earlier), 21, 50 (.15), 40 (.1). A budget keeps
 * that order's prefix and asks no row for its last node; a pacing refusal stops the rows and the
 * candidates made so far come in as leaves. */
typedef struct {
    int calls, asks, ask_k[16], yes;
    float ask_pc[16][4];
} bf_ctx;

static int bf_row(void *vctx, int node, int tok, int depth, int K, int *ids, float *p) {
    bf_ctx *c = vctx;
    c->calls++;
    static const struct { int tok, n, ids[3]; float p[3]; } rows[] = {
        {-1, 3, {10, 11, 12}, {0.5f, 0.3f, 0.2f}}, {10, 2, {20, 21}, {0.6f, 0.4f}}, {11, 1, {30}, {0.9f}},
        {12, 1, {40}, {0.5f}}, {20, 1, {50}, {0.5f}}, {30, 1, {60}, {1.0f}}};
    assert_true((node < 0) == (tok < 0) && (node < 0) == (depth == 0));
    if (depth >= 3) return 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        if (rows[r].tok == tok) {
            int n = DS_MIN(K, rows[r].n);
            for (int j = 0; j < n; j++) ids[j] = rows[r].ids[j], p[j] = rows[r].p[j];
            return n;
        }
    return 0;
}

static int bf_more(void *vctx, int k, const float *pc) {
    bf_ctx *c = vctx;
    c->ask_k[c->asks] = k;
    for (int i = 0; i < k; i++) c->ask_pc[c->asks][i] = pc[i];
    return c->asks++ < c->yes;
}

static int bf_row_none(void *vctx, int node, int tok, int depth, int K, int *ids, float *p) {
    (void)vctx, (void)node, (void)tok, (void)depth, (void)K, (void)ids, (void)p;
    return 0;
}

static int bf_row_fails_below(void *vctx, int node, int tok, int depth, int K, int *ids, float *p) {
    return depth == 0 ? bf_row(vctx, node, tok, depth, K, ids, p) : -1;
}

static void test_tree_best_first_by_hand(void **state) {
    (void)state;
    draft_block b;
    assert_int_equal(draft_block_init(&b, 16, 64, 1), 0);
    static const int tok[9] = {10, 11, 20, 30, 60, 12, 21, 50, 40}, par[9] = {-1, -1, 0, 1, 3, -1, 0, 2, 5};
    static const float sc[9] = {0.5f, 0.3f, 0.3f, 0.27f, 0.27f, 0.2f, 0.2f, 0.15f, 0.1f};
    for (int budget = 1; budget <= 12; budget++) {
        bf_ctx c = {0};
        assert_int_equal(tree_best_first(bf_row, &c, 3, budget, 0, &b), 0);
        int n = DS_MIN(budget, 9);
        assert_int_equal(b.n, n);
        assert_int_equal(b.tree, TREE_TOPK);
        for (int i = 0; i < n; i++) {
            if (b.tok[i] != tok[i] || b.parent[i] != par[i] || fabsf(b.conf[i] - sc[i]) > 1e-6f ||
                b.conf_raw[i] != b.conf[i])
                fail_msg("budget %d node %d: tok %d parent %d conf %g, by hand %d %d %g", budget, i, b.tok[i],
                         b.parent[i], b.conf[i], tok[i], par[i], sc[i]);
        }
        assert_int_equal(c.calls, 1 + DS_MIN(n, budget - 1)); /* the anchor's row, one a node but a full budget's last */
    }
    /* two children a node at most: 12 is never a candidate, so 21 (.2) comes before 50 and 60's branch */
    {
        bf_ctx c = {0};
        assert_int_equal(tree_best_first(bf_row, &c, 2, 64, 0, &b), 0);
        static const int t2[7] = {10, 11, 20, 30, 60, 21, 50};
        assert_int_equal(b.n, 7);
        assert_memory_equal(b.tok, t2, sizeof t2);
    }
    /* one child a node: the chain of first children */
    {
        bf_ctx c = {0};
        assert_int_equal(tree_best_first(bf_row, &c, 1, 64, 0, &b), 0);
        static const int t1[3] = {10, 20, 50}, p1[3] = {-1, 0, 1};
        assert_int_equal(b.n, 3);
        assert_memory_equal(b.tok, t1, sizeof t1);
        assert_memory_equal(b.parent, p1, sizeof p1);
    }
    /* paced and always granted: the unpaced tree, one ask before each row a node costs (none for the last
     * node a budget takes: its children would never be read) */
    for (int budget = 1; budget <= 10; budget++) {
        bf_ctx c = {.yes = 100};
        b.more = bf_more, b.more_ctx = &c;
        assert_int_equal(tree_best_first(bf_row, &c, 3, budget, 1, &b), 0);
        b.more = NULL;
        assert_int_equal(b.n, DS_MIN(budget, 9));
        assert_memory_equal(b.tok, tok, sizeof(int) * (size_t)b.n);
        assert_int_equal(c.asks, c.calls - 1);
    }
    /* paced: two expansions granted, the third (node 20 at depth 2, its path's rows .5 and .6) refused */
    {
        bf_ctx c = {.yes = 2};
        b.more = bf_more, b.more_ctx = &c;
        assert_int_equal(tree_best_first(bf_row, &c, 3, 9, 1, &b), 0);
        static const int t3[6] = {10, 11, 20, 30, 12, 21}, p3[6] = {-1, -1, 0, 1, -1, 0};
        assert_int_equal(b.n, 6);
        assert_memory_equal(b.tok, t3, sizeof t3);
        assert_memory_equal(b.parent, p3, sizeof p3);
        assert_int_equal(c.asks, 3);
        assert_int_equal(c.calls, 3);
        assert_true(c.ask_k[0] == 1 && c.ask_k[1] == 1 && c.ask_k[2] == 2);
        assert_true(c.ask_pc[0][0] == 0.5f && c.ask_pc[1][0] == 0.3f && c.ask_pc[2][0] == 0.5f && c.ask_pc[2][1] == 0.6f);
        /* without confidences there is nothing to price: no asks, the whole tree */
        bf_ctx c2 = {.yes = 0};
        float *conf = b.conf;
        b.conf = NULL, b.more_ctx = &c2;
        assert_int_equal(tree_best_first(bf_row, &c2, 3, 9, 1, &b), 0);
        assert_int_equal(b.n, 9);
        assert_int_equal(c2.asks, 0);
        b.conf = conf, b.more = NULL;
    }
    /* nothing to build: a zero budget, no children at the anchor, a row that fails */
    bf_ctx c = {0};
    assert_int_equal(tree_best_first(bf_row, &c, 3, 0, 0, &b), 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(c.calls, 0);
    assert_int_equal(tree_best_first(bf_row_none, &c, 3, 9, 0, &b), 0);
    assert_int_equal(b.n, 0);
    assert_int_equal(tree_best_first(bf_row_fails_below, &c, 3, 9, 0, &b), -1);
    assert_int_equal(tree_best_first(bf_row_fails_below, &c, 3, 1, 0, &b), 0); /* one node: its row never asked */
    assert_int_equal(b.n, 1);
    draft_block_free(&b);
}

/* The drafters' trees (Medusa, DFlash, DSpark-Markov, and EAGLE-2's for mtp / eagle3): top-k children by
 * path probability;
 * the spine of first children is the same drafter's T = 0 chain (for DSpark-Markov: each node's row
 * follows its own token); siblings distinct; no node deeper than the drafter's block; a budget cuts
 * the same order. */
/* drafter `name` refuses the config `json` with a message that names `needle` */
static void refuses(tiny_target *tt, const char *name, const char *json, const char *needle) {
    cJSON *cfg = cJSON_Parse(json);
    assert_non_null(cfg);
    drafter d;
    assert_int_equal(drafter_open(&d, name, cfg, &tt->t), -1);
    assert_non_null(strstr(ds_errmsg(), needle));
    cJSON_Delete(cfg);
}

/* a scheduler's draft_more stand-in: says `yes` and counts the asks */
typedef struct {
    int yes, asks;
} pace_stub;
static int pace_answer(void *ctx, int k, const float *conf) {
    pace_stub *p = ctx;
    assert_true(k >= 1);
    for (int i = 0; i < k; i++) assert_true(conf[i] >= 0 && conf[i] <= 1);
    p->asks++;
    return p->yes;
}

/* paced: the family asks the scheduler before a draft or a tree expansion that costs it a forward
 * (DSpark-Markov's head step, EAGLE-2's level pass); told yes it drafts what it drafts unasked, told no
 * its chain stops at one draft and its tree keeps the anchor's children (the rows made) */
static void tree_family(tiny_target *tt, const char *name, const char *chain_cfg, const char *tree_cfg, int depth_max,
                        int spine_min, int paced) {
    cJSON *ct = cJSON_Parse(tree_cfg), *cc = cJSON_Parse(chain_cfg);
    drafter dt, dc;
    if (drafter_open(&dt, name, ct, &tt->t) || drafter_open(&dc, name, cc, &tt->t)) fail_msg("%s: %s", name, ds_errmsg());
    assert_int_equal(dt.tree_nodes, 10);
    int seq[8] = {1, 5, 9, 2, 7, 3, 11, 4}, V = tt->t.m.cfg.vocab_size;
    float *hid = target_states(&tt->t, seq, 7, dt.n_capture, dt.capture_layers);
    request rt, rc;
    assert_int_equal(request_init(&rt, &tt->t, 0, seq, 7, 8, 3), 0);
    assert_int_equal(request_init(&rc, &tt->t, 1, seq, 7, 8, 3), 0);
    assert_int_equal(ivec_push(&rt.toks, seq[7]), 0); /* the anchor, drawn before begin (as decode does) */
    assert_int_equal(ivec_push(&rc.toks, seq[7]), 0);
    if (dt.ops->begin(&dt, &rt, hid) || dc.ops->begin(&dc, &rc, hid)) fail_msg("%s: %s", name, ds_errmsg());
    draft_block bt, bc, b4;
    assert_int_equal(draft_block_init(&bt, 10, V, 1), 0);
    assert_int_equal(draft_block_init(&bc, depth_max, V, 1), 0);
    assert_int_equal(draft_block_init(&b4, 10, V, 1), 0);
    sampling_params greedy = {0.0f, 0, 1.0f};
    if (dt.ops->propose(&dt, &rt, 10, &greedy, &bt) || dc.ops->propose(&dc, &rc, depth_max, &greedy, &bc))
        fail_msg("%s: %s", name, ds_errmsg());
    assert_int_equal(bt.tree, TREE_TOPK);
    assert_int_equal(bt.n, 10);
    int depth[10], spine = 0;
    for (int i = 0; i < bt.n; i++) {
        assert_true(bt.parent[i] >= -1 && bt.parent[i] < i);
        depth[i] = bt.parent[i] < 0 ? 1 : depth[bt.parent[i]] + 1;
        assert_true(depth[i] <= depth_max);
        if (bt.parent[i] >= 0) assert_true(bt.conf[i] <= bt.conf[bt.parent[i]]);
        for (int j = 0; j < i; j++) assert_false(bt.parent[j] == bt.parent[i] && bt.tok[j] == bt.tok[i]);
        /* the first child of the spine's last node (node 0: the anchor's first child) */
        if (bt.parent[i] == (spine ? spine - 1 : -1) && (i == 0 || bt.parent[i] != bt.parent[i - 1])) {
            if (bt.tok[i] != bc.tok[depth[i] - 1])
                fail_msg("%s: the tree's spine at depth %d is %d, the T = 0 chain's %d", name, depth[i], bt.tok[i],
                         bc.tok[depth[i] - 1]);
            spine = i + 1;
        }
    }
    if (depth[spine - 1] < spine_min) fail_msg("%s: the spine ends at depth %d (< %d)", name, depth[spine - 1], spine_min);
    if (dt.ops->propose(&dt, &rt, 4, &greedy, &b4)) fail_msg("%s: %s", name, ds_errmsg());
    assert_int_equal(b4.n, 4);
    assert_memory_equal(b4.tok, bt.tok, 4 * sizeof(int));
    assert_memory_equal(b4.parent, bt.parent, 4 * sizeof(int));
    for (int yes = 1; yes >= 0; yes--) {
        pace_stub ps = {yes, 0};
        b4.more = bc.more = pace_answer, b4.more_ctx = bc.more_ctx = &ps;
        if (dt.ops->propose(&dt, &rt, 10, &greedy, &b4)) fail_msg("%s: %s", name, ds_errmsg());
        if (paced && !ps.asks) fail_msg("%s: its tree never asked the scheduler", name);
        if (!paced) assert_int_equal(ps.asks, 0);
        if (yes || !paced) { /* the same tree */
            assert_int_equal(b4.n, bt.n);
            assert_memory_equal(b4.tok, bt.tok, (size_t)bt.n * sizeof(int));
            assert_memory_equal(b4.parent, bt.parent, (size_t)bt.n * sizeof(int));
        } else { /* refused at once: the anchor's row alone, in the tree's order */
            assert_int_equal(b4.n, 3);
            for (int i = 0; i < b4.n; i++) assert_int_equal(b4.parent[i], -1);
        }
        int asks = ps.asks;
        if (dc.ops->propose(&dc, &rc, depth_max, &greedy, &bc)) fail_msg("%s: %s", name, ds_errmsg());
        assert_int_equal(bc.n, yes || !paced ? depth_max : 1);
        if (paced) assert_int_equal(ps.asks - asks, yes ? depth_max - 1 : 1); /* before each draft after the first */
        b4.more = bc.more = NULL;
    }
    /* an end token ends its path: made EOG, the first node's token (a parent in the tree above) has no
     * children anywhere in the tree, and the budget goes to other nodes */
    int e = bt.tok[0], kids = 0;
    for (int i = 0; i < bt.n; i++) kids += bt.parent[i] >= 0 && bt.tok[bt.parent[i]] == e;
    assert_true(kids > 0);
    tt->t.tk.n_eog = 1, tt->t.tk.eog[0] = e;
    if (dt.ops->propose(&dt, &rt, 10, &greedy, &b4)) fail_msg("%s: %s", name, ds_errmsg());
    tt->t.tk.n_eog = 0;
    assert_int_equal(b4.tok[0], e);
    for (int i = 0; i < b4.n; i++)
        if (b4.parent[i] >= 0 && b4.tok[b4.parent[i]] == e) fail_msg("%s: node %d grows under the end token %d", name, i, e);
    dt.ops->end(&dt, &rt), dc.ops->end(&dc, &rc);
    request_free(&rt, &tt->t), request_free(&rc, &tt->t);
    draft_block_free(&bt), draft_block_free(&bc), draft_block_free(&b4);
    free(hid);
    drafter_close(&dt), drafter_close(&dc);
    cJSON_Delete(ct), cJSON_Delete(cc);
    refuses(tt, name, "{\"tree_nodes\": 65}", "tree_nodes");
}

/* DFlash / DSpark's draft layers in Q8_0 (layer_precision, the default where the widths fit) against fp32:
 * the same drafts' q rows within the rounding's reach, the describe line naming the type, and a bad
 * value refused by its key */
static void test_layer_precision(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
#define BD "\"init_noise\": 5.0, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 4, \"taps\": [0, 1]"
    const char *cfg[2] = {"{" BD ", \"layer_precision\": \"f32\"}", "{" BD "}"};
    int seq[8] = {1, 5, 9, 2, 7, 3, 11, 4}, V = tt->t.m.cfg.vocab_size;
    float *q[2];
    for (int i = 0; i < 2; i++) {
        cJSON *cj = cJSON_Parse(cfg[i]);
        drafter d;
        if (drafter_open(&d, "dspark-markov", cj, &tt->t)) fail_msg("%s", ds_errmsg());
        assert_non_null(strstr(d.describe, i ? "layers q8_0" : "layers f32"));
        float *hid = target_states(&tt->t, seq, 7, d.n_capture, d.capture_layers);
        request r;
        assert_int_equal(request_init(&r, &tt->t, 0, seq, 7, 8, 3), 0);
        assert_int_equal(ivec_push(&r.toks, seq[7]), 0);
        if (d.ops->begin(&d, &r, hid)) fail_msg("%s", ds_errmsg());
        draft_block b;
        assert_int_equal(draft_block_init(&b, 4, V, 1), 0);
        sampling_params greedy = {0.0f, 0, 1.0f}, t1 = {1.0f, 0, 1.0f};
        if (d.ops->propose(&d, &r, 1, &greedy, &b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(b.n, 1);
        if (d.ops->propose(&d, &r, 1, &t1, &b)) fail_msg("%s", ds_errmsg()); /* the first row's law at T = 1 */
        q[i] = malloc(sizeof(float) * (size_t)V);
        memcpy(q[i], b.q, sizeof(float) * (size_t)V);
        d.ops->end(&d, &r);
        request_free(&r, &tt->t);
        draft_block_free(&b);
        free(hid);
        drafter_close(&d);
        cJSON_Delete(cj);
    }
    double tv = 0;
    for (int v = 0; v < V; v++) tv += fabs((double)q[0][v] - q[1][v]) / 2;
    assert_true(tv > 0 && tv < 0.05); /* moved by the rounding, not replaced */
    free(q[0]), free(q[1]);
    refuses(tt, "dflash", "{" BD ", \"layer_precision\": \"q3\"}", "layer_precision");
#undef BD
    tiny_close(tt);
}

static void test_drafter_trees(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    tree_family(tt, "medusa", "{\"heads\": 3, \"init_std\": 2.0}",
                "{\"heads\": 3, \"init_std\": 2.0, \"tree_nodes\": 10, \"tree_width\": 3}", 3, 2, 0);
#define BD "\"init_noise\": 5.0, \"init_std\": 0.3, \"layers\": 1, \"rank\": 8, \"gamma\": 4, \"taps\": [0, 1]"
    tree_family(tt, "dflash", "{" BD "}", "{" BD ", \"tree_nodes\": 10, \"tree_width\": 3}", 4, 2, 0);
    tree_family(tt, "dspark-markov", "{" BD "}", "{" BD ", \"tree_nodes\": 10, \"tree_width\": 3}", 4, 2, 1);
    /* EAGLE-2's trees (mtp, eagle3): rows past depth 1 run in a tree-masked pass; the spine is the chain
     * to depth 3 (mtp) and 4 (eagle3): rows reading their ancestors' K/V, not the chain's cache */
    tree_family(tt, "mtp", "{\"depth\": 3, \"seed\": 5}", "{\"depth\": 3, \"seed\": 5, \"tree_nodes\": 10, \"tree_width\": 3}", 3, 3, 1);
    tree_family(tt, "eagle3", "{\"depth\": 4, \"seed\": 5}", "{\"depth\": 4, \"seed\": 5, \"tree_nodes\": 10, \"tree_width\": 3}", 4, 4, 1);
    refuses(tt, "dspark-rnn", "{" BD ", \"tree_nodes\": 4}", "RNN");
#undef BD
    tiny_close(tt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_final),
        cmocka_unit_test(test_grad_topk),
        cmocka_unit_test(test_grad_vocab),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_train_serve),
        cmocka_unit_test(test_init_draw),
        cmocka_unit_test(test_checkpoint_vocab),
        cmocka_unit_test(test_tree_topk),
        cmocka_unit_test(test_tree_best_first_by_hand),
        cmocka_unit_test(test_tree_calib_by_hand),
        cmocka_unit_test(test_drafter_trees),
        cmocka_unit_test(test_layer_precision),
        cmocka_unit_test(test_overfit_gate),
        cmocka_unit_test(test_overfit_gate_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
