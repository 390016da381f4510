/* safetensors.h — reader and writer for the safetensors container.
 *
 * Reader rules (as huggingface/safetensors `validate`): header length capped at 100 MB and inside
 * the file, header is a JSON object, no duplicate names, every dtype known, shape x dtype size
 * computed with overflow checks and equal to the byte range, and the byte ranges, sorted, tile the
 * data buffer exactly (start at 0, no gap, no overlap, end at the end of the file). */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER 100000000ull
#define ST_MAX_DIMS 8

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_U16, ST_U32, ST_U64, ST_BOOL,
               ST_F8_E4M3, ST_F8_E5M2, ST_NDTYPES } st_dtype;

typedef struct {
    char *name;
    st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;   /* relative to the data buffer */
    const uint8_t *data;
} st_tensor;

typedef struct {
    char *name;
    const uint8_t *image;
    size_t size;
    int mapped;
    int n_tensors;
    st_tensor *tensors;
} st_file;

int st_open(st_file *f, const char *path);
int st_parse(st_file *f, const uint8_t *image, size_t size, const char *name);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
/* After a reader took its tensors (taken[i] = 1 for f->tensors[i]; except: one more name it accepts
 * unread, or NULL): -1 naming the first tensor left, which the reader would silently not use (a
 * layer a hand-edited config.json no longer counts). */
int st_check_taken(const st_file *f, const uint8_t *taken, const char *except);
const char *st_dtype_name(st_dtype t);
int st_dtype_size(st_dtype t);
uint64_t st_numel(const st_tensor *t);
/* Convert a F32/F16/BF16 tensor to fp32 (n = numel). -1 with a message for other dtypes. */
int st_to_f32(const st_file *f, const st_tensor *t, float *dst);

/* Writer: tensors are fp32 in memory, stored as `dtype` (F32, F16 or BF16). Metadata is an
 * optional list of string pairs. Written to PATH.tmp and renamed, so a crash leaves no half file. */
typedef struct {
    const char *name;
    const float *data;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
} st_write_tensor;
int st_write(const char *path, const st_write_tensor *t, int n, st_dtype dtype, const char *const *meta_kv, int n_meta);

#endif
