#include "traindata.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../engine/decode.h"
#include "../runtime/common.h"
#include "../runtime/quant.h"
#include "datasets.h"
#include "../runtime/jcfg.h"

/* ------------------------------------------------------------------------------ the index */

typedef struct {
    int n_seq;
    long n_tok;
    int n_tap, dim, taps[8];
    int *len, *n_prompt, *source;
    int cap;
    char fp[64];
} idx_t;

static void idx_free(idx_t *x) {
    free(x->len), free(x->n_prompt), free(x->source);
    memset(x, 0, sizeof *x);
}

static int idx_read(idx_t *x, const char *dir) {
    memset(x, 0, sizeof *x);
    char p[4096];
    cJSON *j = NULL;
    snprintf(p, sizeof p, "%s/index.json", dir);
    struct stat st;
    if (stat(p, &st) != 0) return 1; /* a fresh cache */
    DS_TRYP(j = ds_read_json(p));
    const cJSON *len = cJSON_GetObjectItem(j, "len"), *np = cJSON_GetObjectItem(j, "n_prompt"),
                *src = cJSON_GetObjectItem(j, "source"), *taps = cJSON_GetObjectItem(j, "taps");
    DS_CHECK(cJSON_IsArray(len) && cJSON_IsArray(np) && cJSON_IsArray(src) && cJSON_IsArray(taps) &&
                 cJSON_GetArraySize(len) == cJSON_GetArraySize(np) && cJSON_GetArraySize(len) == cJSON_GetArraySize(src),
             "%s: malformed index", p);
    x->n_seq = cJSON_GetArraySize(len);
    x->cap = x->n_seq + 1;
    DS_TRYP(x->len = ds_malloc(sizeof(int) * (size_t)x->cap, "index"));
    DS_TRYP(x->n_prompt = ds_malloc(sizeof(int) * (size_t)x->cap, "index"));
    DS_TRYP(x->source = ds_malloc(sizeof(int) * (size_t)x->cap, "index"));
    for (int i = 0; i < x->n_seq; i++) {
        x->len[i] = cJSON_GetArrayItem(len, i)->valueint;
        x->n_prompt[i] = cJSON_GetArrayItem(np, i)->valueint;
        x->source[i] = cJSON_GetArrayItem(src, i)->valueint;
        DS_CHECK(x->len[i] > 1 && x->n_prompt[i] >= 1 && x->n_prompt[i] < x->len[i], "%s: sequence %d is malformed", p, i);
        x->n_tok += x->len[i];
    }
    x->n_tap = cJSON_GetArraySize(taps);
    DS_CHECK(x->n_tap >= 1 && x->n_tap <= 8, "%s: bad taps", p);
    for (int i = 0; i < x->n_tap; i++) x->taps[i] = cJSON_GetArrayItem(taps, i)->valueint;
    const cJSON *dim = cJSON_GetObjectItem(j, "dim"), *fp = cJSON_GetObjectItem(j, "target_fingerprint");
    DS_CHECK(cJSON_IsNumber(dim) && cJSON_IsString(fp), "%s: missing dim or target_fingerprint", p);
    x->dim = dim->valueint;
    snprintf(x->fp, sizeof x->fp, "%s", fp->valuestring);
    cJSON_Delete(j);
    return 0;
fail:
    cJSON_Delete(j);
    idx_free(x);
    return -1;
}

static int idx_write(const idx_t *x, const char *dir) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "target_fingerprint", x->fp);
    cJSON_AddNumberToObject(j, "dim", x->dim);
    cJSON_AddNumberToObject(j, "n_tokens", (double)x->n_tok);
    cJSON *t = cJSON_AddArrayToObject(j, "taps");
    for (int i = 0; i < x->n_tap; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(x->taps[i]));
    cJSON *len = cJSON_AddArrayToObject(j, "len"), *np = cJSON_AddArrayToObject(j, "n_prompt"),
          *src = cJSON_AddArrayToObject(j, "source");
    for (int i = 0; i < x->n_seq; i++) {
        cJSON_AddItemToArray(len, cJSON_CreateNumber(x->len[i]));
        cJSON_AddItemToArray(np, cJSON_CreateNumber(x->n_prompt[i]));
        cJSON_AddItemToArray(src, cJSON_CreateNumber(x->source[i]));
    }
    char *txt = cJSON_PrintUnformatted(j), p[4096];
    cJSON_Delete(j);
    snprintf(p, sizeof p, "%s/index.json", dir);
    int rc = txt ? ds_write_file_atomic(p, txt, strlen(txt)) : -1;
    free(txt);
    if (rc) ds_error_prefix("cannot write the cache index");
    return rc;
}

/* ------------------------------------------------------------------------------- building */

