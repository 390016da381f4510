/* testutil.h — shared by the CMocka suites: short names for the runtime's GGUF writer, temp paths,
 * the location of the real model and fixtures, and comparison helpers.
 * Header-only (static functions) so every suite is one .c file. */
#ifndef DS_TESTUTIL_H
#define DS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka 1.1.5 needs the four headers above first */
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/gguf.h"
#include "../runtime/formats/gguf_writer.h"
#include "../runtime/tiny_model.h"
#include "../runtime/formats/quant.h"
#include "../runtime/sampling.h"
#include "../runtime/target.h"

/* every helper is static; not every suite uses all of them */
#pragma GCC diagnostic ignored "-Wunused-function"

/* DS_TEST_FILTER=PATTERN (cmocka's glob) runs only the matching cases: a mutation campaign judging
 * one file by the one case that runs it (scripts/mutants.py test:SUITE@PATTERN) */
static void ds_test_filter(void) {
    const char *f = getenv("DS_TEST_FILTER");
    if (f && *f) cmocka_set_test_filter(f);
}

/* raw bytes and GGUF images come from runtime/gguf_writer (shared with the library) */
typedef gw_buf tbuf;
#define tb_put gw_put
#define tb_u32 gw_u32
#define tb_u64 gw_u64
#define tb_str gw_str
typedef gguf_writer gguf_builder;
#define gb_init gw_init
#define gb_free gw_free
#define gb_key gw_key
#define gb_u32 gw_kv_u32
#define gb_i32 gw_kv_i32
#define gb_f32 gw_kv_f32
#define gb_bool gw_kv_bool
#define gb_str gw_kv_str
#define gb_arr_str gw_kv_arr_str
#define gb_arr_i32 gw_kv_arr_i32
#define gb_tensor gw_tensor
#define gb_finish gw_finish
#define quant_q4_1 quantize_q4_1
#define quant_q8_0 quantize_q8_0
void randn_fill(rng_t *r, float *x, size_t n, float scale); /* runtime/tiny_model.c */

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* A temp file path unique to this process. */
/* removes a test's scratch directory (a checkpoint, a run, a cache) with everything in it */
static void rm_dir(const char *dir) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k = 0;
    char *p = buf[k++ % 8];
    const char *dir = getenv("TMPDIR");
    snprintf(p, 512, "%s/dsb-%d-%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
    return p;
}

/* The real model and fixtures: the real-model suites fail (not skip) when the model is missing,
 * because `make test` fetches it first; DSPARK_SKIP_REAL_MODEL=1 skips them explicitly. */
static const char *real_model_path(void) { return target_default_path(); }
static int need_real_model(void) {
    const char *skip = getenv("DSPARK_SKIP_REAL_MODEL");
    if (skip && *skip == '1') return 0;
    struct stat st;
    if (stat(real_model_path(), &st) != 0) fail_msg("real model missing at %s (run `make model`)", real_model_path());
    return 1;
}

#define FIXTURE(name) ("tests/fixtures/" name)

/* max |a-b| over n, and where */
static float max_abs_diff(const float *a, const float *b, size_t n, size_t *where) {
    float m = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d > m || d != d) {
            m = d != d ? INFINITY : d;
            w = i;
        }
    }
    if (where) *where = w;
    return m;
}

#endif
