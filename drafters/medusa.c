/* medusa.c — Medusa-1 heads (medusa.h): the model, its checkpoint, its training step, and the
 * drafter. A round: the target's last-layer state of the position before the anchor (kept from
 * the last commit), through the target's final norm, through each head's residual block on the
 * host (d x d per head), then one batched pass of the target's own quantized head over the K rows
 * on the backend; q_k = processed z_k, x_k ~ q_k. */
#include "medusa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/train/train_ops.h"
#include "drafter.h"
#include "train_family.h"
#include "tree_build.h"

/* ------------------------------------------------------------------------------ config */

int md_config_init(md_config *c, const model *target, const cJSON *j) {
    memset(c, 0, sizeof *c);
    const model_config *t = &target->cfg;
    c->dim = t->dim, c->vocab = t->vocab_size, c->heads = 4, c->tap = t->n_layers - 1, c->eps = t->norm_eps;
    c->w_ce = 0.1f, c->w_l1 = 0.9f; /* the block drafters' split: the target's law matters most */
    contract_init(&c->contract, target);
    if (!j) return 0;
    jcfg r;
    const char *jk = "medusa";
    DS_TRY(jcfg_open(&r, j, "medusa"));
    DS_TRY(jcfg_str(&r, "kind", &jk));
    DS_CHECK(!strcmp(jk, "medusa"), "medusa: a checkpoint of kind '%s'", jk);
    DS_TRY(jcfg_int(&r, "heads", 1, MD_MAX_HEADS, &c->heads));
    DS_TRY(jcfg_float(&r, "w_ce", 0, 100, &c->w_ce));
    DS_TRY(jcfg_float(&r, "w_l1", 0, 100, &c->w_l1));
    DS_TRY(contract_read(&r, &c->contract));
    int dim = c->dim, vocab = c->vocab, tap = c->tap;
    DS_TRY(jcfg_int(&r, "dim", 1, 1 << 20, &dim));
    DS_TRY(jcfg_int(&r, "vocab", 1, 1 << 24, &vocab));
    DS_TRY(jcfg_int(&r, "tap", 0, 1 << 10, &tap));
    DS_TRY(jcfg_float(&r, "eps", 0, 1, &c->eps));
    DS_TRY(jcfg_close(&r));
    /* a checkpoint records the geometry: it must be this target's */
    DS_CHECK(dim == c->dim && vocab == c->vocab && tap == c->tap,
             "medusa: dim %d, vocab %d, tap %d do not match the target's %d, %d, %d", dim, vocab, tap, c->dim, c->vocab,
             c->tap);
    return contract_check_target(&c->contract, target, c->vocab, "medusa");
fail:
    return -1;
}

cJSON *md_config_json(const md_config *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "medusa");
    cJSON_AddNumberToObject(j, "heads", c->heads);
    cJSON_AddNumberToObject(j, "dim", c->dim);
    cJSON_AddNumberToObject(j, "vocab", c->vocab);
    cJSON_AddNumberToObject(j, "tap", c->tap);
    cJSON_AddNumberToObject(j, "eps", c->eps);
    cJSON_AddNumberToObject(j, "w_ce", c->w_ce);
    cJSON_AddNumberToObject(j, "w_l1", c->w_l1);
    contract_json(j, &c->contract);
    return j;
}

/* ------------------------------------------------------------------------------- model */

static void md_ws_release_f(md_ws_f *w); /* medusa_train.inc */

void md_model_free(md_model *m) {
    free(m->params);
    free(m->norm);
    free(m->E);
    subvocab_free(&m->sv);
    md_ws_release_f(&m->ws);
    memset(m, 0, sizeof *m);
}

