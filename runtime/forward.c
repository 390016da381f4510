#include "forward.h"

#include <math.h>
#include <string.h>

#include "base/common.h"

int fwd_state_init(fwd_state *st, backend *be) {
    memset(st, 0, sizeof *st);
    st->be = be;
    st->pass_T = be->device ? 0 : FWD_PASS_T; /* a GPU's batches stay whole: not measured there */
    return 0;
}

static void release_all(fwd_state *st) {
    backend *be = st->be;
    float **dev[] = {&st->x, &st->xb, &st->q, &st->k, &st->v, &st->att, &st->h1, &st->h2, &st->hid};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) {
        be->release(be, *dev[i]);
        *dev[i] = NULL;
    }
    free(st->cos);
    free(st->sin);
    free(st->seq);
    free(st->pos);
    free(st->rows);
    free(st->rpos);
    st->cos = st->sin = NULL;
    st->seq = st->pos = st->rows = st->rpos = NULL;
    st->cap_T = 0;
}

void fwd_state_free(fwd_state *st) {
    if (!st->be) return;
    release_all(st);
    st->be->release(st->be, st->logits);
    st->logits = NULL;
}

static int reserve_T(fwd_state *st, const model_config *c, int T) {
    if (T <= st->cap_T) return 0;
    int cap = DS_MAX(T, 2 * st->cap_T);
    release_all(st);
    backend *be = st->be;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t wide = DS_MAX((size_t)c->dim, qd), n = (size_t)cap;
    DS_TRYP(st->x = be->alloc(be, sizeof(float) * n * c->dim));
    DS_TRYP(st->xb = be->alloc(be, sizeof(float) * n * wide));
    DS_TRYP(st->q = be->alloc(be, sizeof(float) * n * qd));
    DS_TRYP(st->k = be->alloc(be, sizeof(float) * n * kvd));
    DS_TRYP(st->v = be->alloc(be, sizeof(float) * n * kvd));
    DS_TRYP(st->att = be->alloc(be, sizeof(float) * n * qd));
    DS_TRYP(st->h1 = be->alloc(be, sizeof(float) * n * c->hidden_dim));
    DS_TRYP(st->h2 = be->alloc(be, sizeof(float) * n * c->hidden_dim));
    DS_TRYP(st->hid = be->alloc(be, sizeof(float) * n * c->dim));
    DS_TRYP(st->cos = ds_malloc(sizeof(float) * n * (size_t)(c->head_dim / 2), "rope table"));
    DS_TRYP(st->sin = ds_malloc(sizeof(float) * n * (size_t)(c->head_dim / 2), "rope table"));
    DS_TRYP(st->seq = ds_malloc(sizeof(int) * n, "batch index"));
    DS_TRYP(st->pos = ds_malloc(sizeof(int) * n, "batch index"));
    DS_TRYP(st->rows = ds_malloc(sizeof(int) * n, "batch index"));
    DS_TRYP(st->rpos = ds_malloc(sizeof(int) * n, "batch index"));
    st->cap_T = cap;
    return 0;
fail:
    release_all(st);
    return -1;
}

static int reserve_logits(fwd_state *st, const model_config *c, int rows) {
    if (rows <= st->cap_logit_rows) return 0;
    st->be->release(st->be, st->logits);
    st->logits = st->be->alloc(st->be, sizeof(float) * (size_t)rows * c->vocab_size);
    st->cap_logit_rows = st->logits ? rows : 0;
    return st->logits ? 0 : -1;
}

typedef struct {
    const model *m;
    fwd_state *st;
    const fwd_batch *b;
} fwd_call;

/* x += in . W^T (the residual stream after attention and after the MLP), fused where the backend
 * has matmul_add; else through scratch */
static int residual(backend *be, float *x, const qmat *W, const float *in, float *scratch, int T) {
    if (be->matmul_add) return be->matmul_add(be, x, W, in, T);
    float *outs[1] = {scratch};
    const qmat *ws[1] = {W};
    DS_TRY(be->matmul(be, 1, outs, ws, in, T));
    return be->add(be, x, scratch, (size_t)T * W->rows);
fail:
    return -1;
}

/* Request s's tree (its tokens from batch index t): the parent slots into the cache's tree arrays and
 * each node's RoPE position (the tree's first slot + its depth). A batch with parent starts a new tree
 * at the cache's end (a chain-shaped one is no tree: it attends as without parents); one with
 * parent_slot extends the cache's tree, or starts one; any other ends it. */
