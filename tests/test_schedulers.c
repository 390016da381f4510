/* test_schedulers — the learning and asynchronous schedulers on synthetic rounds (no model):
 * async-topk's delayed budget against a hand-computed example, the bandits and Hedge finding the
 * best verification length of a known environment, per-request state, and bad settings refused by
 * name. (Losslessness of each is the gate's job: engine/gate_round.c.) */
#include "testutil.h"

#include <cJSON.h>

#include "../schedulers/scheduler.h"

#define HEDGE_LAW 5 /* lengths 0..gamma at gamma = 4 */

static int open_cfg(scheduler *s, const char *name, const char *json) {
    cJSON *c = json ? cJSON_Parse(json) : NULL;
    assert_true(!json || c);
    int rc = scheduler_open(s, name, c, 1);
    cJSON_Delete(c);
    return rc;
}

/* a table with a cliff: one forward costs 1 s up to 5 tokens, 100 s from 6 */
static void cliff_sps(sps_table *t) {
    int B[3] = {1, 5, 6};
    double steps[3] = {1, 1, 0.01};
    assert_int_equal(sps_from_arrays(t, B, steps, 3), 0);
}

static void test_async_topk_by_hand(void **state) {
    (void)state;
    sps_table sps;
    cliff_sps(&sps);
    scheduler s;
    assert_int_equal(open_cfg(&s, "async-topk", "{\"delay\": 2}"), 0);
    int nd[2] = {2, 2}, len[2];
    /* round 1: a = 0.9, 0.81 | 0.5, 0.25; the unconstrained search admits 3 (B = 5, Theta 4.21;
     * the 4th crosses the cliff). No history yet: everything proposed is verified */
    float c1[4] = {0.9f, 0.9f, 0.5f, 0.5f};
    sched_batch b = {2, 2, nd, c1, &sps, NULL};
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 2), assert_int_equal(len[1], 2);
    /* round 2: a = 0.1, 0 | 0.1, 0: two candidates, its own search admits both; still no budget
     * from two rounds back */
    float c2[4] = {0.1f, 0.0f, 0.1f, 0.0f};
    b.conf = c2;
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 1), assert_int_equal(len[1], 1); /* a = 0 is never a candidate */
    /* round 3: K = 3 from round 1; ranked 0.95, 0.855 (request 1), then 0.1 (request 0) */
    float c3[4] = {0.1f, 0.9f, 0.95f, 0.9f};
    b.conf = c3;
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 1), assert_int_equal(len[1], 2);
    /* round 4: K from round 2 = 2: the top two, both of request 1 */
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 0), assert_int_equal(len[1], 2);
    /* a batch of one request: K scaled by 1/2 (round 3's 3 -> 2 after rounding half away) */
    int nd1[1] = {2};
    sched_batch b1 = {1, 2, nd1, c3 + 2, &sps, NULL};
    assert_int_equal(s.ops->schedule(&s, &b1, len), 0);
    assert_int_equal(len[0], 2);
    /* reset: back to the verify-everything start for `delay` rounds (the gate resets before each replay:
     * a budget left from the last replay's first round would be that round's own search, the control) */
    s.ops->reset(&s);
    b.conf = c3;
    for (int t = 0; t < 2; t++) {
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        assert_int_equal(len[0], 2), assert_int_equal(len[1], 2);
    }
    scheduler_close(&s);
    /* the control: no delay, K from this round's own search (Algorithm 1 without its early stop) */
    assert_int_equal(open_cfg(&s, "async-topk-now", NULL), 0);
    b.conf = c1;
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 2), assert_int_equal(len[1], 1);
    scheduler_close(&s);
    assert_int_equal(scheduler_open(&s, "async-topk-now", NULL, 0), -1); /* not offered to users */
    sps_free(&sps);
}

/* An environment with a known best length: every request accepts a draft at position j with
 * probability 0.7 (deterministic pattern), a forward over B tokens costs 1 + 0.5 B model seconds.
 * Returns the round's result for the lengths chosen. */
typedef struct {
    int R, gamma, nd[4], ver[4], acc[4], emit[4], req[4];
    long step;
} env;

static void env_round(env *e, const int *len, const sps_table *sps, round_result *rr) {
    int T = 0;
    for (int r = 0; r < e->R; r++) {
        e->ver[r] = len[r];
        int k = 0;
        /* acceptance pattern: position j survives in 7 of 10 rounds, cycling deterministically */
        while (k < len[r] && (e->step * 7 + r * 3 + k * 5) % 10 < 7) k++;
        e->acc[r] = k;
        e->emit[r] = k + 1;
        T += 1 + len[r];
    }
    e->step++;
    *rr = (round_result){e->R, e->gamma, e->req, e->nd, e->ver, e->acc, e->emit, NULL, T, 0, sps_seconds(sps, T), sps};
}

