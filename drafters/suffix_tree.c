/* suffix_tree.c — depth-capped suffix trie with counts (see suffix_tree.h). */
#include "suffix_tree.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

#define EMPTY UINT64_MAX

static uint64_t hkey(int node, int tok) { return (uint64_t)(uint32_t)node << 32 | (uint32_t)tok; }
static size_t hslot(const suffix_tree *t, uint64_t k) {
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ull;
    k ^= k >> 29;
    return (size_t)(k & (uint64_t)(t->hcap - 1));
}

static int hget(const suffix_tree *t, int node, int tok) {
    uint64_t k = hkey(node, tok);
    for (size_t i = hslot(t, k);; i = (i + 1) & (size_t)(t->hcap - 1)) {
        if (t->hkey[i] == k) return t->hval[i];
        if (t->hkey[i] == EMPTY) return -1;
    }
}

static void hput(suffix_tree *t, int node, int tok, int child) {
    uint64_t k = hkey(node, tok);
    size_t i = hslot(t, k);
    while (t->hkey[i] != EMPTY) i = (i + 1) & (size_t)(t->hcap - 1);
    t->hkey[i] = k;
    t->hval[i] = child;
}

/* linear probing: delete by shifting later entries of the cluster back */
static void hdel(suffix_tree *t, int node, int tok) {
    uint64_t k = hkey(node, tok);
    size_t m = (size_t)(t->hcap - 1), i = hslot(t, k);
    while (t->hkey[i] != k) {
        if (t->hkey[i] == EMPTY) return;
        i = (i + 1) & m;
    }
    for (size_t j = (i + 1) & m;; j = (j + 1) & m) {
        if (t->hkey[j] == EMPTY) break;
        size_t h = hslot(t, t->hkey[j]);
        /* entry j may move to i when its home slot h is not in (i, j] (cyclically) */
        if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
            t->hkey[i] = t->hkey[j];
            t->hval[i] = t->hval[j];
            i = j;
        }
    }
    t->hkey[i] = EMPTY;
}

int suffix_tree_init(suffix_tree *t, int max_depth, int max_nodes) {
    memset(t, 0, sizeof *t);
    t->max_depth = max_depth;
    t->max_nodes = max_nodes;
    t->hcap = 16;
    while (t->hcap < 2 * max_nodes) t->hcap *= 2;
    size_t n = (size_t)max_nodes;
    int **arr[] = {&t->tok, &t->parent, &t->depth, &t->count, &t->cont, &t->child, &t->sib, &t->best};
    for (int i = 0; i < 8; i++)
        if (!(*arr[i] = ds_malloc(sizeof(int) * n, "suffix tree"))) goto fail;
    DS_TRYP(t->hkey = ds_malloc(sizeof(uint64_t) * (size_t)t->hcap, "suffix tree"));
    DS_TRYP(t->hval = ds_malloc(sizeof(int) * (size_t)t->hcap, "suffix tree"));
    DS_TRYP(t->active = ds_malloc(sizeof(int) * (size_t)(max_depth + 2), "suffix tree"));
    suffix_tree_clear(t);
    return 0;
fail:
    suffix_tree_free(t);
    return -1;
}

void suffix_tree_free(suffix_tree *t) {
    free(t->tok), free(t->parent), free(t->depth), free(t->count), free(t->cont), free(t->child), free(t->sib);
    free(t->best), free(t->hkey), free(t->hval), free(t->active);
    for (int i = 0; i < t->n_seq; i++) free(t->seq[(t->seq_head + i) % t->seq_cap]);
    free(t->seq), free(t->seq_len);
    memset(t, 0, sizeof *t);
}

void suffix_tree_clear(suffix_tree *t) {
    for (int i = 0; i < t->hcap; i++) t->hkey[i] = EMPTY;
    t->tok[0] = -1, t->parent[0] = -1, t->depth[0] = 0, t->count[0] = 0, t->cont[0] = 0;
    t->child[0] = -1, t->sib[0] = -1, t->best[0] = -1;
    t->n_used = 1, t->n_live = 1, t->free_head = -1;
    for (int i = 0; i < t->n_seq; i++) free(t->seq[(t->seq_head + i) % t->seq_cap]);
    t->n_seq = t->seq_head = 0;
    t->n_active = 0;
}

static int new_node(suffix_tree *t, int parent, int tok) {
    int c;
    if (t->free_head >= 0) c = t->free_head, t->free_head = t->sib[c];
    else if (t->n_used < t->max_nodes) c = t->n_used++;
    else return -1;
    t->tok[c] = tok, t->parent[c] = parent, t->depth[c] = t->depth[parent] + 1;
    t->count[c] = 0, t->cont[c] = 0, t->child[c] = -1, t->best[c] = -1;
    t->sib[c] = t->child[parent];
    t->child[parent] = c;
    hput(t, parent, tok, c);
    t->n_live++;
    return c;
}

int suffix_tree_best(suffix_tree *t, int node) {
    if (t->best[node] == -2) { /* stale after an eviction: rescan the children */
        int b = -1;
        for (int c = t->child[node]; c >= 0; c = t->sib[c])
            if (b < 0 || t->count[c] >= t->count[b]) b = c; /* ties: the oldest (the chain is newest first) */
        t->best[node] = b;
    }
    return t->best[node];
}

