/* test_verify — the verifier, the statistics and the losslessness gate's machinery: the paper's
 * Appendix A counterexample reproduced exactly, chain verification edge cases, p-values against
 * known values, and the gate (quick matrix) passing with every negative control flagged. */
#include "testutil.h"

#include "../drafters/drafter.h"
#include "../engine/gate_round.h"
#include "../schedulers/scheduler.h"
#include "../verify/logits.h"
#include "../verify/lossless.h"
#include "../verify/stats.h"
#include "../verify/enumerate.h"
#include "../verify/verify.h"

/* logits_process against an independent float64 one written from the definitions: p ∝ exp(z / T)
 * over the k largest (ties to the lower id), then the smallest prefix of the descending order whose
 * mass reaches top_p, then the tokens whose exp(z / T - max) reaches min_p, renormalised. Same
 * support, and each probability within 2e-6 relative (the float exp and the float result). */
static const double *g_sort_p;
static int cmp_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_p[x] != g_sort_p[y]) return g_sort_p[x] > g_sort_p[y] ? -1 : 1;
    return x - y;
}

static void ref_process(const float *z, int V, const sampling_params *sp, double *p, int *ord) {
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = fmax(mx, (double)(z[i] * (1.0f / sp->temperature)));
    for (int i = 0; i < V; i++) p[i] = (double)(z[i] * (1.0f / sp->temperature)), ord[i] = i;
    g_sort_p = p;
    qsort(ord, (size_t)V, sizeof *ord, cmp_desc);
    int keep = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double sum = 0;
    for (int j = 0; j < keep; j++) sum += exp(p[ord[j]] - mx);
    double c = 0;
    int cut = keep;
    for (int j = 0; j < keep && sp->top_p < 1.0f; j++)
        if ((c += exp(p[ord[j]] - mx) / sum) >= sp->top_p) {
            cut = j + 1;
            break;
        }
    while (sp->min_p > 0 && cut > 1 && exp(p[ord[cut - 1]] - mx) < sp->min_p) cut--; /* min-p: a suffix goes */
    double kept = 0;
    for (int j = 0; j < cut; j++) kept += exp(p[ord[j]] - mx);
    double *q = malloc(sizeof(double) * (size_t)V);
    assert_non_null(q);
    for (int i = 0; i < V; i++) q[i] = 0;
    for (int j = 0; j < cut; j++) q[ord[j]] = exp(p[ord[j]] - mx) / kept;
    memcpy(p, q, sizeof(double) * (size_t)V);
    free(q);
}

static void test_logits_process_reference(void **state) {
    (void)state;
    rng_t r;
    rng_seed(&r, 17);
    int Vs[] = {5, 1000, 49157};
    sampling_params sps[] = {{1.0f, 0, 1.0f},        {0.6f, 0, 1.0f},         {1.3f, 40, 1.0f},
                             {0.8f, 0, 0.9f},        {1.0f, 50, 0.8f},        {1.0f, 0, 1.0f, 0.05f},
                             {1.5f, 0, 0.95f, 0.2f}, {0.7f, 30, 1.0f, 0.01f}, {1.0f, 0, 1.0f, 1.0f}};
    const int n_sps = (int)(sizeof sps / sizeof *sps);
    for (int vi = 0; vi < 3; vi++) {
        int V = Vs[vi];
        float *z = malloc(sizeof(float) * (size_t)V), *p = malloc(sizeof(float) * (size_t)V);
        double *want = malloc(sizeof(double) * (size_t)V);
        int *ord = malloc(sizeof(int) * (size_t)V);
        assert_true(z && p && want && ord);
        for (int i = 0; i < V; i++) z[i] = (float)(rng_uniform(&r) * 16 - 8);
        z[V / 2] = -INFINITY; /* a masked token */
        lp_scratch scr = {0};
        /* the row as drawn, then with its most likely token first and last in the vocabulary: a scan for
         * the largest that skips an end (a min-p cut from the second largest) passed the drawn rows */
        float top = -INFINITY;
        for (int i = 0; i < V; i++) top = fmaxf(top, z[i]);
        for (int edge = -1; edge < 2; edge++) {
            float keep0 = z[0], keep1 = z[V - 1];
            if (edge == 0) z[0] = top + 1;
            if (edge == 1) z[V - 1] = top + 1;
            for (int si = 0; si < n_sps; si++) {
                assert_int_equal(logits_process(z, V, &sps[si], p, &scr), 0);
                ref_process(z, V, &sps[si], want, ord);
                double worst = 0, total = 0;
                for (int i = 0; i < V; i++) {
                    if ((p[i] > 0) != (want[i] > 0))
                        fail_msg("V %d case %d (largest at %d): token %d: %g, reference %g", V, si, edge, i, (double)p[i], want[i]);
                    if (want[i] > 0) worst = fmax(worst, fabs(p[i] - want[i]) / want[i]);
                    total += p[i];
                }
                if (worst > 2e-6) fail_msg("V %d case %d (largest at %d): relative error %g", V, si, edge, worst);
                assert_true(fabs(total - 1) < 1e-5);
            }
            z[0] = keep0, z[V - 1] = keep1;
        }
        /* a min-p outside [0, 1] is refused with its name */
        const float bad[] = {-0.1f, 1.5f, NAN};
        for (int b = 0; b < 3; b++) {
            sampling_params sp = {1.0f, 0, 1.0f, bad[b]};
            assert_int_equal(logits_process(z, V, &sp, p, &scr), -1);
            assert_non_null(strstr(ds_errmsg(), "min-p"));
        }
        lp_scratch_free(&scr);
        free(z), free(p), free(want), free(ord);
    }
}

