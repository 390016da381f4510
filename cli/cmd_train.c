/* train — train a drafter (any family the registry marks trainable) against the frozen target:
 * build (or resume building) the data cache of target responses and states, then train with
 * checkpoints in the run folder; a killed run resumes from its last checkpoint. */
#include <cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drafters/train_family.h"
#include "../engine/train.h"
#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "args.h"
#include "commands.h"
#include "train_config.h"

int cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *out_flag = NULL;
    int steps_flag = 0, threads = 0, warm = 0, data_only = 0, max_shards = -1;
    backend_opts bo = {0};
    opt_def opts[] = {
        {"config", OPT_STR, &config_path, "FILE.json", "training config (required)", 0, 0, 0},
        {"steps", OPT_INT, &steps_flag, "N", "override the number of steps", 1, 1 << 30, 0},
        {"out", OPT_STR, &out_flag, "DIR", "override the run folder", 0, 0, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads of the training step (and of the cpu backend), 0 = all", 0, 256, 0},
        OPT_BACKEND(bo),
        {"data-only", OPT_FLAG, &data_only, NULL, "build (or resume building) the data cache, then stop", 0, 0, 0},
        {"max-shards", OPT_INT, &max_shards, "N", "build at most N shards of the cache (0 = all)", 0, 1 << 24, 0},
        {"warm-start", OPT_FLAG, &warm, NULL, "start a new run from the weights in OUT/last (settings may differ)", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("train", "--config FILE.json [options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    if (!config_path) {
        ds_error("train: --config FILE.json is required (see experiments/train/*.json)");
        return -1;
    }
    cJSON *cfg = NULL, *arch = NULL;
    target t;
    memset(&t, 0, sizeof t);
    train_cache data;
    memset(&data, 0, sizeof data);
    void *fam = NULL; /* the family's training state (train_family.h) */
    const train_family *tf = NULL;
    int ret = -1;
    DS_TRYP(cfg = ds_read_json(config_path));
    train_config tc;
    DS_TRY(train_config_parse(cfg, config_path, &tc));
    const char *target_path = tc.target;
    if (out_flag) tc.train.out = out_flag;
    const char *out = tc.train.out;
    DS_CHECK(out != NULL, "%s: needs \"out\" (the run folder)", config_path);
    traindata_opts d = tc.data;
    char cache_buf[4096];
    d.dir = train_config_expand_home(tc.cache, cache_buf, sizeof cache_buf);
    train_opts o = tc.train;
    if (warm) o.warm_start = 1;
    if (steps_flag) o.steps = steps_flag;

    /* the target's forwards (the data cache) run on the backend; sampling, top-K and the training step on
     * the host's threads (the CUDA backend has one of its own) */
    int host_threads = threads > 0 ? threads : omp_get_num_procs();
    bo.n_threads = host_threads;
    DS_TRY(target_open(&t, target_path ? target_path : target_default_path(), &bo));
    DS_CHECK(t.has_tokenizer, "the target has no tokenizer; training data needs a GGUF target");
    /* the family, from the registry: its architecture and the target layers its training reads */
    tf = tc.family;
    int want[8], n_want = 0;
    DS_TRYP(fam = ds_calloc(1, tf->state_size, "training state"));
    DS_TRYP(arch = train_config_arch(&tc));
    DS_TRY(tf->configure(fam, tc.drafter_name->valuestring, arch, &t, want, &n_want));
    if (n_want == 0 && d.n_tap == 0) /* a family that reads no states: a cache of its own keeps the last
                                      * layer, so Medusa and MTP can train on it too */
        d.n_tap = 1, d.taps[0] = t.m.cfg.n_layers - 1;
    if (d.n_tap == 0) { /* the cache taps what the drafter reads */
        d.n_tap = n_want;
        memcpy(d.taps, want, sizeof(int) * (size_t)n_want);
    } else /* data.taps given: every layer the drafter reads must be among them (checked before building) */
        for (int j = 0; j < n_want; j++) {
            int found = 0;
            for (int k = 0; k < d.n_tap; k++) {
                DS_CHECK(d.taps[k] < t.m.cfg.n_layers, "%s: data.taps: layer %d, but the target has %d layers",
                         config_path, d.taps[k], t.m.cfg.n_layers);
                found |= d.taps[k] == want[j];
            }
            DS_CHECK(found, "%s: data.taps lacks layer %d, which the drafter reads", config_path, want[j]);
        }
    if (max_shards >= 0) d.max_shards = max_shards;
    omp_set_num_threads(host_threads);
    DS_TRY(traindata_build(&t, &d));
    if (data_only) {
        ret = 0;
        goto fail;
    }
    DS_TRY(traindata_open(&data, d.dir, &t, d.max_shards));
    trainable tr;
    char last[4200], describe[512];
    snprintf(last, sizeof last, "%s/last", out);
    DS_TRY(tf->init(fam, &t, &data, o.seed, 0, o.warm_start ? NULL : last, &tr, describe, sizeof describe));
    fprintf(stderr, "train: %s; data %s: %d sequences, %ld tokens\n", describe, d.dir, data.n_seq, data.n_tok);
    DS_TRY(train_run(&tr, &data, &o, NULL, 0, NULL));
    printf("trained %s: checkpoint %s/last (model.safetensors + config.json); logs %s/train_log.jsonl, eval_log.jsonl\n",
           tr.kind, out, out);
    ret = 0;
fail:
    if (fam && tf) tf->release(fam);
    free(fam);
    cJSON_Delete(arch);
    traindata_close(&data);
    target_close(&t);
    cJSON_Delete(cfg);
    return ret;
}
