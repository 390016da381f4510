#include "gguf.h"

#include <string.h>

#include "../base/common.h"
#include "quant.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_KEY 65535 /* bytes; keys are short ASCII identifiers */

/* A bounds-checked reader over the image; every read names what it was reading. */
typedef struct {
    const uint8_t *p;
    size_t n, pos;
    const char *name;
} cursor;

static size_t left(const cursor *c) { return c->n - c->pos; }

static int rd(cursor *c, void *out, size_t k, const char *what) {
    if (left(c) < k) {
        ds_error("%s: file truncated: %s at offset %zu needs %zu bytes, only %zu left", c->name, what,
                 c->pos, k, left(c));
        return -1;
    }
    memcpy(out, c->p + c->pos, k);
    c->pos += k;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* gguf_str: u64 length then bytes. max bounds keys; values are bounded by the file alone. */
static int rd_str(cursor *c, const char **s, uint64_t *len, uint64_t max, const char *what) {
    uint64_t n;
    if (rd_u64(c, &n, what)) return -1;
    if (n > left(c)) {
        ds_error("%s: %s at offset %zu has length %llu, beyond the end of the file (%zu bytes left)",
                 c->name, what, c->pos - 8, (unsigned long long)n, left(c));
        return -1;
    }
    if (n > max) {
        ds_error("%s: %s at offset %zu has length %llu, over the limit of %llu", c->name, what,
                 c->pos - 8, (unsigned long long)n, (unsigned long long)max);
        return -1;
    }
    *s = (const char *)c->p + c->pos;
    *len = n;
    c->pos += n;
    return 0;
}

static const int SCALAR_SIZE[GGUF_NVTYPES] = {
    [GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
    [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

static const char *VTYPE_NAMES[GGUF_NVTYPES] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};

const char *gguf_vtype_name(uint32_t t) { return t < GGUF_NVTYPES ? VTYPE_NAMES[t] : "invalid"; }

/* Decode one packed scalar of type t at p into v (no bounds check: callers checked the span). */
static void decode_scalar(uint32_t t, const uint8_t *p, gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_U8: case GGUF_BOOL: v->u = p[0]; break;
    case GGUF_I8: v->i = (int8_t)p[0]; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); v->u = x; break; }
    case GGUF_I16: { int16_t x; memcpy(&x, p, 2); v->i = x; break; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); v->u = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, p, 4); v->i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, p, 4); v->f = x; break; }
    case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); v->u = x; break; }
    case GGUF_I64: { int64_t x; memcpy(&x, p, 8); v->i = x; break; }
    case GGUF_F64: { double x; memcpy(&x, p, 8); v->f = x; break; }
    default: break;
    }
}

static void free_value(gguf_value *v) {
    if (v->type == GGUF_ARRAY && v->arr.items) {
        if (v->arr.type == GGUF_ARRAY)
            for (uint64_t i = 0; i < v->arr.n; i++) free_value(&v->arr.items[i]);
        free(v->arr.items);
        v->arr.items = NULL;
    }
}