static void test_appendix_a_exact(void **state) {
    (void)state;
    double pa_greedy, pa_retro;
    assert_int_equal(appendix_a_first_token("greedy", &pa_greedy), 0);
    assert_int_equal(appendix_a_first_token("retrospective", &pa_retro), 0);
    double pa = (double)0.7f / ((double)0.7f + (double)0.3f);
    /* (0.7, 0.3) with the early stop, (0.85, 0.15) without it */
    assert_float_equal(pa_greedy, pa, 1e-15);
    assert_float_equal(pa_retro, 0.5 + 0.5 * pa, 1e-15);
    assert_float_equal(pa_retro, 0.85, 1e-7);
    assert_float_equal(1 - pa_retro, 0.15, 1e-7);
}

static void test_chain_edges(void **state) {
    (void)state;
    enum { V = 5 };
    float p[3 * V] = {0}, q[2 * V] = {0};
    double scratch[V];
    verify_rng vr;
    rng_seed(&vr.accept, 1);
    rng_seed(&vr.resample, 2);
    verify_result r;
    /* p = q: always accepted, bonus from the last row */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < V; i++) p[k * V + i] = q[k * V + i] = 0.2f;
    p[2 * V + 3] = 1.0f;
    int x[2] = {1, 4};
    for (int it = 0; it < 1000; it++) {
        assert_int_equal(verify_chain(p, q, x, 2, V, &vr, scratch, FAULT_NONE, &r), 0);
        assert_int_equal(r.n_accepted, 2);
        assert_int_equal(r.bonus, 1);
        assert_int_equal(r.token, 3);
    }
    /* a draft the target forbids is always rejected, and the residual never draws it */
    memset(p, 0, sizeof p);
    p[0] = 0.5f, p[2] = 0.5f;
    x[0] = 1;
    for (int it = 0; it < 1000; it++) {
        assert_int_equal(verify_chain(p, q, x, 1, V, &vr, scratch, FAULT_NONE, &r), 0);
        assert_int_equal(r.n_accepted, 0);
        assert_true(r.token == 0 || r.token == 2);
    }
    /* out-of-vocabulary draft ids are an error, not a read out of bounds */
    x[0] = V;
    assert_int_equal(verify_chain(p, q, x, 1, V, &vr, scratch, FAULT_NONE, &r), -1);
    assert_non_null(strstr(ds_errmsg(), "outside the vocabulary"));
    /* greedy: accept while the draft is the argmax, then the argmax of the next row */
    float g[3 * V] = {0};
    g[0 * V + 2] = 1, g[1 * V + 0] = 1, g[2 * V + 4] = 1;
    int xg[2] = {2, 3};
    verify_greedy(g, xg, 2, V, &r);
    assert_int_equal(r.n_accepted, 1);
    assert_int_equal(r.token, 0);
    assert_int_equal(verify_result_check(&r, 2, V, 1), 0);
    /* every drafted token the argmax: both accepted, the bonus from the last row, and the drafts after
     * the verified ones never read (the greedy rule's edge: xa[2] agrees with row 2 but is not verified) */
    int xa[3] = {2, 0, 4};
    verify_greedy(g, xa, 2, V, &r);
    assert_int_equal(r.n_accepted, 2);
    assert_int_equal(r.bonus, 1);
    assert_int_equal(r.token, 4);
    assert_int_equal(verify_result_check(&r, 2, V, 1), 0);
    /* what the callers refuse: accepted past the verified drafts, a token outside the vocabulary, a chain's
     * bonus flag that disagrees with its count (a tree's leaf may end its path early: not checked there) */
    const verify_result bad[] = {{3, 4, 1}, {-1, 0, 0}, {1, V, 0}, {1, -1, 0}, {2, 4, 0}, {1, 0, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(verify_result_check(&bad[i], 2, V, 1), -1);
        assert_non_null(strstr(ds_errmsg(), "a verifier bug"));
    }
    assert_int_equal(verify_result_check(&bad[5], 2, V, 0), 0);
    /* accept test in log space: p/q = 1/2 accepts u < 1/2 only */
    assert_true(log(0.49) < verify_log_ratio(0.25f, 0.5f, 1.0, 1.0));
    assert_false(log(0.51) < verify_log_ratio(0.25f, 0.5f, 1.0, 1.0));
    assert_float_equal(fmin(1, exp(verify_log_ratio(0.25f, 0.5f, 1.0, 1.0))), 0.5, 1e-15);
    assert_float_equal(fmin(1, exp(verify_log_ratio(0.0f, 0.5f, 1.0, 1.0))), 0.0, 0);
    assert_float_equal(fmin(1, exp(verify_log_ratio(0.3f, 0.0f, 1.0, 1.0))), 1.0, 0);
}