static int tree_slots(const fwd_batch *b, int s, int t, int *rpos) {
    kv_cache *kv = b->kv[s];
    int len = kv->len, n = b->n_new[s], cont = b->parent_slot && kv->tree, tree = b->parent_slot != NULL;
    if (n == 0) return 0; /* the request sits this forward out */
    int t0 = cont ? kv->tree0 : len;
    for (int j = 0; j < n; j++) { /* checked before the cache's tree changes */
        if (b->parent) {
            int pj = b->parent[t + j];
            DS_CHECK(pj >= -1 && pj < j, "forward: request %d's token %d has parent %d (a parent comes first)", s, j, pj);
            tree |= pj != j - 1;
        } else if (b->parent_slot) {
            int P = b->parent_slot[t + j];
            DS_CHECK(P == -1 || (P >= t0 && P < len + j), "forward: request %d's token %d has parent slot %d (the tree "
                     "holds slots %d..%d before it)", s, j, P, t0, len + j - 1);
        }
    }
    kv->tree = 0;
    if (!tree) return 0;
    int need = len + n - t0;
    if (need > kv->tcap) {
        int cap = DS_MAX(need, 2 * kv->tcap), *p = ds_realloc(kv->tpar, sizeof(int) * (size_t)cap, "kv tree");
        if (!p) return -1;
        kv->tpar = p;
        if (!(p = ds_realloc(kv->tdep, sizeof(int) * (size_t)cap, "kv tree"))) return -1;
        kv->tdep = p, kv->tcap = cap;
    }
    for (int j = 0; j < n; j++) {
        int P = b->parent ? (b->parent[t + j] < 0 ? -1 : len + b->parent[t + j]) : b->parent_slot[t + j];
        int i = len + j - t0;
        kv->tpar[i] = P, kv->tdep[i] = P < 0 ? 0 : kv->tdep[P - t0] + 1;
        rpos[t + j] = t0 + kv->tdep[i];
    }
    kv->tree = 1, kv->tree0 = t0;
    return 0;
fail:
    return -1;
}

/* the whole batch's checks, before any cache moves: counts, logits, context length, token ids; *T = sum n_new */
static int check_batch(const model_config *c, const fwd_batch *b, int *T) {
    long t = 0;
    DS_CHECK(b->n_seq > 0, "forward: empty batch");
    for (int s = 0; s < b->n_seq; s++) {
        DS_CHECK(b->n_new[s] >= 0, "forward: request %d adds %d tokens", s, b->n_new[s]);
        DS_CHECK(b->all_logits || !b->logits || b->n_new[s] > 0, "forward: request %d adds no token but wants logits", s);
        long need = (long)b->kv[s]->len + b->n_new[s];
        DS_CHECK(need <= c->max_seq, "context length exceeded: request %d would hold %ld tokens, the model's limit is %d",
                 s, need, c->max_seq);
        t += b->n_new[s]; /* each n_new <= max_seq <= 2^24, so no overflow before the check */
        DS_CHECK(t <= (1 << 24), "forward: batch of more than 2^24 tokens");
    }
    for (long i = 0; i < t; i++)
        DS_CHECK(b->tokens[i] >= 0 && b->tokens[i] < c->vocab_size, "forward: token id %d outside the vocabulary (0..%d)",
                 b->tokens[i], c->vocab_size - 1);
    *T = (int)t;
    return 0;
fail:
    return -1;
}

