/* report — Markdown tables from one or more traces: tau per dataset and per domain, acceptance,
 * conditional and unconditional acceptance per position, wall speedup over the autoregressive
 * baseline, draft/verify time split; optional gnuplot PNGs. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/metrics.h"
#include "../runtime/base/common.h"
#include "args.h"
#include "plot.h"
#include "report_curve.h"
#include "report_sweep.h"
#include "commands.h"

/* conditional acceptance at k as text: "-" when no round reached k with 1..k-1 accepted */
static const char *cond_str(const metrics *m, int k, const char *fmt, const char *none, char *buf, size_t n) {
    if (!m->att[k]) return none;
    snprintf(buf, n, fmt, (double)m->acc[k] / m->att[k]);
    return buf;
}

/* a number from the trace's recorded config, NAN when absent or not a number */
static double cfg_num(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* One group's numbers for --json: what scripts read instead of parsing the Markdown. */
static void add_json_group(cJSON *arr, const char *path, const char *group, const metrics *m) {
    cJSON *g = cJSON_CreateObject();
    if (!g) return;
    cJSON_AddStringToObject(g, "trace", path);
    cJSON_AddStringToObject(g, "group", group[0] ? group : "all");
    cJSON_AddNumberToObject(g, "prompts", m->n_prompts);
    cJSON_AddNumberToObject(g, "rounds", (double)m->rounds);
    cJSON_AddNumberToObject(g, "tau", m->tau);
    cJSON_AddNumberToObject(g, "tau_macro", m->tau_macro);
    cJSON_AddNumberToObject(g, "acceptance", m->accept_rate);
    cJSON_AddNumberToObject(g, "ar_tokens", (double)m->ar_tokens);
    cJSON_AddNumberToObject(g, "sp_tokens", (double)m->sp_tokens);
    cJSON_AddNumberToObject(g, "ar_wall_s", m->ar_wall);
    cJSON_AddNumberToObject(g, "sp_wall_s", m->sp_wall);
    cJSON_AddNumberToObject(g, "ar_decode_s", m->ar_decode); /* seconds in decoding rounds, prefill excluded */
    cJSON_AddNumberToObject(g, "sp_decode_s", m->sp_decode);
    cJSON_AddNumberToObject(g, "speedup", m->speedup);
    cJSON_AddNumberToObject(g, "decode_speedup", m->decode_speedup);
    cJSON_AddNumberToObject(g, "pairs", m->n_pairs);
    cJSON_AddNumberToObject(g, "identical", m->identical);
    cJSON_AddItemToArray(arr, g);
}

/* Draft trees (the trace's nodes): acceptance by depth and by sibling rank, and how often an accepted
 * sibling (rank > 0) led on to an accepted child: whether a tree's shape pays on this target. */
static void report_tree(FILE *o, const trace_data *d) {
    enum { MAXD = 65 };
    long nd[MAXD] = {0}, ad[MAXD] = {0}, nr[MAXD] = {0}, ar[MAXD] = {0}, led = 0, sib = 0, rounds = 0, path = 0;
    double conf_acc = 0, conf_all = 0;
    int maxd = 0, maxr = 0;
    for (long i = 0; i < d->n_nodes; i++) {
        const trace_node *n = &d->nodes[i];
        int dep = n->depth < MAXD ? n->depth : MAXD - 1, r = n->rank < MAXD ? n->rank : MAXD - 1;
        nd[dep]++, ad[dep] += n->accepted, nr[r]++, ar[r] += n->accepted;
        maxd = dep > maxd ? dep : maxd, maxr = r > maxr ? r : maxr;
        if (n->accepted && n->rank > 0) sib++, led += n->led_on;
        if (n->node == 0) rounds++;
        path += n->accepted;
        if (n->conf == n->conf) conf_all += n->conf, conf_acc += n->accepted ? n->conf : 0;
    }
    fprintf(o, "\nDraft trees: %ld rounds with a tree, %.2f nodes verified and %.3f accepted a round (the path).\n\n",
            rounds, rounds ? (double)d->n_nodes / rounds : 0, rounds ? (double)path / rounds : 0);
    fprintf(o, "| depth | nodes | accepted | acceptance |\n|---:|---:|---:|---:|\n");
    for (int k = 1; k <= maxd; k++)
        if (nd[k]) fprintf(o, "| %d | %ld | %ld | %.3f |\n", k, nd[k], ad[k], (double)ad[k] / nd[k]);
    fprintf(o, "\n| sibling rank | nodes | accepted | acceptance |\n|---:|---:|---:|---:|\n");
    for (int r = 0; r <= maxr; r++)
        if (nr[r]) fprintf(o, "| %d | %ld | %ld | %.3f |\n", r, nr[r], ar[r], (double)ar[r] / nr[r]);
    fprintf(o, "\nAccepted siblings (rank > 0): %ld, of which %ld (%.0f%%) led on to an accepted child.", sib, led,
            sib ? 100.0 * led / sib : 0);
    if (conf_all > 0)
        fprintf(o, " Mean confidence of the nodes: %.3f (of the accepted ones %.3f).", conf_all / d->n_nodes,
                path ? conf_acc / path : 0);
    fprintf(o, "\nIn a tree run the position table above counts verified nodes as positions; the depth table is the "
               "tree's own.\n");
}

static int print_trace(FILE *o, const char *path, const char *plot_dir, const char *link, int idx, int sweep, cJSON *js) {
    trace_data d;
    if (trace_read(path, &d)) return -1;
    cJSON *cfg = d.config ? cJSON_Parse(d.config) : NULL;
    fprintf(o, "## %s\n\n", path);
    if (cfg) {
        const cJSON *dr = cJSON_GetObjectItem(cfg, "drafter"), *sc = cJSON_GetObjectItem(cfg, "scheduler");
        char *drs = dr ? cJSON_PrintUnformatted(dr) : NULL, *scs = sc ? cJSON_PrintUnformatted(sc) : NULL;
        /* a trace of another command (lossless --out) or an older version lacks some of these */
        fprintf(o, "drafter `%s`, scheduler `%s`, gamma %g, temperature %g, top-p %g, top-k %g, max new tokens %g, seed %.0f  \n",
                drs ? drs : "null", scs ? scs : "?", cfg_num(cfg, "gamma"), cfg_num(cfg, "temperature"),
                cfg_num(cfg, "top_p"), cfg_num(cfg, "top_k"), cfg_num(cfg, "max_new_tokens"), cfg_num(cfg, "seed"));
        if (cfg_num(cfg, "min_p") > 0) fprintf(o, "min-p %g  \n", cfg_num(cfg, "min_p"));
        free(drs);
        free(scs);
    }
    fprintf(o, "target %s, drafter %s, dspark-bench %s, kernels %s\n\n", d.target_fingerprint ? d.target_fingerprint : "?",
            d.drafter_fingerprint ? d.drafter_fingerprint : "?", d.version ? d.version : "?",
            d.kernels ? d.kernels : "not recorded");
    fprintf(o, "| group | prompts | tau | tau (per-request mean) | acceptance rate | AR tok/s | spec tok/s | wall "
               "speedup over AR | decode speedup | draft / verify time (per round) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    /* groups: every dataset, every domain, all */
    char groups[40][48];
    int ng = 0;
    for (long i = 0; i < d.n_requests && ng < 30; i++) {
        char g[48];
        snprintf(g, sizeof g, "dataset:%s", d.requests[i].dataset);
        int dup = 0;
        for (int k = 0; k < ng; k++) dup |= strcmp(groups[k], g) == 0;
        if (!dup) snprintf(groups[ng++], sizeof groups[0], "%s", g);
    }
    int n_ds = ng;
    for (long i = 0; i < d.n_requests && ng < 38; i++) {
        char g[48];
        snprintf(g, sizeof g, "domain:%s", d.requests[i].domain);
        int dup = 0;
        for (int k = n_ds; k < ng; k++) dup |= strcmp(groups[k], g) == 0;
        if (!dup) snprintf(groups[ng++], sizeof groups[0], "%s", g);
    }
    snprintf(groups[ng++], sizeof groups[0], "%s", "");
    metrics *ms = calloc((size_t)ng, sizeof *ms);
    if (!ms) {
        trace_data_free(&d);
        cJSON_Delete(cfg);
        return -1;
    }
    for (int g = 0; g < ng; g++) {
        if (metrics_compute(&d, groups[g], &ms[g])) {
            ds_error_prefix("%s", path);
            free(ms);
            trace_data_free(&d);
            cJSON_Delete(cfg);
            return -1;
        }
        metrics *m = &ms[g];
        if (js) add_json_group(js, path, groups[g], m);
        double tt = m->t_draft + m->t_sched + m->t_verify;
        char sp[32] = "-";
        char dsp[32] = "-";
        if (m->speedup > 0) snprintf(sp, sizeof sp, "%.3fx", m->speedup);
        if (m->decode_speedup > 0) snprintf(dsp, sizeof dsp, "%.3fx", m->decode_speedup);
        double per = m->rounds ? 1e3 / (double)m->rounds : 0; /* ms per request-round */
        fprintf(o, "| %s%s | %d | %.3f | %.3f | %.3f | %.1f | %.1f | %s | %s | %.0f%% / %.0f%% (%.2f / %.2f ms) |\n",
                g < n_ds ? "" : g == ng - 1 ? "**all**" : "domain ", g == ng - 1 ? "" : m->name, m->n_prompts, m->tau, m->tau_macro,
                m->accept_rate, m->ar_tok_s, m->sp_tok_s, sp, dsp, tt > 0 ? 100 * m->t_draft / tt : 0,
                tt > 0 ? 100 * m->t_verify / tt : 0, m->t_draft * per, m->t_verify * per);
    }
    const metrics *all = &ms[ng - 1];
    fprintf(o, "\nWall speedup = autoregressive wall time / speculative wall time over the same requests, same target, "
               "runtime and sampling settings, in the same process, prefill included (the same in both modes: on long "
               "prompts it bounds the speedup). Decode speedup = the ratio of tokens/s over the decoding rounds only. At "
               "T > 0 the two modes sample outputs of different lengths: the speculative wall time is taken at the "
               "autoregressive lengths (its prefill plus their tokens at its decode rate); at T = 0 both are plain "
               "ratios of times. tau counts the bonus/correction token.\n");
    if (all->n_pairs) fprintf(o, "Outputs identical to the baseline's: %d of %d requests%s.\n", all->identical, all->n_pairs,
                              cJSON_GetObjectItem(cfg, "temperature") && cJSON_GetObjectItem(cfg, "temperature")->valuedouble == 0
                                  ? " (temperature 0: every request should match)"
                                  : " (sampling: matches are not expected)");
    double tt_all = all->t_draft + all->t_sched + all->t_verify;
    if (d.draft_seq_loop_s > 0 && tt_all > 0)
        fprintf(o, "The draft head's sequential (left-to-right) loop: %.2f s = %.1f%% of speculative round time "
                   "(%.1f%% of drafting).\n",
                d.draft_seq_loop_s, 100 * d.draft_seq_loop_s / tt_all, 100 * d.draft_seq_loop_s / all->t_draft);
    char cb[32];
    if (all->max_pos > 0) {
        fprintf(o, "\n| position k | conditional acceptance | unconditional acceptance | mean analytic c*_k | rounds verifying k |\n"
                   "|---:|---:|---:|---:|---:|\n");
        for (int k = 1; k <= all->max_pos; k++)
            fprintf(o, "| %d | %s | %.3f | %.3f | %ld |\n", k, cond_str(all, k, "%.3f", "-", cb, sizeof cb),
                    all->ver_ge[k] ? (double)all->acc_ge[k] / all->ver_ge[k] : 0,
                    all->cstar_n[k] ? all->cstar_sum[k] / all->cstar_n[k] : 0, all->ver_ge[k]);
        fprintf(o, "\nConditional: accepted at k / verified at k with 1..k-1 accepted (the paper's Fig. 2). Unconditional: "
                   "rounds accepting >= k / rounds verifying >= k. c*_k = 1 - TV(p_k, q_k), the analytic acceptance.\n");
    }
    if (plot_dir && all->max_pos > 0) {
        char base[1100], dat[1200];
        snprintf(base, sizeof base, "%s/acceptance-%d", plot_dir, idx);
        snprintf(dat, sizeof dat, "%s.dat", base);
        FILE *f = fopen(dat, "w");
        if (f) {
            fprintf(f, "# k conditional unconditional cstar\n");
            for (int k = 1; k <= all->max_pos; k++)
                fprintf(f, "%d %s %.5f %.5f\n", k, cond_str(all, k, "%.5f", "?", cb, sizeof cb), all->ver_ge[k] ? (double)all->acc_ge[k] / all->ver_ge[k] : 0,
                        all->cstar_n[k] ? all->cstar_sum[k] / all->cstar_n[k] : 0);
            fclose(f);
        }
        char title[1200], plotcmd[4000];
        snprintf(title, sizeof title, "Acceptance per draft position: %s", path);
        snprintf(plotcmd, sizeof plotcmd,
                 "plot '%s' using 1:2 with linespoints title 'conditional', '' using 1:3 with linespoints title "
                 "'unconditional', '' using 1:4 with linespoints title 'analytic c*'",
                 dat);
        plot_write(o, base, link, title, "draft position k", "acceptance", "set yrange [0:1]\nset xtics 1\n", plotcmd);
    }
    if (d.n_nodes > 0) report_tree(o, &d);
    int sw = sweep ? report_threshold_sweep(o, &d) : 0;
    fprintf(o, "\n");
    free(ms);
    trace_data_free(&d);
    if (sw) {
        cJSON_Delete(cfg);
        return -1;
    }
    cJSON_Delete(cfg);
    return 0;
}

/* One line per trace and one plot of every trace's conditional acceptance per position (the
 * paper's Fig. 2): the comparison people read first. Labels are the trace file names. */
static int print_summary(FILE *o, const char **paths, int n, const char *plot_dir, const char *link) {
    metrics *ms = calloc((size_t)n, sizeof *ms);
    char(*label)[64] = calloc((size_t)n, sizeof *label);
    int rc = -1, max_pos = 0;
    if (!ms || !label) goto done;
    fprintf(o, "| trace | drafter | T | tau | acceptance | wall speedup | conditional acceptance at k = 1, 2, ... |\n"
               "|---|---|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n; i++) {
        trace_data d;
        if (trace_read(paths[i], &d)) goto done;
        cJSON *cfg = d.config ? cJSON_Parse(d.config) : NULL;
        int mrc = metrics_compute(&d, "", &ms[i]);
        if (mrc) ds_error_prefix("%s", paths[i]);
        const char *slash = strrchr(paths[i], '/'), *name = slash ? slash + 1 : paths[i];
        snprintf(label[i], sizeof label[i], "%.*s", (int)(strlen(name) > 3 && strcmp(name + strlen(name) - 3, ".h5") == 0 ? strlen(name) - 3 : strlen(name)), name);
        const cJSON *dn = cJSON_GetObjectItem(cJSON_GetObjectItem(cfg, "drafter"), "name");
        const cJSON *tj = cJSON_GetObjectItem(cfg, "temperature");
        char sp[32] = "-", cond[512] = "", cb[32];
        const metrics *m = &ms[i];
        if (m->speedup > 0) snprintf(sp, sizeof sp, "%.3fx", m->speedup);
        for (int k = 1, w = 0; k <= m->max_pos && w < (int)sizeof cond - 16; k++)
            w += snprintf(cond + w, sizeof cond - (size_t)w, "%s%s", k > 1 ? " " : "", cond_str(m, k, "%.2f", "-", cb, sizeof cb));
        fprintf(o, "| %s | %s | %g | %.3f | %.3f | %s | %s |\n", label[i], cJSON_IsString(dn) ? dn->valuestring : "-",
                cJSON_IsNumber(tj) ? tj->valuedouble : -1, m->tau, m->accept_rate, sp, cond);
        max_pos = DS_MAX(max_pos, m->max_pos);
        cJSON_Delete(cfg);
        trace_data_free(&d);
        if (mrc) goto done;
    }
    if (plot_dir && max_pos > 0) {
        char base[1100], dat[1200], cmd[4000], cb[32];
        snprintf(base, sizeof base, "%s/conditional-acceptance", plot_dir);
        snprintf(dat, sizeof dat, "%s.dat", base);
        FILE *f = fopen(dat, "w");
        if (f) {
            fprintf(f, "# k, then each trace's conditional acceptance (? = not drafted)\n");
            for (int k = 1; k <= max_pos; k++) {
                fprintf(f, "%d", k);
                for (int i = 0; i < n; i++)
                    fprintf(f, " %s", k <= ms[i].max_pos ? cond_str(&ms[i], k, "%.5f", "?", cb, sizeof cb) : "?");
                fprintf(f, "\n");
            }
            fclose(f);
        }
        int w = snprintf(cmd, sizeof cmd, "set datafile missing '?'\nplot");
        for (int i = 0; i < n && w < (int)sizeof cmd - 200; i++)
            w += snprintf(cmd + w, sizeof cmd - (size_t)w, "%s '%s' using 1:%d with linespoints title '%s'", i ? "," : "",
                          dat, i + 2, label[i]);
        plot_write(o, base, link, "Conditional acceptance per draft position", "draft position k", "acceptance",
                   "set yrange [0:1]\nset xtics 1\n", cmd);
    }
    fprintf(o, "\n");
    rc = 0;
done:
    free(ms);
    free(label);
    return rc;
}

int cmd_report(int argc, char **argv) {
    const char *out = NULL, *plot = NULL, *json = NULL;
    int sweep = 0, curve = 0;
    opt_def opts[] = {
        {"train-curve", OPT_FLAG, &curve, NULL, "the arguments are training run folders: their held-out tau proxy against positions seen", 0, 0, 0},
        {"threshold-sweep", OPT_FLAG, &sweep, NULL, "per trace: acceptance per domain under a static threshold (Fig. 5)", 0, 0, 0},
        {"out", OPT_STR, &out, "FILE.md", "write the report to a file (default stdout)", 0, 0, 0},
        {"plot", OPT_STR, &plot, "DIR", "also write gnuplot PNGs of acceptance per position into DIR", 0, 0, 0},
        {"json", OPT_STR, &json, "FILE.json", "also write every trace's per-group numbers (tokens, wall and decode seconds, tau) as JSON", 0, 0, 0},
        OPT_END};
    const char *pos[64];
    int npos, rc = args_parse("report", "TRACE.h5 [TRACE.h5 ...] [options]  |  --train-curve RUN_DIR [RUN_DIR ...]", opts, argc, argv, pos, 64, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    if (npos == 0) {
        ds_error("report: give at least one %s (see dspark-bench report --help)", curve ? "run folder" : "trace file");
        return -1;
    }
    /* an output renamed over an input (`report run.h5 --out run.h5`) destroyed the trace it reported */
    for (int i = 0; i < npos; i++)
        for (int k = 0; k < 2; k++) {
            const char *o = k ? json : out;
            if (o && ds_same_file(o, pos[i])) {
                ds_error("report: --%s %s is an input of the report: it would replace it", k ? "json" : "out", o);
                return -1;
            }
        }
    if (out && json && ds_same_file(out, json)) {
        ds_error("report: --out and --json name one file (%s)", out);
        return -1;
    }
    if (plot && ds_mkdirs(plot, "the plot folder")) return -1;
    if (json && curve) {
        ds_error("report: --json is for traces, not --train-curve");
        return -1;
    }
    cJSON *js = json ? cJSON_CreateArray() : NULL;
    if (json && !js) return -1;
    /* a report file is written whole or not at all: PATH.tmp, renamed on success */
    char tmp[4096];
    FILE *o = stdout;
    if (out) {
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        if (ds_mkdirs_for(out, "the report folder")) return -1;
        if (!(o = fopen(tmp, "w"))) {
            ds_error("%s: cannot create the report", tmp);
            return -1;
        }
    }
    fprintf(o, "# dspark-bench report\n\n");
    int bad = 0;
    const char *link = plot_link_dir(out, plot); /* links that work from where the report is */
    if (curve) bad = report_train_curve(o, pos, npos, plot, link) != 0;
    else {
        bad = npos > 1 && print_summary(o, pos, npos, plot, link);
        for (int i = 0; i < npos && !bad; i++) bad = print_trace(o, pos[i], plot, link, i, sweep, js) != 0;
    }
    if (js && !bad) bad = ds_write_json(js, json) != 0;
    cJSON_Delete(js);
    if (out) {
        errno = 0;
        int werr = ferror(o) ? errno : 0;
        if (fclose(o) != 0 || werr) {
            if (!bad) ds_error("%s: cannot write the report: %s", tmp, strerror(werr ? werr : errno));
            bad = 1;
        }
        if (!bad && rename(tmp, out) != 0) {
            ds_error("%s: cannot rename to %s: %s", tmp, out, strerror(errno));
            bad = 1;
        }
        if (bad) remove(tmp);
    }
    return bad ? -1 : 0;
}
