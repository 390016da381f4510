/* test_trace — HDF5 traces: rows written are the rows read back (by our reader and by h5dump, an
 * independent one), the file only appears under its name when complete, and the report's metrics
 * match hand-computed values on a synthetic trace. */
#include "testutil.h"

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/wait.h>

#include "../engine/metrics.h"
#include "../engine/trace.h"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* a small run: two requests (AR and spec each), known rounds */
static void write_synthetic(trace *t) {
    assert_int_equal(trace_attr(t, "config", "{\"temperature\": 0, \"gamma\": 3}"), 0);
    assert_int_equal(trace_attr(t, "target_fingerprint", "abcd"), 0);
    assert_int_equal(trace_attr_u64(t, "seed", 42), 0);
    /* request 0 (gsm8k, math): spec rounds (verified, accepted, emitted) = (3,3,4), (3,1,2), (3,0,1) */
    int rounds0[3][3] = {{3, 3, 4}, {3, 1, 2}, {3, 0, 1}};
    /* request 2 (mtbench, chat): (3,2,3), (2,2,3) */
    int rounds2[2][3] = {{3, 2, 3}, {2, 2, 3}};
    for (int i = 0; i < 3; i++) {
        trace_round r = {0, i, MODE_SPEC, 3, rounds0[i][0], rounds0[i][1], rounds0[i][2], 4, 100, 10, 900};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    for (int i = 0; i < 2; i++) {
        trace_round r = {2, i, MODE_SPEC, 3, rounds2[i][0], rounds2[i][1], rounds2[i][2], 4, 100, 10, 900};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    for (int i = 0; i < 8; i++) { /* the AR baseline's rounds: one token each */
        trace_round r = {i < 4 ? 0 : 2, i % 4, MODE_AR, 0, 0, 0, 1, 1, 0, 0, 500};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    trace_request q[4] = {
        {0, MODE_AR, "gsm8k", "math", 5, 30, 8, 7, 2.0, 111},  {0, MODE_SPEC, "gsm8k", "math", 5, 30, 8, 3, 1.0, 111},
        {2, MODE_AR, "mtbench", "chat", 7, 40, 7, 6, 1.5, 222}, {2, MODE_SPEC, "mtbench", "chat", 7, 40, 7, 2, 1.5, 999},
    };
    for (int i = 0; i < 4; i++) assert_int_equal(trace_add_request(t, &q[i]), 0);
    trace_position p = {1, 5, 4};
    assert_int_equal(trace_add_position(t, &p), 0);
    trace_conf c = {0, 0, 1, NAN, NAN, 0.75f, 1};
    assert_int_equal(trace_add_conf(t, &c), 0);
    trace_lossless l = {"exact V=4", "exact-tv", 0, 1e-17, NAN, 0, 1};
    assert_int_equal(trace_add_lossless(t, &l), 0);
}

static void test_roundtrip_and_tmp(void **state) {
    (void)state;
    const char *path = tmp_path("trace.h5");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    remove(path);
    trace *t = trace_create(path);
    assert_non_null(t);
    write_synthetic(t);
    /* until closed, only PATH.<pid>.tmp exists: an interrupted run never looks complete */
    assert_false(exists(path));
    assert_true(exists(tmp));
    assert_int_equal(trace_close(t), 0);
    assert_true(exists(path));
    assert_false(exists(tmp));
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    assert_int_equal(d.n_rounds, 13);
    assert_int_equal(d.n_requests, 4);
    assert_int_equal(d.n_positions, 1);
    assert_int_equal(d.n_conf, 1);
    assert_int_equal(d.n_lossless, 1);
    assert_string_equal(d.requests[3].dataset, "mtbench");
    assert_string_equal(d.requests[2].domain, "chat");
    assert_int_equal(d.requests[3].output_hash, 999);
    assert_int_equal(d.rounds[1].accepted, 1);
    assert_float_equal(d.rounds[0].t_verify_us, 900, 0);
    assert_float_equal(d.conf[0].c_star, 0.75, 0);
    assert_true(isnan(d.conf[0].c_raw));
    assert_string_equal(d.target_fingerprint, "abcd");
    assert_non_null(strstr(d.config, "\"gamma\": 3"));
    assert_string_equal(d.lossless[0].test, "exact V=4");
    trace_data_free(&d);

    /* an independent reader: h5dump from hdf5-tools */
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "h5dump -d /requests '%s' 2>&1", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    if (WEXITSTATUS(st) == 127 || strstr(out, "not found")) fail_msg("h5dump missing (make deps installs hdf5-tools)");
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_non_null(strstr(out, "\"mtbench\""));
    assert_non_null(strstr(out, "\"gsm8k\""));
    assert_non_null(strstr(out, "999"));
    assert_non_null(strstr(out, "H5T_STD_I64LE \"output_hash\""));
    snprintf(cmd, sizeof cmd, "h5dump -a /seed '%s' 2>&1", path);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    assert_non_null(strstr(out, "42"));
    remove(path);
}

static void test_abort_and_errors(void **state) {
    (void)state;
    const char *path = tmp_path("aborted.h5");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    trace *t = trace_create(path);
    assert_non_null(t);
    trace_round r = {0};
    assert_int_equal(trace_add_round(t, &r), 0);
    trace_abort(t);
    assert_false(exists(path));
    assert_false(exists(tmp));
    /* unwritable location, missing and non-HDF5 files */
    assert_null(trace_create("/nonexistent-dir/x.h5"));
    assert_non_null(strstr(ds_errmsg(), "cannot create the trace file"));
    trace_data d;
    assert_int_equal(trace_read("/nonexistent/x.h5", &d), -1);
    assert_non_null(strstr(ds_errmsg(), "no such file"));
    const char *txt = tmp_path("plain.h5");
    write_file(txt, "not hdf5", 8);
    assert_int_equal(trace_read(txt, &d), -1);
    assert_non_null(strstr(ds_errmsg(), "not an HDF5 trace"));
    remove(txt);
}

/* Issue 11 (1, 2, 10): what happens to finished work when the end goes wrong. Each part fails on
 * d965422: there the second writer's cleanup unlinked the first one's PATH.tmp, a failed rename
 * deleted the finished trace, and a directory as PATH was only found after the whole run. */
static void test_ownership_and_failed_close(void **state) {
    (void)state;
    const char *path = tmp_path("shared.h5");
    remove(path);
    /* two writers on one PATH: each has its own temporary; aborting one leaves the other intact */
    trace *a = trace_create(path);
    assert_non_null(a);
    write_synthetic(a);
    trace *b = trace_create(path);
    if (b) { /* one process: the same pid, so the exclusive create refuses the second */
        trace_abort(b);
        fail_msg("a second trace on the same PATH.<pid>.tmp was created");
    }
    assert_non_null(strstr(ds_errmsg(), "cannot create the trace file"));
    assert_int_equal(trace_close(a), 0); /* b's failure removed nothing of a's */
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    assert_int_equal(d.n_requests, 4);
    trace_data_free(&d);
    /* PATH is a directory from the start: refused before anything is run */
    const char *dir = tmp_path("dir.h5");
    mkdir(dir, 0755);
    assert_null(trace_create(dir));
    assert_non_null(strstr(ds_errmsg(), "is a directory"));
    /* PATH became a directory while the run was going: the complete trace is kept, and said so */
    rmdir(dir);
    trace *c = trace_create(dir);
    assert_non_null(c);
    write_synthetic(c);
    mkdir(dir, 0755);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", dir, (int)getpid());
    assert_int_equal(trace_close(c), -1);
    assert_non_null(strstr(ds_errmsg(), "the complete trace is kept at"));
    assert_true(exists(tmp));
    assert_int_equal(trace_read(tmp, &d), 0); /* it is complete */
    assert_int_equal(d.n_requests, 4);
    trace_data_free(&d);
    remove(tmp);
    rmdir(dir);
    remove(path);
}

/* a trace file without its completion mark (a run killed mid-write) is refused, not read as empty */
static void test_incomplete_refused(void **state) {
    (void)state;
    const char *path = tmp_path("partial.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    H5Fclose(f);
    trace_data d;
    assert_int_equal(trace_read(path, &d), -1);
    assert_non_null(strstr(ds_errmsg(), "incomplete trace"));
    remove(path);
}

/* a table of another rank than 1 (a damaged or foreign file; found by fuzz_trace seeded with a run's
 * trace): the reader sized its rows by the first extent and HDF5 wrote all of them, past the buffer */
static void test_table_rank_refused(void **state) {
    (void)state;
    const char *path = tmp_path("rank2.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t st = H5Tcopy(H5T_C_S1), as = H5Screate(H5S_SCALAR);
    H5Tset_size(st, 4);
    hid_t a = H5Acreate2(f, "complete", st, as, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0 && H5Awrite(a, st, "yes") >= 0);
    H5Aclose(a), H5Sclose(as), H5Tclose(st);
    hsize_t dims[2] = {2, 3};
    int v[6] = {0};
    hid_t sp = H5Screate_simple(2, dims, NULL), d = H5Dcreate2(f, "rounds", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0 && H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d), H5Sclose(sp), H5Fclose(f);
    trace_data td;
    assert_int_equal(trace_read(path, &td), -1);
    if (!strstr(ds_errmsg(), "table 'rounds' has 2 dimensions, not 1")) fail_msg("%s", ds_errmsg());
    remove(path);
}

/* report on a trace whose recorded config is not a run's (lossless --out writes one): it read
 * config fields without checking them and crashed (found by fuzz_trace) */
static void test_report_other_config(void **state) {
    (void)state;
    const char *bin = getenv("DSPARK_BIN");
    if (!bin || !*bin) skip();
    const char *path = tmp_path("gate-trace.h5");
    remove(path);
    trace *t = trace_create(path);
    assert_non_null(t);
    write_synthetic(t); /* its config has gamma and temperature only, like a lossless trace's few keys */
    assert_int_equal(trace_close(t), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s report %s > /dev/null 2>&1", bin, path);
    int st = system(cmd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    remove(path);
}

/* metric definitions on the synthetic trace, computed by hand */
static void test_metrics(void **state) {
    (void)state;
    const char *path = tmp_path("metrics.h5");
    trace *t = trace_create(path);
    write_synthetic(t);
    assert_int_equal(trace_close(t), 0);
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    metrics m;
    assert_int_equal(metrics_compute(&d, "", &m), 0);
    /* 5 spec rounds emitting 4+2+1+3+3 = 13 */
    assert_int_equal(m.rounds, 5);
    assert_float_equal(m.tau, 13.0 / 5, 1e-12);
    /* per request: (4+2+1)/3 and (3+3)/2 */
    assert_float_equal(m.tau_macro, ((7.0 / 3) + 3.0) / 2, 1e-12);
    /* accepted 3+1+0+2+2 = 8 of verified 3+3+3+3+2 = 14 */
    assert_float_equal(m.accept_rate, 8.0 / 14, 1e-12);
    /* conditional at k: rounds verifying k with 1..k-1 accepted; accepted at k
     * k=1: all 5 attempted, accepted in rounds with acc>=1: 4       -> 4/5
     * k=2: attempted where acc>=1 and verified>=2: 4; acc>=2: 3    -> 3/4
     * k=3: attempted where acc>=2 and verified>=3: 2 (3,3,4),(3,2,3); acc>=3: 1 -> 1/2 */
    assert_int_equal(m.att[1], 5);
    assert_int_equal(m.acc[1], 4);
    assert_int_equal(m.att[2], 4);
    assert_int_equal(m.acc[2], 3);
    assert_int_equal(m.att[3], 2);
    assert_int_equal(m.acc[3], 1);
    /* unconditional at 3: rounds accepting >= 3 / rounds verifying >= 3: 1/4 */
    assert_int_equal(m.ver_ge[3], 4);
    assert_int_equal(m.acc_ge[3], 1);
    /* speedup = AR wall / spec wall at the AR's lengths: this synthetic's AR rounds emit 8 tokens where
     * the spec rounds emit 13 (5 rounds of 1.01 ms), so the spec's 2.5 s are taken as its non-decode
     * time plus 8 tokens at its decode rate; one of two outputs identical */
    assert_float_equal(m.speedup, 3.5 / (2.5 - 5 * 1.01e-3 + 8 * (5 * 1.01e-3) / 13), 1e-9);
    assert_int_equal(m.n_pairs, 2);
    assert_int_equal(m.identical, 1);
    assert_float_equal(m.ar_tok_s, 15 / 3.5, 1e-12);
    /* groups */
    assert_int_equal(metrics_compute(&d, "domain:chat", &m), 0);
    assert_int_equal(m.rounds, 2);
    assert_float_equal(m.tau, 3.0, 1e-12);
    assert_int_equal(metrics_compute(&d, "dataset:gsm8k", &m), 0);
    assert_float_equal(m.tau, 7.0 / 3, 1e-12);
    assert_float_equal(m.speedup, 2.0 / (1.0 - 3 * 1.01e-3 + 4 * (3 * 1.01e-3) / 7), 1e-9);
    trace_data_free(&d);
    remove(path);
}

/* At T > 0 the modes sample outputs of different lengths. Decode: 19 tokens in 5 rounds of 0.2 s
 * against 9 in 9 of 0.1 s. Wall: the spec request (20 tokens in 2 s, 1 s of it prefill) takes, at the AR
 * request's 9 decoded tokens, 1 + 9 / 19 s against its 2 s - not even (the ratio of times), not 2x (the
 * ratio of wall tokens/s, which spreads the same prefill over twice the tokens). */
static void test_metrics_rates(void **state) {
    (void)state;
    const char *path = tmp_path("rates.h5");
    trace *t = trace_create(path);
    assert_non_null(t);
    assert_int_equal(trace_attr(t, "config", "{\"temperature\": 1, \"gamma\": 4}"), 0);
    int emit[5] = {5, 4, 4, 3, 3};
    for (int i = 0; i < 5; i++) {
        trace_round r = {0, i, MODE_SPEC, 4, 4, emit[i] - 1, emit[i], 5, 50000, 0, 150000};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    for (int i = 0; i < 9; i++) {
        trace_round r = {0, i, MODE_AR, 0, 0, 0, 1, 1, 0, 0, 100000};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    trace_request q[2] = {{0, MODE_AR, "mtbench", "chat", 0, 30, 10, 9, 2.0, 1},
                          {0, MODE_SPEC, "mtbench", "chat", 0, 30, 20, 5, 2.0, 2}};
    for (int i = 0; i < 2; i++) assert_int_equal(trace_add_request(t, &q[i]), 0);
    assert_int_equal(trace_close(t), 0);
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    metrics m;
    assert_int_equal(metrics_compute(&d, "", &m), 0);
    assert_float_equal(m.speedup, 2.0 / (1.0 + 9.0 / 19.0), 1e-9);
    assert_float_equal(m.decode_speedup, (19.0 / 1.0) / (9.0 / 0.9), 1e-9);
    trace_data_free(&d);
    remove(path);
}

/* What test_metrics' symmetric data could not see (a mutation round on metrics.c: 67 of 134 edits
 * passed): identical outputs counted inverted (1 of 2 either way), the prompt count, c* by position
 * (NaN rows and rows past METRICS_MAX_POS skipped, position 64 kept), the AR decode time's three parts,
 * an empty group's zeros, the per-request tau of the table's first row, a request id of 2e9 (the old
 * index allocated 32 GB for it) and the speedups' guards. */
static void test_metrics_counts(void **state) {
    (void)state;
    const char *path = tmp_path("counts.h5");
    trace *t = trace_create(path);
    assert_non_null(t);
    assert_int_equal(trace_attr(t, "config", "{\"temperature\": 0, \"gamma\": 2}"), 0);
    const int ids[4] = {0, 1, 2, 2000000000};
    const int acc[4] = {2, 2, 0, 1};
    for (int i = 0; i < 4; i++) { /* one spec round each: verified 2, emitted 3, 3, 1, 2 */
        trace_round r = {ids[i], 0, MODE_SPEC, 2, 2, acc[i], acc[i] + 1, 3, 100, 0, 900};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    for (int i = 0; i < 2; i++) { /* request 0's AR rounds: 100 + 200 + 700 us each */
        trace_round r = {0, i, MODE_AR, 0, 0, 0, 1, 1, 100, 200, 700};
        assert_int_equal(trace_add_round(t, &r), 0);
    }
    /* pairs 0, 1 identical, 2 not, 2e9 without an AR row */
    trace_request q[7] = {{0, MODE_SPEC, "a", "x", 0, 10, 2, 1, 0.5, 5},   {0, MODE_AR, "a", "x", 0, 10, 2, 2, 1.0, 5},
                          {1, MODE_AR, "a", "x", 1, 10, 2, 2, 1.0, 7},     {1, MODE_SPEC, "a", "x", 1, 10, 2, 1, 0.5, 7},
                          {2, MODE_AR, "b", "x", 0, 10, 2, 2, 1.0, 8},     {2, MODE_SPEC, "b", "x", 0, 10, 2, 1, 0.5, 9},
                          {2000000000, MODE_SPEC, "b", "x", 1, 10, 2, 1, 0.5, 1}};
    for (int i = 0; i < 7; i++) assert_int_equal(trace_add_request(t, &q[i]), 0);
    trace_conf c[7] = {{0, 0, 1, NAN, NAN, 0.5f, 1},  {1, 0, 1, NAN, NAN, 0.25f, 1}, {2, 0, 2, NAN, NAN, 0.75f, 0},
                       {0, 0, 2, NAN, NAN, NAN, 0},   {2, 0, 65, NAN, NAN, 0.9f, 0}, {2, 0, 64, NAN, NAN, 1.0f, 0},
                       {9, 0, 1, NAN, NAN, 0.125f, 0}}; /* request 9 has no rows: skipped */
    for (int i = 0; i < 7; i++) assert_int_equal(trace_add_conf(t, &c[i]), 0);
    assert_int_equal(trace_close(t), 0);
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    metrics m;
    assert_int_equal(metrics_compute(&d, "", &m), 0);
    assert_int_equal(m.n_prompts, 4);
    assert_int_equal(m.n_pairs, 3);
    assert_int_equal(m.identical, 2);
    assert_int_equal(m.rounds, 4);
    assert_float_equal(m.tau_macro, (3 + 3 + 1 + 2) / 4.0, 1e-12); /* the first row's request counts too */
    assert_int_equal(m.cstar_n[1], 2);
    assert_float_equal(m.cstar_sum[1], 0.75, 1e-12);
    assert_int_equal(m.cstar_n[2], 1);
    assert_float_equal(m.cstar_sum[2], 0.75, 1e-12);
    assert_int_equal(m.cstar_n[64], 1);
    assert_float_equal(m.ar_decode, 2e-3, 1e-12);
    assert_int_equal(m.ar_emitted, 2);
    assert_float_equal(m.ar_tok_s, 6 / 3.0, 1e-12);
    assert_int_equal(metrics_compute(&d, "dataset:b", &m), 0);
    assert_int_equal(m.n_prompts, 2);
    assert_int_equal(m.n_pairs, 1);
    assert_int_equal(m.identical, 0);
    assert_int_equal(m.cstar_n[1], 0);
    assert_int_equal(metrics_compute(&d, "dataset:none", &m), 0); /* an empty group: zeros, no NaN */
    assert_int_equal(m.n_prompts, 0);
    assert_true(m.tau == 0 && m.tau_macro == 0 && m.accept_rate == 0 && m.ar_tok_s == 0 && m.sp_tok_s == 0);
    assert_true(m.speedup == 0 && m.decode_speedup == 0);
    trace_data_free(&d);
    remove(path);
    /* the speedups where a side has nothing to divide by, and the non-decode time clamped at 0 */
    assert_true(speedup_wall(0, 1, 0.5, 4, 4) == 0 && speedup_wall(1, 0, 0.5, 4, 4) == 0);
    assert_float_equal(speedup_wall(3, 2, 0.5, 4, 0), 1.5, 1e-12);
    assert_float_equal(speedup_wall(3, 2, 0.5, 0, 4), 1.5, 1e-12);
    assert_float_equal(speedup_wall(3, 2, 0, 4, 4), 1.5, 1e-12);
    assert_float_equal(speedup_wall(3, 1, 1.5, 4, 4), 2.0, 1e-12);
    assert_true(speedup_decode(0, 1, 4, 4) == 0 && speedup_decode(1, 0, 4, 4) == 0 && speedup_decode(1, 1, 0, 4) == 0);
    assert_float_equal(speedup_decode(1, 1, 1, 3), 3.0, 1e-12);
}

/* A row no writer of this tool makes (a negative depth, a conf position of -100000: `report` wrote
 * out of bounds and crashed on them) is refused by the reader with the table, row and field named,
 * and `report` exits non-zero with that message. */
static void test_bad_rows_refused(void **state) {
    (void)state;
    const char *path = tmp_path("badrows.h5");
    static const char *want[] = {"table 'nodes' row 0: depth = -3000", "table 'nodes' row 0: rank = -1",
                                 "table 'confidence' row 0: position = -100000", "table 'confidence' row 0: survived = 2",
                                 "table 'rounds' row 0: accepted = 4", "table 'requests' row 1: mode = 7",
                                 "table 'positions' row 0: position = 0", "table 'requests' row 0: wall_s"};
    for (int what = 0; what < 8; what++) {
        trace *t = trace_create(path);
        assert_non_null(t);
        assert_int_equal(trace_attr(t, "config", "{\"temperature\": 0, \"gamma\": 3}"), 0);
        trace_round r = {0, 0, MODE_SPEC, 3, 3, what == 4 ? 4 : 1, 2, 4, 100, 10, 900};
        assert_int_equal(trace_add_round(t, &r), 0);
        trace_request q[2] = {{0, MODE_AR, "a", "x", 0, 30, 8, 7, what == 7 ? NAN : 2.0, 1},
                              {0, what == 5 ? 7 : MODE_SPEC, "a", "x", 0, 30, 8, 3, 1.0, 1}};
        assert_int_equal(trace_add_request(t, &q[0]), 0);
        assert_int_equal(trace_add_request(t, &q[1]), 0);
        trace_node n = {0, 0, 0, what == 0 ? -3000 : 1, what == 1 ? -1 : 0, 0.5f, 1, 0};
        assert_int_equal(trace_add_node(t, &n), 0);
        trace_conf c = {0, 0, what == 2 ? -100000 : 1, NAN, NAN, 0.5f, what == 3 ? 2 : 1};
        assert_int_equal(trace_add_conf(t, &c), 0);
        trace_position p = {what == 6 ? 0 : 1, 5, 4};
        assert_int_equal(trace_add_position(t, &p), 0);
        assert_int_equal(trace_close(t), 0);
        trace_data d;
        assert_int_equal(trace_read(path, &d), -1);
        if (!strstr(ds_errmsg(), want[what])) fail_msg("case %d: '%s' lacks '%s'", what, ds_errmsg(), want[what]);
        const char *bin = getenv("DSPARK_BIN");
        if (bin && *bin && (what == 0 || what == 2)) {
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "%s report %s > /dev/null 2>&1", bin, path);
            int st = system(cmd);
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
        }
        remove(path);
    }
    /* every request has its own id in a mode: two speculative rows of request 0 cannot be paired */
    trace *t = trace_create(path);
    assert_non_null(t);
    trace_request q = {0, MODE_SPEC, "a", "x", 0, 30, 8, 3, 1.0, 1};
    assert_int_equal(trace_add_request(t, &q), 0);
    assert_int_equal(trace_add_request(t, &q), 0);
    assert_int_equal(trace_close(t), 0);
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    metrics m;
    assert_int_equal(metrics_compute(&d, "", &m), -1);
    assert_non_null(strstr(ds_errmsg(), "request 0 has two speculative rows"));
    trace_data_free(&d);
    remove(path);
}

/* Every field rows_check guards, one at a time: a trace whose rows sit on the boundaries a writer of
 * this project reaches (zero counts, a request that ended at its prefill, depth 1, rank 0, survival
 * unknown, zero times, names that fill their fields) is read back whole, and each field moved one
 * step past its boundary is refused with the table, row and field named (test_bad_rows_refused has
 * the far-off values) */
enum { EDGE_OK = 0, RD_RQ, RD_MODE, RD_ROUND, RD_PROP, RD_EMIT, RD_BT, RD_VER, RD_ACC, RD_ACCV, RD_TD, RD_TS, RD_TV,
       Q_RQ, Q_MODE, Q_PT, Q_OT, Q_RN, Q_WALL, P_POS, P_ACC, P_ACCV, C_RQ, C_RN, C_POS, C_SLO, C_SHI,
       N_RQ, N_RN, N_ND, N_DEP, N_RANK, N_ACC, N_ACCLO, N_LED, N_FIELDS };
static void write_edge_trace(const char *path, int bad) {
    trace *t = trace_create(path);
    assert_non_null(t);
    assert_int_equal(trace_attr(t, "config", "{\"temperature\": 0, \"gamma\": 3}"), 0);
    trace_round r = {bad == RD_RQ ? -1 : 0, bad == RD_ROUND ? -1 : 0, bad == RD_MODE ? 2 : MODE_SPEC, bad == RD_PROP ? -1 : 0,
                     bad == RD_VER ? -1 : 0, bad == RD_ACC ? -1 : bad == RD_ACCV ? 1 : 0, bad == RD_EMIT ? -1 : 0,
                     bad == RD_BT ? -1 : 0, bad == RD_TD ? -1 : 0, bad == RD_TS ? -1 : 0, bad == RD_TV ? INFINITY : 0};
    assert_int_equal(trace_add_round(t, &r), 0);
    trace_request q = {bad == Q_RQ ? -1 : 0, bad == Q_MODE ? -1 : MODE_AR, "", "", 0, bad == Q_PT ? -1 : 0,
                       bad == Q_OT ? -1 : 0, bad == Q_RN ? -1 : 0, bad == Q_WALL ? -1e-9 : 0, 0};
    memset(q.dataset, 'd', sizeof q.dataset); /* no terminator: the reader ends the string inside its field */
    memset(q.domain, 'm', sizeof q.domain);
    assert_int_equal(trace_add_request(t, &q), 0);
    trace_position p = {bad == P_POS ? 0 : 1, 0, bad == P_ACC ? -1 : bad == P_ACCV ? 1 : 0};
    assert_int_equal(trace_add_position(t, &p), 0);
    trace_conf c = {bad == C_RQ ? -1 : 0, bad == C_RN ? -1 : 0, bad == C_POS ? 0 : 1, NAN, NAN, NAN,
                    bad == C_SLO ? -2 : bad == C_SHI ? 2 : -1};
    assert_int_equal(trace_add_conf(t, &c), 0);
    trace_node n = {bad == N_RQ ? -1 : 0, bad == N_RN ? -1 : 0, bad == N_ND ? -1 : 0, bad == N_DEP ? 0 : 1,
                    bad == N_RANK ? -1 : 0, 0.5f, bad == N_ACC ? 2 : bad == N_ACCLO ? -1 : 0, bad == N_LED ? 2 : 1};
    assert_int_equal(trace_add_node(t, &n), 0);
    trace_node on = {0, 0, 1, 2, 1, 0.5f, 1, 0}; /* accepted, led nowhere */
    assert_int_equal(trace_add_node(t, &on), 0);
    trace_lossless l;
    memset(&l, 0, sizeof l);
    memset(l.test, 't', sizeof l.test);
    memset(l.kind, 'k', sizeof l.kind);
    assert_int_equal(trace_add_lossless(t, &l), 0);
    assert_int_equal(trace_close(t), 0);
}

static void test_row_boundaries(void **state) {
    (void)state;
    const char *path = tmp_path("edges.h5");
    static const char *const field[N_FIELDS] = {
        "", "'rounds' row 0: request = -1", "'rounds' row 0: mode = 2", "'rounds' row 0: round / proposed / emitted / batch_tokens = -1",
        "round / proposed / emitted / batch_tokens = -1", "round / proposed / emitted / batch_tokens = -1",
        "round / proposed / emitted / batch_tokens = -1", "'rounds' row 0: accepted = 0", "'rounds' row 0: accepted = -1",
        "'rounds' row 0: accepted = 1", "'rounds' row 0: times -1 / 0 / 0", "'rounds' row 0: times 0 / -1 / 0",
        "'rounds' row 0: times 0 / 0 / inf", "'requests' row 0: request = -1", "'requests' row 0: mode = -1",
        "prompt_tokens / output_tokens / rounds = -1", "prompt_tokens / output_tokens / rounds = -1",
        "prompt_tokens / output_tokens / rounds = -1", "'requests' row 0: wall_s = -1e-09", "'positions' row 0: position = 0",
        "'positions' row 0: accepted = -1", "'positions' row 0: accepted = 1", "'confidence' row 0: request / round = -1",
        "'confidence' row 0: request / round = -1", "'confidence' row 0: position = 0", "'confidence' row 0: survived = -2",
        "'confidence' row 0: survived = 2", "'nodes' row 0: request / round / node = -1", "'nodes' row 0: request / round / node = -1",
        "'nodes' row 0: request / round / node = -1", "'nodes' row 0: depth = 0", "'nodes' row 0: rank = -1",
        "'nodes' row 0: accepted / led_on = 2", "'nodes' row 0: accepted / led_on = -1", "'nodes' row 0: accepted / led_on = 2"};
    for (int bad = 0; bad < N_FIELDS; bad++) {
        write_edge_trace(path, bad);
        trace_data d;
        int rc = trace_read(path, &d);
        if (bad == EDGE_OK) {
            assert_int_equal(rc, 0);
            assert_int_equal(d.n_rounds + d.n_requests + d.n_positions + d.n_conf + d.n_nodes + d.n_lossless, 7);
            assert_int_equal(strlen(d.requests[0].dataset), sizeof d.requests[0].dataset - 1);
            assert_int_equal(strlen(d.requests[0].domain), sizeof d.requests[0].domain - 1);
            assert_int_equal(strlen(d.lossless[0].test), sizeof d.lossless[0].test - 1);
            assert_int_equal(strlen(d.lossless[0].kind), sizeof d.lossless[0].kind - 1);
            assert_int_equal(d.requests[0].dataset[0], 'd');
            assert_int_equal(d.lossless[0].kind[0], 'k');
            assert_int_equal(d.nodes[0].rank, 0);
            assert_int_equal(d.conf[0].survived, -1);
            trace_data_free(&d);
        } else {
            assert_int_equal(rc, -1);
            if (!strstr(ds_errmsg(), field[bad])) fail_msg("field %d: '%s' lacks '%s'", bad, ds_errmsg(), field[bad]);
        }
    }
    /* a trace written again over an existing one replaces it */
    write_edge_trace(path, EDGE_OK);
    trace_data d;
    assert_int_equal(trace_read(path, &d), 0);
    trace_data_free(&d);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_tmp),
        cmocka_unit_test(test_abort_and_errors),
        cmocka_unit_test(test_ownership_and_failed_close),
        cmocka_unit_test(test_incomplete_refused),
        cmocka_unit_test(test_table_rank_refused),
        cmocka_unit_test(test_report_other_config),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_metrics_rates),
        cmocka_unit_test(test_metrics_counts),
        cmocka_unit_test(test_bad_rows_refused),
        cmocka_unit_test(test_row_boundaries),
    };
    return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
