/* test_calib — the calibration metrics against hand-computed examples, and Sequential Temperature
 * Scaling recovering known temperatures from synthetic miscalibrated confidences. */
#include "testutil.h"

#include <cJSON.h>

#include "../calib/calib.h"
#include "../engine/trace.h"

static void test_ece_by_hand(void **state) {
    (void)state;
    /* one score per bin: (|0.1-0| + |0.2-1| + |0.8-1| + |0.9-1|) / 4 = 0.3 */
    double p[] = {0.1, 0.2, 0.8, 0.9};
    int y[] = {0, 1, 1, 1};
    assert_true(fabs(calib_ece(p, y, 4, 15) - 0.3) < 1e-12);
    /* two scores sharing bin 9 of 15 (0.6 <= p < 0.6667): |0.63 - 0.5| */
    double p2[] = {0.61, 0.65};
    int y2[] = {1, 0};
    assert_true(fabs(calib_ece(p2, y2, 2, 15) - 0.13) < 1e-12);
    /* p = 1 belongs to the last bin, not past it */
    double p3[] = {1.0};
    int y3[] = {1};
    assert_true(calib_ece(p3, y3, 1, 15) == 0.0);
    assert_true(isnan(calib_ece(p3, y3, 0, 15)));
    double p4[] = {0.1, 0.9};
    int y4[] = {0, 1};
    assert_true(fabs(calib_brier(p4, y4, 2) - 0.01) < 1e-12);
    /* NLL (the default fit objective, only ever compared): -(log 0.9 + log 0.9) / 2, and one of a single score */
    assert_true(fabs(calib_nll(p4, y4, 2) + log(0.9)) < 1e-12);
    double p5[] = {0.25};
    int y5[] = {0};
    assert_true(fabs(calib_nll(p5, y5, 1) + log(0.75)) < 1e-12);
    assert_true(isnan(calib_nll(p5, y5, 0)));
}

static void test_auc_by_hand(void **state) {
    (void)state;
    /* positives 0.35, 0.8 against negatives 0.1, 0.4: 3 of 4 pairs ordered right */
    double s[] = {0.1, 0.4, 0.35, 0.8};
    int y[] = {0, 0, 1, 1};
    assert_true(fabs(calib_auc(s, y, 4) - 0.75) < 1e-12);
    double t[] = {0.5, 0.5, 0.2};
    int yt[] = {1, 0, 0}; /* the tie counts one half: (0.5 + 1) / 2 */
    assert_true(fabs(calib_auc(t, yt, 3) - 0.75) < 1e-12);
    int all[] = {1, 1, 1, 1};
    assert_true(isnan(calib_auc(s, all, 4)));
}

/* Rounds whose true conditional acceptance q_k is reported as c_k = sigmoid(T*_k logit(q_k)):
 * scaling logit(c_k) by 1/T_k recovers q_k exactly when T_k = T*_k. */
static void test_sts_recovers_temperatures(void **state) {
    (void)state;
    enum { R = 30000, G = 3 };
    const float Tstar[G] = {0.5f, 2.0f, 1.4f};
    calib_round *rounds = calloc(R, sizeof *rounds);
    rng_t rng;
    rng_seed(&rng, 42);
    for (long i = 0; i < R; i++) {
        calib_round *r = &rounds[i];
        r->G = G;
        int alive = 1;
        for (int k = 0; k < G; k++) {
            double q = 0.05 + 0.9 * rng_uniform(&rng), l = log(q / (1 - q));
            r->c[k] = (float)(1 / (1 + exp(-Tstar[k] * l)));
            alive = alive && rng_uniform(&rng) < q;
            r->survived[k] = alive;
        }
    }
    double grid[200];
    int ng = calib_default_grid(grid, 200);
    calib_sts fit;
    assert_int_equal(calib_sts_fit(rounds, R, G, grid, ng, 100, CALIB_NLL, &fit), 0);
    for (int k = 0; k < G; k++) {
        fprintf(stderr, "position %d: T* %.2f fitted %.3f, ECE %.4f -> %.4f (n %ld)\n", k + 1, Tstar[k], fit.T[k],
                fit.ece_before[k], fit.ece_after[k], fit.n[k]);
        assert_true(fabs(fit.T[k] - Tstar[k]) < 0.15 * Tstar[k]);
        assert_true(fit.ece_after[k] < fit.ece_before[k]);
        assert_true(fit.ece_after[k] < 0.02);
        /* each position's ECEs are that position's, recomputed on its own (an off-by-one slot left
         * position 1's at 0, which "below 0.02" passed) */
        float ones[CALIB_MAX_G];
        for (int i = 0; i < CALIB_MAX_G; i++) ones[i] = 1.0f;
        assert_true(fit.ece_after[k] == calib_sts_eval(rounds, R, k + 1, fit.T).ece);
        assert_true(fit.ece_before[k] == calib_sts_eval(rounds, R, k + 1, ones).ece);
    }
    /* the grid: 0.05 to 20, geometric */
    assert_true(fabs(grid[0] - 0.05) < 1e-15 && fabs(grid[ng - 1] - 20) < 1e-12);
    for (int g = 1; g < ng - 1; g++) assert_true(fabs(grid[g] * grid[g] / (grid[g - 1] * grid[g + 1]) - 1) < 1e-12);
    /* unknown outcomes (-1) are left out; a sparse position keeps T = 1 */
    for (long i = 0; i < R; i++) rounds[i].survived[2] = i < 50 ? rounds[i].survived[2] : -1;
    /* the paper's ECE criterion on the same data: position 1's scores spread around the base rate,
     * and the ECE minimum is the flattest curve on the grid, not T* (why NLL is the default) */
    calib_sts fe;
    assert_int_equal(calib_sts_fit(rounds, R, 1, grid, ng, 100, CALIB_ECE, &fe), 0);
    fprintf(stderr, "ECE criterion, position 1: T* %.2f fitted %.3f\n", Tstar[0], fe.T[0]);
    assert_true(fe.T[0] > 4 * Tstar[0]);
    assert_int_equal(calib_sts_fit(rounds, R, G, grid, ng, 100, CALIB_NLL, &fit), 0);
    assert_int_equal(fit.n[2], 50);
    assert_true(fit.T[2] == 1.0f);
    assert_int_equal(calib_sts_fit(rounds, R, 0, grid, ng, 100, CALIB_NLL, &fit), -1);
    free(rounds);
}

