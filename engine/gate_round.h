/* gate_round.h — the losslessness gate on the production round (DESIGN §11).
 *
 * A tiny random Llama target (a GGUF file, opened like any model), every registered drafter opened
 * with its ops->gate_config, every registered lossless scheduler it supports, and the real
 * decoding loop (decode_prefill + decode_rounds). Three kinds of check:
 *   - exact: decode_rounds of one request, run once per branch of every random draw it makes
 *     (drafting, accept tests, residual and bonus) under a path enumerator; the law of the N tokens
 *     emitted after the prefill token against the target's law computed from target forwards. The
 *     budget max_new = 1 + N caps the first round at N - 1 drafts, so the bonus token of a fully
 *     accepted round is always inside the compared window.
 *   - sampling: decode_rounds over a batch of requests, chi-square on the joint and on each
 *     position's marginal of those N tokens.
 *   - q-consistency: for each drafter, the q it reports equals the law it samples from, exactly
 *     (every draft path enumerated, law at each draw against the reported row) and by seed-matched
 *     resampling (chi-square of drawn tokens against the reported rows), at batch 3 with a
 *     different sampling setting per request.
 * Negative controls (FAULT_SHIFTED_Q, FAULT_DRAFT_NO_TOP_P, FAULT_DRAFT_WRONG_Q, FAULT_ACCEPT_BIAS, FAULT_BONUS_ROW,
 * FAULT_REUSED_UNIFORM) run through the same checks; each must be flagged by at least two. */
#ifndef DS_GATE_ROUND_H
#define DS_GATE_ROUND_H

#include "../verify/lossless.h"

/* Append every record to rep; 0 when it ran (pass/fail is in the records), -1 on an error. The
 * lossless statistical tests share the family-wise level alpha (Bonferroni over their count).
 * only: one drafter's cases and the controls that name it (NULL: every drafter). */
int gate_round_cases(gate_report *rep, long draws, double alpha, int quick, int verbose, const char *only);

/* The exact cases on a real target (default: the embedded SmolLM2): every drafter x scheduler,
 * T = 1 top-k = 3 (the processed law has 3 tokens per step, so the enumeration covers all of its
 * mass), the law of the N tokens after the prefill token, plus a 1 % accept-bias control. n_threads:
 * the target's (0 = every core). */
int gate_round_real(gate_report *rep, const char *model, int N, int verbose, const char *only, int n_threads);

#endif
