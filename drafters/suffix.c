/* suffix — SuffixDecoding-style drafting from two depth-capped suffix trees (suffix_tree.h): one
 * over the request's own tokens (prompt, earlier turns, committed output), one over the outputs of
 * the requests already finished in this `run` or `serve` (the corpus, FIFO-evicted at
 * max_nodes). In each tree the longest suffix of the context that has a continuation is matched,
 * and the chain follows the most frequent child while the product of the count ratios stays at
 * or above min_prob (re-matching the context + draft when the depth cap is reached); the chain with
 * the larger sum of those products wins, ties to the request's own tree. Drafts are deterministic:
 * q_k = delta(x_k), exact at every temperature.
 *
 * Confidence c_k: the online acceptance rate (accept_stats.h) of the cell (tree, match-length
 * bucket, count-ratio bucket of this step), so the count ratio is a feature the acceptance of
 * earlier drafts calibrates; optional "calibration" temperatures scale logit(c_k).
 *
 * Tree modes ("tree_nodes" N > 0): "siblings" (the default) is the chain itself, re-matching and c_k
 * as above, with beside each draft up to w - 1 ("tree_width" w) of the trie's next most frequent
 * children of the node the chain took its best from; "best-first" grows SuffixDecoding's tree over
 * the matched node's continuations by path frequency (suffix_tree_draft). The first cannot verify
 * fewer of the chain's tokens than the chain does, only add siblings the scheduler prices: the
 * best-first tree stopped at the trie's depth cap where the chain re-matched, and lost to the chain
 * on the 1.5B (experiments/specbench/report-qwen.md: 0.986x vs 1.186x). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "accept_stats.h"
#include "drafter.h"
#include "suffix_tree.h"
#include "tree_build.h"

#define SF_LB 8 /* match length: 0, 1, 2, 3, 4-5, 6-8, 9-15, 16+ */
#define SF_RB 5 /* count ratio: < 1/3, < 2/3, < 1, 1 of several, 1 of one */
#define SF_CELLS (2 * SF_LB * SF_RB)
#define SF_MAXG 64
#define SF_MAXW 4 /* tree_width at most: a draft and 3 siblings */

typedef struct {
    int max_depth, max_nodes, min_match, use_corpus;
    int tree_nodes;             /* > 0: a tree of this many nodes instead of the chain */
    int best_first, tree_width; /* the tree mode: best-first, or the chain with w - 1 siblings a draft */
    float min_prob;
    accept_prior ap;
    suffix_tree corpus;
    accept_counts run;
    int eos_ok;
    tree_calib cal;             /* tree mode: finished requests' verified nodes (best-first) or siblings */
} suffix;

typedef struct {
    suffix_tree local;
    int synced;                 /* tokens of the request already in the local tree */
    accept_counts own;
    int n, n0, tok[SF_MAXG], cell[SF_MAXG]; /* the last proposal, and the committed tokens then */
    int *ext;                   /* the context's tail + the draft, for re-matching */
    tree_calib cal;             /* tree mode: this request's verified nodes */
    int tn;                     /* the last tree's nodes, their raw confidences */
    float tconf[SF_MAXG];
    /* siblings mode: the last tree's parents, tokens, a sibling's count ratio (-1: a chain draft), how
     * many nodes the round verified (observe), and this request's reached siblings */
    int tpar[SF_MAXG], ttok[SF_MAXG], n_verified;
    float trow[SF_MAXG];
} sf_state;

typedef struct {
    int n, tok[SF_MAXG], cell[SF_MAXG];
    int node[SF_MAXG]; /* the trie node each draft is (its parent holds the siblings) */
    double score;
} sf_chain;

static int len_bucket(int m) { return m <= 3 ? m : m <= 5 ? 4 : m <= 8 ? 5 : m <= 15 ? 6 : 7; }

