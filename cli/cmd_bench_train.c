/* bench-train — supervised draft positions per second of a training config, side by side with the
 * reference path in the same process: the same architecture over the full vocabulary, with the
 * target's distribution recomputed from its cached final states through the frozen head (the
 * trainer before top-K caches and draft vocabularies). Rounds alternate between the two so a
 * noisy machine affects both alike; --profile adds where a step's time goes. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/train.h"
#include "../runtime/base/common.h"
#include "../runtime/base/cpu_features.h"
#include <unistd.h>
#include "args.h"
#include "commands.h"
#include "train_config.h"



typedef struct {
    const char *name;
    bd_model m;
    trainable tr;
    train_profile prof;
    double pos_s[64];
    int n;
} bench_path;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_bench_train(int argc, char **argv) {
    const char *config_path = NULL, *cache_flag = NULL, *out_dir = "/tmp";
    int steps = 4, rounds = 3, threads = 0, profile = 0, no_ref = 0;
    opt_def opts[] = {
        {"config", OPT_STR, &config_path, "FILE.json", "training config (required)", 0, 0, 0},
        {"cache", OPT_STR, &cache_flag, "DIR", "data cache (default: the config's); the reference needs its final states", 0, 0, 0},
        {"steps", OPT_INT, &steps, "N", "timed steps per path per round (default 4)", 1, 64, 0},
        {"rounds", OPT_INT, &rounds, "N", "alternating rounds (default 3)", 1, 16, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores", 0, 256, 0},
        {"profile", OPT_FLAG, &profile, NULL, "print where a step's time goes, per path", 0, 0, 0},
        {"no-reference", OPT_FLAG, &no_ref, NULL, "time only the configured path", 0, 0, 0},
        {"tmp", OPT_STR, &out_dir, "DIR", "scratch folder for the runs' checkpoints (default /tmp)", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("bench-train", "--config FILE.json [options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    cJSON *cfg = NULL;
    target t;
    memset(&t, 0, sizeof t);
    train_cache data;
    memset(&data, 0, sizeof data);
    bench_path P[2];
    memset(P, 0, sizeof P);
    P[0].name = "this config";
    P[1].name = "reference (full vocabulary, target head recomputed, attention loops)";
    int ret = -1, n_paths = no_ref ? 1 : 2;
    char cache_buf[4096];
    DS_CHECK(config_path, "bench-train: --config FILE.json is required (see experiments/scale/*.json)");
    DS_TRYP(cfg = ds_read_json(config_path));
    train_config tc;
    DS_TRY(train_config_parse(cfg, config_path, &tc));
    const char *dir = train_config_expand_home(cache_flag ? cache_flag : tc.cache, cache_buf, sizeof cache_buf);
    DS_TRY(target_open(&t, tc.target ? tc.target : target_default_path(), &(backend_opts){.n_threads = threads}));
    DS_TRY(traindata_open(&data, dir, &t, tc.data.max_shards));
    DS_CHECK(no_ref || data.has_final,
             "%s: the reference path needs the target's final states: build a cache with data.store_final: true "
             "(experiments/scale/bench.json), or pass --no-reference",
             dir);
    /* its profile and the reference path (attention loops, the full vocabulary) are the block drafters' */
    DS_CHECK(tc.family == &bd_train_family, "%s: bench-train times the block drafters (dflash, dspark-markov, "
             "dspark-rnn), not '%s'", config_path, tc.drafter_name->valuestring);
    bd_config c;
    DS_TRY(train_config_drafter(&tc, &t, &c));
    for (int k = 0; k < n_paths; k++) {
        DS_TRY(bd_train_new(&c, &t, &data, k == 1, tc.train.seed, NULL, &P[k].m));
        DS_TRY(bd_trainable(&P[k].m, &P[k].tr));
        P[k].m.ws.profile = profile;
        P[k].m.ws.loop_attention = k == 1; /* the reference: the attention loops training used before */
    }
    omp_set_num_threads(t.be->n_threads); /* the training ops' loops and GEMM split follow --threads */
    fprintf(stderr, "bench-train: %s, %d layers, gamma %d; %d sequences x %d anchors a step; cache %s (%d sequences, top-%d)\n",
            c.kind, c.n_layers, c.gamma, tc.train.seqs_per_step, tc.train.anchors, dir, data.n_seq, data.top_k);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < n_paths; k++) {
            train_opts o = tc.train;
            char out[4200], cmd[4400];
            snprintf(out, sizeof out, "%s/dsb-bench-train-%d-%d", out_dir, (int)getpid(), k);
            o.out = out;
            o.steps = 1000000; /* a long schedule: the timed steps sit at the warmup's start */
            o.stop_after = steps + 1;
            o.eval_every = 0, o.ckpt_every = 0, o.quiet = 1, o.reference = k == 1, o.prof = &P[k].prof;
            o.seed = tc.train.seed + (uint64_t)r; /* other sequences each round */
            train_point h[72];
            int nh = 0;
            if (train_run(&P[k].tr, &data, &o, h, 72, &nh)) goto fail;
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
            if (system(cmd) != 0) fprintf(stderr, "bench-train: could not remove %s\n", out);
            for (int i = 1; i < nh && P[k].n < 64; i++) P[k].pos_s[P[k].n++] = h[i].rows_per_s; /* step 1 warms up */
            fprintf(stderr, "  round %d, %s: %.0f positions/s\n", r + 1, P[k].name, h[nh - 1].rows_per_s);
        }
    char cpu[256];
    cpu_describe(cpu, sizeof cpu);
    printf("\ntraining throughput: supervised draft positions per second (forward + backward + AdamW + loading),\n"
           "%s, %d threads (%s); median of %d steps per path over %d alternating rounds\n\n",
           cpu, t.be->n_threads, c.kind, rounds * steps, rounds);
    printf("| path | draft vocabulary | target side | positions/s (median) | range |\n|---|---:|---|---:|---|\n");
    double med[2] = {0, 0};
    for (int k = 0; k < n_paths; k++) {
        qsort(P[k].pos_s, (size_t)P[k].n, sizeof(double), cmp_d);
        med[k] = P[k].pos_s[P[k].n / 2];
        printf("| %s | %d | %s | %.0f | %.0f-%.0f |\n", P[k].name, P[k].m.Vd, k ? "full, recomputed" : "top-K rows",
               med[k], P[k].pos_s[0], P[k].pos_s[P[k].n - 1]);
    }
    if (n_paths == 2) printf("\nratio: %.2fx the reference path\n", med[0] / med[1]);
    if (profile) {
        printf("\nwhere a step's time goes (share of the timed steps, all rounds):\n\n| section |");
        for (int k = 0; k < n_paths; k++) printf(" %s |", k ? "reference" : "this config");
        printf("\n|---|%s\n", n_paths == 2 ? "---:|---:|" : "---:|");
        double tot[2];
        for (int k = 0; k < n_paths; k++) tot[k] = P[k].prof.load + P[k].prof.step + P[k].prof.opt;
        printf("| data loading (bf16 taps to fp32, anchors) |");
        for (int k = 0; k < n_paths; k++) printf(" %.1f %% |", 100 * P[k].prof.load / tot[k]);
        for (int i = 0; i < BD_PROF_N; i++) {
            printf("\n| %s |", bd_prof_names[i]);
            for (int k = 0; k < n_paths; k++) printf(" %.1f %% |", 100 * P[k].m.ws.prof[i] / tot[k]);
        }
        printf("\n| AdamW + clipping |");
        for (int k = 0; k < n_paths; k++) printf(" %.1f %% |", 100 * P[k].prof.opt / tot[k]);
        printf("\n| seconds per step |");
        for (int k = 0; k < n_paths; k++) printf(" %.2f |", tot[k] / DS_MAX(1, P[k].prof.steps));
        printf("\n");
    }
    ret = 0;
fail:
    for (int k = 0; k < 2; k++) bd_model_free(&P[k].m);
    traindata_close(&data);
    target_close(&t);
    cJSON_Delete(cfg);
    return ret;
}
