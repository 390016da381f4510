/* test_gguf — the GGUF reader on files the test writes itself: every metadata type, a custom
 * alignment, the broken-file cases of llama.cpp's test-gguf, and truncation at every byte. */
#include "testutil.h"

/* one of every metadata value type, arrays of scalars and strings, and a nested array */
static void add_all_kv(gguf_builder *g) {
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -1234567890123ll;
    double f64 = 2.5e-300;
    gb_key(g, "t.u8", GGUF_U8);
    tb_put(&g->kv, &u8, 1);
    gb_key(g, "t.i8", GGUF_I8);
    tb_put(&g->kv, &i8, 1);
    gb_key(g, "t.u16", GGUF_U16);
    tb_put(&g->kv, &u16, 2);
    gb_key(g, "t.i16", GGUF_I16);
    tb_put(&g->kv, &i16, 2);
    gb_u32(g, "t.u32", 4000000000u);
    gb_i32(g, "t.i32", -2000000000);
    gb_f32(g, "t.f32", 0.15625f);
    gb_bool(g, "t.bool", 1);
    gb_str(g, "t.str", "héllo wörld");
    gb_key(g, "t.u64", GGUF_U64);
    tb_u64(&g->kv, 18000000000000000000ull);
    gb_key(g, "t.i64", GGUF_I64);
    tb_put(&g->kv, &i64, 8);
    gb_key(g, "t.f64", GGUF_F64);
    tb_put(&g->kv, &f64, 8);
    const char *strs[] = {"a", "", "ccc"};
    gb_arr_str(g, "t.arr_str", strs, 3);
    int32_t ints[] = {-1, 0, 7, 1 << 30};
    gb_arr_i32(g, "t.arr_i32", ints, 4);
    /* nested: array of 2 arrays of u16 */
    gb_key(g, "t.nested", GGUF_ARRAY);
    tb_u32(&g->kv, GGUF_ARRAY);
    tb_u64(&g->kv, 2);
    for (int k = 0; k < 2; k++) {
        tb_u32(&g->kv, GGUF_U16);
        tb_u64(&g->kv, (uint64_t)(k + 1));
        for (int j = 0; j <= k; j++) {
            uint16_t v = (uint16_t)(100 * k + j);
            tb_put(&g->kv, &v, 2);
        }
    }
    uint8_t bools[3] = {1, 0, 1};
    gb_key(g, "t.arr_bool", GGUF_ARRAY);
    tb_u32(&g->kv, GGUF_BOOL);
    tb_u64(&g->kv, 3);
    tb_put(&g->kv, bools, 3);
}

/* a small valid file: all KV types and three tensors of different types */
static uint8_t *small_valid(size_t *size, uint32_t alignment) {
    gguf_builder g;
    gb_init(&g);
    g.alignment = alignment;
    if (alignment != 32) gb_u32(&g, "general.alignment", alignment);
    add_all_kv(&g);
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ne_a[2] = {4, 2};
    gb_tensor(&g, "a.f32", GGML_F32, 2, ne_a, f, sizeof f);
    block_q8_0 q[2];
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i / 8 - 4;
    quant_q8_0(v, q, 64);
    int64_t ne_b[1] = {64};
    gb_tensor(&g, "b.q8", GGML_Q8_0, 1, ne_b, q, sizeof q);
    uint16_t h[3] = {ds_f32_to_f16(1.5f), ds_f32_to_f16(-2), ds_f32_to_f16(0.25f)};
    int64_t ne_c[3] = {3, 1, 1};
    gb_tensor(&g, "c.f16", GGML_F16, 3, ne_c, h, sizeof h);
    uint8_t *img = gb_finish(&g, size);
    gb_free(&g);
    return img;
}

