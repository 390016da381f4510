/* gguf_writer.h — building GGUF files in memory: metadata of any type, tensors of any type with
 * offsets as the aligned running sum. Used for tiny random models (tests, the losslessness gate)
 * and by tests that craft broken files from raw bytes (gw_buf). */
#ifndef DS_GGUF_WRITER_H
#define DS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *b;
    size_t n, cap;
    int oom;       /* an allocation failed; gw_finish reports it */
} gw_buf;

void gw_put(gw_buf *t, const void *p, size_t n);
void gw_u32(gw_buf *t, uint32_t v);
void gw_u64(gw_buf *t, uint64_t v);
void gw_str(gw_buf *t, const char *s); /* gguf_str: u64 length + bytes */

typedef struct {
    gw_buf kv, info, data;
    uint64_t n_kv, n_tensors;
    uint32_t alignment;
} gguf_writer;

void gw_init(gguf_writer *g);
void gw_free(gguf_writer *g);
void gw_key(gguf_writer *g, const char *key, uint32_t type); /* then the value's bytes into g->kv */
void gw_kv_u32(gguf_writer *g, const char *key, uint32_t v);
void gw_kv_i32(gguf_writer *g, const char *key, int32_t v);
void gw_kv_f32(gguf_writer *g, const char *key, float v);
void gw_kv_bool(gguf_writer *g, const char *key, int v);
void gw_kv_str(gguf_writer *g, const char *key, const char *v);
void gw_kv_arr_str(gguf_writer *g, const char *key, const char *const *v, int n);
void gw_kv_arr_i32(gguf_writer *g, const char *key, const int32_t *v, int n);
/* a tensor: ne[0] innermost; bytes in the given ggml type */
void gw_tensor(gguf_writer *g, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *bytes,
               size_t nbytes);
/* the whole file image (caller frees), or NULL with a message */
uint8_t *gw_finish(gguf_writer *g, size_t *size);

#endif
