/* setup.c — the shared loading of `run` and `serve` (setup.h). */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../runtime/base/common.h"
#include "setup.h"

int run_prompts_load(const run_config *rc, run_prompts *p) {
    memset(p, 0, sizeof *p);
    DS_TRYP(p->sets = ds_calloc((size_t)rc->n_datasets, sizeof *p->sets, "datasets"));
    for (int i = 0; i < rc->n_datasets; i++, p->n_sets++) {
        DS_TRY(dataset_load(rc->datasets[i], rc->data_root[0] ? rc->data_root : NULL, rc->limit, rc->skip_bad, &p->sets[i]));
        p->skipped += p->sets[i].skipped;
        DS_CHECK(p->sets[i].n > 0, "dataset '%s' has no usable prompts", rc->datasets[i]);
        p->total += p->sets[i].n;
    }
    return 0;
fail:
    return -1;
}

void run_prompts_free(run_prompts *p) {
    for (int i = 0; i < p->n_sets; i++) prompt_set_free(&p->sets[i]);
    free(p->sets);
    memset(p, 0, sizeof *p);
}

int run_models_open(const run_config *rc, const char *cmd, target *t, drafter *d) {
    DS_TRY(target_open(t, rc->target[0] ? rc->target : target_default_path(),
                       &(backend_opts){rc->backend, rc->threads, rc->exact, rc->isa}));
    DS_CHECK(t->has_tokenizer, "the target has no tokenizer; %s needs a GGUF target", cmd);
    if (!rc->drafter[0]) return 0;
    DS_TRY(drafter_open(d, rc->drafter, rc->drafter_cfg, t));
    /* a tree's size is its tree_nodes (the loop drafts that many nodes, its depth the drafter's own) */
    DS_CHECK(!d->max_gamma || d->tree_nodes || rc->gamma <= d->max_gamma,
             "gamma %d: the drafter was trained to draft %d tokens a round (its checkpoint's gamma); use gamma <= %d",
             rc->gamma, d->max_gamma, d->max_gamma);
    return 0;
fail:
    return -1;
}

int run_sps_load(const run_config *rc, int needed, const char *target_fingerprint, sps_table *sps) {
    const char *path = rc->sps[0] ? rc->sps : "bench/bench-target.json";
    struct stat st;
    memset(sps, 0, sizeof *sps);
    if (rc->sps[0] || stat(path, &st) == 0) {
        cJSON *j = ds_read_json(path);
        if (!j) return -1;
        /* the default table is SmolLM2's: priced on it, a 1.5B target's rounds cost what a 135M's do */
        const cJSON *fp = cJSON_GetObjectItemCaseSensitive(j, "fingerprint"), *mo = cJSON_GetObjectItemCaseSensitive(j, "model");
        int other = cJSON_IsString(fp) && strcmp(fp->valuestring, target_fingerprint) != 0;
        if (other && rc->sps[0]) {
            ds_error("%s: an SPS table measured on another model (%s, fingerprint %s; this target's is %s): "
                     "`dspark-bench bench-target --model MODEL --out FILE.json` measures this one",
                     path, cJSON_IsString(mo) ? mo->valuestring : "?", fp->valuestring, target_fingerprint);
            cJSON_Delete(j);
            return -1;
        }
        if (!other) {
            int rc2 = sps_from_json(sps, j, path);
            cJSON_Delete(j);
            return rc2;
        }
        if (needed)
            fprintf(stderr, "note: %s was measured on another model (fingerprint %s, this target's %s): the schedulers "
                            "see a flat cost per round; `dspark-bench bench-target --model MODEL --out FILE.json` and "
                            "--sps FILE.json price this one\n", path, fp->valuestring, target_fingerprint);
        cJSON_Delete(j);
        if (!needed) return 0;
    } else {
        if (!needed) return 0;
        fprintf(stderr, "note: no SPS table (%s is missing): the schedulers see a flat cost per round; "
                        "`make bench-target` measures one\n", path);
    }
    int B[1] = {1};
    double one[1] = {1};
    return sps_from_arrays(sps, B, one, 1);
}

trace *run_trace_open(const run_config *rc, const char *path, const target *t, const drafter *d, const cJSON *scheduler) {
    cJSON *resolved = NULL;
    char *txt = NULL;
    trace *tr = NULL;
    int has_d = rc->drafter[0] != 0;
    if (ds_mkdirs_for(path, "the trace folder") || !(tr = trace_create(path))) return NULL;
    if ((resolved = run_config_json(rc)) && scheduler)
        cJSON_ReplaceItemInObjectCaseSensitive(resolved, "scheduler", cJSON_Duplicate(scheduler, 1));
    if (!resolved || !(txt = cJSON_PrintUnformatted(resolved)) ||
        trace_attr(tr, "config", txt) || trace_attr(tr, "target_fingerprint", t->m.fingerprint) ||
        trace_attr(tr, "drafter_fingerprint", has_d ? d->fingerprint : "none") ||
        trace_attr(tr, "drafter", has_d ? d->describe : "none") || trace_attr(tr, "backend", t->be->name) ||
        trace_attr(tr, "kernels", t->be->kernels) || trace_attr(tr, "version", DSPARK_VERSION) ||
        trace_attr_u64(tr, "seed", rc->seed)) {
        if (!resolved || !txt) ds_error("%s: cannot render the resolved config", path);
        trace_abort(tr);
        tr = NULL;
    }
    cJSON_Delete(resolved);
    free(txt);
    return tr;
}