static int suffix_open(drafter *d, const cJSON *cfg, target *t) {
    suffix *g = ds_calloc(1, sizeof *g, "suffix drafter");
    if (!g) return -1;
    d->impl = g;
    g->max_depth = 24, g->max_nodes = 1 << 20, g->min_match = 1, g->use_corpus = 1;
    g->min_prob = 0.1f;
    jcfg r;
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    DS_TRY(jcfg_int(&r, "max_depth", 2, 64, &g->max_depth));
    DS_TRY(jcfg_int(&r, "max_nodes", 1024, 1 << 26, &g->max_nodes));
    DS_TRY(jcfg_int(&r, "min_match", 0, 63, &g->min_match));
    DS_TRY(jcfg_bool(&r, "corpus", &g->use_corpus));
    DS_TRY(jcfg_float(&r, "min_prob", 0, 1, &g->min_prob));
    DS_TRY(jcfg_int(&r, "tree_nodes", 0, 64, &g->tree_nodes));
    const char *tm = "siblings";
    g->tree_width = 2;
    DS_TRY(jcfg_str(&r, "tree_mode", &tm));
    DS_TRY(jcfg_int(&r, "tree_width", 2, SF_MAXW, &g->tree_width));
    DS_TRY(accept_prior_read(&r, &g->ap));
    DS_TRY(jcfg_close(&r));
    DS_CHECK(!strcmp(tm, "siblings") || !strcmp(tm, "best-first"), "drafter: tree_mode '%s' is not one of siblings, "
             "best-first", tm);
    g->best_first = !strcmp(tm, "best-first");
    DS_CHECK(g->min_match < g->max_depth, "drafter: min_match %d must be below max_depth %d", g->min_match, g->max_depth);
    DS_CHECK(g->max_nodes >= 64 * (g->max_depth + 1), "drafter: max_nodes %d is too small for max_depth %d", g->max_nodes,
             g->max_depth);
    if (g->use_corpus) DS_TRY(suffix_tree_init(&g->corpus, g->max_depth, g->max_nodes));
    DS_TRY(accept_counts_init(&g->run, SF_CELLS, g->ap.prior, g->ap.prior_n));
    g->eos_ok = t->has_tokenizer;
    d->has_conf = 1;
    d->deterministic = 1;
    snprintf(d->describe, sizeof d->describe, "suffix: suffix trees (depth %d) over the request%s, min_prob %.2g",
             g->max_depth, g->use_corpus ? " and the run's finished outputs" : "", (double)g->min_prob);
    snprintf(d->fingerprint, sizeof d->fingerprint, "suffix:%d:%d:%g", g->max_depth, g->use_corpus, (double)g->min_prob);
    if (g->tree_nodes) { /* SuffixDecoding's tree mode */
        d->tree_nodes = g->tree_nodes;
        d->tree_counts = 1;
        size_t l = strlen(d->fingerprint);
        if (g->best_first) snprintf(d->fingerprint + l, sizeof d->fingerprint - l, ":tree%d", g->tree_nodes);
        else snprintf(d->fingerprint + l, sizeof d->fingerprint - l, ":sib%dx%d", g->tree_nodes, g->tree_width);
        l = strlen(d->describe);
        if (g->best_first) snprintf(d->describe + l, sizeof d->describe - l, ", a best-first tree of %d nodes", g->tree_nodes);
        else snprintf(d->describe + l, sizeof d->describe - l, ", the chain with %d sibling%s a draft (%d nodes)",
                      g->tree_width - 1, g->tree_width > 2 ? "s" : "", g->tree_nodes);
    }
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int suffix_begin(drafter *d, request *r, const float *prompt_hidden) {
    DS_UNUSED(prompt_hidden);
    suffix *g = d->impl;
    sf_state *s = ds_calloc(1, sizeof *s, "suffix state");
    if (!s) return -1;
    r->dstate = s;
    /* every appended token makes at most max_depth nodes */
    long cap = (long)(r->n_prompt + r->max_new + 2) * g->max_depth + 2;
    DS_TRY(suffix_tree_init(&s->local, g->max_depth, (int)DS_MIN(cap, 1L << 28)));
    DS_TRY(suffix_tree_begin(&s->local, 0));
    DS_TRY(accept_counts_init(&s->own, SF_CELLS, 0, 0));
    DS_TRYP(s->ext = ds_malloc(sizeof(int) * (size_t)(g->max_depth + SF_MAXG + 1), "suffix context"));
    return 0;
fail:
    return -1; /* end() frees what was made */
}

/* the chain of one tree: match the context's tail, follow the most frequent children */
static void chain(suffix *g, sf_state *s, suffix_tree *t, int src, int n_ctx, int gamma, sf_chain *c) {
    int len, node = suffix_tree_match(t, s->ext, n_ctx, &len);
    double prob = 1;
    c->n = 0, c->score = 0;
    if (len < g->min_match || t->cont[node] == 0) return;
    int lb = len_bucket(len);
    while (c->n < gamma) {
        int b = t->depth[node] < g->max_depth ? suffix_tree_best(t, node) : -1;
        if (b < 0) { /* the depth cap or the end of what was seen: match the context + draft again */
            node = suffix_tree_match(t, s->ext, n_ctx + c->n, &len);
            if (len < g->min_match || t->cont[node] == 0 || (b = suffix_tree_best(t, node)) < 0) break;
        }
        double ratio = (double)t->count[b] / t->cont[node];
        if (prob * ratio < g->min_prob) break;
        prob *= ratio;
        int rb = ratio < 1.0 / 3 ? 0 : ratio < 2.0 / 3 ? 1 : ratio < 1 ? 2 : t->cont[node] > 1 ? 3 : 4;
        c->tok[c->n] = t->tok[b];
        c->node[c->n] = b;
        c->cell[c->n] = (src * SF_LB + lb) * SF_RB + rb;
        s->ext[n_ctx + c->n++] = t->tok[b];
        c->score += prob;
        node = b;
    }
}

/* The tree mode: from the node the chosen trie matched, best-first over its continuations (SuffixDecoding's
 * tree; DDTree's expansion): a candidate is a trie child, scored by the product of count ratios along its
 * path; the best becomes the next node, then its next sibling in the trie and its most frequent child are
 * candidates, while the score stays >= min_prob and under the budget. Parents come first; a trie node's
 * children are distinct tokens. Deterministic (TREE_TOPK). conf_raw = the path's frequency; conf, what
 * the scheduler prices a node with, = that scaled by tree_calib (on the 1.5B the raw frequencies averaged
 * 0.24 over verified nodes that were accepted 9 % of the time, so greedy verified 10 nodes a round for 0.9
 * accepted). Stops at the trie's depth cap (no re-matching inside a tree). */
static void suffix_tree_draft(suffix *g, sf_state *s, const drafter *d, suffix_tree *t, int root, int budget,
                              draft_block *out) {
    double scale = tree_calib_scale(&g->cal, &s->cal);
    struct cand {
        int parent, node; /* the draft node it would hang from (-1: the anchor), the trie node it proposes */
        double pscore, score; /* its parent's path frequency, its own */
    } c[2 * 64 + 2];
    int nc = 0, n = 0;
#define PUSH(par_, tn_, ps_)                                                                                     \
    do {                                                                                                         \
        int p_ = t->parent[tn_];                                                                                 \
        double sc_ = (ps_) * (double)t->count[tn_] / (t->cont[p_] > 0 ? t->cont[p_] : 1);                       \
        if (sc_ >= g->min_prob && sc_ > 0) c[nc++] = (struct cand){par_, tn_, ps_, sc_};                         \
    } while (0)
    if (t->cont[root] > 0 && t->depth[root] < g->max_depth && suffix_tree_best(t, root) >= 0) PUSH(-1, suffix_tree_best(t, root), 1.0);
    while (n < budget && nc > 0) {
        int b = 0;
        for (int i = 1; i < nc; i++)
            if (c[i].score > c[b].score) b = i;
        struct cand x = c[b];
        for (int i = b; i + 1 < nc; i++) c[i] = c[i + 1];
        nc--;
        int tok = t->tok[x.node];
        out->tok[n] = tok, out->parent[n] = x.parent;
        out->conf_raw[n] = s->tconf[n] = (float)x.score;
        out->conf[n] = (float)DS_MIN(1.0, x.score * scale);
        /* the next sibling by count: the best of the parent's children below this one's count (ties: later) */
        int p = t->parent[x.node], sib = -1;
        for (int ch = t->child[p]; ch >= 0; ch = t->sib[ch])
            if (ch != x.node && (t->count[ch] < t->count[x.node] || (t->count[ch] == t->count[x.node] && ch > x.node)) &&
                (sib < 0 || t->count[ch] > t->count[sib] || (t->count[ch] == t->count[sib] && ch < sib)))
                sib = ch;
        if (sib >= 0) PUSH(x.parent, sib, x.pscore);
        if (!(g->eos_ok && tokenizer_is_eog(&d->t->tk, tok)) && t->depth[x.node] < g->max_depth && t->cont[x.node] > 0) {
            int ch = suffix_tree_best(t, x.node);
            if (ch >= 0) PUSH(n, ch, x.score);
        }
        n++;
    }
#undef PUSH
    out->n = s->tn = n;
    out->tree = TREE_TOPK;
}

/* The siblings mode: the chain's drafts out->tok[0..n) (their c_k set by accept_draft) and beside
 * draft k up to w - 1 children of its trie parent by count (ties: the lower node), none of them the
 * draft, into one tree of at most budget nodes, best first by path confidence: the drafts' c's times
 * a sibling's count ratio scaled by tree_calib (never above the draft's or an earlier sibling's, so
 * parents and the order siblings are tried survive the sort, which is stable over parents first).
 * A trie node's children are distinct tokens: deterministic top-k children (TREE_TOPK). */
static void sibling_tree(suffix *g, sf_state *s, const sf_chain *c, const suffix_tree *t, int n, int budget,
                         draft_block *out) {
    double scale = tree_calib_scale(&g->cal, &s->cal);
    struct node {
        float c, cr, row;
        int depth, tok; /* a draft (row < 0) or a sibling at depth (0-based) */
    } nd[SF_MAXG * SF_MAXW], x;
    int N = 0, spine[SF_MAXG];
    float P = 1, Pr = 1;
    for (int k = 0; k < n; k++) {
        float ck = out->conf ? out->conf[k] : 1, cr = out->conf_raw ? out->conf_raw[k] : ck, last = ck, lastr = cr;
        nd[N++] = (struct node){P * ck, Pr * cr, -1, k, out->tok[k]};
        int p = t->parent[c->node[k]], taken[SF_MAXW];
        for (int j = 0; j + 1 < g->tree_width; j++) {
            int best = -1;
            for (int ch = t->child[p]; ch >= 0; ch = t->sib[ch]) {
                int used = ch == c->node[k];
                for (int i = 0; i < j && !used; i++) used = taken[i] == ch;
                if (!used && (best < 0 || t->count[ch] > t->count[best] || (t->count[ch] == t->count[best] && ch < best)))
                    best = ch;
            }
            if (best < 0) break;
            taken[j] = best;
            float row = (float)t->count[best] / (float)DS_MAX(t->cont[p], 1);
            last = fminf(last, (float)DS_MIN(1.0, row * scale)), lastr = fminf(lastr, row);
            nd[N++] = (struct node){P * last, Pr * lastr, row, k, t->tok[best]};
        }
        P *= ck, Pr *= cr;
    }
    for (int i = 1; i < N; i++) { /* stable: equal confidences keep parents and drafts first */
        int j = i;
        for (x = nd[i]; j > 0 && nd[j - 1].c < x.c; j--) nd[j] = nd[j - 1];
        nd[j] = x;
    }
    N = DS_MIN(N, DS_MIN(budget, SF_MAXG));
    for (int i = 0; i < N; i++)
        if (nd[i].row < 0) spine[nd[i].depth] = i;
    for (int i = 0; i < N; i++) {
        out->tok[i] = s->ttok[i] = nd[i].tok;
        out->parent[i] = s->tpar[i] = nd[i].depth ? spine[nd[i].depth - 1] : -1;
        if (out->conf) out->conf[i] = nd[i].c;
        if (out->conf_raw) out->conf_raw[i] = nd[i].cr;
        s->trow[i] = nd[i].row;
    }
    out->n = s->tn = N;
    out->tree = TREE_TOPK;
    s->n_verified = 0;
}

static int suffix_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    DS_UNUSED(sp);
    suffix *g = d->impl;
    sf_state *s = r->dstate;
    int n = r->toks.n;
    gamma = DS_MIN(gamma, DS_MIN(SF_MAXG, out->cap));
    out->n = s->n = 0;
    s->n0 = n;
    /* the local tree takes the tokens committed since the last proposal */
    DS_TRY(suffix_tree_append(&s->local, r->toks.v + s->synced, n - s->synced));
    s->synced = n;
    if (gamma <= 0) return 0;
    int n_ctx = DS_MIN(n, g->max_depth - 1);
    sf_chain cl, cg = {0};
    memcpy(s->ext, r->toks.v + n - n_ctx, sizeof(int) * (size_t)n_ctx);
    chain(g, s, &s->local, 0, n_ctx, gamma, &cl);
    if (g->use_corpus) {
        memcpy(s->ext, r->toks.v + n - n_ctx, sizeof(int) * (size_t)n_ctx);
        chain(g, s, &g->corpus, 1, n_ctx, gamma, &cg);
    }
    const sf_chain *c = cg.score > cl.score ? &cg : &cl;
    if (g->tree_nodes && g->best_first) { /* the tree grows in the trie whose chain scored higher, from its match */
        suffix_tree *t = c == &cg ? &g->corpus : &s->local;
        int len, node = suffix_tree_match(t, r->toks.v + n - n_ctx, n_ctx, &len);
        s->tn = 0;
        if (c->n > 0 && len >= g->min_match) suffix_tree_draft(g, s, d, t, node, gamma, out);
        return 0; /* s->n = 0: acceptance by cell is a chain's */
    }
    int k = 0;
    for (; k < c->n; k++) {
        int tk = c->tok[k];
        accept_draft(out, k, tk, c->cell[k], d->fault, &g->run, &s->own, &g->ap);
        s->tok[k] = tk;
        s->cell[k] = c->cell[k];
        if (g->eos_ok && tokenizer_is_eog(&d->t->tk, tk)) {
            k++;
            break;
        }
    }
    out->n = s->n = k;
    if (g->tree_nodes && k > 0) sibling_tree(g, s, c, c == &cg ? &g->corpus : &s->local, k, gamma, out);
    return 0;
fail:
    return -1;
}