static int parse_value(cursor *c, uint32_t type, int depth, gguf_value *v, const char *key) {
    memset(v, 0, sizeof *v);
    v->type = type;
    if (type >= GGUF_NVTYPES) {
        ds_error("%s: key '%s' has invalid value type %u", c->name, key, type);
        return -1;
    }
    if (type == GGUF_STRING) return rd_str(c, &v->str.s, &v->str.len, UINT64_MAX, "string value");
    if (type != GGUF_ARRAY) {
        uint8_t buf[8];
        if (rd(c, buf, (size_t)SCALAR_SIZE[type], "scalar value")) return -1;
        if (type == GGUF_BOOL && buf[0] > 1) {
            ds_error("%s: key '%s' has bool value %u (must be 0 or 1)", c->name, key, buf[0]);
            return -1;
        }
        decode_scalar(type, buf, v);
        return 0;
    }
    /* array: element type, count, elements */
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, "array element type") || rd_u64(c, &n, "array length")) return -1;
    if (et >= GGUF_NVTYPES) {
        ds_error("%s: key '%s' is an array of invalid element type %u", c->name, key, et);
        return -1;
    }
    if (depth >= GGUF_MAX_DEPTH) {
        ds_error("%s: key '%s' nests arrays deeper than %d levels", c->name, key, GGUF_MAX_DEPTH);
        return -1;
    }
    v->arr.type = et;
    /* smallest encoding of one element: bounds the count before anything is allocated */
    uint64_t min_elem = et == GGUF_STRING ? 8 : et == GGUF_ARRAY ? 12 : (uint64_t)SCALAR_SIZE[et];
    if (n > left(c) / min_elem) {
        ds_error("%s: key '%s' is an array of %llu %s elements, more than the %zu bytes left in the "
                 "file can hold",
                 c->name, key, (unsigned long long)n, gguf_vtype_name(et), left(c));
        return -1;
    }
    v->arr.n = n;
    if (et != GGUF_STRING && et != GGUF_ARRAY) {
        v->arr.raw = c->p + c->pos;
        if (et == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (v->arr.raw[i] > 1) {
                    ds_error("%s: key '%s' element %llu is bool value %u (must be 0 or 1)", c->name, key,
                             (unsigned long long)i, v->arr.raw[i]);
                    return -1;
                }
        c->pos += n * min_elem;
        return 0;
    }
    v->arr.items = ds_calloc(n, sizeof(gguf_value), "gguf array");
    if (!v->arr.items) return -1;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t sub_t = et;
        if (et == GGUF_ARRAY) {
            /* nested: each element is itself (element type, count, elements) */
            if (parse_value(c, GGUF_ARRAY, depth + 1, &v->arr.items[i], key)) {
                v->arr.n = i + 1; /* free only what was parsed */
                return -1;
            }
            continue;
        }
        if (parse_value(c, sub_t, depth + 1, &v->arr.items[i], key)) {
            v->arr.n = i + 1;
            return -1;
        }
    }
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Reject duplicate names in O(n log n): a crafted file may hold millions of entries. */
static int check_unique(const char **names, uint64_t n, const char *fname, const char *what) {
    if (n < 2) return 0;
    qsort(names, n, sizeof *names, cmp_str_ptr);
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            ds_error("%s: duplicate %s '%s'", fname, what, names[i]);
            return -1;
        }
    return 0;
}