/* expected tokens per model second at length l for this environment (per request, R alike) */
static double env_rate(int l, int R, const sps_table *sps) {
    double tok = 0, a = 1;
    for (int j = 0; j <= l; j++) {
        tok += a;
        a *= 0.7;
    }
    return R * tok / sps_seconds(sps, R * (1 + l));
}

static void test_bandits_find_the_best_length(void **state) {
    (void)state;
    int B[2] = {1, 64};
    double steps[2] = {1.0 / 1.5, 1.0 / 33}; /* seconds = 1 + 0.5 B */
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 2), 0);
    int best = 0;
    for (int l = 1; l <= 6; l++)
        if (env_rate(l, 2, &sps) > env_rate(best, 2, &sps)) best = l;
    const char *names[2] = {"bandit-ucb1", "bandit-thompson"};
    for (int i = 0; i < 2; i++) {
        scheduler s;
        assert_int_equal(open_cfg(&s, names[i], i ? "{\"clock\": \"model\", \"seed\": 5}" : "{\"clock\": \"model\", \"c\": 0.3}"), 0);
        env e = {2, 6, {6, 6}, {0}, {0}, {0}, {0, 1}, 0};
        long plays[7] = {0};
        for (int t = 0; t < 600; t++) {
            int len[2];
            sched_batch b = {2, 6, e.nd, NULL, &sps, e.req};
            assert_int_equal(s.ops->schedule(&s, &b, len), 0);
            assert_int_equal(len[0], len[1]); /* one arm for the batch */
            if (t >= 300) plays[len[0]]++;
            round_result rr;
            env_round(&e, len, &sps, &rr);
            assert_int_equal(s.ops->observe(&s, &rr), 0);
        }
        long most = 0;
        for (int l = 0; l <= 6; l++)
            if (plays[l] > plays[most]) most = l;
        fprintf(stderr, "%s: best length %d (rate %.3f), played most in rounds 300-600: %ld (%ld of 300)\n", names[i],
                best, env_rate(best, 2, &sps), most, plays[most]);
        assert_true(labs(most - best) <= 1 && plays[most] > 150);
        scheduler_close(&s);
    }
    sps_free(&sps);
}

/* Under load Hedge must charge a request for the batch time its drafts cost the others: with a cost
 * curve like this CPU's past B = 8 (a row costs nearly a whole step) and requests whose first draft
 * is always accepted and the second never, one request alone learns to verify 1, but each of 16
 * requests in a batch learns to verify none. */
static double hedge_mean_length(int R) {
    int B[3] = {1, 8, 64};
    double steps[3] = {1.0, 1.0 / 1.7, 1.0 / 52.1}; /* seconds 1, then +0.1 a row to B = 8, then +0.9 */
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 3), 0);
    scheduler s;
    assert_int_equal(open_cfg(&s, "hedge", "{\"eta\": 1, \"seed\": 4}"), 0);
    int req[16], nd[16], len[16], acc[16], emit[16], sum = 0, n = 0;
    for (int r = 0; r < R; r++) req[r] = 100 + r, nd[r] = 4;
    for (int t = 0; t < 300; t++) {
        sched_batch b = {R, 4, nd, NULL, &sps, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        int rows = 0;
        for (int r = 0; r < R; r++) {
            acc[r] = len[r] >= 1 ? 1 : 0;
            emit[r] = acc[r] + 1;
            rows += 1 + len[r];
            if (t >= 200) sum += len[r], n++;
        }
        round_result rr = {R, 4, req, nd, len, acc, emit, NULL, rows, 0, 0, &sps};
        assert_int_equal(s.ops->observe(&s, &rr), 0);
    }
    scheduler_close(&s);
    sps_free(&sps);
    return (double)sum / n;
}

static void test_hedge_charges_batch_time(void **state) {
    (void)state;
    double alone = hedge_mean_length(1), loaded = hedge_mean_length(16);
    fprintf(stderr, "hedge: mean verified length alone %.2f, in a batch of 16 %.2f\n", alone, loaded);
    assert_true(alone > 0.8 && loaded < 0.3);
}

/* Hedge's update by hand: the law it draws each request's length from after one, two and three rounds,
 * read through the scheduler's own random stream (a hook that records the weights it is handed). The
 * table has a kink at B = 8 (1 s, +0.1 a row to B = 8, +50.4/56 past it), so where the other rows of the
 * round are counted (B0 = batch_tokens - v) changes every price. Row 0 is request 12 (4 proposed, 3
 * verified, 1 accepted: every length's tokens revealed), row 1 request 11 (2 of 2 accepted: lengths 3
 * and 4 estimated, from its acceptance rate, then from the round's confidences, with 3 proposed so length
 * 4 is priced as 3); in round 3 request 12 accepts all it verifies. The laws are tests/ref/hedge_by_hand.py's: the doc comment's rule in float64. */
