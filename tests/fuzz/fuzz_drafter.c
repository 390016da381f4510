/* fuzz_drafter — libFuzzer target for every drafter's settings object and what it drafts with them: the
 * input is a drafter's name, a newline, and its JSON object (a run config's "drafter" without its
 * name). Where drafter_open accepts it, two short requests decode with it on a tiny random target (a
 * chain of 4 under `fixed`, greedy and sampled), then it is closed. fuzz_config covers the readers that
 * need no target; the drafters' own (tree budgets, layer lists, vocabularies, combine's members) open
 * against a model and allocate from its sizes, and their first rounds are where a setting that passed
 * its range check meets the arrays it sizes. Any crash, sanitizer report or leak is a finding; errors
 * are the expected outcome.
 * Seeds: FUZZ_DRAFTER_SEEDS=DIR writes every registered drafter's gate configurations there and exits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../drafters/drafter.h"
#include "../../engine/decode.h"
#include "../../runtime/base/common.h"
#include "../../runtime/tiny_model.h"
#include "../../schedulers/scheduler.h"

/* the gate's model-backed worlds' shape (their configs name vocabulary ids below 8) with a vocabulary
 * of 64 */
static const tiny_spec TINY = {32, 2, 4, 2, 64, 64, GGML_Q8_0, GGML_Q8_0, 0, 10000.0f, 0};
static target g_t;
static int g_open;
/* FUZZ_DRAFTER_VERBOSE=1: each input's outcome on stderr (the drafter's error, or its decodes' tokens),
 * to see what a corpus reaches */
static int g_verbose;

static int write_seeds(const char *dir) {
    int n = 0;
    for (int i = 0; drafter_nth(i); i++) {
        const drafter_ops *o = drafter_nth(i);
        const char *cfgs[4] = {o->gate_config, o->gate_config_real, o->gate_config_tree, o->gate_config_tree2};
        for (int k = 0; k < 4; k++) {
            if (!cfgs[k]) continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s-%d", dir, o->name, k);
            FILE *f = fopen(path, "w");
            if (!f) {
                fprintf(stderr, "fuzz_drafter: cannot write %s\n", path);
                return 1;
            }
            fprintf(f, "%s\n%s", o->name, cfgs[k]);
            fclose(f);
            n++;
        }
    }
    fprintf(stderr, "fuzz_drafter: %d seeds in %s\n", n, dir);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FUZZ_DRAFTER_SEEDS");
    if (dir) exit(write_seeds(dir));
    char path[128];
    snprintf(path, sizeof path, "/tmp/dsb-fuzz-drafter-%d.gguf", (int)getpid());
    if (tiny_model_write(path, &TINY, 7) || target_open(&g_t, path, &(backend_opts){.n_threads = 1})) {
        fprintf(stderr, "fuzz_drafter: the tiny target: %s\n", ds_errmsg());
        exit(1);
    }
    remove(path);
    g_open = 1;
    g_verbose = getenv("FUZZ_DRAFTER_VERBOSE") != NULL;
    return 0;
}

static void decode_with(drafter *d, float temp) {
    scheduler s;
    if (scheduler_open(&s, "fixed", NULL, 0)) return;
    int prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (5 * i + 3) % 64;
    decode_cfg cfg = {{temp, 0, temp > 0 ? 0.9f : 1.0f}, 4, d, &s, NULL, NULL, MODE_SPEC};
    request r, *rp = &r;
    decode_stats st;
    memset(&st, 0, sizeof st);
    if (request_init(&r, &g_t, 0, prompt, 12, 10, 1) == 0) {
        int rc = decode_run(&g_t, &rp, 1, &cfg, &st);
        if (g_verbose)
            fprintf(stderr, "  %s, T = %g: %s, %d tokens in %ld rounds%s%s\n", d->ops->name, (double)temp,
                    rc ? "failed" : "decoded", r.toks.n - 12, st.rounds, rc ? ": " : "", rc ? ds_errmsg() : "");
        request_free(&r, &g_t);
    }
    scheduler_close(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_open) return 0;
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl || nl - data > 64) return 0;
    char name[65];
    memcpy(name, data, (size_t)(nl - data));
    name[nl - data] = 0;
    cJSON *cfg = cJSON_ParseWithLength((const char *)nl + 1, size - (size_t)(nl + 1 - data));
    if (!cfg) return 0;
    drafter d;
    int orc = drafter_open(&d, name, cfg, &g_t);
    if (g_verbose && orc) fprintf(stderr, "  %s: %s\n", name, ds_errmsg());
    if (orc == 0) {
        decode_with(&d, 0);
        decode_with(&d, 1.0f);
        drafter_close(&d);
    }
    cJSON_Delete(cfg);
    return 0;
}
