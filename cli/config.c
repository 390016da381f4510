#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../verify/verify.h"

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
    snprintf(c->backend, sizeof c->backend, "cpu");
    snprintf(c->isa, sizeof c->isa, "auto");
    snprintf(c->verifier, sizeof c->verifier, "token");
}

void run_config_free(run_config *c) {
    cJSON_Delete(c->drafter_cfg);
    cJSON_Delete(c->scheduler_cfg);
    cJSON_Delete(c->serve_cfg);
    c->drafter_cfg = c->scheduler_cfg = c->serve_cfg = NULL;
}

static int take_str(const cJSON *v, const char *path, char *dst, size_t n) {
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n) {
        ds_error("%s must be a string of at most %zu characters", path, n - 1);
        return -1;
    }
    snprintf(dst, n, "%s", v->valuestring);
    return 0;
}

/* "drafter"/"scheduler": "name" or {"name": ..., settings...}. From a config file the object
 * replaces what was there. From the command line (merge) the settings go into the configured
 * object, and naming a different family while the config holds settings of its own is an error:
 * `--draft-layers 20` must not quietly turn a checkpoint drafter into a vanilla one. */
static int apply_module(const cJSON *v, const char *key, char *name, size_t n, cJSON **cfg, int merge,
                        const char *what) {
    char path[200], newname[64] = "";
    snprintf(path, sizeof path, "%s: %s", what, key);
    const cJSON *nm = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "name") : v;
    if (!cJSON_IsObject(v) && !cJSON_IsString(v)) {
        ds_error("%s must be a name or an object with a \"name\"", path);
        return -1;
    }
    if (nm && take_str(nm, path, newname, sizeof newname)) return -1;
    if (cJSON_IsObject(v) && jcfg_check_unique(v, path)) return -1;
    int has_settings = *cfg && (*cfg)->child;
    if (merge && name[0] && newname[0] && strcmp(newname, name) != 0 && has_settings) {
        char *txt = cJSON_PrintUnformatted(*cfg);
        ds_error("%s: '%s' would replace the configured %s '%s' %s; change the config instead", what, newname, key, name,
                 txt ? txt : "");
        free(txt);
        return -1;
    }
    if (!newname[0] && !(merge && name[0])) {
        ds_error("%s needs a \"name\"", path);
        return -1;
    }
    int same = !newname[0] || strcmp(newname, name) == 0;
    if (!(merge && same) || !*cfg) { /* a fresh object */
        cJSON_Delete(*cfg);
        *cfg = cJSON_CreateObject();
        if (!*cfg) return -1;
    }
    if (newname[0]) snprintf(name, n, "%s", newname);
    for (const cJSON *e = cJSON_IsObject(v) ? v->child : NULL; e; e = e->next) {
        if (strcmp(e->string, "name") == 0) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(*cfg, e->string);
        cJSON_AddItemToObject(*cfg, e->string, cJSON_Duplicate(e, 1));
    }
    return 0;
}

