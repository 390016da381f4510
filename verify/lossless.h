/* lossless.h — the losslessness gate (DESIGN §11), on toy worlds small enough to check exactly.
 *
 * A world gives, for any prefix of emitted tokens, the processed target distribution, the draft
 * distribution the drafter samples from (which may depend on earlier draft tokens) and the
 * drafter's conditional confidence for the next position. Four checks, all seeded:
 *   1. exact enumeration of the verifier's output law (every draft path, accept/reject branch,
 *      residual and bonus token) with the production scheduler and verification primitives,
 *      against the target law: total variation < 1e-12;
 *   2. chi-square tests of the production sampler: joint law of the first two emitted tokens,
 *      residual law at every stop position, accepted-count law;
 *   3. KS on the first emitted token, N >= 1e5 per case, alpha = 0.01 Bonferroni over cases;
 *   4. negative controls that must be flagged: the retrospective scheduler (paper Appendix A), a
 *      residual without normalisation, temperature on one side only, one uniform reused. */
#ifndef DS_LOSSLESS_H
#define DS_LOSSLESS_H

#include "../schedulers/scheduler.h"
#include "logits.h"
#include "verify.h"

typedef struct gate_world gate_world;
struct gate_world {
    int V;
    void (*target)(const gate_world *, const int *prefix, int n, float *probs);
    void (*draft)(const gate_world *, const int *prefix, int n, float *probs);        /* sampling law */
    void (*draft_verify)(const gate_world *, const int *prefix, int n, float *probs); /* what verify sees */
    float (*conf)(const gate_world *, const int *prefix, int n);                      /* NULL: none */
    void *ctx;
};

/* Laws from exact enumeration of speculative decoding from an empty prefix. */
typedef struct {
    int N;                /* emitted tokens whose joint law is computed */
    long double *first_n; /* [V^N] */
    long double *accepted;/* [gamma+1] accepted-count law of the first round */
    long double *resid;   /* [gamma][V] P(first round stops by rejection after k accepted, emits y) */
} enum_law;

int enum_spec(const gate_world *w, scheduler *s, const sps_table *sps, int gamma, int N, verify_fault fault,
              chain_rule rule, enum_law *out);
void enum_law_free(enum_law *l);
/* target law of the first N tokens */
int enum_target(const gate_world *w, int N, long double *law /* [V^N] */);

/* A hash-seeded toy world: random logits per prefix, some tokens masked, draft logits correlated
 * with the target's, processed by logits_process with the given sampling parameters. */
typedef struct {
    int V;
    uint64_t seed;
    sampling_params sp;
    float mix;              /* draft logits = mix * target + (1 - mix) * own noise */
    int one_sided;          /* control: verification sees the draft at temperature 1 */
} toy_spec;
gate_world *toy_world_new(const toy_spec *spec);
void toy_world_free(gate_world *w);

/* The paper's Appendix A world: V = {A, B}, p = (0.7, 0.3), q = (0.5, 0.5), c_1 = 0.8,
 * c_2 = 0.9 after A and 0 after B; with SPS(1) = 1, SPS(2) = 0.5, SPS(3) = 0.45. */
gate_world *appendix_a_world(void);
int appendix_a_sps(sps_table *t);
/* exact P(first emitted token = A) in the Appendix A world under the named scheduler */
int appendix_a_first_token(const char *sched, double *pA);

/* One line of the gate's report (also a row of the trace's `lossless` dataset). */
typedef struct {
    char test[200];
    char kind[16];       /* exact-tv, chi2, ks */
    long N;
    double statistic;    /* TV, chi-square or D */
    double p;            /* p-value (exact: 1 - TV as a pass flag is meaningless; p = NAN) */
    int control;         /* 1 = negative control: must be flagged */
    int pass;            /* lossless case: not rejected; control: flagged */
} gate_record;

typedef struct {
    gate_record *rec;
    int n, cap;
    long draws;          /* N for sampling tests */
    int quick;           /* smaller matrix (unit tests) */
    double alpha;        /* family-wise level for the lossless statistical tests */
    int exact;           /* production-round targets on the fp32 (1) or int8 (0) matmul contract */
    const char *backend; /* production-round targets' backend (NULL: cpu) */
    long control_draws;  /* production-round controls' sample size (0: 40000, the gate's own) */
} gate_report;

/* Run everything; returns 0 when every lossless case passes and every control is flagged, 1 when
 * not, -1 on an internal error. Progress goes to stderr when verbose. */
int gate_run(gate_report *rep, int verbose);
/* append one record (NULL when out of memory) */
gate_record *gate_add(gate_report *rep, const char *test, const char *kind, long N, double stat, double p, int control,
                      int pass);
void gate_report_free(gate_report *rep);

/* verify_tree's exact cases on synthetic drafts (tree_enum.c): TV of the first 3 emitted tokens' law
 * from the target's over every draw, for tree shape 0 or 1 */
int tree_enum_tv(int shape, tree_kind kind, int greedy, verify_fault fault, double *tv, long *paths);
/* those cases and their controls into the report */
int gate_tree_cases(gate_report *rep);

#endif
