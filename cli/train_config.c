/* train_config.c — see train_config.h. */
#include "train_config.h"

#include <stdio.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../drafters/drafter.h"
#include <stdlib.h>

int train_config_parse(const cJSON *cfg, const char *config_path, train_config *tc) {
    memset(tc, 0, sizeof *tc);
    jcfg top, dj, tj;
    const char *out = NULL;
    DS_TRY(jcfg_open(&top, cfg, config_path)); /* an array or a number is refused here, by name */
    DS_TRY(jcfg_str(&top, "target", &tc->target));
    DS_TRY(jcfg_str(&top, "out", &out));
    jcfg_skip(&top, "comment");
    const cJSON *drafter = jcfg_get(&top, "drafter"), *dataj = jcfg_get(&top, "data"), *trainj = jcfg_get(&top, "train");
    DS_TRY(jcfg_close(&top));
    const cJSON *dname = cJSON_GetObjectItemCaseSensitive(drafter, "name");
    char trainable[512];
    drafter_list(trainable, sizeof trainable, 1);
    DS_CHECK(cJSON_IsObject(drafter) && cJSON_IsString(dname), "%s: needs \"drafter\": {\"name\": NAME, ...} (trainable: %s)",
             config_path, trainable);
    const drafter_ops *ops = drafter_find(dname->valuestring);
    if (!ops) {
        ds_error_prefix("%s: drafter", config_path);
        return -1;
    }
    DS_CHECK(ops->train, "%s: drafter '%s' is not trained (training-free); trainable: %s", config_path,
             dname->valuestring, trainable);
    tc->family = ops->train;
    tc->drafter = drafter;
    tc->drafter_name = dname;

    /* data options */
    traindata_opts d = {0};
    const char *cache = "~/.cache/dspark-bench/train/default";
    d.dataset = "train20k";
    d.top_k = 64;
    d.batch = 16;
    d.shard_size = 500;
    d.sp = (sampling_params){0.2f, 0, 0.9f}; /* SmolLM2-Instruct's recommended sampling */
    d.max_new = 256;
    d.max_prompt = 384;
    d.seed = 1;
    char dpath[4200], tpath[4200];
    snprintf(dpath, sizeof dpath, "%s: data", config_path);
    snprintf(tpath, sizeof tpath, "%s: train", config_path);
    DS_TRY(jcfg_open(&dj, dataj, dpath));
    DS_TRY(jcfg_str(&dj, "dataset", &d.dataset) || jcfg_str(&dj, "data_root", &d.data_root) ||
           jcfg_int(&dj, "limit", 0, 1000000000, &d.limit) || jcfg_bool(&dj, "given", &d.given) ||
           jcfg_bool(&dj, "skip_bad_lines", &d.skip_bad) || jcfg_bool(&dj, "rebuild", &d.rebuild) ||
           jcfg_float(&dj, "temperature", 0, 100, &d.sp.temperature) || jcfg_float(&dj, "top_p", 1e-6, 1, &d.sp.top_p) ||
           jcfg_float(&dj, "min_p", 0, 1, &d.sp.min_p) ||
           jcfg_int(&dj, "top_k", 0, 1 << 22, &d.sp.top_k) || jcfg_int(&dj, "max_new_tokens", 1, 1 << 16, &d.max_new) ||
           jcfg_int(&dj, "max_prompt", 2, 1 << 16, &d.max_prompt) || jcfg_u64(&dj, "seed", &d.seed) ||
           jcfg_int(&dj, "target_top_k", 1, 4096, &d.top_k) || jcfg_bool(&dj, "store_final", &d.store_final) ||
           jcfg_int(&dj, "batch", 1, 256, &d.batch) || jcfg_int(&dj, "shard_size", 1, 1 << 24, &d.shard_size) ||
           jcfg_int(&dj, "max_shards", 0, 1 << 24, &d.max_shards) || jcfg_str(&dj, "cache", &cache));
    /* the layers the cache taps (default: the drafter's); a superset serves several families */
    const cJSON *taps = jcfg_get(&dj, "taps");
    if (taps) {
        DS_CHECK(cJSON_IsArray(taps) && cJSON_GetArraySize(taps) >= 1 && cJSON_GetArraySize(taps) <= 8,
                 "%s: \"taps\" must be an array of 1 to 8 layer indices", dpath);
        for (int i = 0; i < cJSON_GetArraySize(taps); i++) {
            const cJSON *e = cJSON_GetArrayItem(taps, i);
            DS_CHECK(jcfg_integral(e, 0, 4095),
                     "%s: \"taps\"[%d] is not a layer index", dpath, i);
            d.taps[i] = e->valueint;
        }
        d.n_tap = cJSON_GetArraySize(taps);
    }
    DS_TRY(jcfg_close(&dj));
    tc->data = d;
    tc->cache = cache;
    /* training options */
    train_opts o = {1000, 4, 32, 6e-4f, 0.1f, 0.04f, 0.0f, 1.0f, 0.9f, 0.95f, 1, 250, 250, 1, 0.05f, 40, 0, out, 0, 0};
    DS_TRY(jcfg_open(&tj, trainj, tpath));
    DS_TRY(jcfg_int(&tj, "steps", 1, 1000000000, &o.steps) || jcfg_int(&tj, "seqs_per_step", 1, 4096, &o.seqs_per_step) ||
           jcfg_int(&tj, "anchors", 1, 512, &o.anchors) || jcfg_float(&tj, "lr", 0, 1, &o.lr) ||
           jcfg_float(&tj, "min_lr_frac", 0, 1, &o.min_lr_frac) || jcfg_float(&tj, "warmup_frac", 0, 1, &o.warmup_frac) ||
           jcfg_float(&tj, "weight_decay", 0, 10, &o.weight_decay) || jcfg_float(&tj, "clip", 1e-6, 1e6, &o.clip) ||
           jcfg_float(&tj, "beta1", 0, 1, &o.beta1) || jcfg_float(&tj, "beta2", 0, 1, &o.beta2) ||
           jcfg_u64(&tj, "seed", &o.seed) || jcfg_int(&tj, "eval_every", 0, 1000000000, &o.eval_every) ||
           jcfg_int(&tj, "ckpt_every", 0, 1000000000, &o.ckpt_every) || jcfg_float(&tj, "holdout", 0, 0.9, &o.holdout) ||
           jcfg_int(&tj, "eval_seqs", 1, 1000000, &o.eval_seqs) || jcfg_bool(&tj, "warm_start", &o.warm_start) ||
           jcfg_bool(&tj, "reference", &o.reference) ||
           jcfg_close(&tj));
    tc->train = o;
    return 0;
fail:
    return -1;
}

cJSON *train_config_arch(const train_config *tc) {
    cJSON *arch = cJSON_Duplicate(tc->drafter, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(arch, "name");
    return arch;
}

int train_config_drafter(const train_config *tc, const target *t, bd_config *c) {
    cJSON *arch = train_config_arch(tc);
    int rc = bd_config_init(c, &t->m, tc->drafter_name->valuestring, arch);
    cJSON_Delete(arch);
    if (rc == 0) contract_stamp(&c->contract, t);
    return rc;
}

const char *train_config_expand_home(const char *p, char *buf, size_t n) {
    if (p[0] != '~') return p;
    const char *home = getenv("HOME");
    snprintf(buf, n, "%s%s", home ? home : ".", p + 1);
    return buf;
}
