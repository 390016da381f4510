/* tree_enum.c — the gate's exact cases for tree verification on synthetic drafts: every rule of
 * verify_tree (top-k, i.i.d. and without-replacement children; T = 1 and greedy) enumerated over every
 * draw, the drafting's included, against the target's own law, and the shipped mistakes of trees.md
 * as controls. The production round's tree cases (a tree drafter through decode_round) are in
 * engine/gate_round.c. */
#include <math.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "enumerate.h"
#include "lossless.h"
#include "verify.h"

#define TV_V 4  /* vocabulary */
#define TL 3    /* tokens whose law is compared */
#define TN 6    /* nodes */
#define TOUT 64 /* TV_V^TL outcomes */

/* a law over TV_V tokens that depends only on the context (the tokens after the anchor): the target's
 * (salt 1; one-hot at its argmax when greedy; now and then a token outside its support) or the
 * draft's (salt 2, full support) */
static void ctx_law(const int *ctx, int n, int salt, int greedy, float *p) {
    uint64_t h = 1469598103934665603ull * (uint64_t)salt;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(ctx[i] + 1)) * 1099511628211ull;
    rng_t r;
    rng_seed(&r, h);
    double s = 0;
    for (int v = 0; v < TV_V; v++) s += p[v] = (float)(0.05 + rng_uniform(&r));
    if (salt == 1 && (h >> 7) % 3 == 0) s -= p[h % TV_V], p[h % TV_V] = 0;
    for (int v = 0; v < TV_V; v++) p[v] = (float)(p[v] / s);
    if (greedy) {
        int a = argmax_f32(p, TV_V);
        for (int v = 0; v < TV_V; v++) p[v] = v == a;
    }
}

/* one replay: draft the tree (top-k: the rank-th most likely token of the draft's law; i.i.d.: drawn
 * from it; without replacement: from it less the earlier siblings), verify it, complete the emitted
 * tokens to TL by drawing from the target (the rounds after); the outcome's index, -1 on error */
static int tree_replay(const int *par, tree_kind kind, int greedy, verify_fault fault, draw_enum *e) {
    rng_t dr;
    verify_rng vr;
    rng_seed(&dr, 1), rng_seed(&vr.accept, 2), rng_seed(&vr.resample, 3);
    dr.en = vr.accept.en = vr.resample.en = &e->hooks;
    int tok[TN], ctx[TN][TN + 1], nctx[TN], path[TN];
    float p[(TN + 1) * TV_V], q[TN * TV_V];
    ctx_law(NULL, 0, 1, greedy, p);
    for (int i = 0; i < TN; i++) {
        int u = par[i], rank = 0;
        nctx[i] = u < 0 ? 0 : nctx[u] + 1;
        if (u >= 0) memcpy(ctx[i], ctx[u], sizeof(int) * (size_t)nctx[u]), ctx[i][nctx[u]] = tok[u];
        float *qi = q + (size_t)i * TV_V;
        ctx_law(ctx[i], nctx[i], 2, 0, qi);
        for (int j = 0; j < i; j++)
            if (par[j] == u) {
                rank++;
                if (kind == TREE_WOR) qi[tok[j]] = 0;
            }
        if (kind == TREE_TOPK) {
            float qq[TV_V];
            memcpy(qq, qi, sizeof qq);
            for (int k = 0; k < rank; k++) qq[argmax_f32(qq, TV_V)] = -1;
            tok[i] = argmax_f32(qq, TV_V);
            if (fault == FAULT_TREE_DUP_UNMERGED && rank == 1) tok[i] = tok[i - 1]; /* a duplicated child */
        } else if ((tok[i] = rng_draw(&dr, qi, TV_V)) < 0) {
            return -1;
        }
        int c2[TN + 1];
        memcpy(c2, ctx[i], sizeof(int) * (size_t)nctx[i]), c2[nctx[i]] = tok[i];
        ctx_law(c2, nctx[i] + 1, 1, greedy, p + (size_t)(i + 1) * TV_V);
    }
    double scratch[2 * TV_V];
    verify_result res;
    if (verify_tree(p, q, tok, par, TN, TV_V, kind, greedy, &vr, scratch, fault, path, &res)) return -1;
    int out[TN + 2], m = 0;
    for (int i = 0; i < res.n_accepted; i++) out[m++] = tok[path[i]];
    out[m++] = res.token;
    while (m < TL) {
        float pn[TV_V];
        ctx_law(out, m, 1, greedy, pn);
        if ((out[m++] = greedy ? argmax_f32(pn, TV_V) : rng_draw(&vr.resample, pn, TV_V)) < 0) return -1;
    }
    int idx = 0;
    for (int j = 0; j < TL; j++) idx = idx * TV_V + out[j];
    return idx;
}