/* ------------------------------------------------------------ draft trees, exactly */

/* Every rule of verify_tree gives exactly the target's law (TV below 1e-12 by enumeration of every
 * draw, the drafting's included), at T = 1 and greedy; the two shipped mistakes do not. The cases
 * are the gate's (verify/tree_enum.c). */
static void test_tree_exact(void **state) {
    (void)state;
    const tree_kind kinds[3] = {TREE_TOPK, TREE_IID, TREE_WOR};
    for (int k = 0; k < 3; k++)
        for (int greedy = 0; greedy < 2; greedy++) {
            double d;
            long paths;
            assert_int_equal(tree_enum_tv(0, kinds[k], greedy, FAULT_NONE, &d, &paths), 0);
            if (!(d < 1e-12)) fail_msg("tree %s greedy=%d: TV %g from the target", TREE_KIND_NAMES[kinds[k]], greedy, d);
            assert_true(paths >= 1);
        }
    double d1, d2, d3;
    long paths;
    assert_int_equal(tree_enum_tv(0, TREE_TOPK, 0, FAULT_TREE_RATIO, &d1, &paths), 0);
    assert_int_equal(tree_enum_tv(0, TREE_IID, 0, FAULT_TREE_RESAMPLE_P, &d2, &paths), 0);
    assert_int_equal(tree_enum_tv(1, TREE_WOR, 0, FAULT_TREE_RESAMPLE_P, &d3, &paths), 0);
    if (!(d1 > 1e-3 && d2 > 1e-3 && d3 > 1e-3))
        fail_msg("tree controls not flagged: ratio rule on top-k TV %g, resample from p TV %g / %g", d1, d2, d3);
    print_message("tree controls: ratio rule on top-k children TV %.4f, resample from p (iid) %.4f, (wor) %.4f\n", d1, d2, d3);
}

/* ------------------------------------------------------------ block verification, exactly */

/* verify_block on rows that depend on the position only: every draft block x ~ q and every draw of
 * the verifier enumerated. The first emitted token's law is p[0] (TV < 1e-12) under both rules; for
 * each x the enumerated mean accepted count equals verify_expected_accepted (both rules); block's
 * mean over x is at least token-wise's; the token-wise-threshold control is not exact. */
static double block_case(int l, uint64_t seed, verify_fault fault, chain_rule rule, double *mean_acc) {
    enum { V = 5 };
    float p[8 * V], q[8 * V];
    rng_t r;
    rng_seed(&r, seed);
    for (int k = 0; k <= l; k++) {
        double s = 0, t = 0;
        for (int i = 0; i < V; i++) {
            p[k * V + i] = rng_uniform(&r) < 0.2 ? 0.0f : (float)rng_uniform(&r);
            q[k * V + i] = (float)rng_uniform(&r);
            s += p[k * V + i], t += q[k * V + i];
        }
        if (s == 0) p[k * V] = 1, s = 1;
        for (int i = 0; i < V; i++) p[k * V + i] /= (float)s, q[k * V + i] /= (float)t;
    }
    long double law[V] = {0}, acc = 0;
    double scratch[V];
    int n_x = 1;
    for (int k = 0; k < l; k++) n_x *= V;
    draw_enum en;
    assert_int_equal(draw_enum_init(&en), 0);
    for (int xi = 0; xi < n_x; xi++) {
        int x[8], t = xi;
        long double wx = 1;
        for (int k = 0; k < l; k++) x[k] = t % V, t /= V, wx *= q[k * V + x[k]] / row_sum(q + k * V, V);
        long double acc_x = 0;
        do {
            verify_rng vr;
            rng_seed(&vr.accept, 1);
            rng_seed(&vr.resample, 2);
            vr.accept.en = vr.resample.en = &en.hooks;
            draw_enum_begin(&en);
            verify_result res;
            int em[9];
            assert_int_equal(verify_round(p, q, x, l, V, 0, rule, &vr, scratch, fault, &res, em) > 0, 1);
            assert_int_equal(draw_enum_end(&en), 0);
            law[em[0]] += wx * en.weight;
            acc_x += en.weight * res.n_accepted;
        } while (draw_enum_next(&en));
        if (!fault) assert_true(fabsl(acc_x - verify_expected_accepted(p, q, x, l, V, rule)) < 1e-12L);
        acc += wx * acc_x;
    }
    draw_enum_free(&en);
    long double d = 0;
    for (int i = 0; i < V; i++) d += fabsl(law[i] - p[i] / (long double)row_sum(p, V)); /* rows as the verifier sees them */
    *mean_acc = (double)acc;
    return (double)(d / 2);
}