/* the model's buffers around its draft vocabulary m->sv (already set and checked) */
static int md_alloc(md_model *m, const md_config *c, const model *target, int with_head) {
    subvocab sv = m->sv;
    memset(m, 0, sizeof *m);
    m->sv = sv;
    m->cfg = *c;
    snprintf(m->cfg.contract.vocab_hash, sizeof m->cfg.contract.vocab_hash, "%s", sv.hash);
    int D = c->dim;
    m->n_t = 2 * c->heads;
    for (int k = 0; k < c->heads; k++) {
        snprintf(m->names[2 * k], sizeof m->names[0], "heads.%d.weight", k);
        snprintf(m->names[2 * k + 1], sizeof m->names[0], "heads.%d.bias", k);
        size_t base = (size_t)k * (D + 1) * D;
        m->tt[2 * k] = (train_tensor){base, (size_t)D * D, 1};
        m->tt[2 * k + 1] = (train_tensor){base + (size_t)D * D, (size_t)D, 0};
    }
    m->n_params = (size_t)c->heads * (D + 1) * D;
    DS_TRYP(m->params = ds_calloc(m->n_params, sizeof(float), "medusa parameters"));
    DS_TRYP(m->norm = ds_malloc(sizeof(float) * (size_t)D, "medusa norm"));
    memcpy(m->norm, target->out_norm, sizeof(float) * (size_t)D);
    if (with_head) DS_TRY(subvocab_frozen_f32(&sv, target, NULL, &m->E)); /* the training step's E: the draft rows */
    return 0;
fail:
    md_model_free(m);
    return -1;
}

int md_model_init(md_model *m, const md_config *c, const model *target, uint64_t seed, float init_std, int with_head,
                  const int *ids) {
    memset(m, 0, sizeof *m);
    DS_TRY(contract_vocab_set(&c->contract, &m->sv, c->vocab, ids, "medusa"));
    DS_TRY(md_alloc(m, c, target, with_head));
    if (init_std > 0) {
        rng_t r;
        rng_seed(&r, seed);
        float sd = init_std / sqrtf((float)c->dim);
        for (int k = 0; k < c->heads; k++) {
            float *w = m->params + m->tt[2 * k].offset;
            for (size_t i = 0; i < m->tt[2 * k].numel; i++) w[i] = (float)rng_normal(&r) * sd;
        }
    }
    return 0;
fail:
    return -1;
}

/* the checkpoint's tensors: names, shapes and the parameters they are (save and read alike) */
static int md_tensors(const md_model *m, st_write_tensor *w) {
    int D = m->cfg.dim;
    for (int i = 0; i < m->n_t; i++)
        w[i] = (st_write_tensor){m->names[i], m->params + m->tt[i].offset, i % 2 ? 1 : 2, {D, D}};
    return m->n_t;
}

int md_save(const md_model *m, const char *dir) {
    st_write_tensor w[2 * MD_MAX_HEADS + 1];
    int n = md_tensors(m, w);
    return subvocab_write_checkpoint(&m->sv, dir, w, n, md_config_json(&m->cfg));
}

int md_read_params(md_model *m, const char *dir) {
    st_write_tensor w[2 * MD_MAX_HEADS + 1];
    int n = md_tensors(m, w);
    return subvocab_read_checkpoint(&m->sv, dir, w, n);
}