/* `calibrate` end to end: a trace whose raw confidences are miscalibrated by known temperatures,
 * a checkpoint's config.json; the command writes temperatures near them, keeps the other keys,
 * and refuses a trace without confidences and an unknown objective */
static void test_calibrate_command(void **state) {
    (void)state;
    const char *bin = getenv("DSPARK_BIN");
    if (!bin) {
        fprintf(stderr, "DSPARK_BIN not set (make test sets it): skipped\n");
        return;
    }
    char dir[256], trace_path[300], cfg_path[300], cmd[1200];
    snprintf(dir, sizeof dir, "/tmp/dsb-%d-calib-ckpt", (int)getpid());
    snprintf(trace_path, sizeof trace_path, "/tmp/dsb-%d-calib.h5", (int)getpid());
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    assert_int_equal(ds_mkdirs(dir, "checkpoint"), 0);
    const char *ck = "{\"kind\": \"dspark-markov\", \"gamma\": 3}";
    assert_int_equal(ds_write_file_atomic(cfg_path, ck, strlen(ck)), 0);
    trace *t = trace_create(trace_path);
    assert_non_null(t);
    char conf[512];
    snprintf(conf, sizeof conf, "{\"drafter\": {\"name\": \"dspark-markov\", \"checkpoint\": \"%s\"}}", dir);
    assert_int_equal(trace_attr(t, "config", conf), 0);
    const float Tstar[3] = {0.6f, 1.8f, 1.0f};
    rng_t rng;
    rng_seed(&rng, 7);
    for (int req = 0; req < 400; req++)
        for (int round = 0; round < 20; round++) {
            int alive = 1;
            for (int k = 0; k < 3; k++) {
                double q = 0.05 + 0.9 * rng_uniform(&rng), l = log(q / (1 - q));
                float c = (float)(1 / (1 + exp(-Tstar[k] * l)));
                alive = alive && rng_uniform(&rng) < q;
                trace_conf tc = {req, round, k + 1, c, c, NAN, alive};
                assert_int_equal(trace_add_conf(t, &tc), 0);
            }
        }
    assert_int_equal(trace_close(t), 0);
    snprintf(cmd, sizeof cmd, "%s calibrate %s > /dev/null", bin, trace_path);
    assert_int_equal(system(cmd), 0);
    cJSON *j = ds_read_json(cfg_path);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "kind")->valuestring, "dspark-markov");
    const cJSON *cal = cJSON_GetObjectItem(j, "calibration");
    assert_int_equal(cJSON_GetArraySize(cal), 3);
    for (int k = 0; k < 3; k++) {
        double T = cJSON_GetArrayItem(cal, k)->valuedouble;
        fprintf(stderr, "calibrate: position %d T* %.2f written %.3f\n", k + 1, Tstar[k], T);
        assert_true(fabs(T - Tstar[k]) < 0.15 * Tstar[k]);
    }
    cJSON_Delete(j);
    snprintf(cmd, sizeof cmd, "%s calibrate %s --objective brier 2> /dev/null", bin, trace_path);
    assert_int_not_equal(system(cmd), 0);
    /* another family's checkpoint (--checkpoint): refused, its config.json untouched (it was rewritten
     * with the dspark-markov head's temperatures before) */
    char dir2[256], cfg2[300];
    snprintf(dir2, sizeof dir2, "/tmp/dsb-%d-calib-ckpt2", (int)getpid());
    snprintf(cfg2, sizeof cfg2, "%s/config.json", dir2);
    assert_int_equal(ds_mkdirs(dir2, "checkpoint"), 0);
    const char *ck2 = "{\"kind\": \"medusa\", \"heads\": 3}";
    assert_int_equal(ds_write_file_atomic(cfg2, ck2, strlen(ck2)), 0);
    snprintf(cmd, sizeof cmd, "%s calibrate %s --checkpoint %s > /dev/null 2> %s.err", bin, trace_path, dir2, cfg2);
    assert_int_not_equal(system(cmd), 0);
    char errp[320], *err, *after;
    size_t n;
    snprintf(errp, sizeof errp, "%s.err", cfg2);
    assert_int_equal(ds_read_file(errp, &err, &n), 0);
    assert_non_null(strstr(err, "the trace ran drafter 'dspark-markov'"));
    assert_non_null(strstr(err, "is a 'medusa' checkpoint"));
    free(err);
    assert_int_equal(ds_read_file(cfg2, &after, &n), 0);
    assert_string_equal(after, ck2);
    free(after);
    remove(errp);
    remove(cfg2);
    rmdir(dir2);
    remove(trace_path);
    remove(cfg_path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ece_by_hand),
        cmocka_unit_test(test_auc_by_hand),
        cmocka_unit_test(test_sts_recovers_temperatures),
        cmocka_unit_test(test_calibrate_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