static int suffix_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(hidden), DS_UNUSED(next_token);
    suffix *g = d->impl;
    sf_state *s = r->dstate;
    if (g->tree_nodes && !g->best_first && s->tn > 0) {
        /* the verified siblings whose parent was reached are judged (their count ratios; the chain's
         * drafts carry row -1). The chain's cells are judged below as a chain's are, by the committed
         * tokens up to the first that differs (a draft past the scheduler's cut by the bonus token: a
         * cell never judged past the cut would keep greedy cutting there) */
        tree_calib_judge(&s->cal, s->tpar, s->ttok, s->trow, DS_MIN(s->n_verified, s->tn), r->toks.v + s->n0,
                         n_accepted);
        s->tn = 0;
    }
    accept_observe(&s->own, &g->run, &g->ap, s->cell, s->tok, s->n, r->toks.v + s->n0, r->toks.n - s->n0, -1);
    s->n = 0;
    if (g->tree_nodes && g->best_first) s->cal.acc += n_accepted, s->tn = 0;
    return 0;
}

/* tree mode: the round's verified rows are the anchor's and a prefix of the tree's nodes (the scheduler
 * may cut it): their raw confidences join the calibration (logits unused) */
static int suffix_observe(drafter *d, request *r, const int *in, const float *logits, int n, int prefill) {
    DS_UNUSED(in), DS_UNUSED(logits);
    suffix *g = d->impl;
    sf_state *s = r->dstate;
    if (!prefill && g->tree_nodes && g->best_first)
        for (int j = 0; j + 1 < n && j < s->tn; j++) s->cal.conf += s->tconf[j];
    if (!prefill && g->tree_nodes && !g->best_first) s->n_verified = DS_MAX(n - 1, 0);
    return 0;
}

