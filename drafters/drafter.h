/* drafter.h — one interface for every drafter family; a new family is one file plus one line in
 * drafters/registry.c.
 *
 * propose() returns the drafted tokens x_1..x_n and, for each, the processed distribution q_k it
 * was sampled from (the same logit processing as the target's, so verification is lossless) and,
 * when the family has a confidence head, c_k. commit() comes after every round, with the committed
 * tokens already in r->toks: the sequence grew by the n_accepted verified drafts and next_token
 * (fewer at an end of generation); `hidden` carries the target's captured states
 * ([n_capture][n_accepted + 1][dim], rows anchor .. last verified draft) for families that condition
 * on them. The verified drafts are the drafter's own in a plain run, but a member of `combine` may
 * not have proposed in the round, or its draft may not be the one verified: a family that keeps
 * anything about its own drafts compares them with the committed tokens, never assumes them. */
#ifndef DS_DRAFTER_H
#define DS_DRAFTER_H

#include <cJSON.h>

#include "request.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/target.h"
#include "../verify/logits.h"
#include "contract.h"
#include "subvocab.h"

typedef struct {
    int n, cap, V;
    int *tok;    /* [cap] */
    float *q;    /* [cap][V] processed draft distributions */
    float *conf; /* [cap] conditional survival estimates c_k (calibrated when the drafter has
                  * temperatures), or NULL: what schedulers read */
    float *conf_raw; /* [cap] the same before calibration (the trace's raw column), or NULL */
    /* optional (NULL: draft all gamma): asked by a drafter whose every draft costs a forward before it
     * spends one on draft k + 1, with k drafts and their conf made; 0 stops the block at k. A stop
     * after x_k leaves x_1..x_k to verification as they are, so any rule here is lossless (the
     * decision for position k + 1 reads only the drafts before it). */
    int (*more)(void *ctx, int k, const float *conf);
    void *more_ctx;
    /* a tree (tree != TREE_CHAIN, set by propose): node i = tok[i] is a child of node parent[i] (< i;
     * -1: of the anchor), siblings in the order verification tries them, every prefix of the nodes a
     * tree (the scheduler keeps a prefix); q[i] is the law node i was drawn from (tree_kind). The
     * loop sets tree = TREE_CHAIN before each propose. */
    int tree;
    int *parent; /* [cap] */
} draft_block;

int draft_block_init(draft_block *b, int cap, int V, int with_conf);
void draft_block_free(draft_block *b);

typedef struct drafter drafter;
typedef struct drafter_ops {
    const char *name;
    const char *help;
    int (*open)(drafter *, const cJSON *cfg, target *t);
    int (*begin)(drafter *, request *, const float *prompt_hidden);
    int (*propose)(drafter *, request *, int gamma, const sampling_params *, draft_block *);
    int (*commit)(drafter *, request *, int n_accepted, int next_token, const float *hidden);
    void (*end)(drafter *, request *);
    /* forget everything after the prompt, as if begin() had just run (sampling many continuations
     * of one prompt without re-reading it) */
    int (*rewind)(drafter *, request *);
    void (*close)(drafter *);
    /* how the losslessness gate opens this family on its tiny random target (V = 8..64, 2 layers,
     * dim 32): an untrained configuration whose drafts are stochastic. Every registered drafter
     * has one, so a new family is in the gate the moment it is registered. */
    const char *gate_config;
    const char *gate_config_real; /* on the real target, when it differs (NULL: gate_config) */
    /* optional (NULL: none): the target's raw logits [n][V] of rows it scored and their input tokens
     * in[0..n): at prefill the prompt's last observe_prompt rows (prefill = 1, after begin; in chunks,
     * in order; none when observe_prompt is 0), and after each round's
     * verification, before commit, the anchor's row and every verified draft's, rejected ones
     * included (what a drafter that learns from the target's own predictions reads: recycling) */
    int (*observe)(drafter *, request *, const int *in, const float *logits, int n, int prefill);
    /* optional: one line about the run so far for `run`'s summary (combine: how often each member's
     * draft was chosen) */
    void (*report)(const drafter *, char *buf, size_t n);
    /* trainable families: how `train` makes their checkpoints from a config's "drafter" object
     * (train_family.h); NULL: training-free */
    const struct train_family *train;
    /* how the gate opens the family's tree mode (NULL: it drafts chains only), and a second tree mode
     * where it has one (NULL: none) */
    const char *gate_config_tree;
    const char *gate_config_tree2;
} drafter_ops;

/* a tree's nodes at most (Token Recycling's static template has 80); a chain drafts 64 at most */
#define DRAFT_TREE_MAX 80

