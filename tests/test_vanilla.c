/* test_vanilla — the distilled small LM (vanilla_lm.h) as a trainable model and as the `vanilla`
 * drafter, on a tiny target the test writes itself: the training loss's gradient against finite
 * differences (both target sides, every tensor of every layer, with and without a draft vocabulary),
 * the float step against the double one, every supervised position trained vs served (fp32 equal to
 * the rounding, Q8_0 within its bound), the LM's KV cache after a rejection, checkpoints round-tripping
 * and refused when they do not belong, the one-sequence overfit gate through the shared loop, and a
 * separate draft LM's levers on SmolLM2 (a draft vocabulary by merge rank, its head re-quantized). */
#include "testutil.h"

#include "../datasets/traindata.h"
#include "../drafters/vanilla_lm.h"
#include "../engine/decode.h"
#include "../engine/train.h"
#include "../schedulers/scheduler.h"
#include "train_fixture.h"

#define FIX_PROMPT 3
#define FIX_K 8
#define DEPTH 3
#define NA 6

typedef struct {
    int T, tokens[40], anchor[NA], n_valid[NA];
    float *final;
    int32_t tk_id[40 * FIX_K];
    float tk_lp[40 * FIX_K];
} seq_fix;

static void make_seq(tiny_target *tt, seq_fix *f) {
    rng_t r;
    rng_seed(&r, 5);
    f->T = 36;
    for (int i = 0; i < f->T; i++) f->tokens[i] = (int)(rng_u64(&r) % 46);
    int D = tt->t.m.cfg.dim, V = tt->t.m.cfg.vocab_size;
    f->final = malloc(sizeof(float) * f->T * D);
    kv_cache *kv = kv_cache_new(tt->t.be, &tt->t.m.cfg, f->T);
    float *logits = malloc(sizeof(float) * f->T * V);
    fwd_batch b = {.n_seq = 1, .kv = &kv, .n_new = &f->T, .tokens = f->tokens, .all_logits = 1, .logits = logits,
                   .final_hidden = f->final};
    assert_int_equal(model_forward(&tt->t.m, &tt->t.fs, &b), 0);
    for (int i = 0; i < f->T - FIX_PROMPT; i++)
        topk_logprobs(logits + (size_t)(FIX_PROMPT - 1 + i) * V, V, FIX_K, f->tk_id + i * FIX_K, f->tk_lp + i * FIX_K);
    free(logits);
    kv_cache_free(tt->t.be, kv);
    int anchors[NA] = {3, 9, 11, 20, 32, 34}; /* 9 and 11 overlap: a row supervised twice */
    for (int a = 0; a < NA; a++) {
        f->anchor[a] = anchors[a];
        f->n_valid[a] = DS_MIN(DEPTH, f->T - 1 - anchors[a]); /* the last are cut short */
    }
}

static void lm_config(tiny_target *tt, vlm_config *c, int n_layers, int vocab) {
    assert_int_equal(vlm_config_init(c, &tt->t.m, NULL), 0);
    c->n_layers = n_layers;
    c->c.depth = DEPTH;
    c->c.contract.draft_vocab = vocab;
    assert_int_equal(vlm_config_check(c, &tt->t.m), 0);
}

typedef struct {
    const vlm_config *c;
    const subvocab *sv;
    mtp_pv_d P[VLM_MAX_LAYERS];
    double *fn, *Ein, *E;
    train_seq_d s;
    double w;
    vlm_ws_d ws;
} dctx;

static double loss_d(void *ctx) {
    dctx *x = ctx;
    train_stats st;
    memset(&st, 0, sizeof st);
    if (vlm_step_d(x->c, x->P, x->fn, NULL, NULL, x->Ein, x->E, x->sv->Vd, x->sv->vmap, &x->s, x->w, &st, &x->ws))
        fail_msg("%s", ds_errmsg());
    return (x->c->c.w_ce * st.ce + x->c->c.w_l1 * st.l1) / x->w;
}

/* target: 0 = the final states (full law), 1 = the cached top-8 rows; vocab: a draft vocabulary of
 * 40 of the 48 ids in a scrambled order */
static void gradcheck(int target, int vocab, int family) {
    tiny_target *tt = tiny_open_family(family);
    vlm_config c;
    lm_config(tt, &c, 2, vocab ? 40 : 0);
    c.c.w_ce = 0.3f, c.c.w_l1 = 0.7f;
    int ids[40];
    for (int j = 0; j < 40; j++) ids[j] = (j * 5 + 1) % c.c.vocab;
    vlm_model m;
    assert_int_equal(vlm_model_init(&m, &c, &tt->t.m, 3, 1, vocab ? ids : NULL), 0);
    rng_t r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] += 0.2f * (float)(rng_uniform(&r) - 0.5); /* the norms too */
    seq_fix f;
    make_seq(tt, &f);
    int D = c.c.dim;
    size_t nE = (size_t)c.c.vocab * D, nEh = (size_t)m.sv.Vd * D, nt = (size_t)f.T * D;
    dctx x;
    memset(&x, 0, sizeof x);
    x.c = &m.cfg;
    x.sv = &m.sv;
    double *p = malloc(sizeof(double) * m.n_params), *fin = malloc(sizeof(double) * nt);
    x.Ein = malloc(sizeof(double) * nE);
    x.E = malloc(sizeof(double) * nEh);
    for (size_t i = 0; i < m.n_params; i++) p[i] = m.params[i];
    for (size_t i = 0; i < nE; i++) x.Ein[i] = m.Ein[i];
    for (size_t i = 0; i < nEh; i++) x.E[i] = m.E[i];
    for (size_t i = 0; i < nt; i++) fin[i] = f.final[i];
    vlm_views_d(&m, p, x.P, &x.fn);
    train_seq sf = {f.T, NULL, target ? NULL : f.final, f.tokens, FIX_PROMPT, FIX_K, target ? f.tk_id : NULL,
                    target ? f.tk_lp : NULL, NA, f.anchor, f.n_valid};
    x.s = (train_seq_d){f.T, NULL, target ? NULL : fin, f.tokens, FIX_PROMPT, FIX_K, sf.tk_id, sf.tk_lp, NA, f.anchor,
                        f.n_valid};
    for (int a = 0; a < NA; a++) x.w += f.n_valid[a];
    double *gd = calloc(m.n_params, sizeof(double)), *dfn_d;
    float *gf = calloc(m.n_params, sizeof(float)), *dfn_f;
    mtp_pv_d Gd[VLM_MAX_LAYERS];
    mtp_pv_f Gf[VLM_MAX_LAYERS];
    vlm_views_d(&m, gd, Gd, &dfn_d);
    vlm_views_f(&m, gf, Gf, &dfn_f);
    train_stats st;
    memset(&st, 0, sizeof st);
    if (vlm_step_d(&m.cfg, x.P, x.fn, Gd, dfn_d, x.Ein, x.E, m.sv.Vd, m.sv.vmap, &x.s, x.w, &st, &x.ws))
        fail_msg("%s", ds_errmsg());
    assert_int_equal(st.rows, (long)x.w);
    assert_true(st.n_at[DEPTH] > 0);
    if (vocab) assert_true(st.label_outside > 0); /* the path for tokens outside the draft vocabulary ran */
    memset(&st, 0, sizeof st);
    if (vlm_step_f(&m.cfg, m.lay, m.final_norm, Gf, dfn_f, m.Ein, m.E, m.sv.Vd, m.sv.vmap, &sf, x.w, &st, &m.ws))
        fail_msg("%s", ds_errmsg());
    double worst = 0, worst_f = 0;
    for (int ti = 0; ti < m.n_t; ti++) {
        const train_tensor *t = &m.tt[ti];
        char what[80];
        snprintf(what, sizeof what, "vanilla: tensor %s", m.names[ti]);
        double rel_f, rel = fd_check_tensor(loss_d, &x, p + t->offset, gd + t->offset, gf + t->offset, t->numel, &r,
                                            what, &rel_f);
        worst = fmax(worst, rel), worst_f = fmax(worst_f, rel_f);
    }
    printf("  vanilla LM of a %s target, 2 layers, depth %d, target %s%s: %d tensors; worst relative error vs finite "
           "differences %.2e (double); float vs double gradient %.2e\n", family ? "Qwen2" : "Llama",
           DEPTH, target ? "top-8" : "final states", vocab ? ", draft vocabulary 40 of 48" : "", m.n_t, worst, worst_f);
    assert_int_equal(m.per_layer, family == 2 ? 12 : 9); /* Qwen2's q/k/v biases are trained */
    assert_int_equal(m.n_t, 2 * m.per_layer + 1);
    vlm_ws_free_d(&x.ws);
    free(gd), free(gf), free(p), free(x.Ein), free(x.E), free(fin), free(f.final);
    vlm_model_free(&m);
    tiny_close(tt);
}

static void test_grad_final(void **state) {
    (void)state;
    gradcheck(0, 0, 0);
    gradcheck(0, 0, 2);
}
static void test_grad_topk(void **state) {
    (void)state;
    gradcheck(1, 0, 0);
    gradcheck(1, 1, 0);
    gradcheck(1, 1, 2);
}

static void save_lm(tiny_target *tt, vlm_model *m, int seed, const char *name, char *dir, size_t n) {
    vlm_config c;
    lm_config(tt, &c, 2, 0);
    assert_int_equal(vlm_model_init(m, &c, &tt->t.m, (uint64_t)seed, 1, NULL), 0);
    rng_t rr;
    rng_seed(&rr, 12); /* off the target's own layers, so that a served copy of those would be caught */
    for (size_t i = 0; i < m->n_params; i++) m->params[i] += 0.1f * (float)(rng_uniform(&rr) - 0.5);
    snprintf(dir, n, "%s", tmp_path(name));
    assert_int_equal(vlm_save(m, dir), 0);
}

/* Every supervised position, trained and served: the training step's logits row of anchor a,
 * position k (row a+k-1, full-vocabulary path) against the drafter's, served from a begin on the
 * sequence up to row a+k-1 through the target runtime's forward; compared through c_raw (the top
 * probability of the row). */
