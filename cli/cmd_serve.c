/* serve — the serving simulation (engine/serve.h) swept over concurrency (closed loop) or arrival
 * rate (open loop), for the autoregressive baseline and each scheduler named in the config's
 * "serve" object, on one target and drafter loaded once. Writes DIR/serve.md (table, SLA view,
 * gnuplot figures: throughput against per-user speed = paper Fig. 7; throughput and verification
 * budget against concurrency = Fig. 8) and DIR/serve.json (every point). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/datasets.h"
#include "../engine/serve.h"
#include "../runtime/base/common.h"
#include "../runtime/base/cpu_features.h"
#include "../runtime/base/jcfg.h"
#include "args.h"
#include "commands.h"
#include "config.h"
#include "plot.h"
#include "setup.h"

#define MAX_POINTS 16
#define MAX_ARMS 12 /* schedulers compared, + the baseline */

typedef struct {
    char label[96];      /* "fixed", "greedy", "fixed {"length":1}", "autoregressive" */
    scheduler s;
    cJSON *sched;        /* {"name": ..., settings} as recorded in its traces (null: the baseline) */
    int ar;              /* the baseline: no drafter */
    serve_result res[MAX_POINTS];
    char trace[MAX_POINTS][1200]; /* each point's HDF5 trace */
} arm;

typedef struct {
    int closed, n_points, n_requests, max_batch;
    double x[MAX_POINTS]; /* concurrency or rate */
    double sla;
    const cJSON *schedulers;
} serve_cfg;

static int read_points(const cJSON *v, const char *key, int integer, serve_cfg *c) {
    if (!v) return 0;
    if (cJSON_IsNumber(v)) {
        c->x[0] = v->valuedouble;
        c->n_points = 1;
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 && cJSON_GetArraySize(v) <= MAX_POINTS) {
        c->n_points = 0;
        for (const cJSON *e = v->child; e; e = e->next) {
            if (!cJSON_IsNumber(e)) break;
            c->x[c->n_points++] = e->valuedouble;
        }
        if (c->n_points != cJSON_GetArraySize(v)) goto bad;
    } else {
        goto bad;
    }
    /* a rate's arrivals live on a simulated clock in seconds: outside 1e-6..1e6 requests a second the
     * gaps swamp a round's milliseconds in a double (1e-300 gave 0-second latencies, 6e9 tok/s) */
    for (int i = 0; i < c->n_points; i++)
        if (integer ? !(c->x[i] >= 1 && c->x[i] <= 256 && c->x[i] == floor(c->x[i])) : !(c->x[i] >= 1e-6 && c->x[i] <= 1e6))
            goto bad;
    return 0;
bad:
    ds_error("serve.%s: %s or an array of 1..%d of them", key,
             integer ? "a positive integer (at most 256)" : "a number of requests a second in 1e-06..1e+06", MAX_POINTS);
    return -1;
}

static int parse_serve(const cJSON *j, serve_cfg *c) {
    memset(c, 0, sizeof *c);
    c->closed = 1;
    c->sla = 0;
    c->max_batch = 32;
    const char *arrival = "closed";
    jcfg r;
    if (jcfg_open(&r, j, "serve") || jcfg_str(&r, "arrival", &arrival) ||
        jcfg_int(&r, "requests", 1, 1 << 20, &c->n_requests) || jcfg_double(&r, "sla_tok_s", 0, 1e6, &c->sla) ||
        jcfg_int(&r, "max_batch", 1, 256, &c->max_batch))
        return -1;
    const cJSON *conc = jcfg_get(&r, "concurrency"), *rate = jcfg_get(&r, "rate");
    c->schedulers = jcfg_get(&r, "schedulers");
    jcfg_skip(&r, "comment");
    if (jcfg_close(&r)) return -1;
    if (strcmp(arrival, "closed") && strcmp(arrival, "open")) {
        ds_error("serve.arrival: '%s' is not an arrival process (known: closed, open)", arrival);
        return -1;
    }
    c->closed = !strcmp(arrival, "closed");
    if (c->closed && rate) {
        ds_error("serve.rate: a closed loop has no arrival rate (use \"arrival\": \"open\", or \"concurrency\")");
        return -1;
    }
    if (!c->closed && conc) {
        ds_error("serve.concurrency: an open loop is swept over \"rate\" (its batch cap is \"max_batch\")");
        return -1;
    }
    c->n_points = 1;
    c->x[0] = 1;
    if (c->closed ? read_points(conc, "concurrency", 1, c) : read_points(rate, "rate", 0, c)) return -1;
    if (!c->closed && !rate) {
        ds_error("serve.rate: an open loop needs arrival rates (requests per second)");
        return -1;
    }
    if (c->schedulers && (!cJSON_IsArray(c->schedulers) || cJSON_GetArraySize(c->schedulers) < 1 ||
                          cJSON_GetArraySize(c->schedulers) > MAX_ARMS - 1)) {
        ds_error("serve.schedulers: an array of 1..%d schedulers (names or {\"name\": ..., settings})", MAX_ARMS - 1);
        return -1;
    }
    return 0;
}

