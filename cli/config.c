#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"

void run_config_defaults(run_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->scheduler, sizeof c->scheduler, "fixed");
    c->gamma = 4;
    snprintf(c->datasets[0], sizeof c->datasets[0], "builtin");
    c->n_datasets = 1;
    c->sp = (sampling_params){0.0f, 0, 1.0f};
    c->seed = 1;
    c->max_new = 128;
    c->baseline = 1;
    c->concurrency = 1;
}

void run_config_free(run_config *c) {
    cJSON_Delete(c->drafter_cfg);
    cJSON_Delete(c->scheduler_cfg);
    c->drafter_cfg = c->scheduler_cfg = NULL;
}

static int get_str(const cJSON *v, const char *key, char *dst, size_t n, const char *what) {
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n) {
        ds_error("%s: '%s' must be a string (at most %zu characters)", what, key, n - 1);
        return -1;
    }
    snprintf(dst, n, "%s", v->valuestring);
    return 0;
}

static int get_int(const cJSON *v, const char *key, long lo, long hi, long *out, const char *what) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        ds_error("%s: '%s' must be an integer in %ld..%ld", what, key, lo, hi);
        return -1;
    }
    *out = (long)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *v, const char *key, double lo, double hi, double *out, const char *what) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        ds_error("%s: '%s' must be a number in [%g, %g]", what, key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

/* "name" or {"name": ..., other keys...}: the name, and the object without it */
static int get_module(const cJSON *v, const char *key, char *name, size_t n, cJSON **cfg, const char *what) {
    if (cJSON_IsString(v)) {
        cJSON_Delete(*cfg);
        *cfg = NULL;
        return get_str(v, key, name, n, what);
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(nm)) {
        ds_error("%s: '%s' must be a name or an object with a \"name\"", what, key);
        return -1;
    }
    if (get_str(nm, key, name, n, what)) return -1;
    cJSON_Delete(*cfg);
    *cfg = cJSON_Duplicate(v, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(*cfg, "name");
    return 0;
}

int run_config_apply(run_config *c, const cJSON *j, const char *what) {
    if (!cJSON_IsObject(j)) {
        ds_error("%s: the config must be a JSON object", what);
        return -1;
    }
    for (const cJSON *v = j->child; v; v = v->next) {
        const char *k = v->string;
        long iv;
        double dv;
        if (strcmp(k, "target") == 0) {
            if (!cJSON_IsNull(v) && get_str(v, k, c->target, sizeof c->target, what)) return -1;
        } else if (strcmp(k, "drafter") == 0) {
            if (cJSON_IsNull(v)) c->drafter[0] = 0;
            else if (get_module(v, k, c->drafter, sizeof c->drafter, &c->drafter_cfg, what)) return -1;
        } else if (strcmp(k, "scheduler") == 0) {
            if (get_module(v, k, c->scheduler, sizeof c->scheduler, &c->scheduler_cfg, what)) return -1;
        } else if (strcmp(k, "gamma") == 0) {
            if (get_int(v, k, 1, 64, &iv, what)) return -1;
            c->gamma = (int)iv;
        } else if (strcmp(k, "datasets") == 0 || strcmp(k, "dataset") == 0) {
            c->n_datasets = 0;
            if (cJSON_IsString(v)) {
                if (get_str(v, k, c->datasets[0], sizeof c->datasets[0], what)) return -1;
                c->n_datasets = 1;
            } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 && cJSON_GetArraySize(v) <= 16) {
                for (const cJSON *e = v->child; e; e = e->next)
                    if (get_str(e, k, c->datasets[c->n_datasets++], sizeof c->datasets[0], what)) return -1;
            } else {
                ds_error("%s: '%s' must be a name or an array of 1..16 names", what, k);
                return -1;
            }
        } else if (strcmp(k, "limit") == 0) {
            if (get_int(v, k, 0, 1000000, &iv, what)) return -1;
            c->limit = (int)iv;
        } else if (strcmp(k, "strict") == 0) {
            if (!cJSON_IsBool(v)) goto bad_bool;
            c->strict = cJSON_IsTrue(v);
        } else if (strcmp(k, "data_root") == 0) {
            if (get_str(v, k, c->data_root, sizeof c->data_root, what)) return -1;
        } else if (strcmp(k, "temperature") == 0) {
            if (get_num(v, k, 0, 100, &dv, what)) return -1;
            c->sp.temperature = (float)dv;
        } else if (strcmp(k, "top_p") == 0) {
            if (get_num(v, k, 1e-6, 1, &dv, what)) return -1;
            c->sp.top_p = (float)dv;
        } else if (strcmp(k, "top_k") == 0) {
            if (get_int(v, k, 0, 1 << 22, &iv, what)) return -1;
            c->sp.top_k = (int)iv;
        } else if (strcmp(k, "seed") == 0) {
            if (get_int(v, k, 0, 9007199254740991L, &iv, what)) return -1;
            c->seed = (uint64_t)iv;
        } else if (strcmp(k, "max_new_tokens") == 0) {
            if (get_int(v, k, 1, 1 << 20, &iv, what)) return -1;
            c->max_new = (int)iv;
        } else if (strcmp(k, "threads") == 0) {
            if (get_int(v, k, 0, 256, &iv, what)) return -1;
            c->threads = (int)iv;
        } else if (strcmp(k, "out") == 0) {
            if (get_str(v, k, c->out, sizeof c->out, what)) return -1;
        } else if (strcmp(k, "baseline") == 0) {
            if (!cJSON_IsBool(v)) goto bad_bool;
            c->baseline = cJSON_IsTrue(v);
        } else if (strcmp(k, "concurrency") == 0) {
            if (get_int(v, k, 1, 256, &iv, what)) return -1;
            c->concurrency = (int)iv;
        } else if (strcmp(k, "sps") == 0) {
            if (get_str(v, k, c->sps, sizeof c->sps, what)) return -1;
        } else if (strcmp(k, "comment") == 0 || strcmp(k, "description") == 0) {
            /* free text for people reading the config */
        } else {
            ds_error("%s: unknown key '%s'", what, k);
            return -1;
        }
        continue;
    bad_bool:
        ds_error("%s: '%s' must be true or false", what, k);
        return -1;
    }
    return 0;
}

int run_config_load(run_config *c, const char *path) {
    cJSON *j = ds_read_json(path);
    if (!j) return -1;
    int rc = run_config_apply(c, j, path);
    cJSON_Delete(j);
    return rc;
}

cJSON *run_config_json(const run_config *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target", c->target);
    if (c->drafter[0]) {
        cJSON *d = c->drafter_cfg ? cJSON_Duplicate(c->drafter_cfg, 1) : cJSON_CreateObject();
        cJSON_AddStringToObject(d, "name", c->drafter);
        cJSON_AddItemToObject(j, "drafter", d);
    } else {
        cJSON_AddNullToObject(j, "drafter");
    }
    cJSON *s = c->scheduler_cfg ? cJSON_Duplicate(c->scheduler_cfg, 1) : cJSON_CreateObject();
    cJSON_AddStringToObject(s, "name", c->scheduler);
    cJSON_AddItemToObject(j, "scheduler", s);
    cJSON_AddNumberToObject(j, "gamma", c->gamma);
    cJSON *ds = cJSON_AddArrayToObject(j, "datasets");
    for (int i = 0; i < c->n_datasets; i++) cJSON_AddItemToArray(ds, cJSON_CreateString(c->datasets[i]));
    cJSON_AddNumberToObject(j, "limit", c->limit);
    cJSON_AddBoolToObject(j, "strict", c->strict);
    cJSON_AddStringToObject(j, "data_root", c->data_root);
    cJSON_AddNumberToObject(j, "temperature", c->sp.temperature);
    cJSON_AddNumberToObject(j, "top_p", c->sp.top_p);
    cJSON_AddNumberToObject(j, "top_k", c->sp.top_k);
    cJSON_AddNumberToObject(j, "seed", (double)c->seed);
    cJSON_AddNumberToObject(j, "max_new_tokens", c->max_new);
    cJSON_AddNumberToObject(j, "threads", c->threads);
    cJSON_AddStringToObject(j, "out", c->out);
    cJSON_AddBoolToObject(j, "baseline", c->baseline);
    cJSON_AddNumberToObject(j, "concurrency", c->concurrency);
    cJSON_AddStringToObject(j, "sps", c->sps);
    return j;
}