typedef struct {
    rng_branches h;
    double w[8][HEDGE_LAW];
    int n[8], calls;
} law_hook;

static int law_pick_d(rng_branches *b, const double *p, int n) {
    law_hook *k = (law_hook *)b;
    assert_true(k->calls < 8 && n <= HEDGE_LAW);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += p[i];
    for (int i = 0; i < n; i++) k->w[k->calls][i] = p[i] / sum;
    k->n[k->calls++] = n;
    return 0;
}

static void test_hedge_by_hand(void **state) {
    (void)state;
    int B[3] = {1, 8, 64};
    double steps[3] = {1.0, 1.0 / 1.7, 1.0 / 52.1};
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 3), 0);
    scheduler s;
    assert_int_equal(open_cfg(&s, "hedge", "{\"eta\": 1, \"seed\": 4}"), 0);
    static const double want[3][2][HEDGE_LAW] = {
        {{0.178312785662, 0.226489836095, 0.209505784973, 0.197382507597, 0.188309085673},
         {0.151560237732, 0.198039334924, 0.240957246744, 0.247057108486, 0.162386072114}},
        {{0.157867490208, 0.254697786136, 0.217931382486, 0.193439454667, 0.176063886503},
         {0.102561964064, 0.175113122320, 0.259236266218, 0.279426664357, 0.183661983041}},
        {{0.126626761072, 0.259492133410, 0.233118498271, 0.203101075359, 0.177661531888},
         {0.068150381817, 0.147797432194, 0.260742920384, 0.309636086566, 0.213673179040}}};
    int req[2] = {12, 11};
    float conf[8] = {0.2f, 0.2f, 0.2f, 0.2f, 0.9f, 0.9f, 0.6f, 0.5f}; /* row 0's are never read (1 < 3) */
    for (int t = 0; t < 3; t++) {
        /* round 3: request 12 verifies 1 and accepts it, so its Laplace rate from rounds 1-2, (2 + 1) / (4 + 2), is read */
        int prop[2] = {4, t == 1 ? 3 : 4}, ver[2] = {t == 2 ? 1 : 3, 2}, acc[2] = {1, 2}, emit[2] = {2, 3};
        round_result rr = {2, 4, req, prop, ver, acc, emit, t == 1 ? conf : NULL, t == 2 ? 5 : 7, 0, 0, &sps};
        assert_int_equal(s.ops->observe(&s, &rr), 0);
        law_hook k = {{NULL, law_pick_d, NULL, NULL}, {{0}}, {0}, 0};
        s.rng.en = &k.h;
        int nd[2] = {4, 4}, len[2];
        sched_batch b = {2, 4, nd, NULL, &sps, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        s.rng.en = NULL;
        assert_int_equal(k.calls, 2);
        for (int r = 0; r < 2; r++) {
            assert_int_equal(k.n[r], HEDGE_LAW);
            for (int l = 0; l < HEDGE_LAW; l++) {
                if (fabs(k.w[r][l] - want[t][r][l]) > 1e-9)
                    fail_msg("round %d request %d length %d: %.12f, by hand %.12f", t + 1, req[r], l, k.w[r][l],
                             want[t][r][l]);
            }
        }
    }
    scheduler_close(&s);
    /* the draws themselves: from the stream seeded seed * 0x9e3779b97f4a7c15 + 0x5eed, requests in batch
     * order, inverse CDF; with nothing learned the law is uniform, so length = floor(5 u) */
    assert_int_equal(open_cfg(&s, "hedge", "{\"seed\": 9}"), 0);
    rng_t ref;
    rng_seed(&ref, 9 * 0x9e3779b97f4a7c15ull + 0x5eed);
    for (int t = 0; t < 40; t++) {
        int nd[2] = {4, 4}, len[2];
        sched_batch b = {2, 4, nd, NULL, &sps, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        for (int r = 0; r < 2; r++) assert_int_equal(len[r], (int)(rng_uniform(&ref) * HEDGE_LAW));
        if (t == 19) { /* a reset starts the stream over */
            s.ops->reset(&s);
            rng_seed(&ref, 9 * 0x9e3779b97f4a7c15ull + 0x5eed);
        }
    }
    scheduler_close(&s);
    sps_free(&sps);
}

/* With a large eta every length's log-weight falls far below exp's range (a request whose third draft is
 * always rejected gains less than the table's best rate at every length: about -16 a round at eta =
 * 100, -800 after 50): the draw must still follow the law's shape, shifted by its largest weight, and
 * pick length 2 or 3 (3 while its estimated third acceptance, from a rate near 0.85, looks worth it;
 * with eta this large Hedge follows its leader), never the first index of an all-zero vector. */
static void test_hedge_under_exp_range(void **state) {
    (void)state;
    int B[2] = {1, 64};
    double steps[2] = {1.0 / 1.5, 1.0 / 33}; /* seconds 1 + 0.5 B */
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 2), 0);
    scheduler s;
    assert_int_equal(open_cfg(&s, "hedge", "{\"eta\": 100, \"seed\": 2}"), 0);
    int req[1] = {5}, nd[1] = {4}, near = 0;
    for (int t = 0; t < 80; t++) {
        int len[1], acc[1], emit[1];
        sched_batch b = {1, 4, nd, NULL, &sps, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        acc[0] = DS_MIN(len[0], 2);
        emit[0] = acc[0] + 1;
        if (t >= 50) near += len[0] == 2 || len[0] == 3;
        round_result rr = {1, 4, req, nd, len, acc, emit, NULL, 1 + len[0], 0, 0, &sps};
        assert_int_equal(s.ops->observe(&s, &rr), 0);
    }
    assert_int_equal(near, 30);
    scheduler_close(&s);
    sps_free(&sps);
}