int md_load(md_model *m, const char *dir, const model *target, int with_head) {
    char p[4096];
    cJSON *j = NULL;
    md_config c;
    memset(m, 0, sizeof *m);
    snprintf(p, sizeof p, "%s/config.json", dir);
    DS_TRYP(j = subvocab_read_config(dir, "medusa"));
    if (md_config_init(&c, target, j)) {
        ds_error_prefix("%s", p);
        goto fail;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    DS_TRY(contract_vocab_read(&c.contract, &m->sv, c.vocab, p));
    DS_TRY(md_alloc(m, &c, target, with_head));
    DS_TRY(md_read_params(m, dir));
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    md_model_free(m);
    return -1;
}

/* ---------------------------------------------------------------------- training step */

#define REAL float
#define FN(name) name##_f
#define SEQ train_seq
#define WS md_ws_f
#include "medusa_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS
#define REAL double
#define FN(name) name##_d
#define SEQ train_seq_d
#define WS md_ws_d
#include "medusa_train.inc"
#undef REAL
#undef FN
#undef SEQ
#undef WS

void md_ws_free_d(md_ws_d *w) { md_ws_release_d(w); }

double md_seq_weight(int A, const int *n_valid) {
    double w = 0;
    for (int a = 0; a < A; a++) w += n_valid[a];
    return w;
}

static int tr_step(trainable *tr, const train_seq *s, float *grad, double norm, train_stats *st) {
    md_model *m = tr->impl;
    DS_CHECK(m->E != NULL, "medusa: the model was opened without the training head");
    return md_step_f(&m->cfg, m->params, grad, m->norm, m->E, m->sv.Vd, m->sv.vmap, s, norm, st, &m->ws);
fail:
    return -1;
}
static double tr_weight(const trainable *tr, int A, const int *n_valid) {
    DS_UNUSED(tr);
    return md_seq_weight(A, n_valid);
}
static int tr_save(const trainable *tr, const char *dir) { return md_save(tr->impl, dir); }
static int tr_read(trainable *tr, const char *dir) { return md_read_params(tr->impl, dir); }
static cJSON *tr_config(const trainable *tr) { return md_config_json(&((const md_model *)tr->impl)->cfg); }

int md_trainable(md_model *m, trainable *tr) {
    *tr = (trainable){.impl = m, .kind = "medusa", .params = m->params, .n_params = m->n_params, .n_t = m->n_t,
                      .t = m->tt, .positions = m->cfg.heads, .n_tap = 1, .dim = m->cfg.dim, .taps = &m->cfg.tap,
                      .w_ce = m->cfg.w_ce, .w_l1 = m->cfg.w_l1, .w_bce = 0, .full_vocab = !m->sv.vid, .step = tr_step,
                      .seq_weight = tr_weight, .save = tr_save, .read_params = tr_read, .config_json = tr_config};
    return 0;
}

/* -------------------------------------------------------------------------------- drafter */

typedef struct {
    md_model m;
    backend *be;
    uint32_t bt;           /* the heads' blocks W_k: GGML_F32 on the host, or quantized on the backend */
    qmat wq[MD_MAX_HEADS]; /* quantized: their blocks, owned */
    float *Hd, *Wd[MD_MAX_HEADS]; /* backend: the state, W_k h */
    float *Rd, *Ud;        /* backend: the K residual rows, their logits */
    float *U, *R, *u, *qalt; /* host */
    lp_scratch scr;
    int tree_nodes, tree_width; /* > 0: Medusa's tree of this many nodes, tree_width children a node at most */
    int rows_done;              /* heads whose top children are in rid / rp this round */
    int rid[MD_MAX_HEADS][TREE_MAX_K];
    float rp[MD_MAX_HEADS][TREE_MAX_K];
    const tokenizer *tk;
} medusa;

typedef struct {
    float *h, *h0;         /* [dim] the normed state before the anchor; the prompt's (for rewind) */
} md_state;

/* RMSNorm of one tapped row with the target's final norm */
static void norm_row(const md_model *m, float *out, const float *x) {
    int D = m->cfg.dim;
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / D + m->cfg.eps));
    for (int i = 0; i < D; i++) out[i] = x[i] * s * m->norm[i];
}

/* The heads' blocks quantized (Q8_0: a quarter of fp32's bytes, Q4_1: 0.16) on the backend's int8
 * kernels, one pass for all K (they share the input). The drafts move by the rounding; q stays the
 * law each token is drawn from, so verification is exact either way. */
static int blocks_to_backend(medusa *s) {
    int K = s->m.cfg.heads, D = s->m.cfg.dim;
    const qmat *ws[MD_MAX_HEADS];
    for (int k = 0; k < K; k++) {
        DS_TRY(drafter_quantize(s->m.params + (size_t)k * (D + 1) * D, D, D, s->bt, &s->wq[k], "medusa block"));
        ws[k] = &s->wq[k];
        DS_TRYP(s->Wd[k] = s->be->alloc(s->be, sizeof(float) * (size_t)D));
    }
    DS_TRY(s->be->prepare_mats(s->be, ws, K));
    DS_TRYP(s->Hd = s->be->alloc(s->be, sizeof(float) * (size_t)D));
    return 0;
fail:
    return -1;
}

