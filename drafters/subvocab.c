/* subvocab.c — see subvocab.h. */
#include "subvocab.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/model/model.h"
#include "../runtime/text/tokenizer.h"

void subvocab_hash(const int *ids, int n, char out[20]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ (uint8_t)((unsigned)ids[i] >> (8 * b))) * 0x100000001b3ull;
    snprintf(out, 20, "%016llx", (unsigned long long)h);
}

void subvocab_free(subvocab *s) {
    free(s->vid), free(s->vmap), free(s->rows);
    memset(s, 0, sizeof *s);
}

void subvocab_full(subvocab *s, int V) {
    memset(s, 0, sizeof *s);
    s->V = s->Vd = V;
}

int subvocab_set(subvocab *s, int V, const int *ids, int Vd, const char *recorded_hash) {
    subvocab_full(s, V);
    if (!ids || Vd >= V) return 0;
    DS_CHECK(Vd >= 1, "a draft vocabulary needs at least one token (got %d)", Vd);
    subvocab_hash(ids, Vd, s->hash);
    DS_CHECK(!recorded_hash || !recorded_hash[0] || strcmp(s->hash, recorded_hash) == 0,
             "the draft vocabulary's ids hash to %s, but the checkpoint records vocab_hash %s", s->hash, recorded_hash);
    s->Vd = Vd;
    DS_TRYP(s->vid = ds_malloc(sizeof(int) * (size_t)Vd, "draft vocabulary"));
    DS_TRYP(s->vmap = ds_malloc(sizeof(int) * (size_t)V, "draft vocabulary"));
    for (int v = 0; v < V; v++) s->vmap[v] = -1;
    for (int j = 0; j < Vd; j++) {
        DS_CHECK(ids[j] >= 0 && ids[j] < V && s->vmap[ids[j]] < 0, "draft vocabulary id %d (row %d) is %s", ids[j], j,
                 ids[j] < 0 || ids[j] >= V ? "outside the vocabulary" : "repeated");
        s->vid[j] = ids[j];
        s->vmap[ids[j]] = j;
    }
    return 0;
fail:
    subvocab_free(s);
    return -1;
}

int subvocab_pinned(const tokenizer *tk, int v) {
    int ty = v < tk->n_vocab && tk->type ? tk->type[v] : TOK_NORMAL;
    return ty == TOK_CONTROL || ty == TOK_USER || ty == TOK_BYTE || tokenizer_is_eog(tk, v) || v == tk->eos ||
           v == tk->bos;
}

int subvocab_by_rank(subvocab *s, const tokenizer *tk, int V, int Vd) {
    int *ids = NULL, n = 0, rc = -1;
    char *in = NULL;
    subvocab_full(s, V);
    if (Vd >= V) return 0;
    DS_CHECK(Vd >= 1, "a draft vocabulary needs at least one token (got %d)", Vd);
    DS_TRYP(ids = ds_malloc(sizeof(int) * (size_t)V, "draft vocabulary"));
    DS_TRYP(in = ds_calloc((size_t)V, 1, "draft vocabulary"));
    int n_pin = 0;
    for (int pass = 0; pass < 2 && n < Vd; pass++) { /* pinned ones first, then the rest by id */
        for (int v = 0; v < V && (pass == 0 || n < Vd); v++) {
            int ty = v < tk->n_vocab && tk->type ? tk->type[v] : TOK_NORMAL;
            if (v >= tk->n_vocab || ty == TOK_UNUSED || in[v] || subvocab_pinned(tk, v) != (pass == 0)) continue;
            in[v] = 1, n++;
        }
        /* every pinned one must fit: a smaller vocabulary would be specials only, drafting nothing a text needs */
        if (pass == 0) n_pin = n;
        DS_CHECK(n_pin <= Vd, "draft_vocab %d is smaller than the %d tokens that must be in it (special, end, byte)", Vd,
                 n_pin);
    }
    DS_CHECK(n == Vd, "a draft vocabulary of %d tokens from a vocabulary of %d usable ones", Vd, n);
    n = 0;
    for (int v = 0; v < V; v++)
        if (in[v]) ids[n++] = v; /* ascending, as every draft vocabulary */
    rc = subvocab_set(s, V, ids, n, NULL);
fail:
    free(ids), free(in);
    return rc;
}