static int forward_body(void *arg) {
    const fwd_call *fc = arg;
    const model *m = fc->m;
    fwd_state *st = fc->st;
    const fwd_batch *b = fc->b;
    const model_config *c = &m->cfg;
    backend *be = st->be;
    int T;
    DS_TRY(check_batch(c, b, &T));
    for (int s = 0; s < b->n_seq; s++) {
        kv_cache *kv = b->kv[s];
        long need = (long)kv->len + b->n_new[s];
        DS_TRY(kv_cache_reserve(be, kv, (int)DS_MIN((long)c->max_seq, DS_MAX(need, 2L * kv->cap))));
    }
    if (T == 0) return 0;
    for (int i = 0; i < b->n_capture; i++)
        DS_CHECK(b->capture_layers[i] >= -1 && b->capture_layers[i] < c->n_layers,
                 "forward: capture layer %d outside -1..%d", b->capture_layers[i], c->n_layers - 1);
    DS_TRY(reserve_T(st, c, T));
    DS_CHECK(!b->parent || !b->parent_slot, "forward: a batch gives parent or parent_slot, not both");
    for (int s = 0, t = 0; s < b->n_seq; t += b->n_new[s], s++) {
        for (int j = 0; j < b->n_new[s]; j++) st->seq[t + j] = s, st->pos[t + j] = st->rpos[t + j] = b->kv[s]->len + j;
        DS_TRY(tree_slots(b, s, t, st->rpos));
    }
    rope_tables_fill(st->cos, st->sin, st->rpos, T, c->head_dim, c->rope_theta, c->rope_scale, m->rope_freqs);

    int dim = c->dim, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    attn_batch ab = {T, st->seq, st->pos, b->kv, NULL};
    rope_tables rt = {hd, c->rope_neox, st->cos, st->sin};
    size_t cap_stride = (size_t)T * dim;

#define CAPTURE(layer_id)                                                                                    \
    for (int ci = 0; ci < b->n_capture; ci++)                                                                \
        if (b->capture_layers[ci] == (layer_id))                                                             \
            DS_TRY(be->to_host(be, b->capture + ci * cap_stride, st->x, cap_stride * sizeof(float)));

    DS_TRY(be->embed(be, st->x, &m->tok_embd, b->tokens, T));
    CAPTURE(-1);
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        /* attention block */
        DS_TRY(be->rmsnorm(be, st->xb, st->x, L->attn_norm, T, dim, c->norm_eps));
        {
            float *outs[3] = {st->q, st->k, st->v};
            const qmat *ws[3] = {&L->wq, &L->wk, &L->wv};
            DS_TRY(be->matmul(be, 3, outs, ws, st->xb, T));
        }
        if (L->bq) { /* qwen2: the projections' biases, before RoPE */
            DS_TRY(be->add_bias(be, st->q, L->bq, T, nh * hd));
            DS_TRY(be->add_bias(be, st->k, L->bk, T, nkv * hd));
            DS_TRY(be->add_bias(be, st->v, L->bv, T, nkv * hd));
        }
        if (L->q_norm) {
            DS_TRY(be->rmsnorm(be, st->q, st->q, L->q_norm, T * nh, hd, c->norm_eps));
            DS_TRY(be->rmsnorm(be, st->k, st->k, L->k_norm, T * nkv, hd, c->norm_eps));
        }
        DS_TRY(be->rope(be, st->q, T, nh, &rt));
        DS_TRY(be->rope(be, st->k, T, nkv, &rt));
        DS_TRY(be->kv_write(be, &ab, l, st->k, st->v));
        DS_TRY(be->attention(be, st->att, st->q, &ab, l, nh, nkv, hd));
        DS_TRY(residual(be, st->x, &L->wo, st->att, st->xb, T));
        /* feed-forward block */
        DS_TRY(be->rmsnorm(be, st->xb, st->x, L->ffn_norm, T, dim, c->norm_eps));
        {
            float *outs[2] = {st->h1, st->h2};
            const qmat *ws[2] = {&L->w_gate, &L->w_up};
            DS_TRY(be->matmul(be, 2, outs, ws, st->xb, T));
        }
        DS_TRY(be->swiglu(be, st->h1, st->h1, st->h2, (size_t)T * c->hidden_dim));
        DS_TRY(residual(be, st->x, &L->w_down, st->h1, st->xb, T));
        CAPTURE(l);
    }
#undef CAPTURE

    /* final norm and head, only on the rows that need logits */
    int n_rows = 0;
    if (b->all_logits) {
        for (int t = 0; t < T; t++) st->rows[n_rows++] = t;
    } else {
        for (int s = 0, off = 0; s < b->n_seq; off += b->n_new[s], s++)
            if (b->n_new[s] > 0) st->rows[n_rows++] = off + b->n_new[s] - 1;
    }
    if (b->final_hidden) {
        DS_TRY(be->rmsnorm(be, st->hid, st->x, m->out_norm, T, dim, c->norm_eps));
        DS_TRY(be->to_host(be, b->final_hidden, st->hid, sizeof(float) * (size_t)T * dim));
        if (!b->all_logits) /* gather the rows the head needs */
            for (int r = 0; r < n_rows; r++)
                DS_TRY(be->copy(be, st->xb + (size_t)r * dim, st->hid + (size_t)st->rows[r] * dim, sizeof(float) * dim));
        else DS_TRY(be->copy(be, st->xb, st->hid, sizeof(float) * (size_t)T * dim));
    } else if (b->logits) {
        for (int r = 0; r < n_rows; r++)
            DS_TRY(be->copy(be, st->hid + (size_t)r * dim, st->x + (size_t)st->rows[r] * dim, sizeof(float) * dim));
        DS_TRY(be->rmsnorm(be, st->xb, st->hid, m->out_norm, n_rows, dim, c->norm_eps));
    }
    if (b->logits) {
        /* a host backend writes the head's rows straight into the caller's array (at B = 8 the copy
         * was 1.5 MB a step); a device one into its own buffer, then copies them back */
        if (be->device) DS_TRY(reserve_logits(st, c, n_rows));
        float *outs[1] = {be->device ? st->logits : b->logits};
        const qmat *ws[1] = {&m->output};
        DS_TRY(be->matmul(be, 1, outs, ws, st->xb, n_rows));
        if (be->device)
            DS_TRY(be->to_host(be, b->logits, st->logits, sizeof(float) * (size_t)n_rows * c->vocab_size));
    }
    for (int s = 0; s < b->n_seq; s++) b->kv[s]->len += b->n_new[s];
    return 0;
