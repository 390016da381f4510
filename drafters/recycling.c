/* recycling — Token Recycling (Luo et al., arXiv 2408.08696; training-free.md §3) as a chain.
 *
 * A table M holds, for each token, the top-k next tokens the target predicted the last time that
 * token was the input of a row it scored, with their probabilities. Verification scores those rows
 * anyway: the loop hands the drafter every round's rows (observe(): the anchor's and every verified
 * draft's, rejected ones included, as the paper updates every node) and, at prefill, the head's rows
 * of the prompt's last `prompt_rows` positions (as SAM-Decoding's implementation feeds every prompt
 * position; the head over them costs what it costs, inside the measured prefill), and M[input] is
 * overwritten with the top-k of that row's raw logits (probabilities from the softmax at T = 1).
 * Drafting follows M's first column from the anchor, x_1 = M[anchor][0], x_{k+1} = M[x_k][0],
 * stopping at a row never written or after end-of-generation: the top branch of the paper's static
 * tree (its 80-node tree is a GPU design; on a CPU every verified slot costs). No model and no
 * randomness: q_k = delta(x_k), so the round is exact at every temperature. Trees: "tree_nodes" N
 * with "tree_shape" "best-first" (DDTree's expansion over the recorded probabilities) or "static"
 * (the paper's 80-node template filled breadth first, its N most probable nodes).
 *
 * Kept per request and across requests: a request writes its prompt's rows and its own rows since
 * into two tables of its own (a rewind keeps the first), lookups read the request's rows and else
 * the run's, and when the request ends its rows are copied into the run's table (the paper's "hot
 * start"), never during it, so a request's drafts depend only on its own past and the requests that
 * ended before it (the gate replays requests). Memory: V x k ids (int32) and probabilities (fp32)
 * plus a stamp per token a table, 3.3 MB for SmolLM2's 49,152 tokens at k = 8: one for the run and
 * two per live request.
 *
 * Confidence c_k (what the scheduler reads): accept_stats' online acceptance rate in the cell of
 * x_k's recorded probability (8 buckets) and whether its row is the request's own or the run's;
 * "calibration" temperatures from `calibrate` scale logit(c_k). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/kernels/kernels_cpu.h"
#include "accept_stats.h"
#include "drafter.h"
#include "tree_build.h"

#define RC_PB 8 /* recorded-probability buckets */
#define RC_CELLS (RC_PB * 2)
#define RC_MAXG 64
#define RC_MAXK 32
#define RC_TEMPLATE_NODES 80 /* the paper's static tree's draft nodes */

typedef struct {
    int *id;        /* [V][k] */
    float *p;       /* [V][k] */
    uint8_t *stamp; /* [V] 1: row written */
} rc_table;

typedef struct {
    int k, V;
    int repeat;           /* a token whose row is unknown is followed by itself (else the chain stops) */
    int tree_nodes;       /* > 0: a tree of this many nodes instead of the chain */
    int tree_static;      /* the tree is the paper's static template (else best-first) */
    tree_calib cal;           /* finished requests' verified tree nodes */
    rc_table run;
    accept_prior ap;
    accept_counts runc;   /* finished requests' acceptance counts */
    int eos_ok;
    float *tmp;           /* [V] scratch */
} recycling;

typedef struct {
    rc_table pre, own;       /* the prompt's rows (kept by a rewind), the rows written since */
    int *wpre, n_pre, *wown, n_own; /* which rows each holds (merged at end; own cleared at rewind) */
    accept_counts own_c;
    int n, n0, tok[RC_MAXG], cell[RC_MAXG], after; /* n0: committed tokens at the last proposal */
    float tconf[DRAFT_TREE_MAX]; /* the last tree's raw node confidences (path products) */
    int tn;                  /* its nodes */
    tree_calib cal;           /* this request's verified tree nodes */
} rc_state;

static int table_new(rc_table *t, int V, int k) {
    t->id = ds_malloc(sizeof(int) * (size_t)V * k, "recycling table");
    t->p = ds_malloc(sizeof(float) * (size_t)V * k, "recycling table");
    t->stamp = ds_calloc((size_t)V, 1, "recycling table");
    return t->id && t->p && t->stamp ? 0 : -1;
}

static void table_free(rc_table *t) { free(t->id), free(t->p), free(t->stamp); }