static void suffix_end(drafter *d, request *r) {
    suffix *g = d->impl;
    sf_state *s = r->dstate;
    if (!s) return;
    if (s->own.acc) accept_counts_add(&g->run, &s->own);
    g->cal.conf += s->cal.conf, g->cal.acc += s->cal.acc;
    /* the corpus takes this request's output, at most the tail that fits the tree alone (evicting
     * every older one); end() cannot fail, so a failure (out of memory) leaves the corpus empty */
    int n_out = DS_MIN(r->toks.n - r->n_prompt, g->max_nodes / (g->max_depth + 1) - 1);
    if (g->use_corpus && n_out > 0)
        if (suffix_tree_begin(&g->corpus, 1) || suffix_tree_append(&g->corpus, r->toks.v + r->toks.n - n_out, n_out))
            suffix_tree_clear(&g->corpus);
    accept_counts_free(&s->own);
    suffix_tree_free(&s->local);
    free(s->ext);
    free(s);
    r->dstate = NULL;
}

static int suffix_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    sf_state *s = r->dstate;
    suffix_tree_clear(&s->local);
    DS_TRY(suffix_tree_begin(&s->local, 0));
    s->synced = 0;
    s->n = s->tn = 0;
    s->cal = (tree_calib){0, 0};
    accept_counts_zero(&s->own);
    return 0;