/* one scheduler entry: "name" or {"name": ..., settings} */
static int open_arm(arm *a, const cJSON *e, int i) {
    const cJSON *name = cJSON_IsString(e) ? e : cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(name)) {
        ds_error("serve.schedulers[%d]: a scheduler name or an object with \"name\"", i);
        return -1;
    }
    cJSON *set = NULL;
    if (cJSON_IsObject(e)) {
        set = cJSON_Duplicate(e, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(set, "name");
    }
    int rc = scheduler_open(&a->s, name->valuestring, set, 0);
    if (!(a->sched = cJSON_IsObject(e) ? cJSON_Duplicate(e, 1) : cJSON_CreateObject()) ||
        (!cJSON_IsObject(e) && !cJSON_AddStringToObject(a->sched, "name", name->valuestring))) {
        ds_error("serve.schedulers[%d]: out of memory", i);
        rc = -1;
    }
    char *txt = set && set->child ? cJSON_PrintUnformatted(set) : NULL;
    snprintf(a->label, sizeof a->label, "%s%s%s", name->valuestring, txt ? " " : "", txt ? txt : "");
    free(txt);
    cJSON_Delete(set);
    if (rc) ds_error_prefix("serve.schedulers[%d]", i);
    return rc;
}

/* the highest aggregate throughput among points whose mean per-user speed meets the SLA */
static int sla_best(const arm *a, int n, double sla) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (a->res[i].user_tok_s >= sla && (best < 0 || a->res[i].agg_tok_s > a->res[best].agg_tok_s)) best = i;
    return best;
}

/* a data block per arm for gnuplot: x, aggregate, per-user, verify budget */
static void plot_data(FILE *f, const arm *arms, int n_arms, const serve_cfg *c) {
    for (int a = 0; a < n_arms; a++) {
        fprintf(f, "$d%d << EOD\n", a);
        for (int i = 0; i < c->n_points; i++)
            fprintf(f, "%g %.3f %.3f %.3f\n", c->x[i], arms[a].res[i].agg_tok_s, arms[a].res[i].user_tok_s,
                    arms[a].res[i].verify_per_req);
        fprintf(f, "EOD\n");
    }
}

static char *plot_body(const arm *arms, int n_arms, const serve_cfg *c, const char *using_) {
    size_t cap = 65536;
    char *b = malloc(cap);
    if (!b) return NULL;
    FILE *f = fmemopen(b, cap, "w");
    if (!f) {
        free(b);
        return NULL;
    }
    plot_data(f, arms, n_arms, c);
    fprintf(f, "plot ");
    for (int a = 0; a < n_arms; a++)
        fprintf(f, "%s$d%d using %s with linespoints lw 2 title '%s'", a ? ", " : "", a, using_, arms[a].label);
    fputc(0, f);
    fclose(f);
    return b;
}

