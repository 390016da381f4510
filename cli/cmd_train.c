/* train — train a block drafter (dflash, dspark-markov, dspark-rnn) against the frozen target:
 * build (or resume building) the data cache of target responses and states, then train with
 * checkpoints in the run folder; a killed run resumes from its last checkpoint. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/train.h"
#include "../runtime/common.h"
#include "../runtime/jcfg.h"
#include "args.h"
#include "commands.h"

void openblas_set_num_threads(int);

static const char *expand_home(const char *p, char *buf, size_t n) {
    if (p[0] != '~') return p;
    const char *home = getenv("HOME");
    snprintf(buf, n, "%s%s", home ? home : ".", p + 1);
    return buf;
}

int cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *out_flag = NULL;
    int steps_flag = 0, threads = 0, warm = 0;
    opt_def opts[] = {
        {"config", OPT_STR, &config_path, "FILE.json", "training config (required)", 0, 0, 0},
        {"steps", OPT_INT, &steps_flag, "N", "override the number of steps", 1, 1 << 30, 0},
        {"out", OPT_STR, &out_flag, "DIR", "override the run folder", 0, 0, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = all", 0, 256, 0},
        {"warm-start", OPT_FLAG, &warm, NULL, "start a new run from the weights in OUT/last (settings may differ)", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("train", "--config FILE.json [options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    if (!config_path) {
        ds_error("train: --config FILE.json is required (see experiments/train/*.json)");
        return -1;
    }
    cJSON *cfg = NULL;
    target t;
    memset(&t, 0, sizeof t);
    train_cache data;
    memset(&data, 0, sizeof data);
    bd_model m;
    memset(&m, 0, sizeof m);
    int ret = -1;
    DS_TRYP(cfg = ds_read_json(config_path));
    const char *target_path = NULL, *out = NULL;
    jcfg top, dj, tj;
    DS_TRY(jcfg_open(&top, cfg, config_path)); /* an array or a number is refused here, by name */
    DS_TRY(jcfg_str(&top, "target", &target_path));
    DS_TRY(jcfg_str(&top, "out", &out));
    jcfg_skip(&top, "comment");
    const cJSON *drafter = jcfg_get(&top, "drafter"), *dataj = jcfg_get(&top, "data"), *trainj = jcfg_get(&top, "train");
    DS_TRY(jcfg_close(&top));
    const cJSON *dname = cJSON_GetObjectItemCaseSensitive(drafter, "name");
    DS_CHECK(cJSON_IsObject(drafter) && cJSON_IsString(dname),
             "%s: needs \"drafter\": {\"name\": \"dflash\" | \"dspark-markov\" | \"dspark-rnn\", ...}", config_path);
    if (out_flag) out = out_flag;
    DS_CHECK(out != NULL, "%s: needs \"out\" (the run folder)", config_path);

    /* data options */
    traindata_opts d = {0};
    const char *cache = "~/.cache/dspark-bench/train/default";
    d.dataset = "trainmix";
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
           jcfg_int(&dj, "top_k", 0, 1 << 22, &d.sp.top_k) || jcfg_int(&dj, "max_new_tokens", 1, 1 << 16, &d.max_new) ||
           jcfg_int(&dj, "max_prompt", 2, 1 << 16, &d.max_prompt) || jcfg_u64(&dj, "seed", &d.seed) ||
           jcfg_str(&dj, "cache", &cache) || jcfg_close(&dj));
    char cache_buf[4096];
    d.dir = expand_home(cache, cache_buf, sizeof cache_buf);
    /* training options */
    train_opts o = {1000, 4, 32, 6e-4f, 0.1f, 0.04f, 0.0f, 1.0f, 0.9f, 0.95f, 1, 250, 250, 1, 0.05f, 40, 0, out, 0};
    DS_TRY(jcfg_open(&tj, trainj, tpath));
    DS_TRY(jcfg_int(&tj, "steps", 1, 1000000000, &o.steps) || jcfg_int(&tj, "seqs_per_step", 1, 4096, &o.seqs_per_step) ||
           jcfg_int(&tj, "anchors", 1, 512, &o.anchors) || jcfg_float(&tj, "lr", 0, 1, &o.lr) ||
           jcfg_float(&tj, "min_lr_frac", 0, 1, &o.min_lr_frac) || jcfg_float(&tj, "warmup_frac", 0, 1, &o.warmup_frac) ||
           jcfg_float(&tj, "weight_decay", 0, 10, &o.weight_decay) || jcfg_float(&tj, "clip", 1e-6, 1e6, &o.clip) ||
           jcfg_float(&tj, "beta1", 0, 1, &o.beta1) || jcfg_float(&tj, "beta2", 0, 1, &o.beta2) ||
           jcfg_u64(&tj, "seed", &o.seed) || jcfg_int(&tj, "eval_every", 0, 1000000000, &o.eval_every) ||
           jcfg_int(&tj, "ckpt_every", 0, 1000000000, &o.ckpt_every) || jcfg_float(&tj, "holdout", 0, 0.9, &o.holdout) ||
           jcfg_int(&tj, "eval_seqs", 1, 1000000, &o.eval_seqs) || jcfg_bool(&tj, "warm_start", &o.warm_start) ||
           jcfg_close(&tj));
    if (warm) o.warm_start = 1;
    if (steps_flag) o.steps = steps_flag;

    DS_TRY(target_open(&t, target_path ? target_path : target_default_path(), threads));
    DS_CHECK(t.has_tokenizer, "the target has no tokenizer; training data needs a GGUF target");
    cJSON *arch = cJSON_Duplicate(drafter, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(arch, "name");
    bd_config c;
    int crc = bd_config_init(&c, &t.m, dname->valuestring, arch);
    cJSON_Delete(arch);
    DS_TRY(crc);
    d.n_tap = c.n_tap;
    memcpy(d.taps, c.tap, sizeof d.taps);
    DS_TRY(traindata_build(&t, &d));
    DS_TRY(traindata_open(&data, d.dir, &t));
    DS_TRY(bd_model_init(&m, &c, &t.m, o.seed, 0));
    fprintf(stderr, "train: %s, %zu parameters (%d layers, gamma %d, %s, lambda %g); data %s: %d sequences, %ld tokens\n",
            c.kind, m.n_params, c.n_layers, c.gamma, c.head == HEAD_NONE ? "no head" : c.head == HEAD_MARKOV ? "Markov head" : "RNN head",
            (double)c.lambda, d.dir, data.n_seq, data.n_tok);
    openblas_set_num_threads(t.be->n_threads); /* training is GEMM-bound: let OpenBLAS use every core */
    DS_TRY(train_run(&m, &data, &o, NULL, 0, NULL));
    openblas_set_num_threads(1);
    printf("trained %s: checkpoint %s/last (model.safetensors + config.json); logs %s/train_log.jsonl, eval_log.jsonl\n",
           c.kind, out, out);
    ret = 0;
fail:
    bd_model_free(&m);
    traindata_close(&data);
    target_close(&t);
    cJSON_Delete(cfg);
    return ret;
}
