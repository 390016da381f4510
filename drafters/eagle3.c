/* eagle3.c — EAGLE-3 (Li et al. 2025, drafters-reference §3) as a drafter: the chained module of
 * mtp.h reading the fusion of a low, a middle and a high layer of the target instead of its last,
 *     g_i = F [h_i^low; h_i^mid; h_i^high]     (F: [dim][3 dim], started as [0 0 I])
 *     x_i = P [RMSNorm_h(g_i); RMSNorm_e(Emb(t_{i+1}))],  y_i = Block(x_i),  z_i = E RMSNorm_f(y_i)
 * at the target's positions, and its own y at the speculative ones (the draft after the anchor reads
 * the state it just made, as in EAGLE). Trained unrolled to `depth` positions over the data's tokens
 * with its own states (EAGLE-3's training-time test), CE + L1 against the cached top-K law; no
 * feature-regression loss (EAGLE-3 dropped it). It drafts a chain, each token drawn from its
 * processed softmax(z) with that exact q reported, over the target's frozen head (or its draft-
 * vocabulary rows; EAGLE-3 trains its own small-vocabulary head, this one shares the target's).
 * What differs from SafeAILab's layer: the decoder's input is the projection P of [norm g; norm e]
 * (EAGLE-1's and MTP's wiring) rather than q/k/v read from the 2 dim concatenation with g as the
 * residual; one layer, its own KV cache, rolled back on rejection as mtp's. */
#include "mtp.h"

static int eagle3_open(drafter *d, const cJSON *cfg, target *t) { return mtp_drafter_open(d, cfg, t, "eagle3"); }

const drafter_ops drafter_eagle3 = {
    "eagle3",
    "EAGLE-3: one decoder layer on the fusion of the target's low, middle and high states, chained on its own "
    "states: {\"checkpoint\": DIR, \"block_precision\": \"auto\" | \"q8_0\" | \"q4_1\" | \"f32\", \"tree_nodes\": 0, \"tree_width\": 4} "
    "(tree_nodes N > 0: EAGLE-2's dynamic tree of N nodes, verified exactly; untrained: {\"depth\": 3, \"seed\": 1, "
    "\"init_layer\": -1})",
    eagle3_open, mtp_drafter_begin, mtp_drafter_propose, mtp_drafter_commit, mtp_drafter_end, mtp_drafter_rewind,
    mtp_drafter_close,
    /* the gate's untrained module as mtp's: the block copied from the tiny target's last layer, P
     * random, F = [0 I] over its two layers; over a scrambled 6-of-8 draft vocabulary on the tiny
     * target, the whole one on the real target */
    "{\"depth\": 3, \"vocab_ids\": [6, 1, 4, 0, 7, 2]}",
    "{\"depth\": 3}",
    .train = &mtp_train_family,
    .gate_config_tree = "{\"depth\": 3, \"vocab_ids\": [6, 1, 4, 0, 7, 2], \"tree_nodes\": 6, \"tree_width\": 2}",
};