int run_config_apply(run_config *c, const cJSON *j, const char *what, int merge) {
    jcfg r;
    const cJSON *v;
    if (jcfg_open(&r, j, what)) return -1;
    if (!j) {
        ds_error("%s: the config must be a JSON object", what);
        return -1;
    }
    if ((v = jcfg_get(&r, "target")) && !cJSON_IsNull(v) && take_str(v, "target", c->target, sizeof c->target)) goto bad;
    if ((v = jcfg_get(&r, "drafter"))) {
        if (cJSON_IsNull(v)) c->drafter[0] = 0;
        else if (apply_module(v, "drafter", c->drafter, sizeof c->drafter, &c->drafter_cfg, merge, what)) return -1;
    }
    if ((v = jcfg_get(&r, "scheduler")) &&
        apply_module(v, "scheduler", c->scheduler, sizeof c->scheduler, &c->scheduler_cfg, merge, what))
        return -1;
    if ((v = jcfg_get(&r, "serve"))) { /* checked key by key by the serve command */
        if (!cJSON_IsObject(v)) {
            ds_error("%s: serve must be an object", what);
            return -1;
        }
        cJSON_Delete(c->serve_cfg);
        if (!(c->serve_cfg = cJSON_Duplicate(v, 1))) return -1;
    }
    const cJSON *ds = jcfg_get(&r, "datasets"), *d1 = jcfg_get(&r, "dataset");
    if (ds && d1) {
        ds_error("%s: give 'datasets' or 'dataset', not both", what);
        return -1;
    }
    if ((v = ds ? ds : d1)) {
        c->n_datasets = 0;
        if (cJSON_IsString(v)) {
            if (take_str(v, "datasets", c->datasets[0], sizeof c->datasets[0])) goto bad;
            c->n_datasets = 1;
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 && cJSON_GetArraySize(v) <= 16) {
            for (const cJSON *e = v->child; e; e = e->next)
                if (take_str(e, "datasets[]", c->datasets[c->n_datasets++], sizeof c->datasets[0])) goto bad;
        } else {
            ds_error("%s: datasets must be a name or an array of 1..16 names", what);
            return -1;
        }
        for (int i = 0; i < c->n_datasets; i++) { /* a name twice ran its prompts twice, into one table */
            if (!c->datasets[i][0]) {
                ds_error("%s: dataset %d of %d has an empty name", what, i + 1, c->n_datasets);
                return -1;
            }
            for (int k = 0; k < i; k++)
                if (strcmp(c->datasets[k], c->datasets[i]) == 0) {
                    ds_error("%s: dataset '%s' is named twice", what, c->datasets[i]);
                    return -1;
                }
        }
    }
    double temp = c->sp.temperature, top_p = c->sp.top_p, min_p = c->sp.min_p;
    if (jcfg_int(&r, "gamma", 1, 64, &c->gamma) || jcfg_int(&r, "limit", 0, 1000000, &c->limit) ||
        jcfg_bool(&r, "skip_bad_lines", &c->skip_bad) || jcfg_strcpy(&r, "data_root", c->data_root, sizeof c->data_root) ||
        jcfg_double(&r, "temperature", 0, 100, &temp) || jcfg_double(&r, "top_p", 1e-6, 1, &top_p) ||
        jcfg_double(&r, "min_p", 0, 1, &min_p) || jcfg_int(&r, "top_k", 0, 1 << 22, &c->sp.top_k) || jcfg_u64(&r, "seed", &c->seed) ||
        jcfg_int(&r, "max_new_tokens", 1, 1 << 20, &c->max_new) || jcfg_int(&r, "threads", 0, 256, &c->threads) ||
        jcfg_strcpy(&r, "backend", c->backend, sizeof c->backend) || jcfg_bool(&r, "exact", &c->exact) ||
        jcfg_strcpy(&r, "isa", c->isa, sizeof c->isa) ||
        jcfg_strcpy(&r, "out", c->out, sizeof c->out) ||
        jcfg_strcpy(&r, "prompts_out", c->prompts_out, sizeof c->prompts_out) || jcfg_bool(&r, "baseline", &c->baseline) ||
        jcfg_int(&r, "concurrency", 1, 256, &c->concurrency) || jcfg_strcpy(&r, "sps", c->sps, sizeof c->sps) ||
        jcfg_strcpy(&r, "verifier", c->verifier, sizeof c->verifier) ||
        jcfg_bool(&r, "compare_verifiers", &c->compare_verifiers))
        return -1;
    chain_rule rule;
    if (chain_rule_parse(c->verifier, &rule)) {
        ds_error_prefix("%s: key 'verifier'", what);
        return -1;
    }
    c->sp.temperature = (float)temp;
    c->sp.top_p = (float)top_p;
    c->sp.min_p = (float)min_p;
    jcfg_skip(&r, "comment"); /* free text for people reading the config */
    jcfg_skip(&r, "description");
    return jcfg_close(&r);
bad:
    ds_error_prefix("%s", what);
    return -1;
}

int run_config_load(run_config *c, const char *path) {
    cJSON *j = ds_read_json(path);
    if (!j) return -1;
    int rc = run_config_apply(c, j, path, 0);
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
    cJSON_AddBoolToObject(j, "skip_bad_lines", c->skip_bad);
    cJSON_AddStringToObject(j, "data_root", c->data_root);
    cJSON_AddNumberToObject(j, "temperature", c->sp.temperature);
    cJSON_AddNumberToObject(j, "top_p", c->sp.top_p);
    cJSON_AddNumberToObject(j, "min_p", c->sp.min_p);
    cJSON_AddNumberToObject(j, "top_k", c->sp.top_k);
    cJSON_AddNumberToObject(j, "seed", (double)c->seed);
    cJSON_AddNumberToObject(j, "max_new_tokens", c->max_new);
    cJSON_AddNumberToObject(j, "threads", c->threads);
    cJSON_AddStringToObject(j, "backend", c->backend);
    cJSON_AddBoolToObject(j, "exact", c->exact);
    cJSON_AddStringToObject(j, "isa", c->isa);
    cJSON_AddStringToObject(j, "out", c->out);
    if (c->prompts_out[0]) cJSON_AddStringToObject(j, "prompts_out", c->prompts_out);
    cJSON_AddBoolToObject(j, "baseline", c->baseline);
    cJSON_AddNumberToObject(j, "concurrency", c->concurrency);
    cJSON_AddStringToObject(j, "sps", c->sps);
    cJSON_AddStringToObject(j, "verifier", c->verifier);
    cJSON_AddBoolToObject(j, "compare_verifiers", c->compare_verifiers);
    if (c->serve_cfg) cJSON_AddItemToObject(j, "serve", cJSON_Duplicate(c->serve_cfg, 1));
    return j;
}