static int prob_bucket(float p) {
    static const float edge[RC_PB - 1] = {0.05f, 0.1f, 0.2f, 0.35f, 0.5f, 0.7f, 0.9f};
    int b = 0;
    while (b < RC_PB - 1 && p >= edge[b]) b++;
    return b;
}

static int recycling_open(drafter *d, const cJSON *cfg, target *t) {
    recycling *g = ds_calloc(1, sizeof *g, "recycling drafter");
    if (!g) return -1;
    d->impl = g;
    g->k = 8, g->V = t->m.cfg.vocab_size;
    jcfg r;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_int(&r, "k", 1, RC_MAXK, &g->k));
    DS_TRY(jcfg_bool(&r, "repeat", &g->repeat));
    const char *shape = "best-first";
    DS_TRY(jcfg_str(&r, "tree_shape", &shape));
    g->tree_static = !strcmp(shape, "static");
    DS_CHECK(g->tree_static || !strcmp(shape, "best-first"),
             "drafter.tree_shape: '%s' is not a tree shape (best-first, static)", shape);
    g->tree_nodes = g->tree_static ? RC_TEMPLATE_NODES : 0;
    DS_TRY(jcfg_int(&r, "tree_nodes", 0, g->tree_static ? RC_TEMPLATE_NODES : 64, &g->tree_nodes));
    d->observe_prompt = 256;
    DS_TRY(jcfg_int(&r, "prompt_rows", 1, 1 << 20, &d->observe_prompt));
    DS_TRY(accept_prior_read(&r, &g->ap));
    DS_TRY(jcfg_close(&r));
    g->k = DS_MIN(g->k, g->V);
    DS_TRY(table_new(&g->run, g->V, g->k));
    DS_TRY(accept_counts_init(&g->runc, RC_CELLS, g->ap.prior, g->ap.prior_n));
    DS_TRYP(g->tmp = ds_malloc(sizeof(float) * (size_t)g->V, "recycling scratch"));
    g->eos_ok = t->has_tokenizer;
    d->has_conf = 1;
    d->deterministic = 1;
    d->tree_nodes = g->tree_nodes;
    d->tree_counts = g->tree_nodes > 0;
    if (g->tree_nodes)
        snprintf(d->describe, sizeof d->describe,
                 "recycling: Token Recycling tree of %d nodes, %s over each token's top-%d recorded next tokens",
                 g->tree_nodes, g->tree_static ? "the paper's static template" : "best-first", g->k);
    else
        snprintf(d->describe, sizeof d->describe,
                 "recycling: Token Recycling chain, each token's top-%d next tokens from the target's verified rows", g->k);
    if (g->tree_nodes)
        snprintf(d->fingerprint, sizeof d->fingerprint, "recycling:%d:%s%d", g->k, g->tree_static ? "static" : "tree",
                 g->tree_nodes);
    else snprintf(d->fingerprint, sizeof d->fingerprint, "recycling:%d", g->k);
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int recycling_begin(drafter *d, request *r, const float *prompt_hidden) {
    DS_UNUSED(prompt_hidden);
    recycling *g = d->impl;
    rc_state *s = ds_calloc(1, sizeof *s, "recycling state");
    if (!s) return -1;
    r->dstate = s;
    DS_TRY(table_new(&s->pre, g->V, g->k));
    DS_TRY(table_new(&s->own, g->V, g->k));
    DS_TRYP(s->wpre = ds_malloc(sizeof(int) * (size_t)g->V, "recycling state"));
    DS_TRYP(s->wown = ds_malloc(sizeof(int) * (size_t)g->V, "recycling state"));
    DS_TRY(accept_counts_init(&s->own_c, RC_CELLS, 0, 0));
    return 0;
fail:
    return -1; /* end() frees what was made */
}

/* row `in` of table t (its rows listed in w[*n]) from ids/p */
static void row_write(const recycling *g, rc_table *t, int *w, int *n, int in, const int *id, const float *p) {
    memcpy(t->id + (size_t)in * g->k, id, sizeof(int) * (size_t)g->k);
    memcpy(t->p + (size_t)in * g->k, p, sizeof(float) * (size_t)g->k);
    if (!t->stamp[in]) t->stamp[in] = 1, w[(*n)++] = in;
}

/* table from's listed rows copied into table to */
static void rows_copy(const recycling *g, rc_table *to, const rc_table *from, const int *w, int n) {
    for (int i = 0; i < n; i++) {
        size_t row = (size_t)w[i] * g->k;
        memcpy(to->id + row, from->id + row, sizeof(int) * (size_t)g->k);
        memcpy(to->p + row, from->p + row, sizeof(float) * (size_t)g->k);
        to->stamp[w[i]] = 1;
    }
}