static double train_serve(const char *precision, int family) {
    tiny_target *tt = tiny_open_family(family);
    seq_fix f;
    make_seq(tt, &f);
    vlm_model m;
    char dir[600], cj[800];
    save_lm(tt, &m, 6, "vanilla-serve", dir, sizeof dir);
    snprintf(cj, sizeof cj, "{\"checkpoint\": \"%s\", \"block_precision\": \"%s\"}", dir, precision);
    cJSON *cfg = cJSON_Parse(cj);
    drafter dr;
    if (drafter_open(&dr, "vanilla", cfg, &tt->t)) fail_msg("%s", ds_errmsg());
    assert_int_equal(dr.has_conf, 1);
    int V = m.cfg.c.vocab;
    train_seq sf = {f.T, NULL, f.final, f.tokens, FIX_PROMPT, FIX_K, NULL, NULL, NA, f.anchor, f.n_valid};
    train_stats st;
    memset(&st, 0, sizeof st);
    if (vlm_step_f(&m.cfg, m.lay, m.final_norm, NULL, NULL, m.Ein, m.E, m.sv.Vd, m.sv.vmap, &sf, 1, &st, &m.ws))
        fail_msg("%s", ds_errmsg());
    sampling_params greedy = {0, 0, 1};
    draft_block b;
    assert_int_equal(draft_block_init(&b, 1, V, 1), 0);
    double worst = 0;
    int rows = 0;
    for (int a = 0, i = 0; a < NA; a++)
        for (int k = 1; k <= f.n_valid[a]; k++, i++) {
            int row = f.anchor[a] + k - 1;
            const float *z = m.ws.base.Z + (size_t)i * V; /* rows by anchor then position */
            double mx = z[0], sum = 0;
            for (int j = 1; j < V; j++) mx = fmax(mx, z[j]);
            for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
            request r;
            assert_int_equal(request_init(&r, &tt->t, 0, f.tokens, row, 8, 1), 0);
            assert_int_equal(ivec_push(&r.toks, f.tokens[row]), 0);
            if (dr.ops->begin(&dr, &r, NULL)) fail_msg("%s", ds_errmsg());
            if (dr.ops->propose(&dr, &r, 1, &greedy, &b)) fail_msg("%s", ds_errmsg());
            worst = fmax(worst, fabs(b.conf_raw[0] - 1 / sum));
            dr.ops->end(&dr, &r);
            request_free(&r, &tt->t);
            rows++;
        }
    printf("  vanilla LM of a %s target, %d supervised rows trained vs served (layers %s): worst |top probability "
           "difference| %.2e\n", family ? "Qwen2" : "Llama", rows, precision, worst);
    draft_block_free(&b);
    vlm_model_free(&m);
    drafter_close(&dr);
    cJSON_Delete(cfg);
    free(f.final);
    rm_dir(dir);
    tiny_close(tt);
    return worst;
}

/* fp32: the forward's own operations in another order (bounded by the rounding); Q8_0 on the int8
 * kernels within the rounding's bound and not equal (the quantized path really ran) */
static void test_train_serve(void **state) {
    (void)state;
    assert_true(train_serve("f32", 0) < 1e-4);
    double q8 = train_serve("q8_0", 0);
    assert_true(q8 < 0.05 && q8 > 1e-6);
    /* Qwen2: the training ops' half-rotation RoPE and biases against the runtime's (served) forward */
    assert_true(train_serve("f32", 2) < 1e-4);
}

/* begin on seq[0..c), propose 3 (they enter the LM's cache), commit the first j and a new anchor: the
 * next proposal must equal a fresh begin's on that text — the rejected rows left nothing */
static void test_cache_rollback(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    cJSON *cfg = cJSON_Parse("{\"n_layers\": 2, \"seed\": 4}");
    drafter dr;
    if (drafter_open(&dr, "vanilla", cfg, &tt->t)) fail_msg("%s", ds_errmsg());
    int n = 30, seq[30], V = tt->t.m.cfg.vocab_size;
    rng_t r;
    rng_seed(&r, 3);
    for (int i = 0; i < n; i++) seq[i] = (int)(rng_u64(&r) % 46);
    sampling_params sp = {1.0f, 0, 1.0f};
    draft_block a, b;
    assert_int_equal(draft_block_init(&a, 3, V, 1), 0);
    assert_int_equal(draft_block_init(&b, 3, V, 1), 0);
    double worst = 0;
    for (int c = 4; c <= 20; c += 4)
        for (int jj = 0; jj <= 4; jj++) {
            request ra, rb;
            assert_int_equal(request_init(&ra, &tt->t, 0, seq, c, 16, 7), 0);
            assert_int_equal(ivec_push(&ra.toks, seq[c]), 0);
            if (dr.ops->begin(&dr, &ra, NULL)) fail_msg("%s", ds_errmsg());
            /* jj 0-2: the loop commits the drafts themselves, the first jj, then a new anchor;
             * 3: two tokens another drafter drafted (combine), the first not this one's x_1;
             * 4: a round this drafter did not propose in (combine chose a member without asking it) */
            int j = jj <= 2 ? jj : 2;
            if (jj != 4 && dr.ops->propose(&dr, &ra, 3, &sp, &a)) fail_msg("%s", ds_errmsg());
            int text[40];
            memcpy(text, seq, sizeof(int) * (size_t)(c + 1));
            if (jj <= 2) memcpy(text + c + 1, a.tok, sizeof(int) * (size_t)j);
            else text[c + 1] = (a.tok[0] + 1) % 46, text[c + 2] = a.tok[1];
            text[c + j + 1] = seq[c + j + 1];
            for (int i = 1; i <= j + 1; i++) assert_int_equal(ivec_push(&ra.toks, text[c + i]), 0);
            if (dr.ops->commit(&dr, &ra, j, text[c + j + 1], NULL)) fail_msg("%s", ds_errmsg());
            rng_seed(&ra.rng_draft, 99);
            if (dr.ops->propose(&dr, &ra, 3, &sp, &a)) fail_msg("%s", ds_errmsg());
            assert_int_equal(request_init(&rb, &tt->t, 0, text, c + j + 1, 16, 7), 0);
            assert_int_equal(ivec_push(&rb.toks, text[c + j + 1]), 0);
            if (dr.ops->begin(&dr, &rb, NULL)) fail_msg("%s", ds_errmsg());
            rng_seed(&rb.rng_draft, 99);
            if (dr.ops->propose(&dr, &rb, 3, &sp, &b)) fail_msg("%s", ds_errmsg());
            assert_int_equal(a.n, 3);
            assert_int_equal(b.n, 3);
            assert_memory_equal(a.tok, b.tok, sizeof(int) * 3);
            for (int i = 0; i < 3 * V; i++) worst = fmax(worst, fabs((double)a.q[i] - b.q[i]));
            dr.ops->end(&dr, &ra), dr.ops->end(&dr, &rb);
            request_free(&ra, &tt->t), request_free(&rb, &tt->t);
        }
    printf("  vanilla LM cache after commits of 0-2 of 3 drafts, of another drafter's tokens, and of a round it did not "
           "propose in: next drafts equal a fresh begin's (worst |dq| %.2e)\n",
           worst);
    assert_true(worst < 1e-5);
    draft_block_free(&a), draft_block_free(&b);
    drafter_close(&dr);
    cJSON_Delete(cfg);
    tiny_close(tt);
}

static int load_vlm(const char *dir, const model *t) {
    vlm_model m;
    if (vlm_load(&m, dir, t, 0)) return -1;
    vlm_model_free(&m);
    return 0;
}

/* The levers for a separate draft LM (the real pair's best rows): "draft_vocab" N by merge rank and
 * "head_type" (its head re-quantized), on SmolLM2 drafting for itself. subvocab_by_rank keeps every
 * special, end and byte token, then the lowest usable ids, and refuses fewer than the pinned ones; the
 * re-quantized head is the gathered one within its format's rounding; the drafter's q lives on exactly
 * the chosen ids and sums to one. */
static int pinned_tok(const tokenizer *tk, int v) {
    int ty = tk->type ? tk->type[v] : TOK_NORMAL;
    return ty == TOK_CONTROL || ty == TOK_USER || ty == TOK_BYTE || tokenizer_is_eog(tk, v) || v == tk->eos ||
           v == tk->bos;
}

/* subvocab_by_rank on a tokenizer written by hand (10 entries, a model vocabulary of 12): pinned are the
 * control, byte, end-of-generation, eos and bos ids whatever their type; unused ids and ids past the
 * tokenizer's never enter; a list longer than the usable ids or shorter than the pinned ones is refused.
 * Without token types, eos, bos and the end-of-generation ids alone are pinned. And the ids' hash (what a
 * checkpoint records) against FNV-1a over their little-endian bytes computed apart, so a checkpoint of an
 * earlier build still loads. */