/* UCB1 by hand: arms {1, 3}, the model clock, c = 1.55; length 1 earns 1 token a second, length 3
 * earns 2. After each arm once, index = mean / best reward + c sqrt(ln t / n) with t the rounds
 * played: ln 3 makes length 1's bonus too small at round 4 (0.5 + 1.55 * 1.048 < 1 + 1.55 * 0.741), its
 * turn comes at round 5 and again at 8. (A clock counted from 1 plays it at round 4.) A reset forgets
 * what was learned but not the configured arms: the same ten rounds again. */
static void test_ucb_by_hand(void **state) {
    (void)state;
    scheduler s;
    assert_int_equal(open_cfg(&s, "bandit-ucb1", "{\"clock\": \"model\", \"c\": 1.55, \"arms\": [1, 3]}"), 0);
    static const int want[10] = {1, 3, 3, 3, 1, 3, 3, 1, 3, 3};
    int req[1] = {3}, nd[1] = {4};
    for (int pass = 0; pass < 2; pass++) {
        for (int t = 0; t < 10; t++) {
            int len[1], acc[1], emit[1];
            sched_batch b = {1, 4, nd, NULL, NULL, req};
            assert_int_equal(s.ops->schedule(&s, &b, len), 0);
            if (len[0] != want[t]) fail_msg("pass %d round %d: length %d, by hand %d", pass, t + 1, len[0], want[t]);
            acc[0] = len[0], emit[0] = len[0] == 1 ? 1 : 3;
            round_result rr = {1, 4, req, nd, len, acc, emit, NULL, 1 + len[0], 9.0, len[0] == 1 ? 1.0 : 1.5, NULL};
            assert_int_equal(s.ops->observe(&s, &rr), 0);
        }
        s.ops->reset(&s);
    }
    scheduler_close(&s);
}

/* Thompson sampling by hand: arms 0..gamma (none configured), each arm once in order, then each arm's
 * draw mean + sqrt(var / n) * N(0, 1), all over the best reward seen, var the arms' pooled within-arm
 * variance (sum of squared deviations over sum of (n - 1)); the normal draws come from the scheduler's
 * stream, seeded seed * 0x9e3779b97f4a7c15 + 77, one an arm in arm order. The rewards vary by round
 * (a period-3 slowdown up to 4x), so the variance is large and every arm is explored. The same rule
 * restated here picks the same arm in each of 60 rounds. */
