/* test_train — the block drafters as trainable models, on a tiny target the test writes itself:
 * the whole training loss's gradient against finite differences along random directions (every
 * tensor, every family, both row layouts), checkpoints round-tripping, and a run resumed from a
 * checkpoint continuing exactly the loss curve of an uninterrupted one. */
#include "testutil.h"

#include "../datasets/traindata.h"
#include "../drafters/blockdraft.h"
#include "../drafters/draft_vocab.h"
#include "../drafters/train_family.h"
#include "../engine/decode.h"
#include "../engine/train.h"
#include "../schedulers/scheduler.h"
#include "../runtime/train/train_ops.h"
#include "train_fixture.h"

static cJSON *arch(const char *extra) {
    char buf[512];
    snprintf(buf, sizeof buf, "{\"layers\": 2, \"rank\": 6, \"gamma\": 4, \"taps\": [0, 1], \"mask_token\": 47%s}", extra);
    return cJSON_Parse(buf);
}

/* one sequence of random tokens with the tiny target's real states */
#define LONG_AT 200 /* a prompt longer than any other case's: the drafters' context over many rows */
#define SEQ_MAX (LONG_AT + 40)

typedef struct {
    int T, tokens[SEQ_MAX], anchor[6], n_valid[6];
    float *taps, *final;
    int32_t tk_id[SEQ_MAX * 8];
    float tk_lp[SEQ_MAX * 8];
    bd_seq s;
} seq_fix;

#define FIX_PROMPT 3
#define FIX_K 8

/* the target's states of f->tokens[0..T): taps 0 and 1 ([T][2][dim]), final, top-K rows */
static void seq_states(tiny_target *tt, seq_fix *f) {
    int taps[2] = {0, 1}, D = tt->t.m.cfg.dim;
    float *cap = malloc(sizeof(float) * 2 * f->T * D);
    f->final = malloc(sizeof(float) * f->T * D);
    f->taps = malloc(sizeof(float) * 2 * f->T * D);
    kv_cache *kv = kv_cache_new(tt->t.be, &tt->t.m.cfg, f->T);
    int V = tt->t.m.cfg.vocab_size;
    float *logits = malloc(sizeof(float) * f->T * V);
    fwd_batch b = {.n_seq = 1, .kv = &kv, .n_new = &f->T, .tokens = f->tokens, .all_logits = 1, .logits = logits,
                   .n_capture = 2, .capture_layers = taps, .capture = cap, .final_hidden = f->final};
    assert_int_equal(model_forward(&tt->t.m, &tt->t.fs, &b), 0);
    for (int r = 0; r < f->T - FIX_PROMPT; r++) /* the cache's rows: the law of token FIX_PROMPT + r */
        topk_logprobs(logits + (size_t)(FIX_PROMPT - 1 + r) * V, V, FIX_K, f->tk_id + r * FIX_K, f->tk_lp + r * FIX_K);
    free(logits);
    for (int i = 0; i < f->T; i++)
        for (int k = 0; k < 2; k++) memcpy(f->taps + ((size_t)i * 2 + k) * D, cap + ((size_t)k * f->T + i) * D, sizeof(float) * D);
    kv_cache_free(tt->t.be, kv);
    free(cap);
}

static void make_seq_n(tiny_target *tt, seq_fix *f, int gamma, int T) {
    rng_t r;
    rng_seed(&r, 5);
    f->T = T;
    for (int i = 0; i < f->T; i++) f->tokens[i] = (int)(rng_u64(&r) % 46);
    seq_states(tt, f);
    int anchors[6] = {3, 9, 14, 20, 31, 33};
    for (int a = 0; a < 6; a++) {
        f->anchor[a] = anchors[a];
        f->n_valid[a] = DS_MIN(gamma, f->T - 1 - anchors[a]); /* the last blocks are cut short */
    }
    f->s = (bd_seq){f->T, f->taps, f->final, f->tokens, FIX_PROMPT, FIX_K, NULL, NULL, 6, f->anchor, f->n_valid};
}

static void make_seq(tiny_target *tt, seq_fix *f, int gamma) { make_seq_n(tt, f, gamma, 36); }

typedef struct {
    const bd_model *m;
    double *p, *E, *Eh;
    bd_seq_d s;
    double norm;
    double labels[64];
} dctx;

static double loss_d(void *ctx) {
    dctx *x = ctx;
    bd_stats st;
    memset(&st, 0, sizeof st);
    st.label_in = x->labels; /* the detached confidence labels of the base point */
    if (bd_train_seq_d(&x->m->cfg, x->m->t, x->p, x->E, x->Eh, x->m->Vd, x->m->sv.vmap, &x->s, NULL, x->norm, &st))
        fail_msg("%s", ds_errmsg());
    return (x->m->cfg.w_ce * st.ce + x->m->cfg.w_l1 * st.l1 + x->m->cfg.w_bce * st.bce) / x->norm;
}

/* The whole training loss, in double: for every tensor, the analytic gradient projected on a
 * random direction against the central difference along it; and the float gradient (what
 * training uses) against the double one. */
/* target: 0 = the final states (full vocabulary, the reference path), 1 = the cached top-K rows,
 * 2 = top-K with a draft vocabulary of 30 of the 48 tokens (labels and top-K entries outside it) */
static void gradcheck(const char *kind, const char *extra, int target) {
    tiny_target *tt = tiny_open();
    cJSON *j = arch(extra);
    bd_config c;
    if (bd_config_init(&c, &tt->t.m, kind, j)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(j);
    bd_model m;
    int vids[30];
    for (int i = 0; i < 30; i++) vids[i] = (i * 7) % 48; /* 7 is prime to 48: distinct ids */
    if (target == 2) c.contract.draft_vocab = 30;
    assert_int_equal(bd_model_init_vocab(&m, &c, &tt->t.m, 3, 0, target == 2 ? vids : NULL), 0);
    /* move every tensor off its special initial value (zero heads, unit norms) */
    rng_t r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.2f * (float)(rng_uniform(&r) - 0.5);
    seq_fix f;
    make_seq(tt, &f, c.gamma);
    size_t nE = (size_t)c.vocab * c.dim, nt = (size_t)f.T * c.n_tap * c.dim, nf = (size_t)f.T * c.dim;
    dctx x;
    memset(&x, 0, sizeof x);
    x.m = &m;
    x.p = malloc(sizeof(double) * m.n_params);
    x.E = malloc(sizeof(double) * nE);
    x.Eh = malloc(sizeof(double) * (size_t)m.Vd * c.dim);
    for (size_t i = 0; i < (size_t)m.Vd * c.dim; i++) x.Eh[i] = m.Eh[i];
    double *taps = malloc(sizeof(double) * nt), *fin = malloc(sizeof(double) * nf);
    for (size_t i = 0; i < m.n_params; i++) x.p[i] = m.params[i];
    for (size_t i = 0; i < nE; i++) x.E[i] = m.E[i];
    for (size_t i = 0; i < nt; i++) taps[i] = f.taps[i];
    for (size_t i = 0; i < nf; i++) fin[i] = f.final[i];
    if (target) f.s.final = NULL, f.s.tk_id = f.tk_id, f.s.tk_lp = f.tk_lp;
    x.s = (bd_seq_d){f.T, taps, target ? NULL : fin, f.tokens, FIX_PROMPT, FIX_K, f.s.tk_id, f.s.tk_lp, 6, f.anchor, f.n_valid};
    x.norm = bd_seq_weight(&c, 6, f.n_valid);
    double *gd = calloc(m.n_params, sizeof(double));
    float *gf = calloc(m.n_params, sizeof(float));
    bd_stats st;
    memset(&st, 0, sizeof st);
    st.label_out = x.labels;
    if (bd_train_seq_d(&m.cfg, m.t, x.p, x.E, x.Eh, m.Vd, m.sv.vmap, &x.s, gd, x.norm, &st)) fail_msg("%s", ds_errmsg());
    if (target == 2) assert_true(st.label_outside > 0); /* the CE skip is exercised */
    memset(&st, 0, sizeof st);
    assert_int_equal(bd_train_seq(&m, &f.s, gf, x.norm, &st), 0);
    { /* the GEMM attention training runs against the reference loops: the same float gradient */
        float *gl = calloc(m.n_params, sizeof(float));
        bd_stats sl;
        memset(&sl, 0, sizeof sl);
        m.ws.loop_attention = 1;
        assert_int_equal(bd_train_seq(&m, &f.s, gl, x.norm, &sl), 0);
        m.ws.loop_attention = 0;
        double dd = 0, nn = 0;
        for (size_t i = 0; i < m.n_params; i++) dd += (double)(gl[i] - gf[i]) * (gl[i] - gf[i]), nn += (double)gl[i] * gl[i];
        if (sqrt(dd) > 1e-5 * sqrt(nn)) fail_msg("%s: GEMM attention gradient differs from the loops' by %.3g (relative)", kind,
                                                 sqrt(dd / nn));
        assert_true(fabs(sl.l1 - st.l1) <= 1e-5 * fabs(sl.l1) + 1e-9);
        free(gl);
    }
    double worst = 0, worst_f = 0;
    for (int ti = 0; ti < m.n_t; ti++) {
        const bd_tensor *t = &m.t[ti];
        char what[128];
        snprintf(what, sizeof what, "%s: tensor %s", kind, t->name);
        double rel_f, rel = fd_check_tensor(loss_d, &x, x.p + t->offset, gd + t->offset, gf + t->offset, t->numel, &r,
                                            what, &rel_f);
        worst = fmax(worst, rel);
        worst_f = fmax(worst_f, rel_f);
    }
    printf("  %s%s, target %s: %d tensors; worst relative error vs finite differences %.2e (double); float vs double "
           "gradient %.2e\n",
           kind, extra, target == 0 ? "final states" : target == 1 ? "top-8" : "top-8, draft vocabulary 30/48", m.n_t,
           worst, worst_f);
    free(gd), free(gf), free(x.p), free(x.E), free(x.Eh), free(taps), free(fin), free(f.taps), free(f.final);
    bd_model_free(&m);
    tiny_close(tt);
}

/* rows from..from+cnt-1 of the two taps ([T][2][dim]) in the engine's layout [tap][row][dim] */
static float *engine_rows(const seq_fix *f, int D, int from, int cnt) {
    float *o = malloc(sizeof(float) * 2 * (size_t)cnt * D);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < cnt; i++)
            memcpy(o + ((size_t)t * cnt + i) * D, f->taps + ((size_t)(from + i) * 2 + t) * D, sizeof(float) * D);
    return o;
}

/* a block drafter of `kind` (arch(extra); vocab: a draft vocabulary of 30 of the 48 ids) with every
 * parameter moved off its start by amp, saved into dir (tag names it) */