/* the top-k of a row of raw logits, best first (the lower id on ties), with softmax probabilities */
static void row_topk(recycling *g, const float *z, int *id, float *p) {
    int k = g->k, n = 0;
    for (int v = 0; v < g->V; v++) {
        if (n == k && !(z[v] > z[id[k - 1]])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && z[v] > z[id[j - 1]]) id[j] = id[j - 1], j--;
        id[j] = v;
    }
    int bad;
    float mx = qk_max_scan(z, g->V, &bad);
    double lse = mx + log(qk_exp_sum(z, mx, g->tmp, g->V));
    for (int j = 0; j < k; j++) p[j] = (float)exp((double)z[id[j]] - lse);
}

static int recycling_observe(drafter *d, request *r, const int *in, const float *logits, int n, int prefill) {
    recycling *g = d->impl;
    rc_state *s = r->dstate;
    int id[RC_MAXK];
    float p[RC_MAXK];
    if (!prefill && g->tree_nodes) /* the anchor's row, then the verified nodes' (a prefix of the tree) */
        for (int j = 0; j + 1 < n && j < s->tn; j++) s->cal.conf += s->tconf[j];
    for (int j = 0; j < n; j++) {
        DS_CHECK(in[j] >= 0 && in[j] < g->V, "recycling: token %d outside the vocabulary", in[j]);
        row_topk(g, logits + (size_t)j * g->V, id, p);
        if (prefill) row_write(g, &s->pre, s->wpre, &s->n_pre, in[j], id, p);
        else row_write(g, &s->own, s->wown, &s->n_own, in[j], id, p);
    }
    return 0;
fail:
    return -1;
}

/* the table row that follows token x (the request's own, its prompt's, the run's), or NULL */
static const rc_table *row_of(const recycling *g, const rc_state *s, int x) {
    return s->own.stamp[x] ? &s->own : s->pre.stamp[x] ? &s->pre : g->run.stamp[x] ? &g->run : NULL;
}

/* The tree: DDTree's best-first expansion (tree_build.h) over the recorded probabilities: a node's
 * children are its token's row (the request's own, its prompt's, the run's; with repeat and no row, the
 * token itself at 0.5; TREE_MAX_K of a row at most), none after end-of-generation; rows list distinct ids, so
 * siblings never repeat.
 * Deterministic given the tables: TREE_TOPK, q unused. */
typedef struct {
    const recycling *g;
    const rc_state *s;
    const drafter *d;
    int anchor;
} rc_rows;

static int rc_row(void *ctx, int node, int tok, int depth, int K, int *ids, float *p) {
    DS_UNUSED(depth);
    const rc_rows *x = ctx;
    if (node < 0) tok = x->anchor;
    else if (x->g->eos_ok && tokenizer_is_eog(&x->d->t->tk, tok)) return 0;
    const rc_table *t = row_of(x->g, x->s, tok);
    if (!t) {
        if (!x->g->repeat) return 0;
        ids[0] = tok, p[0] = 0.5f;
        return 1;
    }
    int m = DS_MIN(K, x->g->k);
    memcpy(ids, t->id + (size_t)tok * x->g->k, sizeof(int) * (size_t)m);
    memcpy(p, t->p + (size_t)tok * x->g->k, sizeof(float) * (size_t)m);
    return m;
}

/* node confidences for the scheduler: the raw path products (tree_best_first's) scaled by the run's
 * accepted nodes over their summed products (the products alone are overconfident), at most 1 */
static void tree_confs(const recycling *g, rc_state *s, int anchor, draft_block *out, verify_fault fault) {
    double scale = tree_calib_scale(&g->cal, &s->cal);
    for (int i = 0; i < out->n; i++) {
        float raw = out->conf[i];
        s->tconf[i] = raw;
        if (out->conf_raw) out->conf_raw[i] = raw;
        out->conf[i] = (float)DS_MIN(1.0, raw * scale);
        if (fault == FAULT_TREE_RATIO) { /* the gate's control reads a soft q: the parent's recorded row */
            int pt = out->parent[i] < 0 ? anchor : out->tok[out->parent[i]];
            const rc_table *t = row_of(g, s, pt);
            float *q = out->q + (size_t)i * out->V;
            memset(q, 0, sizeof(float) * (size_t)out->V);
            if (t)
                for (int j = 0; j < g->k; j++) q[t->id[(size_t)pt * g->k + j]] = t->p[(size_t)pt * g->k + j];
            else q[out->tok[i]] = 1;
        }
    }
    s->tn = out->n;
}