static void test_thompson_by_hand(void **state) {
    (void)state;
    scheduler s;
    assert_int_equal(open_cfg(&s, "bandit-thompson", "{\"clock\": \"model\", \"seed\": 5}"), 0);
    enum { G = 3, A = G + 1 };
    rng_t ref;
    rng_seed(&ref, 5 * 0x9e3779b97f4a7c15ull + 77);
    long n[A] = {0};
    double sum[A] = {0}, sumsq[A] = {0}, rmax = 0;
    int req[1] = {0}, nd[1] = {G}, counts[A] = {0};
    for (int t = 0; t < 60; t++) {
        int want = -1;
        for (int a = 0; a < A && want < 0; a++)
            if (n[a] == 0) want = a;
        if (want < 0) {
            double var = 0, best = -INFINITY;
            long dof = 0;
            for (int a = 0; a < A; a++) {
                double m = sum[a] / n[a];
                var += sumsq[a] - n[a] * m * m;
                dof += n[a] - 1;
            }
            double scale = rmax;
            var = dof > 0 ? fmax(var / dof, 1e-6 * scale * scale) : scale * scale;
            for (int a = 0; a < A; a++) {
                double v = (sum[a] / n[a] + sqrt(var / n[a]) * rng_normal(&ref)) / scale;
                if (v > best) best = v, want = a;
            }
        }
        int len[1], acc[1], emit[1];
        sched_batch b = {1, G, nd, NULL, NULL, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        if (len[0] != want) fail_msg("round %d: length %d, by hand %d", t + 1, len[0], want);
        counts[want]++;
        acc[0] = len[0], emit[0] = len[0] + 1;
        double sec = (1 + 0.5 * len[0]) * (1 + 1.5 * (t % 3));
        round_result rr = {1, G, req, nd, len, acc, emit, NULL, 1 + len[0], 9.0, sec, NULL};
        assert_int_equal(s.ops->observe(&s, &rr), 0);
        double x = emit[0] / sec;
        n[want]++, sum[want] += x, sumsq[want] += x * x, rmax = fmax(rmax, x);
    }
    fprintf(stderr, "thompson by hand: arms played %d %d %d %d\n", counts[0], counts[1], counts[2], counts[3]);
    assert_true(counts[3] > counts[0]); /* the best rate, (3 + 1) / 2.5, is played most */
    scheduler_close(&s);
}

/* Which schedulers are production (lossless: run and serve open them, the gate runs every one) and
 * which are the gate's negative controls (opened only by the gate): a production scheduler marked as
 * a control would drop out of the gate's cases without a word. */
static void test_registry_roles(void **state) {
    (void)state;
    static const char *const prod[] = {"fixed", "threshold", "greedy", "async-topk", "bandit-ucb1", "bandit-thompson", "hedge"};
    static const char *const ctrl[] = {"retrospective", "async-topk-now"};
    int n = 0;
    for (; scheduler_nth(n); n++) {
        const scheduler_ops *so = scheduler_nth(n);
        int found = -1;
        for (int i = 0; i < 7; i++)
            if (!strcmp(so->name, prod[i])) found = 1;
        for (int i = 0; i < 2; i++)
            if (!strcmp(so->name, ctrl[i])) found = 0;
        if (found < 0) fail_msg("scheduler '%s' is in neither list of this test: add it to one", so->name);
        if (so->lossless != found) fail_msg("scheduler '%s': lossless %d, expected %d", so->name, so->lossless, found);
        scheduler sc;
        int rc = scheduler_open(&sc, so->name, NULL, 0);
        if (found) {
            if (rc) fail_msg("production scheduler '%s' does not open: %s", so->name, ds_errmsg());
            scheduler_close(&sc);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(ds_errmsg(), "unknown scheduler"));
        }
    }
    assert_int_equal(n, 9);
    /* the ones that read confidences refuse a drafter without them (and the gate pairs them only with
     * drafters that have them) */
    static const char *const conf[] = {"threshold", "greedy", "async-topk", "retrospective", "async-topk-now"};
    for (int k = 0; scheduler_nth(k); k++) {
        int want = 0;
        for (int i = 0; i < 5; i++) want |= !strcmp(scheduler_nth(k)->name, conf[i]);
        if (scheduler_nth(k)->needs_conf != want) fail_msg("scheduler '%s': needs_conf %d", scheduler_nth(k)->name, !want);
    }
    char list[256];
    scheduler_list(list, sizeof list, 0);
    assert_string_equal(list, "fixed, threshold, greedy, async-topk, bandit-ucb1, bandit-thompson, hedge");
}

static void test_hedge_per_request(void **state) {
    (void)state;
    /* request 7 accepts every draft, request 9 none: Hedge must learn long for 7, zero for 9 */
    int B[2] = {1, 64};
    double steps[2] = {1.0 / 1.5, 1.0 / 33};
    sps_table sps;
    assert_int_equal(sps_from_arrays(&sps, B, steps, 2), 0);
    scheduler s;
    assert_int_equal(open_cfg(&s, "hedge", "{\"eta\": 2, \"seed\": 3}"), 0);
    int req[2] = {7, 9}, nd[2] = {4, 4}, sum7 = 0, sum9 = 0;
    for (int t = 0; t < 200; t++) {
        int len[2], acc[2], emit[2];
        sched_batch b = {2, 4, nd, NULL, &sps, req};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        acc[0] = len[0], acc[1] = 0;
        emit[0] = len[0] + 1, emit[1] = 1;
        if (t >= 150) sum7 += len[0], sum9 += len[1];
        round_result rr = {2, 4, req, nd, len, acc, emit, NULL, 2 + len[0] + len[1], 0, 0, &sps};
        assert_int_equal(s.ops->observe(&s, &rr), 0);
    }
    fprintf(stderr, "hedge: mean length over the last 50 rounds: always-accepting %.2f, never-accepting %.2f\n",
            sum7 / 50.0, sum9 / 50.0);
    assert_true(sum7 / 50.0 > 3.5 && sum9 / 50.0 < 0.5);
    /* a request that leaves takes its state with it: a new one with its id starts uniform again */
    s.ops->release(&s, 9);
    int one[1] = {9}, nd1[1] = {4}, seen[5] = {0};
    for (int t = 0; t < 200; t++) {
        int len[1];
        sched_batch b = {1, 4, nd1, NULL, &sps, one};
        assert_int_equal(s.ops->schedule(&s, &b, len), 0);
        seen[len[0]]++;
    }
    for (int l = 0; l <= 4; l++) assert_true(seen[l] > 15); /* uniform: about 40 each */
    scheduler_close(&s);
    sps_free(&sps);
}