static int append_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "ab");
    if (!f) {
        ds_error("%s: cannot open for appending: %s", path, strerror(errno));
        return -1;
    }
    int ok = fwrite(p, 1, n, f) == n, err = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) ds_error("%s: write failed: %s", path, err ? strerror(err) : "short write");
    return ok ? 0 : -1;
}

/* bring the data files back to what the index records (a build killed mid-append) */
static int trim_files(const char *dir, const idx_t *x) {
    const char *names[3] = {"tokens.bin", "taps.bin", "final.bin"};
    off_t want[3] = {(off_t)(x->n_tok * 4), (off_t)(x->n_tok * x->n_tap * x->dim * 2), (off_t)(x->n_tok * x->dim * 4)};
    for (int i = 0; i < 3; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(p, &st) != 0) {
            if (want[i] == 0) continue;
            ds_error("%s: missing (the index records %lld bytes)", p, (long long)want[i]);
            return -1;
        }
        if (st.st_size < want[i]) {
            ds_error("%s: %lld bytes, the index records %lld (the cache is damaged; delete it)", p, (long long)st.st_size,
                     (long long)want[i]);
            return -1;
        }
        if (st.st_size > want[i] && truncate(p, want[i]) != 0) {
            ds_error("%s: cannot truncate: %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int traindata_append(target *t, const char *dir, const int *tokens, int n, int n_prompt, int source, int n_tap,
                     const int *taps) {
    idx_t x;
    if (ds_mkdirs(dir, "the data cache folder")) return -1;
    int rc = idx_read(&x, dir), ret = -1, D = t->m.cfg.dim;
    float *cap = NULL, *fin = NULL;
    uint16_t *bf = NULL;
    kv_cache *kv = NULL;
    if (rc < 0) return -1;
    if (rc == 1) {
        memset(&x, 0, sizeof x);
        x.n_tap = n_tap;
        memcpy(x.taps, taps, sizeof(int) * (size_t)n_tap);
        x.dim = D;
        snprintf(x.fp, sizeof x.fp, "%s", t->m.fingerprint);
    }
    DS_CHECK(strcmp(x.fp, t->m.fingerprint) == 0 && x.dim == D && x.n_tap == n_tap &&
                 memcmp(x.taps, taps, sizeof(int) * (size_t)n_tap) == 0,
             "%s: the cache was built for another target or other tap layers", dir);
    DS_TRY(trim_files(dir, &x));
    /* the whole sequence in one forward, capturing the taps and the final normed state */
    DS_TRYP(cap = ds_malloc(sizeof(float) * (size_t)n_tap * n * D, "capture"));
    DS_TRYP(fin = ds_malloc(sizeof(float) * (size_t)n * D, "capture"));
    DS_TRYP(bf = ds_malloc(sizeof(uint16_t) * (size_t)n_tap * n * D, "capture"));
    DS_TRYP(kv = kv_cache_new(t->be, &t->m.cfg, n));
    kv_cache *kvs[1] = {kv};
    fwd_batch b = {.n_seq = 1, .kv = kvs, .n_new = &n, .tokens = tokens, .n_capture = n_tap, .capture_layers = taps,
                   .capture = cap, .final_hidden = fin};
    DS_TRY(model_forward(&t->m, &t->fs, &b));
    for (int i = 0; i < n; i++) /* [tap][row][dim] -> [row][tap][dim], bf16 */
        for (int k = 0; k < n_tap; k++)
            for (int d = 0; d < D; d++)
                bf[((size_t)i * n_tap + k) * D + d] = ds_f32_to_bf16(cap[((size_t)k * n + i) * D + d]);
    DS_TRY(append_file(dir, "tokens.bin", tokens, sizeof(int) * (size_t)n));
    DS_TRY(append_file(dir, "taps.bin", bf, sizeof(uint16_t) * (size_t)n_tap * n * D));
    DS_TRY(append_file(dir, "final.bin", fin, sizeof(float) * (size_t)n * D));
    if (x.n_seq + 1 > x.cap) {
        x.cap = 2 * x.cap + 16;
        int *a = ds_realloc(x.len, sizeof(int) * (size_t)x.cap, "index"), *b2, *c2;
        DS_TRYP(a);
        x.len = a;
        DS_TRYP(b2 = ds_realloc(x.n_prompt, sizeof(int) * (size_t)x.cap, "index"));
        x.n_prompt = b2;
        DS_TRYP(c2 = ds_realloc(x.source, sizeof(int) * (size_t)x.cap, "index"));
        x.source = c2;
    }
    x.len[x.n_seq] = n;
    x.n_prompt[x.n_seq] = n_prompt;
    x.source[x.n_seq] = source;
    x.n_seq++;
    x.n_tok += n;
    DS_TRY(idx_write(&x, dir));
    ret = 0;
fail:
    if (kv) kv_cache_free(t->be, kv);
    free(cap), free(fin), free(bf);
    idx_free(&x);
    return ret;
}

/* ---------------------------------------------------------------- what the cache was built from */

static uint64_t fnv_str(uint64_t h, const char *s) {
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator, so ("ab","c") != ("a","bc") */
}

static cJSON *provenance(const target *t, const traindata_opts *o, const prompt_set *ps) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < ps->n; i++) h = fnv_str(fnv_str(h, ps->v[i].text), o->given ? ps->v[i].text2 : NULL);
    char hex[20];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "dataset", o->dataset);
    cJSON_AddStringToObject(j, "prompts_hash", hex);
    cJSON_AddNumberToObject(j, "prompts", ps->n);
    cJSON_AddNumberToObject(j, "limit", o->limit);
    cJSON_AddBoolToObject(j, "given", o->given);
    cJSON_AddNumberToObject(j, "temperature", o->sp.temperature);
    cJSON_AddNumberToObject(j, "top_p", o->sp.top_p);
    cJSON_AddNumberToObject(j, "top_k", o->sp.top_k);
    cJSON_AddNumberToObject(j, "max_new_tokens", o->max_new);
    cJSON_AddNumberToObject(j, "max_prompt", o->max_prompt);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON *tp = cJSON_AddArrayToObject(j, "taps");
    for (int i = 0; i < o->n_tap; i++) cJSON_AddItemToArray(tp, cJSON_CreateNumber(o->taps[i]));
    cJSON_AddStringToObject(j, "target_fingerprint", t->m.fingerprint);
    cJSON_AddNumberToObject(j, "vocab", t->tk.n_vocab);
    cJSON_AddStringToObject(j, "chat_template", chat_family_name(&t->ct));
    return j;
}

