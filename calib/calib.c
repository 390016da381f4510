#include "calib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

static int bin_of(double p, int n_bins) {
    int b = (int)(p * n_bins);
    return b < 0 ? 0 : b >= n_bins ? n_bins - 1 : b; /* p = 1 falls in the last bin */
}

void calib_reliability(const double *p, const int *y, long n, int n_bins, calib_bin *out) {
    double sp[64] = {0}, sy[64] = {0};
    long cnt[64] = {0};
    if (n_bins > 64) n_bins = 64;
    for (long i = 0; i < n; i++) {
        int b = bin_of(p[i], n_bins);
        cnt[b]++, sp[b] += p[i], sy[b] += y[i];
    }
    for (int b = 0; b < n_bins; b++)
        out[b] = (calib_bin){cnt[b], cnt[b] ? sp[b] / cnt[b] : NAN, cnt[b] ? sy[b] / cnt[b] : NAN};
}

double calib_ece(const double *p, const int *y, long n, int n_bins) {
    if (n <= 0) return NAN;
    calib_bin bins[64];
    calib_reliability(p, y, n, n_bins, bins);
    double e = 0;
    for (int b = 0; b < (n_bins > 64 ? 64 : n_bins); b++)
        if (bins[b].count) e += (double)bins[b].count / n * fabs(bins[b].mean_p - bins[b].frac_pos);
    return e;
}

double calib_brier(const double *p, const int *y, long n) {
    if (n <= 0) return NAN;
    double s = 0;
    for (long i = 0; i < n; i++) s += (p[i] - y[i]) * (p[i] - y[i]);
    return s / n;
}

double calib_nll(const double *p, const int *y, long n) {
    if (n <= 0) return NAN;
    double s = 0;
    for (long i = 0; i < n; i++) {
        double q = fmin(fmax(p[i], 1e-7), 1 - 1e-7);
        s -= y[i] ? log(q) : log(1 - q);
    }
    return s / n;
}

typedef struct {
    double s;
    int y;
} scored;
static int cmp_scored(const void *a, const void *b) {
    double x = ((const scored *)a)->s, z = ((const scored *)b)->s;
    return x < z ? -1 : x > z;
}

double calib_auc(const double *s, const int *y, long n) {
    long pos = 0;
    for (long i = 0; i < n; i++) pos += y[i] != 0;
    long neg = n - pos;
    if (pos == 0 || neg == 0) return NAN;
    scored *v = malloc(sizeof *v * (size_t)n);
    if (!v) return NAN;
    for (long i = 0; i < n; i++) v[i] = (scored){s[i], y[i] != 0};
    qsort(v, (size_t)n, sizeof *v, cmp_scored);
    /* sum of the positives' ranks, ties sharing their average rank */
    double rank_sum = 0;
    for (long i = 0; i < n;) {
        long j = i;
        while (j < n && v[j].s == v[i].s) j++;
        double avg = 0.5 * (double)(i + 1 + j); /* ranks i+1..j */
        for (long k = i; k < j; k++)
            if (v[k].y) rank_sum += avg;
        i = j;
    }
    free(v);
    return (rank_sum - 0.5 * (double)pos * (double)(pos + 1)) / ((double)pos * (double)neg);
}

static double scaled(float c, float T) {
    if (!(T > 0) || T == 1.0f) return c;
    double cc = fmin(fmax((double)c, 1e-7), 1 - 1e-7), l = log(cc / (1 - cc)) / T;
    return 1 / (1 + exp(-l));
}

double calib_cumulative(const calib_round *r, int k, const float *T) {
    double a = 1;
    for (int i = 0; i < k; i++) a *= scaled(r->c[i], T ? T[i] : 1.0f);
    return a;
}

/* a_k and outcomes of the rounds where position k is known; returns how many */
static long gather(const calib_round *rounds, long R, int k, const float *T, double *p, int *y) {
    long n = 0;
    for (long i = 0; i < R; i++) {
        const calib_round *r = &rounds[i];
        if (k > r->G || r->survived[k - 1] < 0 || isnan(r->c[k - 1])) continue;
        p[n] = calib_cumulative(r, k, T);
        y[n++] = r->survived[k - 1];
    }
    return n;
}

calib_eval calib_sts_eval(const calib_round *rounds, long R, int k, const float *T) {
    calib_eval e = {0, NAN, NAN, NAN};
    double *p = malloc(sizeof(double) * (size_t)(R + 1));
    int *y = malloc(sizeof(int) * (size_t)(R + 1));
    if (p && y) {
        e.n = gather(rounds, R, k, T, p, y);
        e.ece = calib_ece(p, y, e.n, CALIB_BINS);
        e.auc = calib_auc(p, y, e.n);
        e.brier = calib_brier(p, y, e.n);
    }
    free(p), free(y);
    return e;
}

int calib_default_grid(double *grid, int cap) {
    int n = cap < 200 ? cap : 200;
    for (int i = 0; i < n; i++) grid[i] = 0.05 * pow(20 / 0.05, (double)i / (n - 1));
    return n;
}

int calib_sts_fit(const calib_round *rounds, long R, int G, const double *grid, int n_grid, long min_n,
                  calib_objective obj, calib_sts *out) {
    memset(out, 0, sizeof *out);
    if (G < 1 || G > CALIB_MAX_G || n_grid < 1) {
        ds_error("calibration: %d positions (1..%d) and %d grid points", G, CALIB_MAX_G, n_grid);
        return -1;
    }
    double *p = ds_malloc(sizeof(double) * (size_t)(R + 1), "calibration");
    int *y = ds_malloc(sizeof(int) * (size_t)(R + 1), "calibration");
    if (!p || !y) {
        free(p), free(y);
        return -1;
    }
    out->G = G;
    float ones[CALIB_MAX_G];
    for (int i = 0; i < CALIB_MAX_G; i++) out->T[i] = ones[i] = 1.0f;
    for (int k = 1; k <= G; k++) {
        long n = gather(rounds, R, k, ones, p, y);
        out->n[k - 1] = n;
        out->ece_before[k - 1] = calib_ece(p, y, n, CALIB_BINS);
        if (n >= min_n) {
            double best = INFINITY;
            float bestT = 1.0f;
            for (int g = 0; g < n_grid; g++) {
                out->T[k - 1] = (float)grid[g];
                gather(rounds, R, k, out->T, p, y);
                double e = obj == CALIB_ECE ? calib_ece(p, y, n, CALIB_BINS) : calib_nll(p, y, n);
                if (e < best - 1e-12) best = e, bestT = (float)grid[g];
            }
            out->T[k - 1] = bestT; /* fixed from here on: later positions are fitted given it */
        }
        gather(rounds, R, k, out->T, p, y);
        out->ece_after[k - 1] = calib_ece(p, y, n, CALIB_BINS);
    }
    free(p), free(y);
    return 0;
}