static int propose_tree(recycling *g, rc_state *s, const drafter *d, int anchor, int budget, draft_block *out) {
    rc_rows x = {g, s, d, anchor};
    if (tree_best_first(rc_row, &x, g->k, budget, 0, out)) return -1;
    tree_confs(g, s, anchor, out, d->fault);
    return 0;
}

/* The paper's static tree (Luo et al., App. 8.1, Fig. 5) as SAM-Decoding ships it
 * (samd/config/token_recycle.json): 80 draft nodes in 6 levels, numbered breadth first from the anchor
 * (0). RC_TEMPLATE[i] is how many children node i has; the c-th child of a node is the c-th token of its
 * token's row, so higher-ranked nodes get more children. Children are numbered consecutively, so the
 * counts alone fix every node's parent and rank. */
static const unsigned char RC_TEMPLATE[RC_TEMPLATE_NODES + 1] = {
    8,                                                                         /* the anchor */
    8, 4, 3, 2, 1, 1, 1, 1,                                                    /* depth 1: nodes 1-8 */
    8, 3, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0,             /* depth 2: 9-29 */
    5, 2, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, /* depth 3: 30-54 */
    3, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0,                               /* depth 4: 55-69 */
    2, 0, 0, 1, 0, 0, 0, 0,                                                    /* depth 5: 70-77 */
    0, 0, 0};                                                                  /* depth 6: 78-80 */

/* The static tree: the template's nodes filled breadth first, each with the rank-th token of its parent's
 * row; a node whose parent is absent, whose parent's row is unknown or shorter than its rank, or whose
 * parent ends the generation is absent with its subtree. The present nodes are handed out by path
 * probability (the product of recorded probabilities; ties: breadth-first order), so a parent comes
 * before its children, a budget keeps the template's most probable nodes, and greedy's admitted prefix
 * is exactly what it priced. Confidences: the path products, calibrated as best-first's. */
static void propose_static(recycling *g, rc_state *s, const drafter *d, int anchor, int budget, draft_block *out) {
    int tok[RC_TEMPLATE_NODES + 1], par[RC_TEMPLATE_NODES + 1], ord[RC_TEMPLATE_NODES], to[RC_TEMPLATE_NODES + 1];
    float path[RC_TEMPLATE_NODES + 1];
    int m = 0, next = 1; /* present nodes; the next template node to number */
    tok[0] = anchor, path[0] = 1;
    for (int u = 0; u <= RC_TEMPLATE_NODES && next <= RC_TEMPLATE_NODES; u++) {
        int live = tok[u] >= 0 && !(u && g->eos_ok && tokenizer_is_eog(&d->t->tk, tok[u]));
        const rc_table *t = live ? row_of(g, s, tok[u]) : NULL;
        for (int c = 0; c < RC_TEMPLATE[u] && next <= RC_TEMPLATE_NODES; c++, next++) {
            tok[next] = -1, par[next] = u, path[next] = 0;
            if (t && c < g->k)
                tok[next] = t->id[(size_t)tok[u] * g->k + c], path[next] = path[u] * t->p[(size_t)tok[u] * g->k + c];
            else if (live && !t && g->repeat && c == 0) tok[next] = tok[u], path[next] = path[u] * 0.5f;
            if (tok[next] < 0) continue;
            int i = m++; /* insertion by path, stable: a child's path never exceeds its parent's */
            while (i > 0 && path[ord[i - 1]] < path[next]) ord[i] = ord[i - 1], i--;
            ord[i] = next;
        }
    }
    int n = DS_MIN(m, budget);
    to[0] = -1;
    for (int i = 0; i < n; i++) {
        int v = ord[i];
        to[v] = i;
        out->tok[i] = tok[v], out->parent[i] = to[par[v]], out->conf[i] = path[v];
    }
    out->n = n;
    out->tree = TREE_TOPK;
    tree_confs(g, s, anchor, out, d->fault);
}

