/* suffix_tree.h — a depth-capped suffix trie with occurrence counts over one or more token
 * sequences (SuffixDecoding's structure without path compression), for the suffix drafter.
 *
 * Every suffix of every appended sequence is a path from the root, cut at depth max_depth; a
 * node's count is how many times its string occurs, cont the sum of its children's counts (the
 * occurrences that have a next token). Appending a token touches at most max_depth + 1 nodes (the
 * suffixes still shorter than the cap), so an update costs O(max_depth) hash operations whatever
 * the length of the text. Children are found through one open-addressing table keyed by (node,
 * token) and listed in a sibling chain; each node remembers its most frequent child.
 *
 * Memory is bounded by max_nodes. Sequences are numbered as they are appended; when an append
 * would not fit, the oldest sequences are removed first (FIFO, their counts replayed down and
 * nodes that reach zero freed); the sequence being appended is never evicted. */
#ifndef DS_SUFFIX_TREE_H
#define DS_SUFFIX_TREE_H

#include <stdint.h>

typedef struct {
    int max_depth, max_nodes;
    /* nodes; node 0 is the root */
    int *tok, *parent, *depth, *count, *cont, *child, *sib, *best;
    int n_used, free_head;    /* high-water mark, free list (through sib) */
    int n_live;
    /* (node, token) -> child */
    uint64_t *hkey;
    int *hval;
    int hcap;
    /* the sequences, for FIFO eviction: tokens of each, oldest first */
    int **seq, *seq_len, n_seq, seq_cap, seq_head;
    int keeping;              /* the sequence being appended is recorded (it can be evicted later) */
    /* the suffixes of the sequence being appended that are shorter than max_depth */
    int *active, n_active;
} suffix_tree;

int suffix_tree_init(suffix_tree *t, int max_depth, int max_nodes);
void suffix_tree_free(suffix_tree *t);
void suffix_tree_clear(suffix_tree *t);
/* start a new sequence (keep_tokens: remember it for eviction) and append n tokens to it; 0, or
 * -1 when even after evicting every older sequence it does not fit */
int suffix_tree_begin(suffix_tree *t, int keep_tokens);
int suffix_tree_append(suffix_tree *t, const int *x, int n);
/* the node of x[0..n), or -1 */
int suffix_tree_find(const suffix_tree *t, const int *x, int n);
/* the longest suffix of x[0..n) (length <= max_depth - 1) that has a continuation in the tree:
 * its node, and its length in *len (0 and the root when none) */
int suffix_tree_match(const suffix_tree *t, const int *x, int n, int *len);
/* the most frequent child of a node, or -1. Ties: the child that reached the count first (kept as
 * counts grow); after an eviction made the node rescan its children, the oldest */
int suffix_tree_best(suffix_tree *t, int node);

#endif