static void test_block_exact(void **state) {
    (void)state;
    for (int l = 1; l <= 4; l++)
        for (uint64_t seed = 1; seed <= 6; seed++) {
            double at, ab, ac;
            double dt = block_case(l, seed, FAULT_NONE, VERIFY_TOKEN, &at);
            double db = block_case(l, seed, FAULT_NONE, VERIFY_BLOCK, &ab);
            if (dt > 1e-12 || db > 1e-12) fail_msg("l %d seed %d: first-token TV token %g block %g", l, (int)seed, dt, db);
            if (ab < at - 1e-12) fail_msg("l %d seed %d: block accepts %.6f < token-wise %.6f", l, (int)seed, ab, at);
            if (l == 1 && fabs(ab - at) > 1e-12) fail_msg("one draft: block %.6f != token-wise %.6f", ab, at);
            if (l == 3 && seed == 1) {
                double dc = block_case(l, seed, FAULT_BLOCK_TOKENWISE, VERIFY_BLOCK, &ac);
                print_message("block verification, 3 drafts: E[accepted] %.4f vs token-wise %.4f; control TV %.4f\n", ab,
                              at, dc);
                assert_true(dc > 1e-3);
            }
        }
}

static void test_pvalues(void **state) {
    (void)state;
    /* textbook critical values */
    assert_float_equal(chi2_sf(3.841458820694124, 1), 0.05, 1e-9);
    assert_float_equal(chi2_sf(18.307038053275146, 10), 0.05, 1e-9);
    assert_float_equal(chi2_sf(124.34211340400407, 100), 0.05, 1e-8);
    assert_float_equal(chi2_sf(0, 5), 1.0, 0);
    /* the lower side (x / 2 < df / 2 + 1: the series, where every lossless case's statistic falls) against
     * closed forms: df 2 exp(-x/2), df 4 exp(-x/2) (1 + x/2), df 1 erfc(sqrt(x/2)); a p-value above 1
     * there (1 + P for 1 - P) passed every suite and gate case */
    assert_float_equal(chi2_sf(3, 2), exp(-1.5), 1e-12);
    assert_float_equal(chi2_sf(1, 4), exp(-0.5) * 1.5, 1e-12);
    assert_float_equal(chi2_sf(0.5, 1), erfc(0.5), 1e-12);
    assert_float_equal(chi2_sf(1e-6, 3), 1.0, 1e-8);
    for (double x = 0.25; x < 40; x *= 1.5) { /* both branches, df 2: exact at their seam too */
        assert_float_equal(chi2_sf(x, 2), exp(-x / 2), 1e-12 + 1e-9 * exp(-x / 2));
        assert_float_equal(chi2_sf(x, 4), exp(-x / 2) * (1 + x / 2), 1e-12 + 1e-9 * exp(-x / 2) * (1 + x / 2));
    }
    /* Kolmogorov: P(sqrt(n) D > 1.3581) = 0.05 for large n */
    assert_float_equal(ks_sf(1.3581 / sqrt(1e8), 100000000L), 0.05, 2e-4);
    assert_float_equal(normal_quantile(0.975), 1.959963984540054, 1e-9);
    /* a fair die: no rejection; a loaded one: rejected; an impossible outcome: p = 0 */
    long fair[6] = {1000, 980, 1010, 1005, 995, 1010}, loaded[6] = {1200, 960, 960, 960, 960, 960};
    double u[6] = {1 / 6.0, 1 / 6.0, 1 / 6.0, 1 / 6.0, 1 / 6.0, 1 / 6.0};
    gof_result g;
    chi2_gof(fair, u, 6, &g);
    assert_true(g.p > 0.5);
    chi2_gof(loaded, u, 6, &g);
    assert_true(g.p < 1e-6);
    double z[6] = {0.2, 0.2, 0.2, 0.2, 0.2, 0};
    chi2_gof(fair, z, 6, &g);
    assert_int_equal(g.p, 0);
    assert_true(g.impossible > 0);
    assert_float_equal(ks_gof(fair, z, 6, NULL), 0, 0);
    long a[3] = {500, 300, 200}, b[3] = {505, 290, 205}, c[3] = {300, 300, 400};
    chi2_two_sample(a, b, 3, &g);
    assert_true(g.p > 0.5);
    chi2_two_sample(a, c, 3, &g);
    assert_true(g.p < 1e-10);
}

