/* stats.h — the goodness-of-fit tests of the losslessness gate.
 *
 * chi-square p-values from the regularised upper incomplete gamma function; KS p-values from the
 * asymptotic Kolmogorov distribution with Stephens' small-sample correction (conservative for
 * categorical data). Bins whose expected count is below 5 are merged into one tail bin. An
 * observation in a bin of probability zero makes the p-value 0. */
#ifndef DS_STATS_H
#define DS_STATS_H

typedef struct {
    double stat;
    int df;
    double p;
    int impossible; /* observations where the law puts zero mass */
} gof_result;

double chi2_sf(double x, double df);      /* P(X >= x), X ~ chi-square(df) */
double ks_sf(double d, long n);           /* P(D_n >= d) for the one-sample KS statistic */
/* counts obs[K] (total N) against probabilities prob[K] (sum 1) */
int chi2_gof(const long *obs, const double *prob, int K, gof_result *r);
/* KS on the CDF in index order; returns the p-value, D in *d */
double ks_gof(const long *obs, const double *prob, int K, double *d);
/* two samples' counts over the same K categories (homogeneity test) */
int chi2_two_sample(const long *a, const long *b, int K, gof_result *r);
/* normal quantile, for the power statement of the real-model test */
double normal_quantile(double p);

#endif
