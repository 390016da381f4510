/* test_models — the named models: the runtime's table equals the fetch script's (names, files, sizes,
 * hashes); a name resolves to its file in the cache and a path stays a path; a name whose file is
 * missing or the wrong size is one clear error that says how to fetch it; and the fetch script's
 * own failures (unknown name, parts of the wrong size, an assembled file whose hash is wrong) are
 * one line each, exit 1, and leave no file in the model's place. No download: every case runs
 * against a temporary cache. */
#include "testutil.h"

#include "../runtime/model/models.h"

#include <sys/wait.h>

static char cache_root[512];

static int setup(void **state) {
    (void)state;
    snprintf(cache_root, sizeof cache_root, "%s", tmp_path("cache"));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/dspark-bench'", cache_root, cache_root);
    if (system(cmd) != 0) return -1;
    return setenv("XDG_CACHE_HOME", cache_root, 1);
}

static int teardown(void **state) {
    (void)state;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_root);
    return system(cmd) == 0 ? 0 : -1;
}

/* the command's exit status and its output (stdout and stderr) */
static int sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_tables_agree(void **state) {
    (void)state;
    char out[8192];
    if (sh(out, sizeof out, "python3 scripts/fetch_model.py --list") != 0) fail_msg("fetch_model.py --list:\n%s", out);
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), n++) {
        char name[128], file[256], sha[80];
        long long size;
        assert_int_equal(sscanf(line, "%127s %255s %lld %79s", name, file, &size, sha), 4);
        const model_name *m = model_name_nth(n);
        if (!m) fail_msg("fetch_model.py has %s, the runtime's table ends before it", name);
        assert_string_equal(name, m->name);
        assert_string_equal(file, m->file);
        assert_true(size == m->size);
        assert_string_equal(sha, m->sha256);
    }
    assert_null(model_name_nth(n)); /* and no name the script does not know */
    assert_string_equal(model_name_nth(0)->name, "smollm2-135m"); /* the default's name */
}

static void test_resolve(void **state) {
    (void)state;
    char path[4096], want[4096];
    const model_name *named;
    /* paths stay paths, names that are not registered too (model_load then says neither) */
    assert_int_equal(model_resolve("/some/where/m.gguf", path, sizeof path, &named), 0);
    assert_string_equal(path, "/some/where/m.gguf");
    assert_null(named);
    assert_int_equal(model_resolve("./qwen2.5-coder-1.5b", path, sizeof path, &named), 0);
    assert_string_equal(path, "./qwen2.5-coder-1.5b");
    assert_null(named);
    model m;
    assert_int_equal(model_load(&m, "qwen9-giant"), -1);
    if (!strstr(ds_errmsg(), "nor a model name: smollm2-135m, qwen2.5-coder-1.5b, qwen2.5-coder-0.5b"))
        fail_msg("%s", ds_errmsg());
    /* a name not fetched: how to fetch it */
    assert_int_equal(model_resolve("qwen2.5-coder-1.5b", path, sizeof path, &named), -1);
    if (!strstr(ds_errmsg(), "not in the cache") || !strstr(ds_errmsg(), "make model MODEL=qwen2.5-coder-1.5b"))
        fail_msg("%s", ds_errmsg());
    /* a file of the wrong size (an interrupted copy) */
    snprintf(want, sizeof want, "%s/dspark-bench/%s", cache_root, model_name_nth(1)->file);
    FILE *f = fopen(want, "wb");
    assert_non_null(f);
    fputs("cut short", f);
    fclose(f);
    assert_int_equal(model_resolve("qwen2.5-coder-1.5b", path, sizeof path, &named), -1);
    if (!strstr(ds_errmsg(), "has 9 bytes, not 1117320768")) fail_msg("%s", ds_errmsg());
    /* the right size (sparse): the name resolves to the cache's file */
    assert_int_equal(truncate(want, model_name_nth(1)->size), 0);
    assert_int_equal(model_resolve("qwen2.5-coder-1.5b", path, sizeof path, &named), 0);
    assert_string_equal(path, want);
    assert_non_null(named);
    assert_string_equal(named->name, "qwen2.5-coder-1.5b");
    remove(want);
}

/* The fetch script's failures, with no network: the parts are planted in the temporary cache. */
static void test_fetch_errors(void **state) {
    (void)state;
    char out[8192], dir[600], cmd[4096], final[700];
    int rc = sh(out, sizeof out, "python3 scripts/fetch_model.py qwen9-giant");
    assert_int_equal(rc, 1);
    if (!strstr(out, "unknown model 'qwen9-giant' (known: smollm2-135m, qwen2.5-coder-1.5b, qwen2.5-coder-0.5b)"))
        fail_msg("%s", out);
    /* six parts present but short: the sizes are checked before anything is assembled */
    snprintf(dir, sizeof dir, "%s/dspark-bench/parts/qwen2.5-coder-0.5b", cache_root);
    snprintf(final, sizeof final, "%s/dspark-bench/%s", cache_root, model_name_nth(2)->file);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && for i in 1 2 3 4 5 6; do printf x > '%s'/part0$i.bin; done", dir, dir);
    assert_int_equal(system(cmd), 0);
    rc = sh(out, sizeof out, "XDG_CACHE_HOME='%s' python3 scripts/fetch_model.py qwen2.5-coder-0.5b", cache_root);
    assert_int_equal(rc, 1);
    if (!strstr(out, "model qwen2.5-coder-0.5b: the parts hold 6 bytes, the file has 491400064")) fail_msg("%s", out);
    /* the right total size of zeros (sparse): assembled, its sha256 is wrong, nothing is left in place */
    snprintf(cmd, sizeof cmd, "for i in 1 2 3 4 5; do truncate -s 89128960 '%s'/part0$i.bin; done && truncate -s 45755264 '%s'/part06.bin",
             dir, dir);
    assert_int_equal(system(cmd), 0);
    rc = sh(out, sizeof out, "XDG_CACHE_HOME='%s' python3 scripts/fetch_model.py qwen2.5-coder-0.5b", cache_root);
    assert_int_equal(rc, 1);
    if (!strstr(out, "sha256 mismatch of the assembled file")) fail_msg("%s", out);
    struct stat st;
    assert_int_not_equal(stat(final, &st), 0);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.assemble", final);
    assert_int_not_equal(stat(tmp, &st), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_agree),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_fetch_errors),
    };
    return cmocka_run_group_tests_name("models", tests, setup, teardown);
}
