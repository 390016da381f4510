/* gguf.h — GGUF v3 container reader (header, typed metadata incl. nested arrays, tensor infos).
 *
 * The parser works on an in-memory image (a read-only mmap of the file, or a buffer for tests and
 * the fuzzer). Every count, length, offset and dimension is checked against fixed limits and the
 * remaining bytes before it is used or allocated; tensor offsets must be the aligned running sum
 * of the tensor sizes (as llama.cpp requires), so data ranges are in the file and disjoint. */
#ifndef DS_GGUF_H
#define DS_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_NVTYPES = 13
};

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64        /* tensor names, as ggml's GGML_MAX_NAME (incl. NUL) */
#define GGUF_MAX_DEPTH 8        /* array nesting */
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_value {
    uint32_t type;
    union {
        uint64_t u;                                  /* U8..U64, BOOL */
        int64_t i;                                   /* I8..I64 */
        double f;                                    /* F32, F64 */
        struct { const char *s; uint64_t len; } str; /* points into the image, not NUL-terminated */
        struct {
            uint32_t type;                           /* element type */
            uint64_t n;                              /* element count */
            const uint8_t *raw;                      /* packed fixed-size elements (scalars) */
            struct gguf_value *items;                /* parsed elements (STRING / ARRAY) */
        } arr;
    };
} gguf_value;

typedef struct {
    char *key; /* NUL-terminated copy */
    gguf_value val;
} gguf_kv;

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    uint32_t type;
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const uint8_t *data;       /* into the image */
} gguf_tensor;

typedef struct {
    char *name;                /* file path or buffer label, used in messages */
    const uint8_t *image;
    size_t size;
    int mapped;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset;
} gguf_file;

/* Map and parse a file. -1 with a message "PATH: problem" on any error (g is then empty). */
int gguf_open(gguf_file *g, const char *path);
/* Parse an image owned by the caller (not copied; must outlive g). */
int gguf_parse(gguf_file *g, const uint8_t *image, size_t size, const char *name);
void gguf_close(gguf_file *g);

const gguf_value *gguf_get(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
const char *gguf_vtype_name(uint32_t t);

/* Typed getters: 0 = found and converted, 1 = key absent, -1 = present with a wrong type or an
 * out-of-range value (message set). */
int gguf_get_int(const gguf_file *g, const char *key, int64_t lo, int64_t hi, int64_t *out);
int gguf_get_float(const gguf_file *g, const char *key, double *out);
int gguf_get_bool(const gguf_file *g, const char *key, int *out);
int gguf_get_str(const gguf_file *g, const char *key, const char **s, uint64_t *len);
/* Array element as integer (any integer element type); -1 if not an integer array. */
int gguf_arr_int(const gguf_value *arr, uint64_t i, int64_t *out);
int gguf_arr_float(const gguf_value *arr, uint64_t i, double *out);

#endif
