/* test_jcfg — the one typed reader of JSON configs (runtime/base/jcfg.h) and the strict JSON parse
 * under it (ds_json_parse), at every boundary: each getter's range ends in and one step out, each
 * wrong type, absent keys leaving the destination alone, unknown and duplicate keys, the 64-key
 * limit, contracts compared field by field, and files of records (arrays and JSON lines) with their
 * line numbers. Configs reach these through run, train, serve and every drafter object; the CLI
 * suite sees only the messages, and a loosened bound there passed it. */
#include "testutil.h"

#include <cJSON.h>

#include "../runtime/base/jcfg.h"

/* obj parsed from text (whole), opened at "cfg" */
static cJSON *open_text(jcfg *c, const char *text) {
    cJSON *j = ds_json_parse(text, strlen(text), NULL, NULL);
    if (!j) fail_msg("test JSON does not parse: %s", text);
    assert_int_equal(jcfg_open(c, j, "cfg"), 0);
    return j;
}

static void expect_msg(const char *needle) {
    if (!strstr(ds_errmsg(), needle)) fail_msg("message \"%s\" lacks \"%s\"", ds_errmsg(), needle);
}

/* one integer key through jcfg_int in [lo, hi]: 0 and the value, or -1 */
static int int_of(const char *text, long lo, long hi, int *out) {
    jcfg c;
    cJSON *j = open_text(&c, text);
    int rc = jcfg_int(&c, "k", lo, hi, out);
    cJSON_Delete(j);
    return rc;
}

static void test_integers(void **state) {
    (void)state;
    int x = 7;
    assert_int_equal(int_of("{}", 1, 5, &x), 0);
    assert_int_equal(x, 7); /* absent: untouched */
    assert_int_equal(int_of("{\"k\": 1}", 1, 5, &x), 0);
    assert_int_equal(x, 1);
    assert_int_equal(int_of("{\"k\": 5}", 1, 5, &x), 0);
    assert_int_equal(x, 5);
    assert_int_equal(int_of("{\"k\": 5.0}", 1, 5, &x), 0); /* 5.0 is the integer 5 in JSON */
    assert_int_equal(x, 5);
    x = 7;
    const char *bad[] = {"{\"k\": 0}", "{\"k\": 6}", "{\"k\": 2.5}", "{\"k\": \"3\"}", "{\"k\": true}", "{\"k\": null}",
                         "{\"k\": [3]}", "{\"k\": 1e300}", "{\"k\": -1e300}", "{\"k\": 4.000001}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (int_of(bad[i], 1, 5, &x) != -1) fail_msg("%s read as an integer in 1..5 (%d)", bad[i], x);
        expect_msg("cfg: 'k' must be an integer in 1..5");
        assert_int_equal(x, 7); /* a refused value leaves the destination alone */
    }
    /* negative ranges and the int's own ends */
    assert_int_equal(int_of("{\"k\": -3}", -3, -1, &x), 0);
    assert_int_equal(x, -3);
    assert_int_equal(int_of("{\"k\": -4}", -3, -1, &x), -1);
    assert_int_equal(int_of("{\"k\": 2147483647}", 0, 2147483647, &x), 0);
    assert_int_equal(x, 2147483647);
    /* jcfg_long at a range wider than an int */
    jcfg c;
    long l = 0;
    cJSON *j = open_text(&c, "{\"a\": 4294967296, \"b\": 4294967297}");
    assert_int_equal(jcfg_long(&c, "a", 0, 4294967296L, &l), 0);
    assert_true(l == 4294967296L);
    assert_int_equal(jcfg_long(&c, "b", 0, 4294967296L, &l), -1);
    assert_true(l == 4294967296L);
    cJSON_Delete(j);
    /* jcfg_u64: 0 .. 2^53, integers only */
    uint64_t u = 9;
    j = open_text(&c, "{\"z\": 0, \"top\": 9007199254740992, \"over\": 9007199254740994, \"neg\": -1, \"frac\": 0.5, \"s\": \"1\"}");
    assert_int_equal(jcfg_u64(&c, "z", &u), 0);
    assert_true(u == 0);
    assert_int_equal(jcfg_u64(&c, "top", &u), 0);
    assert_true(u == 9007199254740992ull);
    u = 9;
    assert_int_equal(jcfg_u64(&c, "over", &u), -1);
    expect_msg("cfg: 'over' must be an integer in 0..2^53");
    assert_int_equal(jcfg_u64(&c, "neg", &u), -1);
    assert_int_equal(jcfg_u64(&c, "frac", &u), -1);
    assert_int_equal(jcfg_u64(&c, "s", &u), -1);
    assert_true(u == 9);
    assert_int_equal(jcfg_u64(&c, "absent", &u), 0);
    assert_true(u == 9);
    cJSON_Delete(j);
    /* jcfg_integral: what array elements are read with */
    cJSON *n = cJSON_CreateNumber(3);
    assert_true(jcfg_integral(n, 3, 3));
    assert_false(jcfg_integral(n, 4, 9));
    assert_false(jcfg_integral(n, 0, 2));
    cJSON_SetNumberValue(n, 3.5);
    assert_false(jcfg_integral(n, 0, 9));
    cJSON_Delete(n);
    cJSON *s = cJSON_CreateString("3");
    assert_false(jcfg_integral(s, 0, 9));
    cJSON_Delete(s);
    assert_false(jcfg_integral(NULL, 0, 9));
}

