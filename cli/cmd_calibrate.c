/* calibrate — Sequential Temperature Scaling of a drafter's confidences from a trace (calib/calib.h):
 * the rounds of every other request (1st, 3rd, ...) fit one temperature per draft position, left
 * to right; the other requests' rounds measure ECE, ROC-AUC and Brier score of the cumulative product a_k before and after; the
 * temperatures are written into the checkpoint's config.json ("calibration"), which `run` applies
 * (the trace's c_cal column is then the calibrated confidence, c_raw the head's own). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../calib/calib.h"
#include "../engine/trace.h"
#include "../runtime/base/common.h"
#include "args.h"
#include "commands.h"

/* the trace's confidence rows grouped into rounds (rows of one round are consecutive) */
static long gather_rounds(const trace_data *d, calib_round **out, int *G_out, long *n_even) {
    calib_round *r = ds_calloc((size_t)d->n_conf + 1, sizeof *r, "calibration rounds");
    int *req = ds_calloc((size_t)d->n_conf + 1, sizeof(int), "calibration rounds");
    long n = 0;
    int G = 0;
    if (!r || !req) {
        free(r), free(req);
        return -1;
    }
    int n_req = 0, last_req = 0;
    for (long i = 0; i < d->n_conf; i++) {
        const trace_conf *c = &d->conf[i];
        if (c->position < 1 || c->position > CALIB_MAX_G || isnan(c->c_raw)) continue;
        if (n == 0 || c->request != d->conf[i - 1].request || c->round != d->conf[i - 1].round) {
            r[n].G = 0;
            for (int k = 0; k < CALIB_MAX_G; k++) r[n].c[k] = NAN, r[n].survived[k] = -1;
            if (n == 0 || c->request != last_req) n_req++, last_req = c->request;
            req[n++] = n_req - 1; /* the request's rank in the trace: alternate ranks fit / held out */
        }
        calib_round *cr = &r[n - 1];
        cr->c[c->position - 1] = c->c_raw;
        cr->survived[c->position - 1] = c->survived < 0 ? -1 : c->survived ? 1 : 0;
        cr->G = DS_MAX(cr->G, c->position);
        G = DS_MAX(G, c->position);
    }
    /* fit set first (even request ids), then the held-out set: the caller splits at the count */
    calib_round *sorted = ds_calloc((size_t)n + 1, sizeof *sorted, "calibration rounds");
    long m = 0;
    if (!sorted) {
        free(r), free(req);
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (long i = 0; i < n; i++)
            if ((req[i] & 1) == pass) sorted[m++] = r[i];
        if (pass == 0) *n_even = m;
    }
    free(r), free(req);
    *out = sorted;
    *G_out = G;
    return n;
}

