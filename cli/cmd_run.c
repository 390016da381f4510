/* run — an experiment: prompts from benchmark sets, the autoregressive baseline and speculative
 * decoding on the same prompts in the same process, an HDF5 trace, a summary. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/datasets.h"
#include "../engine/decode.h"
#include "../engine/metrics.h"
#include "../runtime/base/common.h"
#include "args.h"
#include "commands.h"
#include "config.h"
#include "setup.h"

static uint64_t fnv_ids(const int *v, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)v[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

/* Build a cJSON object from the command-line overrides. */
static cJSON *overrides(int argc, char **argv, const char **config_path, int *rc_out) {
    const char *drafter = NULL, *draft_model = NULL, *scheduler = NULL, *datasets = NULL, *out = NULL, *data_root = NULL,
               *target = NULL, *sps = NULL, *backend = NULL, *isa = NULL, *prompts_out = NULL, *draft_head = NULL,
               *verifier = NULL;
    int gamma = 0, tree_nodes = 0, limit = -1, top_k = -1, max_new = 0, threads = -1, draft_layers = 0, draft_vocab = 0, skip_bad = 0, no_baseline = 0,
        concurrency = 0, exact = 0, compare_verifiers = 0;
    float temperature = -1, top_p = -1, min_p = -1;
    uint64_t seed = 0;
    int seen_seed = 0;
    opt_def opts[] = {
        {"config", OPT_STR, config_path, "FILE.json", "experiment config (flags below override it)", 0, 0, 0},
        {"model", OPT_STR, &target, "NAME|PATH", "target model: a name (below) or a file (default: smollm2-135m)", 0, 0, 0},
        {"drafter", OPT_STR, &drafter, "NAME", "drafter family (registered names below); none = baseline only", 0, 0, 0},
        {"draft-layers", OPT_INT, &draft_layers, "K", "vanilla self-draft: the target's first K layers", 1, 1024, 0},
        {"draft-model", OPT_STR, &draft_model, "NAME|PATH", "vanilla: a separate draft LM (a name below or a file)", 0, 0, 0},
        {"draft-vocab", OPT_INT, &draft_vocab, "N", "vanilla: draft over the N first token ids by merge rank (a smaller head)", 1, 1 << 24, 0},
        {"draft-head", OPT_STR, &draft_head, "TYPE", "vanilla: its head re-quantized, q5_0 or q4_1 (a smaller draft step)", 0, 0, 0},
        {"scheduler", OPT_STR, &scheduler, "NAME", "scheduler (registered names below)", 0, 0, 0},
        {"gamma", OPT_INT, &gamma, "N", "drafts per round (default 4)", 1, 64, 0},
        {"tree-nodes", OPT_INT, &tree_nodes, "N", "draft a tree of up to N nodes, verified exactly (0 = a chain; recycling, suffix, medusa, mtp, eagle3, dflash, dspark-markov, vanilla; combine merges its members' drafts; fixed or greedy scheduler; recycling's static template up to 80)", 0, DRAFT_TREE_MAX, 0},
        {"dataset", OPT_STR, &datasets, "A,B", "comma list of datasets or .jsonl paths (default builtin)", 0, 0, 0},
        {"limit", OPT_INT, &limit, "N", "prompts per dataset, 0 = all", 0, 1000000, 0},
        {"skip-bad-lines", OPT_FLAG, &skip_bad, NULL, "skip malformed dataset lines (counted in the trace) instead of failing", 0, 0, 0},
        {"data-root", OPT_STR, &data_root, "DIR", "where the shared datasets live (default ../shared/datasets)", 0, 0, 0},
        {"temperature", OPT_FLOAT, &temperature, "T", "0 = greedy (default 0)", 0, 100, 0},
        {"top-p", OPT_FLOAT, &top_p, "P", "nucleus mass, 1 = off", 1e-6, 1, 0},
        {"min-p", OPT_FLOAT, &min_p, "P", "drop tokens below P times the most likely one's probability, 0 = off", 0, 1, 0},
        {"top-k", OPT_INT, &top_k, "K", "0 = off", 0, 1 << 22, 0},
        {"seed", OPT_U64, &seed, "N", "random seed (default 1)", 0, 0, &seen_seed},
        {"max-new-tokens", OPT_INT, &max_new, "N", "output budget per request (default 128)", 1, 1 << 20, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores", 0, 256, 0},
        {"backend", OPT_STR, &backend, "NAME", "compute backend (default cpu)", 0, 0, 0},
        {"exact", OPT_FLAG, &exact, NULL, "fp32 activations in every matmul (the reference contract; default int8)", 0, 0, 0},
        {"isa", OPT_STR, &isa, "PATH", "CPU kernel path: auto (default), scalar, avx2, avx512-vnni, avx512-amx", 0, 0, 0},
        {"concurrency", OPT_INT, &concurrency, "N", "requests decoded together (default 1)", 1, 256, 0},
        {"sps", OPT_STR, &sps, "FILE.json", "SPS(B) table (default bench/bench-target.json)", 0, 0, 0},
        {"verifier", OPT_STR, &verifier, "RULE", "chain verification at T > 0: token (default) or block (Sun et al.; lossless, never fewer accepted in expectation; tree rounds keep the tree rule)", 0, 0, 0},
        {"compare-verifiers", OPT_FLAG, &compare_verifiers, NULL, "also report both rules' expected accepted drafts on the same drafts (costs passes over the vocabulary: not for timing)", 0, 0, 0},
        {"no-baseline", OPT_FLAG, &no_baseline, NULL, "skip the autoregressive baseline", 0, 0, 0},
        {"out", OPT_STR, &out, "FILE.h5", "trace path (default out/run.h5)", 0, 0, 0},
        {"prompts-out", OPT_STR, &prompts_out, "FILE.jsonl", "also write every request's rendered prompt (chat template applied) as JSON lines, for other tools", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos;
    *rc_out = args_parse("run", "[--config FILE.json] [options]", opts, argc, argv, pos, 0, &npos);
    if (*rc_out) return NULL;
    cJSON *j = cJSON_CreateObject();
    if (target) cJSON_AddStringToObject(j, "target", target);
    if (drafter || draft_layers || draft_model || draft_vocab || draft_head || tree_nodes) {
        if (drafter && strcmp(drafter, "none") == 0) cJSON_AddNullToObject(j, "drafter");
        else {
            /* without --drafter, the settings go into the configured drafter (vanilla when none is) */
            cJSON *d = cJSON_AddObjectToObject(j, "drafter");
            if (drafter) cJSON_AddStringToObject(d, "name", drafter);
            if (draft_layers) cJSON_AddNumberToObject(d, "layers", draft_layers);
            if (draft_model) cJSON_AddStringToObject(d, "model", draft_model);
            if (draft_vocab) cJSON_AddNumberToObject(d, "draft_vocab", draft_vocab);
            if (draft_head) cJSON_AddStringToObject(d, "head_type", draft_head);
            if (tree_nodes) cJSON_AddNumberToObject(d, "tree_nodes", tree_nodes);
        }
    }
    if (scheduler) cJSON_AddStringToObject(j, "scheduler", scheduler);
    if (gamma) cJSON_AddNumberToObject(j, "gamma", gamma);
    if (datasets) {
        /* split at every comma, empty names kept: the config check names them (strtok dropped them) */
        cJSON *a = cJSON_AddArrayToObject(j, "datasets");
        for (const char *s = datasets;; s++) {
            const char *e = strchr(s, ',');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            char *name = ds_strndup(s, len, "dataset name");
            if (name) cJSON_AddItemToArray(a, cJSON_CreateString(name));
            free(name);
            if (!e) break;
            s = e;
        }
    }
    if (limit >= 0) cJSON_AddNumberToObject(j, "limit", limit);
    if (skip_bad) cJSON_AddTrueToObject(j, "skip_bad_lines");
    if (data_root) cJSON_AddStringToObject(j, "data_root", data_root);
    if (temperature >= 0) cJSON_AddNumberToObject(j, "temperature", temperature);
    if (top_p >= 0) cJSON_AddNumberToObject(j, "top_p", top_p);
    if (min_p >= 0) cJSON_AddNumberToObject(j, "min_p", min_p);
    if (top_k >= 0) cJSON_AddNumberToObject(j, "top_k", top_k);
    if (seen_seed) cJSON_AddNumberToObject(j, "seed", (double)seed);
    if (max_new) cJSON_AddNumberToObject(j, "max_new_tokens", max_new);
    if (threads >= 0) cJSON_AddNumberToObject(j, "threads", threads);
    if (backend) cJSON_AddStringToObject(j, "backend", backend);
    if (exact) cJSON_AddTrueToObject(j, "exact");
    if (isa) cJSON_AddStringToObject(j, "isa", isa);
    if (concurrency) cJSON_AddNumberToObject(j, "concurrency", concurrency);
    if (sps) cJSON_AddStringToObject(j, "sps", sps);
    if (no_baseline) cJSON_AddFalseToObject(j, "baseline");
    if (verifier) cJSON_AddStringToObject(j, "verifier", verifier);
    if (compare_verifiers) cJSON_AddTrueToObject(j, "compare_verifiers");
    if (out) cJSON_AddStringToObject(j, "out", out);
    if (prompts_out) cJSON_AddStringToObject(j, "prompts_out", prompts_out);
    return j;
}

typedef struct {
    prompt *p;
    int global;
} job;

/* One JSON line per request: what another tool needs to decode exactly this prompt (the text with
 * the chat template applied, special tokens written out; our token count to check its tokenizer). */
static int write_prompt(FILE *pf, const target *t, const job *jb, int id, int turn, const chat_msg *msgs, int nmsg,
                        int n_tokens) {
    char *text = chat_render(&t->ct, msgs, nmsg, 1);
    cJSON *o = cJSON_CreateObject();
    char *line = NULL;
    int rc = -1;
    if (!text || !o) goto done;
    cJSON_AddNumberToObject(o, "request", id);
    cJSON_AddStringToObject(o, "dataset", jb->p->dataset);
    cJSON_AddNumberToObject(o, "index", jb->p->index);
    cJSON_AddNumberToObject(o, "turn", turn + 1);
    cJSON_AddNumberToObject(o, "prompt_tokens", n_tokens);
    cJSON_AddStringToObject(o, "text", text);
    if (!(line = cJSON_PrintUnformatted(o))) goto done;
    rc = fprintf(pf, "%s\n", line) < 0 ? -1 : 0;
done:
    if (rc) ds_error("run: cannot write a prompt line (out of memory or disk)");
    free(line);
    cJSON_Delete(o);
    free(text);
    return rc;
}

/* Decode one group of prompts in one mode: turn 1, then (MT-Bench) turn 2 on top of each answer.
 * pf: where to write the rendered prompts (NULL = not this mode): the first mode run writes them,
 * so a second turn carries the baseline's answer (at temperature 0 both modes' answers are equal). */
static int run_group(target *t, job *jobs, int n, const decode_cfg *cfg, const run_config *rc, trace *tr,
                     decode_stats *st, long *out_tokens, double *wall, FILE *pf) {
    request *reqs = ds_calloc((size_t)n, sizeof *reqs, "requests");
    request **rp = ds_calloc((size_t)n, sizeof *rp, "requests");
    char **answers = ds_calloc((size_t)n, sizeof(char *), "answers");
    int *job_of = ds_calloc((size_t)n, sizeof(int), "requests");
    int rc_ = -1;
    if (!reqs || !rp || !answers || !job_of) goto done;
    for (int turn = 0; turn < 2; turn++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            prompt *p = jobs[i].p;
            if (turn == 1 && !p->text2) continue;
            chat_msg msgs[3] = {{"user", p->text}, {"assistant", answers[i] ? answers[i] : ""}, {"user", p->text2 ? p->text2 : ""}};
            ivec ids = {0};
            if (chat_encode(&t->ct, &t->tk, msgs, turn ? 3 : 1, 1, &ids)) goto done;
            if (pf && write_prompt(pf, t, &jobs[i], jobs[i].global * 2 + turn, turn, msgs, turn ? 3 : 1, ids.n)) {
                ivec_free(&ids);
                goto done;
            }
            uint64_t seed = mix(mix(rc->seed, (uint64_t)jobs[i].global), (uint64_t)(turn * 2 + cfg->mode));
            int r = request_init(&reqs[m], t, jobs[i].global * 2 + turn, ids.v, ids.n, rc->max_new, seed);
            ivec_free(&ids);
            if (r) goto done;
            rp[m] = &reqs[m];
            job_of[m++] = i;
        }
        if (m == 0) break;
        int rc2 = decode_run(t, rp, m, cfg, st);
        for (int k = 0; k < m && rc2 == 0; k++) {
            request *q = &reqs[k];
            int i = job_of[k];
            int nout = request_n_out(q);
            const int *out = q->toks.v + q->n_prompt;
            trace_request row = {q->id, cfg->mode, {0}, {0}, jobs[i].p->index, q->n_prompt, nout, q->rounds, q->wall_s,
                                 (int64_t)fnv_ids(out, nout)};
            snprintf(row.dataset, sizeof row.dataset, "%s", jobs[i].p->dataset);
            snprintf(row.domain, sizeof row.domain, "%s", jobs[i].p->domain);
            if (trace_add_request(tr, &row)) rc2 = -1;
            *out_tokens += nout;
            *wall += q->wall_s;
            if (turn == 0 && jobs[i].p->text2) {
                free(answers[i]);
                answers[i] = tokenizer_decode(&t->tk, out, nout, 0);
                if (!answers[i]) rc2 = -1;
            }
        }
        for (int k = 0; k < m; k++) request_free(&reqs[k], t);
        if (rc2) goto done;
    }
    rc_ = 0;
done:
    if (reqs)
        for (int k = 0; k < n; k++)
            if (reqs[k].toks.v || reqs[k].tkv) request_free(&reqs[k], t);
    if (answers)
        for (int i = 0; i < n; i++) free(answers[i]);
    free(answers);
    free(job_of);
    free(rp);
    free(reqs);
    return rc_;
}

int cmd_run(int argc, char **argv) {
    const char *config_path = NULL;
    int prc;
    cJSON *ov = overrides(argc, argv, &config_path, &prc);
    if (!ov) return prc < 0 ? -1 : 0;
    run_config rc;
    run_config_defaults(&rc);
    target t;
    memset(&t, 0, sizeof t);
    drafter d;
    memset(&d, 0, sizeof d);
    scheduler s;
    memset(&s, 0, sizeof s);
    sps_table sps = {0};
    run_prompts rp = {0};
    job *jobs = NULL;
    trace *tr = NULL;
    FILE *pf = NULL;
    char pf_tmp[1100] = "";
    int ret = -1;
    if (config_path && run_config_load(&rc, config_path)) goto done;
    /* flags with no drafter configured anywhere: the vanilla self-draft, as documented */
    {
        cJSON *dv = cJSON_GetObjectItemCaseSensitive(ov, "drafter");
        if (cJSON_IsObject(dv) && !cJSON_GetObjectItemCaseSensitive(dv, "name") && !rc.drafter[0])
            cJSON_AddStringToObject(dv, "name", "vanilla");
    }
    if (run_config_apply(&rc, ov, "command line", 1)) goto done;
    if (!rc.out[0]) snprintf(rc.out, sizeof rc.out, "out/run.h5");
    DS_CHECK(rc.drafter[0] || rc.baseline, "nothing to run: no drafter, and the baseline is off (--no-baseline)");
    DS_CHECK(!rc.serve_cfg, "%s: the \"serve\" settings are read by `dspark-bench serve`, not `run`",
             config_path ? config_path : "the config");
    /* the prompts file is renamed into place at the end: over the trace, it replaced it; and neither
     * output may land on an input (the config, the SPS table, a dataset file) */
    DS_CHECK(!rc.prompts_out[0] || !ds_same_file(rc.prompts_out, rc.out),
             "--prompts-out %s is the trace's own file (--out %s): the prompts would replace the trace", rc.prompts_out, rc.out);
    for (int k = 0; k < 2; k++) {
        const char *o = k ? rc.prompts_out : rc.out, *flag = k ? "--prompts-out" : "--out";
        if (!o[0]) continue;
        DS_CHECK(!config_path || !ds_same_file(o, config_path), "%s %s is the config file: it would replace it", flag, o);
        DS_CHECK(!rc.sps[0] || !ds_same_file(o, rc.sps), "%s %s is the SPS table: it would replace it", flag, o);
        for (int i = 0; i < rc.n_datasets; i++)
            DS_CHECK(!ds_same_file(o, rc.datasets[i]), "%s %s is a dataset file: it would replace it", flag, o);
    }
    /* everything that can be checked before the model loads */
    DS_TRY(run_prompts_load(&rc, &rp));
    int total = rp.total, skipped = rp.skipped;
    if (rc.drafter[0] && !drafter_find(rc.drafter)) goto fail;
    if (!scheduler_find(rc.scheduler, 0)) goto fail;
    DS_TRY(run_models_open(&rc, "run", &t, &d));
    DS_TRY(scheduler_open(&s, rc.scheduler, rc.scheduler_cfg, 0));
    if (rc.drafter[0]) /* the drafter and scheduler as a pair: refused here, not after a baseline pass */
        DS_TRY(decode_cfg_check(&(decode_cfg){rc.sp, rc.gamma, &d, &s, NULL, NULL, MODE_SPEC}));
    DS_TRY(run_sps_load(&rc, s.ops->needs_conf, t.m.fingerprint, &sps));
    DS_TRYP(tr = run_trace_open(&rc, rc.out, &t, &d, NULL));
    if (rc.prompts_out[0]) { /* written as PATH.tmp, renamed when the run succeeds */
        snprintf(pf_tmp, sizeof pf_tmp, "%s.tmp", rc.prompts_out);
        DS_TRY(ds_mkdirs_for(rc.prompts_out, "the prompts file's folder"));
        DS_CHECK((pf = fopen(pf_tmp, "w")) != NULL, "%s: cannot create the prompts file: %s", pf_tmp, strerror(errno));
    }
    DS_TRY(trace_attr_u64(tr, "skipped_lines", (uint64_t)skipped)); /* malformed dataset lines skipped on request */
    if (skipped) fprintf(stderr, "run: %d malformed dataset line(s) skipped (skip_bad_lines)\n", skipped);
    fprintf(stderr, "run: %d prompts from %d dataset(s); %s; gamma %d, %s scheduler, T=%g -> %s\n", total, rc.n_datasets,
            rc.drafter[0] ? d.describe : "baseline only", rc.gamma, rc.scheduler, (double)rc.sp.temperature, rc.out);

    DS_TRYP(jobs = ds_malloc(sizeof *jobs * (size_t)total, "jobs"));
    for (int i = 0, g = 0; i < rp.n_sets; i++)
        for (int k = 0; k < rp.sets[i].n; k++, g++) jobs[g] = (job){&rp.sets[i].v[k], g};
    decode_cfg cfg_ar = {rc.sp, rc.gamma, NULL, NULL, &sps, tr, MODE_AR};
    decode_cfg cfg_sp = {rc.sp, rc.gamma, rc.drafter[0] ? &d : NULL, &s, &sps, tr, MODE_SPEC};
    DS_TRY(chain_rule_parse(rc.verifier, &cfg_sp.rule));
    cfg_sp.compare_rules = rc.compare_verifiers;
    decode_stats st_ar, st_sp;
    memset(&st_ar, 0, sizeof st_ar);
    memset(&st_sp, 0, sizeof st_sp);
    long tok_ar = 0, tok_sp = 0;
    double wall_ar = 0, wall_sp = 0;
    ds_progress prog;
    ds_progress_start(&prog, "run: prompts", "prompts", total);
    for (int g = 0; g < total; g += rc.concurrency) {
        int n = DS_MIN(rc.concurrency, total - g);
        /* baseline and speculative on the same prompts, alternating so machine drift hits both */
        if (rc.baseline) DS_TRY(run_group(&t, jobs + g, n, &cfg_ar, &rc, tr, &st_ar, &tok_ar, &wall_ar, pf));
        if (rc.drafter[0])
            DS_TRY(run_group(&t, jobs + g, n, &cfg_sp, &rc, tr, &st_sp, &tok_sp, &wall_sp, rc.baseline ? NULL : pf));
        char extra[160];
        snprintf(extra, sizeof extra, "AR %.1f tok/s | spec %.1f tok/s, tau %.2f", wall_ar > 0 ? tok_ar / wall_ar : 0,
                 wall_sp > 0 ? tok_sp / wall_sp : 0, st_sp.rounds ? (double)st_sp.emitted / st_sp.rounds : 0);
        ds_progress_update(&prog, g + n, extra);
    }
    ds_progress_end(&prog);
    for (int j = 1; j <= rc.gamma && rc.drafter[0]; j++) {
        trace_position row = {j, st_sp.pos_attempted[j], st_sp.pos_accepted[j]};
        DS_TRY(trace_add_position(tr, &row));
    }
    if (rc.drafter[0]) DS_TRY(trace_attr_f64(tr, "draft_seq_loop_s", d.t_seq_loop));
    if (st_sp.rule_rounds) { /* --compare-verifiers: both chain rules on the same drafts */
        DS_TRY(trace_attr_f64(tr, "compare_rounds", (double)st_sp.rule_rounds));
        DS_TRY(trace_attr_f64(tr, "expected_accepted_token", st_sp.exp_acc_token / st_sp.rule_rounds));
        DS_TRY(trace_attr_f64(tr, "expected_accepted_block", st_sp.exp_acc_block / st_sp.rule_rounds));
    }
    {
        trace *done_tr = tr; /* trace_close frees it, whatever it returns */
        tr = NULL;
        DS_TRY(trace_close(done_tr));
    }
    if (pf) {
        int werr = ferror(pf);
        FILE *f = pf;
        pf = NULL;
        DS_CHECK(fclose(f) == 0 && !werr, "%s: cannot write the prompts file", pf_tmp);
        DS_CHECK(rename(pf_tmp, rc.prompts_out) == 0, "%s: cannot rename to %s: %s", pf_tmp, rc.prompts_out, strerror(errno));
        pf_tmp[0] = 0;
    }
    printf("trace: %s\n", rc.out);
    if (rc.baseline) printf("autoregressive: %ld tokens in %.2f s = %.1f tok/s\n", tok_ar, wall_ar, tok_ar / wall_ar);
    if (rc.drafter[0]) {
        printf("speculative:    %ld tokens in %.2f s = %.1f tok/s; tau %.3f, acceptance %.3f; draft %.0f%% / verify %.0f%% of "
               "round time\n",
               tok_sp, wall_sp, tok_sp / wall_sp, (double)st_sp.emitted / (double)DS_MAX(st_sp.rounds, 1),
               (double)st_sp.accepted / (double)DS_MAX(st_sp.verified, 1),
               100 * st_sp.t_draft / (st_sp.t_draft + st_sp.t_sched + st_sp.t_verify),
               100 * st_sp.t_verify / (st_sp.t_draft + st_sp.t_sched + st_sp.t_verify));
        /* what a round costs beyond the target's forward (a decode step's own overhead is in the AR line) */
        printf("round time: draft %.2f ms, verify %.2f ms (target forward %.2f ms, the rest %.2f ms) a round",
               1e3 * st_sp.t_draft / DS_MAX(st_sp.rounds, 1), 1e3 * st_sp.t_verify / DS_MAX(st_sp.rounds, 1),
               1e3 * st_sp.t_forward / DS_MAX(st_sp.rounds, 1),
               1e3 * (st_sp.t_verify - st_sp.t_forward) / DS_MAX(st_sp.rounds, 1));
        if (rc.baseline && st_ar.rounds)
            printf("; autoregressive step: forward %.2f ms, the rest %.2f ms", 1e3 * st_ar.t_forward / st_ar.rounds,
                   1e3 * (st_ar.t_draft + st_ar.t_sched + st_ar.t_verify - st_ar.t_forward) / st_ar.rounds);
        printf("\n");
        if (d.ops->report) {
            char line[512];
            d.ops->report(&d, line, sizeof line);
            printf("%s\n", line);
        }
        if (st_sp.rule_rounds)
            printf("chain rules on the same drafts (%ld sampled rounds, %s verification ran): expected accepted drafts "
                   "a round, token-wise %.4f, block %.4f (%+.2f%%)\n",
                   st_sp.rule_rounds, rc.verifier, st_sp.exp_acc_token / st_sp.rule_rounds,
                   st_sp.exp_acc_block / st_sp.rule_rounds,
                   100 * (st_sp.exp_acc_block / DS_MAX(st_sp.exp_acc_token, 1e-300) - 1));
        if (d.t_seq_loop > 0)
            printf("draft head's sequential loop: %.3f s = %.1f%% of round time\n", d.t_seq_loop,
                   100 * d.t_seq_loop / (st_sp.t_draft + st_sp.t_sched + st_sp.t_verify));
        if (rc.baseline) {
            double dec_ar = st_ar.t_draft + st_ar.t_sched + st_ar.t_verify, dec_sp = st_sp.t_draft + st_sp.t_sched + st_sp.t_verify;
            /* at T > 0 the modes' outputs differ in length: engine/metrics.h */
            printf("wall speedup over the autoregressive baseline: %.3fx (prefill included: %.1f s of its %.1f s); "
                   "decode only: %.3fx\n", speedup_wall(wall_ar, wall_sp, dec_sp, st_ar.emitted, st_sp.emitted),
                   st_ar.t_prefill, wall_ar, speedup_decode(dec_ar, dec_sp, st_ar.emitted, st_sp.emitted));
        }
    }
    ret = 0;
    goto done;
fail:
    ret = -1;
done:
    if (tr) trace_abort(tr);
    if (pf) fclose(pf);
    if (pf_tmp[0]) remove(pf_tmp); /* a failed run leaves no half prompts file */
    cJSON_Delete(ov);
    free(jobs);
    run_prompts_free(&rp);
    sps_free(&sps);
    scheduler_close(&s);
    if (d.ops) drafter_close(&d);
    target_close(&t);
    run_config_free(&rc);
    return ret;
}
