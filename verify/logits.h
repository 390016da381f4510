/* logits.h — the one logit-processing function applied to target and draft alike.
 *
 * Order (as HF transformers and vLLM): temperature, then top-k, then top-p, then min-p (tokens below
 * min_p times the most likely one's probability dropped), then renormalise.
 * Temperature 0 (below 1e-5) is greedy: a one-hot distribution on the argmax (lowest id on ties).
 * Ties at the top-k / top-p boundary are broken by lower token id, so the kept set is a function of
 * the logits alone. Losslessness of speculative decoding is with respect to this processed target
 * distribution. */
#ifndef DS_LOGITS_H
#define DS_LOGITS_H

typedef struct {
    float temperature;  /* 0 = greedy */
    int top_k;          /* 0 = off */
    float top_p;        /* 1 = off */
    float min_p;        /* 0 = off: keep tokens with p >= min_p * max p (after top-k and top-p) */
} sampling_params;

typedef struct {
    int *idx;           /* [cap] candidate ids */
    float *val;
    int cap;
} lp_scratch;

/* probs[V] = processed distribution of logits[V]. -1 (message set) on bad parameters or memory. */
int logits_process(const float *logits, int V, const sampling_params *sp, float *probs, lp_scratch *scr);
void lp_scratch_free(lp_scratch *s);
int sampling_params_check(const sampling_params *sp); /* -1 with a message naming the bad field */
int sampling_is_greedy(const sampling_params *sp);

#endif