static void test_subvocab_by_hand(void **state) {
    (void)state;
    int type[10] = {TOK_CONTROL, TOK_NORMAL, TOK_NORMAL, TOK_NORMAL, TOK_UNUSED, TOK_NORMAL, TOK_UNUSED, TOK_NORMAL,
                    TOK_NORMAL, TOK_BYTE};
    tokenizer tk;
    memset(&tk, 0, sizeof tk);
    tk.n_vocab = 10, tk.type = type, tk.bos = 1, tk.eos = 2, tk.eog[0] = 3, tk.n_eog = 1, tk.unk = tk.pad = -1;
    struct { int Vd, n, ids[8]; } want[] = {{5, 5, {0, 1, 2, 3, 9}}, {6, 6, {0, 1, 2, 3, 5, 9}},
                                            {7, 7, {0, 1, 2, 3, 5, 7, 9}}, {8, 8, {0, 1, 2, 3, 5, 7, 8, 9}}};
    subvocab s;
    for (int w = 0; w < 4; w++) {
        assert_int_equal(subvocab_by_rank(&s, &tk, 12, want[w].Vd), 0);
        assert_int_equal(s.Vd, want[w].n);
        assert_non_null(s.vid);
        for (int j = 0; j < want[w].n; j++)
            if (s.vid[j] != want[w].ids[j]) fail_msg("draft_vocab %d: id %d is %d, want %d", want[w].Vd, j, s.vid[j], want[w].ids[j]);
        for (int v = 0; v < 12; v++) {
            int j = -1;
            for (int i = 0; i < want[w].n; i++)
                if (want[w].ids[i] == v) j = i;
            assert_int_equal(s.vmap[v], j);
        }
        subvocab_free(&s);
    }
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 9), -1); /* 8 usable */
    assert_non_null(strstr(ds_errmsg(), "usable"));
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 4), -1); /* 5 pinned */
    assert_non_null(strstr(ds_errmsg(), "must be in it"));
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 12), 0);
    assert_null(s.vid);
    assert_int_equal(s.Vd, 12);
    subvocab_free(&s);
    tk.type = NULL; /* no types: every id of the tokenizer usable, eos, bos and the end pinned */
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 5), 0);
    int plain[5] = {0, 1, 2, 3, 4};
    assert_memory_equal(s.vid, plain, sizeof plain);
    subvocab_free(&s);
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 2), -1);
    tk.bos = 7, tk.eos = 8, tk.eog[0] = 9;
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 4), 0);
    int ends[4] = {0, 7, 8, 9};
    assert_memory_equal(s.vid, ends, sizeof ends);
    subvocab_free(&s);
    /* a head of another vocabulary's size is refused; a head re-quantized only to Q5_0 / Q4_1 and whole blocks */
    float hw[12 * 48];
    for (int i = 0; i < 12 * 48; i++) hw[i] = (float)(i % 7) - 3;
    qmat head = {GGML_F32, 10, 48, 48 * sizeof(float), hw};
    tk.type = type;
    assert_int_equal(subvocab_by_rank(&s, &tk, 12, 6), 0);
    assert_int_equal(subvocab_gather_head(&s, &head), -1);
    assert_non_null(strstr(ds_errmsg(), "10 rows"));
    head.rows = 12;
    assert_int_equal(subvocab_gather_head(&s, &head), 0);
    assert_int_equal(s.head.rows, 6);
    assert_memory_equal((const char *)s.head.data + 4 * head.row_bytes, hw + (size_t)s.vid[4] * 48, head.row_bytes); /* row 4: its id's */
    assert_int_equal(subvocab_requant_head(&s, GGML_Q5_0), -1); /* 48 columns: not whole blocks of 32 */
    assert_non_null(strstr(ds_errmsg(), "48 columns"));
    head.cols = 32, head.row_bytes = 32 * sizeof(float);
    assert_int_equal(subvocab_gather_head(&s, &head), 0);
    assert_int_equal(subvocab_requant_head(&s, GGML_Q8_0), -1);
    assert_int_equal(subvocab_requant_head(&s, GGML_Q4_1), 0);
    assert_int_equal(s.head.type, GGML_Q4_1);
    subvocab_free(&s);
    char h[20];
    subvocab_hash((const int[]){0, 1, 300, 151643}, 4, h);
    assert_string_equal(h, "75e6293ebf583cda");
}

/* subvocab's checkpoint: what it writes reads back; a tensor whose shape differs in any dimension, the
 * first included, is refused by name; a checkpoint over other draft ids is refused (resuming a run whose
 * cache chose another vocabulary); a folder that cannot be made fails the save */
static void test_subvocab_checkpoint(void **state) {
    (void)state;
    int a_ids[30], b_ids[30];
    for (int i = 0; i < 30; i++) a_ids[i] = i, b_ids[i] = i + 1;
    subvocab a, b, full;
    assert_int_equal(subvocab_set(&a, 48, a_ids, 30, NULL), 0);
    assert_int_equal(subvocab_set(&b, 48, b_ids, 30, NULL), 0);
    subvocab_full(&full, 48);
    float m[3 * 8], n[5], got_m[3 * 8], got_n[5];
    for (int i = 0; i < 24; i++) m[i] = 0.25f * (float)i - 1;
    for (int i = 0; i < 5; i++) n[i] = (float)i + 0.5f;
    const char *dir = tmp_path("subvocab-ckpt");
    st_write_tensor w[3] = {{"m", m, 2, {3, 8}}, {"n", n, 1, {5}}};
    assert_int_equal(subvocab_write_checkpoint(&a, dir, w, 2, cJSON_CreateObject()), 0);
    st_write_tensor r[2] = {{"m", got_m, 2, {3, 8}}, {"n", got_n, 1, {5}}};
    assert_int_equal(subvocab_read_checkpoint(&a, dir, r, 2), 0);
    assert_memory_equal(got_m, m, sizeof m);
    assert_memory_equal(got_n, n, sizeof n);
    /* shapes: each dimension of each tensor one short */
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < r[t].n_dims; d++) {
            r[t].shape[d]--;
            assert_int_equal(subvocab_read_checkpoint(&a, dir, r, 2), -1);
            if (!strstr(ds_errmsg(), "wrong shape") || !strstr(ds_errmsg(), r[t].name))
                fail_msg("tensor %s, dimension %d one short: %s", r[t].name, d, ds_errmsg());
            r[t].shape[d]++;
        }
    r[1].n_dims = 2, r[1].shape[1] = 1; /* [5] read as [5][1] */
    assert_int_equal(subvocab_read_checkpoint(&a, dir, r, 2), -1);
    r[1].n_dims = 1;
    /* another draft vocabulary of the same size: refused; the ids of the file are not read as the model's */
    assert_int_equal(subvocab_read_checkpoint(&b, dir, r, 2), -1);
    assert_non_null(strstr(ds_errmsg(), "vocab"));
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir); /* a regular file where a folder is needed */
    snprintf(p + strlen(p), sizeof p - strlen(p), "/sub");
    assert_int_equal(subvocab_write_checkpoint(&a, p, w, 2, cJSON_CreateObject()), -1);
    rm_dir(dir);
    assert_int_equal(subvocab_write_checkpoint(&full, dir, w, 2, cJSON_CreateObject()), 0); /* no vocab.ids */
    assert_int_equal(subvocab_read_checkpoint(&full, dir, r, 2), 0);
    assert_int_equal(subvocab_read_checkpoint(&a, dir, r, 2), -1); /* a draft vocabulary the file lacks */
    rm_dir(dir);
    subvocab_free(&b);
    /* malformed id lists, each named for what is wrong with it */
    assert_int_equal(subvocab_set(&b, 48, (const int[]){4, 0, 0}, 3, NULL), -1);
    assert_non_null(strstr(ds_errmsg(), "id 0 (row 2) is repeated"));
    assert_int_equal(subvocab_set(&b, 48, (const int[]){4, 48}, 2, NULL), -1);
    assert_non_null(strstr(ds_errmsg(), "id 48 (row 1) is outside"));
    assert_int_equal(subvocab_set(&b, 48, (const int[]){-1}, 1, NULL), -1);
    assert_non_null(strstr(ds_errmsg(), "is outside"));
    assert_int_equal(subvocab_set(&b, 48, a_ids, 30, "0123456789abcdef"), -1); /* the recorded hash */
    assert_non_null(strstr(ds_errmsg(), "vocab_hash 0123456789abcdef"));
    subvocab_free(&a);
}