static void test_numbers(void **state) {
    (void)state;
    jcfg c;
    double d = 9;
    float f = 9;
    cJSON *j = open_text(&c, "{\"lo\": 0.25, \"hi\": 2, \"under\": 0.2499, \"over\": 2.0001, \"s\": \"1\", \"b\": false, "
                             "\"n\": null, \"i\": 1}");
    assert_int_equal(jcfg_double(&c, "lo", 0.25, 2, &d), 0); /* closed range */
    assert_true(d == 0.25);
    assert_int_equal(jcfg_double(&c, "hi", 0.25, 2, &d), 0);
    assert_true(d == 2);
    assert_int_equal(jcfg_double(&c, "i", 0.25, 2, &d), 0); /* an integer is a number */
    assert_true(d == 1);
    d = 9;
    const char *bad[] = {"under", "over", "s", "b", "n"};
    for (int i = 0; i < 5; i++) {
        if (jcfg_double(&c, bad[i], 0.25, 2, &d) != -1) fail_msg("'%s' read as a number in [0.25, 2] (%g)", bad[i], d);
        char want[80];
        snprintf(want, sizeof want, "cfg: '%s' must be a number in [0.25, 2]", bad[i]);
        expect_msg(want);
        assert_true(d == 9);
    }
    /* a string "0" is no 0: the range test must not stand in for the type test */
    assert_int_equal(jcfg_double(&c, "s", 0, 2, &d), -1);
    assert_int_equal(jcfg_float(&c, "lo", 0.25, 2, &f), 0);
    assert_true(f == 0.25f);
    f = 9;
    assert_int_equal(jcfg_float(&c, "over", 0.25, 2, &f), -1);
    assert_int_equal(jcfg_float(&c, "s", 0, 2, &f), -1);
    assert_true(f == 9);
    assert_int_equal(jcfg_float(&c, "absent", 0, 2, &f), 0);
    assert_true(f == 9);
    assert_int_equal(jcfg_close(&c), 0);
    cJSON_Delete(j);
    /* a string "0" in range as text would read as 0.0 were only the range tested */
    j = open_text(&c, "{\"z\": \"0\"}");
    assert_int_equal(jcfg_double(&c, "z", -1, 1, &d), -1);
    cJSON_Delete(j);
}

