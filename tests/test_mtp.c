/* test_mtp — the MTP module as a trainable model and a drafter, and the same for EAGLE-3 (the module
 * on fused taps), on a tiny target the test writes itself: the training loss's gradient against
 * finite differences (both target sides, every tensor, through the unrolled chain), the float step
 * against the double one, position 1 trained vs served, the module's cache after a rejection (a
 * commit drops the chain's speculative rows: the next drafts equal those of a fresh begin on the
 * committed text), checkpoints round-tripping and refused when they do not belong, and the
 * one-sequence overfit gate (trained through the shared loop, served through the registry, every
 * output equal to the target's own). */
#include "testutil.h"

#include "../datasets/traindata.h"
#include "../drafters/mtp.h"
#include "../drafters/tree_build.h"
#include "../engine/decode.h"
#include "../engine/train.h"
#include "../schedulers/scheduler.h"
#include "train_fixture.h"

#define FIX_PROMPT 3
#define FIX_K 8
#define DEPTH 3
#define LONG_AT 293 /* a prompt begin() runs in three chunks of MTP_CHUNK (128): 128 + 128 + 37 rows */
#define SEQ_MAX (LONG_AT + 40)

typedef struct {
    int T, tokens[SEQ_MAX], anchor[6], n_valid[6], nc;
    float *taps, *cap, *final; /* taps: the training layout [T][nc dim]; cap: the serving one [nc][T][dim] */
    int32_t tk_id[SEQ_MAX * FIX_K];
    float tk_lp[SEQ_MAX * FIX_K];
} seq_fix;

/* rows from..from+cnt-1 of every captured layer of cap [nc][n][dim], packed as the loop hands them */
static float *pack_rows(const float *cap, int nc, int n, int D, int from, int cnt) {
    float *o = malloc(sizeof(float) * (size_t)nc * cnt * D);
    for (int t = 0; t < nc; t++)
        memcpy(o + (size_t)t * cnt * D, cap + ((size_t)t * n + from) * D, sizeof(float) * (size_t)cnt * D);
    return o;
}

/* the target's states of f->tokens[0..T): final, taps (training layout), cap (serving layout), top-K */
static void seq_states(tiny_target *tt, const mtp_config *c, seq_fix *f) {
    int D = tt->t.m.cfg.dim, V = tt->t.m.cfg.vocab_size, nc = f->nc = c->n_tap;
    f->final = malloc(sizeof(float) * f->T * D);
    f->taps = malloc(sizeof(float) * f->T * D * nc);
    f->cap = malloc(sizeof(float) * f->T * D * nc);
    kv_cache *kv = kv_cache_new(tt->t.be, &tt->t.m.cfg, f->T);
    float *logits = malloc(sizeof(float) * f->T * V);
    fwd_batch b = {.n_seq = 1, .kv = &kv, .n_new = &f->T, .tokens = f->tokens, .all_logits = 1, .logits = logits,
                   .n_capture = nc, .capture_layers = c->taps, .capture = f->cap, .final_hidden = f->final};
    assert_int_equal(model_forward(&tt->t.m, &tt->t.fs, &b), 0);
    for (int i = 0; i < f->T; i++)
        for (int t = 0; t < nc; t++)
            memcpy(f->taps + ((size_t)i * nc + t) * D, f->cap + ((size_t)t * f->T + i) * D, sizeof(float) * D);
    for (int i = 0; i < f->T - FIX_PROMPT; i++)
        topk_logprobs(logits + (size_t)(FIX_PROMPT - 1 + i) * V, V, FIX_K, f->tk_id + i * FIX_K, f->tk_lp + i * FIX_K);
    free(logits);
    kv_cache_free(tt->t.be, kv);
}

static void make_seq_n(tiny_target *tt, const mtp_config *c, seq_fix *f, int T) {
    rng_t r;
    rng_seed(&r, 5);
    f->T = T;
    for (int i = 0; i < f->T; i++) f->tokens[i] = (int)(rng_u64(&r) % 46);
    seq_states(tt, c, f);
    int anchors[6] = {3, 9, 14, 20, 32, 34};
    for (int a = 0; a < 6; a++) {
        f->anchor[a] = anchors[a];
        f->n_valid[a] = DS_MIN(DEPTH, f->T - 1 - anchors[a]); /* the last chains are cut short */
    }
}

static void make_seq(tiny_target *tt, const mtp_config *c, seq_fix *f) { make_seq_n(tt, c, f, 36); }

typedef struct {
    const mtp_config *c;
    const subvocab *sv;
    mtp_pv_d P;
    double *Ein, *E;
    train_seq_d s;
    double w;
    mtp_ws_d ws;
} dctx;

static double loss_d(void *ctx) {
    dctx *x = ctx;
    train_stats st;
    memset(&st, 0, sizeof st);
    if (mtp_step_d(x->c, &x->P, NULL, x->Ein, x->E, x->sv->Vd, x->sv->vmap, &x->s, x->w, &st, &x->ws))
        fail_msg("%s", ds_errmsg());
    return (x->c->w_ce * st.ce + x->c->w_l1 * st.l1) / x->w;
}

/* target: 0 = the final states (full law), 1 = the cached top-8 rows; vocab: a draft vocabulary of
 * 40 of the 48 ids in a scrambled order (labels and top-K entries fall outside it) */
