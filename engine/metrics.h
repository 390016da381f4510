/* metrics.h — the numbers a report prints, computed from a trace (DESIGN §12).
 *
 * tau = tokens emitted per verification round (accepted drafts + 1; a round that accepts an end
 * token inside the draft has no bonus), micro-averaged over rounds, and the per-request (macro)
 * mean. Acceptance rate = accepted drafts / verified drafts. Conditional acceptance at position k
 * = rounds accepting x_k / rounds that verified x_k with x_1..x_{k-1} accepted (the paper's Fig. 2);
 * unconditional = rounds accepting >= k / rounds verifying >= k (what vLLM and DeepSpec print).
 * Wall speedup = autoregressive wall time / speculative wall time on the same requests (prefill
 * included: the same in both modes, it bounds what speculation can buy on long prompts); decode
 * speedup = speculative over autoregressive tokens/s in the decoding rounds (prefill and its first
 * token excluded). At T > 0 the two modes sample outputs of different lengths: a ratio of times would
 * charge the longer output to its mode, and a ratio of wall tokens/s would spread the same prefill
 * over different lengths, so the speculative wall time is taken at the autoregressive lengths (its
 * prefill plus their decoded tokens at its decode rate). At T = 0 the outputs are identical and both
 * are plain ratios of times. */
#ifndef DS_METRICS_H
#define DS_METRICS_H

#include "trace.h"

#define METRICS_MAX_POS 64

typedef struct {
    char name[48];
    int n_prompts;                     /* speculative requests in the group */
    long rounds, emitted, verified, accepted;
    double tau, tau_macro, accept_rate;
    long ar_tokens, sp_tokens;
    double ar_wall, sp_wall, ar_tok_s, sp_tok_s, speedup;
    double ar_decode, sp_decode, decode_speedup; /* seconds in rounds (prefill excluded); the rates' ratio */
    long ar_emitted;                   /* tokens the autoregressive rounds emitted (emitted: the speculative) */
    int n_pairs, identical;            /* requests with both modes; identical outputs */
    double t_draft, t_sched, t_verify; /* seconds over speculative rounds */
    long att[METRICS_MAX_POS + 1], acc[METRICS_MAX_POS + 1];       /* conditional */
    long ver_ge[METRICS_MAX_POS + 1], acc_ge[METRICS_MAX_POS + 1]; /* unconditional */
    double cstar_sum[METRICS_MAX_POS + 1];
    long cstar_n[METRICS_MAX_POS + 1];
    int max_pos;
} metrics;

/* the two speedups as defined above, from both modes' wall and decode seconds and the tokens their
 * decoding rounds emitted (0 where a side has nothing to divide by; `report` and `run` both call these) */
double speedup_wall(double ar_wall, double sp_wall, double sp_decode, long ar_emitted, long sp_emitted);
double speedup_decode(double ar_decode, double sp_decode, long ar_emitted, long sp_emitted);

/* group: "" = all requests; "dataset:NAME" or "domain:NAME" */
int metrics_compute(const trace_data *d, const char *group, metrics *m);

#endif
