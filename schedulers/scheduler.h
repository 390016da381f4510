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
} sched_batch;

typedef struct {
    int R;
    const int *verified; /* [R] */
    const int *accepted; /* [R] */
    int batch_tokens;
    double seconds;      /* draft + schedule + verify of the round */
} round_result;

typedef struct scheduler scheduler;
typedef struct scheduler_ops {
    const char *name;
    const char *help;
    int lossless;       /* 0 only for the losslessness gate's negative controls */
    int needs_conf;     /* refuses drafters without confidences */
    int (*open)(scheduler *, const cJSON *cfg);
    int (*schedule)(scheduler *, const sched_batch *, int *verify_len /* [R] */);
    void (*observe)(scheduler *, const round_result *); /* may be NULL */
    void (*close)(scheduler *);                         /* may be NULL */
} scheduler_ops;

struct scheduler {
    const scheduler_ops *ops;
    void *impl;
    int length;         /* fixed: verify this many (0 = all proposed) */
    double threshold;   /* threshold: verify while a_k >= threshold */
};

/* Registry: NULL and a message listing the known names when name is unknown. Controls (not
 * lossless) are found only with allow_controls. */
const scheduler_ops *scheduler_find(const char *name, int allow_controls);
const scheduler_ops *scheduler_nth(int i); /* every registered one, controls included; NULL past the end */
void scheduler_list(char *buf, int cap, int allow_controls);
int scheduler_open(scheduler *s, const char *name, const cJSON *cfg, int allow_controls);
void scheduler_close(scheduler *s);

#endif