static void gradcheck(const char *kind, int target, int vocab) {
    tiny_target *tt = tiny_open();
    mtp_config c;
    assert_int_equal(mtp_config_init(&c, &tt->t.m, kind, NULL), 0);
    c.depth = DEPTH;
    c.w_ce = 0.3f, c.w_l1 = 0.7f;
    int ids[40];
    for (int j = 0; j < 40; j++) ids[j] = (j * 5 + 1) % c.vocab;
    c.contract.draft_vocab = vocab ? 40 : 0;
    mtp_model m;
    assert_int_equal(mtp_model_init(&m, &c, &tt->t.m, 3, 1, vocab ? ids : NULL), 0);
    /* the fusion F: none in an mtp, [dim][n_tap dim] in an eagle3 */
    assert_int_equal(m.tt[13].numel, strcmp(kind, "eagle3") ? 0 : (size_t)c.dim * c.n_tap * c.dim);
    rng_t r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.2f * (float)(rng_uniform(&r) - 0.5); /* the norms too */
    seq_fix f;
    make_seq(tt, &c, &f);
    int D = c.dim;
    size_t nE = (size_t)c.vocab * D, nEh = (size_t)m.sv.Vd * D, nt = (size_t)f.T * D, ntaps = nt * f.nc;
    dctx x;
    memset(&x, 0, sizeof x);
    x.c = &m.cfg;
    x.sv = &m.sv;
    double *p = malloc(sizeof(double) * m.n_params);
    x.Ein = malloc(sizeof(double) * nE);
    x.E = malloc(sizeof(double) * nEh);
    double *taps = malloc(sizeof(double) * ntaps), *fin = malloc(sizeof(double) * nt);
    for (size_t i = 0; i < m.n_params; i++) p[i] = m.params[i];
    for (size_t i = 0; i < nE; i++) x.Ein[i] = m.Ein[i];
    for (size_t i = 0; i < nEh; i++) x.E[i] = m.E[i];
    for (size_t i = 0; i < ntaps; i++) taps[i] = f.taps[i];
    for (size_t i = 0; i < nt; i++) fin[i] = f.final[i];
    mtp_pv_set_d(&x.P, &m, p);
    train_seq sf = {f.T, f.taps, target ? NULL : f.final, f.tokens, FIX_PROMPT, FIX_K, target ? f.tk_id : NULL,
                    target ? f.tk_lp : NULL, 6, f.anchor, f.n_valid};
    x.s = (train_seq_d){f.T, taps, target ? NULL : fin, f.tokens, FIX_PROMPT, FIX_K, sf.tk_id, sf.tk_lp, 6, f.anchor, f.n_valid};
    for (int a = 0; a < 6; a++) x.w += f.n_valid[a];
    double *gd = calloc(m.n_params, sizeof(double));
    float *gf = calloc(m.n_params, sizeof(float));
    mtp_pv_d Gd;
    mtp_pv_f Gf;
    mtp_pv_set_d(&Gd, &m, gd);
    mtp_pv_set_f(&Gf, &m, gf);
    train_stats st;
    memset(&st, 0, sizeof st);
    if (mtp_step_d(&m.cfg, &x.P, &Gd, x.Ein, x.E, m.sv.Vd, m.sv.vmap, &x.s, x.w, &st, &x.ws)) fail_msg("%s", ds_errmsg());
    assert_int_equal(st.rows, (long)x.w);
    assert_true(st.n_at[DEPTH] > 0); /* the chain's last position is supervised */
    if (vocab) assert_true(st.label_outside > 0); /* the path for tokens outside the draft vocabulary ran */
    memset(&st, 0, sizeof st);
    if (mtp_step_f(&m.cfg, &m.pv, &Gf, m.Ein, m.E, m.sv.Vd, m.sv.vmap, &sf, x.w, &st, &m.ws)) fail_msg("%s", ds_errmsg());
    double worst = 0, worst_f = 0;
    int n_t = 0;
    for (int ti = 0; ti < MTP_N_TENSORS; ti++) {
        const train_tensor *t = &m.tt[ti];
        if (!t->numel) continue; /* eagle3's F in an mtp */
        n_t++;
        char what[80];
        snprintf(what, sizeof what, "%s: tensor %s", kind, MTP_TENSOR_NAMES[ti]);
        double rel_f, rel = fd_check_tensor(loss_d, &x, p + t->offset, gd + t->offset, gf + t->offset, t->numel, &r,
                                            what, &rel_f);
        worst = fmax(worst, rel), worst_f = fmax(worst_f, rel_f);
    }
    printf("  %s, depth %d, %d tap%s, target %s%s: %d tensors; worst relative error vs finite differences %.2e (double); "
           "float vs double gradient %.2e\n",
           kind, DEPTH, f.nc, f.nc > 1 ? "s fused" : "", target ? "top-8" : "final states",
           vocab ? ", draft vocabulary 40 of 48" : "", n_t, worst, worst_f);
    if (!strcmp(kind, "eagle3")) assert_int_equal(n_t, MTP_N_TENSORS); /* F was checked */
    mtp_ws_free_d(&x.ws);
    free(gd), free(gf), free(p), free(x.Ein), free(x.E), free(taps), free(fin), free(f.taps), free(f.cap), free(f.final);
    mtp_model_free(&m);
    tiny_close(tt);
}

static void test_grad_final(void **state) {
    (void)state;
    gradcheck("mtp", 0, 0);
}
static void test_grad_topk(void **state) {
    (void)state;
    gradcheck("mtp", 1, 0); /* eagle3 shares every op but F: checked once, in the fullest case below */
}
static void test_grad_vocab(void **state) {
    (void)state;
    gradcheck("mtp", 1, 1);
    gradcheck("eagle3", 1, 1);
}

/* The first draft position, trained and served: for each anchor of a sequence, the training step's
 * logits row (position 1, full-vocabulary path) and the drafter's, served from a begin on the
 * sequence up to the anchor with the same target states, must agree (same h row, same token, same
 * module); their top probabilities are compared through c_raw. Memorising one sequence can be done
 * from the tokens alone, so the overfit gate would not see a state read from the wrong row; this does. */
