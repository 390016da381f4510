/* decode.h — the decoding loop (DESIGN §2), one code path for the autoregressive baseline and
 * speculative decoding.
 *
 * A round, for every active request in lockstep: the drafter proposes up to gamma tokens, the
 * scheduler picks how many of each request's drafts the target verifies, ONE target forward over
 * the flattened varlen batch [anchor, x_1..x_l] per request gives p_0..p_l, verification accepts a
 * prefix and draws the residual or bonus token, and the caches are cropped to what was committed.
 * With no drafter every round verifies l = 0 drafts: plain autoregressive decoding through the
 * same code, so the speedup compares like with like. */
#ifndef DS_DECODE_H
#define DS_DECODE_H

#include "../drafters/drafter.h"
#include "../schedulers/scheduler.h"
#include "../drafters/request.h"
#include "trace.h"

typedef struct {
    sampling_params sp;
    int gamma;              /* drafts per round at most */
    drafter *d;             /* NULL: autoregressive baseline */
    scheduler *s;           /* required with a drafter */
    const sps_table *sps;
    trace *tr;              /* rows go here when not NULL */
    int mode;               /* MODE_AR or MODE_SPEC, for the trace */
    verify_fault fault;     /* FAULT_NONE except in the losslessness gate's negative controls */
    chain_rule rule;        /* how a chain is verified at T > 0: token-wise (default) or block */
    int compare_rules;      /* also compute both rules' expected accepted drafts on every sampled chain round
                             * (a few passes over the vocabulary a draft: off when timing) */
} decode_cfg;

typedef struct {
    long rounds, emitted, drafted, verified, accepted;
    long asked;             /* drafts asked of the drafter (gamma, or less near the budget): drafted < asked
                             * when the scheduler's draft_more stopped a block */
    double t_draft, t_sched, t_verify, t_prefill;
    double t_forward;       /* of t_verify: the target's forward alone (the rest: sampling, verification,
                             * the drafter's commit, trace rows) */
    long pos_attempted[65], pos_accepted[65]; /* per draft position 1..gamma */
    long batch_rounds, batch_tokens;           /* target forwards of rounds, and their rows */
    /* the two chain rules on the same drafts: expected accepted drafts of every sampled chain round
     * (T > 0, l > 0) under token-wise and block verification, whichever one ran */
    long rule_rounds;
    double exp_acc_token, exp_acc_block;
} decode_stats;

/* A request ready to decode: prompt ids copied, caches made, random streams seeded from seed. */
int request_init(request *r, target *t, int id, const int *prompt, int n_prompt, int max_new, uint64_t seed);
void request_free(request *r, target *t);
/* The request's three random streams (drafting, accept tests, residual and bonus draws) seeded from
 * seed: request_init's, and the gate's replays', so the gate's sampled cases draw as production does */
void request_seed(request *r, uint64_t seed);

/* Prefill and decode the R requests until each hits end-of-generation or its budget. Statistics
 * are added to st; per-round rows go to cfg->tr. */
int decode_run(target *t, request **reqs, int R, const decode_cfg *cfg, decode_stats *st);

/* The two halves of decode_run, for callers that reuse one prefill many times (lossless --real):
 * decode_prefill runs the prompt, draws the first token from `first_probs` (NULL: from the
 * prompt's last logits) and starts the drafter; decode_rounds runs rounds until every request is
 * done. */
int decode_prefill(target *t, request *r, const decode_cfg *cfg, float *last_logits, decode_stats *st);
int decode_rounds(target *t, request **reqs, int R, const decode_cfg *cfg, decode_stats *st);
/* One round at a time over a changing batch (the serving simulation): a context holds the round's
 * buffers for up to R_max requests, allocated once; decode_round runs one round (draft, schedule,
 * one target forward, verify, commit, observe) over the na requests in act, none of them done. A
 * request that finishes sets wall_s = now - t0 and is released from the scheduler. */
typedef struct decode_ctx decode_ctx;
/* the settings a run can be refused for before any work: sampling, a drafter's scheduler and gamma, a
 * scheduler that needs confidences, trees under a scheduler that cannot cut them (decode_ctx_new checks
 * them too; run and serve ask first, so a bad pairing costs no baseline pass) */
int decode_cfg_check(const decode_cfg *cfg);
decode_ctx *decode_ctx_new(target *t, const decode_cfg *cfg, int R_max);
int decode_round(decode_ctx *c, target *t, request **act, int na, const decode_cfg *cfg, decode_stats *st);
void decode_ctx_free(decode_ctx *c);

/* append emitted tokens (end-of-generation, budget and stop_at end the request); returns the count */
int append_emitted(target *t, request *r, const int *tok, int n);

#endif
