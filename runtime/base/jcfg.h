/* jcfg.h — the one typed reader of JSON config objects (run and train configs, drafter and
 * scheduler objects, checkpoint config.json).
 *
 * Open an object with the path it sits at ("exp.json", "exp.json: data", "drafter"), read each key
 * through a typed getter (absent keys leave the destination as it is), then close: any key no
 * getter asked for is an error naming its full path and the known keys, so a typo is never
 * silently ignored. Duplicate keys, wrong types, non-integral or out-of-range integers (a seed of
 * 1.5 or 1e300) are errors too. Every error names the key's path. */
#ifndef DS_JCFG_H
#define DS_JCFG_H

#include <cJSON.h>
#include <stdint.h>

#define JCFG_MAX_KEYS 64

typedef struct {
    const cJSON *obj;             /* NULL: an absent object (every getter finds nothing) */
    char path[160];
    const char *asked[JCFG_MAX_KEYS];
    int n_asked;
    uint64_t used;                /* bit i: the i-th member was read */
} jcfg;

/* obj may be NULL (absent); anything else must be an object with at most JCFG_MAX_KEYS distinct keys */
int jcfg_open(jcfg *c, const cJSON *obj, const char *path);
const cJSON *jcfg_get(jcfg *c, const char *key);  /* the raw item (marked as read), or NULL */
int jcfg_int(jcfg *c, const char *key, long lo, long hi, int *out);
int jcfg_long(jcfg *c, const char *key, long lo, long hi, long *out);
int jcfg_u64(jcfg *c, const char *key, uint64_t *out); /* an integer in 0 .. 2^53 (exact in JSON) */
int jcfg_float(jcfg *c, const char *key, double lo, double hi, float *out);
int jcfg_double(jcfg *c, const char *key, double lo, double hi, double *out);
int jcfg_str(jcfg *c, const char *key, const char **out);          /* points into the JSON */
int jcfg_strcpy(jcfg *c, const char *key, char *dst, size_t n);    /* copied, length checked */
int jcfg_bool(jcfg *c, const char *key, int *out);
/* an array of at most max numbers, each in (lo, hi) open: out[0..*n) (untouched when absent) */
int jcfg_floats(jcfg *c, const char *key, int max, double lo, double hi, float *out, int *n);
/* an array of min_n..max_n integers, each in [lo, hi]: out[0..*n) (untouched when absent) */
int jcfg_ints(jcfg *c, const char *key, int min_n, int max_n, long lo, long hi, int *out, int *n);
void jcfg_skip(jcfg *c, const char *key);
/* an item (an array's element, say) that is a finite integral number in [lo, hi], tested before any
 * conversion: casting 1e300 or inf to an integer type is undefined behaviour */
int jcfg_integral(const cJSON *v, double lo, double hi);   /* a known key read elsewhere (e.g. free text) */
int jcfg_close(jcfg *c);                    /* -1 on the first key nobody read */

/* The first field of want that have lacks or holds differently: 1 and "key = have's value, wanted
 * want's value" in msg; 0 when every field of want matches (for contracts recorded on disk). */
int jcfg_diff(const cJSON *want, const cJSON *have, char *msg, size_t n);

/* An object's keys are unique (cJSON keeps duplicates as separate members). */
int jcfg_check_unique(const cJSON *obj, const char *path);

/* Every record of a file of records, a JSON array or JSON lines (one object a '\n'-separated line,
 * empty lines skipped), handed to fn in order: index counts records from 0, line is the record's
 * line in a JSONL file (index + 1 in an array). A line that does not parse is an error naming
 * path:line; fn's error stops the walk. */
typedef int (*jcfg_record_fn)(void *ctx, const cJSON *rec, int index, int line, const char *path);
int jcfg_each_record(const char *path, jcfg_record_fn fn, void *ctx);

#endif