static int n_cases(const gate_report *rep, const char *prefix, const char *also);

/* The toy matrix's inventory (quick): the chain rule's exact cases under every scheduler at both
 * temperatures, block verification's (and its ">= token-wise" comparison) under each scheduler and on
 * truncated supports, greedy decoding, the batch, every tree kind and shape, the sampled and KS cases.
 * A matrix that skipped cases stayed green: the fixed scheduler's batch case dropped by a `||` turned
 * `&&` in gate_run passed every check (a mutation round on lossless.c). */
static void toy_inventory(const gate_report *rep) {
    char pre[160];
    static const char *scheds[3] = {"fixed", "threshold", "greedy"}, *kinds[3] = {"topk", "iid", "wor"};
    for (int ti = 0; ti < 2; ti++) {
        const char *T = ti ? "1.0" : "0.6";
        for (int si = 0; si < 3; si++) {
            const char *fmt[3] = {"enumerate V=4 gamma=3 N=3 T=%s %s", "enumerate V=8 gamma=2 N=2 T=%s %s",
                                  "enumerate block-verify V=4 gamma=3 N=3 T=%s %s"};
            for (int f = 0; f < 3; f++) {
                snprintf(pre, sizeof pre, fmt[f], T, scheds[si]);
                if (n_cases(rep, pre, NULL) < 1) fail_msg("toy gate: no case '%s'", pre);
            }
        }
        const char *fmt[6] = {"enumerate block-verify V=6 gamma=4 N=2 T=%s fixed", "enumerate block-verify V=4 gamma=3 N=3 T=%s top-k=3 fixed",
                              "enumerate block-verify V=8 gamma=3 N=2 T=%s top-p=0.90 fixed", "chi2 first-two joint V=16 gamma=1 T=%s fixed",
                              "chi2 first-two joint V=16 gamma=3 T=%s fixed", "ks first-token V=64 gamma=7 T=%s"};
        for (int f = 0; f < 6; f++) {
            snprintf(pre, sizeof pre, fmt[f], T);
            if (n_cases(rep, pre, NULL) < 1) fail_msg("toy gate: no case '%s'", pre);
        }
    }
    static const char *once[] = {"enumerate V=8 gamma=3 N=2 T=0.0 fixed", "enumerate block-verify V=8 gamma=3 N=2 T=0.0 fixed",
                                 "enumerate batch of 2 requests V=4 gamma=2 greedy", "enumerate batch of 2 requests V=4 gamma=2 fixed",
                                 "Appendix A exact, greedy"};
    for (size_t i = 0; i < sizeof once / sizeof *once; i++)
        if (n_cases(rep, once[i], NULL) < 1) fail_msg("toy gate: no case '%s'", once[i]);
    if (n_cases(rep, "block-verify accepts >= token-wise ", NULL) < 13) fail_msg("toy gate: block verification's comparisons missing");
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 3; c++) {
            snprintf(pre, sizeof pre, "enumerate tree %s shape %d %s ", kinds[k], c == 1, c == 2 ? "T=0" : "T=1");
            if (n_cases(rep, pre, NULL) < 1) fail_msg("toy gate: no case '%s'", pre);
        }
}

/* the gate on its quick matrix: every lossless case passes, every control is flagged */
static void test_gate_quick(void **state) {
    (void)state;
    gate_report rep = {0};
    rep.draws = 20000;
    rep.quick = 1;
    rep.alpha = 0.01;
    int rc = gate_run(&rep, 0);
    int controls = 0, exact = 0;
    for (int i = 0; i < rep.n; i++) {
        if (!rep.rec[i].pass) fail_msg("%s: %s (stat %g, p %g)", rep.rec[i].control ? "control not flagged" : "rejected",
                                       rep.rec[i].test, rep.rec[i].statistic, rep.rec[i].p);
        controls += rep.rec[i].control;
        if (!rep.rec[i].control && strcmp(rep.rec[i].kind, "exact-tv") == 0) {
            assert_true(rep.rec[i].statistic < 1e-12);
            exact++;
        }
    }
    assert_int_equal(rc, 0);
    assert_true(controls >= 9);
    assert_true(exact >= 15);
    toy_inventory(&rep);
    gate_report_free(&rep);
}