struct drafter {
    const drafter_ops *ops;
    void *impl;
    target *t;
    char fingerprint[64];
    char describe[512];      /* one line for reports: family and configuration (a separate LM's path and every lever fit) */
    int has_conf;
    int deterministic;       /* drafts are a function of the context (q = delta(x), no draws): training-free */
    int max_gamma;           /* drafts per round it was trained for (0 = any); run refuses more */
    int tree_nodes;          /* > 0: it proposes trees of up to this many nodes (its "tree_nodes") */
    int tree_sampled;        /* its trees' children are drawn at T > 0 (TREE_WOR), not a function of the context */
    int tree_counts;         /* its tree confidences are calibrated on its own trees' verified and accepted nodes
                              * (observe / commit counts): a union of several drafters' trees would misattribute them */
    int observe_prompt;      /* with ops->observe: the prompt's last rows it is handed at prefill (0: none) */
    int n_capture;           /* target layers it conditions on (0 = none) */
    int capture_layers[16];
    double t_seq_loop;       /* seconds propose spent in a left-to-right sampling loop (DSpark's head) */
    verify_fault fault;      /* FAULT_DRAFT_NO_TOP_P / _WRONG_Q only in the gate's negative controls */
};

/* Registry: NULL and a message listing the known names when the name is unknown. drafter_nth
 * walks the registry (NULL past the end). */
const drafter_ops *drafter_find(const char *name);
const drafter_ops *drafter_nth(int i);
/* the registered names, ", "-separated (trainable_only: those `train` makes) */
void drafter_list(char *buf, size_t cap, int trainable_only);
int drafter_open(drafter *d, const char *name, const cJSON *cfg, target *t);
void drafter_close(drafter *d);

/* Draft position k (0-based) of a chain from a head's logits z over the draft vocabulary sv (z has
 * sv->Vd entries; the whole vocabulary when sv is NULL or has no ids): q_k = the processed softmax
 * over those entries, 0 outside them (out->q row k, what verification reads), x_k drawn from it
 * (from the law without top-p under the FAULT_DRAFT_NO_TOP_P control), c_k = the top probability
 * of softmax(z) at temperature 1 (a function of the state, never of the drawn x_k), temperature-
 * scaled by the checkpoint's calibration ck->calib[k] (ck: NULL for none; conf_raw keeps it
 * unscaled). tmp [out->V] is scratch. */
/* the draft-side sampling controls (FAULT_DRAFT_NO_TOP_P, FAULT_DRAFT_NO_MIN_P): 1 with *out the settings
 * the mutant samples with (one filter dropped) while it reports the law under sp; 0 for any other fault */
int drafter_mutant_sp(const drafter *d, const sampling_params *sp, sampling_params *out);
int draft_from_logits(drafter *d, request *r, const float *z, const subvocab *sv, const sampling_params *sp,
                      const draft_contract *ck, int k, draft_block *out, lp_scratch *scr, float *tmp);

/* A probability p at draft position k (0-based) through the checkpoint's temperature calibration of
 * position k (its logit divided by ck->calib[k]; ck NULL or uncalibrated: p itself) */
double draft_conf_calibrated(double p, const draft_contract *ck, int k);

/* A drafter's serving precision for matrices it may hold quantized on the backend (dspark's
 * head_precision, Medusa's and MTP's block_precision): read `key` from r ("auto" when absent;
 * anything but auto, q8_0, q4_1, f32 is an error naming it), then type_of decides the matrices'
 * type: auto takes GGML_Q8_0 where the widths fit the 32-wide blocks (fits), GGML_F32 where they do
 * not; q8_0 or q4_1 where they do not fit is an error naming `widths`. */
int drafter_precision(jcfg *r, const char *key, const char **p);
int drafter_type_of(const char *p, const char *key, int fits, const char *widths, uint32_t *type);
const char *drafter_type_key(uint32_t type); /* the precision's name: "f32", "q8_0", "q4_1" */
/* w [rows][cols] fp32 quantized to type (GGML_Q8_0 or GGML_Q4_1) into *q, its blocks owned by the
 * caller (free(q->data) after the backend forgot them) */
int drafter_quantize(const float *w, int rows, int cols, uint32_t type, qmat *q, const char *what);

/* Vocabulary compatibility of a draft model with the target: same size, and where both carry a
 * tokenizer the same token texts (llama.cpp's rule from id 5 on) and special ids. */
int vocab_compatible(const target *t, const model *m, const tokenizer *tk, const char *what);

#endif
