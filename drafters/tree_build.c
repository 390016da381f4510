#include "tree_build.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/kernels/kernels_cpu.h"

int tree_topk_softmax(const float *z, int n, const int *vid, int K, int *ids, float *p, float *tmp) {
    int bad, m = 0, top[TREE_MAX_K];
    K = DS_MIN(K, TREE_MAX_K);
    float mx = qk_max_scan(z, n, &bad);
    if (!(mx > -INFINITY)) return 0;
    /* a sorted list of the K best entries so far; a later equal logit never displaces an earlier one */
    for (int j = 0; j < n; j++) {
        if (!(z[j] > -INFINITY) || (m == K && !(z[j] > z[top[m - 1]]))) continue;
        int i = m < K ? m++ : K - 1;
        while (i > 0 && z[j] > z[top[i - 1]]) top[i] = top[i - 1], i--;
        top[i] = j;
    }
    double sum = qk_exp_sum(z, mx, tmp, n); /* z's -inf entries add 0 */
    for (int i = 0; i < m; i++) {
        ids[i] = vid ? vid[top[i]] : top[i];
        p[i] = (float)(exp((double)z[top[i]] - mx) / sum);
    }
    return m;
}

int tree_best_first(tree_row_fn row, void *ctx, int K, int budget, int pace, draft_block *out) {
    struct cand {
        int parent, rank;     /* the parent node (-1: the anchor) and the child's rank in its row */
        float pscore, score;  /* the parent's path probability, and the candidate's own */
    } c[2 * 64 + 2];
    int rid[65][TREE_MAX_K], rn[65]; /* children rows: [0] the anchor's, [1 + i] node i's */
    float rp[65][TREE_MAX_K], cp[64]; /* cp[i]: node i's probability in its parent's row */
    int depth[64], nc = 0, n = 0, grow = 1;
    pace = pace && out->more && out->conf;
    K = DS_MIN(K, TREE_MAX_K);
    budget = DS_MIN(budget, DS_MIN(out->cap, 64));
    out->n = 0;
    out->tree = TREE_TOPK;
    if (budget <= 0 || K <= 0) return 0;
    if ((rn[0] = row(ctx, -1, -1, 0, K, rid[0], rp[0])) < 0) return -1;
    if (rn[0] > 0) c[nc++] = (struct cand){-1, 0, 1.0f, rp[0][0]};
    while (n < budget && nc > 0) {
        int b = 0;
        for (int i = 1; i < nc; i++)
            if (c[i].score > c[b].score) b = i; /* ties: the earlier candidate */
        struct cand x = c[b];
        for (int i = b; i + 1 < nc; i++) c[i] = c[i + 1]; /* keep insertion order for ties */
        nc--;
        int r = x.parent + 1, tok = rid[r][x.rank];
        depth[n] = x.parent < 0 ? 1 : depth[x.parent] + 1;
        out->tok[n] = tok, out->parent[n] = x.parent;
        if (out->conf) out->conf[n] = x.score;
        if (out->conf_raw) out->conf_raw[n] = x.score;
        cp[n] = rp[r][x.rank];
        if (x.rank + 1 < rn[r]) c[nc++] = (struct cand){x.parent, x.rank + 1, x.pscore, x.pscore * rp[r][x.rank + 1]};
        /* the last node's children would never be read; and where a row costs a forward (pace), the
         * scheduler prices the expansion as one more draft on this node's path (its rows' probabilities:
         * they read only the tree so far, so any stop is lossless) and, once it declines, the remaining
         * candidates come in as leaves */
        if (grow && pace && n + 1 < budget) {
            float pc[64];
            int k = depth[n];
            for (int u = n, i = k - 1; u >= 0 && i >= 0; u = out->parent[u], i--) pc[i] = cp[u];
            grow = out->more(out->more_ctx, k, pc);
        }
        rn[n + 1] = 0;
        if (grow && n + 1 < budget && (rn[n + 1] = row(ctx, n, tok, depth[n], K, rid[n + 1], rp[n + 1])) < 0) return -1;
        if (rn[n + 1] > 0) c[nc++] = (struct cand){n, 0, x.score, x.score * rp[n + 1][0]};
        n++;
    }
    out->n = n;
    return 0;
}

void tree_mark(drafter *d, const char *what, int nodes, int width) {
    d->tree_nodes = nodes;
    size_t l = strlen(d->fingerprint);
    snprintf(d->fingerprint + l, sizeof d->fingerprint - l, ":tree%dx%d", nodes, width);
    l = strlen(d->describe);
    snprintf(d->describe + l, sizeof d->describe - l, ", %s of %d nodes (%d a node)", what, nodes, width);
}

void tree_calib_judge(tree_calib *c, const int *par, const int *tok, const float *row, int nv, const int *com,
                      int n_acc) {
    int on[DRAFT_TREE_MAX + 1] = {0}, u = -1; /* on[1 + i]: node i is on the accepted path */
    on[0] = 1;
    nv = DS_MIN(nv, DRAFT_TREE_MAX);
    for (int j = 0; j < n_acc; j++) {
        int x = -1;
        for (int i = 0; i < nv && x < 0; i++)
            if (par[i] == u && tok[i] == com[j]) x = i;
        if (x < 0) break;
        on[1 + x] = 1, u = x;
    }
    for (int i = 0; i < nv; i++)
        if (row[i] >= 0 && on[1 + par[i]]) c->conf += row[i], c->acc += on[1 + i];
}

int tree_read_opts(jcfg *r, int *nodes, int *width) {
    *width = 4;
    DS_TRY(jcfg_int(r, "tree_nodes", 0, 64, nodes));
    DS_TRY(jcfg_int(r, "tree_width", 1, TREE_MAX_K, width));
    return 0;
fail:
    return -1;
}