int gguf_parse(gguf_file *g, const uint8_t *image, size_t size, const char *name) {
    memset(g, 0, sizeof *g);
    const char **names = NULL;
    uint64_t n_kv_parsed = 0;
    cursor c = {image, size, 0, name};
    DS_TRYP(g->name = ds_strndup(name, strlen(name), "file name"));
    c.name = g->name;
    g->image = image;
    g->size = size;

    char magic[4];
    DS_TRY(rd(&c, magic, 4, "magic"));
    DS_CHECK(memcmp(magic, GGUF_MAGIC, 4) == 0, "%s: not a GGUF file (magic bytes %02x %02x %02x %02x, expected 'GGUF')",
             name, (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    DS_TRY(rd_u32(&c, &g->version, "version"));
    DS_CHECK(g->version != 1, "%s: GGUF version 1 is not supported (only version 3, and 2)", name);
    DS_CHECK(g->version == 2 || g->version == 3, "%s: unsupported GGUF version %u (this reader knows 2 and 3)",
             name, g->version);
    DS_TRY(rd_u64(&c, &g->n_tensors, "tensor count"));
    DS_TRY(rd_u64(&c, &g->n_kv, "metadata count"));
    /* minimal encodings: a KV is >= 8+1+4+1 bytes, a tensor info >= 8+1+4+4+8 */
    DS_CHECK(g->n_kv <= left(&c) / 14, "%s: metadata count %llu cannot fit in the %zu bytes left in the file",
             name, (unsigned long long)g->n_kv, left(&c));
    DS_CHECK(g->n_tensors <= left(&c) / 25, "%s: tensor count %llu cannot fit in the %zu bytes left in the file",
             name, (unsigned long long)g->n_tensors, left(&c));

    DS_TRYP(g->kv = ds_calloc(g->n_kv, sizeof(gguf_kv), "gguf metadata"));
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *ks;
        uint64_t kl;
        uint32_t vt;
        DS_TRY(rd_str(&c, &ks, &kl, GGUF_MAX_KEY, "metadata key"));
        DS_CHECK(kl > 0, "%s: metadata key %llu is empty", name, (unsigned long long)i);
        DS_CHECK(memchr(ks, 0, kl) == NULL, "%s: metadata key %llu contains a NUL byte", name, (unsigned long long)i);
        DS_TRYP(g->kv[i].key = ds_strndup(ks, kl, "gguf key"));
        n_kv_parsed = i + 1;
        DS_TRY(rd_u32(&c, &vt, "value type"));
        if (parse_value(&c, vt, 0, &g->kv[i].val, g->kv[i].key)) goto fail;
        if (strcmp(g->kv[i].key, "general.alignment") == 0) {
            const gguf_value *v = &g->kv[i].val;
            DS_CHECK(v->type == GGUF_U32, "%s: general.alignment has type %s, must be u32", name, gguf_vtype_name(v->type));
            DS_CHECK(v->u != 0 && (v->u & (v->u - 1)) == 0, "%s: general.alignment %llu is not a power of two", name,
                     (unsigned long long)v->u);
            g->alignment = (uint32_t)v->u;
        }
    }
    DS_TRYP(names = ds_calloc(DS_MAX(g->n_kv, g->n_tensors), sizeof *names, "name index"));
    for (uint64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    DS_TRY(check_unique(names, g->n_kv, name, "metadata key"));

    DS_TRYP(g->tensors = ds_calloc(g->n_tensors, sizeof(gguf_tensor), "gguf tensor infos"));
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        const char *ns;
        uint64_t nl;
        DS_TRY(rd_str(&c, &ns, &nl, UINT64_MAX, "tensor name"));
        DS_CHECK(nl > 0 && nl < GGUF_MAX_NAME, "%s: tensor %llu name length %llu is outside 1..%d", name,
                 (unsigned long long)i, (unsigned long long)nl, GGUF_MAX_NAME - 1);
        memcpy(t->name, ns, nl);
        DS_CHECK(strlen(t->name) == nl, "%s: tensor %llu name contains a NUL byte", name, (unsigned long long)i);
        DS_TRY(rd_u32(&c, &t->n_dims, "tensor dimension count"));
        DS_CHECK(t->n_dims <= GGUF_MAX_DIMS, "%s: tensor '%s' has %u dimensions (at most %d)", name, t->name,
                 t->n_dims, GGUF_MAX_DIMS);
        uint64_t nelem = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if ((uint32_t)d < t->n_dims) DS_TRY(rd_u64(&c, &ne, "tensor dimension"));
            DS_CHECK(ne <= (uint64_t)INT64_MAX, "%s: tensor '%s' dimension %d is negative (%lld)", name, t->name, d,
                     (long long)ne);
            t->ne[d] = (int64_t)ne;
            DS_CHECK(ds_mul_u64(nelem, ne, &nelem) == 0 && nelem <= (uint64_t)INT64_MAX,
                     "%s: tensor '%s' element count overflows", name, t->name);
        }
        DS_TRY(rd_u32(&c, &t->type, "tensor type"));
        const ggml_type_info *ti = ggml_type_get(t->type);
        DS_CHECK(ti != NULL, "%s: tensor '%s' has unknown ggml type %u", name, t->name, t->type);
        DS_CHECK(t->ne[0] % ti->blck == 0, "%s: tensor '%s' row length %lld is not a multiple of the %s block size %d",
                 name, t->name, (long long)t->ne[0], ti->name, ti->blck);
        uint64_t row_bytes, nb;
        DS_CHECK(ds_mul_u64((uint64_t)t->ne[0] / (uint64_t)ti->blck, (uint64_t)ti->size, &row_bytes) == 0 &&
                     ds_mul_u64(row_bytes, nelem / (t->ne[0] ? (uint64_t)t->ne[0] : 1), &nb) == 0,
                 "%s: tensor '%s' byte size overflows", name, t->name);
        t->nbytes = t->ne[0] ? nb : 0;
        DS_TRY(rd_u64(&c, &t->offset, "tensor data offset"));
        names[i] = t->name;
    }
    DS_TRY(check_unique(names, g->n_tensors, name, "tensor name"));

    /* the data section starts at the next alignment boundary after the infos */
    DS_CHECK(ds_pad_u64(c.pos, g->alignment, &g->data_offset) == 0, "%s: data offset overflows", name);
    uint64_t expect = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        DS_CHECK(t->offset == expect,
                 "%s: tensor '%s' has data offset %llu, expected %llu (offsets must be the aligned running sum of "
                 "tensor sizes)",
                 name, t->name, (unsigned long long)t->offset, (unsigned long long)expect);
        uint64_t start, end;
        DS_CHECK(ds_add_u64(g->data_offset, t->offset, &start) == 0 && ds_add_u64(start, t->nbytes, &end) == 0 &&
                     end <= size,
                 "%s: tensor '%s' data (%llu bytes at offset %llu) extends past the end of the file (%zu bytes)", name,
                 t->name, (unsigned long long)t->nbytes, (unsigned long long)(g->data_offset + t->offset), size);
        t->data = image + start;
        uint64_t padded;
        DS_CHECK(ds_pad_u64(t->nbytes, g->alignment, &padded) == 0 && ds_add_u64(expect, padded, &expect) == 0,
                 "%s: tensor sizes overflow", name);
    }
    free(names);
    return 0;