static void test_draft_vocab_rank(void **state) {
    (void)state;
    target t;
    if (target_open(&t, real_model_path(), &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    const tokenizer *tk = &t.tk;
    const int V = t.m.cfg.vocab_size, Vd = 600;
    subvocab s;
    assert_int_equal(subvocab_by_rank(&s, tk, V, Vd), 0);
    assert_int_equal(s.Vd, Vd);
    int n_pin = 0, n_rest = 0, max_rest = -1;
    for (int v = 0; v < V; v++) n_pin += pinned_tok(tk, v);
    for (int j = 0; j < Vd; j++) {
        int v = s.vid[j];
        if (j) assert_true(v > s.vid[j - 1]);
        assert_int_equal(s.vmap[v], j);
        if (!pinned_tok(tk, v)) n_rest++, max_rest = v;
    }
    for (int v = 0; v < V; v++) {
        if (pinned_tok(tk, v)) assert_true(s.vmap[v] >= 0); /* every special, end and byte token */
        else if (v < max_rest && (!tk->type || tk->type[v] != TOK_UNUSED))
            assert_true(s.vmap[v] >= 0); /* the others: the lowest ids, none skipped */
    }
    assert_int_equal(n_rest, Vd - n_pin);
    assert_true(n_pin >= 1 && n_rest > 0);
    /* the head: gathered in the file's format, then re-quantized row by row within its rounding */
    assert_int_equal(subvocab_gather_head(&s, &t.m.output), 0);
    const int D = t.m.cfg.dim;
    float *orig = malloc(sizeof(float) * (size_t)Vd * D), *row = malloc(sizeof(float) * D);
    for (int j = 0; j < Vd; j++) qmat_row_f32(&s.head, j, orig + (size_t)j * D);
    for (int ty = 0; ty < 2; ty++) {
        uint32_t type = ty ? GGML_Q4_1 : GGML_Q5_0;
        subvocab r;
        assert_int_equal(subvocab_by_rank(&r, tk, V, Vd), 0);
        assert_int_equal(subvocab_gather_head(&r, &t.m.output), 0);
        assert_int_equal(subvocab_requant_head(&r, type), 0);
        assert_int_equal(r.head.type, type);
        assert_int_equal(r.head.rows, Vd);
        double worst = 0;
        for (int j = 0; j < Vd; j++) {
            qmat_row_f32(&r.head, j, row);
            const float *o = orig + (size_t)j * D;
            for (int b = 0; b < D; b += 32) {
                float lo = o[b], hi = o[b], am = 0;
                for (int i = b; i < b + 32; i++) lo = fminf(lo, o[i]), hi = fmaxf(hi, o[i]), am = fmaxf(am, fabsf(o[i]));
                /* Q5_0: a step of amax / 16, the clamped end a whole step; Q4_1: half of (max - min) / 15;
                 * both with fp16 scales (relative 2^-11 of the block's values) */
                double step = ty ? (hi - lo) / 15.0 * 0.5 : am / 16.0, bound = step * 1.01 + 2e-3 * am + 1e-7;
                for (int i = b; i < b + 32; i++) {
                    double e = fabs((double)row[i] - o[i]);
                    if (e > bound) fail_msg("%s head row %d col %d: %g vs %g (bound %g)", ggml_type_name(type), j, i,
                                            (double)row[i], (double)o[i], bound);
                    if (step > 0) worst = fmax(worst, e / step);
                }
            }
        }
        printf("  draft head re-quantized to %s: %d rows of %d, worst error %.3f of its step (Q5_0 amax / 16, Q4_1 (max - min) / 30)\n", ggml_type_name(type), Vd,
               D, worst);
        subvocab_free(&r);
    }
    free(orig), free(row);
    subvocab_free(&s);
    /* refused: fewer than the pinned tokens; the whole vocabulary at V or more */
    assert_int_equal(subvocab_by_rank(&s, tk, V, n_pin - 1), -1);
    assert_non_null(strstr(ds_errmsg(), "draft_vocab"));
    subvocab_free(&s);
    assert_int_equal(subvocab_by_rank(&s, tk, V, V), 0);
    assert_null(s.vid);
    subvocab_free(&s);
    /* the drafter: its q over exactly the chosen ids */
    char cfg[900];
    snprintf(cfg, sizeof cfg, "{\"model\": \"%s\", \"draft_vocab\": %d, \"head_type\": \"q5_0\"}", real_model_path(), Vd);
    cJSON *c = cJSON_Parse(cfg);
    drafter d;
    if (drafter_open(&d, "vanilla", c, &t)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(c);
    assert_non_null(strstr(d.describe, "draft vocabulary 600 of"));
    assert_non_null(strstr(d.describe, "head as q5_0"));
    assert_int_equal(subvocab_by_rank(&s, tk, V, Vd), 0);
    int prompt[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int i = 0; i < 12; i++) prompt[i] = s.vid[(i * 37 + 20) % Vd];
    request rq;
    draft_block blk;
    assert_int_equal(draft_block_init(&blk, 4, V, 1), 0);
    assert_int_equal(request_init(&rq, &t, 0, prompt, 11, 64, 3), 0);
    assert_int_equal(ivec_push(&rq.toks, prompt[11]), 0);
    if (d.ops->begin(&d, &rq, NULL)) fail_msg("%s", ds_errmsg());
    for (int temp = 0; temp < 2; temp++) {
        sampling_params sp = {temp ? 1.0f : 0.0f, 0, 1.0f};
        if (temp && d.ops->rewind(&d, &rq)) fail_msg("%s", ds_errmsg()); /* the same anchor again */
        if (d.ops->propose(&d, &rq, 4, &sp, &blk)) fail_msg("%s", ds_errmsg());
        assert_int_equal(blk.n, 4);
        for (int k = 0; k < 4; k++) {
            assert_true(s.vmap[blk.tok[k]] >= 0);
            double sum = 0, outside = 0;
            for (int v = 0; v < V; v++) sum += blk.q[(size_t)k * V + v], outside += s.vmap[v] < 0 ? blk.q[(size_t)k * V + v] : 0;
            assert_true(fabs(sum - 1) < 1e-4);
            assert_true(outside == 0);
        }
    }
    d.ops->end(&d, &rq);
    request_free(&rq, &t);
    draft_block_free(&blk);
    drafter_close(&d);
    subvocab_free(&s);
    target_close(&t);
}

static void test_checkpoint(void **state) {
    (void)state;
    tiny_target *tt = tiny_open();
    vlm_config c;
    lm_config(tt, &c, 2, 0);
    c.c.contract.n_calib = 2, c.c.contract.calib[0] = 1.5f, c.c.contract.calib[1] = 0.7f;
    vlm_model m, m2;
    assert_int_equal(vlm_model_init(&m, &c, &tt->t.m, 7, 0, NULL), 0);
    /* step 0 is the self-draft of the target's first layers */
    assert_memory_equal(m.lay[1].attn_norm, tt->t.m.layers[1].attn_norm, sizeof(float) * (size_t)c.c.dim);
    assert_memory_equal(m.final_norm, tt->t.m.out_norm, sizeof(float) * (size_t)c.c.dim);
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s", tmp_path("vanilla-ck"));
    assert_int_equal(vlm_save(&m, dir), 0);
    assert_int_equal(vlm_load(&m2, dir, &tt->t.m, 0), 0);
    assert_int_equal(m2.cfg.n_layers, 2);
    assert_int_equal(m2.cfg.c.contract.n_calib, 2);
    assert_true(m2.cfg.c.contract.calib[1] == 0.7f);
    assert_memory_equal(m.params, m2.params, sizeof(float) * m.n_params);
    vlm_model_free(&m2);
    drafter d;
    checkpoint_serves(&tt->t, "vanilla", dir, "\"layers\": 3", "one of", &d); /* a self-draft and a checkpoint at once */
    assert_int_equal(d.n_capture, 0);
    /* the fingerprint a trace records names the weights: the same checkpoint twice alike, one weight
     * moved another (kind and parameter count alone named every 2-layer checkpoint alike) */
    {
        char fp1[64], fp2[64], dir2[640];
        snprintf(fp1, sizeof fp1, "%s", d.fingerprint);
        drafter_close(&d);
        assert_non_null(strstr(fp1, "-w"));
        checkpoint_serves(&tt->t, "vanilla", dir, "\"layers\": 3", "one of", &d);
        assert_string_equal(d.fingerprint, fp1);
        drafter_close(&d);
        vlm_model m4;
        assert_int_equal(vlm_load(&m4, dir, &tt->t.m, 0), 0);
        m4.params[m4.n_params / 2] += 1e-3f;
        snprintf(dir2, sizeof dir2, "%s2", dir);
        assert_int_equal(vlm_save(&m4, dir2), 0);
        vlm_model_free(&m4);
        checkpoint_serves(&tt->t, "vanilla", dir2, "\"layers\": 3", "one of", &d);
        snprintf(fp2, sizeof fp2, "%s", d.fingerprint);
        if (!strcmp(fp1, fp2) || strncmp(fp1, fp2, (size_t)(strstr(fp1, "-w") - fp1)))
            fail_msg("one weight moved: fingerprints '%s' and '%s' (the prefix should agree, the weights tag not)", fp1, fp2);
        rm_dir(dir2);
    }
    drafter_close(&d);
    const char *const bad[][2] = {{"{\"kind\": \"vanilla\", \"n_layers\": 2, \"dim\": 64}", "dim"},
                            {"{\"kind\": \"vanilla\", \"n_layers\": 2, \"n_kv_heads\": 4}", "heads"},
                            {"{\"kind\": \"vanilla\", \"target_fingerprint\": \"0123\"}", "trained against"},
                            {"{\"kind\": \"mtp\", \"depth\": 2}", "not a vanilla checkpoint"},
                            {"{\"kind\": \"vanilla\", \"n_layrs\": 3}", "n_layrs"},
                            {"{\"kind\": \"vanilla\", \"n_layers\": 40}", "n_layers"},
                            {"{\"kind\": \"vanilla\", \"n_layers\": 4}", "needs as many target layers"},
                            {"{\"kind\": \"vanilla\", \"hidden_dim\": 16}", "init_layers"},
                            /* every size's lower bound: 0 is not a size */
                            {"{\"kind\": \"vanilla\", \"n_layers\": 0}", "n_layers"},
                            {"{\"kind\": \"vanilla\", \"depth\": 0}", "depth"},
                            {"{\"kind\": \"vanilla\", \"hidden_dim\": 0, \"init_layers\": false}", "hidden_dim"},
                            {"{\"kind\": \"vanilla\", \"dim\": 0}", "dim"},
                            {"{\"kind\": \"vanilla\", \"vocab\": 0}", "vocab"},
                            {"{\"kind\": \"vanilla\", \"n_heads\": 0}", "n_heads"},
                            {"{\"kind\": \"vanilla\", \"n_kv_heads\": 0}", "n_kv_heads"},
                            {"{\"kind\": \"vanilla\", \"head_dim\": 0}", "head_dim"},
                            {"{\"kind\": \"vanilla\", \"rope_theta\": 0.5}", "rope_theta"},
                            {"{\"kind\": \"vanilla\", \"w_ce\": -1}", "w_ce"}};
    checkpoint_refusals(dir, &tt->t.m, load_vlm, bad, sizeof bad / sizeof *bad);
    snprintf(p, sizeof p, "%s/config.json", dir);
    /* a checkpoint that says 3 layers over a file of 2: the missing tensor is named */
    const char *three = "{\"kind\": \"vanilla\", \"n_layers\": 3}";
    write_file(p, three, strlen(three));
    assert_int_equal(vlm_load(&m2, dir, &tt->t.m, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "missing tensor 'layers.2."));
    /* one layer over a file of 2: the second was left unread, a shorter drafter served silently */
    const char *one = "{\"kind\": \"vanilla\", \"n_layers\": 1}";
    write_file(p, one, strlen(one));
    assert_int_equal(vlm_load(&m2, dir, &tt->t.m, 0), -1);
    if (!strstr(ds_errmsg(), "tensor 'layers.1.") || !strstr(ds_errmsg(), "is not read by this model's configuration"))
        fail_msg("1 layer of 2: %s", ds_errmsg());
    /* a tensor of the wrong shape: the FFN width the file does not have */
    c.c.hidden_dim = 32, c.init_layers = 0;
    assert_int_equal(vlm_model_init(&m2, &c, &tt->t.m, 7, 0, NULL), 0);
    assert_int_equal(vlm_save(&m2, dir), 0);
    const char *cj = "{\"kind\": \"vanilla\", \"n_layers\": 2, \"hidden_dim\": 64, \"init_layers\": false}";
    write_file(p, cj, strlen(cj));
    vlm_model m3;
    assert_int_equal(vlm_load(&m3, dir, &tt->t.m, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "wrong shape"));
    vlm_model_free(&m2);
    /* a draft vocabulary: its ids round-trip; a recorded hash they do not have is refused */
    int ids[30];
    for (int j = 0; j < 30; j++) ids[j] = (j * 11 + 4) % c.c.vocab;
    c.c.hidden_dim = tt->t.m.cfg.hidden_dim, c.c.contract.draft_vocab = 30, c.init_layers = 1;
    assert_int_equal(vlm_model_init(&m2, &c, &tt->t.m, 7, 0, ids), 0);
    assert_int_equal(vlm_save(&m2, dir), 0);
    assert_int_equal(vlm_load(&m3, dir, &tt->t.m, 0), 0);
    assert_int_equal(m3.sv.Vd, 30);
    assert_memory_equal(m3.sv.vid, ids, sizeof ids);
    vlm_model_free(&m3);
    const char *hj = "{\"kind\": \"vanilla\", \"n_layers\": 2, \"draft_vocab\": 30, \"vocab_hash\": \"0123456789abcdef\"}";
    write_file(p, hj, strlen(hj));
    assert_int_equal(vlm_load(&m3, dir, &tt->t.m, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "vocab_hash"));
    vlm_model_free(&m2);
    vlm_model_free(&m);
    rm_dir(dir);
    tiny_close(tt);
}

/* the config against its target: defaults (2 layers or the target's fewer, depth 4, the target's FFN width
 * and geometry, biases where the target has them, w_ce 0.1 / w_l1 0.9); a target the training ops cannot
 * mirror (Qwen3's q/k norms, linear RoPE scaling, Llama-3 frequency factors) refused by name */
static void test_lm_config_targets(void **state) {
    (void)state;
    const struct { int family, n_layers; float linear; int freqs; const char *refused; } T[] = {
        {0, 3, 0, 0, NULL}, {2, 3, 0, 0, NULL}, {0, 1, 0, 0, NULL}, {1, 3, 0, 0, "q/k norms"},
        {0, 3, 2.0f, 0, "scaled RoPE"}, {0, 3, 0, 1, "scaled RoPE"}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        tiny_spec sp = {32, T[i].n_layers, 4, 2, 64, 48, GGML_F32, GGML_F32, T[i].family, 10000};
        sp.rope_linear = T[i].linear, sp.rope_freqs = T[i].freqs;
        tiny_target *tt = tiny_open_spec(&sp);
        const model_config *t = &tt->t.m.cfg;
        vlm_config c;
        int rc = vlm_config_init(&c, &tt->t.m, NULL);
        if (T[i].refused) {
            assert_int_equal(rc, -1);
            if (!strstr(ds_errmsg(), "vanilla") || !strstr(ds_errmsg(), T[i].refused))
                fail_msg("target %zu: %s", i, ds_errmsg());
            cJSON *j = cJSON_Parse("{\"n_layers\": 1}"); /* the untrained LM through the registry too */
            drafter d;
            assert_int_equal(drafter_open(&d, "vanilla", j, &tt->t), -1);
            assert_non_null(strstr(ds_errmsg(), T[i].refused));
            cJSON_Delete(j);
        } else {
            if (rc) fail_msg("target %zu: %s", i, ds_errmsg());
            assert_int_equal(c.n_layers, DS_MIN(2, T[i].n_layers));
            assert_int_equal(c.init_layers, 1);
            assert_int_equal(c.qkv_bias, T[i].family == 2);
            assert_int_equal(c.c.depth, 4);
            assert_int_equal(c.c.dim, t->dim);
            assert_int_equal(c.c.vocab, t->vocab_size);
            assert_int_equal(c.c.n_heads, t->n_heads);
            assert_int_equal(c.c.n_kv_heads, t->n_kv_heads);
            assert_int_equal(c.c.head_dim, t->head_dim);
            assert_int_equal(c.c.hidden_dim, t->hidden_dim);
            assert_int_equal(c.c.rope_neox, t->rope_neox);
            assert_true(c.c.eps == t->norm_eps && c.c.rope_theta == t->rope_theta);
            assert_true(c.c.w_ce == 0.1f && c.c.w_l1 == 0.9f);
            assert_string_equal(c.c.kind, "vanilla");
        }
        tiny_close(tt);
    }
}

/* vlm_model_init's draw without init_layers (a Qwen2 target, so the biases exist): the norms 1, the q/k/v
 * biases 0, the final norm the target's, every matrix N(0, 0.02^2) and the residual outputs (wo, w_down)
 * N(0, 0.02^2 / (2 layers)); with init_layers the target's layers, biases included. In the checkpoint a norm
 * or a bias is a vector and a matrix [rows][cols] in the target's orientation. */
static void test_lm_init_draw(void **state) {
    (void)state;
    tiny_target *tt = tiny_open_family(2);
    const model *t = &tt->t.m;
    for (int from_target = 0; from_target < 2; from_target++) {
        vlm_config c;
        lm_config(tt, &c, 2, 0);
        c.init_layers = from_target;
        vlm_model m;
        assert_int_equal(vlm_model_init(&m, &c, t, 9, 0, NULL), 0);
        assert_int_equal(m.per_layer, VLM_PER_LAYER);
        assert_int_equal(m.n_t, 2 * VLM_PER_LAYER + 1);
        assert_memory_equal(m.final_norm, t->out_norm, sizeof(float) * (size_t)c.c.dim);
        char dir[600], p[700];
        snprintf(dir, sizeof dir, "%s", tmp_path("vanilla-init"));
        assert_int_equal(vlm_save(&m, dir), 0);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        st_file sf;
        if (st_open(&sf, p)) fail_msg("%s", ds_errmsg());
        for (int l = 0; l < 2; l++) {
            const mtp_pv_f *P = &m.lay[l];
            const layer_weights *tl = &t->layers[l];
            const struct { const char *name; const float *x, *tgt; int rows, cols; double sd; } W[] = {
                {"attn_norm", P->attn_norm, tl->attn_norm, c.c.dim, 0, -1},
                {"ffn_norm", P->ffn_norm, tl->ffn_norm, c.c.dim, 0, -1},
                {"attn.bq", P->bq, tl->bq, c.c.n_heads * c.c.head_dim, 0, 0},
                {"attn.bk", P->bk, tl->bk, c.c.n_kv_heads * c.c.head_dim, 0, 0},
                {"attn.bv", P->bv, tl->bv, c.c.n_kv_heads * c.c.head_dim, 0, 0},
                {"attn.wq", P->wq, NULL, c.c.n_heads * c.c.head_dim, c.c.dim, 0.02},
                {"attn.wk", P->wk, NULL, c.c.n_kv_heads * c.c.head_dim, c.c.dim, 0.02},
                {"attn.wv", P->wv, NULL, c.c.n_kv_heads * c.c.head_dim, c.c.dim, 0.02},
                {"attn.wo", P->wo, NULL, c.c.dim, c.c.n_heads * c.c.head_dim, 0.02 / 2},
                {"mlp.w_gate", P->w_gate, NULL, c.c.hidden_dim, c.c.dim, 0.02},
                {"mlp.w_up", P->w_up, NULL, c.c.hidden_dim, c.c.dim, 0.02},
                {"mlp.w_down", P->w_down, NULL, c.c.dim, c.c.hidden_dim, 0.02 / 2}};
            for (size_t w = 0; w < sizeof W / sizeof *W; w++) {
                char name[80];
                snprintf(name, sizeof name, "layers.%d.%s.weight", l, W[w].name);
                const st_tensor *st = st_find(&sf, name);
                if (!st) fail_msg("%s: not in the checkpoint", name);
                assert_int_equal(st->n_dims, W[w].cols ? 2 : 1);
                assert_int_equal(st->shape[0], W[w].rows);
                if (W[w].cols) assert_int_equal(st->shape[1], W[w].cols);
                size_t n = (size_t)W[w].rows * (W[w].cols ? W[w].cols : 1);
                if (from_target) {
                    if (W[w].tgt) assert_memory_equal(W[w].x, W[w].tgt, sizeof(float) * n);
                    continue; /* the matrices: dequantized copies (test_checkpoint, train_serve) */
                }
                if (W[w].sd <= 0) {
                    for (size_t k = 0; k < n; k++)
                        if (W[w].x[k] != (W[w].sd < 0 ? 1.0f : 0.0f)) fail_msg("%s[%zu] = %g", name, k, W[w].x[k]);
                    continue;
                }
                double s1 = 0, s2 = 0;
                for (size_t k = 0; k < n; k++) s1 += W[w].x[k], s2 += (double)W[w].x[k] * W[w].x[k];
                double mean = s1 / n, sd = sqrt(s2 / n - mean * mean);
                if (fabs(sd - W[w].sd) > 0.15 * W[w].sd || fabs(mean) > 4 * W[w].sd / sqrt((double)n))
                    fail_msg("%s (%zu values): mean %g, sd %g, want 0 and %g", name, n, mean, sd, W[w].sd);
            }
        }
        const st_tensor *fn = st_find(&sf, "norm.weight");
        assert_non_null(fn);
        assert_int_equal(fn->n_dims, 1);
        assert_int_equal(fn->shape[0], c.c.dim);
        assert_int_equal(sf.n_tensors, 2 * VLM_PER_LAYER + 1);
        st_close(&sf);
        rm_dir(dir);
        vlm_model_free(&m);
    }
    tiny_close(tt);
}

/* The overfit gate (train_fixture.h): the LM trained on one cached sequence of random tokens through
 * the shared loop (a cache with taps it does not read), served from its checkpoint through the
 * registry, must draft the memorised tokens back at every cut, before and after a commit; then the
 * decoding loop at T = 0 must emit the target's own output. */
static void overfit_gate(int vocab) {
    overfit g;
    overfit_open(&g, "vanilla-overfit", 0, 46, 1, (int[]){0});
    vlm_config c;
    int ids[46];
    for (int j = 0; j < 46; j++) ids[j] = (j * 7 + 3) % 46;
    lm_config(g.tt, &c, 1, vocab ? 46 : 0);
    c.c.w_ce = 1, c.c.w_l1 = 0; /* memorise the data's tokens, not the random target's law */
    vlm_model m;
    assert_int_equal(vlm_model_init(&m, &c, &g.tt->t.m, 5, 1, vocab ? ids : NULL), 0);
    trainable tr;
    assert_int_equal(vlm_trainable(&m, &tr), 0);
    overfit_train(&g, &tr);
    drafter dr;
    overfit_serve(&g, "vanilla", "", DEPTH, vocab ? "vanilla LM (1 layer, draft vocabulary 46 of 48)" : "vanilla LM (1 layer)",
                  &dr);
    assert_int_equal(dr.n_capture, 0); /* an LM of its own: no target states */
    drafter_close(&dr);
    vlm_model_free(&m);
    overfit_close(&g);
}

/* "draft_lookup": the draft LM's forwards feed prompt-lookup tokens after each draft, and a draft
 * equal to the next one finds its row computed. The drafts and their q must be the token-by-token
 * path's bit for bit (the int8 contract is batch-invariant), at T = 0 and 1, over rounds that commit
 * 0-3 drafts; the looked-up path must have been taken (tokens confirmed, fewer forwards). */
static void lm_counts(const drafter *d, long *fwd, long *drafts, long *fed, long *hit) {
    char line[512];
    double per;
    d->ops->report(d, line, sizeof line);
    *hit = *fed = 0;
    int n = sscanf(line, "draft LM: %ld forwards for %ld drafts (%lf a forward); %ld looked-up tokens fed, %ld", fwd,
                   drafts, &per, fed, hit);
    assert_true(n == 3 || n == 5);
}

/* the lookup tests' target: a tiny Qwen2 on the int8 contract (Q8_0), written to path */
static void lookup_target(target *t, char *path, size_t n, const char *name) {
    tiny_spec spec = {64, 2, 4, 2, 128, 64, GGML_Q8_0, GGML_Q8_0, 2, 10000, 0};
    snprintf(path, n, "%s", tmp_path(name));
    assert_int_equal(tiny_model_write(path, &spec, 8), 0);
    if (target_open(t, path, &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
}

/* one vanilla drafter on a request over the lookup target (prompt[0..15) prefilled, prompt[15] the
 * anchor): what the single-drafter tests share */
typedef struct {
    char path[600];
    target t;
    drafter d;
    request r;
    draft_block b;
} lone;

static void lone_open(lone *o, const char *file, const char *cfg, int cap, const int *prompt) {
    lookup_target(&o->t, o->path, sizeof o->path, file);
    cJSON *c = cJSON_Parse(cfg);
    if (drafter_open(&o->d, "vanilla", c, &o->t)) fail_msg("%s", ds_errmsg());
    cJSON_Delete(c);
    assert_int_equal(draft_block_init(&o->b, cap, o->t.m.cfg.vocab_size, 1), 0);
    assert_int_equal(request_init(&o->r, &o->t, 0, prompt, 15, 400, 7), 0);
    assert_int_equal(ivec_push(&o->r.toks, prompt[15]), 0);
    if (o->d.ops->begin(&o->d, &o->r, NULL)) fail_msg("%s", ds_errmsg());
}

static void lone_close(lone *o) {
    o->d.ops->end(&o->d, &o->r);
    request_free(&o->r, &o->t);
    draft_block_free(&o->b);
    drafter_close(&o->d);
    target_close(&o->t);
    remove(o->path);
}

/* n vanilla drafters side by side over one target, drafter i on a request whose prompt is pr[i][0 ..
 * np[i]) prefilled and pr[i][np[i]] the anchor: the multi-drafter tests' setup and teardown */
enum { FLEET_MAX = 4 };
typedef struct {
    int n;
    drafter d[FLEET_MAX];
    request r[FLEET_MAX];
    draft_block b[FLEET_MAX];
} fleet;

static void fleet_open(fleet *f, target *t, int n, const char *const *cfgs, const int *const *pr, const int *np,
                       int cap) {
    f->n = n;
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_Parse(cfgs[i]);
        if (drafter_open(&f->d[i], "vanilla", c, t)) fail_msg("%s", ds_errmsg());
        cJSON_Delete(c);
        assert_int_equal(draft_block_init(&f->b[i], cap, t->m.cfg.vocab_size, 1), 0);
        assert_int_equal(request_init(&f->r[i], t, 0, pr[i], np[i], 200, 7), 0);
        assert_int_equal(ivec_push(&f->r[i].toks, pr[i][np[i]]), 0);
        if (f->d[i].ops->begin(&f->d[i], &f->r[i], NULL)) fail_msg("%s", ds_errmsg());
    }
}

static void fleet_close(fleet *f, target *t) {
    for (int i = 0; i < f->n; i++) {
        f->d[i].ops->end(&f->d[i], &f->r[i]);
        request_free(&f->r[i], t);
        draft_block_free(&f->b[i]);
        drafter_close(&f->d[i]);
    }
}

static void test_lookup_same_drafts(void **state) {
    (void)state;
    char path[600];
    target t;
    lookup_target(&t, path, sizeof path, "lookup-qwen2.gguf");
    /* token by token; every looked-up token fed; fed while their running hit rate pays (the default) */
    const char *cfgs[3] = {"{\"layers\": 1}", "{\"layers\": 1, \"draft_lookup\": 4, \"draft_lookup_cost\": 0}",
                           "{\"layers\": 1, \"draft_lookup\": 4}"};
    int V = t.m.cfg.vocab_size, pat[5] = {7, 31, 2, 50, 19}, prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = pat[i % 5];
    fleet fl;
    fleet_open(&fl, &t, 3, cfgs, (const int *[]){prompt, prompt, prompt}, (const int[]){15, 15, 15}, 6);
    drafter *dr = fl.d;
    request *rq = fl.r;
    draft_block *blk = fl.b;
    for (int round = 0; round < 24; round++) {
        sampling_params sp = {round % 3 ? 0.0f : 1.0f, 0, 1.0f};
        for (int i = 0; i < 3; i++) {
            rng_seed(&rq[i].rng_draft, 500 + (uint64_t)round);
            if (dr[i].ops->propose(&dr[i], &rq[i], 6, &sp, &blk[i])) fail_msg("%s", ds_errmsg());
            assert_int_equal(blk[i].n, 6);
            assert_memory_equal(blk[0].tok, blk[i].tok, sizeof(int) * 6);
            assert_memory_equal(blk[0].q, blk[i].q, sizeof(float) * 6 * (size_t)V);
            assert_memory_equal(blk[0].conf, blk[i].conf, sizeof(float) * 6);
        }
        /* commit j drafts and a next token: the draft after them, or the pattern's next token */
        int j = round % 4, next = round % 2 ? blk[0].tok[j] : pat[(rq[0].toks.n + j) % 5];
        for (int i = 0; i < 3; i++) {
            for (int k = 0; k < j; k++) assert_int_equal(ivec_push(&rq[i].toks, blk[0].tok[k]), 0);
            assert_int_equal(ivec_push(&rq[i].toks, next), 0);
            if (dr[i].ops->commit(&dr[i], &rq[i], j, next, NULL)) fail_msg("%s", ds_errmsg());
        }
    }
    long f[3], dn[3], fed[3], h[3];
    for (int i = 0; i < 3; i++) {
        lm_counts(&dr[i], &f[i], &dn[i], &fed[i], &h[i]);
        assert_int_equal(dn[i], 144);
        assert_int_equal(f[i], f[0] - h[i]); /* a drawn looked-up token is a forward saved */
    }
    printf("  draft_lookup 4: 24 rounds of 6 drafts at T = 0 and 1 bit for bit the token-by-token path's; the draft "
           "LM's forwards 144 -> %ld (every looked-up token fed: %ld fed, %ld drawn) and %ld (fed while the hit rate "
           "pays: %ld fed, %ld drawn)\n", f[1], fed[1], h[1], f[2], fed[2], h[2]);
    assert_int_equal(f[0], 24 * 6);
    assert_true(h[1] > 10 && h[2] > 10);
    assert_true(fed[2] < fed[1] && (double)h[2] / fed[2] > (double)h[1] / fed[1]);
    fleet_close(&fl, &t);
    target_close(&t);
    remove(path);
}

static int never_more(void *ctx, int k, const float *conf) {
    (void)ctx, (void)k, (void)conf;
    return 0;
}

/* A scheduler that stops every chain after its first draft (as greedy does at low confidence): the
 * looked-up rows fed beside it are never read, so the adaptive feed must learn to stop feeding them
 * (only the 1-in-8 measuring forwards feed once it has); before, a stop left the estimate untouched
 * and every round fed 3 tokens. */
static void test_lookup_short_chains(void **state) {
    (void)state;
    int pat[5] = {7, 31, 2, 50, 19}, prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = pat[i % 5];
    lone o;
    lone_open(&o, "lookup-short.gguf", "{\"layers\": 1, \"draft_lookup\": 4}", 6, prompt);
    o.b.more = never_more;
    sampling_params sp = {0, 0, 1.0f};
    long f0, d0, fed0, h0, f1, d1, fed1, h1;
    for (int round = 0; round < 64; round++) {
        if (round == 32) lm_counts(&o.d, &f0, &d0, &fed0, &h0);
        if (o.d.ops->propose(&o.d, &o.r, 6, &sp, &o.b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(o.b.n, 1);
        int next = pat[o.r.toks.n % 5]; /* the pattern goes on: the lookup always finds a continuation */
        assert_int_equal(ivec_push(&o.r.toks, next), 0);
        if (o.d.ops->commit(&o.d, &o.r, 0, next, NULL)) fail_msg("%s", ds_errmsg());
    }
    lm_counts(&o.d, &f1, &d1, &fed1, &h1);
    printf("  draft_lookup 4 under chains stopped after one draft: %ld looked-up tokens fed in the first 32 rounds, "
           "%ld in the last 32 (%ld drawn)\n", fed0, fed1 - fed0, h1);
    assert_int_equal(h1, 0);
    assert_true(fed0 > 8);             /* it fed while it did not know */
    assert_true(fed1 - fed0 <= 32 / 8); /* then only the measuring forwards */
    lone_close(&o);
}


/* "draft_window": the draft LM reads the prompt's first S and last W tokens. Its drafts and q equal,
 * bit for bit, those of a draft LM given the shortened prompt (the sink, then the tail) over rounds
 * of commits and after a rewind; a window as long as the prompt changes nothing. */
static void test_window(void **state) {
    (void)state;
    char path[600];
    target t;
    lookup_target(&t, path, sizeof path, "window-qwen2.gguf");
    enum { NP = 39, S = 4, W = 8 };
    int full[NP + 1], shrt[S + W + 1];
    for (int i = 0; i <= NP; i++) full[i] = (i * 37 + 11) % 61;
    memcpy(shrt, full, sizeof(int) * S);
    memcpy(shrt + S, full + NP - W, sizeof(int) * (W + 1)); /* the tail and the anchor */
    /* windowed on the full prompt | plain on the short one | a window longer than the prompt | plain */
    const char *cfgs[4] = {"{\"layers\": 1, \"draft_window\": 8, \"draft_sink\": 4}", "{\"layers\": 1}",
                           "{\"layers\": 1, \"draft_window\": 64}", "{\"layers\": 1}"};
    const int np[4] = {NP, S + W, NP, NP};
    int V = t.m.cfg.vocab_size;
    fleet f;
    fleet_open(&f, &t, 4, cfgs, (const int *[]){full, shrt, full, full}, np, 5);
    drafter *dr = f.d;
    request *rq = f.r;
    draft_block *blk = f.b;
    assert_non_null(strstr(dr[0].describe, "first 4 and last 8"));
    int differ = 0;
    for (int round = 0; round < 16; round++) {
        if (round == 10) /* a rewind: back to the prompt and its anchor */
            for (int i = 0; i < 4; i++) {
                rq[i].toks.n = np[i] + 1;
                if (dr[i].ops->rewind(&dr[i], &rq[i])) fail_msg("%s", ds_errmsg());
            }
        sampling_params sp = {round % 3 ? 0.0f : 1.0f, 0, 1.0f};
        for (int i = 0; i < 4; i++) {
            rng_seed(&rq[i].rng_draft, 900 + (uint64_t)round);
            if (dr[i].ops->propose(&dr[i], &rq[i], 5, &sp, &blk[i])) fail_msg("%s", ds_errmsg());
            assert_int_equal(blk[i].n, 5);
        }
        for (int a = 0; a < 4; a += 2) { /* 0 against 1, 2 against 3 */
            assert_memory_equal(blk[a].tok, blk[a + 1].tok, sizeof(int) * 5);
            assert_memory_equal(blk[a].q, blk[a + 1].q, sizeof(float) * 5 * (size_t)V);
            assert_memory_equal(blk[a].conf, blk[a + 1].conf, sizeof(float) * 5);
        }
        differ += memcmp(blk[0].q, blk[3].q, sizeof(float) * 5 * (size_t)V) != 0;
        int j = round % 4, next = (round * 13 + 5) % 61;
        for (int i = 0; i < 4; i++) {
            for (int k = 0; k < j; k++) assert_int_equal(ivec_push(&rq[i].toks, blk[i].tok[k]), 0);
            assert_int_equal(ivec_push(&rq[i].toks, next), 0);
            if (dr[i].ops->commit(&dr[i], &rq[i], j, next, NULL)) fail_msg("%s", ds_errmsg());
        }
        if (round < 10) assert_memory_equal(blk[0].tok, blk[1].tok, sizeof(int) * (size_t)j);
    }
    /* the window is not a no-op: the whole prompt's draft LM has other laws */
    assert_true(differ > 8);
    printf("  draft_window 8 + sink 4 over a prompt of %d: 16 rounds (a rewind at 10) bit for bit the drafts and q of "
           "the %d-token shortened prompt; %d of 16 rounds' q differ from the whole prompt's\n", NP, S + W, differ);
    fleet_close(&f, &t);
    target_close(&t);
    remove(path);
}

/* "tree_nodes": the chain with siblings beside each draft. At T = 0 the chain is the chain mode's
 * (same drafts, same q) and each sibling is its row's next best token (TREE_TOPK); at T = 1 the
 * siblings are drawn without replacement (TREE_WOR): a sibling's q row is the draft's with the draft
 * and the earlier siblings removed, and holds the sibling. Nodes come best first: parents before
 * children, confidences descending, a draft before its siblings. */
static void test_tree_siblings(void **state) {
    (void)state;
    char path[600];
    target t;
    lookup_target(&t, path, sizeof path, "tree-qwen2.gguf");
    const char *cfgs[2] = {"{\"layers\": 1}", "{\"layers\": 1, \"tree_nodes\": 9, \"tree_width\": 3}"};
    int V = t.m.cfg.vocab_size, prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = (7 * i + 3) % V;
    fleet f;
    fleet_open(&f, &t, 2, cfgs, (const int *[]){prompt, prompt}, (const int[]){15, 15}, 9);
    drafter *dr = f.d;
    request *rq = f.r;
    draft_block *blk = f.b;
    assert_int_equal(dr[1].tree_nodes, 9);
    int n_sib = 0, n_wor = 0;
    for (int round = 0; round < 8; round++) {
        sampling_params sp = {round % 2 ? 1.0f : 0.0f, 0, 1.0f};
        for (int i = 0; i < 2; i++) {
            blk[i].tree = TREE_CHAIN;
            rng_seed(&rq[i].rng_draft, 900 + (uint64_t)round);
            if (dr[i].ops->propose(&dr[i], &rq[i], i ? 9 : 3, &sp, &blk[i])) fail_msg("%s", ds_errmsg());
        }
        const draft_block *b = &blk[1];
        assert_int_equal(b->tree, round % 2 ? TREE_WOR : TREE_TOPK);
        assert_true(b->n > 3 && b->n <= 9);
        for (int u = -1; u < b->n; u++) { /* the draft and w - 1 = 2 siblings at most beside it */
            int kids = 0;
            for (int i = 0; i < b->n; i++) kids += b->parent[i] == u;
            assert_true(kids <= 3);
        }
        int chain[3], nc = 0;
        for (int i = 0; i < b->n; i++) {
            assert_true(b->parent[i] >= -1 && b->parent[i] < i);
            if (i) assert_true(b->conf[i] <= b->conf[i - 1]);
            int first = 1; /* the first child of its parent: the chain's draft */
            for (int j = 0; j < i; j++) first &= b->parent[j] != b->parent[i];
            if (first) {
                assert_int_equal(b->parent[i], nc ? chain[nc - 1] : -1);
                chain[nc++] = i;
                continue;
            }
            n_sib++;
            const float *q = b->q + (size_t)i * V;
            int d = 0; /* the draft it is a sibling of, and its siblings tried before it */
            while (chain[d] != i && b->parent[chain[d]] != b->parent[i]) d++;
            assert_true(b->tok[i] != b->tok[chain[d]]);
            for (int j = 0; j < i; j++)
                if (b->parent[j] == b->parent[i]) {
                    assert_true(b->tok[j] != b->tok[i]);
                    if (round % 2) assert_true(q[b->tok[j]] == 0.0f); /* drawn without replacement */
                }
            if (round % 2) assert_true(q[b->tok[i]] > 0), n_wor++;
        }
        assert_int_equal(nc, 3);
        for (int k = 0; k < 3; k++) { /* the chain is the chain mode's: the sibling draws come after it */
            if (round % 2) continue;
            assert_int_equal(b->tok[chain[k]], blk[0].tok[k]);
            assert_memory_equal(b->q + (size_t)chain[k] * V, blk[0].q + (size_t)k * V, sizeof(float) * (size_t)V);
        }
        int next = blk[0].tok[0];
        for (int i = 0; i < 2; i++) {
            assert_int_equal(ivec_push(&rq[i].toks, next), 0);
            if (dr[i].ops->commit(&dr[i], &rq[i], 0, next, NULL)) fail_msg("%s", ds_errmsg());
        }
    }
    printf("  vanilla tree of 9 (width 3): chains equal to the chain mode's at T = 0, %d siblings, %d drawn without "
           "replacement at T = 1\n", n_sib, n_wor);
    assert_true(n_sib >= 8 * 4 && n_wor >= 4 * 4);
    fleet_close(&f, &t);
    target_close(&t);
    remove(path);
}


/* "tree_mode": "dynamic": the draft LM grows the tree a level a forward. At T = 0 every node's children
 * are the best tokens of the row the draft LM gives after the node's own path, in rank order (checked
 * against a chain-mode drafter with one sibling fed that path from scratch: the tree's rows, grown over
 * forwards with parent_slot, are the chain's), TREE_TOPK; at T = 1 they are drawn without replacement
 * (TREE_WOR), each child's law that row's with its earlier siblings removed; nodes come parents first,
 * confidences descending, children distinct - over rounds that commit accepted paths (the tree's rows
 * dropped after each proposal, the accepted tokens fed again with the next anchor). Returns the children
 * checked; *inverted counts the T = 1 trees whose best-first order is not the order their nodes were made
 * in (their q rows moved by a permutation cycle, which never starts at the first node), *deep those three
 * levels deep. */
static int tree_dynamic_rounds(target *t, int rounds, int *inverted, int *deep) {
    /* 14 nodes of width 2 over 4 depths: at T > 0 a node needs a path probability of 1/4 (sampled_theta) */
    const char *dyn = "{\"layers\": 1, \"tree_mode\": \"dynamic\", \"tree_nodes\": 14, \"tree_width\": 2, \"tree_depth\": 4}";
    const char *sib = "{\"layers\": 1, \"tree_nodes\": 2}";
    int V = t->m.cfg.vocab_size, prompt[16], checked = 0;
    for (int i = 0; i < 16; i++) prompt[i] = (7 * i + 3) % V;
    fleet f;
    fleet_open(&f, t, 1, &dyn, (const int *[]){prompt}, (const int[]){15}, 14);
    request *rq = &f.r[0];
    draft_block *b = &f.b[0];
    for (int round = 0; round < rounds; round++) {
        sampling_params sp = {round % 2 ? 1.0f : 0.0f, 0, 1.0f};
        b->tree = TREE_CHAIN;
        if (f.d[0].ops->propose(&f.d[0], rq, 14, &sp, b)) fail_msg("%s", ds_errmsg());
        assert_int_equal(b->tree, round % 2 ? TREE_WOR : TREE_TOPK);
        assert_true(b->n >= (round % 2 ? 1 : 3) && b->n <= 14);
        /* the order the nodes were made in: a level at a time, each level's parents in the order they
         * were made, a parent's children by rank (siblings keep their order in the block) */
        int made[14], depth[14], n_made = 0, inv = 0, dmax = 0;
        for (int i = 0; i < b->n; i++) made[i] = -1;
        for (int i = 0; i < b->n; i++) /* parents come first */
            dmax = DS_MAX(dmax, depth[i] = b->parent[i] < 0 ? 1 : depth[b->parent[i]] + 1);
        *deep += round % 2 && dmax >= 3;
        /* at T = 1 a node exists when its path probability (its ranks' row probabilities) reaches 1/4 */
        assert_non_null(b->conf_raw);
        for (int i = 0; i < b->n && round % 2; i++)
            if (!(b->conf_raw[i] >= 0.25f * (1 - 1e-6f))) fail_msg("round %d: node %d of path probability %g", round, i, (double)b->conf_raw[i]);
        for (int i = 0; i < b->n; i++)
            if (b->parent[i] < 0) made[i] = n_made++;
        for (int lvl = 0; lvl < b->n; lvl++) /* parents in the order they were made */
            for (int u = 0; u < b->n; u++)
                if (made[u] == lvl)
                    for (int i = 0; i < b->n; i++)
                        if (b->parent[i] == u) made[i] = n_made++;
        for (int i = 0; i < b->n; i++) inv |= made[i] != i;
        *inverted += round % 2 && inv;
        for (int u = -1; u < b->n; u++) {
            int kids[8], nk = 0, seq[64], n = rq->toks.n, pth[8], np = 0;
            for (int i = 0; i < b->n; i++)
                if (b->parent[i] == u) kids[nk++] = i;
            if (u >= 0) assert_true(b->parent[u] < u && (b->parent[u] < 0 || b->conf[u] <= b->conf[b->parent[u]]));
            if (!nk) continue;
            assert_true(nk <= 2 && (nk < 2 || b->tok[kids[0]] != b->tok[kids[1]]));
            memcpy(seq, rq->toks.v, sizeof(int) * (size_t)n);
            for (int x = u; x >= 0; x = b->parent[x]) pth[np++] = b->tok[x];
            while (np) seq[n++] = pth[--np];
            fleet g; /* the row after the path, from a chain drafter's draft and its sibling at T = 0 */
            fleet_open(&g, t, 1, &sib, (const int *[]){seq}, (const int[]){n - 1}, 2);
            sampling_params g0 = {0, 0, 1.0f};
            g.b[0].tree = TREE_CHAIN;
            if (g.d[0].ops->propose(&g.d[0], &g.r[0], 2, round % 2 ? &sp : &g0, &g.b[0])) fail_msg("%s", ds_errmsg());
            assert_true(g.b[0].n >= 1);
            for (int k = 0; k < nk; k++) {
                if (round % 2) { /* drawn without replacement: the row's law after the path, earlier siblings removed */
                    const float *q = b->q + (size_t)kids[k] * V, *law = g.b[0].q;
                    double sq = 0, sl = 0;
                    assert_true(q[b->tok[kids[k]]] > 0);
                    for (int j = 0; j < k; j++) assert_true(q[b->tok[kids[j]]] == 0.0f);
                    for (int x = 0; x < V; x++) {
                        int gone = 0;
                        for (int j = 0; j < k; j++) gone |= b->tok[kids[j]] == x;
                        sq += q[x], sl += gone ? 0 : law[x];
                    }
                    for (int x = 0; x < V; x++) {
                        int gone = 0;
                        for (int j = 0; j < k; j++) gone |= b->tok[kids[j]] == x;
                        if (fabs(q[x] / sq - (gone ? 0 : law[x] / sl)) > 1e-5)
                            fail_msg("round %d: node %d's child of rank %d: its law at %d is %g, the row's %g", round, u, k, x,
                                     q[x] / sq, gone ? 0 : law[x] / sl);
                    }
                } else if (b->tok[kids[k]] != g.b[0].tok[k])
                    fail_msg("round %d: node %d's child of rank %d is %d, the row after its path ranks %d there", round, u, k,
                             b->tok[kids[k]], g.b[0].tok[k]);
                checked++;
            }
            fleet_close(&g, t);
        }
        /* accept the first-child path for round % 3 nodes, then a token outside the tree */
        int acc = 0, u = -1;
        for (int k = 0; k < round % 3; k++) {
            int c = -1;
            for (int i = 0; i < b->n && c < 0; i++)
                if (b->parent[i] == u) c = i;
            if (c < 0) break;
            assert_int_equal(ivec_push(&rq->toks, b->tok[c]), 0);
            acc++, u = c;
        }
        int next = (rq->toks.v[rq->toks.n - 1] + 5) % V;
        assert_int_equal(ivec_push(&rq->toks, next), 0);
        assert_int_equal(f.d[0].ops->observe(&f.d[0], rq, NULL, NULL, b->n + 1, 0), 0);
        if (f.d[0].ops->commit(&f.d[0], rq, acc, next, NULL)) fail_msg("%s", ds_errmsg());
    }
    fleet_close(&f, t);
    return checked;
}

static void test_tree_dynamic(void **state) {
    (void)state;
    char path[600], sharp_path[600];
    target t, ts;
    lookup_target(&t, path, sizeof path, "tree-dyn.gguf");
    int inv = 0, inv_sharp = 0, deep = 0, checked = tree_dynamic_rounds(&t, 6, &inv, &deep);
    /* the lookup target's rows are flat: its best-first trees at T = 1 kept the order their nodes were
     * made in, so the q rows' permutation was never run (a mutant reading a cycle's first row from the
     * wrong place passed). On a sharper one (its embedding's std 1, twice the lookup target's) a child of
     * a likely node outranks a less likely node made before it */
    tiny_spec sharp = {64, 2, 4, 2, 128, 64, GGML_Q8_0, GGML_Q8_0, 2, 10000, 1.0f};
    snprintf(sharp_path, sizeof sharp_path, "%s", tmp_path("tree-dyn-sharp.gguf"));
    assert_int_equal(tiny_model_write(sharp_path, &sharp, 8), 0);
    if (target_open(&ts, sharp_path, &(backend_opts){.n_threads = 2})) fail_msg("%s", ds_errmsg());
    int checked_sharp = tree_dynamic_rounds(&ts, 16, &inv_sharp, &deep);
    target_close(&ts);
    remove(sharp_path);
    printf("  vanilla dynamic tree of 14 (width 2, depth 4): %d + %d children checked against the rows of their paths "
           "(T = 0: ranks, T = 1: laws); T = 1 trees not in the order they were made: %d + %d, 3 levels deep: %d\n", checked,
           checked_sharp, inv, inv_sharp, deep);
    assert_true(checked >= 6 * 4 && checked_sharp >= 6 * 4);
    assert_true(inv + inv_sharp >= 1 && deep >= 1); /* the permutation ran; trees grow past their first levels */
    /* its keys: one clear error each */
    static const char *const bad[][2] = {
        {"{\"layers\": 1, \"tree_nodes\": 4, \"tree_mode\": \"wide\"}", "not one of siblings, dynamic"},
        {"{\"layers\": 1, \"tree_mode\": \"dynamic\"}", "needs \"tree_nodes\""},
        {"{\"layers\": 1, \"tree_nodes\": 4, \"tree_mode\": \"dynamic\", \"draft_lookup\": 2}", "draft_lookup"},
        {"{\"layers\": 1, \"tree_nodes\": 4, \"tree_depth\": 3}", "is for \"tree_mode\""},
        {"{\"layers\": 1, \"tree_nodes\": 4, \"tree_mode\": \"dynamic\", \"tree_depth\": 0}", "tree_depth"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *c = cJSON_Parse(bad[i][0]);
        drafter x;
        assert_int_equal(drafter_open(&x, "vanilla", c, &t), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("%s: '%s' does not name '%s'", bad[i][0], ds_errmsg(), bad[i][1]);
        cJSON_Delete(c);
    }
    target_close(&t);
    remove(path);
}

/* A tree's sibling is priced by its row probability scaled by the accepted over the summed row
 * probabilities of the siblings verified at a reached parent: rounds whose anchor sibling is verified
 * and never accepted drive its price down; rounds that accept it drive it back up. */
static void test_tree_calibration(void **state) {
    (void)state;
    int V = 64, prompt[16]; /* the lookup target's vocabulary */
    for (int i = 0; i < 16; i++) prompt[i] = (5 * i + 1) % V;
    lone o;
    lone_open(&o, "tree-cal.gguf", "{\"layers\": 1, \"tree_nodes\": 4}", 4, prompt);
    assert_int_equal(o.t.m.cfg.vocab_size, V);
    sampling_params sp = {0, 0, 1.0f};
    double ratio[3] = {0, 0, 0}; /* the anchor sibling's price over its raw probability: first, after 48
                                  * rejected rounds, after 48 more that accepted it */
    for (int round = 0; round < 97; round++) {
        o.b.tree = TREE_CHAIN;
        if (o.d.ops->propose(&o.d, &o.r, 4, &sp, &o.b)) fail_msg("%s", ds_errmsg());
        int sib = -1, x = -1;
        for (int i = 0; i < o.b.n; i++)
            if (o.b.parent[i] == -1) {
                if (x < 0) x = i;
                else if (sib < 0) sib = i;
            }
        assert_true(x == 0 && sib > 0);
        if (round == 0 || round == 48 || round == 96) ratio[round / 48] = o.b.conf[sib] / o.b.conf_raw[sib];
        assert_int_equal(o.d.ops->observe(&o.d, &o.r, NULL, NULL, o.b.n + 1, 0), 0); /* every node verified */
        int acc = round < 48 ? 0 : 1, next = (o.b.tok[x] + 1) % V;
        while (next == o.b.tok[sib] || next == o.b.tok[x]) next = (next + 1) % V;
        if (acc) assert_int_equal(ivec_push(&o.r.toks, o.b.tok[sib]), 0); /* the sibling was the target's */
        assert_int_equal(ivec_push(&o.r.toks, next), 0);
        if (o.d.ops->commit(&o.d, &o.r, acc, next, NULL)) fail_msg("%s", ds_errmsg());
    }
    printf("  vanilla tree: the anchor sibling's price over its row probability %.3f at first, %.3f after 48 rounds "
           "that rejected it, %.3f after 48 that accepted it\n", ratio[0], ratio[1], ratio[2]);
    assert_true(fabs(ratio[0] - 1) < 0.05);
    assert_true(ratio[1] < 0.6);
    assert_true(ratio[2] > 2 * ratio[1]);
    lone_close(&o);
}

static void test_overfit_gate(void **state) {
    (void)state;
    overfit_gate(0);
    overfit_gate(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_final),
        cmocka_unit_test(test_grad_topk),
        cmocka_unit_test(test_train_serve),
        cmocka_unit_test(test_cache_rollback),
        cmocka_unit_test(test_lookup_same_drafts),
        cmocka_unit_test(test_lookup_short_chains),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_tree_siblings),
        cmocka_unit_test(test_tree_calibration),
        cmocka_unit_test(test_tree_dynamic),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_lm_config_targets),
        cmocka_unit_test(test_lm_init_draw),
        cmocka_unit_test(test_subvocab_by_hand),
        cmocka_unit_test(test_subvocab_checkpoint),
        cmocka_unit_test(test_draft_vocab_rank),
        cmocka_unit_test(test_overfit_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
