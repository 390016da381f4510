#include "gguf_writer.h"

#include <stdlib.h>
#include <string.h>

#include "../base/common.h"
#include "gguf.h"

void gw_put(gw_buf *t, const void *p, size_t n) {
    if (t->oom) return;
    if (t->n + n > t->cap) {
        size_t cap = (t->n + n) * 2 + 64;
        uint8_t *nb = realloc(t->b, cap);
        if (!nb) {
            t->oom = 1;
            return;
        }
        t->b = nb;
        t->cap = cap;
    }
    if (n) memcpy(t->b + t->n, p, n);
    t->n += n;
}
void gw_u32(gw_buf *t, uint32_t v) { gw_put(t, &v, 4); }
void gw_u64(gw_buf *t, uint64_t v) { gw_put(t, &v, 8); }
void gw_str(gw_buf *t, const char *s) {
    gw_u64(t, strlen(s));
    gw_put(t, s, strlen(s));
}

void gw_init(gguf_writer *g) {
    memset(g, 0, sizeof *g);
    g->alignment = 32;
}
void gw_free(gguf_writer *g) {
    free(g->kv.b);
    free(g->info.b);
    free(g->data.b);
    memset(g, 0, sizeof *g);
}
void gw_key(gguf_writer *g, const char *key, uint32_t type) {
    gw_str(&g->kv, key);
    gw_u32(&g->kv, type);
    g->n_kv++;
}
void gw_kv_u32(gguf_writer *g, const char *key, uint32_t v) {
    gw_key(g, key, GGUF_U32);
    gw_u32(&g->kv, v);
}
void gw_kv_i32(gguf_writer *g, const char *key, int32_t v) {
    gw_key(g, key, GGUF_I32);
    gw_put(&g->kv, &v, 4);
}
void gw_kv_f32(gguf_writer *g, const char *key, float v) {
    gw_key(g, key, GGUF_F32);
    gw_put(&g->kv, &v, 4);
}
void gw_kv_bool(gguf_writer *g, const char *key, int v) {
    uint8_t b = (uint8_t)v;
    gw_key(g, key, GGUF_BOOL);
    gw_put(&g->kv, &b, 1);
}
void gw_kv_str(gguf_writer *g, const char *key, const char *v) {
    gw_key(g, key, GGUF_STRING);
    gw_str(&g->kv, v);
}
void gw_kv_arr_str(gguf_writer *g, const char *key, const char *const *v, int n) {
    gw_key(g, key, GGUF_ARRAY);
    gw_u32(&g->kv, GGUF_STRING);
    gw_u64(&g->kv, (uint64_t)n);
    for (int i = 0; i < n; i++) gw_str(&g->kv, v[i]);
}
void gw_kv_arr_i32(gguf_writer *g, const char *key, const int32_t *v, int n) {
    gw_key(g, key, GGUF_ARRAY);
    gw_u32(&g->kv, GGUF_I32);
    gw_u64(&g->kv, (uint64_t)n);
    gw_put(&g->kv, v, 4 * (size_t)n);
}

void gw_tensor(gguf_writer *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *bytes,
               size_t nbytes) {
    gw_str(&g->info, name);
    gw_u32(&g->info, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) gw_u64(&g->info, (uint64_t)ne[d]);
    gw_u32(&g->info, type);
    gw_u64(&g->info, g->data.n); /* offset: the aligned running sum */
    gw_put(&g->data, bytes, nbytes);
    while (g->data.n % g->alignment && !g->data.oom) gw_put(&g->data, "", 1);
    g->n_tensors++;
}

uint8_t *gw_finish(gguf_writer *g, size_t *size) {
    gw_buf out = {0};
    gw_put(&out, "GGUF", 4);
    gw_u32(&out, 3);
    gw_u64(&out, g->n_tensors);
    gw_u64(&out, g->n_kv);
    gw_put(&out, g->kv.b, g->kv.n);
    gw_put(&out, g->info.b, g->info.n);
    while (out.n % g->alignment && !out.oom) gw_put(&out, "", 1);
    gw_put(&out, g->data.b, g->data.n);
    if (out.oom || g->kv.oom || g->info.oom || g->data.oom) {
        free(out.b);
        ds_error("out of memory building a GGUF image");
        return NULL;
    }
    *size = out.n;
    return out.b;
}