/* the first field that differs, named; -1 on a mismatch or a cache that never recorded it */
static int provenance_check(const char *dir, const cJSON *want) {
    char p[4200];
    snprintf(p, sizeof p, "%s/built_from.json", dir);
    struct stat st;
    if (stat(p, &st) != 0) {
        ds_error("%s: this cache does not record what it was built from (an older version made it); use another "
                 "data.cache folder, or data.rebuild: true to replace it", dir);
        return -1;
    }
    cJSON *have = ds_read_json(p);
    if (!have) return -1;
    char msg[600];
    int rc = jcfg_diff(want, have, msg, sizeof msg) ? -1 : 0;
    if (rc)
        ds_error("%s: the cache was built with data.%s; use another data.cache folder, or data.rebuild: true to replace it",
                 dir, msg);
    cJSON_Delete(have);
    return rc;
}

static int remove_cache(const char *dir) {
    const char *names[5] = {"tokens.bin", "taps.bin", "final.bin", "index.json", "built_from.json"};
    char p[4200];
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (remove(p) != 0 && errno != ENOENT) {
            ds_error("%s: cannot remove: %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int traindata_build(target *t, const traindata_opts *o) {
    prompt_set ps;
    idx_t x;
    cJSON *want = NULL;
    int rc = -1, done_src = -1;
    if (ds_mkdirs(o->dir, "the data cache folder")) return -1;
    if (o->rebuild && remove_cache(o->dir)) return -1;
    if (dataset_load(o->dataset, o->data_root, o->limit, o->skip_bad, &ps)) return -1;
    if (ps.skipped) fprintf(stderr, "train: %d malformed prompt line(s) skipped (skip_bad_lines)\n", ps.skipped);
    if (ps.n == 0) {
        ds_error("%s: no usable prompts to build the training data from", o->dataset);
        prompt_set_free(&ps);
        return -1;
    }
    int r = idx_read(&x, o->dir);
    if (r < 0) goto done_ps;
    DS_TRYP(want = provenance(t, o, &ps));
    if (r == 0) {
        for (int i = 0; i < x.n_seq; i++) done_src = DS_MAX(done_src, x.source[i]);
        idx_free(&x);
        if (provenance_check(o->dir, want)) goto done_ps;
    } else { /* a fresh cache: say what it is built from before the first sequence lands */
        char p[4200], *txt = cJSON_Print(want);
        snprintf(p, sizeof p, "%s/built_from.json", o->dir);
        int w = txt ? ds_write_file_atomic(p, txt, strlen(txt)) : -1;
        free(txt);
        if (w) goto done_ps;
    }
    if (done_src + 1 >= ps.n) {
        rc = 0;
        goto done_ps;
    }
    fprintf(stderr, "data: %s, %d prompts (%d already cached) -> %s\n", o->dataset, ps.n, done_src + 1, o->dir);
    ds_progress pr;
    ds_progress_start(&pr, "data: prompts", "prompts", ps.n);
    long toks = 0;
    for (int i = done_src + 1; i < ps.n; i++) {
        chat_msg msg = {"user", ps.v[i].text};
        ivec ids = {0};
        if (chat_encode(&t->ct, &t->tk, &msg, 1, 1, &ids)) goto done_ps;
        int np = ids.n;
        if (np > o->max_prompt) { /* skipped, but recorded as done by the next sequence's source */
            ivec_free(&ids);
            continue;
        }
        if (o->given) {
            if (!ps.v[i].text2) {
                ivec_free(&ids);
                continue;
            }
            if (tokenizer_encode(&t->tk, ps.v[i].text2, strlen(ps.v[i].text2), 0, &ids)) goto done_ps;
        } else {
            request req;
            if (request_init(&req, t, i, ids.v, ids.n, o->max_new, o->seed * 1000003ull + (uint64_t)i)) goto done_ps;
            decode_cfg cfg = {o->sp, 0, NULL, NULL, NULL, NULL, MODE_AR};
            decode_stats st;
            memset(&st, 0, sizeof st);
            request *rp = &req;
            int e = decode_run(t, &rp, 1, &cfg, &st);
            ivec_free(&ids);
            ids = req.toks; /* prompt + response */
            req.toks = (ivec){0};
            request_free(&req, t);
            if (e) goto done_ps;
        }
        if (ids.n > np + 1) {
            if (traindata_append(t, o->dir, ids.v, ids.n, np, i, o->n_tap, o->taps)) {
                ivec_free(&ids);
                goto done_ps;
            }
            toks += ids.n;
        }
        ivec_free(&ids);
        char extra[64];
        snprintf(extra, sizeof extra, "%ld tokens", toks);
        ds_progress_update(&pr, i + 1, extra);
    }
    ds_progress_end(&pr);
    rc = 0;
fail:
done_ps:
    cJSON_Delete(want);
    prompt_set_free(&ps);
    return rc;
}

/* ---------------------------------------------------------------------------------- reading */

static int map_one(train_cache *c, int k, const char *dir, const char *name, size_t want) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (ds_map_file(p, want, "the size the index records", &c->maps[k], &c->map_len[k])) return -1;
    return 0;
}

int traindata_open(train_cache *c, const char *dir, const target *t) {
    memset(c, 0, sizeof *c);
    idx_t x;
    int r = idx_read(&x, dir);
    if (r == 1) ds_error("%s: no training cache here (index.json missing)", dir);
    if (r) return -1;
    DS_CHECK(!t || strcmp(x.fp, t->m.fingerprint) == 0, "%s: the cache was built with target %s, not %s", dir, x.fp,
             t->m.fingerprint);
    c->n_seq = x.n_seq;
    c->n_tok = x.n_tok;
    c->n_tap = x.n_tap;
    c->dim = x.dim;
    memcpy(c->taps, x.taps, sizeof c->taps);
    snprintf(c->target_fingerprint, sizeof c->target_fingerprint, "%s", x.fp);
    c->len = x.len, c->n_prompt = x.n_prompt, c->source = x.source;
    x.len = x.n_prompt = x.source = NULL;
    DS_TRYP(c->off = ds_malloc(sizeof(long) * (size_t)(c->n_seq + 1), "cache index"));
    c->off[0] = 0;
    for (int i = 0; i < c->n_seq; i++) c->off[i + 1] = c->off[i] + c->len[i];
    DS_TRY(map_one(c, 0, dir, "tokens.bin", (size_t)c->n_tok * 4));
    DS_TRY(map_one(c, 1, dir, "taps.bin", (size_t)c->n_tok * c->n_tap * c->dim * 2));
    DS_TRY(map_one(c, 2, dir, "final.bin", (size_t)c->n_tok * c->dim * 4));
    c->tokens = (const int *)c->maps[0];
    c->taps16 = (const uint16_t *)c->maps[1];
    c->final = (const float *)c->maps[2];
    for (long i = 0; i < c->n_tok; i++)
        DS_CHECK(c->tokens[i] >= 0 && (!t || c->tokens[i] < t->m.cfg.vocab_size), "%s: token %ld out of range", dir, i);
    idx_free(&x);
    return 0;
fail:
    idx_free(&x);
    traindata_close(c);
    return -1;
}

void traindata_close(train_cache *c) {
    for (int k = 0; k < 3; k++) ds_unmap(c->maps[k], c->map_len[k]);
    free(c->len), free(c->n_prompt), free(c->source), free(c->off);
    memset(c, 0, sizeof *c);
}

void traindata_seq(const train_cache *c, int i, float *taps, float *final) {
    size_t n = (size_t)c->len[i], per = (size_t)c->n_tap * c->dim, base = (size_t)c->off[i];
    for (size_t k = 0; k < n * per; k++) taps[k] = ds_bf16_to_f32(c->taps16[base * per + k]);
    memcpy(final, c->final + base * c->dim, sizeof(float) * n * c->dim);
}