static int recycling_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    DS_UNUSED(sp);
    recycling *g = d->impl;
    rc_state *s = r->dstate;
    if (g->tree_nodes) {
        s->n = 0, s->n0 = r->toks.n, s->after = -1; /* acceptance by cell is a chain's: commit learns nothing */
        if (g->tree_static) propose_static(g, s, d, request_anchor(r), DS_MIN(gamma, out->cap), out);
        else return propose_tree(g, s, d, request_anchor(r), DS_MIN(gamma, out->cap), out);
        return 0;
    }
    gamma = DS_MIN(gamma, DS_MIN(RC_MAXG, out->cap));
    out->n = s->n = 0;
    s->n0 = r->toks.n;
    s->after = -1;
    int x = request_anchor(r), k = 0;
    while (1) {
        const rc_table *t = s->own.stamp[x] ? &s->own : s->pre.stamp[x] ? &s->pre : g->run.stamp[x] ? &g->run : NULL;
        if (!t && !g->repeat) break;
        int next = t ? t->id[(size_t)x * g->k] : x;
        if (k == gamma) { /* what the chain would draft next (read by commit) */
            s->after = next;
            break;
        }
        int cell = t ? prob_bucket(t->p[(size_t)x * g->k]) * 2 + (t != &g->run) : 0; /* repeats share the lowest */
        accept_draft(out, k, next, cell, d->fault, &g->runc, &s->own_c, &g->ap);
        s->cell[k] = cell, s->tok[k++] = next;
        if (g->eos_ok && tokenizer_is_eog(&d->t->tk, next)) break;
        x = next;
    }
    out->n = s->n = k;
    return 0;
}

static int recycling_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(hidden), DS_UNUSED(next_token);
    recycling *g = d->impl;
    rc_state *s = r->dstate;
    if (g->tree_nodes) s->cal.acc += n_accepted, s->tn = 0;
    accept_observe(&s->own_c, &g->runc, &g->ap, s->cell, s->tok, s->n, r->toks.v + s->n0, r->toks.n - s->n0, s->after);
    s->n = 0;
    return 0;
}

static void recycling_end(drafter *d, request *r) {
    recycling *g = d->impl;
    rc_state *s = r->dstate;
    if (!s) return;
    /* hot start: the run's table learns the request's rows, the later ones last */
    if (s->wpre) rows_copy(g, &g->run, &s->pre, s->wpre, s->n_pre);
    if (s->wown) rows_copy(g, &g->run, &s->own, s->wown, s->n_own);
    if (s->own_c.acc) accept_counts_add(&g->runc, &s->own_c);
    g->cal.conf += s->cal.conf, g->cal.acc += s->cal.acc;
    accept_counts_free(&s->own_c);
    table_free(&s->pre), table_free(&s->own);
    free(s->wpre), free(s->wown);
    free(s);
    r->dstate = NULL;
}

static int recycling_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    rc_state *s = r->dstate;
    for (int i = 0; i < s->n_own; i++) s->own.stamp[s->wown[i]] = 0; /* the prompt's rows stay */
    s->n_own = 0;
    accept_counts_zero(&s->own_c);
    s->n = s->tn = 0;
    s->cal = (tree_calib){0, 0};
    return 0;
}

static void recycling_close(drafter *d) {
    recycling *g = d->impl;
    if (!g) return;
    table_free(&g->run);
    accept_counts_free(&g->runc);
    free(g->tmp);
    free(g);
    d->impl = NULL;
}

const drafter_ops drafter_recycling = {
    "recycling",
    "Token Recycling (training-free): a chain through each token's top-k next tokens recorded from the target's "
    "verified rows and the prompt's, kept per request and across requests; with tree_nodes N > 0 a best-first tree of N "
    "nodes over them (\"tree_shape\": \"static\": the paper's 80-node template, its first N nodes), verified exactly: {\"k\": 8, \"tree_nodes\": 0, \"tree_shape\": \"best-first\", \"prompt_rows\": 256, \"repeat\": false, \"prior\": 0.2, \"prior_weight\": 2, \"shrink\": 8, "
    "\"request_weight\": 4, \"calibration\": [T_1, ...]}",
    recycling_open, recycling_begin, recycling_propose, recycling_commit, recycling_end, recycling_rewind,
    recycling_close,
    /* the gate's: a token with no row yet repeats itself, so every state proposes (as ngram's n_min 0) */
    "{\"k\": 4, \"repeat\": true}",
    NULL,
    recycling_observe,
    NULL,
    NULL,
    "{\"k\": 4, \"repeat\": true, \"tree_nodes\": 5}",
};