static double train_serve_first(const char *kind, const char *precision) {
    tiny_target *tt = tiny_open();
    mtp_config c;
    assert_int_equal(mtp_config_init(&c, &tt->t.m, kind, NULL), 0);
    c.depth = 3;
    seq_fix f;
    make_seq(tt, &c, &f);
    mtp_model m;
    assert_int_equal(mtp_model_init(&m, &c, &tt->t.m, 6, 1, NULL), 0);
    /* eagle3's F off its [0 I] start, so that every tap and its place in the fusion count */
    rng_t rr;
    rng_seed(&rr, 12);
    for (size_t i = 0; i < m.tt[13].numel; i++) m.pv.fc[i] += 0.3f * (float)(rng_uniform(&rr) - 0.5);
    char dir[600], cj[800];
    snprintf(dir, sizeof dir, "%s", tmp_path("mtp-first"));
    assert_int_equal(mtp_save(&m, dir), 0); /* the module the drafter opens */
    snprintf(cj, sizeof cj, "{\"checkpoint\": \"%s\", \"block_precision\": \"%s\"}", dir, precision);
    cJSON *cfg = cJSON_Parse(cj);
    drafter dr;
    if (drafter_open(&dr, kind, cfg, &tt->t)) fail_msg("%s", ds_errmsg());
    int V = c.vocab, ones[6] = {1, 1, 1, 1, 1, 1};
    train_seq sf = {f.T, f.taps, f.final, f.tokens, FIX_PROMPT, FIX_K, NULL, NULL, 6, f.anchor, ones};
    train_stats st;
    memset(&st, 0, sizeof st);
    if (mtp_step_f(&m.cfg, &m.pv, NULL, m.Ein, m.E, m.sv.Vd, m.sv.vmap, &sf, 6, &st, &m.ws)) fail_msg("%s", ds_errmsg());
    sampling_params greedy = {0, 0, 1};
    draft_block b;
    assert_int_equal(draft_block_init(&b, 3, V, 1), 0);
    double worst = 0;
    for (int a = 0; a < 6; a++) {
        int at = f.anchor[a];
        const float *z = m.ws.Z + (size_t)a * V; /* rows by position then anchor: position 1 first */
        double mx = z[0], sum = 0;
        for (int i = 1; i < V; i++) mx = fmax(mx, z[i]);
        for (int i = 0; i < V; i++) sum += exp(z[i] - mx);
        request r;
        assert_int_equal(request_init(&r, &tt->t, 0, f.tokens, at, 8, 1), 0);
        assert_int_equal(ivec_push(&r.toks, f.tokens[at]), 0);
        float *pref = pack_rows(f.cap, f.nc, f.T, c.dim, 0, at);
        if (dr.ops->begin(&dr, &r, pref)) fail_msg("%s", ds_errmsg());
        free(pref);
        if (dr.ops->propose(&dr, &r, 1, &greedy, &b)) fail_msg("%s", ds_errmsg());
        worst = fmax(worst, fabs(b.conf_raw[0] - 1 / sum));
        dr.ops->end(&dr, &r);
        request_free(&r, &tt->t);
    }
    printf("  %s position 1, trained vs served (block %s) on 6 anchors: worst |top probability difference| %.2e\n", kind,
           precision, worst);
    draft_block_free(&b);
    mtp_model_free(&m);
    drafter_close(&dr);
    cJSON_Delete(cfg);
    free(f.taps), free(f.cap), free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

/* a module of `kind` (depth DEPTH; vocab: a draft vocabulary of 40 of the 48 ids, scrambled) with every
 * parameter moved off its start by amp, saved into dir (tag names it) */
static void saved_module(tiny_target *tt, const char *kind, int vocab, uint64_t seed, float amp, const char *tag,
                         mtp_config *c, mtp_model *m, char *dir, size_t n) {
    assert_int_equal(mtp_config_init(c, &tt->t.m, kind, NULL), 0);
    c->depth = DEPTH;
    int ids[40];
    for (int j = 0; j < 40; j++) ids[j] = (j * 5 + 1) % c->vocab;
    c->contract.draft_vocab = vocab ? 40 : 0;
    assert_int_equal(mtp_model_init(m, c, &tt->t.m, 6, 1, vocab ? ids : NULL), 0);
    jitter_params(m->params, m->n_params, seed, amp);
    snprintf(dir, n, "%s", tmp_path(tag));
    assert_int_equal(mtp_save(m, dir), 0);
}

/* The whole chain, trained and served, through the drafter's own commits: each round the drafter
 * samples DEPTH drafts at T = 1 from the text it has committed; the sequence is then made that text
 * followed by those drafts (the training step's teacher forcing feeds exactly the tokens the drafter fed
 * itself) and the step's logits rows at the anchor, position 1..DEPTH, must give the drafter's q rows.
 * The round then commits j = 0..3 of the drafts and a next token (the target's states of that text as
 * the hidden rows), so positions 2..DEPTH, the module's cache across commits and the new anchor's
 * position are compared, not only position 1. Returns the worst |dq|. */
static double train_serve_chain(const char *kind, const char *precision, int vocab, int at) {
    int at0 = at;
    tiny_target *tt = tiny_open();
    mtp_config c;
    mtp_model m;
    char dir[600], prec[80];
    saved_module(tt, kind, vocab, 13, 0.2f, "mtp-chain", &c, &m, dir, sizeof dir);
    snprintf(prec, sizeof prec, ", \"block_precision\": \"%s\"", precision);
    drafter dr;
    serve_checkpoint(&dr, &tt->t, kind, dir, prec);
    seq_fix f;
    make_seq_n(tt, &c, &f, at + 32);
    int D = c.dim, V = c.vocab, Vd = m.sv.Vd, one = DEPTH;
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block b;
    assert_int_equal(draft_block_init(&b, DEPTH, V, 1), 0);
    request rq;
    assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, at, 64, 17), 0);
    assert_int_equal(ivec_push(&rq.toks, f.tokens[at]), 0);
    float *pref = pack_rows(f.cap, f.nc, f.T, D, 0, at);
    if (dr.ops->begin(&dr, &rq, pref)) fail_msg("%s", ds_errmsg());
    free(pref);
    double worst = 0;
    int rounds = 0;
    for (int j = 0; at + DEPTH + 1 < f.T; j = (j + 1) % (DEPTH + 1), rounds++) {
        if (dr.ops->propose(&dr, &rq, DEPTH, &sp, &b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(b.n, DEPTH);
        for (int k = 0; k < DEPTH; k++) f.tokens[at + 1 + k] = b.tok[k];
        free(f.taps), free(f.cap), free(f.final);
        seq_states(tt, &c, &f); /* the committed text, then the drafts: states before at + 1 are unchanged */
        train_seq sf = {f.T, f.taps, NULL, f.tokens, FIX_PROMPT, FIX_K, f.tk_id, f.tk_lp, 1, &at, &one};
        train_stats st;
        memset(&st, 0, sizeof st);
        if (mtp_step_f(&m.cfg, &m.pv, NULL, m.Ein, m.E, Vd, m.sv.vmap, &sf, 1, &st, &m.ws)) fail_msg("%s", ds_errmsg());
        for (int k = 0; k < DEPTH; k++) /* one anchor: row k is position k + 1 */
            worst = fmax(worst, law_gap(m.ws.Z + (size_t)k * Vd, Vd, m.sv.vid, b.q + (size_t)k * V));
        /* commit j drafts and a next token other than draft j + 1 (the rows' states end at draft j: unchanged) */
        if (j < DEPTH) f.tokens[at + 1 + j] = (b.tok[j] + 7) % 46;
        for (int i = 1; i <= j + 1; i++) assert_int_equal(ivec_push(&rq.toks, f.tokens[at + i]), 0);
        float *rows = pack_rows(f.cap, f.nc, f.T, D, at, j + 1); /* rows at .. at + j: the states of that text */
        if (dr.ops->commit(&dr, &rq, j, f.tokens[at + j + 1], rows)) fail_msg("%s", ds_errmsg());
        free(rows);
        at += j + 1;
    }
    printf("  %s%s, blocks %s, prompt %d: trained vs served q over %d rounds (positions 1-%d, commits of 0-%d): worst |dq| %.2e\n",
           kind, vocab ? ", draft vocabulary 40 of 48" : "", precision, at0, rounds, DEPTH, DEPTH, worst);
    assert_true(rounds >= 8);
    dr.ops->end(&dr, &rq);
    request_free(&rq, &tt->t);
    draft_block_free(&b);
    mtp_model_free(&m);
    drafter_close(&dr);
    free(f.taps), free(f.cap), free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

/* the training step's logits rows (position k + 1 at row k, over the draft rows) at anchor `at` with the
 * tokens after it made path[0..d) (the target's states of that text): m->ws.Z, until the next call. f's
 * tokens are restored; its states stay the path's (those before at + 1 are the same): restore_states. */
static const float *step_rows(tiny_target *tt, const mtp_config *c, mtp_model *m, seq_fix *f, int at, const int *path, int d) {
    int save[DEPTH], one = DEPTH;
    memcpy(save, f->tokens + at + 1, sizeof save);
    memcpy(f->tokens + at + 1, path, sizeof(int) * (size_t)d);
    free(f->taps), free(f->cap), free(f->final);
    seq_states(tt, c, f); /* (the states before at + 1 are the same text's) */
    train_seq sf = {f->T, f->taps, NULL, f->tokens, FIX_PROMPT, FIX_K, f->tk_id, f->tk_lp, 1, &at, &one};
    train_stats st;
    memset(&st, 0, sizeof st);
    if (mtp_step_f(&m->cfg, &m->pv, NULL, m->Ein, m->E, m->sv.Vd, m->sv.vmap, &sf, 1, &st, &m->ws)) fail_msg("%s", ds_errmsg());
    memcpy(f->tokens + at + 1, save, sizeof save);
    return m->ws.Z;
}

static void restore_states(tiny_target *tt, const mtp_config *c, seq_fix *f) {
    free(f->taps), free(f->cap), free(f->final);
    seq_states(tt, c, f);
}

typedef struct {
    int tok, par, dep, i;
    float score;
} ref_cand;

/* by path probability, then depth, then age: the order EAGLE-2 ranks its candidates in */
static int ref_cmp(const void *x, const void *y) {
    const ref_cand *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->dep != b->dep ? a->dep - b->dep : a->i - b->i;
}

/* EAGLE-2's tree of `budget` nodes, width W, rebuilt from the training step's laws (an independent
 * builder): the anchor's top W; at each depth the W candidates of highest path probability (ties: the
 * older) each add their top W children; the budget best candidates in ref_cmp's order. Into tok/par. */
static void ref_tree(tiny_target *tt, const mtp_config *c, mtp_model *m, seq_fix *f, int at, int W, int budget, int *tok,
                     int *par) {
    ref_cand cd[128];
    int nc = 0, Vd = m->sv.Vd, ids[TREE_MAX_K];
    float pr[TREE_MAX_K], *tmp = malloc(sizeof(float) * (size_t)c->vocab);
    for (int dd = 0; dd < DEPTH; dd++) {
        ref_cand lvl[128];
        int nl = 0;
        for (int i = 0; i < nc; i++)
            if (cd[i].dep == dd) lvl[nl++] = cd[i];
        qsort(lvl, (size_t)nl, sizeof *lvl, ref_cmp);
        if (dd == 0) lvl[0] = (ref_cand){-1, -1, 0, -1, 1.0f}, nl = 1; /* the anchor */
        for (int r = 0; r < DS_MIN(nl, W); r++) {
            int path[DEPTH];
            for (int u = lvl[r].i, k = dd - 1; u >= 0; u = cd[u].par, k--) path[k] = cd[u].tok;
            const float *Z = step_rows(tt, c, m, f, at, path, dd);
            int n = tree_topk_softmax(Z + (size_t)dd * Vd, Vd, m->sv.vid, W, ids, pr, tmp);
            for (int k = 0; k < n; k++, nc++) cd[nc] = (ref_cand){ids[k], lvl[r].i, dd + 1, nc, lvl[r].score * pr[k]};
        }
    }
    qsort(cd, (size_t)nc, sizeof *cd, ref_cmp);
    int rank[128];
    for (int k = 0; k < nc; k++) rank[cd[k].i] = k;
    for (int k = 0; k < budget; k++) tok[k] = cd[k].tok, par[k] = cd[k].par < 0 ? -1 : rank[cd[k].par];
    free(tmp);
}

/* EAGLE-2's tree against the training step: the whole tree (which nodes, in which order, under which
 * parents) equals the one an independent builder makes from the step's laws, and every node's
 * confidence is its path probability, the product of the step's T = 1 laws of the path's tokens (each
 * node's rows read their parent's y and attend to their ancestors' speculative rows alone). Returns the
 * worst relative error of a path probability. */
static double tree_paths(const char *kind, int vocab) {
    tiny_target *tt = tiny_open();
    mtp_config c;
    mtp_model m;
    char dir[600];
    saved_module(tt, kind, vocab, 29, 0.4f, "mtp-tree", &c, &m, dir, sizeof dir);
    drafter dr;
    serve_checkpoint(&dr, &tt->t, kind, dir, ", \"block_precision\": \"f32\", \"tree_nodes\": 12, \"tree_width\": 3");
    seq_fix f;
    make_seq(tt, &c, &f);
    int D = c.dim, V = c.vocab, Vd = m.sv.Vd, deepest = 0;
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block b;
    assert_int_equal(draft_block_init(&b, 12, V, 1), 0);
    double worst = 0;
    for (int at = 5; at <= 25; at += 10) {
        request rq;
        assert_int_equal(request_init(&rq, &tt->t, 0, f.tokens, at, 8, 3), 0);
        assert_int_equal(ivec_push(&rq.toks, f.tokens[at]), 0);
        float *pref = pack_rows(f.cap, f.nc, f.T, D, 0, at);
        if (dr.ops->begin(&dr, &rq, pref)) fail_msg("%s", ds_errmsg());
        free(pref);
        if (dr.ops->propose(&dr, &rq, 12, &sp, &b)) fail_msg("%s", ds_errmsg());
        tree_budget_one(&dr, &rq, &sp, &b);
        assert_int_equal(b.n, 12);
        int rtok[12], rpar[12];
        ref_tree(tt, &c, &m, &f, at, 3, 12, rtok, rpar);
        for (int i = 0; i < b.n; i++)
            if (b.tok[i] != rtok[i] || b.parent[i] != rpar[i])
                fail_msg("%s at %d: node %d is %d under %d, the reference's %d under %d", kind, at, i, b.tok[i], b.parent[i],
                         rtok[i], rpar[i]);
        for (int i = 0; i < b.n; i++) {
            int path[16], d = tree_path(&b, i, path);
            assert_true(d <= DEPTH);
            deepest = DS_MAX(deepest, d);
            const float *Z = step_rows(tt, &c, &m, &f, at, path, d);
            double want = 1;
            for (int k = 0; k < d; k++) {
                int row = vocab ? m.sv.vmap[path[k]] : path[k];
                assert_true(row >= 0);
                want *= softmax_at(Z + (size_t)k * Vd, Vd, row);
            }
            worst = fmax(worst, fabs(b.conf_raw[i] - want) / want);
        }
        restore_states(tt, &c, &f); /* the next anchor's prompt rows are the sequence's own */
        dr.ops->end(&dr, &rq);
        request_free(&rq, &tt->t);
    }
    printf("  %s%s: EAGLE-2 tree of 12 nodes (width 3) at 3 anchors equal to the reference builder's; each node's path "
           "probability vs the training step on its path: worst relative error %.2e\n",
           kind, vocab ? ", draft vocabulary 40 of 48" : "", worst);
    assert_int_equal(deepest, DEPTH); /* the third level's pass ran */
    draft_block_free(&b);
    mtp_model_free(&m);
    drafter_close(&dr);
    free(f.taps), free(f.cap), free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

static void test_tree_paths(void **state) {
    (void)state;
    assert_true(tree_paths("mtp", 0) < 1e-5);
    assert_true(tree_paths("eagle3", 1) < 1e-5);
}

static void test_train_serve_chain(void **state) {
    (void)state;
    const char *kinds[] = {"mtp", "eagle3"};
    for (int i = 0; i < 2; i++) {
        assert_true(train_serve_chain(kinds[i], "f32", 0, 4) < 1e-5);
        assert_true(train_serve_chain(kinds[i], "f32", 1, 4) < 1e-5);
        double q8 = train_serve_chain(kinds[i], "q8_0", 1, 4);
        assert_true(q8 < 0.05 && q8 > 1e-7);
        /* a prompt longer than begin's chunk: its rows' caches and the last row's state across chunks */
        assert_true(train_serve_chain(kinds[i], "f32", 0, LONG_AT) < 1e-5);
        q8 = train_serve_chain(kinds[i], "q8_0", 0, LONG_AT); /* the rounding spreads 0.02-0.065 over prompts of 100-293 */
        assert_true(q8 < 0.1 && q8 > 1e-7);
    }
}

/* served in fp32 on the host: the training step's own operations; in Q8_0 or Q4_1 on the backend's
 * int8 kernels: within the rounding's bound, and not equal (the quantized path really ran), Q4_1's
 * rounding the coarser */
static void test_train_serve_first(void **state) {
    (void)state;
    const char *kinds[] = {"mtp", "eagle3"};
    for (int i = 0; i < 2; i++) {
        assert_true(train_serve_first(kinds[i], "f32") < 1e-4);
        double q8 = train_serve_first(kinds[i], "q8_0"), q4 = train_serve_first(kinds[i], "q4_1");
        assert_true(q8 < 0.05 && q8 > 1e-6);
        if (!(q4 < 0.5 && q4 > q8)) fail_msg("%s: q4_1 served vs trained %g (q8_0 %g)", kinds[i], q4, q8);
    }
}

/* mtp_model_init's draw with a random block (init_layer -1): every norm 1 but the shared head's (the
 * target's final norm), every matrix N(0, 0.02^2) but the residual outputs wo and w_down (N(0, 0.02^2 / 2),
 * GPT-2's scaling), each tensor's own sample moments; eagle3's fusion F = [0 .. 0 I]; a copied layer; none
 * on a target whose layers the training ops cannot run */
static void test_init_draw(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    const char *kinds[2] = {"mtp", "eagle3"};
    for (int ki = 0; ki < 2; ki++) {
        mtp_config c;
        assert_int_equal(mtp_config_init(&c, &tt->t.m, kinds[ki], NULL), 0);
        c.init_layer = -1;
        mtp_model m;
        assert_int_equal(mtp_model_init(&m, &c, &tt->t.m, 5, 0, NULL), 0);
        int D = c.dim;
        for (int i = 0; i < MTP_N_TENSORS; i++) {
            const train_tensor *t = &m.tt[i];
            const float *p = m.params + t->offset;
            if (!t->numel) continue;
            if (i == 12) { /* shared_head.norm */
                assert_memory_equal(p, tt->t.m.out_norm, sizeof(float) * D);
            } else if (i == 13) { /* F: [D][n_tap D], the identity on the last tap's columns */
                size_t W = (size_t)c.n_tap * D;
                for (size_t r = 0; r < (size_t)D; r++)
                    for (size_t k = 0; k < W; k++)
                        if (p[r * W + k] != (k == W - D + r ? 1.0f : 0.0f)) fail_msg("%s: F[%zu][%zu] = %g", kinds[ki], r, k, p[r * W + k]);
            } else if (!t->decay) {
                for (size_t k = 0; k < t->numel; k++)
                    if (p[k] != 1.0f) fail_msg("%s: %s[%zu] = %g, not 1", kinds[ki], MTP_TENSOR_NAMES[i], k, p[k]);
            } else {
                double s1 = 0, s2 = 0, n = (double)t->numel, want = i == 7 || i == 11 ? 0.02 / sqrt(2.0) : 0.02;
                for (size_t k = 0; k < t->numel; k++) s1 += p[k], s2 += (double)p[k] * p[k];
                double mean = s1 / n, sd = sqrt(s2 / n - mean * mean);
                if (fabs(sd - want) > 0.08 * want || fabs(mean) > 0.1 * want)
                    fail_msg("%s: %s mean %g, sd %g (want 0, %g)", kinds[ki], MTP_TENSOR_NAMES[i], mean, sd, want);
            }
        }
        mtp_model_free(&m);
    }
    /* init_layer L: the block starts as the target's layer L, layer 0 included (its norms are the target's
     * own, not 1) */
    for (int L = 0; L < tt->t.m.cfg.n_layers; L += tt->t.m.cfg.n_layers - 1) {
        mtp_config c;
        assert_int_equal(mtp_config_init(&c, &tt->t.m, "mtp", NULL), 0);
        c.init_layer = L;
        mtp_model m;
        assert_int_equal(mtp_model_init(&m, &c, &tt->t.m, 5, 0, NULL), 0);
        assert_memory_equal(m.pv.attn_norm, tt->t.m.layers[L].attn_norm, sizeof(float) * c.dim);
        assert_memory_equal(m.pv.ffn_norm, tt->t.m.layers[L].ffn_norm, sizeof(float) * c.dim);
        mtp_model_free(&m);
    }
    tiny_close(tt);
    /* a Qwen2 target (half-rotation RoPE, which the training ops do not rotate): no layer to copy, the
     * block random by default, and a layer asked for refused by its key */
    tt = tiny_open_family(2);
    mtp_config c;
    assert_int_equal(mtp_config_init(&c, &tt->t.m, "mtp", NULL), 0);
    assert_int_equal(c.init_layer, -1);
    cJSON *j = cJSON_Parse("{\"kind\": \"mtp\", \"init_layer\": 2}");
    assert_int_equal(mtp_config_init(&c, &tt->t.m, "mtp", j), -1);
    assert_non_null(strstr(ds_errmsg(), "init_layer"));
    cJSON_Delete(j);
    tiny_close(tt);
}

/* the layers each kind reads by default, in its config and in what the drafter asks the loop to capture:
 * mtp the last; eagle3 EAGLE-3's low, middle and high (layers 2, L/2 and L-3 counted from 1) from 8
 * layers on, a shallower target's first and last */
static void test_default_taps(void **state) {
    (void)state;
    struct { int L, n, t[3]; } want[] = {{3, 2, {0, 2}}, {7, 2, {0, 6}}, {8, 3, {1, 3, 5}}, {13, 3, {1, 5, 10}}};
    for (int w = 0; w < 4; w++) {
        tiny_spec s = {32, want[w].L, 4, 2, 64, 48, GGML_F32, GGML_F32, 0, 10000};
        tiny_target *tt = tiny_open_spec(&s);
        const char *kinds[2] = {"mtp", "eagle3"};
        for (int k = 0; k < 2; k++) {
            int n = k ? want[w].n : 1, last = want[w].L - 1;
            const int *t = k ? want[w].t : &last;
            mtp_config c;
            assert_int_equal(mtp_config_init(&c, &tt->t.m, kinds[k], NULL), 0);
            drafter dr;
            cJSON *cfg = cJSON_Parse("{\"seed\": 2}");
            if (drafter_open(&dr, kinds[k], cfg, &tt->t)) fail_msg("%s", ds_errmsg());
            cJSON_Delete(cfg);
            if (c.n_tap != n || dr.n_capture != n) fail_msg("%s, %d layers: %d taps, %d captured, want %d", kinds[k], s.n_layers, c.n_tap, dr.n_capture, n);
            for (int i = 0; i < n; i++)
                if (c.taps[i] != t[i] || dr.capture_layers[i] != t[i])
                    fail_msg("%s, %d layers: tap %d is layer %d (captured %d), want %d", kinds[k], s.n_layers, i, c.taps[i], dr.capture_layers[i], t[i]);
            drafter_close(&dr);
        }
        tiny_close(tt);
    }
}

/* begin on seq[0..c), propose (its speculative rows enter the module's cache), commit j of them:
 * the next proposal must equal a fresh begin's on seq[0..c+j+1) — the rejected rows left nothing */
static void cache_rollback(const char *kind) {
    tiny_target *tt = tiny_open();
    cJSON *cfg = cJSON_Parse("{\"depth\": 3, \"seed\": 4}");
    drafter dr;
    if (drafter_open(&dr, kind, cfg, &tt->t)) fail_msg("%s", ds_errmsg());
    int n = 30, seq[30], nc = dr.n_capture, D = tt->t.m.cfg.dim, V = tt->t.m.cfg.vocab_size;
    rng_t r;
    rng_seed(&r, 3);
    for (int i = 0; i < n; i++) seq[i] = (int)(rng_u64(&r) % 46);
    float *hid = target_states(&tt->t, seq, n, nc, dr.capture_layers);
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block a, b;
    assert_int_equal(draft_block_init(&a, 3, V, 1), 0);
    assert_int_equal(draft_block_init(&b, 3, V, 1), 0);
    double worst = 0;
    for (int c = 4; c <= 20; c += 4)
        for (int j = 0; j <= 2; j++) {
            request ra, rb;
            assert_int_equal(request_init(&ra, &tt->t, 0, seq, c, 16, 7), 0);
            assert_int_equal(ivec_push(&ra.toks, seq[c]), 0);
            float *pa = pack_rows(hid, nc, n, D, 0, c), *rows = pack_rows(hid, nc, n, D, c, j + 1);
            float *pb = pack_rows(hid, nc, n, D, 0, c + j + 1);
            if (dr.ops->begin(&dr, &ra, pa)) fail_msg("%s", ds_errmsg());
            if (dr.ops->propose(&dr, &ra, 3, &sp, &a)) fail_msg("%s", ds_errmsg());
            for (int i = 1; i <= j + 1; i++) assert_int_equal(ivec_push(&ra.toks, seq[c + i]), 0);
            if (dr.ops->commit(&dr, &ra, j, seq[c + j + 1], rows)) fail_msg("%s", ds_errmsg());
            rng_seed(&ra.rng_draft, 99);
            if (dr.ops->propose(&dr, &ra, 3, &sp, &a)) fail_msg("%s", ds_errmsg());
            assert_int_equal(request_init(&rb, &tt->t, 0, seq, c + j + 1, 16, 7), 0);
            assert_int_equal(ivec_push(&rb.toks, seq[c + j + 1]), 0);
            if (dr.ops->begin(&dr, &rb, pb)) fail_msg("%s", ds_errmsg());
            free(pa), free(rows), free(pb);
            rng_seed(&rb.rng_draft, 99);
            if (dr.ops->propose(&dr, &rb, 3, &sp, &b)) fail_msg("%s", ds_errmsg());
            assert_int_equal(a.n, 3);
            assert_int_equal(b.n, 3);
            assert_memory_equal(a.tok, b.tok, sizeof(int) * 3);
            for (int i = 0; i < 3 * V; i++) worst = fmax(worst, fabs((double)a.q[i] - b.q[i]));
            dr.ops->end(&dr, &ra), dr.ops->end(&dr, &rb);
            request_free(&ra, &tt->t), request_free(&rb, &tt->t);
        }
    printf("  %s cache after commits of 0-2 of 3 drafts: next drafts equal a fresh begin's (worst |dq| %.2e)\n", kind,
           worst);
    assert_true(worst < 1e-5);
    draft_block_free(&a), draft_block_free(&b);
    drafter_close(&dr);
    cJSON_Delete(cfg);
    free(hid);
    tiny_close(tt);
}

static void test_cache_rollback(void **state) {
    (void)state;
    cache_rollback("mtp");
    cache_rollback("eagle3");
}

static int load_mtp(const char *dir, const model *t) {
    mtp_model m;
    if (mtp_load(&m, dir, t, "mtp", 0)) return -1;
    mtp_model_free(&m);
    return 0;
}

static void test_checkpoint(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    mtp_config c;
    assert_int_equal(mtp_config_init(&c, &tt->t.m, "mtp", NULL), 0);
    c.depth = 2;
    c.contract.n_calib = 2, c.contract.calib[0] = 1.5f, c.contract.calib[1] = 0.7f;
    mtp_model m, m2;
    assert_int_equal(mtp_model_init(&m, &c, &tt->t.m, 7, 0, NULL), 0);
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s", tmp_path("mtp-ck"));
    assert_int_equal(mtp_save(&m, dir), 0);
    assert_int_equal(mtp_load(&m2, dir, &tt->t.m, "mtp", 0), 0);
    assert_int_equal(m2.cfg.depth, 2);
    assert_int_equal(m2.cfg.contract.n_calib, 2);
    assert_true(m2.cfg.contract.calib[1] == 0.7f);
    assert_memory_equal(m.params, m2.params, sizeof(float) * m.n_params);
    mtp_model_free(&m2);
    drafter d;
    checkpoint_serves(&tt->t, "mtp", dir, "\"depth\": 3", "depth", &d);
    assert_int_equal(d.max_gamma, 2);
    assert_int_equal(d.n_capture, 1);
    assert_int_equal(d.capture_layers[0], tt->t.m.cfg.n_layers - 1);
    drafter_close(&d);
    const char *const bad[][2] = {{"{\"kind\": \"mtp\", \"depth\": 2, \"dim\": 64}", "dim"},
                            {"{\"kind\": \"mtp\", \"depth\": 2, \"n_kv_heads\": 4}", "heads"},
                            {"{\"kind\": \"mtp\", \"target_fingerprint\": \"0123\"}", "trained against"},
                            {"{\"kind\": \"medusa\", \"depth\": 2}", "not a mtp checkpoint"},
                            {"{\"kind\": \"mtp\", \"dpeth\": 3}", "dpeth"},
                            {"{\"kind\": \"mtp\", \"depth\": 40}", "depth"},
                            {"{\"kind\": \"mtp\", \"hidden_dim\": 16}", "init_layer"}};
    checkpoint_refusals(dir, &tt->t.m, load_mtp, bad, sizeof bad / sizeof *bad);
    snprintf(p, sizeof p, "%s/config.json", dir);
    /* a checkpoint whose tensor has the wrong shape */
    c.hidden_dim = 16, c.init_layer = -1;
    assert_int_equal(mtp_model_init(&m2, &c, &tt->t.m, 7, 0, NULL), 0);
    assert_int_equal(mtp_save(&m2, dir), 0);
    const char *cj = "{\"kind\": \"mtp\", \"depth\": 2, \"hidden_dim\": 64, \"init_layer\": -1}";
    write_file(p, cj, strlen(cj));
    mtp_model m3;
    assert_int_equal(mtp_load(&m3, dir, &tt->t.m, "mtp", 0), -1);
    assert_non_null(strstr(ds_errmsg(), "wrong shape"));
    mtp_model_free(&m2);
    /* a draft vocabulary: its ids round-trip; a recorded hash they do not have is refused */
    int ids[30];
    for (int j = 0; j < 30; j++) ids[j] = (j * 11 + 4) % c.vocab;
    c.hidden_dim = tt->t.m.cfg.hidden_dim, c.contract.draft_vocab = 30;
    assert_int_equal(mtp_model_init(&m2, &c, &tt->t.m, 7, 0, ids), 0);
    assert_int_equal(mtp_save(&m2, dir), 0);
    assert_int_equal(mtp_load(&m3, dir, &tt->t.m, "mtp", 0), 0);
    assert_int_equal(m3.sv.Vd, 30);
    assert_memory_equal(m3.sv.vid, ids, sizeof ids);
    mtp_model_free(&m3);
    const char *hj = "{\"kind\": \"mtp\", \"depth\": 2, \"init_layer\": -1, \"draft_vocab\": 30, "
                     "\"vocab_hash\": \"0123456789abcdef\"}";
    write_file(p, hj, strlen(hj));
    assert_int_equal(mtp_load(&m3, dir, &tt->t.m, "mtp", 0), -1);
    assert_non_null(strstr(ds_errmsg(), "vocab_hash"));
    mtp_model_free(&m2);
    mtp_model_free(&m);
    rm_dir(dir);
    tiny_close(tt);
}

/* The overfit gate (train_fixture.h): the module trained on one cached sequence of random tokens
 * through the shared loop, served from its checkpoint through the registry, must draft the memorised
 * tokens back at every cut, before and after a commit; then the decoding loop at T = 0 must emit the
 * target's own output. */
static void overfit_gate(const char *kind, int vocab) {
    overfit g;
    /* the cache taps layer 0 too (one cache for several families): training must pick the module's
     * layer out of it, or serving (which reads the last layer) drafts nothing back */
    overfit_open(&g, "mtp-overfit", 0, 46, 2, (int[]){0, -1});
    int n = OVERFIT_N, tap = g.tt->t.m.cfg.n_layers - 1;
    { /* the picked layer's rows are the cache's second tap, row by row */
        int D = g.tt->t.m.cfg.dim, sel[1];
        float *all = malloc(sizeof(float) * (size_t)n * 2 * D), *one = malloc(sizeof(float) * (size_t)n * D);
        assert_int_equal(traindata_select_taps(&g.d, &tap, 1, sel), 0);
        assert_int_equal(sel[0], 1);
        traindata_seq(&g.d, 0, NULL, 0, all, NULL);
        traindata_seq(&g.d, 0, sel, 1, one, NULL);
        for (int i = 0; i < n; i++) assert_memory_equal(one + (size_t)i * D, all + ((size_t)i * 2 + 1) * D, sizeof(float) * D);
        free(all), free(one);
    }
    mtp_config c;
    assert_int_equal(mtp_config_init(&c, &g.tt->t.m, kind, NULL), 0);
    c.depth = DEPTH;
    c.w_ce = 1, c.w_l1 = 0; /* memorise the data's tokens, not the random target's law */
    /* with a draft vocabulary: the 46 ids the sequence draws from, scrambled (row j is not token j) */
    int ids[46];
    for (int j = 0; j < 46; j++) ids[j] = (j * 7 + 3) % 46;
    c.contract.draft_vocab = vocab ? 46 : 0;
    mtp_model m;
    assert_int_equal(mtp_model_init(&m, &c, &g.tt->t.m, 5, 1, vocab ? ids : NULL), 0);
    trainable tr;
    assert_int_equal(mtp_trainable(&m, &tr), 0);
    int wrong[2] = {1, 1}; /* a cache without the layer a drafter reads is refused by name */
    tr.taps = wrong;
    assert_int_equal(train_run(&tr, &g.d, &g.o, g.h, 400, &g.nh), -1);
    if (!strstr(ds_errmsg(), "taps layers 0,2; the drafter reads layer 1")) fail_msg("unexpected message: %s", ds_errmsg());
    tr.taps = m.cfg.taps;
    overfit_train(&g, &tr);
    char what[100];
    snprintf(what, sizeof what, "%s (depth %d, %d tap%s%s)", kind, DEPTH, c.n_tap, c.n_tap > 1 ? "s fused" : "",
             vocab ? ", draft vocabulary 46 of 48" : "");
    drafter dr;
    overfit_serve(&g, kind, "", DEPTH, what, &dr);
    assert_int_equal(dr.n_capture, c.n_tap);
    drafter_close(&dr);
    mtp_model_free(&m);
    overfit_close(&g);
}

static void test_overfit_gate(void **state) {
    (void)state;
    overfit_gate("mtp", 0);
}
static void test_overfit_gate_vocab(void **state) {
    (void)state;
    overfit_gate("mtp", 1);
}
static void test_overfit_gate_eagle3(void **state) {
    (void)state;
    overfit_gate("eagle3", 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_final),
        cmocka_unit_test(test_grad_topk),
        cmocka_unit_test(test_grad_vocab),
        cmocka_unit_test(test_train_serve_first),
        cmocka_unit_test(test_train_serve_chain),
        cmocka_unit_test(test_tree_paths),
        cmocka_unit_test(test_init_draw),
        cmocka_unit_test(test_default_taps),
        cmocka_unit_test(test_cache_rollback),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_overfit_gate),
        cmocka_unit_test(test_overfit_gate_vocab),
        cmocka_unit_test(test_overfit_gate_eagle3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