static void test_req_table(void **state) {
    (void)state;
    req_table t = {0};
    int *a = req_table_get(&t, 5, sizeof(int));
    *a = 55;
    for (int id = 100; id < 140; id++) *(int *)req_table_get(&t, id, sizeof(int)) = id; /* grows */
    assert_int_equal(*(int *)req_table_get(&t, 5, sizeof(int)), 55);
    req_table_drop(&t, 5);
    assert_int_equal(*(int *)req_table_get(&t, 5, sizeof(int)), 0); /* fresh, zeroed */
    assert_int_equal(*(int *)req_table_get(&t, 139, sizeof(int)), 139);
    assert_null(req_table_get(&t, 1, sizeof(double))); /* one slot size per table */
    req_table_clear(&t);
    assert_int_equal(*(int *)req_table_get(&t, 120, sizeof(int)), 0);
    req_table_free(&t);
}

/* greedy's draft-length rule prices a measured draft against the SPS table at the target's measured
 * speed (sps_scale u): on a flat table of 1 s a forward, two drafts at confidence 0.5 and 0.5 s a
 * draft, a third pays only once the target is more than 6x slower than the table says (u > 6); a
 * fixed draft_cost is in the table's units and ignores u (the gate's rule stays deterministic). */
static void test_greedy_prices_at_measured_speed(void **state) {
    (void)state;
    sps_table sps;
    int B[2] = {1, 16};
    double steps[2] = {1, 1};
    assert_int_equal(sps_from_arrays(&sps, B, steps, 2), 0);
    float conf[2] = {0.5f, 0.5f};
    scheduler s;
    assert_int_equal(open_cfg(&s, "greedy", NULL), 0);
    sched_draft q = {2, conf, 0, 0.5, &sps, 0};
    assert_int_equal(s.ops->draft_more(&s, &q), 0); /* not seen yet: the table as it is */
    q.sps_scale = 1;
    assert_int_equal(s.ops->draft_more(&s, &q), 0);
    q.sps_scale = 5.9;
    assert_int_equal(s.ops->draft_more(&s, &q), 0);
    q.sps_scale = 6.1;
    assert_int_equal(s.ops->draft_more(&s, &q), 1);
    scheduler_close(&s);
    assert_int_equal(open_cfg(&s, "greedy", "{\"draft_cost\": 0.5}"), 0);
    q.draft_s = 0, q.sps_scale = 8;
    assert_int_equal(s.ops->draft_more(&s, &q), 0);
    scheduler_close(&s);
    sps_free(&sps);
}

/* Algorithm 1 by hand: a tree's candidates are its nodes' own path probabilities, a chain's the
 * products of its conditionals, and the search stops at the first admission that lowers Theta,
 * even where a longer prefix would pay (that dip is where stopping is lossless and searching every
 * prefix, "retrospective", is not) */
