/* train — train a drafter (dflash, dspark-markov, dspark-rnn, medusa, mtp, eagle3, vanilla) against the frozen target:
 * build (or resume building) the data cache of target responses and states, then train with
 * checkpoints in the run folder; a killed run resumes from its last checkpoint. */
#include <cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drafters/blockdraft.h"
#include "../engine/draft_vocab.h"
#include "../engine/train.h"
#include "../runtime/base/common.h"
#include "../runtime/jcfg.h"
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
    cJSON *cfg = NULL;
    target t;
    memset(&t, 0, sizeof t);
    train_cache data;
    memset(&data, 0, sizeof data);
    bd_model m;
    memset(&m, 0, sizeof m);
    md_model mm;
    memset(&mm, 0, sizeof mm);
    mtp_model pm;
    memset(&pm, 0, sizeof pm);
    vlm_model vm;
    memset(&vm, 0, sizeof vm);
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
    /* the family: a block drafter, or Medusa or MTP (their own models; the cache taps the target's last layer) */
    int vanilla = strcmp(tc.drafter_name->valuestring, "vanilla") == 0;
    int medusa = strcmp(tc.drafter_name->valuestring, "medusa") == 0, is_mtp = strcmp(tc.drafter_name->valuestring, "mtp") == 0 ||
                                                                      strcmp(tc.drafter_name->valuestring, "eagle3") == 0;
    bd_config c;
    md_config mc;
    mtp_config pc;
    vlm_config vc;
    int want[8], n_want;
    if (vanilla) { /* reads no target states; a cache of its own keeps the last layer (Medusa's and MTP's) */
        DS_TRY(train_config_vanilla(&tc, &t, &vc));
        n_want = d.n_tap ? 0 : 1, want[0] = t.m.cfg.n_layers - 1;
    } else if (medusa) {
        DS_TRY(train_config_medusa(&tc, &t, &mc));
        n_want = 1, want[0] = mc.tap;
    } else if (is_mtp) {
        DS_TRY(train_config_mtp(&tc, &t, &pc));
        n_want = pc.n_tap;
        memcpy(want, pc.taps, sizeof(int) * (size_t)n_want);
    } else {
        DS_TRY(train_config_drafter(&tc, &t, &c));
        n_want = c.n_tap;
        memcpy(want, c.tap, sizeof(int) * (size_t)n_want);
    }
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
    if (vanilla) {
        int *ids;
        DS_TRY(train_config_vocab(&data, &t, vc.c.contract.draft_vocab, &ids));
        int e = vlm_model_init(&vm, &vc, &t.m, o.seed, 1, ids);
        free(ids);
        DS_TRY(e);
        DS_TRY(vlm_trainable(&vm, &tr));
        fprintf(stderr, "train: vanilla, %zu parameters (a distilled LM: %d layers, FFN %d, %s; the target's embedding "
                        "and head, frozen); data %s: %d sequences, %ld tokens\n",
                vm.n_params, vc.n_layers, vc.c.hidden_dim, vc.init_layers ? "layers from the target's first" : "random",
                d.dir, data.n_seq, data.n_tok);
    } else if (medusa) { /* a resumed run reads its parameters from OUT/last in train_run */
        int *ids;
        DS_TRY(train_config_vocab(&data, &t, mc.contract.draft_vocab, &ids));
        int e = md_model_init(&mm, &mc, &t.m, o.seed, 0, 1, ids);
        free(ids);
        DS_TRY(e);
        DS_TRY(md_trainable(&mm, &tr));
        fprintf(stderr, "train: medusa, %zu parameters (%d heads on layer %d); data %s: %d sequences, %ld tokens\n",
                mm.n_params, mc.heads, mc.tap, d.dir, data.n_seq, data.n_tok);
    } else if (is_mtp) {
        int *ids;
        DS_TRY(train_config_vocab(&data, &t, pc.contract.draft_vocab, &ids));
        int e = mtp_model_init(&pm, &pc, &t.m, o.seed, 1, ids);
        free(ids);
        DS_TRY(e);
        DS_TRY(mtp_trainable(&pm, &tr));
        char taps[64] = "";
        for (int i = 0; i < pc.n_tap; i++)
            snprintf(taps + strlen(taps), sizeof taps - strlen(taps), "%s%d", i ? ", " : "", pc.taps[i]);
        fprintf(stderr, "train: %s, %zu parameters (one module on layer%s %s%s, depth %d, block from %s); data %s: %d "
                        "sequences, %ld tokens\n",
                pc.kind, pm.n_params, pc.n_tap > 1 ? "s" : "", taps, mtp_fused(&pc) ? " fused" : "", pc.depth,
                pc.init_layer >= 0 ? "the target's last layer" : "random", d.dir, data.n_seq, data.n_tok);
    } else {
        char last[4200];
        snprintf(last, sizeof last, "%s/last", out);
        DS_TRY(train_drafter_new(&c, &t, &data, 0, o.seed, o.warm_start ? NULL : last, &m));
        DS_TRY(bd_trainable(&m, &tr));
        fprintf(stderr, "train: %s, %zu parameters (%d layers, gamma %d, %s, lambda %g); data %s: %d sequences, %ld tokens\n",
                c.kind, m.n_params, c.n_layers, c.gamma, c.head == HEAD_NONE ? "no head" : c.head == HEAD_MARKOV ? "Markov head" : "RNN head",
                (double)c.lambda, d.dir, data.n_seq, data.n_tok);
    }
    DS_TRY(train_run(&tr, &data, &o, NULL, 0, NULL));
    printf("trained %s: checkpoint %s/last (model.safetensors + config.json); logs %s/train_log.jsonl, eval_log.jsonl\n",
           tr.kind, out, out);
    ret = 0;
fail:
    bd_model_free(&m);
    md_model_free(&mm);
    mtp_model_free(&pm);
    vlm_model_free(&vm);
    traindata_close(&data);
    target_close(&t);
    cJSON_Delete(cfg);
    return ret;
}
