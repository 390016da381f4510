/* report_sweep.c — the paper's Fig. 5 offline: what a static threshold on the cumulative
 * confidence a_k = c_1...c_k would verify and accept, per domain, replayed on the confidence rows
 * of a trace whose scheduler verified every draft (fixed). For threshold h a round verifies
 * l(h) = the longest prefix with a_k >= h; its accepted drafts are the verified positions that
 * survived. Acceptance rate = accepted / verified over all rounds of the domain. (Replayed on the
 * fixed run's trajectory: a live threshold run would emit other tokens, the same law.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/trace.h"
#include "../runtime/base/common.h"
#include "report_sweep.h"

#define N_TH 11
#define MAX_DOM 8
static const double TH[N_TH] = {0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9};

static const char *domain_of(const trace_data *d, int req) {
    for (long i = 0; i < d->n_requests; i++)
        if (d->requests[i].request == req && d->requests[i].mode == MODE_SPEC) return d->requests[i].domain;
    return "?";
}

int report_threshold_sweep(FILE *o, const trace_data *d) {
    char dom[MAX_DOM][16];
    int n_dom = 0;
    double ver[MAX_DOM][N_TH] = {{0}}, acc[MAX_DOM][N_TH] = {{0}}, rounds[MAX_DOM] = {0};
    long skipped = 0;
    for (long i = 0; i < d->n_conf;) {
        long e = i; /* the rows of one round are consecutive, position 1..n */
        while (e < d->n_conf && d->conf[e].request == d->conf[i].request && d->conf[e].round == d->conf[i].round) e++;
        const char *dm = domain_of(d, d->conf[i].request);
        int di = 0;
        while (di < n_dom && strcmp(dom[di], dm)) di++;
        if (di == n_dom) {
            if (n_dom == MAX_DOM) {
                ds_error("report: more than %d domains in the threshold sweep", MAX_DOM);
                return -1;
            }
            snprintf(dom[n_dom++], sizeof dom[0], "%s", dm);
        }
        int usable = 1;
        for (long k = i; k < e; k++)
            if (isnan(d->conf[k].c_cal) || d->conf[k].survived < 0 || d->conf[k].position != k - i + 1) usable = 0;
        if (!usable) { /* a position with an unknown outcome: not a verify-everything round */
            skipped++;
            i = e;
            continue;
        }
        rounds[di]++;
        for (int h = 0; h < N_TH; h++) {
            double a = 1;
            for (long k = i; k < e; k++) {
                a *= d->conf[k].c_cal;
                if (a < TH[h]) break;
                ver[di][h]++;
                acc[di][h] += d->conf[k].survived;
            }
        }
        i = e;
    }
    if (!n_dom || skipped == d->n_conf) {
        fprintf(o, "\n(no confidence rows with known outcomes: the threshold sweep needs a fixed-scheduler trace of a drafter with a confidence head)\n");
        return 0;
    }
    fprintf(o, "\n### Threshold sweep (Fig. 5, replayed offline)\n\nVerify while a_k = c_1...c_k >= h (the trace's c_cal); "
               "acceptance rate = accepted / verified drafts; in brackets, drafts verified per round.%s\n\n| h |",
            skipped ? " Rounds with an unknown outcome skipped." : "");
    for (int di = 0; di < n_dom; di++) fprintf(o, " %s (%.0f rounds) |", dom[di], rounds[di]);
    fprintf(o, "\n|---:|");
    for (int di = 0; di < n_dom; di++) fprintf(o, "---:|");
    fprintf(o, "\n");
    for (int h = 0; h < N_TH; h++) {
        fprintf(o, "| %.2f |", TH[h]);
        for (int di = 0; di < n_dom; di++) {
            if (ver[di][h] > 0)
                fprintf(o, " %.3f [%.2f] |", acc[di][h] / ver[di][h], ver[di][h] / DS_MAX(rounds[di], 1));
            else fprintf(o, " - [0] |");
        }
        fprintf(o, "\n");
    }
    return 0;
}