int tree_enum_tv(int shape, tree_kind kind, int greedy, verify_fault fault, double *tv, long *paths) {
    static const int shapes[2][TN] = {
        {-1, -1, 0, 0, 1, 2}, /* two children of the anchor, two under the first */
        {-1, 0, 0, 0, 1, 4},  /* a three-way branch under a chain */
    };
    long double law[TOUT] = {0}, ref[TOUT];
    draw_enum e;
    int rc = -1;
    DS_CHECK(shape >= 0 && shape < 2, "tree gate: shape %d", shape);
    if (draw_enum_init(&e)) return -1;
    do {
        draw_enum_begin(&e);
        int idx = tree_replay(shapes[shape], kind, greedy, fault, &e);
        if (idx < 0 || draw_enum_end(&e)) goto fail;
        law[idx] += e.weight;
    } while (draw_enum_next(&e) > 0);
    DS_CHECK(!e.error, "tree gate: the enumeration failed");
    for (int idx = 0; idx < TOUT; idx++) { /* the target's own law of TL tokens */
        int y[TL];
        for (int j = TL - 1, t = idx; j >= 0; j--) y[j] = t % TV_V, t /= TV_V;
        ref[idx] = 1;
        for (int j = 0; j < TL; j++) {
            float pj[TV_V];
            ctx_law(y, j, 1, greedy, pj);
            ref[idx] *= pj[y[j]] / (long double)row_sum(pj, TV_V);
        }
    }
    long double d = 0;
    for (int i = 0; i < TOUT; i++) d += fabsl(law[i] - ref[i]);
    *tv = (double)(d / 2);
    *paths = e.paths;
    rc = 0;
fail:
    draw_enum_free(&e);
    return rc;
}

int gate_tree_cases(gate_report *rep) {
    static const struct {
        int shape;
        tree_kind kind;
        int greedy;
        verify_fault fault;
    } cases[] = {
        {0, TREE_TOPK, 0, FAULT_NONE}, {1, TREE_TOPK, 0, FAULT_NONE}, {0, TREE_TOPK, 1, FAULT_NONE},
        {0, TREE_IID, 0, FAULT_NONE},  {1, TREE_IID, 0, FAULT_NONE},  {0, TREE_IID, 1, FAULT_NONE},
        {0, TREE_WOR, 0, FAULT_NONE},  {1, TREE_WOR, 0, FAULT_NONE},  {0, TREE_WOR, 1, FAULT_NONE},
        /* controls, each through two checks */
        {0, TREE_TOPK, 0, FAULT_TREE_RATIO}, {1, TREE_TOPK, 0, FAULT_TREE_RATIO},
        {0, TREE_IID, 0, FAULT_TREE_RESAMPLE_P}, {1, TREE_WOR, 0, FAULT_TREE_RESAMPLE_P},
        {0, TREE_IID, 0, FAULT_TREE_TRUNC_RESIDUAL}, {1, TREE_IID, 0, FAULT_TREE_TRUNC_RESIDUAL},
        {0, TREE_TOPK, 0, FAULT_TREE_DUP_UNMERGED}, {1, TREE_TOPK, 0, FAULT_TREE_DUP_UNMERGED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double d;
        long paths;
        if (tree_enum_tv(cases[i].shape, cases[i].kind, cases[i].greedy, cases[i].fault, &d, &paths)) return -1;
        int control = cases[i].fault != FAULT_NONE;
        char name[200];
        snprintf(name, sizeof name, "%senumerate tree %s shape %d %s V=%d, %d nodes, %d tokens (%ld paths)%s%s",
                 control ? "control " : "", TREE_KIND_NAMES[cases[i].kind], cases[i].shape,
                 cases[i].greedy ? "T=0" : "T=1", TV_V, TN, TL, paths, control ? " mutant " : "",
                 control ? VERIFY_FAULT_NAMES[cases[i].fault] : "");
        if (!gate_add(rep, name, "exact-tv", 0, d, NAN, control, control ? d > 1e-6 : d < 1e-12)) return -1;
    }
    return 0;
}