static int medusa_open(drafter *d, const cJSON *cfg, target *t) {
    medusa *s = ds_calloc(1, sizeof *s, "medusa drafter");
    if (!s) return -1;
    d->impl = s;
    jcfg r;
    const char *ck = NULL;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_str(&r, "checkpoint", &ck));
    const char *bp;
    DS_TRY(drafter_precision(&r, "block_precision", &bp));
    DS_TRY(tree_read_opts(&r, &s->tree_nodes, &s->tree_width));
    if (ck) {
        DS_TRY(jcfg_close(&r)); /* a checkpoint carries its architecture */
        DS_TRY(md_load(&s->m, ck, &t->m, 0));
        snprintf(d->describe, sizeof d->describe, "medusa: checkpoint %s (%d heads)", ck, s->m.cfg.heads);
    } else { /* untrained, for tests and the gate: {"heads": K, "seed": N, "init_std": x, "vocab_ids": [...]} */
        md_config c;
        uint64_t seed = 1;
        float istd = 0;
        int heads = 4, vids[256], nv = 0;
        DS_TRY(jcfg_u64(&r, "seed", &seed));
        DS_TRY(jcfg_float(&r, "init_std", 0, 100, &istd));
        DS_TRY(jcfg_int(&r, "heads", 1, MD_MAX_HEADS, &heads));
        const cJSON *vj = jcfg_get(&r, "vocab_ids");
        if (vj) DS_TRY(subvocab_json_ids(vj, vids, 256, &nv));
        DS_TRY(jcfg_close(&r));
        DS_TRY(md_config_init(&c, &t->m, NULL));
        c.heads = heads;
        c.contract.draft_vocab = nv < c.vocab ? nv : 0;
        DS_TRY(md_model_init(&s->m, &c, &t->m, seed, istd, 0, nv ? vids : NULL));
        snprintf(d->describe, sizeof d->describe, "medusa: untrained (%d heads%s)", heads, istd > 0 ? ", random blocks" : "");
    }
    const md_config *c = &s->m.cfg;
    DS_TRY(contract_check_serving(&c->contract, t, ck ? ck : "medusa"));
    d->has_conf = 1;
    d->max_gamma = c->heads;
    d->n_capture = 1;
    d->capture_layers[0] = c->tap;
    snprintf(d->fingerprint, sizeof d->fingerprint, "medusa-%d-%016llx", c->heads, (unsigned long long)s->m.n_params);
    contract_weights_tag(&c->contract, s->m.params, s->m.n_params, d->fingerprint, sizeof d->fingerprint);
    s->tk = &t->tk;
    if (s->tree_nodes) tree_mark(d, "a best-first tree", s->tree_nodes, s->tree_width); /* over the heads' top tokens */
    int K = c->heads, D = c->dim, V = c->vocab, Vd = s->m.sv.Vd;
    backend *be = s->be = t->be;
    DS_TRY(drafter_type_of(bp, "block_precision", D % QK8_0 == 0, "a width that is a multiple of 32", &s->bt));
    if (s->bt != GGML_F32) DS_TRY(blocks_to_backend(s));
    snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", blocks %s",
             drafter_type_key(s->bt));
    /* the head the drafts come from: the target's own, or its draft-vocabulary rows (prepared once) */
    DS_TRY(subvocab_gather_head(&s->m.sv, &t->m.output));
    if (s->m.sv.rows) DS_TRY(be->prepare_mats(be, (const qmat *[]){&s->m.sv.head}, 1));
    DS_TRYP(s->Rd = be->alloc(be, sizeof(float) * (size_t)K * D));
    DS_TRYP(s->Ud = be->alloc(be, sizeof(float) * (size_t)K * Vd));
    DS_TRYP(s->U = ds_malloc(sizeof(float) * (size_t)K * Vd, "medusa logits"));
    DS_TRYP(s->R = ds_malloc(sizeof(float) * (size_t)K * D, "medusa rows"));
    DS_TRYP(s->u = ds_malloc(sizeof(float) * (size_t)D, "medusa rows"));
    DS_TRYP(s->qalt = ds_malloc(sizeof(float) * (size_t)V, "medusa logits"));
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int medusa_begin(drafter *d, request *r, const float *prompt_hidden) {
    medusa *s = d->impl;
    int D = s->m.cfg.dim;
    md_state *st = ds_calloc(1, sizeof *st, "medusa state");
    if (!st) return -1;
    r->dstate = st;
    DS_CHECK(prompt_hidden != NULL, "medusa needs the target's hidden states of the prompt");
    DS_TRYP(st->h = ds_malloc(sizeof(float) * (size_t)D, "medusa state"));
    DS_TRYP(st->h0 = ds_malloc(sizeof(float) * (size_t)D, "medusa state"));
    norm_row(&s->m, st->h0, prompt_hidden + (size_t)(r->n_prompt - 1) * D); /* the state that drew the anchor */
    memcpy(st->h, st->h0, sizeof(float) * (size_t)D);
    return 0;
fail:
    return -1; /* end() frees what was made */
}