int subvocab_read(subvocab *s, const char *path, int V, int Vd, const char *recorded_hash) {
    st_file f;
    float *fv = NULL;
    int *iv = NULL, rc = -1;
    subvocab_full(s, V);
    if (Vd >= V) return 0;
    if (st_open(&f, path)) return -1;
    const st_tensor *t = st_find(&f, "vocab.ids");
    DS_CHECK(t && t->n_dims == 1 && t->shape[0] == Vd, "%s: no vocab.ids of %d entries (draft_vocab)", path, Vd);
    DS_TRYP(fv = ds_malloc(sizeof(float) * (size_t)Vd, "draft vocabulary"));
    DS_TRYP(iv = ds_malloc(sizeof(int) * (size_t)Vd, "draft vocabulary"));
    DS_TRY(st_to_f32(&f, t, fv));
    for (int i = 0; i < Vd; i++) {
        DS_CHECK(fv[i] == (float)(int)fv[i], "%s: vocab.ids[%d] = %g is not a token id", path, i, (double)fv[i]);
        iv[i] = (int)fv[i];
    }
    if (subvocab_set(s, V, iv, Vd, recorded_hash)) {
        ds_error_prefix("%s", path);
        goto fail;
    }
    rc = 0;
fail:
    st_close(&f);
    free(fv), free(iv);
    return rc;
}

int subvocab_check_file(const subvocab *s, const char *path) {
    if (!s->vid) return 0;
    subvocab cv;
    if (subvocab_read(&cv, path, s->V, s->Vd, s->hash)) return -1;
    subvocab_free(&cv);
    return 0;
}

float *subvocab_ids_f32(const subvocab *s) {
    float *v = ds_malloc(sizeof(float) * (size_t)s->Vd, "draft vocabulary");
    if (v)
        for (int j = 0; j < s->Vd; j++) v[j] = (float)(s->vid ? s->vid[j] : j);
    return v;
}

int subvocab_gather_head(subvocab *s, const qmat *o) {
    free(s->rows);
    s->rows = NULL;
    if (!s->vid) {
        s->head = *o;
        return 0;
    }
    DS_CHECK(o->rows == s->V, "the head has %d rows, the draft vocabulary is over %d", o->rows, s->V);
    DS_TRYP(s->rows = ds_malloc(o->row_bytes * (size_t)s->Vd, "draft head rows"));
    for (int j = 0; j < s->Vd; j++)
        memcpy(s->rows + o->row_bytes * (size_t)j, (const uint8_t *)o->data + o->row_bytes * (size_t)s->vid[j], o->row_bytes);
    s->head = (qmat){o->type, s->Vd, o->cols, o->row_bytes, s->rows};
    return 0;
fail:
    return -1;
}

int subvocab_requant_head(subvocab *s, uint32_t type) {
    const qmat o = s->head;
    float *row = NULL;
    uint8_t *rows = NULL;
    DS_CHECK((type == GGML_Q5_0 || type == GGML_Q4_1) && o.cols % 32 == 0, "draft head: cannot re-quantize %d columns to %s",
             o.cols, ggml_type_name(type));
    size_t rb = (size_t)o.cols / 32 * (type == GGML_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q4_1));
    DS_TRYP(row = ds_malloc(sizeof(float) * (size_t)o.cols, "draft head row"));
    DS_TRYP(rows = ds_malloc(rb * (size_t)o.rows, "draft head rows"));
    for (int r = 0; r < o.rows; r++) {
        qmat_row_f32(&o, r, row);
        if (type == GGML_Q5_0) quantize_q5_0(row, (block_q5_0 *)(rows + rb * (size_t)r), o.cols);
        else quantize_q4_1(row, (block_q4_1 *)(rows + rb * (size_t)r), o.cols);
    }
    free(row);
    free(s->rows); /* the gathered rows (if any) are replaced */
    s->rows = rows;
    s->head = (qmat){type, o.rows, o.cols, rb, rows};
    return 0;
fail:
    free(row), free(rows);
    return -1;
}

void subvocab_gather_f32(const subvocab *s, const float *E, int D, float *Eh) {
    for (int j = 0; j < s->Vd; j++)
        memcpy(Eh + (size_t)j * D, E + (size_t)(s->vid ? s->vid[j] : j) * D, sizeof(float) * (size_t)D);
}

void subvocab_scatter(const subvocab *s, const float *sub, float *full) {
    if (!s->vid) {
        memcpy(full, sub, sizeof(float) * (size_t)s->V);
        return;
    }
    memset(full, 0, sizeof(float) * (size_t)s->V);
    for (int j = 0; j < s->Vd; j++) full[s->vid[j]] = sub[j];
}

