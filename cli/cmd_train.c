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
#include "args.h"
#include "commands.h"

void openblas_set_num_threads(int);

static const char *expand_home(const char *p, char *buf, size_t n) {
    if (p[0] != '~') return p;
    const char *home = getenv("HOME");
    snprintf(buf, n, "%s%s", home ? home : ".", p + 1);
    return buf;
}

/* read optional fields of a JSON object with type checks; unknown keys are errors */
typedef struct {
    const char *key;
    char type; /* i int, f float, s string, b bool */
    void *ptr;
    double lo, hi;
} field;

static int read_fields(const cJSON *obj, const field *f, int n, const char *what) {
    if (!obj) return 0;
    if (!cJSON_IsObject(obj)) {
        ds_error("%s must be an object", what);
        return -1;
    }
    for (const cJSON *v = obj->child; v; v = v->next) {
        int k = 0;
        while (k < n && strcmp(f[k].key, v->string) != 0) k++;
        if (k == n) {
            ds_error("%s: unknown key '%s'", what, v->string);
            return -1;
        }
        switch (f[k].type) {
        case 'i':
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < f[k].lo || v->valuedouble > f[k].hi) {
                ds_error("%s: '%s' must be an integer in %g..%g", what, v->string, f[k].lo, f[k].hi);
                return -1;
            }
            *(int *)f[k].ptr = v->valueint;
            break;
        case 'u':
            if (!cJSON_IsNumber(v) || v->valuedouble < 0) {
                ds_error("%s: '%s' must be a non-negative integer", what, v->string);
                return -1;
            }
            *(uint64_t *)f[k].ptr = (uint64_t)v->valuedouble;
            break;
        case 'f':
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= f[k].lo && v->valuedouble <= f[k].hi)) {
                ds_error("%s: '%s' must be a number in [%g, %g]", what, v->string, f[k].lo, f[k].hi);
                return -1;
            }
            *(float *)f[k].ptr = (float)v->valuedouble;
            break;
        case 's':
            if (!cJSON_IsString(v)) {
                ds_error("%s: '%s' must be a string", what, v->string);
                return -1;
            }
            *(const char **)f[k].ptr = v->valuestring;
            break;
        case 'b':
            if (!cJSON_IsBool(v)) {
                ds_error("%s: '%s' must be true or false", what, v->string);
                return -1;
            }
            *(int *)f[k].ptr = cJSON_IsTrue(v);
            break;
        }
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *out_flag = NULL;
    int steps_flag = 0, threads = 0;
    opt_def opts[] = {
        {"config", OPT_STR, &config_path, "FILE.json", "training config (required)", 0, 0, 0},
        {"steps", OPT_INT, &steps_flag, "N", "override the number of steps", 1, 1 << 30, 0},
        {"out", OPT_STR, &out_flag, "DIR", "override the run folder", 0, 0, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = all", 0, 256, 0},
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
    const char *target_path = NULL, *out = NULL, *comment = NULL;
    cJSON *drafter = NULL, *dataj = NULL, *trainj = NULL;
    for (cJSON *v = cfg->child; v; v = v->next) {
        if (strcmp(v->string, "target") == 0) target_path = cJSON_IsString(v) ? v->valuestring : NULL;
        else if (strcmp(v->string, "drafter") == 0) drafter = v;
        else if (strcmp(v->string, "data") == 0) dataj = v;
        else if (strcmp(v->string, "train") == 0) trainj = v;
        else if (strcmp(v->string, "out") == 0) out = cJSON_IsString(v) ? v->valuestring : NULL;
        else if (strcmp(v->string, "comment") == 0) comment = v->valuestring;
        else DS_CHECK(0, "%s: unknown key '%s' (target, drafter, data, train, out)", config_path, v->string);
    }
    DS_UNUSED(comment);
    const cJSON *dname = cJSON_GetObjectItemCaseSensitive(drafter, "name");
    DS_CHECK(cJSON_IsString(dname), "%s: needs \"drafter\": {\"name\": \"dflash\" | \"dspark-markov\" | \"dspark-rnn\", ...}",
             config_path);
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
    field df[] = {{"dataset", 's', &d.dataset, 0, 0},     {"data_root", 's', &d.data_root, 0, 0},
                  {"limit", 'i', &d.limit, 0, 1e9},       {"given", 'b', &d.given, 0, 0},
                  {"temperature", 'f', &d.sp.temperature, 0, 100}, {"top_p", 'f', &d.sp.top_p, 1e-6, 1},
                  {"top_k", 'i', &d.sp.top_k, 0, 1 << 22}, {"max_new_tokens", 'i', &d.max_new, 1, 1 << 16},
                  {"max_prompt", 'i', &d.max_prompt, 2, 1 << 16}, {"seed", 'u', &d.seed, 0, 0},
                  {"cache", 's', &cache, 0, 0}};
    DS_TRY(read_fields(dataj, df, (int)(sizeof df / sizeof *df), "\"data\""));
    char cache_buf[4096];
    d.dir = expand_home(cache, cache_buf, sizeof cache_buf);
    /* training options */
    train_opts o = {1000, 4, 32, 6e-4f, 0.1f, 0.04f, 0.0f, 1.0f, 0.9f, 0.95f, 1, 250, 250, 1, 0.05f, 40, 0, out, 0};
    field tf[] = {{"steps", 'i', &o.steps, 1, 1e9},          {"seqs_per_step", 'i', &o.seqs_per_step, 1, 4096},
                  {"anchors", 'i', &o.anchors, 1, 512},       {"lr", 'f', &o.lr, 0, 1},
                  {"min_lr_frac", 'f', &o.min_lr_frac, 0, 1}, {"warmup_frac", 'f', &o.warmup_frac, 0, 1},
                  {"weight_decay", 'f', &o.weight_decay, 0, 10}, {"clip", 'f', &o.clip, 1e-6, 1e6},
                  {"beta1", 'f', &o.beta1, 0, 1},             {"beta2", 'f', &o.beta2, 0, 1},
                  {"seed", 'u', &o.seed, 0, 0},               {"eval_every", 'i', &o.eval_every, 0, 1e9},
                  {"ckpt_every", 'i', &o.ckpt_every, 0, 1e9}, {"holdout", 'f', &o.holdout, 0, 0.9},
                  {"eval_seqs", 'i', &o.eval_seqs, 1, 1e6}};
    DS_TRY(read_fields(trainj, tf, (int)(sizeof tf / sizeof *tf), "\"train\""));
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
