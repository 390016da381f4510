/* scheduler.h — verification-length policies behind one interface, and SPS(B) cost tables.
 *
 * A scheduler sees a verification batch (each request's proposed draft count and, when the drafter
 * has them, its conditional confidences c_k = P(x_k accepted | x_1..x_{k-1} accepted)) and returns
 * how many drafts of each request the target verifies. Lossless schedulers must be
 * non-anticipating: whether x_k is verified may depend on c_1..c_k (which depend on x_1..x_{k-1})
 * but not on anything computed from x_k itself. A new policy is one file plus one line in
 * schedulers/registry.c. */
#ifndef DS_SCHEDULER_H
#define DS_SCHEDULER_H

#include <cJSON.h>

#include "../runtime/sampling.h"

/* Steps per second of the target at B tokens per forward (profiled by bench-target). */
typedef struct {
    int n;
    int *B;          /* ascending batch sizes */
    double *seconds; /* time of one forward at B[i] */
} sps_table;

double sps_at(const sps_table *t, int B); /* steps/s; time interpolated linearly, extrapolated past the ends */
int sps_from_json(sps_table *t, const cJSON *root, const char *what); /* {"sps": {"B": [...], "seconds": [...]}} */
int sps_load(sps_table *t, const char *path);
int sps_from_arrays(sps_table *t, const int *B, const double *steps_per_s, int n);
void sps_free(sps_table *t);

typedef struct {
    int R;              /* requests in the batch */
    int gamma;          /* drafts per request at most */
    const int *n_draft; /* [R] drafts proposed */
    const float *conf;  /* [R][gamma] conditional confidences, or NULL */
    const sps_table *sps;
    const int *req;     /* [R] stable request ids (per-request state is keyed by them), or NULL: 0..R-1 */
    const int *tree;    /* [R] or NULL: 1 where request r's drafts are a tree's nodes (every prefix a tree);
                         * its conf[j] is then node j's own path probability, not a conditional */
} sched_batch;

/* What one round did, for schedulers that learn (the loop calls observe once per round, after
 * verification; rows in the order of the sched_batch). */
typedef struct {
    int R, gamma;
    const int *req;      /* [R] request ids, or NULL: 0..R-1 */
    const int *proposed; /* [R] */
    const int *verified; /* [R] */
    const int *accepted; /* [R] */
    const int *emitted;  /* [R] tokens committed (accepted + 1, less at end of generation) */
    const float *conf;   /* [R][gamma] the round's confidences, or NULL */
    int batch_tokens;    /* rows of the round's target forward */
    double seconds;      /* measured: draft + schedule + verify of the round */
    double model_seconds;/* the SPS table's time of a forward at batch_tokens (deterministic), 0 without one */
    const sps_table *sps;/* the SPS table, or NULL */
} round_result;

/* Before a drafter spends a forward on one more draft (draft_more): what is known then. */
typedef struct {
    int k;              /* drafts made so far (>= 1) */
    const float *conf;  /* [k] their conditional confidences */
    int rows_other;     /* rows the round's other requests take (their anchors and drafts so far) */
    double draft_s;     /* seconds one more draft costs (measured by the loop, or the scheduler's own) */
    const sps_table *sps;
    double sps_scale;   /* the target's measured forward time over the table's (a running mean; 0: not
                         * seen yet): a measured draft cost is priced against the table at today's speed */
} sched_draft;

typedef struct scheduler scheduler;
typedef struct scheduler_ops {
    const char *name;
    const char *help;
    int lossless;       /* 0 only for the losslessness gate's negative controls */
    int needs_conf;     /* refuses drafters without confidences */
    int (*open)(scheduler *, const cJSON *cfg);
    int (*schedule)(scheduler *, const sched_batch *, int *verify_len /* [R] */);
    int (*observe)(scheduler *, const round_result *); /* may be NULL */
    void (*release)(scheduler *, int req);              /* a request left the system; may be NULL */
    /* may be NULL (draft all gamma): 1 to draft one more (lossless whatever it returns: see
     * draft_block.more) */
    int (*draft_more)(scheduler *, const sched_draft *);
    void (*reset)(scheduler *);  /* forget everything learned, as freshly opened (the gate calls it before
                                  * every replay of a round); NULL: the scheduler learns nothing */
    void (*close)(scheduler *);  /* may be NULL */
    const char *gate_config;     /* JSON settings the losslessness gate opens it with (NULL: none) */
    int gate_sparse;             /* its rule draws at random, multiplying the gate's enumerated paths, and
                                  * does not depend on the drafter: its costly cases (SmolLM2, tiny top-p)
                                  * run with representative drafters only */
} scheduler_ops;

struct scheduler {
    const scheduler_ops *ops;
    void *impl;
    int length;         /* fixed: verify this many (0 = all proposed) */
    double threshold;   /* threshold: verify while a_k >= threshold */
    double draft_cost;  /* greedy: seconds a draft costs, fixed (0: the loop's measurement) */
    rng_t rng;          /* a randomised policy's categorical draws (seeded at open and reset): the gate
                         * attaches its path enumerator here, so every branch of the policy is covered */
};

/* The id of row r of a batch or a round result (req NULL: r). */
static inline int sched_req_id(const int *req, int r) { return req ? req[r] : r; }
/* Forward seconds at B tokens from an SPS table. */
double sps_seconds(const sps_table *t, int B);

/* Algorithm 1's pieces, shared by greedy and async-topk (greedy.c). Candidates (r, j) with
 * a_{r,j} = c_{r,1}...c_{r,j} > 0 in rank order: a descending, ties by request then position, so
 * (r, j) always precedes (r, j+1). */
typedef struct {
    float a;
    int r, j;
} sched_cand;
int sched_candidates(const sched_batch *b, sched_cand **c, int *m); /* *c is malloc'd */
/* how many of the first candidates Algorithm 1 admits (early_stop 0: the best prefix overall) */
int sched_admit_count(const sched_cand *c, int m, int R, const sps_table *sps, int early_stop);
void sched_admit(const sched_cand *c, int n, int R, int *len); /* lengths from the first n candidates */
int sched_needs(const sched_batch *b, const char *who, int sps); /* confidences (and an SPS table) or an error */

/* Per-request state for schedulers: zeroed slots of a fixed size, found by request id. */
typedef struct {
    int n, cap;
    int *id;
    unsigned char *slot;
    size_t size;
} req_table;
void *req_table_get(req_table *t, int id, size_t size); /* created zeroed on first use; NULL: out of memory */
void req_table_drop(req_table *t, int id);
void req_table_clear(req_table *t);
void req_table_free(req_table *t);

/* Registry: NULL and a message listing the known names when name is unknown. Controls (not
 * lossless) are found only with allow_controls. */
const scheduler_ops *scheduler_find(const char *name, int allow_controls);
const scheduler_ops *scheduler_nth(int i); /* every registered one, controls included; NULL past the end */
void scheduler_list(char *buf, int cap, int allow_controls);
int scheduler_open(scheduler *s, const char *name, const cJSON *cfg, int allow_controls);
void scheduler_close(scheduler *s);

#endif