/* the tree's rows: head k's top tree_width tokens are every depth-(k + 1) node's children (Medusa's heads
 * read the anchor's state only), computed once a round when first asked; none after an end token */
static int medusa_row(void *ctx, int node, int tok, int depth, int K, int *ids, float *p) {
    DS_UNUSED(node);
    medusa *s = ctx;
    if (depth >= s->m.cfg.heads || (depth > 0 && tokenizer_is_eog(s->tk, tok))) return 0;
    int Vd = s->m.sv.Vd, n = 0;
    for (; s->rows_done <= depth; s->rows_done++) {
        int k = s->rows_done;
        tree_topk_softmax(s->U + (size_t)k * Vd, Vd, s->m.sv.vid, s->tree_width, s->rid[k], s->rp[k], s->qalt);
    }
    for (; n < K && n < s->tree_width && s->rp[depth][n] > 0; n++) ids[n] = s->rid[depth][n], p[n] = s->rp[depth][n];
    return n;
}

static int medusa_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    medusa *s = d->impl;
    md_state *st = r->dstate;
    const md_config *c = &s->m.cfg;
    int D = c->dim, Vd = s->m.sv.Vd, g = s->tree_nodes ? c->heads : DS_MIN(gamma, c->heads);
    if (s->tree_nodes && gamma <= 0) g = 0;
    out->n = 0;
    if (g <= 0) return 0;
    backend *be = s->be;
    if (s->bt != GGML_F32) { /* W_k h for every head in passes of up to 8 matrices sharing the input */
        DS_TRY(be->to_device(be, s->Hd, st->h, sizeof(float) * (size_t)D));
        for (int k0 = 0; k0 < g; k0 += 8) {
            const qmat *w8[8];
            for (int k = k0; k < DS_MIN(g, k0 + 8); k++) w8[k - k0] = &s->wq[k];
            DS_TRY(be->matmul(be, DS_MIN(8, g - k0), s->Wd + k0, w8, s->Hd, 1));
        }
    }
    for (int k = 0; k < g; k++) { /* r_k = h + SiLU(W_k h + b_k) */
        const float *Wk = s->m.params + (size_t)k * (D + 1) * D, *bk = Wk + (size_t)D * D;
        if (s->bt != GGML_F32) {
            DS_TRY(be->to_host(be, s->u, s->Wd[k], sizeof(float) * (size_t)D));
            for (int i = 0; i < D; i++) s->u[i] += bk[i];
        } else
            linear_forward_f(s->u, st->h, Wk, bk, 1, D, D);
        float *rk = s->R + (size_t)k * D;
        for (int i = 0; i < D; i++) rk[i] = st->h[i] + s->u[i] / (1.0f + expf(-s->u[i]));
    }
    float *o[1] = {s->Ud};
    const qmat *w[1] = {&s->m.sv.head};
    DS_TRY(be->to_device(be, s->Rd, s->R, sizeof(float) * (size_t)g * D));
    DS_TRY(be->matmul(be, 1, o, w, s->Rd, g));
    DS_TRY(be->to_host(be, s->U, s->Ud, sizeof(float) * (size_t)g * Vd));
    if (s->tree_nodes) {
        s->rows_done = 0;
        return tree_best_first(medusa_row, s, s->tree_width, DS_MIN(gamma, out->cap), 0, out);
    }
    for (int k = 0; k < g; k++)
        DS_TRY(draft_from_logits(d, r, s->U + (size_t)k * Vd, &s->m.sv, sp, &c->contract, k, out, &s->scr,
                                 s->qalt));
    out->n = g;
    return 0;
fail:
    return -1;
}

static int medusa_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(next_token);
    medusa *s = d->impl;
    md_state *st = r->dstate;
    if (!hidden) {
        ds_error("medusa needs the target's hidden states of the accepted rows");
        return -1;
    }
    /* rows anchor .. x_accepted: the last drew next_token, the new anchor */
    norm_row(&s->m, st->h, hidden + (size_t)n_accepted * s->m.cfg.dim);
    return 0;
}

static int medusa_rewind(drafter *d, request *r) {
    medusa *s = d->impl;
    md_state *st = r->dstate;
    memcpy(st->h, st->h0, sizeof(float) * (size_t)s->m.cfg.dim);
    return 0;
}

