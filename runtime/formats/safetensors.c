#include "safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "../base/common.h"
#include "quant.h"

static const struct { const char *name; int size; } DTYPES[ST_NDTYPES] = {
    [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},  [ST_F64] = {"F64", 8},
    [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},    [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},     [ST_U16] = {"U16", 2},   [ST_U32] = {"U32", 4},    [ST_U64] = {"U64", 8},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(st_dtype t) { return (unsigned)t < ST_NDTYPES ? DTYPES[t].name : "?"; }
int st_dtype_size(st_dtype t) { return (unsigned)t < ST_NDTYPES ? DTYPES[t].size : 0; }

uint64_t st_numel(const st_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (uint64_t)t->shape[i]; /* checked at parse time */
    return n;
}

/* A JSON number that is a non-negative integer exactly representable in a double. */
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || floor(v) != v) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}
static int cmp_name(const void *a, const void *b) { return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name); }

int st_parse(st_file *f, const uint8_t *image, size_t size, const char *name) {
    memset(f, 0, sizeof *f);
    cJSON *root = NULL;
    DS_TRYP(f->name = ds_strndup(name, strlen(name), "file name"));
    f->image = image;
    f->size = size;
    uint64_t hlen;
    DS_CHECK(size >= 8, "%s: file truncated: %zu bytes is smaller than the 8-byte header length", name, size);
    memcpy(&hlen, image, 8);
    DS_CHECK(hlen <= ST_MAX_HEADER, "%s: header length %llu exceeds the 100 MB limit", name, (unsigned long long)hlen);
    DS_CHECK(hlen <= size - 8, "%s: header length %llu runs past the end of the file (%zu bytes)", name,
             (unsigned long long)hlen, size);
    DS_CHECK(hlen >= 2 && image[8] == '{', "%s: header does not start with '{'", name);
    size_t stop;
    int why;
    root = ds_json_parse((const char *)image + 8, (size_t)hlen, &stop, &why);
    DS_CHECK(root || why == DS_JSON_BAD, "%s: header: %s at byte %zu (it may be padded with spaces only)", name,
             ds_json_why(why), stop);
    DS_CHECK(root && cJSON_IsObject(root), "%s: header is not a valid JSON object", name);
    uint64_t data_size = size - 8 - hlen;
    int n = 0;
    for (cJSON *c = root->child; c; c = c->next) n++;
    DS_TRYP(f->tensors = ds_calloc((size_t)n, sizeof(st_tensor), "safetensors index"));
    for (cJSON *c = root->child; c; c = c->next) {
        DS_CHECK(c->string != NULL, "%s: header entry without a name", name);
        if (strcmp(c->string, "__metadata__") == 0) {
            DS_CHECK(cJSON_IsObject(c), "%s: __metadata__ is not an object", name);
            for (cJSON *m = c->child; m; m = m->next)
                DS_CHECK(cJSON_IsString(m), "%s: __metadata__ value '%s' is not a string", name, m->string ? m->string : "?");
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        DS_TRYP(t->name = ds_strndup(c->string, strlen(c->string), "tensor name"));
        f->n_tensors++;
        DS_CHECK(cJSON_IsObject(c), "%s: tensor '%s' entry is not an object", name, t->name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(c, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(c, "data_offsets");
        DS_CHECK(cJSON_IsString(dt), "%s: tensor '%s' has no string 'dtype'", name, t->name);
        int found = -1;
        for (int k = 0; k < ST_NDTYPES; k++)
            if (strcmp(dt->valuestring, DTYPES[k].name) == 0) found = k;
        DS_CHECK(found >= 0, "%s: tensor '%s' has unknown dtype '%s'", name, t->name, dt->valuestring);
        t->dtype = (st_dtype)found;
        DS_CHECK(cJSON_IsArray(sh), "%s: tensor '%s' has no 'shape' array", name, t->name);
        int nd = cJSON_GetArraySize(sh);
        DS_CHECK(nd <= ST_MAX_DIMS, "%s: tensor '%s' has %d dimensions (at most %d)", name, t->name, nd, ST_MAX_DIMS);
        t->n_dims = nd;
        uint64_t numel = 1, nbytes;
        int d = 0;
        for (const cJSON *e = sh->child; e; e = e->next, d++) {
            uint64_t v;
            DS_CHECK(json_uint(e, &v) == 0, "%s: tensor '%s' shape[%d] is not a non-negative integer", name, t->name, d);
            t->shape[d] = (int64_t)v;
            DS_CHECK(ds_mul_u64(numel, v, &numel) == 0, "%s: tensor '%s' element count overflows", name, t->name);
        }
        DS_CHECK(ds_mul_u64(numel, (uint64_t)DTYPES[t->dtype].size, &nbytes) == 0,
                 "%s: tensor '%s' byte size overflows", name, t->name);
        DS_CHECK(cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2 && json_uint(off->child, &t->begin) == 0 &&
                     json_uint(off->child->next, &t->end) == 0,
                 "%s: tensor '%s' needs 'data_offsets' [begin, end] of non-negative integers", name, t->name);
        DS_CHECK(t->begin <= t->end && t->end <= data_size,
                 "%s: tensor '%s' data_offsets [%llu, %llu] are not inside the %llu-byte data buffer", name, t->name,
                 (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_size);
        DS_CHECK(t->end - t->begin == nbytes,
                 "%s: tensor '%s' occupies %llu bytes but shape x %s needs %llu", name, t->name,
                 (unsigned long long)(t->end - t->begin), DTYPES[t->dtype].name, (unsigned long long)nbytes);
        t->data = image + 8 + hlen + t->begin;
    }
    /* names unique */
    qsort(f->tensors, (size_t)f->n_tensors, sizeof(st_tensor), cmp_name);
    for (int i = 1; i < f->n_tensors; i++)
        DS_CHECK(strcmp(f->tensors[i - 1].name, f->tensors[i].name) != 0, "%s: duplicate tensor name '%s'", name,
                 f->tensors[i].name);
    /* byte ranges tile the data buffer exactly */
    st_tensor *by_off = NULL;
    if (f->n_tensors) {
        DS_TRYP(by_off = ds_malloc(sizeof(st_tensor) * (size_t)f->n_tensors, "offset index"));
        memcpy(by_off, f->tensors, sizeof(st_tensor) * (size_t)f->n_tensors);
        qsort(by_off, (size_t)f->n_tensors, sizeof(st_tensor), cmp_begin);
    }
    uint64_t pos = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        if (by_off[i].begin != pos) {
            ds_error("%s: tensor '%s' starts at byte %llu of the data buffer, expected %llu (%s)", name, by_off[i].name,
                     (unsigned long long)by_off[i].begin, (unsigned long long)pos,
                     by_off[i].begin > pos ? "gap before it" : "overlaps the previous tensor");
            free(by_off);
            goto fail;
        }
        pos = by_off[i].end;
    }
    free(by_off);
    DS_CHECK(pos == data_size, "%s: tensors cover %llu bytes but the data buffer holds %llu (trailing bytes)", name,
             (unsigned long long)pos, (unsigned long long)data_size);
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->name);
    memset(f, 0, sizeof *f);
    return -1;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    const uint8_t *map;
    size_t size;
    if (ds_map_file(path, 8, "the 8-byte header length", &map, &size)) return -1;
    if (st_parse(f, map, size, path)) {
        ds_unmap(map, size);
        return -1;
    }
    f->mapped = 1;
    return 0;
}

void st_close(st_file *f) {
    if (!f->name) return;
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->mapped) ds_unmap(f->image, f->size);
    free(f->name);
    memset(f, 0, sizeof *f);
}

int st_check_taken(const st_file *f, const uint8_t *taken, const char *except) {
    int left = 0, first = -1;
    for (int i = 0; i < f->n_tensors; i++)
        if (!taken[i] && !(except && strcmp(f->tensors[i].name, except) == 0)) {
            left++;
            if (first < 0) first = i;
        }
    if (!left) return 0;
    ds_error("%s: tensor '%s' is not read by this model's configuration (%d of %d tensors unread): the "
             "checkpoint and its config.json disagree", f->name, f->tensors[first].name, left, f->n_tensors);
    return -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    /* tensors are sorted by name after parsing */
    int lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int st_to_f32(const st_file *f, const st_tensor *t, float *dst) {
    /* the same decoders as GGUF tensors of these types */
    uint32_t gt = t->dtype == ST_F32 ? GGML_F32 : t->dtype == ST_F16 ? GGML_F16 : t->dtype == ST_BF16 ? GGML_BF16 : 0xffff;
    if (gt == 0xffff) {
        ds_error("%s: tensor '%s' has dtype %s; only F32, F16 and BF16 can be loaded", f->name, t->name,
                 st_dtype_name(t->dtype));
        return -1;
    }
    ggml_type_get(gt)->to_float(t->data, dst, (int64_t)st_numel(t));
    return 0;
}

static int cmp_wname(const void *a, const void *b) {
    return strcmp(((const st_write_tensor *)a)->name, ((const st_write_tensor *)b)->name);
}

int st_write(const char *path, const st_write_tensor *tens, int n, st_dtype dtype, const char *const *meta_kv, int n_meta) {
    char tmp[4096];
    FILE *fp = NULL;
    char *hdr = NULL;
    st_write_tensor *t = NULL;
    cJSON *root = cJSON_CreateObject();
    DS_CHECK(dtype == ST_F32 || dtype == ST_F16 || dtype == ST_BF16, "%s: can only write F32, F16 or BF16", path);
    DS_CHECK(snprintf(tmp, sizeof tmp, "%s.tmp", path) < (int)sizeof tmp, "%s: path too long", path);
    DS_TRYP(t = ds_malloc(sizeof *t * (size_t)(n ? n : 1), "tensor list"));
    memcpy(t, tens, sizeof *t * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_wname); /* deterministic layout: sorted by name */
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]);
    }
    uint64_t off = 0;
    int es = DTYPES[dtype].size;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", DTYPES[dtype].name);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        uint64_t numel = 1;
        for (int d = 0; d < t[i].n_dims; d++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        off += numel * (uint64_t)es;
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
    }
    DS_TRYP(hdr = cJSON_PrintUnformatted(root));
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7; /* data buffer starts 8-aligned */
    fp = fopen(tmp, "wb");
    DS_CHECK(fp != NULL, "%s: cannot create: %s", tmp, strerror(errno));
    uint64_t h64 = padded;
    DS_CHECK(fwrite(&h64, 8, 1, fp) == 1 && fwrite(hdr, 1, hl, fp) == hl, "%s: write failed: %s", tmp, strerror(errno));
    for (size_t i = hl; i < padded; i++) DS_CHECK(fputc(' ', fp) != EOF, "%s: write failed: %s", tmp, strerror(errno));
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].n_dims; d++) numel *= (uint64_t)t[i].shape[d];
        if (dtype == ST_F32) {
            DS_CHECK(fwrite(t[i].data, 4, numel, fp) == numel, "%s: write failed: %s", tmp, strerror(errno));
        } else {
            for (uint64_t k = 0; k < numel; k++) {
                uint16_t h = dtype == ST_F16 ? ds_f32_to_f16(t[i].data[k]) : ds_f32_to_bf16(t[i].data[k]);
                DS_CHECK(fwrite(&h, 2, 1, fp) == 1, "%s: write failed: %s", tmp, strerror(errno));
            }
        }
    }
    DS_CHECK(fclose(fp) == 0, "%s: close failed: %s", tmp, strerror(errno));
    fp = NULL;
    DS_CHECK(rename(tmp, path) == 0, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    free(hdr);
    free(t);
    cJSON_Delete(root);
    return 0;
fail:
    if (fp) {
        fclose(fp);
        remove(tmp);
    }
    free(hdr);
    free(t);
    cJSON_Delete(root);
    return -1;
}