int subvocab_json_ids(const cJSON *arr, int *ids, int max, int *n) {
    *n = cJSON_GetArraySize(arr);
    DS_CHECK(cJSON_IsArray(arr) && *n >= 1 && *n <= max, "drafter: 'vocab_ids' must be an array of 1..%d token ids", max);
    for (int i = 0; i < *n; i++) {
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        DS_CHECK(jcfg_integral(e, 0, INT_MAX), "drafter: 'vocab_ids'[%d] is not an id", i);
        ids[i] = e->valueint;
    }
    return 0;
fail:
    return -1;
}

int subvocab_write_checkpoint(const subvocab *s, const char *dir, st_write_tensor *w, int nw, cJSON *config) {
    char p[4096], *txt = NULL;
    float *vids = NULL;
    int rc = -1;
    DS_TRY(ds_mkdirs(dir, "the checkpoint folder"));
    if (s->vid) { /* the draft vocabulary's ids (exact in fp32 below 2^24) */
        DS_TRYP(vids = subvocab_ids_f32(s));
        w[nw++] = (st_write_tensor){"vocab.ids", vids, 1, {s->Vd}};
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    const char *meta[4] = {"format", "pt", "dspark-bench", DSPARK_VERSION};
    DS_TRY(st_write(p, w, nw, ST_F32, meta, 2));
    txt = config ? cJSON_Print(config) : NULL;
    DS_CHECK(txt != NULL, "%s: cannot render config.json", dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    DS_TRY(ds_write_file_atomic(p, txt, strlen(txt)));
    rc = 0;
fail:
    cJSON_Delete(config);
    free(txt);
    free(vids);
    return rc;
}

int subvocab_frozen_f32(const subvocab *s, const model *target, float **Ein, float **E) {
    size_t D = (size_t)target->cfg.dim, n = (size_t)s->V * D;
    float *emb = NULL, *full = NULL;
    if (Ein) {
        DS_TRYP(emb = ds_malloc(sizeof(float) * n, "embedding copy"));
        qmat_to_f32(&target->tok_embd, emb);
    }
    if (emb && target->cfg.tied) full = emb; /* the head is the embedding */
    else {
        DS_TRYP(full = ds_malloc(sizeof(float) * n, "head copy"));
        qmat_to_f32(&target->output, full);
    }
    *E = full;
    if (s->vid) { /* the head's draft rows only */
        DS_TRYP(*E = ds_malloc(sizeof(float) * (size_t)s->Vd * D, "head copy"));
        subvocab_gather_f32(s, full, (int)D, *E);
        if (full != emb) free(full);
    }
    if (Ein) *Ein = emb;
    return 0;
fail:
    if (full != emb) free(full);
    free(emb);
    return -1;
}

cJSON *subvocab_read_config(const char *dir, const char *kind) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *j = ds_read_json(p);
    if (!j) return NULL;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
    if (cJSON_IsString(k) && strcmp(k->valuestring, kind) == 0) return j;
    ds_error("%s: not a %s checkpoint (its kind is '%s')", p, kind, cJSON_IsString(k) ? k->valuestring : "?");
    cJSON_Delete(j);
    return NULL;
}

int subvocab_read_checkpoint(const subvocab *s, const char *dir, const st_write_tensor *w, int nw) {
    char p[4096];
    st_file f;
    uint8_t *taken = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (st_open(&f, p)) return -1;
    DS_TRYP(taken = ds_calloc((size_t)f.n_tensors + 1, 1, "tensor flags"));
    for (int i = 0; i < nw; i++) {
        const st_tensor *t = st_find(&f, w[i].name);
        DS_CHECK(t != NULL, "%s: missing tensor '%s'", p, w[i].name);
        int ok = t->n_dims == w[i].n_dims;
        for (int d = 0; ok && d < w[i].n_dims; d++) ok = t->shape[d] == w[i].shape[d];
        DS_CHECK(ok, "%s: tensor '%s' has the wrong shape", p, w[i].name);
        DS_TRY(st_to_f32(&f, t, (float *)w[i].data)); /* the model's own parameters, written in place */
        taken[t - f.tensors] = 1;
    }
    DS_TRY(st_check_taken(&f, taken, "vocab.ids")); /* subvocab_check_file reads that one */
    free(taken);
    st_close(&f);
    return subvocab_check_file(s, p); /* resuming: the checkpoint drafts over the same vocabulary */
fail:
    free(taken);
    st_close(&f);
    return -1;
}