static void saved_block(tiny_target *tt, const char *kind, const char *extra, int vocab, uint64_t seed, float amp,
                        const char *tag, bd_config *c, bd_model *m, char *dir, size_t n) {
    cJSON *j = arch(extra);
    if (bd_config_init(c, &tt->t.m, kind, j)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(j);
    int vids[30];
    for (int i = 0; i < 30; i++) vids[i] = (i * 7) % 48;
    if (vocab) c->contract.draft_vocab = 30;
    assert_int_equal(bd_model_init_vocab(m, c, &tt->t.m, 3, 0, vocab ? vids : NULL), 0);
    jitter_params(m->params, m->n_params, seed, amp);
    snprintf(dir, n, "%s", tmp_path(tag));
    assert_int_equal(bd_save(m, dir), 0);
}

/* The block drafters trained and served, through the drafter's own commits: each round the drafter
 * samples gamma drafts at T = 1 from its committed context; the sequence is made that text followed by
 * those drafts (the Markov / RNN head's teacher forcing then feeds the tokens the drafter fed itself),
 * and the training step's logits rows at the anchor (block pass plus head) must give the drafter's q
 * rows, its confidence logits the drafter's raw confidences (and, through the checkpoint's temperatures,
 * its calibrated ones). The round commits j = 0..gamma drafts and
 * a next token (the target's states of that text as the context rows), so every block position, the
 * context cache across commits and the new anchor's position are compared. Returns the worst |dq|. */
static double bd_train_serve_chain(const char *kind, const char *extra, const char *serve, int vocab, int at) {
    tiny_target *tt = tiny_open();
    bd_config c;
    bd_model m;
    char dir[600];
    saved_block(tt, kind, extra, vocab, 19, 0.2f, "bd-chain", &c, &m, dir, sizeof dir);
    /* calibration temperatures for the first two positions, one below and one above 1 */
    m.cfg.contract.n_calib = 2, m.cfg.contract.calib[0] = 0.5f, m.cfg.contract.calib[1] = 2.0f;
    assert_int_equal(bd_save(&m, dir), 0);
    drafter dr;
    serve_checkpoint(&dr, &tt->t, kind, dir, serve);
    seq_fix f;
    make_seq_n(tt, &f, c.gamma, at + 32);
    int D = c.dim, V = c.vocab, Vd = m.Vd, G = c.gamma, at0 = at, one = G;
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block b;
    assert_int_equal(draft_block_init(&b, G, V, 1), 0);
    request rq;
    assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, at, 64, 23), 0);
    assert_int_equal(ivec_push(&rq.toks, f.tokens[at]), 0);
    float *pref = engine_rows(&f, D, 0, at);
    if (dr.ops->begin(&dr, &rq, pref)) fail_msg("%s", ds_errmsg());
    free(pref);
    double worst = 0, worst_c = 0;
    int rounds = 0;
    for (int jc = 0; at + G + 1 < f.T; jc = (jc + 1) % (G + 1), rounds++) {
        if (dr.ops->propose(&dr, &rq, G, &sp, &b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(b.n, G);
        for (int k = 0; k < G; k++) f.tokens[at + 1 + k] = b.tok[k];
        free(f.taps), free(f.final);
        seq_states(tt, &f); /* the committed text, then the drafts: states before at + 1 are unchanged */
        bd_seq sq = {f.T, f.taps, NULL, f.tokens, FIX_PROMPT, FIX_K, f.tk_id, f.tk_lp, 1, &at, &one};
        bd_stats st;
        memset(&st, 0, sizeof st);
        if (bd_train_seq(&m, &sq, NULL, 1, &st)) fail_msg("%s", ds_errmsg());
        for (int k = 0; k < G; k++) { /* one anchor: row k is position k + 1 */
            worst = fmax(worst, law_gap(m.ws.Z + (size_t)k * Vd, Vd, m.sv.vid, b.q + (size_t)k * V));
            if (!c.conf) continue;
            double lg = m.ws.clog[k], tk = k < 2 ? m.cfg.contract.calib[k] : 1;
            worst_c = fmax(worst_c, fabs(b.conf_raw[k] - 1 / (1 + exp(-lg))));
            worst_c = fmax(worst_c, fabs(b.conf[k] - 1 / (1 + exp(-lg / tk)))); /* the checkpoint's temperatures */
        }
        /* commit jc drafts and a next token other than draft jc + 1 (the rows' states end at draft jc) */
        if (jc < G) f.tokens[at + 1 + jc] = (b.tok[jc] + 7) % 46;
        for (int i = 1; i <= jc + 1; i++) assert_int_equal(ivec_push(&rq.toks, f.tokens[at + i]), 0);
        float *rows = engine_rows(&f, D, at, jc + 1);
        if (dr.ops->commit(&dr, &rq, jc, f.tokens[at + jc + 1], rows)) fail_msg("%s", ds_errmsg());
        free(rows);
        at += jc + 1;
    }
    printf("  %s%s%s, served {%s}, prompt %d: trained vs served over %d rounds (positions 1-%d, commits of 0-%d): "
           "worst |dq| %.2e, |dconf| %.2e\n",
           kind, extra, vocab ? ", draft vocabulary 30 of 48" : "", serve[0] ? serve + 2 : "", at0, rounds, G, G, worst, worst_c);
    assert_true(rounds >= 6);
    assert_true(worst_c < (strstr(serve, "q8_0") ? 0.05 : 1e-5)); /* 0 when there is no confidence head */
    dr.ops->end(&dr, &rq);
    request_free(&rq, &tt->t);
    draft_block_free(&b);
    drafter_close(&dr);
    bd_model_free(&m);
    free(f.taps), free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

/* DFlash's and DSpark-Markov's trees against the training step, path by path: each node's confidence is
 * its path probability, the product of the T = 1 laws of its path's tokens (block position k's logits,
 * plus for the Markov head the correction from the token before it); the training step teacher-forced
 * on the path computes each law from scratch. Returns the worst relative error. */
static double bd_tree_paths(const char *kind, int vocab) {
    tiny_target *tt = tiny_open();
    bd_config c;
    bd_model m;
    char dir[600];
    saved_block(tt, kind, "", vocab, 31, 0.4f, "bd-tree", &c, &m, dir, sizeof dir);
    drafter dr;
    serve_checkpoint(&dr, &tt->t, kind, dir, ", \"layer_precision\": \"f32\", \"head_precision\": \"f32\", "
                                             "\"tree_nodes\": 14, \"tree_width\": 3");
    seq_fix f;
    make_seq(tt, &f, c.gamma);
    int D = c.dim, V = c.vocab, Vd = m.Vd, G = c.gamma, deepest = 0;
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block b;
    assert_int_equal(draft_block_init(&b, 14, V, 1), 0);
    double worst = 0;
    for (int at = 5; at <= 25; at += 10) {
        request rq;
        assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, at, 8, 3), 0);
        assert_int_equal(ivec_push(&rq.toks, f.tokens[at]), 0);
        float *pref = engine_rows(&f, D, 0, at);
        if (dr.ops->begin(&dr, &rq, pref)) fail_msg("%s", ds_errmsg());
        free(pref);
        if (dr.ops->propose(&dr, &rq, 14, &sp, &b)) fail_msg("%s", ds_errmsg());
        tree_budget_one(&dr, &rq, &sp, &b);
        assert_int_equal(b.n, 14);
        int save[16];
        memcpy(save, f.tokens + at + 1, sizeof(int) * (size_t)G);
        for (int i = 0; i < b.n; i++) {
            int path[16], d = tree_path(&b, i, path);
            assert_true(d <= G);
            deepest = DS_MAX(deepest, d);
            for (int k = 0; k < d; k++) f.tokens[at + 1 + k] = path[k];
            /* the block pass reads the context before the anchor, the head the path: no new states needed */
            bd_seq sq = {f.T, f.taps, NULL, f.tokens, FIX_PROMPT, FIX_K, f.tk_id, f.tk_lp, 1, &at, &d};
            bd_stats st;
            memset(&st, 0, sizeof st);
            if (bd_train_seq(&m, &sq, NULL, 1, &st)) fail_msg("%s", ds_errmsg());
            double want = 1;
            for (int k = 0; k < d; k++) {
                int row = vocab ? m.sv.vmap[path[k]] : path[k];
                assert_true(row >= 0);
                want *= softmax_at(m.ws.Z + (size_t)k * Vd, Vd, row);
            }
            worst = fmax(worst, fabs(b.conf_raw[i] - want) / want);
            memcpy(f.tokens + at + 1, save, sizeof(int) * (size_t)G);
        }
        dr.ops->end(&dr, &rq);
        request_free(&rq, &tt->t);
    }
    printf("  %s%s: tree of 14 nodes (width 3) at 3 anchors, each node's path probability vs the training step on "
           "its path: worst relative error %.2e (deepest node %d)\n", kind, vocab ? ", draft vocabulary 30 of 48" : "",
           worst, deepest);
    assert_true(deepest >= 3);
    draft_block_free(&b);
    drafter_close(&dr);
    bd_model_free(&m);
    free(f.taps), free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

static void test_tree_paths(void **state) {
    (void)state;
    assert_true(bd_tree_paths("dflash", 0) < 1e-5);
    assert_true(bd_tree_paths("dspark-markov", 1) < 1e-5);
}

static void test_train_serve_chain(void **state) {
    (void)state;
    const char *f32 = ", \"layer_precision\": \"f32\", \"head_precision\": \"f32\"";
    assert_true(bd_train_serve_chain("dflash", "", f32, 0, 4) < 1e-5);
    assert_true(bd_train_serve_chain("dflash", ", \"anchor_first\": 0", f32, 0, 4) < 1e-5);
    assert_true(bd_train_serve_chain("dspark-markov", "", f32, 1, 4) < 1e-5);
    assert_true(bd_train_serve_chain("dspark-rnn", "", f32, 0, 4) < 1e-5);
    assert_true(bd_train_serve_chain("dspark-rnn", "", f32, 1, 4) < 1e-5);
    double q8 = bd_train_serve_chain("dspark-markov", "", ", \"layer_precision\": \"q8_0\"", 1, 4);
    assert_true(q8 < 0.05 && q8 > 1e-7); /* the quantized layers really ran */
    /* a long prompt: the context's rows, positions and the block's attention over them */
    assert_true(bd_train_serve_chain("dflash", "", f32, 0, LONG_AT) < 1e-5);
    assert_true(bd_train_serve_chain("dspark-markov", "", f32, 1, LONG_AT) < 1e-5);
}

/* The top-K L1 against the full-vocabulary L1, on the tiny target's real distributions and random
 * draft logits: never above it, below it by at most 2 min(q_rest, t_rest), equal when K = V. */
static void test_topk_loss_matches_full(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    seq_fix f;
    make_seq(tt, &f, 4);
    int V = tt->t.m.cfg.vocab_size, D = tt->t.m.cfg.dim;
    double *z = malloc(sizeof(double) * V), *p = malloc(sizeof(double) * V), *sc = malloc(sizeof(double) * V),
           *g = malloc(sizeof(double) * V), *zt = malloc(sizeof(double) * V), t[64];
    int id[64], Ks[4] = {4, 8, 16, V};
    rng_t r;
    rng_seed(&r, 31);
    double worst_gap = 0, worst_full = 0;
    for (int row = FIX_PROMPT; row < f.T; row++) {
        for (int v = 0; v < V; v++) { /* the target's logits from its final state, through its head */
            float e[64];
            qmat_row_f32(&tt->t.m.output, v, e);
            double acc = 0;
            for (int d = 0; d < D; d++) acc += (double)e[d] * f.final[(size_t)(row - 1) * D + d];
            zt[v] = acc;
            z[v] = 2 * (rng_uniform(&r) - 0.5);
        }
        double pt[64];
        softmax_row_d(pt, zt, V);
        double full = l1_row_d(NULL, z, pt, V, 1, sc);
        softmax_row_d(p, z, V);
        for (int ki = 0; ki < 4; ki++) {
            int K = Ks[ki];
            float zf[64], lp[64];
            int32_t ids[64];
            for (int v = 0; v < V; v++) zf[v] = (float)zt[v];
            topk_logprobs(zf, V, K, ids, lp);
            double tin = 0, qin = 0;
            for (int k = 0; k < K; k++) id[k] = ids[k], t[k] = exp((double)lp[k]), tin += t[k], qin += p[ids[k]];
            double sparse = l1_topk_row_d(NULL, z, V, id, t, K, 1, sc, g);
            double bound = 2 * fmin(1 - qin, 1 - tin), gap = full - sparse;
            if (gap < -1e-6 || gap > bound + 1e-6)
                fail_msg("row %d K %d: full L1 %.9g, top-K L1 %.9g, gap %.3g outside [0, %.3g]", row, K, full, sparse, gap,
                         bound);
            if (K == V) worst_full = fmax(worst_full, fabs(gap));
            else worst_gap = fmax(worst_gap, gap);
        }
    }
    assert_true(worst_full < 1e-6); /* K = V: the same loss (fp32 log-probs) */
    printf("  top-K L1 vs full L1 over %d rows: largest gap %.3e at K < V (within 2 min(q_rest, t_rest)), %.1e at K = V\n",
           f.T - FIX_PROMPT, worst_gap, worst_full);
    free(z), free(p), free(sc), free(g), free(zt), free(f.taps), free(f.final);
    tiny_close(tt);
}

static void test_grad_dflash(void **state) {
    (void)state;
    gradcheck("dflash", "", 0);
    gradcheck("dflash", ", \"anchor_first\": 0", 1); /* z-lab's mask-rows-only layout */
    gradcheck("dflash", "", 2);
}
static void test_grad_dspark_markov(void **state) {
    (void)state;
    gradcheck("dspark-markov", "", 0);
    gradcheck("dspark-markov", "", 1);
    gradcheck("dspark-markov", "", 2);
}
static void test_grad_dspark_rnn(void **state) {
    (void)state;
    gradcheck("dspark-rnn", "", 0);
    gradcheck("dspark-rnn", "", 2);
}

/* every family saves and loads back bit for bit (DFlash has no head: rank 0 must load) */
static void test_checkpoint_every_kind(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const char *kinds[] = {"dflash", "dspark-markov", "dspark-rnn"};
    for (int i = 0; i < 3; i++) {
        cJSON *j = arch("");
        if (i == 0) cJSON_DeleteItemFromObject(j, "rank"); /* as train writes it: no head, rank 0 */
        bd_config c;
        assert_int_equal(bd_config_init(&c, &tt->t.m, kinds[i], j), 0);
        cJSON_Delete(j);
        bd_model m, m2;
        assert_int_equal(bd_model_init(&m, &c, &tt->t.m, 4, 0), 0);
        const char *dir = tmp_path("ckpt-kind");
        assert_int_equal(bd_save(&m, dir), 0);
        assert_int_equal(bd_load(&m2, dir, &tt->t.m), 0);
        assert_string_equal(m2.cfg.kind, kinds[i]);
        assert_int_equal(m2.n_params, m.n_params);
        assert_memory_equal(m2.params, m.params, sizeof(float) * m.n_params);
        bd_model_free(&m);
        bd_model_free(&m2);
    }
    /* a draft vocabulary travels with the checkpoint: its ids, and the hash that names them */
    cJSON *j = arch(", \"draft_vocab\": 20");
    bd_config c;
    assert_int_equal(bd_config_init(&c, &tt->t.m, "dspark-markov", j), 0);
    cJSON_Delete(j);
    int ids[20];
    for (int i = 0; i < 20; i++) ids[i] = 2 * i + 1;
    bd_model m, m2;
    assert_int_equal(bd_model_init_vocab(&m, &c, &tt->t.m, 4, 0, ids), 0);
    assert_int_equal(m.Vd, 20);
    const char *dir = tmp_path("ckpt-vocab");
    assert_int_equal(bd_save(&m, dir), 0);
    assert_int_equal(bd_load(&m2, dir, &tt->t.m), 0);
    assert_int_equal(m2.Vd, 20);
    assert_memory_equal(m2.sv.vid, ids, sizeof ids);
    assert_int_equal(m2.sv.vmap[5], 2);
    assert_int_equal(m2.sv.vmap[4], -1);
    assert_memory_equal(m2.Eh + 3 * c.dim, m.E + 7 * c.dim, sizeof(float) * c.dim);
    assert_string_equal(m2.cfg.contract.vocab_hash, m.cfg.contract.vocab_hash);
    bd_model_free(&m2);
    ids[0] = ids[1]; /* repeated ids are refused */
    assert_int_equal(bd_model_init_vocab(&m2, &c, &tt->t.m, 4, 0, ids), -1);
    assert_non_null(strstr(ds_errmsg(), "repeated"));
    bd_model_free(&m);
    tiny_close(tt);
}

/* Every registered trainable family, made the way `train` makes it (configure, init): its named
 * tensors tile the flat parameters (in order, no gap, no overlap: the optimizer's decay mask and the
 * checkpoint both read the parameters through them), and a checkpoint written from parameters set at
 * random, every one of them, reads back bit for bit. A family that initialises and saves through
 * the same wrong offsets round-trips its own layout; this does not. */
/* a checkpoint that served once, then loses a file or half of it: every way in refuses it with the file's
 * name (training's resume and serving), never serving what the family's init left in place */
static void bad_checkpoint(tiny_target *tt, const char *name, trainable *tr, const char *dir) {
    char st[700], cj[700], keep[700];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    snprintf(cj, sizeof cj, "%s/config.json", dir);
    snprintf(keep, sizeof keep, "%s/kept", dir);
    drafter d;
    serve_checkpoint(&d, &tt->t, name, dir, ""); /* it serves as written */
    drafter_close(&d);
    const char *files[2] = {st, cj};
    for (int f = 0; f < 2; f++)
        for (int cut = 0; cut < 2; cut++) { /* the file gone, or half of it */
            assert_int_equal(rename(files[f], keep), 0);
            if (cut) {
                size_t n;
                char *buf;
                assert_int_equal(ds_read_file(keep, &buf, &n), 0);
                write_file(files[f], buf, n / 2);
                free(buf);
            }
            char cfg[900];
            snprintf(cfg, sizeof cfg, "{\"checkpoint\": \"%s\"}", dir);
            cJSON *c = cJSON_Parse(cfg);
            int rc = drafter_open(&d, name, c, &tt->t);
            cJSON_Delete(c);
            if (rc == 0) fail_msg("%s: served a checkpoint whose %s is %s", name, files[f], cut ? "cut in half" : "missing");
            const char *base = f ? "config.json" : "model.safetensors";
            if (!strstr(ds_errmsg(), base)) fail_msg("%s, %s %s: the error does not name it: %s", name, base, cut ? "cut" : "gone", ds_errmsg());
            if (f == 0) { /* resuming training reads the tensors */
                if (tr->read_params(tr, dir) == 0) fail_msg("%s: resumed from a checkpoint whose %s is %s", name, base, cut ? "cut" : "gone");
                if (!strstr(ds_errmsg(), base)) fail_msg("%s, resume: the error does not name %s: %s", name, base, ds_errmsg());
            }
            remove(files[f]);
            assert_int_equal(rename(keep, files[f]), 0);
        }
}

/* a trainable family opened through the registry on its default architecture (seed 3, full vocabulary):
 * its state (tf->release and free it) and its trainable in tr */
static void *family_open(const drafter_ops *ops, tiny_target *tt, const train_cache *d, trainable *tr) {
    const train_family *tf = ops->train;
    void *fam = calloc(1, tf->state_size);
    cJSON *a = cJSON_CreateObject();
    int taps[8], n_tap = 0;
    if (tf->configure(fam, ops->name, a, &tt->t, taps, &n_tap)) fail_msg("%s: %s", ops->name, ds_errmsg());
    cJSON_Delete(a);
    char describe[256];
    if (tf->init(fam, &tt->t, d, 3, 1, NULL, tr, describe, sizeof describe)) fail_msg("%s: %s", ops->name, ds_errmsg());
    return fam;
}

static void test_layout_every_family(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    int seen = 0;
    for (int k = 0; drafter_nth(k); k++) {
        const drafter_ops *ops = drafter_nth(k);
        if (!ops->train) continue;
        const train_family *tf = ops->train;
        trainable tr;
        void *fam = family_open(ops, tt, NULL, &tr);
        assert_true(tr.n_t > 0 && tr.n_params > 0);
        size_t end = 0;
        for (int i = 0; i < tr.n_t; i++) {
            if (tr.t[i].offset != end) /* an empty one (MTP's fusion when nothing is fused) still in place */
                fail_msg("%s: tensor %d at %zu (%zu values), the one before ends at %zu", ops->name, i, tr.t[i].offset,
                         tr.t[i].numel, end);
            end += tr.t[i].numel;
        }
        if (end != tr.n_params) fail_msg("%s: the tensors cover %zu of %zu parameters", ops->name, end, tr.n_params);
        rng_t r;
        rng_seed(&r, 40 + (uint64_t)k);
        float *want = malloc(sizeof(float) * tr.n_params);
        for (size_t i = 0; i < tr.n_params; i++) tr.params[i] = want[i] = (float)rng_uniform(&r) - 0.5f;
        const char *dir = tmp_path("layout-family");
        if (tr.save(&tr, dir)) fail_msg("%s: %s", ops->name, ds_errmsg());
        memset(tr.params, 0, sizeof(float) * tr.n_params);
        if (tr.read_params(&tr, dir)) fail_msg("%s: %s", ops->name, ds_errmsg());
        for (size_t i = 0; i < tr.n_params; i++)
            if (tr.params[i] != want[i]) fail_msg("%s: parameter %zu read back %g, saved %g", ops->name, i, tr.params[i], want[i]);
        printf("  %s: %d tensors tile %zu parameters; a checkpoint of random values reads back whole\n", ops->name, tr.n_t,
               tr.n_params);
        free(want);
        bad_checkpoint(tt, ops->name, &tr, dir);
        rm_dir(dir);
        tf->release(fam);
        free(fam);
        seen++;
    }
    assert_true(seen >= 6); /* vanilla, dflash, dspark-markov, dspark-rnn, medusa, mtp, eagle3 */
    tiny_close(tt);
}

/* a fresh cache folder named by tag and its first shard's path */
static void fresh_shard(const char *tag, char dir[512], char shard[600]) {
    snprintf(dir, 512, "%s", tmp_path(tag));
    rm_dir(dir);
    snprintf(shard, 600, "%s/shard-0000", dir);
}

/* The loop divides a batch's summed gradient by the sequences' seq_weight: for the loss to be the mean over
 * supervised positions, each family's seq_weight must be the weight its step adds for the same anchors
 * (st.weight). Every trainable family, on a cache tapping every layer, three sequences. */
static void test_seq_weight_every_family(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char dir[512], shard[600];
    fresh_shard("weight-cache", dir, shard);
    traindata_layout lay = {.n_tap = 3, .taps = {0, 1, 2}, .top_k = 8, .has_final = 1};
    rng_t r;
    rng_seed(&r, 13);
    for (int i = 0; i < 3; i++) {
        int n = 14 + 5 * i, toks[40];
        for (int k = 0; k < n; k++) toks[k] = (int)(rng_u64(&r) % 46);
        if (traindata_append(&tt->t, shard, toks, n, 4, i, &lay)) fail_msg("%s", ds_errmsg());
    }
    train_cache d;
    if (traindata_open(&d, dir, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    int seen = 0;
    for (int k = 0; drafter_nth(k); k++) {
        const drafter_ops *ops = drafter_nth(k);
        if (!ops->train) continue;
        const train_family *tf = ops->train;
        trainable tr;
        void *fam = family_open(ops, tt, &d, &tr);
        train_seq_buf b = {0};
        b.n_sel = tr.n_tap ? tr.n_tap : -1;
        if (tr.n_tap && traindata_select_taps(&d, tr.taps, tr.n_tap, b.sel)) fail_msg("%s: %s", ops->name, ds_errmsg());
        for (int i = 0; i < d.n_seq; i++) {
            rng_t ar;
            rng_seed(&ar, 100 + (uint64_t)i);
            if (train_load_seq(&d, i, tr.positions, 4, 0, &ar, &b)) fail_msg("%s: %s", ops->name, ds_errmsg());
            assert_true(b.s.A > 0);
            train_stats st;
            memset(&st, 0, sizeof st);
            if (tr.step(&tr, &b.s, NULL, 1, &st)) fail_msg("%s: %s", ops->name, ds_errmsg());
            double w = tr.seq_weight(&tr, b.s.A, b.s.n_valid);
            if (!(w > 0) || fabs(st.weight - w) > 1e-9 * w)
                fail_msg("%s, sequence %d (%d anchors): seq_weight %.12g, the step's weight %.12g", ops->name, i, b.s.A, w,
                         st.weight);
        }
        train_seq_buf_free(&b);
        tf->release(fam);
        free(fam);
        seen++;
    }
    assert_true(seen >= 6);
    traindata_close(&d);
    rm_dir(dir);
    tiny_close(tt);
}

/* the fingerprint (it tags the weights) of `name` opened on the gate's untrained configuration with key
 * set to value (value < 0: the key left out); 0 when the family does not know the key */
static int untrained_fp(tiny_target *tt, const drafter_ops *ops, const char *key, double value, char *fp, size_t n) {
    cJSON *j = cJSON_Parse(ops->gate_config);
    assert_non_null(j);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value >= 0) cJSON_AddNumberToObject(j, key, value);
    if (!strcmp(ops->name, "vanilla")) cJSON_AddFalseToObject(j, "init_layers"); /* else the target's layers */
    drafter d;
    int rc = drafter_open(&d, ops->name, j, &tt->t);
    cJSON_Delete(j);
    if (rc) {
        char unknown[80];
        snprintf(unknown, sizeof unknown, "unknown key '%s'", key); /* not a range that refuses the default */
        if (!strstr(ds_errmsg(), unknown)) fail_msg("%s with \"%s\": %s", ops->name, key, ds_errmsg());
        return 0;
    }
    snprintf(fp, n, "%s", d.fingerprint);
    drafter_close(&d);
    return 1;
}

/* Every trainable family's untrained drafter (the gate's configuration, its other keys as they are)
 * takes the documented defaults of the keys it reads: "seed" 1 (seed 2 other weights), "init_std" 0
 * and "init_noise" 0: left out, the same weights as given explicitly. */
static void test_untrained_defaults(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const char *keys[3] = {"seed", "init_std", "init_noise"};
    const double defaults[3] = {1, 0, 0};
    int seen = 0, read = 0;
    for (int k = 0; drafter_nth(k); k++) {
        const drafter_ops *ops = drafter_nth(k);
        if (!ops->train) continue;
        for (int i = 0; i < 3; i++) {
            char fp[3][sizeof ((drafter *)0)->fingerprint];
            if (!untrained_fp(tt, ops, keys[i], defaults[i], fp[1], sizeof fp[1])) continue; /* not its key */
            assert_int_equal(untrained_fp(tt, ops, keys[i], -1, fp[0], sizeof fp[0]), 1);
            if (strcmp(fp[0], fp[1])) fail_msg("%s: no \"%s\" gave %s, %g gave %s", ops->name, keys[i], fp[0], defaults[i], fp[1]);
            if (i == 0) {
                assert_int_equal(untrained_fp(tt, ops, "seed", 2, fp[2], sizeof fp[2]), 1);
                if (!strcmp(fp[1], fp[2])) fail_msg("%s: seeds 1 and 2 gave the same weights (%s)", ops->name, fp[1]);
            }
            read++;
        }
        seen++;
    }
    assert_true(seen >= 6 && read >= seen + 3); /* every family's seed; Medusa's init_std, the block drafters' both */
    tiny_close(tt);
}

/* "vocab_ids" (an untrained drafter's draft vocabulary, the gate's case) in every family that reads it:
 * 30 ids open a drafter whose drafts' laws live on them alone; a value that is not a list of distinct ids inside the vocabulary is
 * refused by name, never read as no draft vocabulary at all */
static void test_vocab_ids(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char many[2400] = "[0";
    for (int i = 1; i < 257; i++) snprintf(many + strlen(many), sizeof many - strlen(many), ", %d", i % 48);
    strcat(many, "]");
    const char *bad[] = {"\"x\"", "[]", "[1.5]", "[-1]", "[48]", "[3, 3]", "[1, \"a\"]", "{\"a\": 1}", many};
    int seen = 0;
    for (int k = 0; drafter_nth(k); k++) {
        const drafter_ops *ops = drafter_nth(k);
        if (!ops->train) continue;
        int opened = 0;
        for (int b = -1; b < (int)(sizeof bad / sizeof *bad); b++) {
            cJSON *j = cJSON_Parse(ops->gate_config);
            assert_non_null(j);
            cJSON_DeleteItemFromObjectCaseSensitive(j, "vocab_ids");
            cJSON *v = b < 0 ? cJSON_CreateArray() : cJSON_Parse(bad[b]);
            assert_non_null(v);
            for (int i = 0; b < 0 && i < 30; i++) cJSON_AddItemToArray(v, cJSON_CreateNumber(i + 10));
            cJSON_AddItemToObject(j, "vocab_ids", v);
            drafter d;
            int rc = drafter_open(&d, ops->name, j, &tt->t);
            cJSON_Delete(j);
            if (b < 0) { /* the good list: the family's key, or not its key at all */
                if (rc && strstr(ds_errmsg(), "unknown key")) break;
                if (rc) fail_msg("%s: 30 ids refused: %s", ops->name, ds_errmsg());
                /* its drafts' laws live on those ids (10..39) and nowhere else */
                int prompt[6] = {12, 5, 33, 41, 20, 7}, V = tt->t.m.cfg.vocab_size;
                float *hid = target_states(&tt->t, prompt, 6, d.n_capture, d.capture_layers);
                request rq;
                draft_block blk;
                assert_int_equal(request_init(&rq, &tt->t, 0, prompt, 5, 16, 3), 0);
                assert_int_equal(draft_block_init(&blk, 2, V, 1), 0);
                assert_int_equal(ivec_push(&rq.toks, prompt[5]), 0);
                if (d.ops->begin(&d, &rq, hid) || d.ops->propose(&d, &rq, 2, &(sampling_params){1.0f, 0, 1.0f}, &blk))
                    fail_msg("%s: %s", ops->name, ds_errmsg());
                assert_true(blk.n >= 1);
                for (int i = 0; i < blk.n; i++) {
                    double in = 0;
                    for (int v = 0; v < V; v++) {
                        if (v < 10 || v >= 40) {
                            if (blk.q[(size_t)i * V + v] != 0) fail_msg("%s: draft %d has q %g at id %d, outside vocab_ids", ops->name, i, blk.q[(size_t)i * V + v], v);
                        } else in += blk.q[(size_t)i * V + v];
                    }
                    if (fabs(in - 1) > 1e-5 || blk.tok[i] < 10 || blk.tok[i] >= 40) fail_msg("%s: draft %d (%d), mass %g on vocab_ids", ops->name, i, blk.tok[i], in);
                }
                d.ops->end(&d, &rq);
                request_free(&rq, &tt->t);
                draft_block_free(&blk);
                free(hid);
                drafter_close(&d);
                opened = 1;
                continue;
            }
            if (!rc) fail_msg("%s: \"vocab_ids\": %.40s opened", ops->name, bad[b]);
            if (!strstr(ds_errmsg(), "vocab")) fail_msg("%s: \"vocab_ids\": %.40s: %s", ops->name, bad[b], ds_errmsg());
        }
        seen += opened;
        if (opened) printf("  %s: 30 vocab_ids: its drafts' q on them alone; %d malformed lists refused by name\n", ops->name, (int)(sizeof bad / sizeof *bad));
    }
    assert_true(seen >= 6); /* vanilla, dflash, dspark-markov, dspark-rnn, medusa, mtp, eagle3 */
    tiny_close(tt);
}

/* bd_model_init's draw: norms 1; the Markov / RNN head's W2 and br and the confidence head zero (no
 * correction at the start, a confidence of 1/2), or N(0, noise^2) when given init noise; every other matrix
 * N(0, 0.02^2), the residual outputs (wo, w_down) N(0, 0.02^2 / (2 layers)); each tensor's own moments */
static void test_init_draw(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const char *kinds[2] = {"dspark-rnn", "dspark-markov"};
    for (int ki = 0; ki < 2; ki++) {
        cJSON *j = arch(", \"confidence\": 1");
        bd_config c;
        if (bd_config_init(&c, &tt->t.m, kinds[ki], j)) fail_msg("%s", ds_errmsg());
        cJSON_Delete(j);
        float noise = ki ? 0.5f : 0;
        bd_model m;
        assert_int_equal(bd_model_init(&m, &c, &tt->t.m, 7, noise), 0);
        int zeros = 0;
        for (int i = 0; i < m.n_t; i++) {
            const bd_tensor *t = &m.t[i];
            const float *p = m.params + t->offset;
            int is_zero = !strcmp(t->name, "head.W2") || !strcmp(t->name, "head.br") || !strncmp(t->name, "conf.", 5);
            double want = strstr(t->name, "norm") ? -1 : is_zero ? noise
                          : strstr(t->name, "wo.") || strstr(t->name, "w_down.") ? 0.02 / sqrt(2.0 * c.n_layers) : 0.02;
            zeros += is_zero;
            if (want <= 0) { /* 1 for a norm, 0 for the heads that start as nothing */
                for (size_t k = 0; k < t->numel; k++)
                    if (p[k] != (want < 0 ? 1.0f : 0.0f)) fail_msg("%s: %s[%zu] = %g", kinds[ki], t->name, k, p[k]);
                continue;
            }
            if (t->numel < 16) { /* too few for moments: drawn, not left at a constant */
                for (size_t k = 0; k < t->numel; k++)
                    if (p[k] == 0 || p[k] == 1) fail_msg("%s: %s[%zu] = %g, not drawn", kinds[ki], t->name, k, p[k]);
                continue;
            }
            double s1 = 0, s2 = 0, n = (double)t->numel;
            for (size_t k = 0; k < t->numel; k++) s1 += p[k], s2 += (double)p[k] * p[k];
            double mean = s1 / n, sd = sqrt(s2 / n - mean * mean), tol = n >= 256 ? 0.15 : 0.5;
            if (fabs(sd - want) > tol * want) fail_msg("%s: %s (%zu values) sd %g, want %g", kinds[ki], t->name, t->numel, sd, want);
        }
        assert_true(zeros >= 3); /* W2, conf.w, conf.b (and br) */
        bd_model_free(&m);
    }
    tiny_close(tt);
}

/* init_layers: each draft layer starts as the named target layer (norms and dequantized matrices),
 * the final norm as the target's, everything else as the random init; the checkpoint records it;
 * bad lists are refused by name */
static void test_init_from_target_layers(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const model *t = &tt->t.m;
    bd_config c, c0;
    cJSON *j = arch(", \"init_layers\": [1, 0]");
    assert_int_equal(bd_config_init(&c, t, "dspark-markov", j), 0);
    cJSON_Delete(j);
    j = arch("");
    assert_int_equal(bd_config_init(&c0, t, "dspark-markov", j), 0);
    cJSON_Delete(j);
    bd_model m, m0, m2;
    assert_int_equal(bd_model_init(&m, &c, t, 4, 0), 0);
    assert_int_equal(bd_model_init(&m0, &c0, t, 4, 0), 0);
    int D = c.dim, QD = c.n_heads * c.head_dim;
    float *row = malloc(sizeof(float) * (size_t)(c.hidden_dim > QD ? c.hidden_dim : QD));
    for (int l = 0; l < 2; l++) {
        const layer_weights *s = &t->layers[1 - l];
        assert_memory_equal(m.layer[l].attn_norm, s->attn_norm, sizeof(float) * D);
        assert_memory_equal(m.layer[l].ffn_norm, s->ffn_norm, sizeof(float) * D);
        for (int r = 0; r < QD; r += 7) {
            qmat_row_f32(&s->wq, r, row);
            assert_memory_equal(m.layer[l].wq + (size_t)r * D, row, sizeof(float) * D);
        }
        qmat_row_f32(&s->w_down, D - 1, row);
        assert_memory_equal(m.layer[l].w_down + (size_t)(D - 1) * c.hidden_dim, row, sizeof(float) * c.hidden_dim);
        assert_true(memcmp(m.layer[l].wk, m0.layer[l].wk, sizeof(float) * D) != 0);
    }
    assert_memory_equal(m.final_norm, t->out_norm, sizeof(float) * D);
    assert_memory_equal(m.fc, m0.fc, sizeof(float) * (size_t)c.n_tap * D * D); /* the rest: the random init */
    assert_memory_equal(m.W2, m0.W2, sizeof(float) * (size_t)c.vocab * c.rank);
    const char *dir = tmp_path("ckpt-init");
    assert_int_equal(bd_save(&m, dir), 0);
    assert_int_equal(bd_load(&m2, dir, t), 0);
    assert_int_equal(m2.cfg.n_init, 2);
    assert_int_equal(m2.cfg.init_layer[0], 1);
    assert_memory_equal(m2.params, m.params, sizeof(float) * m.n_params);
    bd_model_free(&m), bd_model_free(&m0), bd_model_free(&m2);
    free(row);
    const char *bad[][2] = {{", \"init_layers\": [0]", "names 1 target layers but the drafter has 2"},
                            {", \"init_layers\": [0, 9]", "layer 9 does not exist"},
                            {", \"init_layers\": [0, -1]", "'init_layers'[1] must be a layer id"},
                            {", \"init_layers\": 3", "'init_layers' must be an array"},
                            /* a drafter object's kind is its family's or absent, never read and dropped */
                            {", \"kind\": \"dspark-markov\"", "of kind 'dspark-markov', not dflash"},
                            {", \"kind\": 3", "'kind' must be a string"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = arch(bad[i][0]);
        assert_int_equal(bd_config_init(&c, t, "dflash", j), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("%s: got '%s'", bad[i][0], ds_errmsg());
        cJSON_Delete(j);
    }
    tiny_close(tt);
}

static void test_checkpoint_roundtrip(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    cJSON *j = arch("");
    bd_config c;
    assert_int_equal(bd_config_init(&c, &tt->t.m, "dspark-rnn", j), 0);
    cJSON_Delete(j);
    bd_model m, m2;
    assert_int_equal(bd_model_init(&m, &c, &tt->t.m, 4, 0), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp_path("ckpt"));
    assert_int_equal(bd_save(&m, dir), 0);
    assert_int_equal(bd_load(&m2, dir, &tt->t.m), 0);
    assert_int_equal(m2.n_params, m.n_params);
    assert_memory_equal(m2.params, m.params, sizeof(float) * m.n_params);
    assert_string_equal(m2.cfg.kind, "dspark-rnn");
    assert_int_equal(m2.cfg.head, HEAD_RNN);
    assert_float_equal(m2.cfg.lambda, 4, 0); /* the paper's default, lambda = gamma */
    /* the checkpoint is plain safetensors + JSON: readable by other tools */
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_file f;
    assert_int_equal(st_open(&f, p), 0);
    assert_non_null(st_find(&f, "head.W1"));
    assert_non_null(st_find(&f, "layers.1.w_down.weight"));
    st_close(&f);
    /* a checkpoint for another target is refused */
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *txt;
    size_t n;
    assert_int_equal(ds_read_file(p, &txt, &n), 0);
    char *orig = strdup(txt);
    char *fp = strstr(txt, tt->t.m.fingerprint);
    assert_non_null(fp);
    fp[0] = fp[0] == '0' ? '1' : '0';
    write_file(p, txt, n);
    free(txt);
    bd_model m3;
    assert_int_equal(bd_load(&m3, dir, &tt->t.m), -1);
    assert_non_null(strstr(ds_errmsg(), "trained against target"));
    /* a checkpoint's geometry is held to the target as a drafter object's is (a vocab of 3 read the
     * embedding out of bounds before; taps and the mask token index the target too) */
    const char *geo[][3] = {{"vocab", "3", "must equal the target's"},
                            {"taps", "[0, 9]", "layer 9 does not exist"},
                            {"mask_token", "60", "'mask_token' 60 is not a token id"}};
    for (size_t i = 0; i < sizeof geo / sizeof *geo; i++) {
        cJSON *cj = cJSON_Parse(orig);
        assert_non_null(cj);
        cJSON_ReplaceItemInObject(cj, geo[i][0], cJSON_Parse(geo[i][1]));
        char *out = cJSON_Print(cj);
        write_file(p, out, strlen(out));
        free(out), cJSON_Delete(cj);
        assert_int_equal(bd_load(&m3, dir, &tt->t.m), -1);
        if (!strstr(ds_errmsg(), geo[i][2])) fail_msg("%s %s: got '%s'", geo[i][0], geo[i][1], ds_errmsg());
    }
    /* one layer over a file of two: layers.1.* went unread, a shallower drafter served silently */
    {
        cJSON *cj = cJSON_Parse(orig);
        assert_non_null(cj);
        assert_true(cJSON_GetObjectItem(cj, "layers")->valueint >= 2);
        cJSON_ReplaceItemInObject(cj, "layers", cJSON_CreateNumber(1));
        char *out = cJSON_Print(cj);
        write_file(p, out, strlen(out));
        free(out), cJSON_Delete(cj);
        assert_int_equal(bd_load(&m3, dir, &tt->t.m), -1);
        if (!strstr(ds_errmsg(), "tensor 'layers.1.") || !strstr(ds_errmsg(), "is not read by this model's configuration"))
            fail_msg("1 layer of 2: %s", ds_errmsg());
    }
    free(orig);
    bd_model_free(&m);
    bd_model_free(&m2);
    rm_dir(dir);
    tiny_close(tt);
}

/* The draft vocabulary a trained drafter's "draft_vocab" chooses from its cache (FR-Spec), on SmolLM2's
 * tokenizer: every special, end and single-byte token, then the most frequent RESPONSE tokens (ties to
 * the smaller id; a prompt-only token never counts), and coverage figures checked against sums done
 * here over the cache's tokens and top-K rows. */
static int multi_byte(const tokenizer *tk, int v) {
    char buf[64];
    return tokenizer_piece(tk, v, 0, buf, sizeof buf) > 1;
}

static void test_draft_vocab_choose(void **state) {
    (void)state;
    target t;
    if (target_open(&t, real_model_path(), &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    const tokenizer *tk = &t.tk;
    const int V = t.m.cfg.vocab_size;
    /* four ordinary (multi-byte) ids from the middle of the vocabulary: a > b > c by id, e the prompt's */
    int ord[5], n_ord = 0;
    for (int v = 3000; v < V && n_ord < 5; v += 97)
        if (multi_byte(tk, v) && (!tk->type || tk->type[v] == TOK_NORMAL) && !tokenizer_is_eog(tk, v)) ord[n_ord++] = v;
    assert_int_equal(n_ord, 5);
    const int a = ord[3], b = ord[1], c = ord[2], dd = ord[0], e = ord[4];
    /* responses: a x5, b x3, c x3, dd x1; prompts: e x10 (never a response token) */
    int s1[14] = {e, e, e, e, e, a, b, a, c, a, b, c, dd, a}, s2[11] = {e, e, e, e, e, a, b, c, 0, 0, 0};
    int n2 = 8;
    char dir[600], shard[640], cmd[700];
    snprintf(dir, sizeof dir, "%s", tmp_path("vocab-cache"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(shard, sizeof shard, "%s/shard-0000", dir);
    traindata_layout lay = {.n_tap = 1, .taps = {0}, .top_k = 4};
    if (traindata_append(&t, shard, s1, 14, 5, 0, &lay) || traindata_append(&t, shard, s2, n2, 5, 1, &lay))
        fail_msg("%s", ds_errmsg());
    train_cache d;
    if (traindata_open(&d, dir, &t, 0)) fail_msg("%s", ds_errmsg());
    draft_vocab_report rep;
    int *ids = malloc(sizeof(int) * (size_t)V);
    assert_int_equal(draft_vocab_choose(&d, tk, V, ids, &rep), 0); /* everything: learn the pinned count */
    const int pin = rep.pinned;
    assert_true(pin > 0 && pin < V);
    for (int extra = 1; extra <= 3; extra++) {
        const int Vd = pin + extra;
        assert_int_equal(draft_vocab_choose(&d, tk, Vd, ids, &rep), 0);
        unsigned char *in = calloc((size_t)V, 1);
        for (int j = 0; j < Vd; j++) {
            if (j) assert_true(ids[j] > ids[j - 1]);
            in[ids[j]] = 1;
        }
        int n_pinned_in = 0;
        for (int v = 0; v < V; v++) {
            int ty = tk->type ? tk->type[v] : TOK_NORMAL;
            int must = ty == TOK_CONTROL || ty == TOK_USER || ty == TOK_BYTE || tokenizer_is_eog(tk, v) || v == tk->eos ||
                       v == tk->bos || !multi_byte(tk, v);
            if (must) assert_true(in[v]), n_pinned_in++;
        }
        assert_int_equal(n_pinned_in, pin);
        /* the ordinary ones, by response frequency: a (5 in all), then b and c tie at 3 (b's id is the
         * smaller), then dd; e (prompts only) never */
        assert_true(in[a]);
        assert_int_equal(in[b], extra >= 2);
        assert_int_equal(in[c], extra >= 3);
        assert_false(in[dd]);
        assert_false(in[e]);
        /* coverage, summed here: response tokens inside / all response tokens; the target's top-4 mass
         * inside / all of it, averaged over response positions */
        long cov = 0, tot = 0, rows = 0;
        double mass = 0;
        for (int i = 0; i < d.n_seq; i++) {
            const int *tok = traindata_tokens(&d, i);
            const int32_t *tid = traindata_topk_id(&d, i);
            const float *tlp = traindata_topk_lp(&d, i);
            for (int p = d.n_prompt[i]; p < d.len[i]; p++) cov += in[tok[p]], tot++;
            for (int r = 0; r < d.len[i] - d.n_prompt[i]; r++, rows++) {
                double all = 0, inside = 0;
                for (int k = 0; k < d.top_k; k++) {
                    double pr = exp((double)tlp[(size_t)r * d.top_k + k]);
                    all += pr, inside += in[tid[(size_t)r * d.top_k + k]] ? pr : 0;
                }
                mass += inside / all;
            }
        }
        assert_int_equal(tot, 9 + 3);
        assert_true(fabs(rep.token_coverage - (double)cov / tot) < 1e-12);
        assert_true(fabs(rep.mass_coverage - mass / rows) < 1e-9);
        if (extra == 3) assert_int_equal(cov, 11); /* all but dd */
        free(in);
    }
    assert_int_equal(draft_vocab_choose(&d, tk, pin - 1, ids, &rep), -1);
    assert_non_null(strstr(ds_errmsg(), "draft_vocab"));
    /* what a trainable family starts from: the same choice, none for 0, the whole vocabulary or full_vocab,
     * and a size below the pinned ones refused (never trained over the whole vocabulary instead) */
    int *got = NULL;
    assert_int_equal(train_family_vocab(&d, &t, pin + 2, 0, &got), 0);
    assert_non_null(got);
    assert_int_equal(draft_vocab_choose(&d, tk, pin + 2, ids, &rep), 0);
    assert_memory_equal(got, ids, sizeof(int) * (size_t)(pin + 2));
    free(got);
    int none[3][2] = {{0, 0}, {V, 0}, {pin + 2, 1}};
    for (int i = 0; i < 3; i++) {
        got = (int *)1;
        assert_int_equal(train_family_vocab(&d, &t, none[i][0], none[i][1], &got), 0);
        assert_null(got);
    }
    assert_int_equal(train_family_vocab(&d, &t, pin - 1, 0, &got), -1);
    assert_null(got);
    assert_non_null(strstr(ds_errmsg(), "draft_vocab"));
    printf("  draft vocabulary on SmolLM2's tokenizer: %d pinned (special, end, single bytes), then response tokens by "
           "frequency; coverage sums agree\n", pin);
    free(ids);
    traindata_close(&d);
    assert_int_equal(system(cmd), 0);
    target_close(&t);
}

/* a cache of 12 random sequences through the tiny target */
static void build_cache(tiny_target *tt, const char *dir) {
    rng_t r;
    rng_seed(&r, 77);
    traindata_layout lay = {.n_tap = 2, .taps = {0, 1}, .top_k = 8, .has_final = 1};
    char shard[600];
    snprintf(shard, sizeof shard, "%s/shard-0000", dir);
    for (int i = 0; i < 12; i++) {
        int n = 20 + (int)(rng_u64(&r) % 20), toks[64];
        for (int k = 0; k < n; k++) toks[k] = (int)(rng_u64(&r) % 46);
        if (traindata_append(&tt->t, shard, toks, n, 5, i, &lay)) fail_msg("%s", ds_errmsg());
    }
}

/* a shard's layout.json edited by hand or cut short: refused by name; a format of 2.5 was read as 2, a tap
 * of "7" or 1.5 as 0 and 1, a width of 64.5 as 64 (the cache then read with the wrong stride) */
static void test_cache_layout_refused(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char cache[512], lay[600], cmd[1200];
    snprintf(cache, sizeof cache, "%s", tmp_path("layout-cache"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    assert_int_equal(system(cmd), 0);
    build_cache(tt, cache);
    snprintf(lay, sizeof lay, "%s/shard-0000/layout.json", cache);
    char *good;
    size_t n;
    assert_int_equal(ds_read_file(lay, &good, &n), 0);
    cJSON *g = cJSON_Parse(good);
    assert_non_null(g);
    train_cache d;
    if (traindata_open(&d, cache, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    traindata_close(&d);
    const char *bad[][2] = {{"format", "2.5"}, {"format", "3"}, {"dim", "64.5"}, {"dim", "0"}, {"dim", "1e30"},
                            {"top_k", "8.5"}, {"top_k", "\"8\""}, {"taps", "[0, \"1\"]"}, {"taps", "[0, 1.5]"},
                            {"taps", "[-1, 1]"}, {"taps", "[]"}, {"final", "1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Duplicate(g, 1), *v = cJSON_Parse(bad[i][1]);
        assert_non_null(v);
        cJSON_ReplaceItemInObjectCaseSensitive(j, bad[i][0], v);
        char *txt = cJSON_Print(j);
        assert_int_equal(ds_write_file_atomic(lay, txt, strlen(txt)), 0);
        free(txt);
        cJSON_Delete(j);
        if (traindata_open(&d, cache, &tt->t, 0) == 0) fail_msg("layout %s = %s was accepted", bad[i][0], bad[i][1]);
        if (!strstr(ds_errmsg(), "layout.json: malformed")) fail_msg("%s = %s: %s", bad[i][0], bad[i][1], ds_errmsg());
    }
    cJSON_Delete(g);
    /* the original again: it opens (nothing else was touched) */
    assert_int_equal(ds_write_file_atomic(lay, good, n), 0);
    free(good);
    if (traindata_open(&d, cache, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    traindata_close(&d);
    /* appending to the shard under another layout, or a second shard of another layout than the first:
     * refused by name, each field alone (another target, taps, top_k, final states) */
    const traindata_layout other[] = {{.n_tap = 2, .taps = {0, 2}, .top_k = 8, .has_final = 1},
                                      {.n_tap = 1, .taps = {0}, .top_k = 8, .has_final = 1},
                                      {.n_tap = 2, .taps = {0, 1}, .top_k = 4, .has_final = 1},
                                      {.n_tap = 2, .taps = {0, 1}, .top_k = 8, .has_final = 0}};
    int toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    char shard0[640], shard1[640];
    snprintf(shard0, sizeof shard0, "%s/shard-0000", cache);
    snprintf(shard1, sizeof shard1, "%s/shard-0001", cache);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        assert_int_equal(traindata_append(&tt->t, shard0, toks, 12, 5, 99, &other[i]), -1);
        if (!strstr(ds_errmsg(), "built for another target")) fail_msg("layout %zu: %s", i, ds_errmsg());
        if (traindata_append(&tt->t, shard1, toks, 12, 5, 99, &other[i])) fail_msg("%s", ds_errmsg());
        if (traindata_open(&d, cache, &tt->t, 0) == 0) fail_msg("a second shard of layout %zu opened", i);
        if (!strstr(ds_errmsg(), "layout differs from shard-0000's")) fail_msg("layout %zu: %s", i, ds_errmsg());
        rm_dir(shard1);
    }
    /* another target's fingerprint in the first shard: refused as another target's */
    {
        char *t0;
        size_t tn;
        assert_int_equal(ds_read_file(lay, &t0, &tn), 0);
        cJSON *j = cJSON_Parse(t0);
        cJSON_ReplaceItemInObjectCaseSensitive(j, "target_fingerprint", cJSON_CreateString("0123456789abcdef"));
        char *txt = cJSON_Print(j);
        assert_int_equal(ds_write_file_atomic(lay, txt, strlen(txt)), 0);
        free(txt);
        cJSON_Delete(j);
        assert_int_equal(traindata_open(&d, cache, &tt->t, 0), -1);
        assert_non_null(strstr(ds_errmsg(), "the cache was built with target 0123456789abcdef"));
        traindata_layout same = {.n_tap = 2, .taps = {0, 1}, .top_k = 8, .has_final = 1};
        assert_int_equal(traindata_append(&tt->t, shard0, toks, 12, 5, 99, &same), -1);
        assert_non_null(strstr(ds_errmsg(), "built for another target"));
        assert_int_equal(ds_write_file_atomic(lay, t0, tn), 0);
        free(t0);
    }
    assert_int_equal(system(cmd), 0); /* rm -rf the cache */
    tiny_close(tt);
}

/* two temporary folders named by tag, removed now; cmd removes them again at the end */
static void fresh_dirs(const char *t1, const char *t2, char a[512], char b[512], char cmd[1200]) {
    snprintf(a, 512, "%s", tmp_path(t1));
    snprintf(b, 512, "%s", tmp_path(t2));
    snprintf(cmd, 1200, "rm -rf '%s' '%s'", a, b);
    assert_int_equal(system(cmd), 0);
}

/* the tiny target's four random sequences appended to a shard (the first n_first of them) */
static void append_seqs(tiny_target *tt, const char *dir, int first, int last) {
    rng_t r;
    rng_seed(&r, 91);
    traindata_layout lay = {.n_tap = 2, .taps = {0, 1}, .top_k = 8, .has_final = 1};
    char shard[600];
    snprintf(shard, sizeof shard, "%s/shard-0000", dir);
    for (int i = 0; i < last; i++) {
        int n = 12 + (int)(rng_u64(&r) % 20), toks[40];
        for (int k = 0; k < n; k++) toks[k] = (int)(rng_u64(&r) % 46);
        if (i >= first && traindata_append(&tt->t, shard, toks, n, 4, i, &lay)) fail_msg("%s", ds_errmsg());
    }
}

/* two caches read back sequence by sequence: tokens, top-k ids and log-probs, taps, final states */
static void assert_caches_equal(const train_cache *a, const train_cache *b) {
    assert_int_equal(a->n_seq, b->n_seq);
    assert_int_equal(a->n_tok, b->n_tok);
    assert_int_equal(a->n_resp, b->n_resp);
    for (int i = 0; i < a->n_seq; i++) {
        int n = a->len[i], R = n - a->n_prompt[i];
        assert_int_equal(n, b->len[i]);
        assert_int_equal(a->n_prompt[i], b->n_prompt[i]);
        assert_int_equal(a->source[i], b->source[i]);
        assert_memory_equal(traindata_tokens(a, i), traindata_tokens(b, i), sizeof(int) * (size_t)n);
        assert_memory_equal(traindata_topk_id(a, i), traindata_topk_id(b, i), sizeof(int32_t) * (size_t)R * a->top_k);
        assert_memory_equal(traindata_topk_lp(a, i), traindata_topk_lp(b, i), sizeof(float) * (size_t)R * a->top_k);
        size_t nt = (size_t)n * a->n_tap * a->dim, nf = (size_t)n * a->dim;
        float *ta = malloc(sizeof(float) * nt), *tb = malloc(sizeof(float) * nt);
        float *fa = malloc(sizeof(float) * nf), *fb = malloc(sizeof(float) * nf);
        traindata_seq(a, i, NULL, 0, ta, fa);
        traindata_seq(b, i, NULL, 0, tb, fb);
        assert_memory_equal(ta, tb, sizeof(float) * nt);
        assert_memory_equal(fa, fb, sizeof(float) * nf);
        free(ta), free(tb), free(fa), free(fb);
    }
}

/* A build killed (or out of disk) mid-append leaves part of a sequence in the data files and, on a short
 * write of the index itself, part of its 12-byte record in index.bin. Reading takes the indexed sequences
 * only; the next append trims every file to what the index records - index.bin too: the torn record's
 * bytes kept would put every later record at a wrong offset - and the cache reads back equal to one built
 * without the interruption. */
static void test_cache_torn_append(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char clean[512], torn[512], cmd[1200];
    fresh_dirs("clean-cache", "torn-cache", clean, torn, cmd);
    append_seqs(tt, clean, 0, 3);
    append_seqs(tt, torn, 0, 2);
    train_cache a, b;
    const char *files[] = {"tokens.bin", "taps.bin", "topk_id.bin", "topk_lp.bin", "final.bin", "index.bin"};
    const int junk[] = {7, 100, 12, 9, 33, 5};
    for (int round = 0; round < 2; round++) { /* torn twice: the second append goes over a trimmed shard */
        for (int f = 0; f < 6; f++) {
            char p[700];
            snprintf(p, sizeof p, "%s/shard-0000/%s", torn, files[f]);
            FILE *fp = fopen(p, "ab");
            assert_non_null(fp);
            for (int k = 0; k < junk[f] + round; k++) fputc(0x41 + k, fp);
            assert_int_equal(fclose(fp), 0);
        }
        /* read as it lies: the indexed sequences, the torn tail ignored */
        if (traindata_open(&b, torn, &tt->t, 0)) fail_msg("torn, round %d: %s", round, ds_errmsg());
        assert_int_equal(b.n_seq, 2 + round);
        traindata_close(&b);
        append_seqs(tt, torn, 2 + round, 3 + round);
    }
    append_seqs(tt, clean, 3, 4);
    if (traindata_open(&a, clean, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&b, torn, &tt->t, 0)) fail_msg("torn, then appended: %s", ds_errmsg());
    assert_caches_equal(&a, &b);
    traindata_close(&a);
    traindata_close(&b);
    /* a data file shorter than its index records (damage, not a torn append): refused by name, read or
     * appended to, and left as it was */
    for (int f = 0; f < 5; f++) {
        char p[700];
        snprintf(p, sizeof p, "%s/shard-0000/%s", torn, files[f]);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(truncate(p, st.st_size - 1), 0);
        assert_int_equal(traindata_open(&b, torn, &tt->t, 0), -1);
        if (!strstr(ds_errmsg(), files[f])) fail_msg("%s cut short, read: %s", files[f], ds_errmsg());
        int toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        traindata_layout lay = {.n_tap = 2, .taps = {0, 1}, .top_k = 8, .has_final = 1};
        char shard[600];
        snprintf(shard, sizeof shard, "%s/shard-0000", torn);
        assert_int_equal(traindata_append(&tt->t, shard, toks, 8, 4, 9, &lay), -1);
        if (!strstr(ds_errmsg(), files[f]) || !strstr(ds_errmsg(), "damaged"))
            fail_msg("%s cut short, appended to: %s", files[f], ds_errmsg());
        struct stat st2;
        assert_int_equal(stat(p, &st2), 0);
        assert_int_equal(st2.st_size, st.st_size - 1);
        assert_int_equal(truncate(p, st.st_size), 0); /* zero-filled back: the sizes agree again */
    }
    assert_int_equal(system(cmd), 0);
    tiny_close(tt);
}

/* topk_logprobs (the cache's target side) against sorting every id: the K largest logits, descending, ties
 * to the smaller id, each with its log-probability under the full softmax; rows with many ties (logits on
 * a grid of 5 values), K of 1, K = V, and V < K (the empty slots id 0 with no mass) */
static int by_value_then_id(const void *a, const void *b, void *zv) {
    const float *z = zv;
    int x = *(const int *)a, y = *(const int *)b;
    if (z[x] != z[y]) return z[x] > z[y] ? -1 : 1;
    return x - y;
}
static void test_topk_brute(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 17);
    const int shapes[][2] = {{500, 8}, {500, 64}, {37, 1}, {37, 37}, {5, 8}, {1000, 3}, {64, 63}};
    int checked = 0;
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
        const int V = shapes[sh][0], K = shapes[sh][1];
        float *z = malloc(sizeof(float) * V), *lp = malloc(sizeof(float) * K);
        int *ord = malloc(sizeof(int) * V), *id = malloc(sizeof(int) * K);
        for (int rep = 0; rep < 40; rep++) {
            int grid = rep % 2; /* every other row: 5 distinct values, so ties everywhere */
            for (int v = 0; v < V; v++) z[v] = grid ? (float)(rng_u64(&r) % 5) - 2.0f : (float)(4 * rng_uniform(&r) - 2);
            topk_logprobs(z, V, K, id, lp);
            for (int v = 0; v < V; v++) ord[v] = v;
            qsort_r(ord, (size_t)V, sizeof *ord, by_value_then_id, z);
            double mx = z[ord[0]], se = 0;
            for (int v = 0; v < V; v++) se += exp((double)z[v] - mx);
            for (int k = 0; k < K; k++) {
                if (k >= V) {
                    assert_int_equal(id[k], 0);
                    assert_true(isinf(lp[k]) && lp[k] < 0);
                    continue;
                }
                if (id[k] != ord[k])
                    fail_msg("V %d K %d row %d (%s): rank %d is id %d (%g), sorting gives %d (%g)", V, K, rep,
                             grid ? "ties" : "distinct", k, id[k], z[id[k]], ord[k], z[ord[k]]);
                double want = z[ord[k]] - mx - log(se);
                if (fabs(lp[k] - want) > 1e-5) fail_msg("V %d K %d: rank %d log-prob %g, want %g", V, K, k, lp[k], want);
            }
            checked++;
        }
        free(z), free(lp), free(ord), free(id);
    }
    printf("  topk_logprobs equals a full sort on %d rows (half of them all ties)\n", checked);
}

/* train_load_seq at the short end: a one-token response has no anchor (its only prediction is the anchor
 * token itself), a two-token one exactly one, at the prompt's end with one prediction; max_a caps the
 * anchors, distinct and ascending; the reference path refused on a cache without final states */
static void test_load_seq_short(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char dir[512], shard[600];
    fresh_shard("short-cache", dir, shard);
    traindata_layout lay = {.n_tap = 1, .taps = {0}, .top_k = 4};
    int toks[30];
    for (int k = 0; k < 30; k++) toks[k] = (k * 7 + 3) % 46;
    if (traindata_append(&tt->t, shard, toks, 7, 6, 0, &lay) || traindata_append(&tt->t, shard, toks, 8, 6, 1, &lay) ||
        traindata_append(&tt->t, shard, toks, 30, 6, 2, &lay))
        fail_msg("%s", ds_errmsg());
    train_cache d;
    if (traindata_open(&d, dir, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    train_seq_buf b = {0};
    b.n_sel = -1;
    rng_t r;
    rng_seed(&r, 5);
    for (int i = 0; i < 2; i++) {
        memset(b.anchor, 0x55, sizeof b.anchor);
        assert_int_equal(train_load_seq(&d, i, 3, 40, 0, &r, &b), 0);
        assert_int_equal(b.s.A, i);
    }
    assert_int_equal(b.s.anchor[0], 6);
    assert_int_equal(b.s.n_valid[0], 1);
    for (int rep = 0; rep < 20; rep++) { /* 23 candidates (6..28), 5 drawn */
        assert_int_equal(train_load_seq(&d, 2, 3, 5, 0, &r, &b), 0);
        assert_int_equal(b.s.A, 5);
        for (int a = 0; a < 5; a++) {
            assert_true(b.s.anchor[a] >= 6 && b.s.anchor[a] <= 28);
            if (a) assert_true(b.s.anchor[a] > b.s.anchor[a - 1]);
            assert_int_equal(b.s.n_valid[a], DS_MIN(3, 29 - b.s.anchor[a]));
        }
    }
    assert_int_equal(train_load_seq(&d, 2, 3, 5, 1, &r, &b), -1);
    assert_non_null(strstr(ds_errmsg(), "store_final"));
    train_seq_buf_free(&b);
    traindata_close(&d);
    rm_dir(dir);
    tiny_close(tt);
}

/* traindata_build's lockstep generation on SmolLM2 - prompts of different lengths prefilled together in one
 * varlen forward, then one row per live sequence a step, finished ones dropping out - against teacher-forced
 * capture of the same tokens one sequence at a time: taps, top-k ids and log-probs and final states equal
 * bit for bit (the int8 contract is batch-invariant); at T = 0 each response token is its row's top-1 and
 * no response runs past max_new or an end token; a build stopped after one shard (max_shards), or killed
 * inside one after an indexed sequence, resumes to the cache built straight through. */
static void test_generated_cache(void **state) {
    (void)state;
    if (!need_real_model()) return;
    target t;
    if (target_open(&t, real_model_path(), &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    char a[512], b[512], c[512], shard[600], cmd[1700];
    snprintf(a, sizeof a, "%s", tmp_path("gen-a"));
    snprintf(b, sizeof b, "%s", tmp_path("gen-b"));
    snprintf(c, sizeof c, "%s", tmp_path("gen-c"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", a, b, c);
    assert_int_equal(system(cmd), 0);
    traindata_opts o = {.dir = a, .dataset = "builtin", .limit = 5, .sp = {0, 0, 1, 0}, .max_new = 7, .max_prompt = 400,
                        .seed = 3, .n_tap = 2, .taps = {1, 5}, .top_k = 6, .store_final = 1, .batch = 2, .shard_size = 3,
                        .quiet = 1};
    if (traindata_build(&t, &o)) fail_msg("%s", ds_errmsg());
    train_cache A, B, C;
    if (traindata_open(&A, a, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_int_equal(A.n_seq, 5);
    assert_int_equal(A.n_shard, 2);
    traindata_layout lay = {.n_tap = 2, .taps = {1, 5}, .top_k = 6, .has_final = 1};
    snprintf(shard, sizeof shard, "%s/shard-0000", b);
    int lens[5];
    for (int i = 0; i < A.n_seq; i++) {
        const int *tok = traindata_tokens(&A, i);
        const int32_t *id = traindata_topk_id(&A, i);
        int np = A.n_prompt[i], R = A.len[i] - np;
        lens[i] = np;
        assert_true(R >= 1 && R <= o.max_new);
        for (int r = 0; r < R; r++) {
            assert_int_equal(tok[np + r], id[(size_t)r * A.top_k]); /* greedy: the top-1 */
            if (r < R - 1) assert_false(tokenizer_is_eog(&t.tk, tok[np + r])); /* an end token ends it */
        }
        if (R < o.max_new) assert_true(tokenizer_is_eog(&t.tk, tok[A.len[i] - 1]));
        if (traindata_append(&t, shard, tok, A.len[i], np, A.source[i], &lay)) fail_msg("%s", ds_errmsg());
    }
    assert_true(lens[0] != lens[1] || lens[1] != lens[2]); /* the batches held prompts of different lengths */
    if (traindata_open(&B, b, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_caches_equal(&A, &B);
    /* stopped after its first shard, then resumed */
    o.dir = c, o.max_shards = 1;
    if (traindata_build(&t, &o)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&C, c, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_int_equal(C.n_seq, 3);
    traindata_close(&C);
    o.max_shards = 0;
    if (traindata_build(&t, &o)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&C, c, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_caches_equal(&A, &C);
    traindata_close(&C);
    /* killed inside its second shard after one sequence was indexed: it goes on after that prompt */
    char p[700];
    snprintf(p, sizeof p, "%s/shard-0001/done", c);
    assert_int_equal(remove(p), 0);
    snprintf(p, sizeof p, "%s/shard-0001/index.bin", c);
    assert_int_equal(truncate(p, 12), 0);
    if (traindata_build(&t, &o)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&C, c, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_caches_equal(&A, &C);
    traindata_close(&C);
    /* rebuilt under other settings (data.rebuild): the old shards go, none of their sequences is kept */
    o.rebuild = 1, o.limit = 2;
    if (traindata_build(&t, &o)) fail_msg("%s", ds_errmsg());
    if (traindata_open(&C, c, &t, 0)) fail_msg("%s", ds_errmsg());
    assert_int_equal(C.n_seq, 2);
    assert_int_equal(C.n_shard, 1);
    printf("  generated cache (5 prompts, batches of 2, prompts of %d-%d tokens) equals teacher-forced capture; stopped after a "
           "shard or killed inside one, the resumed build equals the straight one\n", DS_MIN(DS_MIN(lens[0], lens[1]), lens[2]), DS_MAX(DS_MAX(lens[0], lens[1]), lens[2]));
    traindata_close(&A);
    traindata_close(&B);
    traindata_close(&C);
    assert_int_equal(system(cmd), 0);
    target_close(&t);
}

/* ---- the training loop against a hand-computed AdamW: a quadratic "drafter" (two tensors, one decayed)
 * whose gradient is known in closed form, so the loop's batching, clipping, schedule and update can be
 * recomputed here in double from the sequences it was handed */
#define QN 10
#define QVISITS 256
typedef struct {
    const train_cache *d;
    int positions;
    int visits[QVISITS], n_visits;   /* sequences handed to a training step, in order */
    int evals[QVISITS], n_evals;     /* ... and to an evaluation (grad NULL) */
} quad_log;
static quad_log QL;
static const train_tensor QT[2] = {{0, 6, 1}, {6, QN - 6, 0}};
static double quad_goal(int i) { return 0.3 * i - 1.0; }
static int quad_seq_id(const train_seq *s) {
    for (int i = 0; i < QL.d->n_seq; i++)
        if (traindata_tokens(QL.d, i) == s->tokens) return i;
    return -1;
}
/* each sequence pulls every parameter toward its goal with weight A * (1 + id % 3) */
static int quad_step(trainable *tr, const train_seq *s, float *grad, double norm, train_stats *st) {
    int id = quad_seq_id(s);
    assert_true(id >= 0);
    int n = QL.d->len[id], np = QL.d->n_prompt[id];
    /* the anchors the loop drew: distinct response positions, ascending, each with its predictions inside */
    assert_int_equal(s->T, n);
    assert_int_equal(s->A, DS_MIN(40, n - 1 - np));
    for (int a = 0; a < s->A; a++) {
        assert_true(s->anchor[a] >= np && s->anchor[a] <= n - 2);
        if (a) assert_true(s->anchor[a] > s->anchor[a - 1]);
        assert_int_equal(s->n_valid[a], DS_MIN(QL.positions, n - 1 - s->anchor[a]));
    }
    double w = s->A * (1.0 + id % 3);
    if (grad) {
        assert_true(QL.n_visits < QVISITS);
        QL.visits[QL.n_visits++] = id;
        for (int i = 0; i < QN; i++) grad[i] += (float)(w * (tr->params[i] - quad_goal(i)) / norm);
    } else {
        assert_true(QL.n_evals < QVISITS);
        QL.evals[QL.n_evals++] = id;
    }
    st->ce += w, st->weight += s->A, st->rows += s->A;
    return 0;
}
static double quad_weight(const trainable *tr, int A, const int *n_valid) {
    (void)tr, (void)n_valid;
    return A;
}
static int quad_save(const trainable *tr, const char *dir) {
    char p[700];
    if (ds_mkdirs(dir, "quad")) return -1;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_write_tensor t = {"p", tr->params, 1, {QN}};
    return st_write(p, &t, 1, ST_F32, NULL, 0);
}
static int quad_read(trainable *tr, const char *dir) {
    char p[700];
    st_file f;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (st_open(&f, p)) return -1;
    const st_tensor *t = st_find(&f, "p");
    int rc = t && st_numel(t) == QN ? st_to_f32(&f, t, tr->params) : -1;
    st_close(&f);
    return rc;
}
static cJSON *quad_config(const trainable *tr) {
    (void)tr;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "quad");
    return j;
}

/* The loop's optimizer, recomputed: per step the batch's gradient (sum over its sequences / the summed
 * weights), its norm clipped to `clip`, linear warm-up over (int)(warmup_frac * steps) steps then a cosine
 * from lr to lr * min_lr_frac, AdamW with bias correction and decay on the decayed tensor only. The
 * parameters, the logged gradient norms and learning rates agree with the double recomputation; every
 * epoch hands each training sequence once, the held-out ones are never trained on and are evaluated, all
 * of them in id order, after every eval_every-th step and the last. */
static void test_optimizer_by_hand(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char cache[512], run[512], cmd[1200];
    fresh_dirs("quad-cache", "quad-run", cache, run, cmd);
    build_cache(tt, cache);
    train_cache d;
    if (traindata_open(&d, cache, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    float params[QN] = {0};
    trainable tr = {.kind = "quad", .params = params, .n_params = QN, .n_t = 2, .t = QT, .positions = 3, .dim = d.dim,
                    .w_ce = 1, .full_vocab = 1, .step = quad_step, .seq_weight = quad_weight, .save = quad_save,
                    .read_params = quad_read, .config_json = quad_config};
    /* steps, seqs/step, anchors, lr, min_lr_frac, warmup_frac, weight_decay, clip, beta1, beta2, seed,
     * eval_every, ckpt_every, log_every, holdout, eval_seqs */
    const int S = 20;
    train_opts o = {S, 3, 40, 0.05f, 0.1f, 0.2f, 0.3f, 4.0f, 0.8f, 0.9f, 5, 6, 0, 1, 0.3f, 100, 0, run, 1};
    memset(&QL, 0, sizeof QL);
    QL.d = &d, QL.positions = tr.positions;
    train_point h[32];
    int nh = 0;
    if (train_run(&tr, &d, &o, h, 32, &nh)) fail_msg("%s", ds_errmsg());
    assert_int_equal(nh, S);
    assert_int_equal(QL.n_visits, S * o.seqs_per_step);
    /* the split: the held-out ones (each evaluation's, ascending) and the trained ones partition the cache */
    int in_train[64] = {0}, n_train = 0, n_eval = 0, n_evaluations = 0;
    for (int v = 0; v < QL.n_visits; v++) n_train += !in_train[QL.visits[v]]++;
    for (int e = 0; e < QL.n_evals && (e == 0 || QL.evals[e] > QL.evals[e - 1]); e++) n_eval++;
    assert_true(n_eval >= 2 && n_train + n_eval == d.n_seq);
    for (int e = 0; e < QL.n_evals; e++) {
        assert_int_equal(QL.evals[e], QL.evals[e % n_eval]);
        assert_int_equal(in_train[QL.evals[e]], 0);
    }
    n_evaluations = QL.n_evals / n_eval;
    assert_int_equal(QL.n_evals, n_evaluations * n_eval);
    assert_int_equal(n_evaluations, S / o.eval_every + (S % o.eval_every != 0)); /* steps 6, 12, 18 and the last */
    /* every epoch: each training sequence once */
    for (int ep = 0; (ep + 1) * n_train <= QL.n_visits; ep++) {
        int seen[64] = {0};
        for (int k = 0; k < n_train; k++) {
            int id = QL.visits[ep * n_train + k];
            assert_true(in_train[id] && !seen[id]);
            seen[id] = 1;
        }
    }
    /* AdamW by hand */
    double p[QN] = {0}, m[QN] = {0}, v[QN] = {0};
    int warm = (int)(o.warmup_frac * S), clipped = 0;
    char lp[700], *log = NULL;
    size_t ln;
    snprintf(lp, sizeof lp, "%s/train_log.jsonl", run);
    assert_int_equal(ds_read_file(lp, &log, &ln), 0);
    const char *line = log;
    for (int st = 0; st < S; st++) {
        double g[QN] = {0}, norm = 0, gn = 0;
        for (int j = 0; j < o.seqs_per_step; j++) {
            int id = QL.visits[st * o.seqs_per_step + j];
            norm += DS_MIN(40, d.len[id] - 1 - d.n_prompt[id]);
        }
        for (int j = 0; j < o.seqs_per_step; j++) {
            int id = QL.visits[st * o.seqs_per_step + j], A = DS_MIN(40, d.len[id] - 1 - d.n_prompt[id]);
            for (int i = 0; i < QN; i++) g[i] += A * (1.0 + id % 3) * ((float)p[i] - quad_goal(i)) / norm;
        }
        for (int i = 0; i < QN; i++) gn += g[i] * g[i];
        gn = sqrt(gn);
        double scale = gn > o.clip ? o.clip / gn : 1, lr;
        clipped += gn > o.clip;
        if (st < warm) lr = o.lr * (st + 1) / warm;
        else {
            double lo = o.lr * o.min_lr_frac, prog = (double)(st - warm) / (S - warm);
            lr = lo + (o.lr - lo) * 0.5 * (1 + cos(M_PI * prog));
        }
        double b1 = o.beta1, b2 = o.beta2, bc1 = 1 - pow(b1, st + 1), bc2 = 1 - pow(b2, st + 1);
        for (int i = 0; i < QN; i++) {
            double gi = g[i] * scale, wd = i < 6 ? o.weight_decay : 0;
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            p[i] -= lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8) + wd * p[i]);
        }
        if (fabs(h[st].grad_norm - gn) > 1e-4 * gn) fail_msg("step %d: grad norm %.9g, by hand %.9g", st + 1, h[st].grad_norm, gn);
        const char *l = strstr(line, "\"lr\": ");
        assert_non_null(l);
        double llr = atof(l + 6);
        if (fabs(llr - lr) > 1e-5 * lr) fail_msg("step %d: lr %.9g logged, by hand %.9g", st + 1, llr, lr);
        line = strchr(l, '\n');
        assert_non_null(line);
    }
    free(log);
    assert_true(clipped >= 1 && clipped < S); /* the clip bound both ways */
    for (int i = 0; i < QN; i++)
        if (fabs(params[i] - p[i]) > 1e-4 * (1 + fabs(p[i])))
            fail_msg("parameter %d (%s tensor): the loop %.7g, by hand %.7g", i, i < 6 ? "decayed" : "undecayed", params[i], p[i]);
    /* and it did move: toward the goals, the decayed tensor held short of them */
    assert_true(fabs(params[9] - quad_goal(9)) < fabs(quad_goal(9)));
    /* eval_every 0: no evaluation at all, held-out sequences or not (a modulo by it would divide by zero) */
    {
        char run0[600];
        snprintf(run0, sizeof run0, "%s-noeval", run);
        train_opts o0 = o;
        o0.eval_every = 0, o0.steps = 3, o0.out = run0;
        float keep[QN];
        memcpy(keep, params, sizeof keep);
        QL.n_evals = QL.n_visits = 0;
        if (train_run(&tr, &d, &o0, NULL, 0, NULL)) fail_msg("%s", ds_errmsg());
        assert_int_equal(QL.n_evals, 0);
        assert_int_equal(QL.n_visits, 3 * o.seqs_per_step);
        memcpy(params, keep, sizeof keep);
        rm_dir(run0);
    }
    printf("  training loop vs AdamW by hand: %d steps (%d clipped), %d training / %d held-out sequences, "
           "%d evaluations: parameters within 1e-4\n", S, clipped, n_train, n_eval, n_evaluations);
    traindata_close(&d);
    assert_int_equal(system(cmd), 0);
    tiny_close(tt);
}

static int run_bd(bd_model *m, const train_cache *d, const train_opts *o, train_point *h, int cap, int *n) {
    trainable tr;
    if (bd_trainable(m, &tr)) return -1;
    return train_run(&tr, d, o, h, cap, n);
}

/* The overfit gate (SpecForge's): train a drafter on ONE cached sequence until it memorises it, then
 * serve the checkpoint through the registry and require the memorised tokens drafted back. It
 * catches what gradient checks cannot: a mismatch between training and serving in tap ids, the
 * anchor layout, RoPE positions or the draft vocabulary's id maps. The sequence is 40 random tokens
 * after a prompt and the serving check is teacher-forced on it (train_fixture.h): the tiny
 * target's own greedy continuation, which this gate used to memorise and decode, is one token
 * repeated, and a drafter that ignored its context drafted that back too. The decoding loop then
 * runs the drafter at T = 0 and must emit the target's own output. */
static void overfit_gate(const char *kind, const char *extra) {
    overfit g;
    int gamma = 4;
    overfit_open(&g, "overfit", 2, 40, 2, (int[]){0, 1}); /* tokens inside the draft vocabulary below */
    /* train on every anchor of the one sequence, on its tokens (not the random target's law) */
    char buf[300];
    snprintf(buf, sizeof buf,
             "{\"layers\": 2, \"rank\": 6, \"gamma\": %d, \"taps\": [0, 1], \"mask_token\": 47, \"w_ce\": 1, "
             "\"w_l1\": 0%s}",
             gamma, extra);
    cJSON *j = cJSON_Parse(buf);
    bd_config c;
    assert_int_equal(bd_config_init(&c, &g.tt->t.m, kind, j), 0);
    cJSON_Delete(j);
    bd_model m;
    int ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i + 2; /* a draft vocabulary: all but ids 0, 1 and the top 6 */
    assert_int_equal(bd_model_init_vocab(&m, &c, &g.tt->t.m, 5, 0, c.contract.draft_vocab ? ids : NULL), 0);
    g.o.steps = 300, g.o.lr = 3e-3f;
    trainable tr;
    assert_int_equal(bd_trainable(&m, &tr), 0);
    overfit_train(&g, &tr);
    char what[300];
    snprintf(what, sizeof what, "%s%s", kind, extra);
    drafter dr;
    overfit_serve(&g, kind, "", gamma, what, &dr);
    assert_int_equal(dr.n_capture, 2);
    drafter_close(&dr);
    bd_model_free(&m);
    overfit_close(&g);
}

static void test_overfit_gate(void **state) {
    (void)state;
    overfit_gate("dflash", "");
    overfit_gate("dspark-markov", ", \"draft_vocab\": 40");
    overfit_gate("dspark-rnn", "");
}

/* The sequential head's W2 in Q8_0 (or Q4_1) for serving: chosen by "auto" when the rank allows it, refused
 * by name when asked for where it cannot be, and an unknown precision is an error. (Its losslessness
 * is the gate's: the gate's DSpark drafters have rank 256, so they serve a Q8_0 W2.) */
static void test_head_precision(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const char *cases[][2] = {
        {"{\"rank\": 32, \"layers\": 1}", "head q8_0"},
        {"{\"rank\": 32, \"layers\": 1, \"head_precision\": \"f32\"}", "head f32"},
        {"{\"rank\": 6, \"layers\": 1}", "head f32"},
        {"{\"rank\": 6, \"layers\": 1, \"head_precision\": \"q8_0\"}", "multiple of 32"},
        {"{\"rank\": 32, \"layers\": 1, \"head_precision\": \"q4_1\"}", "head q4_1"},
        {"{\"rank\": 6, \"layers\": 1, \"head_precision\": \"q4_1\"}", "multiple of 32"},
        {"{\"rank\": 32, \"layers\": 1, \"head_precision\": \"q4\"}", "head_precision 'q4'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = cJSON_Parse(cases[i][0]);
        assert_non_null(j);
        drafter d;
        int rc = drafter_open(&d, "dspark-markov", j, &tt->t);
        if (strstr(cases[i][1], "head ")) {
            if (rc) fail_msg("%s: %s", cases[i][0], ds_errmsg());
            if (!strstr(d.describe, cases[i][1])) fail_msg("%s: '%s' does not say %s", cases[i][0], d.describe, cases[i][1]);
            drafter_close(&d);
        } else {
            assert_int_equal(rc, -1);
            if (!strstr(ds_errmsg(), cases[i][1])) fail_msg("%s: error '%s' does not say %s", cases[i][0], ds_errmsg(), cases[i][1]);
        }
        cJSON_Delete(j);
    }
    tiny_close(tt);
}

static void test_resume_continues_the_curve(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    char cache[512], runA[512], runB[512], cmd[1600];
    snprintf(cache, sizeof cache, "%s", tmp_path("cache"));
    snprintf(runA, sizeof runA, "%s", tmp_path("runA"));
    snprintf(runB, sizeof runB, "%s", tmp_path("runB"));
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", cache, runA, runB);
    assert_int_equal(system(cmd), 0);
    build_cache(tt, cache);
    train_cache d;
    if (traindata_open(&d, cache, &tt->t, 0)) fail_msg("%s", ds_errmsg());
    assert_int_equal(d.n_seq, 12);
    cJSON *j = arch("");
    bd_config c;
    assert_int_equal(bd_config_init(&c, &tt->t.m, "dspark-markov", j), 0);
    cJSON_Delete(j);
    train_opts o = {8, 3, 4, 3e-3f, 0.1f, 0.25f, 0.01f, 1.0f, 0.9f, 0.95f, 11, 4, 0, 1, 0.2f, 4, 0, runA, 1};
    bd_model a, b;
    train_point ha[16], hb1[16], hb2[16];
    int na, nb1, nb2;
    assert_int_equal(bd_model_init(&a, &c, &tt->t.m, 5, 0), 0);
    if (run_bd(&a, &d, &o, ha, 16, &na)) fail_msg("%s", ds_errmsg());
    assert_int_equal(na, 8);
    assert_true(ha[7].loss < ha[0].loss); /* it learns */
    /* the same run, killed after 5 steps and resumed from its checkpoint in a fresh model */
    o.out = runB;
    o.stop_after = 5;
    assert_int_equal(bd_model_init(&b, &c, &tt->t.m, 5, 0), 0);
    assert_int_equal(run_bd(&b, &d, &o, hb1, 16, &nb1), 0);
    assert_int_equal(nb1, 5);
    bd_model_free(&b);
    assert_int_equal(bd_model_init(&b, &c, &tt->t.m, 999, 0), 0); /* different init: must be replaced by the checkpoint */
    o.stop_after = 0;
    /* issue 11 (6): resuming under another setting is refused by name (d965422 resumed silently) */
    float lr0 = o.lr;
    o.lr = 1e-2f;
    assert_int_equal(run_bd(&b, &d, &o, hb2, 16, &nb2), -1);
    assert_non_null(strstr(ds_errmsg(), "lr = "));
    o.lr = lr0;
    { /* a checkpoint whose step is not an integer (5.5 was read as step 5) is refused, then restored */
        char tp[600], *orig;
        size_t tn;
        snprintf(tp, sizeof tp, "%s/last/trainer.json", runB);
        assert_int_equal(ds_read_file(tp, &orig, &tn), 0);
        cJSON *tj = cJSON_Parse(orig);
        assert_non_null(tj);
        cJSON_ReplaceItemInObjectCaseSensitive(tj, "step", cJSON_CreateNumber(5.5));
        char *txt = cJSON_Print(tj);
        assert_int_equal(ds_write_file_atomic(tp, txt, strlen(txt)), 0);
        free(txt);
        cJSON_Delete(tj);
        assert_int_equal(run_bd(&b, &d, &o, hb2, 16, &nb2), -1);
        assert_non_null(strstr(ds_errmsg(), "no step recorded"));
        assert_int_equal(ds_write_file_atomic(tp, orig, tn), 0);
        free(orig);
    }
    /* a step logged after the checkpoint (killed before the next one) is not logged twice */
    char logp[600];
    snprintf(logp, sizeof logp, "%s/train_log.jsonl", runB);
    FILE *lf = fopen(logp, "a");
    assert_non_null(lf);
    fprintf(lf, "{\"step\": 6, \"loss\": 99}\n");
    fclose(lf);
    assert_int_equal(run_bd(&b, &d, &o, hb2, 16, &nb2), 0);
    {
        char *txt;
        size_t n;
        assert_int_equal(ds_read_file(logp, &txt, &n), 0);
        int lines = 0, six = 0;
        for (char *q = txt; (q = strstr(q, "\"step\": ")); q++) lines++, six += atoi(q + 8) == 6;
        assert_int_equal(lines, 8);
        assert_int_equal(six, 1);
        assert_null(strstr(txt, "\"loss\": 99}"));
        /* and, line by line, the uninterrupted run's log (its timings aside) */
        char pa[600], *ta;
        size_t na;
        snprintf(pa, sizeof pa, "%s/train_log.jsonl", runA);
        assert_int_equal(ds_read_file(pa, &ta, &na), 0);
        char *sa = ta, *sb = txt;
        for (int l = 0; l < 8; l++) {
            char *ea = strchr(sa, '\n'), *eb = strchr(sb, '\n');
            assert_non_null(ea);
            assert_non_null(eb);
            *ea = *eb = 0;
            cJSON *ja = cJSON_Parse(sa), *jb = cJSON_Parse(sb);
            if (!ja || !jb) fail_msg("log line %d is not JSON: '%s' / '%s'", l + 1, sa, sb);
            for (int k = 0; k < 2; k++) {
                const char *tkey = k ? "load_seconds" : "seconds";
                cJSON_DeleteItemFromObjectCaseSensitive(ja, tkey);
                cJSON_DeleteItemFromObjectCaseSensitive(jb, tkey);
            }
            char *pa2 = cJSON_PrintUnformatted(ja), *pb2 = cJSON_PrintUnformatted(jb);
            if (strcmp(pa2, pb2)) fail_msg("log line %d: uninterrupted %s, resumed %s", l + 1, pa2, pb2);
            free(pa2), free(pb2);
            cJSON_Delete(ja), cJSON_Delete(jb);
            sa = ea + 1, sb = eb + 1;
        }
        assert_int_equal(*sb, 0);
        free(ta);
        free(txt);
    }
    assert_int_equal(nb2, 3);
    for (int i = 0; i < 5; i++) assert_memory_equal(&ha[i].loss, &hb1[i].loss, sizeof(double));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hb2[i].step, 6 + i);
        if (memcmp(&ha[5 + i].loss, &hb2[i].loss, sizeof(double)) != 0)
            fail_msg("step %d: uninterrupted loss %.9g, resumed %.9g", 6 + i, ha[5 + i].loss, hb2[i].loss);
    }
    assert_memory_equal(a.params, b.params, sizeof(float) * a.n_params);
    /* a warm start under other settings: the weights of runB's checkpoint, a new run from step 0 */
    o.lr = 1e-2f;
    o.warm_start = 1;
    assert_int_equal(run_bd(&b, &d, &o, hb2, 16, &nb2), 0);
    assert_int_equal(nb2, 8);
    assert_int_equal(hb2[0].step, 1);
    bd_model_free(&a);
    bd_model_free(&b);
    traindata_close(&d);
    assert_int_equal(system(cmd), 0);
    tiny_close(tt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_loss_matches_full),
        cmocka_unit_test(test_grad_dflash),          cmocka_unit_test(test_grad_dspark_markov),
        cmocka_unit_test(test_grad_dspark_rnn),      cmocka_unit_test(test_checkpoint_every_kind), cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_layout_every_family),
        cmocka_unit_test(test_seq_weight_every_family),
        cmocka_unit_test(test_untrained_defaults),
        cmocka_unit_test(test_vocab_ids),
        cmocka_unit_test(test_init_draw),
        cmocka_unit_test(test_train_serve_chain),
        cmocka_unit_test(test_tree_paths),
        cmocka_unit_test(test_init_from_target_layers),
        cmocka_unit_test(test_resume_continues_the_curve),
        cmocka_unit_test(test_cache_layout_refused), cmocka_unit_test(test_cache_torn_append), cmocka_unit_test(test_optimizer_by_hand), cmocka_unit_test(test_load_seq_short), cmocka_unit_test(test_topk_brute), cmocka_unit_test(test_generated_cache), cmocka_unit_test(test_overfit_gate),
        cmocka_unit_test(test_head_precision),
        cmocka_unit_test(test_draft_vocab_choose),
    };
    return cmocka_run_group_tests_name("train", tests, NULL, NULL);
}
