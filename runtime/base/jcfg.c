#include "jcfg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

int jcfg_check_unique(const cJSON *obj, const char *path) {
    for (const cJSON *a = obj ? obj->child : NULL; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && strcmp(a->string, b->string) == 0) {
                ds_error("%s: key '%s' appears twice", path, a->string);
                return -1;
            }
    return 0;
}

int jcfg_open(jcfg *c, const cJSON *obj, const char *path) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    if (!obj) return 0;
    if (!cJSON_IsObject(obj)) {
        ds_error("%s must be a JSON object", path);
        return -1;
    }
    if (cJSON_GetArraySize(obj) > JCFG_MAX_KEYS) {
        ds_error("%s: more than %d keys", path, JCFG_MAX_KEYS);
        return -1;
    }
    c->obj = obj;
    return jcfg_check_unique(obj, path);
}

const cJSON *jcfg_get(jcfg *c, const char *key) {
    if (c->n_asked < JCFG_MAX_KEYS) c->asked[c->n_asked++] = key;
    int i = 0;
    for (const cJSON *v = c->obj ? c->obj->child : NULL; v; v = v->next, i++)
        if (v->string && strcmp(v->string, key) == 0) {
            c->used |= 1ull << i;
            return v;
        }
    return NULL;
}

void jcfg_skip(jcfg *c, const char *key) { (void)jcfg_get(c, key); }

int jcfg_integral(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
           v->valuedouble <= hi;
}

int jcfg_long(jcfg *c, const char *key, long lo, long hi, long *out) {
    const cJSON *v = jcfg_get(c, key);
    if (!v) return 0;
    if (!jcfg_integral(v, (double)lo, (double)hi)) {
        ds_error("%s: '%s' must be an integer in %ld..%ld", c->path, key, lo, hi);
        return -1;
    }
    *out = (long)v->valuedouble;
    return 0;
}