static void test_valid_all_types(void **state) {
    (void)state;
    for (int al = 0; al < 2; al++) {
        uint32_t alignment = al ? 64 : 32;
        size_t n;
        uint8_t *img = small_valid(&n, alignment);
        gguf_file f;
        int rc = gguf_parse(&f, img, n, "valid.gguf");
        if (rc) fail_msg("valid file rejected: %s", ds_errmsg());
        assert_int_equal(f.alignment, alignment);
        assert_int_equal(f.n_tensors, 3);
        int64_t iv;
        double dv;
        const char *s;
        uint64_t sl;
        assert_int_equal(gguf_get_int(&f, "t.u8", 0, 1000, &iv), 0);
        assert_int_equal(iv, 200);
        assert_int_equal(gguf_get_int(&f, "t.i8", -1000, 1000, &iv), 0);
        assert_int_equal(iv, -100);
        assert_int_equal(gguf_get_int(&f, "t.u16", 0, 100000, &iv), 0);
        assert_int_equal(iv, 60000);
        assert_int_equal(gguf_get_int(&f, "t.i16", -100000, 0, &iv), 0);
        assert_int_equal(iv, -30000);
        assert_int_equal(gguf_get_int(&f, "t.u32", 0, INT64_MAX, &iv), 0);
        assert_int_equal(iv, 4000000000ll);
        assert_int_equal(gguf_get_int(&f, "t.i32", INT64_MIN, 0, &iv), 0);
        assert_int_equal(iv, -2000000000);
        assert_int_equal(gguf_get_int(&f, "t.i64", INT64_MIN, 0, &iv), 0);
        assert_true(iv == -1234567890123ll);
        /* u64 above INT64_MAX does not fit the signed getter: a range error, not a wrap */
        assert_int_equal(gguf_get_int(&f, "t.u64", 0, INT64_MAX, &iv), -1);
        assert_int_equal(gguf_get(&f, "t.u64")->u, 18000000000000000000ull);
        assert_int_equal(gguf_get_float(&f, "t.f32", &dv), 0);
        assert_float_equal(dv, 0.15625, 0);
        assert_int_equal(gguf_get_float(&f, "t.f64", &dv), 0);
        assert_true(dv == 2.5e-300);
        int b;
        assert_int_equal(gguf_get_bool(&f, "t.bool", &b), 0);
        assert_int_equal(b, 1);
        assert_int_equal(gguf_get_str(&f, "t.str", &s, &sl), 0);
        assert_int_equal(sl, strlen("héllo wörld"));
        assert_memory_equal(s, "héllo wörld", sl);
        assert_int_equal(gguf_get_str(&f, "t.u8", &s, &sl), -1); /* wrong type is an error */
        assert_int_equal(gguf_get_int(&f, "absent", 0, 1, &iv), 1);
        const gguf_value *a = gguf_get(&f, "t.arr_str");
        assert_int_equal(a->arr.n, 3);
        assert_int_equal(a->arr.items[1].str.len, 0);
        assert_memory_equal(a->arr.items[2].str.s, "ccc", 3);
        a = gguf_get(&f, "t.arr_i32");
        assert_int_equal(gguf_arr_int(a, 3, &iv), 0);
        assert_int_equal(iv, 1 << 30);
        assert_int_equal(gguf_arr_int(a, 0, &iv), 0);
        assert_int_equal(iv, -1);
        assert_int_equal(gguf_arr_int(a, 4, &iv), -1); /* out of range index */
        a = gguf_get(&f, "t.nested");
        assert_int_equal(a->arr.type, GGUF_ARRAY);
        assert_int_equal(a->arr.n, 2);
        assert_int_equal(a->arr.items[1].arr.n, 2);
        assert_int_equal(gguf_arr_int(&a->arr.items[1], 1, &iv), 0);
        assert_int_equal(iv, 101);
        a = gguf_get(&f, "t.arr_bool");
        assert_int_equal(a->arr.raw[2], 1);
        const gguf_tensor *t = gguf_find_tensor(&f, "b.q8");
        assert_non_null(t);
        assert_int_equal(t->type, GGML_Q8_0);
        assert_int_equal(t->nbytes, 68);
        assert_int_equal((size_t)(t->data - img) % alignment, 0);
        t = gguf_find_tensor(&f, "c.f16");
        assert_int_equal(t->n_dims, 3);
        float out[3];
        ggml_type_get(GGML_F16)->to_float(t->data, out, 3);
        assert_float_equal(out[1], -2.0, 0);
        t = gguf_find_tensor(&f, "a.f32");
        assert_int_equal(t->ne[0], 4);
        assert_int_equal(t->ne[1], 2);
        assert_int_equal(t->ne[2], 1);
        gguf_close(&f);
        free(img);
    }
}