fail:
    free(names);
    /* free what was parsed so far */
    if (g->kv) {
        for (uint64_t i = 0; i < n_kv_parsed; i++) {
            free(g->kv[i].key);
            free_value(&g->kv[i].val);
        }
    }
    free(g->kv);
    free(g->tensors);
    free(g->name);
    memset(g, 0, sizeof *g);
    return -1;
}

int gguf_open(gguf_file *g, const char *path) {
    memset(g, 0, sizeof *g);
    const uint8_t *map;
    size_t size;
    if (ds_map_file(path, 24, "a GGUF header", &map, &size)) return -1;
    if (gguf_parse(g, map, size, path)) {
        ds_unmap(map, size);
        return -1;
    }
    g->mapped = 1;
    return 0;
}

void gguf_close(gguf_file *g) {
    if (!g->name) return;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free_value(&g->kv[i].val);
    }
    free(g->kv);
    free(g->tensors);
    free(g->name);
    if (g->mapped) ds_unmap(g->image, g->size);
    memset(g, 0, sizeof *g);
}

const gguf_value *gguf_get(const gguf_file *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i].val;
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

static int is_int_type(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
           t == GGUF_U64 || t == GGUF_I64;
}
static int is_signed(uint32_t t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

int gguf_get_int(const gguf_file *g, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const gguf_value *v = gguf_get(g, key);
    if (!v) return 1;
    if (!is_int_type(v->type)) {
        ds_error("%s: key '%s' has type %s, expected an integer", g->name, key, gguf_vtype_name(v->type));
        return -1;
    }
    if (is_signed(v->type) ? (v->i < lo || v->i > hi) : (v->u > (uint64_t)INT64_MAX || (int64_t)v->u < lo || (int64_t)v->u > hi)) {
        ds_error("%s: key '%s' = %lld is outside the valid range %lld..%lld", g->name, key,
                 is_signed(v->type) ? (long long)v->i : (long long)v->u, (long long)lo, (long long)hi);
        return -1;
    }
    *out = is_signed(v->type) ? v->i : (int64_t)v->u;
    return 0;
}

int gguf_get_float(const gguf_file *g, const char *key, double *out) {
    const gguf_value *v = gguf_get(g, key);
    if (!v) return 1;
    if (v->type == GGUF_F32 || v->type == GGUF_F64) *out = v->f;
    else if (is_int_type(v->type)) *out = is_signed(v->type) ? (double)v->i : (double)v->u;
    else {
        ds_error("%s: key '%s' has type %s, expected a number", g->name, key, gguf_vtype_name(v->type));
        return -1;
    }
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out) {
    const gguf_value *v = gguf_get(g, key);
    if (!v) return 1;
    if (v->type != GGUF_BOOL) {
        ds_error("%s: key '%s' has type %s, expected bool", g->name, key, gguf_vtype_name(v->type));
        return -1;
    }
    *out = (int)v->u;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len) {
    const gguf_value *v = gguf_get(g, key);
    if (!v) return 1;
    if (v->type != GGUF_STRING) {
        ds_error("%s: key '%s' has type %s, expected string", g->name, key, gguf_vtype_name(v->type));
        return -1;
    }
    *s = v->str.s;
    *len = v->str.len;
    return 0;
}

int gguf_arr_int(const gguf_value *arr, uint64_t i, int64_t *out) {
    if (arr->type != GGUF_ARRAY || !is_int_type(arr->arr.type) || i >= arr->arr.n) return -1;
    gguf_value v;
    decode_scalar(arr->arr.type, arr->arr.raw + i * (uint64_t)SCALAR_SIZE[arr->arr.type], &v);
    if (!is_signed(v.type) && v.u > (uint64_t)INT64_MAX) return -1;
    *out = is_signed(v.type) ? v.i : (int64_t)v.u;
    return 0;
}

int gguf_arr_float(const gguf_value *arr, uint64_t i, double *out) {
    if (arr->type != GGUF_ARRAY || (arr->arr.type != GGUF_F32 && arr->arr.type != GGUF_F64) || i >= arr->arr.n)
        return -1;
    gguf_value v;
    decode_scalar(arr->arr.type, arr->arr.raw + i * (uint64_t)SCALAR_SIZE[arr->arr.type], &v);
    *out = v.f;
    return 0;
}