int cmd_calibrate(int argc, char **argv) {
    const char *ckpt = NULL, *objective = "nll";
    int dry = 0, min_n = 50;
    opt_def opts[] = {
        {"checkpoint", OPT_STR, &ckpt, "DIR", "checkpoint to write (default: the trace's drafter checkpoint)", 0, 0, 0},
        {"objective", OPT_STR, &objective, "nll|ece", "what the grid search minimises (default nll; ece: the paper's)", 0, 0, 0},
        {"min-rounds", OPT_INT, &min_n, "N", "fewer known outcomes at a position keep T = 1 (default 50)", 1, 1e9, 0},
        {"dry-run", OPT_FLAG, &dry, NULL, "report only, write nothing", 0, 0, 0},
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("calibrate", "TRACE.h5 [options]", opts, argc, argv, pos, 1, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    if (npos != 1) {
        ds_error("calibrate: give one trace (a run of a drafter with a confidence head)");
        return -1;
    }
    calib_objective obj;
    if (strcmp(objective, "nll") == 0) obj = CALIB_NLL;
    else if (strcmp(objective, "ece") == 0) obj = CALIB_ECE;
    else {
        ds_error("--objective '%s': expected nll or ece", objective);
        return -1;
    }
    trace_data d;
    if (trace_read(pos[0], &d)) return -1;
    calib_round *rounds = NULL;
    cJSON *cfg = NULL, *ck = NULL;
    char *txt = NULL;
    int G = 0, ret = -1;
    long n_fit = 0, n = gather_rounds(&d, &rounds, &G, &n_fit);
    if (n < 0) goto fail;
    cfg = d.config ? cJSON_Parse(d.config) : NULL;
    DS_CHECK(G > 0, "%s: no confidences recorded (the drafter has no confidence head, or the trace has no speculative rounds)",
             pos[0]);
    DS_CHECK(n_fit > 0 && n - n_fit > 0, "%s: need rounds of at least two requests (fit / held out), got %ld and %ld",
             pos[0], n_fit, n - n_fit);
    double grid[200];
    int ng = calib_default_grid(grid, 200);
    calib_sts fit;
    DS_TRY(calib_sts_fit(rounds, n_fit, G, grid, ng, min_n, obj, &fit));
    float ones[CALIB_MAX_G];
    for (int k = 0; k < CALIB_MAX_G; k++) ones[k] = 1.0f;
    printf("# STS calibration of %s (%s objective)\n\n", pos[0], obj == CALIB_NLL ? "NLL" : "ECE");
    printf("Fit on %ld rounds (every other request), evaluated on %ld held-out rounds (the others). a_k = prod_{i<=k} c_i "
           "against \"positions 1..k accepted\"; ECE over %d equal-width bins.\n\n",
           n_fit, n - n_fit, CALIB_BINS);
    printf("| k | T_k | fit rounds | held-out rounds | ECE raw | ECE calibrated | AUC raw | AUC calibrated | Brier raw | Brier calibrated |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 1; k <= G; k++) {
        calib_eval raw = calib_sts_eval(rounds + n_fit, n - n_fit, k, ones);
        calib_eval cal = calib_sts_eval(rounds + n_fit, n - n_fit, k, fit.T);
        printf("| %d | %.3f | %ld | %ld | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", k, (double)fit.T[k - 1], fit.n[k - 1],
               raw.n, raw.ece, cal.ece, raw.auc, cal.auc, raw.brier, cal.brier);
    }
    /* where to write */
    if (!ckpt && cfg) {
        const cJSON *dr = cJSON_GetObjectItem(cfg, "drafter"), *cp = dr ? cJSON_GetObjectItem(dr, "checkpoint") : NULL;
        if (cJSON_IsString(cp)) ckpt = cp->valuestring;
    }
    if (dry) {
        printf("\n--dry-run: nothing written\n");
    } else {
        DS_CHECK(ckpt != NULL, "%s: the trace's drafter has no checkpoint; give --checkpoint DIR or --dry-run", pos[0]);
        char path[4096];
        snprintf(path, sizeof path, "%s/config.json", ckpt);
        DS_TRYP(ck = ds_read_json(path));
        { /* the temperatures belong to the head that made the trace: another family's checkpoint is refused */
            const cJSON *dr = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "drafter") : NULL,
                        *dn = dr ? cJSON_GetObjectItemCaseSensitive(dr, "name") : NULL,
                        *kind = cJSON_GetObjectItemCaseSensitive(ck, "kind");
            DS_CHECK(!cJSON_IsString(dn) || !cJSON_IsString(kind) || !strcmp(dn->valuestring, kind->valuestring),
                     "%s: the trace ran drafter '%s' and %s is a '%s' checkpoint: its temperatures would not be this head's",
                     pos[0], dn->valuestring, path, kind->valuestring);
        }
        cJSON_DeleteItemFromObjectCaseSensitive(ck, "calibration");
        cJSON *arr = cJSON_AddArrayToObject(ck, "calibration");
        DS_CHECK(arr != NULL, "out of memory");
        for (int k = 0; k < G; k++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(fit.T[k]));
        DS_TRYP(txt = cJSON_Print(ck));
        DS_TRY(ds_write_file_atomic(path, txt, strlen(txt)));
        printf("\nwrote %d temperatures into %s (\"calibration\"); `run` applies them\n", G, path);
    }
    ret = 0;
fail:
    free(txt);
    cJSON_Delete(ck);
    cJSON_Delete(cfg);
    free(rounds);
    trace_data_free(&d);
    return ret;
}
