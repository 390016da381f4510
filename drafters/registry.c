/* registry.c — drafter names to ops, the draft block, the vocabulary check shared by families
 * that bring their own model, and the draft vocabulary a trainable family starts from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/kernels/kernels_cpu.h"
#include "draft_vocab.h"
#include "drafter.h"
#include "train_family.h"

extern const drafter_ops drafter_vanilla, drafter_dflash, drafter_dspark_markov, drafter_dspark_rnn,
    drafter_ngram, drafter_suffix, drafter_medusa, drafter_mtp, drafter_eagle3, drafter_recycling, drafter_combine;

static const drafter_ops *const DRAFTERS[] = {
    &drafter_vanilla,
    &drafter_dflash,
    &drafter_dspark_markov,
    &drafter_dspark_rnn,
    &drafter_ngram,
    &drafter_suffix,
    &drafter_medusa,
    &drafter_mtp,
    &drafter_eagle3,
    &drafter_recycling,
    &drafter_combine,
};
#define N_DRAFTERS (int)(sizeof DRAFTERS / sizeof *DRAFTERS)

void drafter_list(char *buf, size_t cap, int trainable_only) {
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < N_DRAFTERS && w < cap; i++)
        if (DRAFTERS[i]->train || !trainable_only)
            w += (size_t)snprintf(buf + w, cap - w, "%s%s", w ? ", " : "", DRAFTERS[i]->name);
}

const drafter_ops *drafter_find(const char *name) {
    for (int i = 0; i < N_DRAFTERS; i++)
        if (strcmp(DRAFTERS[i]->name, name) == 0) return DRAFTERS[i];
    char known[512];
    drafter_list(known, sizeof known, 0);
    ds_error("unknown drafter '%s' (known: %s)", name, known);
    return NULL;
}

const drafter_ops *drafter_nth(int i) { return i >= 0 && i < N_DRAFTERS ? DRAFTERS[i] : NULL; }

int drafter_open(drafter *d, const char *name, const cJSON *cfg, target *t) {
    memset(d, 0, sizeof *d);
    d->ops = drafter_find(name);
    if (!d->ops) return -1;
    d->t = t;
    if (d->ops->open(d, cfg, t)) {
        ds_error_prefix("drafter '%s'", name);
        d->ops->close(d); /* frees whatever open made before failing */
        d->ops = NULL;
        return -1;
    }
    return 0;
}

void drafter_close(drafter *d) {
    if (d->ops && d->ops->close) d->ops->close(d);
    memset(d, 0, sizeof *d);
}

int draft_block_init(draft_block *b, int cap, int V, int with_conf) {
    memset(b, 0, sizeof *b);
    b->cap = cap;
    b->V = V;
    b->tok = ds_calloc((size_t)cap, sizeof(int), "draft block");
    b->parent = ds_calloc((size_t)cap, sizeof(int), "draft block");
    b->q = ds_calloc((size_t)cap * (size_t)V, sizeof(float), "draft block");
    b->conf = with_conf ? ds_calloc((size_t)cap, sizeof(float), "draft block") : NULL;
    b->conf_raw = with_conf ? ds_calloc((size_t)cap, sizeof(float), "draft block") : NULL;
    if (!b->tok || !b->parent || !b->q || (with_conf && (!b->conf || !b->conf_raw))) {
        draft_block_free(b);
        return -1;
    }
    return 0;
}

void draft_block_free(draft_block *b) {
    free(b->tok);
    free(b->parent);
    free(b->q);
    free(b->conf);
    free(b->conf_raw);
    memset(b, 0, sizeof *b);
}

int drafter_mutant_sp(const drafter *d, const sampling_params *sp, sampling_params *out) {
    *out = *sp;
    if (d->fault == FAULT_DRAFT_NO_TOP_P) out->top_p = 1.0f;
    else if (d->fault == FAULT_DRAFT_NO_MIN_P) out->min_p = 0;
    else return 0;
    return 1;
}

int draft_from_logits(drafter *d, request *r, const float *z, const subvocab *sv, const sampling_params *sp,
                      const draft_contract *ck, int k, draft_block *out, lp_scratch *scr, float *tmp) {
    int V = out->V, sub = sv && sv->vid, n = sub ? sv->Vd : V;
    float *qk = out->q + (size_t)k * V;
    /* the law over the head's own entries (into tmp with a draft vocabulary, then onto its ids) */
    DS_TRY(logits_process(z, n, sp, sub ? tmp : qk, scr));
    if (sub) subvocab_scatter(sv, tmp, qk);
    const float *law = sub ? tmp : qk;
    sampling_params nop;
    if (drafter_mutant_sp(d, sp, &nop)) { /* the controls: sample one law, report another */
        DS_TRY(logits_process(z, n, &nop, tmp, scr));
        law = tmp;
    }
    int x = sub ? rng_draw_ids(&r->rng_draft, law, sv->vid, n) : rng_draw(&r->rng_draft, law, V);
    DS_CHECK(x >= 0, "%s: no token to draw at position %d", d->ops->name, k + 1);
    out->tok[k] = x;
    /* The confidence must not read x: a scheduler that stops where c_k is low would then keep or drop
     * a sampled draft by its own value, and the verified tokens would no longer follow the target
     * (the gate rejected exactly that, c_k = p_head(x_k), under threshold and greedy). At T = 0 x
     * is the argmax, so the top probability and p(x) agree there. */
    int bad;
    float mx = qk_max_scan(z, n, &bad); /* z passed logits_process: finite or -inf */
    /* the kernels' SIMD exponential: a libm exp per entry took ~1 ms a position over 49,152 */
    double p = 1 / qk_exp_sum(z, mx, tmp, n);
    if (out->conf_raw) out->conf_raw[k] = (float)p;
    if (out->conf) out->conf[k] = (float)draft_conf_calibrated(p, ck, k);
    return 0;
fail:
    return -1;
}

