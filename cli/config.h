/* config.h — experiment configs: a JSON file, then command-line overrides, resolved into one
 * struct and written back as JSON into the trace. Unknown keys and wrong types are errors that
 * name the file and the key. */
#ifndef DS_CONFIG_H
#define DS_CONFIG_H

#include <cJSON.h>
#include <stdint.h>

#include "../verify/logits.h"

typedef struct {
    char target[1024];      /* model path ("" = embedded default) */
    char drafter[32];       /* "" = autoregressive only */
    cJSON *drafter_cfg;     /* the drafter's own object (name removed) */
    char scheduler[32];
    cJSON *scheduler_cfg;
    int gamma;
    char datasets[16][64];
    int n_datasets;
    int limit;              /* prompts per dataset, 0 = all */
    int skip_bad;           /* skip malformed dataset lines (counted, in the trace) instead of failing */
    char data_root[1024];
    sampling_params sp;
    uint64_t seed;
    int max_new;
    int threads;
    char backend[16];       /* "cpu" */
    int exact;              /* fp32 activations in every matmul (default: int8 for quantized weights) */
    char isa[16];           /* CPU kernel path, "auto" = the best the CPU runs */
    char out[1024];
    char prompts_out[1024]; /* "" = none; else every request's rendered prompt, one JSON line each */
    int baseline;           /* also run the autoregressive baseline on the same prompts */
    int concurrency;        /* requests decoded together */
    char sps[1024];         /* SPS(B) table JSON ("" = bench/bench-target.json when present) */
    char verifier[16];      /* how a chain is verified at T > 0: "token" (default) or "block" */
    int compare_verifiers;  /* also record both rules' expected accepted drafts on the same drafts */
    cJSON *serve_cfg;       /* the "serve" object (read by `serve` only; `run` refuses it) */
} run_config;

void run_config_defaults(run_config *c);
/* Apply a config file on top of c. -1 with "FILE: ..." on any problem. */
int run_config_load(run_config *c, const char *path);
/* Apply one JSON object: a config file's (merge 0: a drafter/scheduler object replaces the one
 * before) or the command line's (merge 1: settings go into the configured object; naming another
 * family while the config has settings is an error). */
int run_config_apply(run_config *c, const cJSON *j, const char *what, int merge);
cJSON *run_config_json(const run_config *c); /* the resolved config */
void run_config_free(run_config *c);

#endif