static void test_greedy_by_hand(void **state) {
    (void)state;
    sps_table sps;
    int B[5] = {1, 2, 3, 4, 5};
    double steps[5] = {1, 0.9, 0.8, 0.7, 0.6};
    assert_int_equal(sps_from_arrays(&sps, B, steps, 5), 0);
    scheduler s, r;
    assert_int_equal(open_cfg(&s, "greedy", NULL), 0);
    int nd[1] = {4}, tree[1] = {1}, len[1];
    float conf[5] = {0.9f, 0.2f, 0.8f, 0.1f, 0.0f};
    /* a tree: 0.9 (node 1) and 0.8 (node 3) pay (Theta 1.71, 2.16), 0.2 would lower it (2.03): nodes
     * 1..3 verified, node 2 with them (a prefix is a tree) */
    sched_batch b = {1, 5, nd, conf, &sps, NULL, tree};
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 3);
    /* the same numbers as a chain's conditionals: a = 0.9, 0.18, ...: only the first pays */
    b.tree = NULL;
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    assert_int_equal(len[0], 1);
    /* a dip: one draft halves the speed for 0.9 tokens (Theta 0.95 < 1), two earn 1.355 at the same
     * speed; greedy stops at the dip, the retrospective control takes both */
    sps_free(&sps);
    double dip[3] = {1, 0.5, 0.5};
    assert_int_equal(sps_from_arrays(&sps, B, dip, 3), 0);
    float c2[2] = {0.9f, 0.9f};
    int nd2[1] = {2};
    sched_batch b2 = {1, 2, nd2, c2, &sps, NULL, NULL};
    assert_int_equal(s.ops->schedule(&s, &b2, len), 0);
    assert_int_equal(len[0], 0);
    assert_int_equal(open_cfg(&r, "retrospective", NULL), 0);
    assert_int_equal(r.ops->schedule(&r, &b2, len), 0);
    assert_int_equal(len[0], 2);
    scheduler_close(&r);
    scheduler_close(&s);
    sps_free(&sps);
}

static void test_bad_settings(void **state) {
    (void)state;
    scheduler s;
    assert_int_equal(open_cfg(&s, "bandit-ucb1", "{\"clok\": \"model\"}"), -1);
    assert_non_null(strstr(ds_errmsg(), "clok"));
    assert_int_equal(open_cfg(&s, "bandit-thompson", "{\"clock\": \"sundial\"}"), -1);
    assert_non_null(strstr(ds_errmsg(), "'sundial' is not a clock"));
    assert_int_equal(open_cfg(&s, "bandit-ucb1", "{\"arms\": [1, 2.5]}"), -1);
    assert_non_null(strstr(ds_errmsg(), "arms[1]"));
    assert_int_equal(open_cfg(&s, "bandit-ucb1", "{\"arms\": [3]}"), -1);
    assert_int_equal(open_cfg(&s, "async-topk", "{\"delay\": 0}"), -1); /* delay 0 is the control */
    assert_non_null(strstr(ds_errmsg(), "delay"));
    assert_int_equal(open_cfg(&s, "async-topk", "{\"delay\": 16}"), -1); /* past its ring of 16 rounds */
    assert_non_null(strstr(ds_errmsg(), "delay"));
    assert_int_equal(open_cfg(&s, "async-topk", "{\"delay\": 15, \"initial\": -1}"), 0);
    scheduler_close(&s);
    assert_int_equal(open_cfg(&s, "async-topk", "{\"initial\": -2}"), -1);
    assert_non_null(strstr(ds_errmsg(), "initial"));
    assert_int_equal(open_cfg(&s, "async-topk", "{\"delay\": 2, \"bogus\": 1}"), -1);
    assert_non_null(strstr(ds_errmsg(), "bogus"));
    assert_int_equal(open_cfg(&s, "hedge", "{\"eta\": -1}"), -1);
    assert_non_null(strstr(ds_errmsg(), "eta"));
    /* the bandit on the model clock without an SPS table: an error, not a division by zero */
    assert_int_equal(open_cfg(&s, "bandit-ucb1", "{\"clock\": \"model\"}"), 0);
    int nd[1] = {3}, len[1], acc[1] = {0}, emit[1] = {1};
    sched_batch b = {1, 3, nd, NULL, NULL, NULL};
    assert_int_equal(s.ops->schedule(&s, &b, len), 0);
    round_result rr = {1, 3, NULL, nd, len, acc, emit, NULL, 1 + len[0], 0.01, 0, NULL};
    assert_int_equal(s.ops->observe(&s, &rr), -1);
    assert_non_null(strstr(ds_errmsg(), "needs an SPS table"));
    scheduler_close(&s);
}

/* an SPS table file (bench-target --out, run --sps): every entry read as written or refused with the
 * entry named; a B of 2.7 was read as 2 and a time of 1e999 (infinity) priced every forward at zero */
static int sps_json(sps_table *t, const char *json) {
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    int rc = sps_from_json(t, j, "sps.json");
    cJSON_Delete(j);
    return rc;
}