static void test_arrays(void **state) {
    (void)state;
    jcfg c;
    float v[4] = {9, 9, 9, 9};
    int n = -1;
    cJSON *j = open_text(&c, "{\"in\": [0.001, 0.5, 0.999], \"lo\": [0, 0.5], \"hi\": [0.5, 1], \"long\": [0.1, 0.2, 0.3, "
                             "0.4, 0.5], \"four\": [0.1, 0.2, 0.3, 0.4], \"s\": [\"0.5\"], \"obj\": {\"a\": 0.5}, \"num\": 0.5,"
                             " \"empty\": []}");
    assert_int_equal(jcfg_floats(&c, "in", 4, 0, 1, v, &n), 0); /* open interval (0, 1) */
    assert_int_equal(n, 3);
    assert_true(v[0] == 0.001f && v[1] == 0.5f && v[2] == 0.999f && v[3] == 9);
    assert_int_equal(jcfg_floats(&c, "four", 4, 0, 1, v, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(jcfg_floats(&c, "empty", 4, 0, 1, v, &n), 0);
    assert_int_equal(n, 0);
    n = -1;
    assert_int_equal(jcfg_floats(&c, "lo", 4, 0, 1, v, &n), -1);
    expect_msg("cfg: 'lo'[0] must be a number in (0, 1)");
    assert_int_equal(jcfg_floats(&c, "hi", 4, 0, 1, v, &n), -1);
    expect_msg("cfg: 'hi'[1] must be a number in (0, 1)");
    assert_int_equal(jcfg_floats(&c, "s", 4, 0, 1, v, &n), -1);
    expect_msg("cfg: 's'[0] must be a number");
    assert_int_equal(jcfg_floats(&c, "long", 4, 0, 1, v, &n), -1);
    expect_msg("cfg: 'long' must be an array of at most 4 numbers");
    assert_int_equal(jcfg_floats(&c, "obj", 4, 0, 1, v, &n), -1); /* an object is no array, whatever its size */
    assert_int_equal(jcfg_floats(&c, "num", 4, 0, 1, v, &n), -1);
    assert_int_equal(n, -1); /* refused: the count is left alone */
    assert_int_equal(jcfg_floats(&c, "absent", 4, 0, 1, v, &n), 0);
    assert_int_equal(n, -1);
    cJSON_Delete(j);

    int w[4] = {9, 9, 9, 9};
    n = -1;
    j = open_text(&c, "{\"ok\": [2, 5], \"one\": [3], \"three\": [2, 3, 4], \"none\": [], \"low\": [1, 3], \"high\": [3, 6], "
                      "\"frac\": [2.5], \"s\": [\"3\"], \"obj\": {\"a\": 3, \"b\": 4}, \"num\": 3}");
    assert_int_equal(jcfg_ints(&c, "ok", 1, 2, 2, 5, w, &n), 0); /* closed [2, 5], 1..2 of them */
    assert_int_equal(n, 2);
    assert_true(w[0] == 2 && w[1] == 5 && w[2] == 9);
    assert_int_equal(jcfg_ints(&c, "one", 1, 2, 2, 5, w, &n), 0);
    assert_int_equal(n, 1);
    n = -1;
    assert_int_equal(jcfg_ints(&c, "three", 1, 2, 2, 5, w, &n), -1);
    expect_msg("cfg: 'three' must be an array of 1..2 integers");
    assert_int_equal(jcfg_ints(&c, "none", 1, 2, 2, 5, w, &n), -1);
    assert_int_equal(jcfg_ints(&c, "low", 1, 2, 2, 5, w, &n), -1);
    expect_msg("cfg: 'low'[0] must be an integer in [2, 5]");
    assert_int_equal(jcfg_ints(&c, "high", 1, 2, 2, 5, w, &n), -1);
    expect_msg("cfg: 'high'[1] must be an integer in [2, 5]");
    assert_int_equal(jcfg_ints(&c, "frac", 1, 2, 2, 5, w, &n), -1);
    assert_int_equal(jcfg_ints(&c, "s", 1, 2, 2, 5, w, &n), -1);
    assert_int_equal(jcfg_ints(&c, "obj", 1, 2, 2, 5, w, &n), -1);
    assert_int_equal(jcfg_ints(&c, "num", 1, 2, 2, 5, w, &n), -1);
    assert_int_equal(n, -1);
    assert_int_equal(jcfg_ints(&c, "none", 0, 2, 2, 5, w, &n), 0); /* none, where none may be */
    assert_int_equal(n, 0);
    cJSON_Delete(j);
}

static void test_strings_and_bools(void **state) {
    (void)state;
    jcfg c;
    const char *s = "untouched";
    char dst[4] = "xyz";
    int b = 7;
    cJSON *j = open_text(&c, "{\"s\": \"abc\", \"long\": \"abcd\", \"num\": 3, \"t\": true, \"f\": false, \"one\": 1, \"str\": \"true\"}");
    assert_int_equal(jcfg_str(&c, "s", &s), 0);
    assert_string_equal(s, "abc");
    assert_int_equal(jcfg_str(&c, "num", &s), -1);
    expect_msg("cfg: 'num' must be a string");
    assert_string_equal(s, "abc");
    assert_int_equal(jcfg_strcpy(&c, "s", dst, sizeof dst), 0); /* 3 characters and the NUL fit in 4 */
    assert_string_equal(dst, "abc");
    assert_int_equal(jcfg_strcpy(&c, "long", dst, sizeof dst), -1);
    expect_msg("cfg: 'long' is longer than 3 characters");
    assert_string_equal(dst, "abc");
    assert_int_equal(jcfg_strcpy(&c, "num", dst, sizeof dst), -1);
    assert_int_equal(jcfg_strcpy(&c, "absent", dst, sizeof dst), 0);
    assert_string_equal(dst, "abc");
    assert_int_equal(jcfg_bool(&c, "t", &b), 0);
    assert_int_equal(b, 1);
    assert_int_equal(jcfg_bool(&c, "f", &b), 0);
    assert_int_equal(b, 0);
    b = 7;
    assert_int_equal(jcfg_bool(&c, "one", &b), -1);
    expect_msg("cfg: 'one' must be true or false");
    assert_int_equal(jcfg_bool(&c, "str", &b), -1);
    assert_int_equal(b, 7);
    assert_int_equal(jcfg_bool(&c, "absent", &b), 0);
    assert_int_equal(b, 7);
    assert_int_equal(jcfg_close(&c), 0);
    cJSON_Delete(j);
}

static void test_keys(void **state) {
    (void)state;
    jcfg c;
    int x = 0;
    /* every key read, one skipped: closed clean; one left: named with the keys asked for, once each */
    cJSON *j = open_text(&c, "{\"a\": 1, \"b\": 2, \"c\": 3}");
    assert_int_equal(jcfg_int(&c, "a", 0, 9, &x), 0);
    assert_int_equal(jcfg_int(&c, "a", 0, 9, &x), 0);
    jcfg_skip(&c, "c");
    assert_int_equal(jcfg_int(&c, "zz", 0, 9, &x), 0);
    assert_int_equal(jcfg_close(&c), -1);
    expect_msg("cfg: unknown key 'b' (known: a, c, zz)");
    assert_non_null(jcfg_get(&c, "b"));
    assert_int_equal(jcfg_close(&c), 0);
    cJSON_Delete(j);
    /* the first member and the last are tracked like the rest */
    j = open_text(&c, "{\"first\": 1, \"mid\": 2, \"last\": 3}");
    jcfg_skip(&c, "mid");
    jcfg_skip(&c, "last");
    assert_int_equal(jcfg_close(&c), -1);
    expect_msg("unknown key 'first'");
    cJSON_Delete(j);
    j = open_text(&c, "{\"first\": 1, \"mid\": 2, \"last\": 3}");
    jcfg_skip(&c, "first");
    jcfg_skip(&c, "mid");
    assert_int_equal(jcfg_close(&c), -1);
    expect_msg("unknown key 'last' (known: first, mid)");
    cJSON_Delete(j);
    /* nothing asked: "known: none" */
    j = open_text(&c, "{\"x\": 1}");
    assert_int_equal(jcfg_close(&c), -1);
    expect_msg("cfg: unknown key 'x' (known: none)");
    cJSON_Delete(j);
    /* an absent object: every getter finds nothing, close is clean */
    assert_int_equal(jcfg_open(&c, NULL, "cfg"), 0);
    x = 5;
    assert_int_equal(jcfg_int(&c, "a", 0, 9, &x), 0);
    assert_int_equal(x, 5);
    assert_null(jcfg_get(&c, "a"));
    assert_int_equal(jcfg_close(&c), 0);
    /* not an object */
    cJSON *arr = cJSON_CreateArray();
    assert_int_equal(jcfg_open(&c, arr, "cfg: data"), -1);
    expect_msg("cfg: data must be a JSON object");
    cJSON_Delete(arr);
    /* duplicates, first and last */
    j = ds_json_parse("{\"a\": 1, \"b\": 2, \"a\": 3}", 24, NULL, NULL);
    assert_non_null(j);
    assert_int_equal(jcfg_open(&c, j, "cfg"), -1);
    expect_msg("cfg: key 'a' appears twice");
    cJSON_Delete(j);
    j = ds_json_parse("{\"a\": 1, \"b\": 2, \"b\": 3}", 24, NULL, NULL);
    assert_int_equal(jcfg_check_unique(j, "cfg"), -1);
    expect_msg("cfg: key 'b' appears twice");
    cJSON_Delete(j);
    /* 64 keys open and close (bit 63 tracked); 65 are refused */
    cJSON *o = cJSON_CreateObject();
    char k[16];
    for (int i = 0; i < JCFG_MAX_KEYS; i++) {
        snprintf(k, sizeof k, "k%d", i);
        cJSON_AddNumberToObject(o, k, i);
    }
    assert_int_equal(jcfg_open(&c, o, "cfg"), 0);
    for (int i = 0; i < JCFG_MAX_KEYS - 1; i++) {
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(jcfg_int(&c, k, 0, 99, &x), 0);
        assert_int_equal(x, i);
    }
    assert_int_equal(jcfg_close(&c), -1);
    expect_msg("unknown key 'k63'");
    assert_int_equal(jcfg_int(&c, "k63", 0, 99, &x), 0);
    assert_int_equal(jcfg_close(&c), 0);
    cJSON_AddNumberToObject(o, "k64", 64);
    assert_int_equal(jcfg_open(&c, o, "cfg"), -1);
    expect_msg("cfg: more than 64 keys");
    cJSON_Delete(o);
}

static void test_diff(void **state) {
    (void)state;
    char msg[200] = "";
    cJSON *want = ds_json_parse("{\"a\": 1, \"b\": \"x\", \"c\": [1, 2]}", 31, NULL, NULL);
    cJSON *same = ds_json_parse("{\"c\": [1, 2], \"b\": \"x\", \"a\": 1, \"extra\": 0}", 43, NULL, NULL);
    cJSON *moved = ds_json_parse("{\"a\": 1, \"b\": \"x\", \"c\": [1, 3]}", 31, NULL, NULL);
    cJSON *lacks = ds_json_parse("{\"a\": 1, \"c\": [1, 2]}", 21, NULL, NULL);
    cJSON *first = ds_json_parse("{\"a\": 2, \"b\": \"x\", \"c\": [1, 2]}", 31, NULL, NULL);
    assert_true(want && same && moved && lacks && first);
    assert_int_equal(jcfg_diff(want, same, msg, sizeof msg), 0);
    assert_int_equal(jcfg_diff(want, moved, msg, sizeof msg), 1);
    assert_string_equal(msg, "c = [1,3], now [1,2]");
    assert_int_equal(jcfg_diff(want, lacks, msg, sizeof msg), 1);
    assert_string_equal(msg, "b = (not recorded), now \"x\"");
    assert_int_equal(jcfg_diff(want, first, msg, sizeof msg), 1);
    assert_string_equal(msg, "a = 2, now 1");
    cJSON_Delete(want), cJSON_Delete(same), cJSON_Delete(moved), cJSON_Delete(lacks), cJSON_Delete(first);
}

/* jcfg_each_record: what fn saw, as "index:line:value;" */
typedef struct {
    char seen[256];
    int stop_at; /* fn fails at this index (-1: never) */
} rec_log;

static int log_rec(void *ctx, const cJSON *rec, int index, int line, const char *path) {
    rec_log *l = ctx;
    (void)path;
    const cJSON *v = cJSON_GetObjectItem(rec, "v");
    size_t w = strlen(l->seen);
    snprintf(l->seen + w, sizeof l->seen - w, "%d:%d:%d;", index, line, v ? v->valueint : -1);
    if (index == l->stop_at) {
        ds_error("record %d refused", index);
        return -1;
    }
    return 0;
}

static int walk(const char *body, rec_log *l, int stop_at) {
    const char *p = tmp_path("records.jsonl");
    write_file(p, body, strlen(body));
    memset(l, 0, sizeof *l);
    l->stop_at = stop_at;
    int rc = jcfg_each_record(p, log_rec, l);
    remove(p);
    return rc;
}

static void test_records(void **state) {
    (void)state;
    rec_log l;
    /* JSON lines: blank lines (CRLF ones too) skipped, lines counted, records indexed from 0 */
    assert_int_equal(walk("{\"v\": 1}\n\n{\"v\": 2}\r\n \r\n\t{\"v\": 3}", &l, -1), 0);
    assert_string_equal(l.seen, "0:1:1;1:3:2;2:5:3;");
    /* an array: line = index + 1, leading blanks allowed */
    assert_int_equal(walk(" \t\r\n[{\"v\": 1}, {\"v\": 2}]\n", &l, -1), 0);
    assert_string_equal(l.seen, "0:1:1;1:2:2;");
    /* fn's error stops the walk, in either form */
    assert_int_equal(walk("{\"v\": 1}\n{\"v\": 2}\n{\"v\": 3}\n", &l, 1), -1);
    assert_string_equal(l.seen, "0:1:1;1:2:2;");
    expect_msg("record 1 refused");
    assert_int_equal(walk("[{\"v\": 1}, {\"v\": 2}, {\"v\": 3}]", &l, 0), -1);
    assert_string_equal(l.seen, "0:1:1;");
    /* bad lines: named by line, nothing after them handed on */
    assert_int_equal(walk("{\"v\": 1}\n{\"v\": \n{\"v\": 3}\n", &l, -1), -1);
    expect_msg("records.jsonl:2: malformed or truncated JSON line");
    assert_string_equal(l.seen, "0:1:1;");
    assert_int_equal(walk("{\"v\": 1}\n  {\"v\": 2} {\"v\": 3}\n", &l, -1), -1);
    expect_msg("records.jsonl:2: text after the JSON value at column 12 (one JSON record a line)");
    assert_string_equal(l.seen, "0:1:1;");
    assert_int_equal(walk("[{\"v\": 1}] [{\"v\": 2}]", &l, -1), -1);
    expect_msg("records.jsonl: text after the JSON value at byte 11");
    assert_string_equal(l.seen, "");
    assert_int_equal(walk("[{\"v\": 1}, ", &l, -1), -1);
    expect_msg("records.jsonl: not a valid JSON array of records");
    assert_int_equal(walk("{\"v\": \"a\\u0000b\"}\n", &l, -1), -1);
    expect_msg("records.jsonl:1: a \\u0000 escape (U+0000 would end the text there) at column 9");
    memset(&l, 0, sizeof l);
    assert_int_equal(jcfg_each_record("/nonexistent/records.jsonl", log_rec, &l), -1);
    expect_msg("/nonexistent/records.jsonl");
}

/* ds_json_parse: one value and blanks, or a refusal saying why and where */
static void test_strict_parse(void **state) {
    (void)state;
    size_t at = 99;
    int why = -1;
    struct {
        const char *text;
        int why;
        size_t at;
    } cases[] = {
        {"{\"a\": 1}", DS_JSON_OK, 8},
        {" \t\r\n[1, 2] \r\n\t ", DS_JSON_OK, 15},
        {"3", DS_JSON_OK, 1},
        {"\"a\\\\u0000\"", DS_JSON_OK, 10},          /* an escaped backslash, then six characters */
        {"{\"a\": 1} {\"b\": 2}", DS_JSON_TRAILING, 9},
        {"{\"a\": 1}}", DS_JSON_TRAILING, 8},
        {"[1]\n\n,", DS_JSON_TRAILING, 5},
        {"{\"a\": 1}\v", DS_JSON_TRAILING, 8},      /* a vertical tab is no JSON blank */
        {"\"x\\u0000\"", DS_JSON_NUL, 2},
        {"{\"k\\u0000\": 1}", DS_JSON_NUL, 3},      /* in a key too */
        {"\"\\\\\\u0000\"", DS_JSON_NUL, 3},        /* an escaped backslash, then an escape */
        {"{\"a\": ", DS_JSON_BAD, 0},
        {"", DS_JSON_BAD, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = ds_json_parse(cases[i].text, strlen(cases[i].text), &at, &why);
        if (why != cases[i].why || (why != DS_JSON_BAD && at != cases[i].at) || (j != NULL) != (why == DS_JSON_OK))
            fail_msg("'%s': why %d at %zu (%s), expected %d at %zu", cases[i].text, why, at, j ? "parsed" : "NULL",
                     cases[i].why, cases[i].at);
        cJSON_Delete(j);
    }
    /* the length bounds the text: what lies past it is not read */
    cJSON *j = ds_json_parse("[1] junk", 3, &at, &why);
    assert_non_null(j);
    assert_int_equal(why, DS_JSON_OK);
    cJSON_Delete(j);
    assert_string_equal(ds_json_why(DS_JSON_TRAILING), "text after the JSON value");
    /* a file: the line of the trailing text */
    const char *p = tmp_path("strict.json");
    write_file(p, "{\"a\": 1}\n\n  {\"b\": 2}\n", 21);
    assert_null(ds_read_json(p));
    expect_msg("strict.json: text after the JSON value (line 3): one value per file");
    write_file(p, "{\"a\":\n 1,\n}", 11);
    assert_null(ds_read_json(p));
    expect_msg("strict.json: not valid JSON (line 3)");
    write_file(p, "{\"a\": 1}\n", 9);
    j = ds_read_json(p);
    assert_non_null(j);
    cJSON_Delete(j);
    remove(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integers),  cmocka_unit_test(test_numbers), cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_strings_and_bools), cmocka_unit_test(test_keys), cmocka_unit_test(test_diff),
        cmocka_unit_test(test_records),   cmocka_unit_test(test_strict_parse),
    };
    ds_test_filter();
    return cmocka_run_group_tests_name("jcfg", tests, NULL, NULL);
}
