/* lossless — the losslessness gate: exact enumeration, chi-square and KS tests of the verifier on
 * toy worlds, of the production round (decode_rounds and every drafter's propose) on a tiny
 * target and on the real one, and negative controls that must be caught. Exit status 1 if a
 * lossless case is rejected or a control passes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "../drafters/drafter.h"
#include "../engine/gate_round.h"
#include "../engine/trace.h"
#include "../runtime/base/common.h"
#include "../verify/lossless.h"
#include "args.h"
#include "commands.h"
#include "lossless_real.h"

static int write_trace(const gate_report *rep, const char *path, long draws, int quick) {
    trace *t = trace_create(path);
    if (!t) return -1;
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"command\": \"lossless\", \"draws\": %ld, \"quick\": %s}", draws, quick ? "true" : "false");
    if (trace_attr(t, "config", cfg) || trace_attr(t, "version", DSPARK_VERSION)) goto fail;
    for (int i = 0; i < rep->n; i++) {
        const gate_record *r = &rep->rec[i];
        trace_lossless row = {{0}, {0}, r->N, r->statistic, r->p, r->control, r->pass};
        snprintf(row.test, sizeof row.test, "%s", r->test);
        snprintf(row.kind, sizeof row.kind, "%s", r->kind);
        if (trace_add_lossless(t, &row)) goto fail;
    }
    return trace_close(t);
fail:
    trace_abort(t);
    return -1;
}

int cmd_lossless(int argc, char **argv) {
    int quick = 0, draws = 0, real = 0, two = 0, no_real = 0, real_tokens = 3, layers = 20, gamma = 3, top_k = 0;
    int exact = 0, exact_too = 0, toy = 0;
    float temperature = 1.0f, top_p = 1.0f, min_p = 0;
    const char *out = NULL, *model = NULL, *only = NULL, *part = NULL, *be_name = NULL;
    opt_def opts[] = {
        {"draws", OPT_INT, &draws, "N", "draws per case (default 100000, the fp32 half of --both-contracts half as many; with --two-sample 4100 per arm)", 100, 1e9, 0},
        {"quick", OPT_FLAG, &quick, NULL, "a smaller case matrix (seconds instead of minutes)", 0, 0, 0},
        {"out", OPT_STR, &out, "FILE.h5", "also write the results as a trace's `lossless` dataset", 0, 0, 0},
        {"no-real", OPT_FLAG, &no_real, NULL, "skip the exact cases on the real target (no model needed)", 0, 0, 0},
        {"real", OPT_FLAG, &real, NULL, "only the exact cases on the real target, at --real-tokens (minutes)", 0, 0, 0},
        {"real-tokens", OPT_INT, &real_tokens, "N", "--real: tokens after the prefill token whose law is compared (3)", 1, 4, 0},
        {"two-sample", OPT_FLAG, &two, NULL, "two-sample tests of speculative vs autoregressive sampling instead", 0, 0, 0},
        {"model", OPT_STR, &model, "NAME|PATH", "real target: a name (below) or a file (default: smollm2-135m)", 0, 0, 0},
        {"exact", OPT_FLAG, &exact, NULL, "targets on the fp32 matmul contract (default: int8, what runs by default)", 0, 0, 0},
        {"backend", OPT_STR, &be_name, "NAME", "the production round's and --two-sample's targets on this backend (default cpu; "
                                             "cuda: both contracts, int8 bit for bit the cpu's)", 0, 0, 0},
        {"drafter", OPT_STR, &only, "NAME", "only this drafter's production-round cases and controls (no toy worlds)", 0, 0, 0},
        {"toy", OPT_FLAG, &toy, NULL, "only the toy worlds: every verification rule's exact law, sampled tests and "
                                      "controls, no production round (seconds; what a change to verify/ runs first)", 0, 0, 0},
        {"both-contracts", OPT_FLAG, &exact_too, NULL, "the production round on the int8 and on the fp32 contract", 0, 0, 0},
        {"part", OPT_STR, &part, "K/2", "--both-contracts split in two processes: 1/2 the toy worlds and int8, 2/2 fp32 "
                                        "(same tests and levels; make lossless runs both at once)", 0, 0, 0},
        {"draft-layers", OPT_INT, &layers, "K", "--two-sample: vanilla self-draft depth (default 20)", 1, 1024, 0},
        {"gamma", OPT_INT, &gamma, "N", "--two-sample: drafts per round (default 3)", 1, 64, 0},
        {"temperature", OPT_FLOAT, &temperature, "T", "--two-sample: sampling temperature (default 1)", 0.01, 100, 0},
        {"top-p", OPT_FLOAT, &top_p, "P", "--two-sample: nucleus mass (default 1)", 1e-6, 1, 0},
        {"min-p", OPT_FLOAT, &min_p, "P", "--two-sample: min-p, 0 = off", 0, 1, 0},
        {"top-k", OPT_INT, &top_k, "K", "--two-sample: top-k, 0 = off", 0, 1 << 22, 0},
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("lossless", "[options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    if (toy && (only || real || part || exact_too || two)) {
        ds_error("lossless: --toy runs the toy worlds alone; it does not combine with --drafter, --real, --part, "
                 "--both-contracts or --two-sample");
        return -1;
    }
    if (two) {
        real_opts ro = {model, draws ? draws : 4100, layers, gamma, {temperature, top_k, top_p, min_p}, 1, exact, be_name};
        int r = lossless_real(&ro);
        if (r > 0) ds_error("losslessness gate (--two-sample) failed: speculative and autoregressive samples differ");
        return r ? -1 : 0;
    }
    if (!draws) draws = 100000;
    gate_report rep = {0};
    rep.draws = draws;
    rep.quick = quick;
    rep.alpha = 0.005; /* family-wise 0.01: half for the toy worlds, half for the production round */
    rep.backend = be_name;
    double t0 = ds_now();
    int res = 0;
    /* the contracts the production round runs on: the chosen one, or both (int8 first) */
    int contracts[2] = {exact, 1}, n_contracts = exact_too && !exact ? 2 : 1, k0 = 0, k1 = n_contracts;
    if (part) { /* one half of --both-contracts; alpha is split as if both ran here */
        if (strcmp(part, "1/2") && strcmp(part, "2/2")) {
            ds_error("lossless: --part must be 1/2 or 2/2, not '%s'", part);
            return -1;
        }
        if (exact) {
            ds_error("lossless: --part splits --both-contracts; it does not combine with --exact");
            return -1;
        }
        n_contracts = 2, k0 = part[0] == '2', k1 = k0 + 1;
        omp_set_num_threads(1); /* the other half runs beside this one: a core each */
    }
    if (only && !drafter_find(only)) return -1;
    if (!real && !only && k0 == 0) res = gate_run(&rep, 1);
    if (toy) k1 = k0; /* no production round */
    for (int k = k0; k < k1 && res >= 0; k++) {
        rep.exact = contracts[k];
        int n0 = rep.n;
        if (!real) {
            /* two contracts: each gets half the production round's alpha. The second (fp32) samples
             * half as many rounds: its sampled cases repeat the int8 ones' batch behaviour, while its
             * exact cases (the contract's own law) and controls (fixed sizes) are whole; CI's budget */
            long dr = n_contracts == 2 && k == 1 ? draws / 2 : draws;
            if (gate_round_cases(&rep, dr, 0.005 / n_contracts, quick, 1, only)) res = -1;
        }
        /* the real target: 2 tokens in the CI gate (every drafter x scheduler in about a minute), more with
         * --real; one thread under --part (the other half runs beside it) */
        if (res >= 0 && !no_real && gate_round_real(&rep, model, real ? real_tokens : 2, 1, only, part ? 1 : 0)) res = -1;
        for (int i = n0; i < rep.n; i++) { /* say which contract each production-round record ran on */
            char *tst = rep.rec[i].test;
            size_t len = strlen(tst);
            snprintf(tst + len, sizeof rep.rec[i].test - len, " {%s}", rep.exact ? "fp32" : "int8");
        }
    }
    if (res < 0) {
        gate_report_free(&rep);
        return -1;
    }
    int bad = 0, bad_ctl = 0;
    printf("| test | kind | N | statistic | p | verdict |\n|---|---|---:|---:|---:|---|\n");
    for (int i = 0; i < rep.n; i++) {
        const gate_record *r = &rep.rec[i];
        const char *verdict = r->control ? (r->pass ? "control flagged" : "CONTROL NOT FLAGGED")
                                         : (r->pass ? "lossless" : "REJECTED");
        if (!r->pass) *(r->control ? &bad_ctl : &bad) += 1;
        char p[32];
        if (isnan(r->p)) snprintf(p, sizeof p, "-");
        else snprintf(p, sizeof p, "%.3g", r->p);
        printf("| %s | %s | %ld | %.3g | %s | %s |\n", r->test, r->kind, r->N, r->statistic, p, verdict);
    }
    printf("\n%d checks in %.1f s: %d lossless cases rejected, %d controls not flagged\n", rep.n, ds_now() - t0, bad,
           bad_ctl);
    if (out && write_trace(&rep, out, draws, quick)) {
        gate_report_free(&rep);
        return -1;
    }
    gate_report_free(&rep);
    if (bad || bad_ctl) {
        ds_error("losslessness gate failed: %d lossless cases rejected, %d negative controls not flagged", bad, bad_ctl);
        return -1;
    }
    return 0;
}
