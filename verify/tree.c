/* tree.c — exact verification of a draft tree (trees.md): one walk from the anchor, a node's
 * children tried with the rule their making calls for. */
#include <math.h>

#include "../runtime/base/common.h"
#include "verify.h"

const char *const TREE_KIND_NAMES[4] = {"chain", "topk", "iid", "wor"};

/* p'(.) = row / sum(row) in double */
static void row_norm(const float *row, int V, double *out) {
    double s = row_sum(row, V);
    for (int i = 0; i < V; i++) out[i] = row[i] > 0 && s > 0 ? row[i] / s : 0.0;
}

/* multi-step rejection over children ch[0..k) drawn from their own q rows: the child accepted, or -1
 * with the residual p' left in pc */
static int sampled_children(const float *q, const int *tok, const int *ch, int k, int V, verify_rng *rng, double *pc,
                            verify_fault fault, int *err) {
    for (int j = 0; j < k; j++) {
        const float *qj = q + (size_t)ch[j] * V;
        int x = tok[ch[j]];
        double sq = row_sum(qj, V), u;
        double lr = !(pc[x] > 0) ? -INFINITY : !(qj[x] > 0) ? INFINITY : log(pc[x]) - (log((double)qj[x]) - log(sq));
        int acc = rng_accept(&rng->accept, lr, &u);
        if (acc < 0) {
            *err = 1;
            return -1;
        }
        if (acc) return ch[j];
        if (fault == FAULT_TREE_RESAMPLE_P) continue; /* the control's bug: p' is not updated */
        double mass = 0;
        for (int i = 0; i < V; i++) {
            double d = pc[i] - (qj[i] > 0 ? qj[i] / sq : 0);
            pc[i] = d > 0 ? d : 0, mass += pc[i];
        }
        if (!(mass > 0)) { /* p' <= q everywhere: impossible after a rejection in exact arithmetic */
            ds_error("verify: a tree's residual has no mass after child %d", ch[j]);
            *err = 1;
            return -1;
        }
        for (int i = 0; i < V; i++) pc[i] /= mass;
        if (fault == FAULT_TREE_TRUNC_RESIDUAL) { /* the control's bug: only the 2 largest entries kept */
            int a = -1, b = -1;
            for (int i = 0; i < V; i++)
                if (a < 0 || pc[i] > pc[a]) b = a, a = i;
                else if (b < 0 || pc[i] > pc[b]) b = i;
            double kept = pc[a] + (b >= 0 ? pc[b] : 0);
            for (int i = 0; i < V; i++) pc[i] = i == a || i == b ? pc[i] / kept : 0;
        }
    }
    return -1;
}

/* the duplicate control's verifier of top-k children: one by one, c_j accepted with p(c_j) / (1 - R), R the
 * mass rejected so far, a duplicate's mass added again; the emitted token when all are rejected drawn from
 * p off the children (the correct form zeroes a rejected token once, which is the draw-once rule) */
static int topk_unmerged(const float *row, const int *tok, const int *ch, int k, int V, verify_rng *rng, double *pc,
                         int *y, int *err) {
    row_norm(row, V, pc);
    double R = 0;
    for (int j = 0; j < k; j++) {
        double a = R < 1 ? pc[tok[ch[j]]] / (1 - R) : 0, u;
        int acc = rng_accept(&rng->accept, a >= 1 ? 0 : a > 0 ? log(a) : -INFINITY, &u);
        if (acc < 0) return *err = 1, -1;
        if (acc) return ch[j];
        R += pc[tok[ch[j]]];
    }
    for (int j = 0; j < k; j++) pc[tok[ch[j]]] = 0;
    if ((*y = rng_draw_d(&rng->resample, pc, V)) < 0) *err = 1;
    return -1;
}

int verify_tree(const float *p, const float *q, const int *tok, const int *parent, int n, int V, tree_kind kind,
                int greedy, verify_rng *rng, double *scratch, verify_fault fault, int *path, verify_result *out) {
    if (fault == FAULT_TREE_RATIO && kind == TREE_TOPK && q) kind = TREE_IID; /* the control's bug */
    DS_CHECK(kind == TREE_TOPK || q, "verify: a tree of sampled children needs their q rows");
    for (int i = 0; i < n; i++) {
        DS_CHECK(tok[i] >= 0 && tok[i] < V, "verify: tree node %d holds token %d, outside the vocabulary (0..%d)", i,
                 tok[i], V - 1);
        DS_CHECK(parent[i] >= -1 && parent[i] < i, "verify: tree node %d has parent %d (a parent comes first)", i, parent[i]);
    }
    double *pc = scratch;
    int u = -1, k = 0, ch[256];
    for (;;) {
        const float *row = p + (size_t)(u + 1) * V;
        int nc = 0;
        for (int i = u + 1; i < n; i++)
            if (parent[i] == u) {
                DS_CHECK(nc < 256, "verify: tree node %d has more than 256 children", u);
                ch[nc++] = i;
            }
        int next = -1, y = -1;
        if (nc == 0) { /* a leaf (or the anchor of an empty tree): the bonus */
            y = greedy ? argmax_f32(row, V) : rng_draw(&rng->resample, row, V);
            DS_CHECK(y >= 0, "verify: the bonus draw failed");
            out->n_accepted = k, out->token = y, out->bonus = 1;
            return 0;
        }
        if (!greedy && kind == TREE_TOPK && fault == FAULT_TREE_DUP_UNMERGED) {
            int err = 0;
            next = topk_unmerged(row, tok, ch, nc, V, rng, pc, &y, &err);
            if (err) goto fail;
        } else if (greedy || kind == TREE_TOPK) {
            y = greedy ? argmax_f32(row, V) : rng_draw(&rng->resample, row, V);
            DS_CHECK(y >= 0, "verify: a tree draw failed");
            for (int j = 0; j < nc && next < 0; j++)
                if (tok[ch[j]] == y) next = ch[j];
        } else {
            int err = 0;
            row_norm(row, V, pc);
            next = sampled_children(q, tok, ch, nc, V, rng, pc, fault, &err);
            if (err) goto fail;
            if (next < 0) {
                y = rng_draw_d(&rng->resample, pc, V);
                DS_CHECK(y >= 0, "verify: the residual draw failed");
            }
        }
        if (next < 0) {
            out->n_accepted = k, out->token = y, out->bonus = 0;
            return 0;
        }
        path[k++] = next;
        u = next;
    }
fail:
    return -1;
}