/* ----------------------------------------------------------------------------- broken files */

typedef struct {
    const char *what;
    const char *expect; /* substring of the error message */
} broken_case;

static void expect_reject(const uint8_t *img, size_t n, const broken_case *c) {
    /* exact-size heap copy so AddressSanitizer sees any read past the end */
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, img, n);
    gguf_file f;
    ds_error_clear();
    int rc = gguf_parse(&f, copy, n, "broken.gguf");
    if (rc == 0) {
        gguf_close(&f);
        free(copy);
        fail_msg("case '%s' was accepted", c->what);
    }
    if (!strstr(ds_errmsg(), c->expect) || !strstr(ds_errmsg(), "broken.gguf"))
        fail_msg("case '%s': message \"%s\" lacks \"%s\" or the file name", c->what, ds_errmsg(), c->expect);
    free(copy);
}

/* header with given counts, then raw bytes */
static tbuf header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    tbuf t = {0};
    tb_put(&t, "GGUF", 4);
    tb_u32(&t, version);
    tb_u64(&t, n_tensors);
    tb_u64(&t, n_kv);
    return t;
}

static void pad_to(tbuf *t, size_t align) {
    while (t->n % align) tb_put(t, "\0", 1);
}

/* one tensor info record */
static void info(tbuf *t, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off) {
    tb_str(t, name);
    tb_u32(t, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) tb_u64(t, ne[d]);
    tb_u32(t, type);
    tb_u64(t, off);
}