/* DIR/traces/NN-<label as a file name>-c<concurrency> (or -r<rate>).h5 */
static void trace_path(char *buf, size_t n, const char *dir, const arm *a, int ai, const serve_cfg *c, int i) {
    char slug[64];
    int k = 0;
    for (const char *p = a->label; *p && k < (int)sizeof slug - 1; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.';
        if (ok) slug[k++] = *p;
        else if (k > 0 && slug[k - 1] != '-') slug[k++] = '-';
    }
    while (k > 0 && slug[k - 1] == '-') k--;
    slug[k] = 0;
    snprintf(buf, n, "%s/traces/%02d-%s-%s%g.h5", dir, ai, slug, c->closed ? "c" : "r", c->x[i]);
}

static int write_outputs(const char *dir, const arm *arms, int n_arms, const serve_cfg *c, const char *machine,
                         const char *what, const cJSON *resolved) {
    char path[1100];
    snprintf(path, sizeof path, "%s/serve.json", dir);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "config", cJSON_Duplicate(resolved, 1));
    cJSON_AddStringToObject(j, "machine", machine);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    for (int a = 0; a < n_arms; a++)
        for (int i = 0; i < c->n_points; i++) {
            const serve_result *r = &arms[a].res[i];
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "arm", arms[a].label);
            cJSON_AddNumberToObject(p, c->closed ? "concurrency" : "rate", c->x[i]);
            cJSON_AddNumberToObject(p, "requests", (double)r->requests);
            cJSON_AddNumberToObject(p, "tokens", (double)r->tokens);
            cJSON_AddNumberToObject(p, "clock_s", r->clock_s);
            cJSON_AddNumberToObject(p, "aggregate_tok_s", r->agg_tok_s);
            cJSON_AddNumberToObject(p, "per_user_tok_s", r->user_tok_s);
            cJSON_AddNumberToObject(p, "per_user_p10_tok_s", r->user_p10_tok_s);
            cJSON_AddNumberToObject(p, "latency_s", r->latency_s);
            cJSON_AddNumberToObject(p, "wait_s", r->wait_s);
            cJSON_AddNumberToObject(p, "mean_batch", r->mean_batch);
            cJSON_AddNumberToObject(p, "verified_per_request_round", r->verify_per_req);
            cJSON_AddNumberToObject(p, "tau", r->tau);
            cJSON_AddNumberToObject(p, "prefill_s", r->prefill_s);
            cJSON_AddNumberToObject(p, "idle_s", r->idle_s);
            cJSON_AddStringToObject(p, "trace", arms[a].trace[i]);
            cJSON_AddItemToArray(pts, p);
        }
    int wrc = ds_write_json(j, path);
    cJSON_Delete(j);
    if (wrc) {
        ds_error_prefix("serve: writing %s", path);
        return -1;
    }
    snprintf(path, sizeof path, "%s/serve.md", dir);
    FILE *md = fopen(path, "w");
    if (!md) {
        ds_error("serve: cannot write %s", path);
        return -1;
    }
    const char *xn = c->closed ? "concurrency" : "rate (req/s)";
    fprintf(md, "# Serving simulation\n\n%s\n\nMachine: %s.\n\n", what, machine);
    fprintf(md, "Traces: one HDF5 file per point in `traces/` (`dspark-bench report traces/FILE.h5`): round rows "
                "(a batch round's time split evenly over its requests), confidences, request rows, per-position "
                "acceptance.\n\n");
    fprintf(md, "| scheduler | %s | mean batch | aggregate tok/s | per-user tok/s | p10 per-user | verified / req / round | "
                "tau | latency s | queue s |\n|---|---|---|---|---|---|---|---|---|---|\n", xn);
    for (int a = 0; a < n_arms; a++)
        for (int i = 0; i < c->n_points; i++) {
            const serve_result *r = &arms[a].res[i];
            fprintf(md, "| %s | %g | %.1f | %.1f | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f |\n", arms[a].label, c->x[i],
                    r->mean_batch, r->agg_tok_s, r->user_tok_s, r->user_p10_tok_s, r->verify_per_req, r->tau,
                    r->latency_s, r->wait_s);
        }
    if (c->sla > 0) {
        fprintf(md, "\n## SLA view: the most aggregate throughput with mean per-user speed >= %g tok/s\n\n"
                    "| scheduler | best %s | aggregate tok/s | per-user tok/s | vs autoregressive |\n|---|---|---|---|---|\n",
                c->sla, xn);
        int b0 = -1;
        for (int a = 0; a < n_arms; a++)
            if (arms[a].ar) b0 = sla_best(&arms[a], c->n_points, c->sla);
        double base = 0;
        for (int a = 0; a < n_arms; a++)
            if (arms[a].ar && b0 >= 0) base = arms[a].res[b0].agg_tok_s;
        for (int a = 0; a < n_arms; a++) {
            int b = sla_best(&arms[a], c->n_points, c->sla);
            if (b < 0) fprintf(md, "| %s | none meets it | - | - | - |\n", arms[a].label);
            else {
                fprintf(md, "| %s | %g | %.1f | %.2f | ", arms[a].label, c->x[b], arms[a].res[b].agg_tok_s,
                        arms[a].res[b].user_tok_s);
                if (base > 0) fprintf(md, "%.2fx |\n", arms[a].res[b].agg_tok_s / base);
                else fprintf(md, "- |\n");
            }
        }
    }
    char *b7 = plot_body(arms, n_arms, c, "3:2"), *b8 = plot_body(arms, n_arms, c, "1:2"), *b8v = plot_body(arms, n_arms, c, "1:4");
    if (b7 && b8 && b8v) {
        char base[1100];
        const char *logx = c->closed ? "set key outside right\nset logscale x 2\n" : "set key outside right\n";
        snprintf(base, sizeof base, "%s/fig7-throughput-vs-user", dir);
        plot_write(md, base, "", "aggregate throughput against per-user speed (Fig. 7)", "per-user tok/s",
                   "aggregate tok/s", "set key outside right\n", b7);
        snprintf(base, sizeof base, "%s/fig8-throughput", dir);
        plot_write(md, base, "", "aggregate throughput (Fig. 8)", xn, "aggregate tok/s", logx, b8);
        snprintf(base, sizeof base, "%s/fig8-verify-budget", dir);
        plot_write(md, base, "", "drafts verified per request per round (Fig. 8)", xn, "verified drafts", logx, b8v);
    }
    free(b7), free(b8), free(b8v);
    fclose(md);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *config_path = NULL, *out = NULL, *sps_path = NULL;
    int limit = -1, requests = 0, threads = -1;
    opt_def opts[] = {
        {"config", OPT_STR, &config_path, "FILE.json", "experiment config with a \"serve\" object (required)", 0, 0, 0},
        {"out", OPT_STR, &out, "DIR", "where serve.md, serve.json and the plots go (default out/serve)", 0, 0, 0},
        {"limit", OPT_INT, &limit, "N", "prompts per dataset (overrides the config)", 0, 1000000, 0},
        {"requests", OPT_INT, &requests, "N", "requests per point (overrides serve.requests)", 1, 1 << 20, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores", 0, 256, 0},
        {"sps", OPT_STR, &sps_path, "FILE.json", "SPS(B) table of this machine (overrides the config's; "
                                                 "`bench-target --out FILE.json` measures one)", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos, prc = args_parse("serve", "--config FILE.json [options]", opts, argc, argv, pos, 0, &npos);
    if (prc) return prc < 0 ? -1 : 0;
    run_config rc;
    run_config_defaults(&rc);
    target t;
    memset(&t, 0, sizeof t);
    drafter d;
    memset(&d, 0, sizeof d);
    sps_table sps = {0};
    run_prompts rp = {0};
    ivec *prompts = NULL;
    arm *arms = NULL;
    cJSON *resolved = NULL;
    trace_request *meta = NULL;
    trace *tr = NULL;
    int ret = -1, n_prompts = 0, n_arms = 0;
    serve_cfg sc;
    DS_CHECK(config_path, "serve: --config FILE.json is required (a run config with a \"serve\" object)");
    DS_TRY(run_config_load(&rc, config_path));
    if (limit >= 0) rc.limit = limit;
    if (threads >= 0) rc.threads = threads;
    if (sps_path) {
        DS_CHECK(strlen(sps_path) < sizeof rc.sps, "--sps: path longer than %zu bytes", sizeof rc.sps - 1);
        snprintf(rc.sps, sizeof rc.sps, "%s", sps_path);
    }
    DS_CHECK(rc.serve_cfg, "%s: no \"serve\" object (arrival, concurrency or rate, requests, schedulers, sla_tok_s)",
             config_path);
    if (parse_serve(rc.serve_cfg, &sc)) {
        ds_error_prefix("%s", config_path);
        goto fail;
    }
    if (requests) sc.n_requests = requests;
    DS_CHECK(rc.drafter[0] || rc.baseline, "serve: nothing to run: no drafter, and the baseline is off");
    DS_TRY(run_prompts_load(&rc, &rp));
    n_prompts = rp.total;
    if (!sc.n_requests) sc.n_requests = n_prompts;
    /* the arms: the baseline, then the listed schedulers (or the config's one) */
    DS_TRYP(arms = ds_calloc(MAX_ARMS, sizeof *arms, "serving arms"));
    if (rc.baseline) {
        arms[n_arms].ar = 1;
        DS_TRYP(arms[n_arms].sched = cJSON_CreateNull());
        snprintf(arms[n_arms++].label, sizeof arms[0].label, "autoregressive");
    }
    if (rc.drafter[0]) {
        if (sc.schedulers) {
            int i = 0;
            for (const cJSON *e = sc.schedulers->child; e; e = e->next, i++) DS_TRY(open_arm(&arms[n_arms++], e, i));
        } else {
            cJSON *e = rc.scheduler_cfg ? cJSON_Duplicate(rc.scheduler_cfg, 1) : cJSON_CreateObject();
            DS_TRYP(e);
            cJSON_AddStringToObject(e, "name", rc.scheduler);
            int orc = open_arm(&arms[n_arms++], e, 0);
            cJSON_Delete(e);
            DS_TRY(orc);
        }
    }
    DS_TRY(run_models_open(&rc, "serve", &t, &d));
    for (int a = 0; a < n_arms; a++) /* every arm's pairing before the first arm runs */
        if (!arms[a].ar && decode_cfg_check(&(decode_cfg){rc.sp, rc.gamma, &d, &arms[a].s, NULL, NULL, MODE_SPEC})) {
            ds_error_prefix("serve: arm '%s'", arms[a].label);
            goto fail;
        }
    DS_TRY(run_sps_load(&rc, 1, t.m.fingerprint, &sps));
    /* prompts: turn 1, chat-encoded once */
    DS_TRYP(prompts = ds_calloc((size_t)n_prompts, sizeof *prompts, "prompts"));
    for (int i = 0, g = 0; i < rp.n_sets; i++)
        for (int k = 0; k < rp.sets[i].n; k++, g++) {
            chat_msg m = {"user", rp.sets[i].v[k].text};
            DS_TRY(chat_encode(&t.ct, &t.tk, &m, 1, 1, &prompts[g]));
        }
    char machine[256], what[2048];
    cpu_describe(machine, sizeof machine);
    snprintf(machine + strlen(machine), sizeof machine - strlen(machine), ", %d threads, kernels %s", t.be->n_threads,
             t.be->kernels);
    snprintf(what, sizeof what,
             "%s loop, %d requests per point (prompts of %d dataset(s), %d distinct), %d new tokens at most, T=%g; "
             "drafter %s, gamma %d; SPS table %s. Aggregate = all output tokens / simulated clock; per-user = a "
             "request's tokens / its time in the batch, averaged; verified / req / round = the verification budget "
             "each request gets per round; tau = tokens committed per request per round.",
             sc.closed ? "Closed" : "Open (Poisson)", sc.n_requests, rc.n_datasets, n_prompts, rc.max_new,
             (double)rc.sp.temperature, rc.drafter[0] ? d.describe : "none", rc.gamma,
             rc.sps[0] ? rc.sps : "bench/bench-target.json");
    printf("serve: %s\nmachine: %s\n\n", what, machine);
    printf("%-34s %8s %7s %10s %10s %9s %6s\n", "scheduler", sc.closed ? "conc" : "rate", "batch", "agg tok/s",
           "user tok/s", "verif/rr", "tau");
    const char *dir = out ? out : "out/serve";
    DS_TRYP(meta = ds_calloc((size_t)n_prompts, sizeof *meta, "prompt metadata"));
    for (int i = 0, g = 0; i < rp.n_sets; i++)
        for (int k = 0; k < rp.sets[i].n; k++, g++) {
            snprintf(meta[g].dataset, sizeof meta[g].dataset, "%s", rp.sets[i].v[k].dataset);
            snprintf(meta[g].domain, sizeof meta[g].domain, "%s", rp.sets[i].v[k].domain);
            meta[g].index = rp.sets[i].v[k].index;
        }
    for (int i = 0; i < sc.n_points; i++)
        for (int a = 0; a < n_arms; a++) {
            serve_params sp = {sc.closed, sc.closed ? (int)sc.x[i] : sc.max_batch, sc.closed ? 0 : sc.x[i], sc.n_requests,
                               rc.max_new, rc.seed, NULL, meta};
            char point[96];
            snprintf(point, sizeof point, "%s %g", sc.closed ? "closed loop, concurrency" : "open loop, rate (req/s)", sc.x[i]);
            trace_path(arms[a].trace[i], sizeof arms[a].trace[i], dir, &arms[a], a, &sc, i);
            DS_TRYP(tr = run_trace_open(&rc, arms[a].trace[i], &t, &d, arms[a].sched));
            DS_TRY(trace_attr(tr, "serve_arm", arms[a].label));
            DS_TRY(trace_attr(tr, "serve_point", point));
            decode_cfg cfg = {rc.sp, rc.gamma, arms[a].ar ? NULL : &d, arms[a].ar ? NULL : &arms[a].s, &sps, tr,
                              arms[a].ar ? MODE_AR : MODE_SPEC};
            DS_TRY(chain_rule_parse(rc.verifier, &cfg.rule)); /* the config's "verifier": token or block */
            if (!arms[a].ar && arms[a].s.ops->reset) arms[a].s.ops->reset(&arms[a].s); /* each point learns afresh */
            char label[160];
            snprintf(label, sizeof label, "serve: %s at %s %g", arms[a].label, sc.closed ? "concurrency" : "rate", sc.x[i]);
            double loop0 = d.t_seq_loop;
            DS_TRY(serve_simulate(&t, &cfg, prompts, n_prompts, &sp, label, &arms[a].res[i]));
            if (!arms[a].ar) DS_TRY(trace_attr_f64(tr, "draft_seq_loop_s", d.t_seq_loop - loop0));
            trace *done_tr = tr; /* trace_close frees it, whatever it returns */
            tr = NULL;
            DS_TRY(trace_close(done_tr));
            const serve_result *r = &arms[a].res[i];
            printf("%-34.34s %8g %7.1f %10.1f %10.2f %9.2f %6.3f\n", arms[a].label, sc.x[i], r->mean_batch, r->agg_tok_s,
                   r->user_tok_s, r->verify_per_req, r->tau);
            fflush(stdout);
        }
    char probe[1100];
    snprintf(probe, sizeof probe, "%s/serve.md", dir);
    DS_TRY(ds_mkdirs_for(probe, "the serve output folder"));
    DS_TRYP(resolved = run_config_json(&rc));
    DS_TRY(write_outputs(dir, arms, n_arms, &sc, machine, what, resolved));
    printf("\nwrote %s/serve.md, %s/serve.json, the Fig. 7 / Fig. 8 plots and a trace per point in %s/traces/\n", dir,
           dir, dir);
    ret = 0;
fail:
    if (tr) trace_abort(tr);
    free(meta);
    cJSON_Delete(resolved);
    if (prompts)
        for (int i = 0; i < n_prompts; i++) ivec_free(&prompts[i]);
    free(prompts);
    run_prompts_free(&rp);
    if (arms)
        for (int a = 0; a < n_arms; a++) {
            if (!arms[a].ar) scheduler_close(&arms[a].s);
            cJSON_Delete(arms[a].sched);
        }
    free(arms);
    sps_free(&sps);
    if (d.ops) drafter_close(&d);
    target_close(&t);
    run_config_free(&rc);
    return ret;
}