double draft_conf_calibrated(double p, const draft_contract *ck, int k) {
    double lg = log(p + 1e-12) - log1p(-p + 1e-12);
    if (ck && k < ck->n_calib && ck->calib[k] > 0) lg /= ck->calib[k];
    return 1 / (1 + exp(-lg));
}

int train_family_vocab(const train_cache *d, const target *t, int Vd, int full_vocab, int **ids) {
    *ids = NULL;
    int V = t->m.cfg.vocab_size;
    if (full_vocab || Vd <= 0 || Vd >= V) return 0;
    draft_vocab_report vr;
    DS_TRYP(*ids = ds_malloc(sizeof(int) * (size_t)Vd, "draft vocabulary"));
    DS_TRY(draft_vocab_choose(d, &t->tk, Vd, *ids, &vr));
    fprintf(stderr, "train: draft vocabulary %d of %d tokens (%d pinned: special, end, single bytes) covers %.2f%% of "
                    "the cache's response tokens and %.2f%% of the target's top-%d mass\n",
            Vd, V, vr.pinned, 100 * vr.token_coverage, 100 * vr.mass_coverage, d->top_k);
    return 0;
fail:
    free(*ids);
    *ids = NULL;
    return -1;
}

int drafter_precision(jcfg *r, const char *key, const char **p) {
    *p = "auto";
    DS_TRY(jcfg_str(r, key, p));
    DS_CHECK(!strcmp(*p, "auto") || !strcmp(*p, "q8_0") || !strcmp(*p, "q4_1") || !strcmp(*p, "f32"),
             "drafter: %s '%s' is not one of auto, q8_0, q4_1, f32", key, *p);
    return 0;
fail:
    return -1;
}

int drafter_type_of(const char *p, const char *key, int fits, const char *widths, uint32_t *type) {
    DS_CHECK(fits || !strcmp(p, "auto") || !strcmp(p, "f32"), "drafter: %s %s needs %s", key, p, widths);
    *type = !fits || !strcmp(p, "f32") ? GGML_F32 : !strcmp(p, "q4_1") ? GGML_Q4_1 : GGML_Q8_0;
    return 0;
fail:
    return -1;
}

const char *drafter_type_key(uint32_t type) {
    return type == GGML_Q8_0 ? "q8_0" : type == GGML_Q4_1 ? "q4_1" : "f32";
}

int drafter_quantize(const float *w, int rows, int cols, uint32_t type, qmat *q, const char *what) {
    DS_CHECK((type == GGML_Q8_0 || type == GGML_Q4_1) && cols % 32 == 0, "%s: cannot quantize %d columns to %s", what,
             cols, ggml_type_name(type));
    size_t nb = (size_t)cols / 32, rb = nb * (type == GGML_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q8_0));
    void *data;
    DS_TRYP(data = ds_malloc(rb * (size_t)rows, what));
    if (type == GGML_Q4_1) quantize_q4_1(w, data, (int64_t)rows * cols);
    else quantize_q8_0(w, data, (int64_t)rows * cols);
    *q = (qmat){type, rows, cols, rb, data};
    return 0;
fail:
    return -1;
}

int vocab_compatible(const target *t, const model *m, const tokenizer *tk, const char *what) {
    int V = t->m.cfg.vocab_size;
    if (m->cfg.vocab_size != V) {
        ds_error("%s: vocabulary of %d tokens, the target has %d (a drafter must share the target's vocabulary)", what,
                 m->cfg.vocab_size, V);
        return -1;
    }
    if (!tk || !t->has_tokenizer) return 0; /* no tokenizer in the checkpoint: the size is all there is to check */
    const tokenizer *tt = &t->tk;
    for (int i = 0; i < V; i++) /* every id: a draft model whose first ids differ is another vocabulary */
        if (tk->text_len[i] != tt->text_len[i] || memcmp(tk->text[i], tt->text[i], (size_t)tt->text_len[i]) != 0) {
            ds_error("%s: vocabulary differs from the target's at token id %d ('%.40s' vs '%.40s')", what, i, tk->text[i],
                     tt->text[i]);
            return -1;
        }
    if (tk->eos != tt->eos || tk->bos != tt->bos) {
        ds_error("%s: special ids differ from the target's (bos %d/%d, eos %d/%d)", what, tk->bos, tt->bos, tk->eos, tt->eos);
        return -1;
    }
    return 0;
}
