/* trace.h — the HDF5 trace of a run (DESIGN §10).
 *
 * One file per run. Root attributes: the resolved config as JSON, target and drafter fingerprints,
 * seed, backend, version. Extendable chunked compound datasets: `rounds`, `requests`,
 * `positions`, `confidence`, `lossless`. Rows are buffered and appended a chunk at a time. The
 * file is written as PATH.tmp and renamed to PATH by trace_close, so an interrupted run never
 * leaves a file that looks complete. */
#ifndef DS_TRACE_H
#define DS_TRACE_H

#include <stdint.h>

enum { MODE_AR = 0, MODE_SPEC = 1 };

typedef struct {
    int32_t request, round, mode;
    int32_t proposed, verified, accepted, emitted, batch_tokens;
    double t_draft_us, t_sched_us, t_verify_us;
} trace_round;

typedef struct {
    int32_t request, mode;
    char dataset[32], domain[16];
    int32_t index;           /* prompt index within its dataset */
    int32_t prompt_tokens, output_tokens, rounds;
    double wall_s;
    int64_t output_hash;     /* FNV-1a of the output ids: equal AR/spec hashes = identical text */
} trace_request;

typedef struct {
    int32_t position;        /* 1-based draft position */
    int64_t attempted;       /* rounds that verified it with positions 1..k-1 accepted */
    int64_t accepted;
} trace_position;

typedef struct {
    int32_t request, round, position;
    float c_raw, c_cal, c_star; /* NaN where the drafter has no confidence head */
    int32_t survived;            /* positions 1..position were all accepted: 1 / 0, -1 = unknown (drafted
                                  * past the verified prefix, which was all accepted); position > the
                                  * round's `verified` = drafted but not verified */
} trace_conf;

/* one node of a draft tree a round verified (trees.md, what a workbench records) */
typedef struct {
    int32_t request, round, node;
    int32_t depth, rank;     /* depth 1 = a child of the anchor; rank among its siblings, 0 = first tried */
    float conf;              /* the drafter's confidence in the node (recycling: its path's recorded probability) */
    int32_t accepted;        /* on the accepted path */
    int32_t led_on;          /* accepted with rank > 0 and a child of it accepted too */
} trace_node;

typedef struct {
    char test[200], kind[16];
    int64_t N;
    double statistic, p;
    int32_t control, pass;
} trace_lossless;

typedef struct trace trace;

trace *trace_create(const char *path);
int trace_attr(trace *t, const char *name, const char *value);
int trace_attr_u64(trace *t, const char *name, uint64_t value);
int trace_attr_f64(trace *t, const char *name, double value);
int trace_add_round(trace *t, const trace_round *r);
int trace_add_request(trace *t, const trace_request *r);
int trace_add_position(trace *t, const trace_position *r);
int trace_add_conf(trace *t, const trace_conf *r);
int trace_add_lossless(trace *t, const trace_lossless *r);
int trace_add_node(trace *t, const trace_node *r);
int trace_close(trace *t);   /* flush, close, rename PATH.tmp -> PATH; -1 (tmp removed) on failure */
void trace_abort(trace *t);  /* close and remove PATH.tmp */

/* Reading a finished trace back (report, tests). */
typedef struct {
    char *config, *target_fingerprint, *drafter_fingerprint, *version, *kernels; /* kernels: NULL in older traces */
    double draft_seq_loop_s; /* seconds in the draft head's sequential loop (0: none or not recorded) */
    trace_round *rounds;
    long n_rounds;
    trace_request *requests;
    long n_requests;
    trace_position *positions;
    long n_positions;
    trace_conf *conf;
    long n_conf;
    trace_lossless *lossless;
    long n_lossless;
    trace_node *nodes;       /* tree rounds only (none in older traces) */
    long n_nodes;
} trace_data;

int trace_read(const char *path, trace_data *d);
void trace_data_free(trace_data *d);

#endif