static void medusa_end(drafter *d, request *r) {
    DS_UNUSED(d);
    md_state *st = r->dstate;
    if (!st) return;
    free(st->h), free(st->h0), free(st);
    r->dstate = NULL;
}

static void medusa_close(drafter *d) {
    medusa *s = d->impl;
    if (!s) return;
    if (s->be) {
        s->be->release(s->be, s->Rd), s->be->release(s->be, s->Ud), s->be->release(s->be, s->Hd);
        for (int k = 0; k < MD_MAX_HEADS; k++) s->be->release(s->be, s->Wd[k]);
        for (int k = 0; k < MD_MAX_HEADS; k++)
            if (s->wq[k].data) s->be->forget_mats(s->be, (const qmat *[]){&s->wq[k]}, 1);
    }
    for (int k = 0; k < MD_MAX_HEADS; k++) free((void *)s->wq[k].data);
    /* the backend keys its copies by the data's address: forget them before the rows are freed */
    if (s->be && s->m.sv.rows) s->be->forget_mats(s->be, (const qmat *[]){&s->m.sv.head}, 1);
    md_model_free(&s->m);
    free(s->U), free(s->R), free(s->u), free(s->qalt);
    lp_scratch_free(&s->scr);
    free(s);
    d->impl = NULL;
}

/* the training family (train_family.h) */
typedef struct {
    md_config c;
    md_model m;
} md_train;

static int md_tf_configure(void *st, const char *name, const cJSON *arch, const target *t, int *taps, int *n_tap) {
    (void)name;
    md_train *b = st;
    DS_TRY(md_config_init(&b->c, &t->m, arch));
    contract_stamp(&b->c.contract, t);
    *n_tap = 1, taps[0] = b->c.tap;
    return 0;
fail:
    return -1;
}

static int md_tf_init(void *st, const target *t, const train_cache *d, uint64_t seed, int full_vocab,
                      const char *resume_dir, trainable *tr, char *describe, size_t n) {
    (void)resume_dir; /* a resumed run reads its parameters from OUT/last in train_run */
    md_train *b = st;
    int *ids;
    DS_TRY(train_family_vocab(d, t, b->c.contract.draft_vocab, full_vocab, &ids));
    int e = md_model_init(&b->m, &b->c, &t->m, seed, 0, 1, ids);
    free(ids);
    DS_TRY(e);
    DS_TRY(md_trainable(&b->m, tr));
    snprintf(describe, n, "medusa, %zu parameters (%d heads on layer %d)", b->m.n_params, b->c.heads, b->c.tap);
    return 0;
fail:
    return -1;
}

static void md_tf_release(void *st) { md_model_free(&((md_train *)st)->m); }

static const train_family md_train_family = {sizeof(md_train), md_tf_configure, md_tf_init, md_tf_release};

const drafter_ops drafter_medusa = {
    "medusa",
    "Medusa-1 heads on the target's last hidden state: {\"checkpoint\": DIR, \"block_precision\": \"auto\" | \"q8_0\" | "
    "\"f32\", \"tree_nodes\": 0, \"tree_width\": 4} (tree_nodes N > 0: a best-first tree of N nodes over the heads' top "
    "tree_width tokens, verified exactly; untrained: {\"heads\": 4, \"init_std\": 0, \"seed\": 1})",
    medusa_open, medusa_begin, medusa_propose, medusa_commit, medusa_end, medusa_rewind, medusa_close,
    /* the gate's untrained heads: random blocks, so the drafts move with the state; on the tiny
     * target over a draft vocabulary of 6 of its 8 tokens in a scrambled order (row j is not token j),
     * on the real one over the whole vocabulary */
    "{\"heads\": 3, \"init_std\": 2.0, \"vocab_ids\": [5, 0, 7, 2, 6, 3]}",
    "{\"heads\": 3, \"init_std\": 2.0}",
    .train = &md_train_family,
    /* its tree on the tiny target: 3 heads, 2 children a node, 6 nodes */
    .gate_config_tree = "{\"heads\": 3, \"init_std\": 2.0, \"vocab_ids\": [5, 0, 7, 2, 6, 3], \"tree_nodes\": 6, "
                        "\"tree_width\": 2}",
};