/* The gate on the production round (quick matrix): decode_rounds and every registered drafter's
 * propose on a tiny target; every lossless case passes, every scheduler verifies, and every mutant
 * (shifted q rows, a drafter sampling without top-p, a 1 % accept bias, the bonus row, a reused
 * uniform) is flagged by at least two checks. Under AddressSanitizer (CI's second pass, ~8x slower) the
 * sampled cases and controls draw a quarter as much: the same code paths and exact cases, every mutant
 * still flagged twice at these sizes (seeds are fixed); the plain build runs the full sizes. */
#if defined(__SANITIZE_ADDRESS__)
#define ROUND_DRAWS 2000
#define CONTROL_DRAWS 10000
#else
#define ROUND_DRAWS 8000
#define CONTROL_DRAWS 0 /* the gate's own 40000 */
#endif
/* lossless records whose name starts with `prefix` (and contains `also`, when given) */
static int n_cases(const gate_report *rep, const char *prefix, const char *also) {
    int n = 0;
    for (int i = 0; i < rep->n; i++)
        n += !rep->rec[i].control && !strncmp(rep->rec[i].test, prefix, strlen(prefix)) &&
             (!also || strstr(rep->rec[i].test, also));
    return n;
}

/* A family whose settings offer a tree (its help names "tree_nodes") has a tree mode in the gate, and
 * one with a second tree shape ("tree_mode") a second: a tree drafter whose gate config went missing
 * would drop its trees out of every case of the inventory below without a word. */
static void test_tree_modes_in_gate(void **state) {
    (void)state;
    int n = 0;
    for (int di = 0; drafter_nth(di); di++) {
        const drafter_ops *d = drafter_nth(di);
        if (!strstr(d->help, "tree_nodes") != !d->gate_config_tree)
            fail_msg("%s: its help %s tree_nodes, its gate tree config is %s", d->name,
                     strstr(d->help, "tree_nodes") ? "offers" : "does not offer", d->gate_config_tree ? "set" : "unset");
        if (!strstr(d->help, "tree_mode") != !d->gate_config_tree2)
            fail_msg("%s: its help %s tree_mode, its second gate tree config is %s", d->name,
                     strstr(d->help, "tree_mode") ? "offers" : "does not offer", d->gate_config_tree2 ? "set" : "unset");
        n += d->gate_config_tree != NULL;
    }
    assert_true(n >= 9);
}

/* The quick matrix's inventory: every registered drafter enters the exact cases under fixed (three
 * settings and min-p), the sampled batch case and q-consistency; every tree mode its exact cases under
 * fixed and greedy and its sampled case; every lossless scheduler some exact case. A case matrix that
 * silently skipped a drafter, a mode or a scheduler kept every other check green (the gate's records
 * were only checked to pass and counted at least 16 exact ones). */
static void gate_inventory(const gate_report *rep) {
    char pre[160];
    for (int di = 0; drafter_nth(di); di++) {
        const drafter_ops *d = drafter_nth(di);
        snprintf(pre, sizeof pre, "round exact %s fixed ", d->name);
        if (n_cases(rep, pre, NULL) < 4) fail_msg("%s: %d exact cases under fixed", d->name, n_cases(rep, pre, NULL));
        snprintf(pre, sizeof pre, "round chi2 joint of 3 tokens %s fixed ", d->name);
        if (n_cases(rep, pre, NULL) < 1) fail_msg("%s: no sampled batch case", d->name);
        snprintf(pre, sizeof pre, "q-consistency exact %s: ", d->name);
        if (n_cases(rep, pre, NULL) < 1) fail_msg("%s: no q-consistency case", d->name);
        for (int tv = 1; tv <= 2; tv++) {
            if (!(tv == 1 ? d->gate_config_tree : d->gate_config_tree2)) continue;
            const char *mode = tv == 1 ? "tree" : "tree2";
            for (int g = 0; g < 2; g++) {
                snprintf(pre, sizeof pre, "round exact %s %s %s ", d->name, mode, g ? "greedy" : "fixed");
                if (n_cases(rep, pre, NULL) < 1) fail_msg("%s %s: no exact case under %s", d->name, mode, g ? "greedy" : "fixed");
                snprintf(pre, sizeof pre, "round chi2 joint of 3 tokens %s %s %s ", d->name, mode, g ? "greedy" : "fixed");
                if (n_cases(rep, pre, NULL) < 1) fail_msg("%s %s: no sampled case under %s", d->name, mode, g ? "greedy" : "fixed");
            }
        }
    }
    for (int si = 0; scheduler_nth(si); si++) {
        const scheduler_ops *so = scheduler_nth(si);
        if (!so->lossless) continue;
        snprintf(pre, sizeof pre, " %s T=", so->name);
        if (n_cases(rep, "round exact ", pre) < 1) fail_msg("scheduler %s: no exact case", so->name);
    }
}