fail:
    return -1;
}

static int forward_pass(const model *m, fwd_state *st, const fwd_batch *b) {
    fwd_call fc = {m, st, b};
    backend *be = st->be;
    /* the whole forward holds the backend's threads where it can (one fork instead of ~150) */
    return be->session ? be->session(be, forward_body, &fc) : forward_body(&fc);
}

/* a long chain batch in passes of at most st->pass_T consecutive tokens of the flattened batch (fwd_state):
 * the whole batch is checked first, so a bad token or an overlong request fails before any cache moves */
static int forward_passes(const model *m, fwd_state *st, const fwd_batch *b, int T) {
    const model_config *c = &m->cfg;
    DS_TRY(check_batch(c, b, &T));
    size_t V = (size_t)c->vocab_size;
    int n_sub = 0, *sn = ds_malloc(sizeof(int) * (size_t)b->n_seq, "forward passes"), *ss = NULL;
    kv_cache **skv = NULL;
    float *lg = NULL; /* a pass's last-token logits (one row per request in it), when not all_logits */
    int rc = -1;
    if (!sn || !(ss = ds_malloc(sizeof(int) * (size_t)b->n_seq, "forward passes")) ||
        !(skv = ds_malloc(sizeof(kv_cache *) * (size_t)b->n_seq, "forward passes")))
        goto done;
    if (b->logits && !b->all_logits && !(lg = ds_malloc(sizeof(float) * V * (size_t)b->n_seq, "forward passes")))
        goto done;
    for (int t0 = 0; t0 < T; t0 += st->pass_T) {
        int t1 = DS_MIN(T, t0 + st->pass_T);
        n_sub = 0;
        for (int s = 0, off = 0; s < b->n_seq; off += b->n_new[s], s++) { /* request s holds [off, off + n_new) */
            int a = DS_MAX(off, t0), e = DS_MIN(off + b->n_new[s], t1);
            if (e > a) ss[n_sub] = s, sn[n_sub] = e - a, skv[n_sub++] = b->kv[s];
        }
        fwd_batch p = {.n_seq = n_sub, .kv = skv, .n_new = sn, .tokens = b->tokens + t0, .all_logits = b->all_logits};
        if (b->logits) p.logits = b->all_logits ? b->logits + (size_t)t0 * V : lg;
        if (forward_pass(m, st, &p)) goto done;
        if (lg) /* a request whose last token was in this pass: its row */
            for (int i = 0, off = 0, s = 0; i < n_sub; i++) {
                for (; s < ss[i]; s++) off += b->n_new[s];
                if (off + b->n_new[s] <= t1) memcpy(b->logits + (size_t)s * V, lg + (size_t)i * V, sizeof(float) * V);
            }
    }
    rc = 0;
done:
    free(sn);
    free(ss);
    free(skv);
    free(lg);
    return rc;
fail:
    return -1;
}

int model_forward(const model *m, fwd_state *st, const fwd_batch *b) {
    long T = 0;
    for (int s = 0; s < b->n_seq; s++) T += b->n_new[s] > 0 ? b->n_new[s] : 0;
    /* the exact contract's batches of gemm_min_T rows and more go through BLAS GEMM, whose rounding
     * depends on the batch's size: its batches stay whole, so its results do not move */
    if (st->pass_T > 0 && T > st->pass_T && T <= (1 << 24) && !st->be->exact && !b->parent && !b->parent_slot &&
        !b->n_capture && !b->final_hidden)
        return forward_passes(m, st, b, (int)T);
    return forward_pass(m, st, b);
}

int model_forward_one(const model *m, fwd_state *st, kv_cache *kv, const int *tokens, int n, int all_logits,
                      float *logits) {
    kv_cache *kvs[1] = {kv};
    fwd_batch b = {.n_seq = 1, .kv = kvs, .n_new = &n, .tokens = tokens, .all_logits = all_logits, .logits = logits};
    return model_forward(m, st, &b);
}