int jcfg_int(jcfg *c, const char *key, long lo, long hi, int *out) {
    long x = *out;
    if (jcfg_long(c, key, lo, hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

int jcfg_u64(jcfg *c, const char *key, uint64_t *out) {
    const cJSON *v = jcfg_get(c, key);
    if (!v) return 0;
    if (!jcfg_integral(v, 0, 9007199254740992.0)) {
        ds_error("%s: '%s' must be an integer in 0..2^53", c->path, key);
        return -1;
    }
    *out = (uint64_t)v->valuedouble;
    return 0;
}

int jcfg_double(jcfg *c, const char *key, double lo, double hi, double *out) {
    const cJSON *v = jcfg_get(c, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        ds_error("%s: '%s' must be a number in [%g, %g]", c->path, key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

int jcfg_float(jcfg *c, const char *key, double lo, double hi, float *out) {
    double x = *out;
    if (jcfg_double(c, key, lo, hi, &x)) return -1;
    *out = (float)x;
    return 0;
}

int jcfg_floats(jcfg *c, const char *key, int max, double lo, double hi, float *out, int *n) {
    const cJSON *a = jcfg_get(c, key);
    if (!a) return 0;
    int k = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || k > max) {
        ds_error("%s: '%s' must be an array of at most %d numbers", c->path, key, max);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble > lo && v->valuedouble < hi)) {
            ds_error("%s: '%s'[%d] must be a number in (%g, %g)", c->path, key, i, lo, hi);
            return -1;
        }
        out[i] = (float)v->valuedouble;
    }
    *n = k;
    return 0;
}

int jcfg_ints(jcfg *c, const char *key, int min_n, int max_n, long lo, long hi, int *out, int *n) {
    const cJSON *a = jcfg_get(c, key);
    if (!a) return 0;
    int k = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || k < min_n || k > max_n) {
        ds_error("%s: '%s' must be an array of %d..%d integers", c->path, key, min_n, max_n);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!jcfg_integral(v, (double)lo, (double)hi)) {
            ds_error("%s: '%s'[%d] must be an integer in [%ld, %ld]", c->path, key, i, lo, hi);
            return -1;
        }
        out[i] = (int)v->valuedouble;
    }
    *n = k;
    return 0;
}

int jcfg_str(jcfg *c, const char *key, const char **out) {
    const cJSON *v = jcfg_get(c, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) {
        ds_error("%s: '%s' must be a string", c->path, key);
        return -1;
    }
    *out = v->valuestring;
    return 0;
}

int jcfg_strcpy(jcfg *c, const char *key, char *dst, size_t n) {
    const char *s = NULL;
    if (jcfg_str(c, key, &s)) return -1;
    if (!s) return 0;
    if (strlen(s) >= n) {
        ds_error("%s: '%s' is longer than %zu characters", c->path, key, n - 1);
        return -1;
    }
    snprintf(dst, n, "%s", s);
    return 0;
}

int jcfg_bool(jcfg *c, const char *key, int *out) {
    const cJSON *v = jcfg_get(c, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) {
        ds_error("%s: '%s' must be true or false", c->path, key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

int jcfg_close(jcfg *c) {
    int i = 0;
    for (const cJSON *v = c->obj ? c->obj->child : NULL; v; v = v->next, i++) {
        if (c->used >> i & 1) continue;
        char known[512];
        int w = 0;
        known[0] = 0;
        for (int k = 0; k < c->n_asked && w < (int)sizeof known - 1; k++) {
            int dup = 0;
            for (int m = 0; m < k; m++) dup |= strcmp(c->asked[m], c->asked[k]) == 0;
            if (!dup) w += snprintf(known + w, sizeof known - (size_t)w, "%s%s", w ? ", " : "", c->asked[k]);
        }
        ds_error("%s: unknown key '%s' (known: %s)", c->path, v->string ? v->string : "?", w ? known : "none");
        return -1;
    }
    return 0;
}

int jcfg_diff(const cJSON *want, const cJSON *have, char *msg, size_t n) {
    for (const cJSON *w = want ? want->child : NULL; w; w = w->next) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
        char *a = cJSON_PrintUnformatted(w), *b = h ? cJSON_PrintUnformatted(h) : NULL;
        int differ = !a || !b || strcmp(a, b) != 0;
        if (differ) snprintf(msg, n, "%s = %s, now %s", w->string, b ? b : "(not recorded)", a ? a : "?");
        free(a), free(b);
        if (differ) return 1;
    }
    return 0;
}

int jcfg_each_record(const char *path, jcfg_record_fn fn, void *ctx) {
    char *txt;
    size_t n, i = 0;
    if (ds_read_file(path, &txt, &n)) return -1;
    int rc = 0, index = 0;
    while (i < n && (txt[i] == ' ' || txt[i] == '\n' || txt[i] == '\r' || txt[i] == '\t')) i++;
    if (i < n && txt[i] == '[') {
        size_t stop;
        int why;
        cJSON *arr = ds_json_parse(txt, n, &stop, &why);
        free(txt);
        if (!cJSON_IsArray(arr)) {
            cJSON_Delete(arr);
            if (arr || why == DS_JSON_BAD) ds_error("%s: not a valid JSON array of records", path);
            else ds_error("%s: %s at byte %zu", path, ds_json_why(why), stop);
            return -1;
        }
        for (const cJSON *r = arr->child; r && rc == 0; r = r->next, index++) rc = fn(ctx, r, index, index + 1, path);
        cJSON_Delete(arr);
        return rc;
    }
    int line = 0;
    for (size_t a = 0; a < n && rc == 0;) {
        char *nl = memchr(txt + a, '\n', n - a);
        size_t b = nl ? (size_t)(nl - txt) : n, s = a;
        line++;
        while (s < b && (txt[s] == ' ' || txt[s] == '\t' || txt[s] == '\r')) s++; /* a blank line of a CRLF file */
        if (b > s) {
            size_t stop;
            int why;
            cJSON *r = ds_json_parse(txt + s, b - s, &stop, &why);
            if (!r) {
                if (why == DS_JSON_BAD) ds_error("%s:%d: malformed or truncated JSON line", path, line);
                else ds_error("%s:%d: %s at column %zu (one JSON record a line)", path, line, ds_json_why(why), s - a + stop + 1);
                rc = -1;
            } else
                rc = fn(ctx, r, index++, line, path);
            cJSON_Delete(r);
        }
        a = b + 1;
    }
    free(txt);
    return rc;
}