static void test_gate_round(void **state) {
    (void)state;
    gate_report rep = {0};
    rep.control_draws = CONTROL_DRAWS;
    assert_int_equal(gate_round_cases(&rep, ROUND_DRAWS, 0.01, 1, 0, NULL), 0);
    assert_int_equal(gate_tree_cases(&rep), 0); /* the tree verifier's own controls */
    int exact = 0, flagged[FAULT_COUNT] = {0};
    for (int i = 0; i < rep.n; i++) {
        const gate_record *r = &rep.rec[i];
        if (!r->pass) fprintf(stderr, "failed: %s (%s) stat %g p %g\n", r->test, r->kind, r->statistic, r->p);
        assert_true(r->pass);
        if (!r->control && strcmp(r->kind, "exact-tv") == 0) exact++;
        for (int f = 1; f < FAULT_COUNT; f++)
            if (r->control && strstr(r->test, VERIFY_FAULT_NAMES[f])) flagged[f]++;
    }
    assert_true(exact >= 16);
    gate_inventory(&rep);
    for (int f = FAULT_REUSED_UNIFORM; f < FAULT_COUNT; f++) {
        if (flagged[f] < 2) fprintf(stderr, "mutant %s flagged by %d checks\n", VERIFY_FAULT_NAMES[f], flagged[f]);
        assert_true(flagged[f] >= 2);
    }
    gate_report_free(&rep);
}

/* The gate's enumerator on a program whose law is known by hand, and its own refusals. Every exact case
 * of the gate rests on it; only the verifier's and the rounds' laws checked it, so a path weight from
 * the wrong branch or a refusal that stopped being reported (a draw from a law of no mass, more outcomes
 * than a frame holds, a law that changed on replay, a replay with fewer draws than its path: the
 * program is not deterministic given its draws, and its enumerated law means nothing) passed them all,
 * and so did a frame that refused a law of exactly as many outcomes as it holds. The program: a from (0.2, 0, 0.8); a = 0: b from (1, 3) in double; a = 2: c from ids {7, 9} at
 * (0.5, 0.5), then an accept test at 1/4. Six paths. */
static int enum_program(rng_t *r) {
    float la[3] = {0.2f, 0, 0.8f}, lc[2] = {0.5f, 0.5f};
    double lb[2] = {1, 3};
    int ids[2] = {7, 9}, a = rng_draw(r, la, 3);
    double u;
    if (a < 0) return -1;
    if (a == 0) {
        int b = rng_draw_d(r, lb, 2);
        return b < 0 ? -1 : b;
    }
    int c = rng_draw_ids(r, lc, ids, 2);
    if (c < 0) return -1;
    int acc = rng_accept(r, log(0.25), &u);
    return acc < 0 ? -1 : 10 * c + acc;
}

/* one run of a program that misbehaves as `how` says on its replays (run > 0); its return as rng_draw's */
static int enum_bad(rng_t *r, int how, int run) {
    /* on replay the law's first outcome moves (token 1 for token 0) and its weights stay: a check that
     * compared only the weights, or the outcomes after the first, would replay it as the same draw */
    float two[2] = {0.5f, 0.5f}, three[4] = {1, 0, 1, 1}, moved[4] = {0, 1, 1, 1}, none[3] = {0, 0, 0}, wide[300];
    for (int i = 0; i < 300; i++) wide[i] = 1;
    if (how == 0) return rng_draw(r, none, 3);                       /* no positive mass */
    if (how == 1) return rng_draw(r, wide, DRAW_ENUM_MAX_OPT + 1);   /* more outcomes than a frame holds */
    int x = rng_draw(r, how == 2 && run > 0 ? moved : three, 4);     /* its law changes on replay */
    if (x < 0 || (how == 3 && run > 0)) return x; /* fewer draws on replay than on its first run */
    return rng_draw(r, two, 2);
}