static void test_sps_table_file(void **state) {
    (void)state;
    sps_table t;
    assert_int_equal(sps_json(&t, "{\"sps\": {\"B\": [1, 4, 8], \"seconds\": [0.05, 0.06, 0.08]}}"), 0);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.B[1], 4);
    assert_true(fabs(sps_seconds(&t, 6) - 0.07) < 1e-12);
    sps_free(&t);
    const char *bad[][2] = {
        {"{\"sps\": {\"B\": [1, 2.7], \"seconds\": [0.05, 0.06]}}", "entry 1"},
        {"{\"sps\": {\"B\": [1, 4], \"seconds\": [0.05, 1e999]}}", "entry 1"},
        {"{\"sps\": {\"B\": [1, 4], \"seconds\": [0.05, \"0.06\"]}}", "entry 1"},
        {"{\"sps\": {\"B\": [0, 4], \"seconds\": [0.05, 0.06]}}", "entry 0"},
        {"{\"sps\": {\"B\": [1e30], \"seconds\": [0.05]}}", "entry 0"},
        {"{\"sps\": {\"B\": [4, 2], \"seconds\": [0.05, 0.06]}}", "entry 1"},
        {"{\"sps\": {\"B\": [1, 2], \"seconds\": [0.05, -1]}}", "entry 1"},
        {"{\"sps\": {\"B\": [1, 2], \"seconds\": [1e-310, 0.06]}}", "entry 0"},
        {"{\"sps\": {\"B\": [1, 2], \"seconds\": [0.05]}}", "equal non-zero length"},
        {"{\"sps\": {\"B\": [], \"seconds\": []}}", "equal non-zero length"},
        {"{\"B\": [1], \"seconds\": [0.05]}", "needs \"sps\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sps_json(&t, bad[i][0]), -1);
        if (!strstr(ds_errmsg(), bad[i][1]) || !strstr(ds_errmsg(), "sps.json")) fail_msg("%s: %s", bad[i][0], ds_errmsg());
        assert_null(t.B);
    }
    /* interpolation: inside each segment, at the knots, past the last point (the last segment's line),
     * below zero on a falling table (the first time, never a free step), a one-entry table (linear in
     * B from the origin), an empty one (no cost) */
    assert_int_equal(sps_json(&t, "{\"sps\": {\"B\": [1, 4, 8], \"seconds\": [0.05, 0.06, 0.08]}}"), 0);
    const int at[6] = {1, 3, 4, 6, 8, 16};
    const double want[6] = {0.05, 0.05 + 0.01 * 2 / 3, 0.06, 0.07, 0.08, 0.12};
    for (int i = 0; i < 6; i++)
        if (fabs(sps_seconds(&t, at[i]) - want[i]) > 1e-12) fail_msg("B = %d: %.9f s, want %.9f", at[i], sps_seconds(&t, at[i]), want[i]);
    sps_free(&t);
    assert_int_equal(sps_json(&t, "{\"sps\": {\"B\": [1, 2], \"seconds\": [0.05, 0.01]}}"), 0);
    assert_true(fabs(sps_seconds(&t, 10) - 0.05) < 1e-12);
    sps_free(&t);
    assert_int_equal(sps_json(&t, "{\"sps\": {\"B\": [2], \"seconds\": [0.04]}}"), 0);
    assert_true(fabs(sps_seconds(&t, 1) - 0.02) < 1e-12 && fabs(sps_seconds(&t, 6) - 0.12) < 1e-12);
    sps_free(&t);
    assert_true(sps_seconds(&t, 4) == 0 && sps_seconds(NULL, 4) == 0);
    /* a repeated B would make a segment of zero width (a slope of infinity) */
    assert_int_equal(sps_json(&t, "{\"sps\": {\"B\": [1, 4, 4], \"seconds\": [0.05, 0.06, 0.07]}}"), -1);
    assert_non_null(strstr(ds_errmsg(), "entry 2"));
    /* the arrays' form too: a rate so small its time is infinite; no entry at all; one entry (what `run`
     * uses without an SPS file) */
    int B[2] = {1, 2};
    double steps[2] = {10, 1e-320};
    assert_int_equal(sps_from_arrays(&t, B, steps, 2), -1);
    assert_int_equal(sps_from_arrays(&t, B, steps, 0), -1);
    assert_int_equal(sps_from_arrays(&t, B, steps, 1), 0);
    assert_true(fabs(sps_seconds(&t, 3) - 0.3) < 1e-12);
    sps_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sps_table_file),
        cmocka_unit_test(test_async_topk_by_hand),
        cmocka_unit_test(test_bandits_find_the_best_length),
        cmocka_unit_test(test_hedge_by_hand),
        cmocka_unit_test(test_ucb_by_hand),
        cmocka_unit_test(test_thompson_by_hand),
        cmocka_unit_test(test_registry_roles),
        cmocka_unit_test(test_hedge_under_exp_range),
        cmocka_unit_test(test_hedge_per_request),
        cmocka_unit_test(test_hedge_charges_batch_time),
        cmocka_unit_test(test_req_table),
        cmocka_unit_test(test_greedy_prices_at_measured_speed),
        cmocka_unit_test(test_greedy_by_hand),
        cmocka_unit_test(test_bad_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
