/* sps.c — SPS(B) cost tables: steps per second of the target at B tokens per forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "scheduler.h"

void sps_free(sps_table *t) {
    free(t->B);
    free(t->seconds);
    memset(t, 0, sizeof *t);
}

static int sps_alloc(sps_table *t, int n) {
    memset(t, 0, sizeof *t);
    t->B = ds_malloc(sizeof(int) * (size_t)n, "SPS table");
    t->seconds = ds_malloc(sizeof(double) * (size_t)n, "SPS table");
    if (!t->B || !t->seconds) {
        sps_free(t);
        return -1;
    }
    t->n = n;
    return 0;
}

static int sps_check(sps_table *t, const char *what) {
    for (int i = 0; i < t->n; i++) {
        /* a time of 1e-310 s is a rate of infinity: nothing between a nanosecond and 11 days is a forward */
        if (t->B[i] < 1 || !(t->seconds[i] >= 1e-9 && t->seconds[i] <= 1e6) || (i > 0 && t->B[i] <= t->B[i - 1])) {
            ds_error("%s: SPS table entry %d (B=%d, %g s) is invalid: B must increase from 1, times be 1e-9..1e6 s", what, i,
                     t->B[i], t->seconds[i]);
            sps_free(t);
            return -1;
        }
    }
    return 0;
}

int sps_from_arrays(sps_table *t, const int *B, const double *steps_per_s, int n) {
    if (n < 1) {
        ds_error("SPS table needs at least one entry");
        return -1;
    }
    if (sps_alloc(t, n)) return -1;
    for (int i = 0; i < n; i++) {
        t->B[i] = B[i];
        t->seconds[i] = steps_per_s[i] > 0 ? 1.0 / steps_per_s[i] : -1;
    }
    return sps_check(t, "SPS table");
}

int sps_from_json(sps_table *t, const cJSON *root, const char *what) {
    memset(t, 0, sizeof *t);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "sps");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "B"), *sec = cJSON_GetObjectItemCaseSensitive(s, "seconds");
    int n = cJSON_GetArraySize(b);
    if (!cJSON_IsArray(b) || !cJSON_IsArray(sec) || n < 1 || cJSON_GetArraySize(sec) != n) {
        ds_error("%s: needs \"sps\": {\"B\": [...], \"seconds\": [...]} of equal non-zero length", what);
        return -1;
    }
    if (sps_alloc(t, n)) return -1;
    for (int i = 0; i < n; i++) {
        const cJSON *bi = cJSON_GetArrayItem(b, i), *si = cJSON_GetArrayItem(sec, i);
        /* a B of 2.7 would be read as 2 and a time of 1e999 as infinity: both refused, never rounded */
        if (!jcfg_integral(bi, 1, 1 << 24) || !cJSON_IsNumber(si)) {
            ds_error("%s: SPS entry %d: B must be an integer 1..%d and seconds a number", what, i, 1 << 24);
            sps_free(t);
            return -1;
        }
        t->B[i] = bi->valueint;
        t->seconds[i] = si->valuedouble;
    }
    return sps_check(t, what);
}

int sps_load(sps_table *t, const char *path) {
    memset(t, 0, sizeof *t);
    cJSON *j = ds_read_json(path);
    if (!j) return -1;
    int rc = sps_from_json(t, j, path);
    cJSON_Delete(j);
    return rc;
}

double sps_at(const sps_table *t, int B) {
    double sec;
    if (t->n == 1) sec = t->seconds[0] * B / t->B[0];
    else {
        int i = 0;
        while (i < t->n - 2 && B > t->B[i + 1]) i++; /* segment [i, i+1] covers B or is the nearest end */
        double slope = (t->seconds[i + 1] - t->seconds[i]) / (t->B[i + 1] - t->B[i]);
        sec = t->seconds[i] + slope * (B - t->B[i]);
        if (sec <= 0) sec = t->seconds[0]; /* never extrapolate to a free step */
    }
    return 1.0 / sec;
}

double sps_seconds(const sps_table *t, int B) { return t && t->n > 0 ? 1.0 / sps_at(t, B) : 0; }
