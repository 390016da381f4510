/* serve.h — a serving simulation over the real decoding loop (DESIGN §12).
 *
 * Requests arrive, join the running batch at the next round boundary and leave when they finish;
 * every round is ONE varlen target forward over all active requests (decode_round). A newcomer's
 * prompt is prefilled by its own forward when it joins (time on the clock, counted as busy).
 *   - closed loop: C requests are always in the system; each one that leaves is replaced at once.
 *   - open loop: Poisson arrivals at `rate` per second (seeded); a request waits in a queue while
 *     the batch holds max_batch requests. When nothing is active and the next arrival lies in the
 *     future, the clock jumps to it (idle time, not spent computing).
 * The clock is wall time of the computation plus skipped idle time. Aggregate throughput is all
 * output tokens over the clock; per-user speed is a request's output tokens over its time in the
 * batch (admission to last token), averaged over requests. */
#ifndef DS_SERVE_H
#define DS_SERVE_H

#include "decode.h"

typedef struct {
    int closed;       /* 1: closed loop at `concurrency`; 0: open loop at `rate` */
    int concurrency;  /* closed: requests in the system; open: the most in one batch */
    double rate;      /* open: arrivals per second */
    int n_requests;   /* requests to complete (prompts reused in order when fewer) */
    int max_new;      /* output budget per request */
    uint64_t seed;    /* request sampling streams and arrival times */
    uint64_t *hash;   /* NULL, or [n_requests]: FNV-1a of each request's output ids (request i = prompt i % n) */
    const trace_request *meta; /* NULL, or [n_prompts]: dataset, domain and index of each prompt, copied into
                                * the request rows of cfg->tr */
} serve_params;

typedef struct {
    long requests, tokens, batch_rounds, req_rounds, drafted, verified, accepted, batch_rows;
    double clock_s, idle_s, prefill_s;
    double agg_tok_s;      /* tokens / clock */
    double user_tok_s;     /* mean per-request output / time in the batch */
    double user_p10_tok_s; /* the 10th percentile of that (the slow users) */
    double latency_s;      /* mean arrival to last token (open loop: includes the queue) */
    double wait_s;         /* mean arrival to admission */
    double mean_batch;     /* active requests per round */
    double verify_per_req; /* drafts verified per request per round: the verification budget */
    double tau;            /* tokens committed per request-round */
} serve_result;

/* Run one simulation point over prompts[0..n_prompts) (token ids, chat-encoded), progress on stderr
 * under `label`. cfg->tr, when set, receives the round rows (a batch round's time split evenly over
 * its requests, so the rows sum to the time computed, not C times it), the confidence rows, one
 * request row per finished request (wall_s = admission to last token) and the per-position
 * acceptance counts. */
int serve_simulate(target *t, const decode_cfg *cfg, const ivec *prompts, int n_prompts, const serve_params *sp,
                   const char *label, serve_result *out);

#endif