static void test_enumerator(void **state) {
    (void)state;
    draw_enum e;
    assert_int_equal(draw_enum_init(&e), 0);
    long double law[100] = {0}, total = 0;
    do {
        rng_t r;
        rng_seed(&r, 5);
        r.en = &e.hooks;
        draw_enum_begin(&e);
        int o = enum_program(&r);
        assert_int_equal(draw_enum_end(&e), 0);
        assert_true(o >= 0 && o < 100);
        law[o] += e.weight;
        total += e.weight;
    } while (draw_enum_next(&e));
    const struct {
        int o;
        double w;
    } want[6] = {{0, 0.2 * 0.25}, {1, 0.2 * 0.75}, {70, 0.8 * 0.5 * 0.75}, {71, 0.8 * 0.5 * 0.25},
                 {90, 0.8 * 0.5 * 0.75}, {91, 0.8 * 0.5 * 0.25}};
    assert_int_equal(e.paths, 6);
    for (int i = 0; i < 6; i++) {
        if (fabsl(law[want[i].o] - want[i].w) > 1e-7L)
            fail_msg("outcome %d: weight %.9Lf, want %.9f", want[i].o, law[want[i].o], want[i].w);
        law[want[i].o] = 0;
    }
    for (int i = 0; i < 100; i++) assert_true(law[i] == 0);
    assert_true(fabsl(total - 1) < 1e-7L);
    draw_enum_free(&e);
    /* an accept test that cannot fail, and one that cannot pass: one branch each */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(draw_enum_init(&e), 0);
        int seen[2] = {0, 0};
        do {
            rng_t r;
            rng_seed(&r, 5);
            r.en = &e.hooks;
            draw_enum_begin(&e);
            double u;
            int a = rng_accept(&r, k == 0 ? 0.0 : -INFINITY, &u);
            assert_int_equal(draw_enum_end(&e), 0);
            assert_true(a == 0 || a == 1);
            seen[a]++;
            assert_true(e.weight == 1.0L);
        } while (draw_enum_next(&e));
        assert_int_equal(e.paths, 1);
        assert_int_equal(seen[k == 0], 1);
        draw_enum_free(&e);
    }
    /* a draw of as many outcomes as a frame holds: every one a path, each at 1/256 */
    assert_int_equal(draw_enum_init(&e), 0);
    {
        float flat[DRAW_ENUM_MAX_OPT];
        for (int i = 0; i < DRAW_ENUM_MAX_OPT; i++) flat[i] = 1;
        int next = 0;
        do {
            rng_t r;
            rng_seed(&r, 5);
            r.en = &e.hooks;
            draw_enum_begin(&e);
            assert_int_equal(rng_draw(&r, flat, DRAW_ENUM_MAX_OPT), next++);
            assert_int_equal(draw_enum_end(&e), 0);
            assert_true(fabsl(e.weight - 1.0L / DRAW_ENUM_MAX_OPT) < 1e-15L);
        } while (draw_enum_next(&e));
        assert_int_equal(next, DRAW_ENUM_MAX_OPT);
    }
    draw_enum_free(&e);
    /* refusals: each program's enumeration ends in an error with a message, never a law; the refused
     * draw itself returns -1 */
    const char *what[4] = {"no positive mass", "outcomes", "changed its law on replay", "not deterministic"};
    for (int how = 0; how < 4; how++) {
        assert_int_equal(draw_enum_init(&e), 0);
        int failed = 0;
        for (int run = 0; run < 4 && !failed; run++) {
            rng_t r;
            rng_seed(&r, 5);
            r.en = &e.hooks;
            draw_enum_begin(&e);
            int x = enum_bad(&r, how, run);
            failed = draw_enum_end(&e) != 0;
            if (x < 0 && !failed) fail_msg("refusal %d: a failed draw with a run that ended well", how);
            if (failed && how < 3 && x >= 0) fail_msg("refusal %d: the refused draw returned %d, not -1", how, x);
            if (!failed && !draw_enum_next(&e)) break;
        }
        if (!failed || !e.error) fail_msg("refusal %d (%s): not reported", how, what[how]);
        if (!strstr(ds_errmsg(), what[how])) fail_msg("refusal %d: message '%s'", how, ds_errmsg());
        draw_enum_free(&e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_process_reference),
        cmocka_unit_test(test_enumerator),
        cmocka_unit_test(test_appendix_a_exact),
        cmocka_unit_test(test_chain_edges),
        cmocka_unit_test(test_tree_exact),
        cmocka_unit_test(test_block_exact),
        cmocka_unit_test(test_pvalues),
        cmocka_unit_test(test_gate_quick),
        cmocka_unit_test(test_tree_modes_in_gate),
        cmocka_unit_test(test_gate_round),
    };
    return cmocka_run_group_tests_name("verify", tests, NULL, NULL);
}
