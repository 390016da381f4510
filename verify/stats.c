#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

/* regularised lower gamma P(a, x) by its series (x < a + 1) */
static double gamma_p_series(double a, double x) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 100000; n++) {
        term *= x / (a + n);
        sum += term;
        if (fabs(term) < fabs(sum) * 1e-16) break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

/* regularised upper gamma Q(a, x) by its continued fraction (x >= a + 1), modified Lentz */
static double gamma_q_cf(double a, double x) {
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-16) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double chi2_sf(double x, double df) {
    if (!(x > 0)) return 1.0;
    double a = df / 2, z = x / 2;
    return z < a + 1 ? 1.0 - gamma_p_series(a, z) : gamma_q_cf(a, z);
}

double ks_sf(double d, long n) {
    if (!(d > 0)) return 1.0;
    double sn = sqrt((double)n), lam = (sn + 0.12 + 0.11 / sn) * d;
    if (lam < 0.2) return 1.0;
    double s = 0;
    for (int j = 1; j <= 200; j++) {
        double t = exp(-2.0 * j * j * lam * lam);
        s += (j % 2 ? 1 : -1) * t;
        if (t < 1e-300) break;
    }
    s *= 2;
    return s < 0 ? 0 : s > 1 ? 1 : s;
}

int chi2_gof(const long *obs, const double *prob, int K, gof_result *r) {
    memset(r, 0, sizeof *r);
    long N = 0;
    for (int k = 0; k < K; k++) N += obs[k];
    double *e = ds_malloc(sizeof(double) * (size_t)(K + 1), "chi-square bins");
    long *o = ds_malloc(sizeof(long) * (size_t)(K + 1), "chi-square bins");
    if (!e || !o) {
        free(e);
        free(o);
        return -1;
    }
    double tail_e = 0;
    long tail_o = 0;
    int bins = 0;
    for (int k = 0; k < K; k++) {
        if (prob[k] <= 0) {
            r->impossible += (int)DS_MIN(obs[k], 1L << 30);
            continue;
        }
        double ek = prob[k] * (double)N;
        if (ek < 5) { /* small cells are pooled into one tail bin */
            tail_e += ek;
            tail_o += obs[k];
            continue;
        }
        e[bins] = ek;
        o[bins++] = obs[k];
    }
    if (tail_e >= 5 || (tail_e > 0 && bins == 0)) {
        e[bins] = tail_e;
        o[bins++] = tail_o;
    } else if (tail_e > 0) { /* a tail still below 5 joins the smallest regular bin */
        int m = 0;
        for (int i = 1; i < bins; i++)
            if (e[i] < e[m]) m = i;
        e[m] += tail_e;
        o[m] += tail_o;
    }
    double stat = 0;
    for (int i = 0; i < bins; i++) stat += (o[i] - e[i]) * (o[i] - e[i]) / e[i];
    r->stat = stat;
    r->df = bins > 1 ? bins - 1 : 1;
    r->p = r->impossible ? 0.0 : bins > 1 ? chi2_sf(stat, r->df) : 1.0;
    free(e);
    free(o);
    return 0;
}

double ks_gof(const long *obs, const double *prob, int K, double *d) {
    long N = 0;
    int impossible = 0;
    for (int k = 0; k < K; k++) {
        N += obs[k];
        impossible |= prob[k] <= 0 && obs[k] > 0;
    }
    double fo = 0, fe = 0, D = 0;
    for (int k = 0; k < K; k++) {
        fo += (double)obs[k] / (double)N;
        fe += prob[k];
        D = fmax(D, fabs(fo - fe));
    }
    if (d) *d = D;
    return impossible ? 0.0 : ks_sf(D, N);
}

int chi2_two_sample(const long *a, const long *b, int K, gof_result *r) {
    memset(r, 0, sizeof *r);
    long na = 0, nb = 0;
    for (int k = 0; k < K; k++) {
        na += a[k];
        nb += b[k];
    }
    if (na == 0 || nb == 0) {
        ds_error("two-sample test with an empty sample");
        return -1;
    }
    double fa = (double)na / (double)(na + nb), fb = 1 - fa, stat = 0;
    long ta = 0, tb = 0;
    int bins = 0;
    for (int k = 0; k <= K; k++) {
        long x, y;
        if (k < K) {
            x = a[k];
            y = b[k];
            if ((double)(x + y) * DS_MIN(fa, fb) < 5) { /* small cells go to one tail bin */
                ta += x;
                tb += y;
                continue;
            }
        } else {
            x = ta;
            y = tb;
            if (x + y == 0) continue;
        }
        double ea = (double)(x + y) * fa, eb = (double)(x + y) * fb;
        stat += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
        bins++;
    }
    r->stat = stat;
    r->df = bins > 1 ? bins - 1 : 1;
    r->p = bins > 1 ? chi2_sf(stat, r->df) : 1.0;
    return 0;
}

/* Acklam's rational approximation, refined by one Halley step */
double normal_quantile(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    double q, x;
    if (p < 0.02425) {
        q = sqrt(-2 * log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else if (p > 1 - 0.02425) {
        q = sqrt(-2 * log(1 - p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else {
        q = p - 0.5;
        double r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    double e = 0.5 * erfc(-x / sqrt(2)) - p, u = e * sqrt(2 * M_PI) * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}
