/* tree_build.h — a best-first draft tree (DDTree's expansion; EAGLE-2's by path confidence), shared by
 * the tree modes of the drafters that score a node's children from a row: Medusa's heads and DFlash's
 * positions (one row a depth, the same for every parent), DSpark-Markov's (a row a parent: its token
 * moves the Markov head).
 *
 * A candidate is (parent node, rank) scored by its path probability, the product of its ancestors'
 * and its own row probability; the best candidate becomes the next node, then its next sibling
 * (rank + 1) and its first child (rank 0 of its own row) become candidates, until the budget. Nodes
 * come out parents first and siblings by rank, so every prefix is a tree, and a row lists distinct
 * tokens, so siblings never repeat. The children depend on the context alone (TREE_TOPK: q unused).
 * Each node's confidence is its path probability. */
#ifndef DS_TREE_BUILD_H
#define DS_TREE_BUILD_H

#include "../runtime/base/jcfg.h"
#include "drafter.h"

#define TREE_MAX_K 16 /* children a node at most */

/* The children row of a node: node -1 is the anchor (depth 0, its children at depth 1), else node
 * holds tok at depth >= 1. Up to K distinct ids and probabilities, descending, into ids / p; returns
 * how many (0: no children, e.g. past the drafter's depth or after an end-of-generation token), -1 on
 * error. */
typedef int (*tree_row_fn)(void *ctx, int node, int tok, int depth, int K, int *ids, float *p);

/* a drafter in tree mode: d->tree_nodes set, ":treeNxW" on its fingerprint and "what" (e.g. "a best-first
 * tree") with its size on its describe line */
void tree_mark(drafter *d, const char *what, int nodes, int width);

/* A tree drafter's node confidences for the scheduler: raw path scores (count ratios, recorded
 * probabilities) are overconfident, so they are scaled by the accepted nodes over the summed raw
 * confidence of the verified ones, counted over the run's finished requests and this request's finished
 * rounds (a function of the past alone: the gate's replays stay deterministic). */
typedef struct {
    double conf, acc; /* the verified nodes' raw confidences summed, the accepted nodes */
} tree_calib;
static inline double tree_calib_scale(const tree_calib *run, const tree_calib *req) {
    return (run->acc + req->acc + 1) / (run->conf + req->conf + 1);
}

/* A round's judgement for tree_calib: of the verified nodes 0..nv-1 (parents par, -1 the anchor; tokens
 * tok; raw confidences row, < 0 for a node not judged this way), each whose parent was reached (the
 * anchor, or a node on the accepted path, which follows the committed tokens com[0..n_acc) through the
 * tree) adds its row to c->conf and, when it is on the path, 1 to c->acc. Nodes the round did not verify
 * or whose parent was rejected say nothing about their confidence. */
void tree_calib_judge(tree_calib *c, const int *par, const int *tok, const float *row, int nv, const int *com,
                      int n_acc);

/* A best-first tree's config keys (Medusa, MTP / EAGLE-3, DFlash, DSpark): "tree_nodes" (0 = a chain,
 * up to 64) and "tree_width" (children a node, 1..TREE_MAX_K, default 4) */
int tree_read_opts(jcfg *r, int *nodes, int *width);

/* Up to budget nodes (<= out->cap, <= 64) of K children at most each into out (tok, parent, conf and
 * conf_raw when present, n, tree = TREE_TOPK). pace: a node's row costs the drafter a forward (a head
 * step after its token), so out->more, when set, is asked before each expansion (k = the node's depth,
 * its path's row probabilities) and a refusal ends the expansions: the tree is filled from the rows made. */
int tree_best_first(tree_row_fn row, void *ctx, int K, int budget, int pace, draft_block *out);

/* The K largest entries of softmax(z) over n logits, descending (ties: the lower entry), as target ids
 * (vid[j] for entry j; NULL: j itself) and their full-softmax probabilities; tmp holds n floats.
 * Returns how many (min(K, entries of finite logit)). */
int tree_topk_softmax(const float *z, int n, const int *vid, int K, int *ids, float *p, float *tmp);

#endif
