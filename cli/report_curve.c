/* report_curve.c — training curves from run folders (report_curve.h). */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "plot.h"
#include "report_curve.h"

typedef struct {
    int step;
    double positions, tau;
} curve_pt;

typedef struct {
    char name[256];
    curve_pt *p;
    int n;
} curve;

/* One JSON object per line; `fn` gets each. Every line must parse: a torn last line is an error
 * that names it (a run killed mid-write leaves one; the trainer truncates it on resume). */
static int each_line(const char *path, int (*fn)(const cJSON *, void *, const char *, int), void *ctx) {
    char *txt = NULL;
    size_t len;
    if (ds_read_file(path, &txt, &len)) return -1;
    int line = 0, rc = 0;
    for (char *s = txt, *e; !rc && s < txt + len; s = e + 1) {
        e = strchr(s, '\n');
        if (!e) e = txt + len;
        *e = 0;
        line++;
        if (!s[0]) continue;
        int why;
        cJSON *j = ds_json_parse(s, (size_t)(e - s), NULL, &why);
        if (!j || !cJSON_IsObject(j)) {
            ds_error("%s:%d: %s", path, line, j || why == DS_JSON_BAD ? "not a JSON object" : ds_json_why(why));
            rc = -1;
        } else rc = fn(j, ctx, path, line);
        cJSON_Delete(j);
    }
    free(txt);
    return rc;
}

static int num(const cJSON *j, const char *key, const char *path, int line, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) {
        ds_error("%s:%d: no number '%s'", path, line, key);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

/* steps a curve may have: the cumulative rows are an array indexed by step */
enum { MAX_STEPS = 1 << 20 };

/* a logged step as an index: an integer in 1..MAX_STEPS-1 (an eval line's step of -4e8 indexed the
 * rows array out of bounds and crashed `report --train-curve`) */
static int step_of(double step, const char *path, int line, int *out) {
    if (!(step >= 1 && step < MAX_STEPS) || step != (double)(int)step) {
        ds_error("%s:%d: step %g is not a step number (1 to %d)", path, line, step, MAX_STEPS - 1);
        return -1;
    }
    *out = (int)step;
    return 0;
}

/* train_log.jsonl: positions[step] = supervised rows of steps 1..step */
typedef struct {
    double *cum;
} rows_ctx;

static int on_train(const cJSON *j, void *vctx, const char *path, int line) {
    rows_ctx *c = vctx;
    double step, rows;
    int s;
    if (num(j, "step", path, line, &step) || num(j, "rows", path, line, &rows) || step_of(step, path, line, &s)) return -1;
    c->cum[s] = rows;
    return 0;
}

static int on_eval(const cJSON *j, void *vctx, const char *path, int line) {
    curve *cv = vctx;
    double step, tau;
    int s;
    if (num(j, "step", path, line, &step) || num(j, "tau_proxy", path, line, &tau) || step_of(step, path, line, &s)) return -1;
    curve_pt *p = realloc(cv->p, sizeof *p * (size_t)(cv->n + 1));
    if (!p) {
        ds_error("%s: out of memory", path);
        return -1;
    }
    cv->p = p;
    cv->p[cv->n++] = (curve_pt){s, 0, tau};
    return 0;
}

static int load_curve(const char *dir, curve *cv) {
    char path[1200];
    rows_ctx rc = {NULL};
    memset(cv, 0, sizeof *cv);
    const char *base = strrchr(dir, '/');
    snprintf(cv->name, sizeof cv->name, "%s", base && base[1] ? base + 1 : dir);
    DS_TRYP(rc.cum = ds_calloc(MAX_STEPS, sizeof *rc.cum, "training log"));
    snprintf(path, sizeof path, "%s/train_log.jsonl", dir);
    DS_TRY(each_line(path, on_train, &rc));
    snprintf(path, sizeof path, "%s/eval_log.jsonl", dir);
    DS_TRY(each_line(path, on_eval, cv));
    DS_CHECK(cv->n > 0, "%s: no evaluation logged yet", path);
    for (int s = 1; s < MAX_STEPS; s++) rc.cum[s] += rc.cum[s - 1];
    for (int i = 0; i < cv->n; i++) cv->p[i].positions = rc.cum[cv->p[i].step];
    free(rc.cum);
    return 0;
fail:
    free(rc.cum);
    return -1;
}

int report_train_curve(FILE *o, const char **runs, int n, const char *plot_dir, const char *link) {
    curve *cv = ds_calloc((size_t)n, sizeof *cv, "training curves");
    int ret = -1, maxn = 0;
    char *body = NULL;
    if (!cv) return -1;
    for (int i = 0; i < n; i++) {
        if (load_curve(runs[i], &cv[i])) goto done;
        maxn = DS_MAX(maxn, cv[i].n);
    }
    fprintf(o, "## Training curves: held-out τ proxy against supervised positions seen\n\n"
               "τ proxy = 1 + Σ_k Π_{j≤k} (1 − TV_j) on the run's held-out sequences under teacher forcing.\n\n| step |");
    for (int i = 0; i < n; i++) fprintf(o, " positions (%s) | τ proxy (%s) |", cv[i].name, cv[i].name);
    fprintf(o, "\n|---:|");
    for (int i = 0; i < n; i++) fprintf(o, "---:|---:|");
    fprintf(o, "\n");
    for (int r = 0; r < maxn; r++) {
        fprintf(o, "| %d |", r < cv[0].n ? cv[0].p[r].step : cv[n - 1].p[r].step);
        for (int i = 0; i < n; i++)
            if (r < cv[i].n) fprintf(o, " %.0f | %.4f |", cv[i].p[r].positions, cv[i].p[r].tau);
            else fprintf(o, " | |");
        fprintf(o, "\n");
    }
    if (plot_dir) {
        size_t cap = 4096 + (size_t)n * (size_t)(maxn + 4) * 64;
        DS_TRYP(body = ds_malloc(cap, "plot script"));
        size_t w = 0;
        for (int i = 0; i < n; i++) {
            w += (size_t)snprintf(body + w, cap - w, "$c%d << EOD\n", i);
            for (int r = 0; r < cv[i].n; r++)
                w += (size_t)snprintf(body + w, cap - w, "%.0f %.5f\n", cv[i].p[r].positions, cv[i].p[r].tau);
            w += (size_t)snprintf(body + w, cap - w, "EOD\n");
        }
        w += (size_t)snprintf(body + w, cap - w, "plot ");
        for (int i = 0; i < n; i++)
            w += (size_t)snprintf(body + w, cap - w, "%s$c%d using 1:2 with linespoints lw 2 title '%s'", i ? ", " : "", i,
                                  cv[i].name);
        char base[1200];
        snprintf(base, sizeof base, "%s/training-curve", plot_dir);
        plot_write(o, base, link, "held-out tau proxy against supervised positions seen", "supervised positions seen",
                   "tau proxy", "set key bottom right\nset format x '%.1s%c'\n", body);
    }
    fprintf(o, "\n");
    ret = 0;
done:
fail:
    free(body);
    for (int i = 0; i < n; i++) free(cv[i].p);
    free(cv);
    return ret;
}