static void test_broken_files(void **state) {
    (void)state;
    tbuf t;
    uint64_t ne2[2] = {32, 2}, ne1[1] = {32};
    uint8_t zeros[256] = {0};

    t = header(3, 0, 0);
    memcpy(t.b, "GGUX", 4);
    expect_reject(t.b, t.n, &(broken_case){"bad magic", "not a GGUF file"});
    free(t.b);

    t = header(1, 0, 0);
    expect_reject(t.b, t.n, &(broken_case){"version 1", "version 1"});
    free(t.b);
    t = header(4, 0, 0);
    expect_reject(t.b, t.n, &(broken_case){"future version", "unsupported GGUF version 4"});
    free(t.b);

    t = header(3, UINT64_MAX, 0); /* n_tensors = -1 */
    expect_reject(t.b, t.n, &(broken_case){"n_tensors = -1", "tensor count"});
    free(t.b);
    t = header(3, 0, UINT64_MAX); /* n_kv = -1 */
    expect_reject(t.b, t.n, &(broken_case){"n_kv = -1", "metadata count"});
    free(t.b);

    t = header(3, 0, 1); /* key length -1 */
    tb_u64(&t, UINT64_MAX);
    tb_put(&t, zeros, 32);
    expect_reject(t.b, t.n, &(broken_case){"key length -1", "beyond the end of the file"});
    free(t.b);

    t = header(3, 0, 1); /* bad value type */
    tb_str(&t, "k");
    tb_u32(&t, 13);
    tb_put(&t, zeros, 16);
    expect_reject(t.b, t.n, &(broken_case){"bad kv type", "invalid value type 13"});
    free(t.b);

    t = header(3, 0, 1); /* array of an invalid element type */
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    tb_u32(&t, 99);
    tb_u64(&t, 1);
    tb_put(&t, zeros, 16);
    expect_reject(t.b, t.n, &(broken_case){"bad array element type", "invalid element type 99"});
    free(t.b);

    t = header(3, 0, 1); /* array count far beyond the file: no huge allocation, an error */
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    tb_u32(&t, GGUF_STRING);
    tb_u64(&t, 1ull << 62);
    tb_put(&t, zeros, 16);
    expect_reject(t.b, t.n, &(broken_case){"huge array", "more than the"});
    free(t.b);

    t = header(3, 0, 1); /* bool that is not 0 or 1 */
    tb_str(&t, "k");
    tb_u32(&t, GGUF_BOOL);
    tb_put(&t, "\x02", 1);
    expect_reject(t.b, t.n, &(broken_case){"bool 2", "must be 0 or 1"});
    free(t.b);

    t = header(3, 0, 1); /* arrays nested too deep */
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    for (int d = 0; d < GGUF_MAX_DEPTH + 2; d++) {
        tb_u32(&t, GGUF_ARRAY);
        tb_u64(&t, 1);
    }
    tb_put(&t, zeros, 64);
    expect_reject(t.b, t.n, &(broken_case){"deep nesting", "deeper than"});
    free(t.b);

    t = header(3, 0, 2); /* duplicate key */
    tb_str(&t, "dup");
    tb_u32(&t, GGUF_U32);
    tb_u32(&t, 1);
    tb_str(&t, "dup");
    tb_u32(&t, GGUF_U32);
    tb_u32(&t, 2);
    expect_reject(t.b, t.n, &(broken_case){"duplicate key", "duplicate metadata key 'dup'"});
    free(t.b);

    t = header(3, 0, 1); /* alignment 13 */
    tb_str(&t, "general.alignment");
    tb_u32(&t, GGUF_U32);
    tb_u32(&t, 13);
    expect_reject(t.b, t.n, &(broken_case){"alignment 13", "not a power of two"});
    free(t.b);

    t = header(3, 0, 1); /* alignment of the wrong type */
    tb_str(&t, "general.alignment");
    tb_u32(&t, GGUF_U64);
    tb_u64(&t, 32);
    expect_reject(t.b, t.n, &(broken_case){"alignment type", "must be u32"});
    free(t.b);

    t = header(3, 1, 0); /* over-long tensor name */
    {
        char name[200];
        memset(name, 'x', sizeof name - 1);
        name[sizeof name - 1] = 0;
        info(&t, name, 1, ne1, GGML_F32, 0);
    }
    expect_reject(t.b, t.n, &(broken_case){"long name", "name length"});
    free(t.b);

    t = header(3, 1, 0); /* n_dims > 4 */
    {
        uint64_t ne5[5] = {1, 1, 1, 1, 1};
        info(&t, "t", 5, ne5, GGML_F32, 0);
    }
    expect_reject(t.b, t.n, &(broken_case){"n_dims 5", "has 5 dimensions"});
    free(t.b);

    t = header(3, 1, 0); /* dim -1 */
    {
        uint64_t ne[2] = {32, UINT64_MAX};
        info(&t, "t", 2, ne, GGML_F32, 0);
    }
    expect_reject(t.b, t.n, &(broken_case){"dim -1", "is negative"});
    free(t.b);

    t = header(3, 1, 0); /* ne 4*INT32_MAX in each dim: element count overflow */
    {
        uint64_t ne[4] = {4ull * INT32_MAX, 4ull * INT32_MAX, 4ull * INT32_MAX, 1};
        info(&t, "t", 4, ne, GGML_F32, 0);
    }
    expect_reject(t.b, t.n, &(broken_case){"ne overflow", "element count overflows"});
    free(t.b);

    t = header(3, 1, 0); /* ne 4*INT32_MAX, one dim: fits int64 but not the file */
    {
        uint64_t ne[1] = {4ull * INT32_MAX};
        info(&t, "t", 1, ne, GGML_F32, 0);
    }
    pad_to(&t, 32);
    expect_reject(t.b, t.n, &(broken_case){"ne 4*INT32_MAX", "extends past the end"});
    free(t.b);

    t = header(3, 1, 0); /* bad ggml type */
    info(&t, "t", 1, ne1, 4, 0); /* 4 = removed Q4_2 */
    expect_reject(t.b, t.n, &(broken_case){"bad type", "unknown ggml type 4"});
    free(t.b);

    t = header(3, 1, 0); /* row not a multiple of the block */
    {
        uint64_t ne[1] = {33};
        info(&t, "t", 1, ne, GGML_Q4_1, 0);
    }
    expect_reject(t.b, t.n, &(broken_case){"partial block", "not a multiple of the Q4_1 block size"});
    free(t.b);

    t = header(3, 1, 0); /* offset -1 */
    info(&t, "t", 1, ne1, GGML_F32, UINT64_MAX);
    pad_to(&t, 32);
    tb_put(&t, zeros, 128);
    expect_reject(t.b, t.n, &(broken_case){"offset -1", "has data offset"});
    free(t.b);

    t = header(3, 2, 0); /* duplicate tensor name */
    info(&t, "same", 1, ne1, GGML_F32, 0);
    info(&t, "same", 1, ne1, GGML_F32, 128);
    pad_to(&t, 32);
    tb_put(&t, zeros, 256);
    expect_reject(t.b, t.n, &(broken_case){"duplicate name", "duplicate tensor name 'same'"});
    free(t.b);

    t = header(3, 2, 0); /* inconsistent alignment: second offset not the padded running sum */
    info(&t, "a", 1, ne1, GGML_Q8_0, 0);
    info(&t, "b", 1, ne1, GGML_Q8_0, 34);
    pad_to(&t, 32);
    tb_put(&t, zeros, 128);
    expect_reject(t.b, t.n, &(broken_case){"unaligned offset", "expected 64"});
    free(t.b);

    t = header(3, 2, 0); /* overlapping tensors */
    info(&t, "a", 2, ne2, GGML_F32, 0);
    info(&t, "b", 1, ne1, GGML_F32, 128);
    pad_to(&t, 32);
    tb_put(&t, zeros, 256);
    expect_reject(t.b, t.n, &(broken_case){"overlap", "expected 256"});
    free(t.b);

    t = header(3, 1, 0); /* data 1 byte short */
    info(&t, "a", 2, ne2, GGML_F32, 0);
    pad_to(&t, 32);
    tb_put(&t, zeros, 255);
    expect_reject(t.b, t.n, &(broken_case){"data short", "extends past the end"});
    free(t.b);

    t = header(3, 0, 1); /* empty key */
    tb_str(&t, "");
    tb_u32(&t, GGUF_U8);
    tb_put(&t, zeros, 8);
    expect_reject(t.b, t.n, &(broken_case){"empty key", "is empty"});
    free(t.b);
}