fail:
    return -1;
}

static void suffix_close(drafter *d) {
    suffix *g = d->impl;
    if (!g) return;
    if (g->use_corpus) suffix_tree_free(&g->corpus);
    accept_counts_free(&g->run);
    free(g);
    d->impl = NULL;
}

const drafter_ops drafter_suffix = {
    "suffix",
    "suffix trees over the request and the run's outputs (training-free): {\"max_depth\": 24, \"min_prob\": 0.1, "
    "\"min_match\": 1, \"corpus\": true, \"max_nodes\": 1048576, \"tree_nodes\": 0 (N > 0: a tree of N nodes), \"tree_mode\": "
    "\"siblings\" (the chain with tree_width - 1 of the trie's next children beside each draft) or \"best-first\", "
    "\"tree_width\": 2, \"prior\": 0.2, \"shrink\": 8, \"request_weight\": 4, \"calibration\": [...]}",
    suffix_open, suffix_begin, suffix_propose, suffix_commit, suffix_end, suffix_rewind, suffix_close,
    "{\"min_match\": 0, \"max_depth\": 4, \"min_prob\": 0}",
    NULL,
    suffix_observe,
    NULL,
    NULL,
    "{\"min_match\": 0, \"max_depth\": 4, \"min_prob\": 0, \"tree_nodes\": 5}",
    "{\"min_match\": 0, \"max_depth\": 4, \"min_prob\": 0, \"tree_nodes\": 5, \"tree_mode\": \"best-first\"}",
};
