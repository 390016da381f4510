#include "draft_vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "subvocab.h"

typedef struct {
    long n;
    int id;
} freq;

static int by_count(const void *a, const void *b) {
    const freq *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? 1 : -1;
    return x->id - y->id;
}

int draft_vocab_choose(const train_cache *d, const tokenizer *tk, int Vd, int *ids, draft_vocab_report *rep) {
    int V = tk->n_vocab, rc = -1, n_pin = 0;
    freq *f = NULL;
    unsigned char *in = NULL;
    memset(rep, 0, sizeof *rep);
    DS_CHECK(Vd >= 1 && Vd <= V, "draft_vocab %d outside 1..%d", Vd, V);
    DS_TRYP(f = ds_calloc((size_t)V, sizeof *f, "draft vocabulary"));
    DS_TRYP(in = ds_calloc((size_t)V, 1, "draft vocabulary"));
    long total = 0;
    for (int i = 0; i < d->n_seq; i++) {
        const int *t = traindata_tokens(d, i);
        for (int p = d->n_prompt[i]; p < d->len[i]; p++) f[t[p]].n++, total++;
    }
    for (int v = 0; v < V; v++) f[v].id = v;
    /* pinned: what any output may need even if the cache never shows it */
    char buf[64];
    for (int v = 0; v < V; v++) {
        int pin = subvocab_pinned(tk, v);
        if (!pin) pin = tokenizer_piece(tk, v, 0, buf, sizeof buf) == 1; /* a single byte (byte-level BPE alphabet) */
        if (pin) in[v] = 1, n_pin++;
    }
    DS_CHECK(n_pin <= Vd, "draft_vocab %d is smaller than the %d tokens that must be in it (special, end, single bytes)",
             Vd, n_pin);
    qsort(f, (size_t)V, sizeof *f, by_count);
    for (int k = 0, have = n_pin; k < V && have < Vd; k++)
        if (!in[f[k].id]) in[f[k].id] = 1, have++;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (in[v]) ids[n++] = v;
    long covered = 0;
    double mass = 0;
    long rows = 0;
    for (int i = 0; i < d->n_seq; i++) {
        const int *t = traindata_tokens(d, i);
        for (int p = d->n_prompt[i]; p < d->len[i]; p++) covered += in[t[p]];
        const int32_t *id = traindata_topk_id(d, i);
        const float *lp = traindata_topk_lp(d, i);
        for (int r = 0; r < d->len[i] - d->n_prompt[i]; r++, rows++) {
            double all = 0, inside = 0;
            for (int k = 0; k < d->top_k; k++) {
                double p = exp((double)lp[(size_t)r * d->top_k + k]);
                all += p;
                if (in[id[(size_t)r * d->top_k + k]]) inside += p;
            }
            mass += all > 0 ? inside / all : 1;
        }
    }
    rep->pinned = n_pin;
    rep->token_coverage = total ? (double)covered / total : 1;
    rep->mass_coverage = rows ? mass / rows : 1;
    rc = 0;
fail:
    free(f), free(in);
    return rc;
}