/* Every prefix of a valid file that cuts into the header or into tensor data is rejected cleanly
 * (ASan checks no byte past the prefix is read); only the zero padding after the last tensor may
 * be missing. */
static void test_truncation_every_byte(void **state) {
    (void)state;
    size_t n;
    uint8_t *img = small_valid(&n, 32);
    gguf_file f;
    assert_int_equal(gguf_parse(&f, img, n, "full.gguf"), 0);
    const gguf_tensor *last = &f.tensors[f.n_tensors - 1];
    size_t essential = (size_t)(f.data_offset + last->offset + last->nbytes);
    gguf_close(&f);
    assert_true(essential < n);
    for (size_t k = 0; k < n; k++) {
        uint8_t *p = malloc(k ? k : 1);
        memcpy(p, img, k);
        int rc = gguf_parse(&f, p, k, "prefix.gguf");
        if (k < essential) {
            if (rc == 0) fail_msg("prefix of %zu of %zu bytes was accepted", k, n);
            if (!strstr(ds_errmsg(), "prefix.gguf")) fail_msg("prefix %zu: message without file name: %s", k, ds_errmsg());
        } else {
            if (rc != 0) fail_msg("prefix of %zu bytes (all data present) rejected: %s", k, ds_errmsg());
            gguf_close(&f);
        }
        free(p);
    }
    free(img);
}