/* remove the oldest sequence: replay its suffixes down, then free the nodes that reached zero */
static void evict_oldest(suffix_tree *t) {
    int *x = t->seq[t->seq_head], n = t->seq_len[t->seq_head];
    int *act = t->active, na = 0, D = t->max_depth;
    int *dead = ds_malloc(sizeof(int) * ((size_t)n * (size_t)D + 1), "suffix tree eviction"), nd = 0;
    /* the replay uses its own active list: save the appending sequence's */
    int *saved = ds_malloc(sizeof(int) * (size_t)(D + 2), "suffix tree eviction"), ns = t->n_active;
    if (saved) memcpy(saved, act, sizeof(int) * (size_t)ns);
    for (int i = 0; i < n && dead && saved; i++) {
        int m = 0;
        act[na++] = 0;
        for (int a = 0; a < na; a++) {
            int p = act[a], c = hget(t, p, x[i]);
            if (c < 0) continue; /* cannot happen: the sequence's paths are in the tree */
            t->count[c]--, t->cont[p]--;
            if (t->best[p] == c) t->best[p] = -2;
            if (t->count[c] == 0) dead[nd++] = c;
            if (t->depth[c] < D) act[m++] = c;
        }
        na = m;
    }
    /* unlink each dead node from its parent's chain and free it, deepest first: a parent that died
     * too is still intact while its children leave it */
    for (int dep = D; dep >= 1; dep--)
        for (int i = 0; i < nd; i++) {
        int c = dead[i], p = t->parent[c];
        if (t->depth[c] != dep) continue;
        hdel(t, p, t->tok[c]);
        if (t->child[p] == c) t->child[p] = t->sib[c];
        else
            for (int s = t->child[p]; s >= 0; s = t->sib[s])
                if (t->sib[s] == c) {
                    t->sib[s] = t->sib[c];
                    break;
                }
        if (t->best[p] == c) t->best[p] = -2;
        t->sib[c] = t->free_head;
        t->free_head = c;
        t->n_live--;
        }
    if (saved) memcpy(act, saved, sizeof(int) * (size_t)ns);
    t->n_active = ns;
    free(saved);
    free(dead);
    free(x);
    t->seq_head = (t->seq_head + 1) % t->seq_cap;
    t->n_seq--;
}

int suffix_tree_begin(suffix_tree *t, int keep_tokens) {
    t->n_active = 0;
    t->keeping = keep_tokens;
    if (!keep_tokens) return 0;
    if (t->n_seq == t->seq_cap) { /* grow the ring, oldest first */
        int cap = t->seq_cap ? 2 * t->seq_cap : 64;
        int **s = ds_malloc(sizeof(int *) * (size_t)cap, "suffix tree"), *l = ds_malloc(sizeof(int) * (size_t)cap, "suffix tree");
        if (!s || !l) {
            free(s), free(l);
            return -1;
        }
        for (int i = 0; i < t->n_seq; i++) s[i] = t->seq[(t->seq_head + i) % t->seq_cap], l[i] = t->seq_len[(t->seq_head + i) % t->seq_cap];
        free(t->seq), free(t->seq_len);
        t->seq = s, t->seq_len = l, t->seq_cap = cap, t->seq_head = 0;
    }
    int k = (t->seq_head + t->n_seq) % t->seq_cap;
    t->seq[k] = NULL;
    t->seq_len[k] = 0;
    t->n_seq++;
    return 0;
}

int suffix_tree_append(suffix_tree *t, const int *x, int n) {
    int D = t->max_depth;
    int keep = t->keeping; /* the newest sequence records its tokens */
    int k = keep ? (t->seq_head + t->n_seq - 1) % t->seq_cap : -1;
    if (keep) {
        int *s = realloc(t->seq[k], sizeof(int) * (size_t)(t->seq_len[k] + n + 1));
        DS_CHECK(s != NULL, "out of memory (suffix tree)");
        t->seq[k] = s;
    }
    for (int i = 0; i < n; i++) {
        /* room for up to D + 1 new nodes: evict older sequences (never the one being appended) */
        while (t->max_nodes - t->n_live < D + 1 && t->n_seq > (keep ? 1 : 0)) evict_oldest(t);
        DS_CHECK(t->max_nodes - t->n_live >= D + 1, "suffix tree: %d nodes are not enough for one sequence (max_nodes)",
                 t->max_nodes);
        int *act = t->active, na = t->n_active, m = 0;
        act[na++] = 0; /* the empty suffix */
        for (int a = 0; a < na; a++) {
            int p = act[a], c = hget(t, p, x[i]);
            if (c < 0) DS_CHECK((c = new_node(t, p, x[i])) >= 0, "suffix tree: out of nodes (max_nodes %d)", t->max_nodes);
            t->count[c]++, t->cont[p]++;
            int b = t->best[p]; /* -2: stale, rescanned when asked */
            if (b == -1 || (b >= 0 && t->count[c] > t->count[b])) t->best[p] = c;
            if (t->depth[c] < D) act[m++] = c;
        }
        t->n_active = m;
        if (keep) t->seq[k][t->seq_len[k]++] = x[i];
    }
    return 0;
fail:
    return -1;
}

int suffix_tree_find(const suffix_tree *t, const int *x, int n) {
    int v = 0;
    for (int i = 0; i < n && v >= 0; i++) v = hget(t, v, x[i]);
    return v;
}

int suffix_tree_match(const suffix_tree *t, const int *x, int n, int *len) {
    /* a string with a continuation has every suffix with one too: grow the match until it fails */
    int best = 0, L = 1;
    *len = 0;
    for (; L <= n && L < t->max_depth; L++) {
        int v = suffix_tree_find(t, x + n - L, L);
        if (v < 0 || t->cont[v] == 0) break;
        best = v, *len = L;
    }
    return best;
}
