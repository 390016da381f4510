/* common.h — error reporting, checked arithmetic, allocation and timing shared by every module.
 *
 * Library code never exits: a function that can fail returns 0 (or a non-NULL pointer) on success
 * and -1 (or NULL) on failure, after recording one human-readable message with ds_error(). Only
 * cli/ turns that message into "dspark-bench: error: ..." and a non-zero exit status. */
#ifndef DS_COMMON_H
#define DS_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define DSPARK_VERSION "0.3.0"

#define DS_UNUSED(x) ((void)(x))
#define DS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DS_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Record the error message of the failing call (thread-local, last one wins). */
void ds_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepend context to the current message: "ctx: <old message>". */
void ds_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ds_errmsg(void);
void ds_error_clear(void);

/* Fail-fast helpers for functions that use a single `fail:` cleanup label. */
#define DS_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ds_error(__VA_ARGS__);                                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
#define DS_TRY(call)                                                                               \
    do {                                                                                           \
        if ((call) != 0) goto fail;                                                                \
    } while (0)
#define DS_TRYP(ptr_expr)                                                                          \
    do {                                                                                           \
        if ((ptr_expr) == NULL) goto fail;                                                         \
    } while (0)

/* Allocation that records "out of memory (N bytes for what)" instead of crashing. */
void *ds_malloc(size_t n, const char *what);
void *ds_calloc(size_t n, size_t size, const char *what);
void *ds_realloc(void *p, size_t n, const char *what);
void *ds_aligned_alloc(size_t n, const char *what); /* 64-byte aligned, release with free() */
void *ds_huge_alloc(size_t n, const char *what);    /* 2 MB aligned, huge pages advised; release with free() */
char *ds_strndup(const char *s, size_t n, const char *what);

/* Checked arithmetic: return 0 and store the result, or -1 on overflow. */
static inline int ds_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
static inline int ds_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r) ? -1 : 0; }
static inline int ds_mul_size(size_t a, size_t b, size_t *r) { return __builtin_mul_overflow(a, b, r) ? -1 : 0; }
/* Round x up to a multiple of align (a power of two); -1 on overflow. */
static inline int ds_pad_u64(uint64_t x, uint64_t align, uint64_t *r) {
    uint64_t t;
    if (ds_add_u64(x, align - 1, &t)) return -1;
    *r = t & ~(align - 1);
    return 0;
}

/* Monotonic wall clock in seconds. */
double ds_now(void);

/* Read-only mmap of a regular file of at least min_size bytes (else "truncated: ... smaller than
 * <what>"); -1 with a message naming the path. Release with ds_unmap. */
int ds_map_file(const char *path, size_t min_size, const char *what, const uint8_t **map, size_t *size);
void ds_unmap(const uint8_t *map, size_t size);
/* The whole pages of [p, p + n) inside the mapping [map, map + size) leave this process's resident set
 * (madvise DONTNEED): for a mapping from ds_map_file only, whose pages come back from the file when read
 * again. Returns the bytes released (0 when the range is not inside the mapping). */
size_t ds_release_mapped(const uint8_t *map, size_t size, const void *p, size_t n);

/* Whole-file read into a NUL-terminated heap buffer; -1 with a message naming the path. */
/* Write n bytes to path.<pid>.tmp, then rename over path: path is always the old or the new file,
 * never a partial one. Errors name the file and errno's reason. */
int ds_write_file_atomic(const char *path, const void *data, size_t n);
int ds_read_file(const char *path, char **out, size_t *len);

/* A whole JSON file parsed (free with cJSON_Delete); NULL with a message naming the path and, for
 * bad JSON, the line where the parser stopped. */
struct cJSON;
struct cJSON *ds_read_json(const char *path);
/* txt[0..n) parsed as exactly one JSON value with nothing but whitespace after it and no \u0000 in it
 * (cJSON alone stops at the end of the first value, so `{"a": 1} {"b": 2}` read as its first object
 * and the rest was lost; and a "\u0000" ends its C string, so "abc\u0000def" read as "abc"). NULL if
 * not; then *stop (optional) = the byte offset of the problem and *why (optional) one of DS_JSON_*,
 * which ds_json_why names ("text after the JSON value", ...). */
enum { DS_JSON_OK, DS_JSON_BAD, DS_JSON_TRAILING, DS_JSON_NUL };
struct cJSON *ds_json_parse(const char *txt, size_t n, size_t *stop, int *why);
const char *ds_json_why(int why);
/* 1 when a and b name one file: the same text, or both present with the same device and inode (an
 * output about to replace an input is refused with it) */
int ds_same_file(const char *a, const char *b);
/* j written to path, indented, whole or not at all (ds_write_file_atomic). */
int ds_write_json(const struct cJSON *j, const char *path);

/* mkdir -p of a folder (what names it in the message); ds_mkdirs_for makes the folder a file
 * path lives in. -1 with a message naming the folder and the reason. */
int ds_mkdirs(const char *dir, const char *what);
int ds_mkdirs_for(const char *path, const char *what);

/* Progress line on stderr: "\r<label> done/total  rate unit/s  ETA mm:ss" (rewritten in place). */
typedef struct {
    const char *label;
    const char *unit;
    double t0, last;
    long total;
} ds_progress;
void ds_progress_start(ds_progress *p, const char *label, const char *unit, long total);
void ds_progress_update(ds_progress *p, long done, const char *extra);
void ds_progress_end(ds_progress *p);

#endif