/* arrays nested `levels` deep (the innermost one U8 {5}) as the only key of a tensorless file */
static tbuf nested(int levels) {
    tbuf t = header(3, 0, 1);
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    for (int l = 1; l < levels; l++) {
        tb_u32(&t, GGUF_ARRAY);
        tb_u64(&t, 1);
    }
    tb_u32(&t, GGUF_U8);
    tb_u64(&t, 1);
    tb_put(&t, "\x05", 1);
    return t;
}

/* The typed getters at each end of their ranges and on each wrong type, the array readers, and the
 * parser's limits exactly at the limit: a loosened or tightened bound here passed every other case
 * (the model's hyperparameters are read through gguf_get_int with ranges) */
static void test_getters_at_their_ends(void **state) {
    (void)state;
    gguf_builder g;
    gb_init(&g);
    int32_t i32;
    gb_key(&g, "i.lo", GGUF_I32), i32 = -5, tb_put(&g.kv, &i32, 4);
    gb_key(&g, "i.hi", GGUF_I32), i32 = 7, tb_put(&g.kv, &i32, 4);
    gb_u32(&g, "u.lo", 3);
    gb_u32(&g, "u.hi", 9);
    gb_key(&g, "u64.max", GGUF_U64), tb_u64(&g.kv, (uint64_t)INT64_MAX);
    gb_key(&g, "u64.over", GGUF_U64), tb_u64(&g.kv, (uint64_t)INT64_MAX + 1);
    gb_f32(&g, "f", 1.5f);
    gb_bool(&g, "b", 0);
    gb_str(&g, "s", "x");
    float f32s[2] = {0.5f, -2.0f};
    gb_key(&g, "a.f32", GGUF_ARRAY), tb_u32(&g.kv, GGUF_F32), tb_u64(&g.kv, 2), tb_put(&g.kv, f32s, 8);
    double f64 = 1e-300;
    gb_key(&g, "a.f64", GGUF_ARRAY), tb_u32(&g.kv, GGUF_F64), tb_u64(&g.kv, 1), tb_put(&g.kv, &f64, 8);
    uint64_t u64s[2] = {(uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1};
    gb_key(&g, "a.u64", GGUF_ARRAY), tb_u32(&g.kv, GGUF_U64), tb_u64(&g.kv, 2), tb_put(&g.kv, u64s, 16);
    const char *strs[] = {"1"};
    gb_arr_str(&g, "a.str", strs, 1);
    size_t n;
    uint8_t *img = gb_finish(&g, &n);
    gb_free(&g);
    gguf_file f;
    if (gguf_parse(&f, img, n, "ends.gguf")) fail_msg("%s", ds_errmsg());
    int64_t iv = 42;
    double dv;
    int b;
    const char *s;
    uint64_t sl;
    /* integers: both ends in, one step past each out */
    assert_int_equal(gguf_get_int(&f, "i.lo", -5, 7, &iv), 0);
    assert_int_equal(iv, -5);
    assert_int_equal(gguf_get_int(&f, "i.hi", -5, 7, &iv), 0);
    assert_int_equal(iv, 7);
    assert_int_equal(gguf_get_int(&f, "i.lo", -4, 7, &iv), -1);
    assert_non_null(strstr(ds_errmsg(), "ends.gguf: key 'i.lo' = -5 is outside the valid range -4..7"));
    assert_int_equal(gguf_get_int(&f, "i.hi", -5, 6, &iv), -1);
    assert_int_equal(gguf_get_int(&f, "u.lo", 3, 9, &iv), 0);
    assert_int_equal(iv, 3);
    assert_int_equal(gguf_get_int(&f, "u.hi", 3, 9, &iv), 0);
    assert_int_equal(iv, 9);
    assert_int_equal(gguf_get_int(&f, "u.lo", 4, 9, &iv), -1);
    assert_int_equal(gguf_get_int(&f, "u.hi", 3, 8, &iv), -1);
    assert_int_equal(gguf_get_int(&f, "u64.max", 0, INT64_MAX, &iv), 0);
    assert_true(iv == INT64_MAX);
    assert_int_equal(gguf_get_int(&f, "u64.over", INT64_MIN, INT64_MAX, &iv), -1);
    /* each getter on each other type: -1 naming the type; absent: 1 */
    assert_int_equal(gguf_get_int(&f, "f", INT64_MIN, INT64_MAX, &iv), -1);
    assert_non_null(strstr(ds_errmsg(), "key 'f' has type f32, expected an integer"));
    assert_int_equal(gguf_get_int(&f, "b", INT64_MIN, INT64_MAX, &iv), -1);
    assert_int_equal(gguf_get_int(&f, "s", INT64_MIN, INT64_MAX, &iv), -1);
    assert_int_equal(gguf_get_int(&f, "a.u64", INT64_MIN, INT64_MAX, &iv), -1);
    assert_int_equal(gguf_get_float(&f, "f", &dv), 0);
    assert_true(dv == 1.5);
    assert_int_equal(gguf_get_float(&f, "u.lo", &dv), 0); /* an integer is a number (a freq_base of 10000 as u32) */
    assert_true(dv == 3.0);
    assert_int_equal(gguf_get_float(&f, "i.lo", &dv), 0);
    assert_true(dv == -5.0);
    assert_int_equal(gguf_get_float(&f, "s", &dv), -1);
    assert_non_null(strstr(ds_errmsg(), "key 's' has type string, expected a number"));
    assert_int_equal(gguf_get_float(&f, "b", &dv), -1);
    assert_int_equal(gguf_get_bool(&f, "b", &b), 0);
    assert_int_equal(b, 0);
    assert_int_equal(gguf_get_bool(&f, "u.lo", &b), -1);
    assert_non_null(strstr(ds_errmsg(), "key 'u.lo' has type u32, expected bool"));
    assert_int_equal(gguf_get_str(&f, "s", &s, &sl), 0);
    assert_int_equal(gguf_get_str(&f, "a.str", &s, &sl), -1);
    assert_non_null(strstr(ds_errmsg(), "key 'a.str' has type array, expected string"));
    assert_int_equal(gguf_get_int(&f, "none", 0, 1, &iv), 1);
    assert_int_equal(gguf_get_float(&f, "none", &dv), 1);
    assert_int_equal(gguf_get_bool(&f, "none", &b), 1);
    assert_int_equal(gguf_get_str(&f, "none", &s, &sl), 1);
    /* array elements: the index's end, the element type, a scalar is no array */
    const gguf_value *a = gguf_get(&f, "a.f32");
    assert_int_equal(gguf_arr_float(a, 0, &dv), 0);
    assert_true(dv == 0.5);
    assert_int_equal(gguf_arr_float(a, 1, &dv), 0);
    assert_true(dv == -2.0);
    assert_int_equal(gguf_arr_float(a, 2, &dv), -1);
    assert_int_equal(gguf_arr_int(a, 0, &iv), -1);
    assert_int_equal(gguf_arr_float(gguf_get(&f, "a.f64"), 0, &dv), 0);
    assert_true(dv == 1e-300);
    a = gguf_get(&f, "a.u64");
    assert_int_equal(gguf_arr_float(a, 0, &dv), -1);
    assert_int_equal(gguf_arr_int(a, 0, &iv), 0);
    assert_true(iv == INT64_MAX);
    assert_int_equal(gguf_arr_int(a, 1, &iv), -1); /* 2^63 does not fit */
    assert_int_equal(gguf_arr_int(a, 2, &iv), -1);
    assert_int_equal(gguf_arr_int(gguf_get(&f, "a.str"), 0, &iv), -1);
    assert_int_equal(gguf_arr_float(gguf_get(&f, "a.str"), 0, &dv), -1);
    assert_int_equal(gguf_arr_int(gguf_get(&f, "u.lo"), 0, &iv), -1);
    assert_int_equal(gguf_arr_float(gguf_get(&f, "f"), 0, &dv), -1);
    gguf_close(&f);
    free(img);
    assert_string_equal(gguf_vtype_name(0), "u8");
    assert_string_equal(gguf_vtype_name(GGUF_F64), "f64");
    assert_string_equal(gguf_vtype_name(GGUF_NVTYPES), "invalid");

    /* the parser's limits exactly: GGUF_MAX_DEPTH levels of arrays in, one more out */
    tbuf t = nested(GGUF_MAX_DEPTH);
    if (gguf_parse(&f, t.b, t.n, "deep.gguf")) fail_msg("%d levels refused: %s", GGUF_MAX_DEPTH, ds_errmsg());
    a = gguf_get(&f, "k");
    for (int l = 1; l < GGUF_MAX_DEPTH; l++) a = &a->arr.items[0];
    assert_int_equal(gguf_arr_int(a, 0, &iv), 0);
    assert_int_equal(iv, 5);
    gguf_close(&f);
    free(t.b);
    t = nested(GGUF_MAX_DEPTH + 1);
    expect_reject(t.b, t.n, &(broken_case){"one level too deep", "deeper than 8 levels"});
    free(t.b);
    /* element type 13, the first past the last: refused; a bool array's first element checked too */
    uint8_t zeros[16] = {0};
    t = header(3, 0, 1);
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    tb_u32(&t, GGUF_NVTYPES);
    tb_u64(&t, 1);
    tb_put(&t, zeros, 16);
    expect_reject(t.b, t.n, &(broken_case){"element type 13", "invalid element type 13"});
    free(t.b);
    t = header(3, 0, 1);
    tb_str(&t, "k");
    tb_u32(&t, GGUF_ARRAY);
    tb_u32(&t, GGUF_BOOL);
    tb_u64(&t, 2);
    tb_put(&t, "\x02\x01", 2);
    expect_reject(t.b, t.n, &(broken_case){"bool array led by 2", "element 0 is bool value 2"});
    free(t.b);
    /* a bad magic is shown byte for byte */
    t = header(3, 0, 0);
    memcpy(t.b, "GQUF", 4);
    expect_reject(t.b, t.n, &(broken_case){"bad magic", "47 51 55 46"});
    free(t.b);
}

/* gguf_open on files: missing, not GGUF, a directory */
static void test_open_errors(void **state) {
    (void)state;
    gguf_file f;
    assert_int_equal(gguf_open(&f, "/nonexistent/model.gguf"), -1);
    assert_non_null(strstr(ds_errmsg(), "/nonexistent/model.gguf"));
    const char *p = tmp_path("text.gguf");
    write_file(p, "this is plain text, not a model file at all\n", 44);
    assert_int_equal(gguf_open(&f, p), -1);
    assert_non_null(strstr(ds_errmsg(), "not a GGUF file"));
    remove(p);
    assert_int_equal(gguf_open(&f, "/tmp"), -1);
    assert_non_null(strstr(ds_errmsg(), "not a regular file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_all_types),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_getters_at_their_ends),
        cmocka_unit_test(test_truncation_every_byte),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
