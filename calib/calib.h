/* calib.h — calibration of draft confidences (DESIGN §9): the metrics (ECE over 15 equal-width bins,
 * ROC-AUC, Brier score, reliability bins) and Sequential Temperature Scaling.
 *
 * STS: a drafted block has confidences c_1..c_G (c_k estimates P(x_k accepted | x_1..x_{k-1}
 * accepted)), so a_k = prod_{i<=k} c_i estimates P(the prefix of length k survives). Temperatures
 * are fitted left to right: for k = 1..G, with T_1..T_{k-1} fixed, T_k is the grid point minimising
 * a loss of a_k = prod_{i<=k} sigmoid(logit(c_i) / T_i) against "positions 1..k all accepted", over
 * the rounds where that is known (position k was verified).
 * The loss: the paper minimises ECE; ECE is not a proper score, and a constant prediction at the base
 * rate has ECE ~0, so a grid search over T runs to the largest T whenever the scores spread around
 * the base rate (tests/test_calib.c shows it: T* = 0.5 fitted as 11). The default is the negative
 * log-likelihood, whose minimum is the calibrated T; CALIB_ECE keeps the paper's criterion. ECE is
 * what is reported either way. */
#ifndef DS_CALIB_H
#define DS_CALIB_H

#define CALIB_BINS 15
#define CALIB_MAX_G 16

/* Expected calibration error of probabilities p against 0/1 outcomes y over n_bins equal-width bins:
 * sum_b (n_b / n) |mean p_b - mean y_b|; NAN when n == 0. */
double calib_ece(const double *p, const int *y, long n, int n_bins);
/* ROC-AUC of scores s for labels y (the Mann-Whitney statistic, ties counted one half); NAN when a
 * class is empty. -1 + message on allocation failure is reported as NAN too. */
double calib_auc(const double *s, const int *y, long n);
/* mean (p - y)^2 */
double calib_brier(const double *p, const int *y, long n);

typedef struct {
    long count;
    double mean_p, frac_pos; /* NAN for an empty bin */
} calib_bin;
void calib_reliability(const double *p, const int *y, long n, int n_bins, calib_bin *out);

/* One drafted block: raw confidences c[0..G) (NAN where not drafted) and, per position, whether
 * positions 1..k survived: 1, 0, or -1 when position k was not verified (then unknown). */
typedef struct {
    int G;
    float c[CALIB_MAX_G];
    int survived[CALIB_MAX_G];
} calib_round;

/* the cumulative product a_k (k 1-based, <= G) of one round under temperatures T (T[i] <= 0: 1) */
double calib_cumulative(const calib_round *r, int k, const float *T);

typedef struct {
    int G;                          /* positions fitted */
    float T[CALIB_MAX_G];           /* fitted temperatures */
    long n[CALIB_MAX_G];            /* rounds with a known outcome at each position */
    double ece_before[CALIB_MAX_G]; /* ECE of a_k with raw c (T = 1) and with the fit */
    double ece_after[CALIB_MAX_G];
} calib_sts;

typedef enum { CALIB_NLL = 0, CALIB_ECE = 1 } calib_objective;

/* mean negative log-likelihood of p (clamped to [1e-7, 1 - 1e-7]) for outcomes y */
double calib_nll(const double *p, const int *y, long n);

/* Fit STS on rounds[0..R) for positions 1..G (G <= CALIB_MAX_G) over the grid of n_grid
 * temperatures; a position with fewer than min_n known outcomes keeps T = 1. -1 + message on
 * bad arguments or allocation failure. */
int calib_sts_fit(const calib_round *rounds, long R, int G, const double *grid, int n_grid, long min_n,
                  calib_objective obj, calib_sts *out);
/* a_k under temperatures T against its outcome, over the rounds where it is known (the held-out
 * evaluation): how many, ECE, ROC-AUC and Brier score */
typedef struct {
    long n;
    double ece, auc, brier;
} calib_eval;
calib_eval calib_sts_eval(const calib_round *rounds, long R, int k, const float *T);
/* the default grid: 200 temperatures log-spaced over [0.05, 20] */
int calib_default_grid(double *grid, int cap);

#endif
