#include "traindata.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/formats/quant.h"
#include "../runtime/sampling.h"
#include "datasets.h"

enum { F_TOK, F_TAPS, F_ID, F_LP, F_FINAL, N_FILES };
static const char *FILES[N_FILES] = {"tokens.bin", "taps.bin", "topk_id.bin", "topk_lp.bin", "final.bin"};

/* ------------------------------------------------------------------------------- top-K */

/* heap order: a below b when its logit is smaller, or equal with the larger id (evicted first: ties
 * keep the smaller id) */
static int topk_below(const float *z, int a, int b) { return z[a] < z[b] || (z[a] == z[b] && a > b); }

void topk_logprobs(const float *z, int V, int K, int32_t *id, float *lp) {
    /* a min-heap of the K largest (value, id) under topk_below */
    int n = 0;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double se = 0;
    for (int v = 0; v < V; v++) {
        se += expf(z[v] - mx);
        if (n < K) {
            int i = n++;
            while (i > 0 && topk_below(z, v, id[(i - 1) / 2])) id[i] = id[(i - 1) / 2], i = (i - 1) / 2;
            id[i] = v;
        } else if (topk_below(z, id[0], v)) {
            int i = 0;
            for (;;) {
                int l = 2 * i + 1, r = l + 1, m = i, vm = v;
                if (l < K && topk_below(z, id[l], vm)) m = l, vm = id[l];
                if (r < K && topk_below(z, id[r], vm)) m = r;
                if (m == i) break;
                id[i] = id[m], i = m;
            }
            id[i] = v;
        }
    }
    /* heap -> descending (insertion sort; K is small) */
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && topk_below(z, id[b - 1], id[b]); b--) {
            int t = id[b];
            id[b] = id[b - 1], id[b - 1] = t;
        }
    double lse = mx + log(se);
    for (int k = 0; k < n; k++) lp[k] = (float)(z[id[k]] - lse);
    for (int k = n; k < K; k++) id[k] = 0, lp[k] = -INFINITY; /* V < K: empty slots hold no mass */
}

/* ------------------------------------------------------------------------------ a shard */

static cJSON *layout_json(const traindata_layout *l) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "format", 2);
    cJSON_AddStringToObject(j, "target_fingerprint", l->fp);
    cJSON_AddNumberToObject(j, "dim", l->dim);
    cJSON *t = cJSON_AddArrayToObject(j, "taps");
    for (int i = 0; i < l->n_tap; i++) cJSON_AddItemToArray(t, cJSON_CreateNumber(l->taps[i]));
    cJSON_AddNumberToObject(j, "top_k", l->top_k);
    cJSON_AddBoolToObject(j, "final", l->has_final);
    return j;
}

/* 1: no layout yet (a fresh shard) */
static int layout_read(traindata_layout *l, const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/layout.json", dir);
    struct stat st;
    if (stat(p, &st) != 0) return 1;
    memset(l, 0, sizeof *l);
    cJSON *j = ds_read_json(p);
    if (!j) return -1;
    const cJSON *f = cJSON_GetObjectItem(j, "format"), *fp = cJSON_GetObjectItem(j, "target_fingerprint"),
                *dim = cJSON_GetObjectItem(j, "dim"), *taps = cJSON_GetObjectItem(j, "taps"),
                *k = cJSON_GetObjectItem(j, "top_k"), *fin = cJSON_GetObjectItem(j, "final");
    /* every number an integer in its range (a format of 2.5 or a tap of "7" read as 2 and 0 before) */
    int ok = jcfg_integral(f, 2, 2) && cJSON_IsString(fp) && jcfg_integral(dim, 1, 65536) && cJSON_IsArray(taps) &&
             cJSON_GetArraySize(taps) >= 1 && cJSON_GetArraySize(taps) <= 8 && jcfg_integral(k, 1, 4096) && cJSON_IsBool(fin);
    for (int i = 0; ok && i < cJSON_GetArraySize(taps); i++) ok = jcfg_integral(cJSON_GetArrayItem(taps, i), 0, 4095);
    if (ok) {
        snprintf(l->fp, sizeof l->fp, "%s", fp->valuestring);
        l->dim = dim->valueint, l->top_k = k->valueint, l->has_final = cJSON_IsTrue(fin);
        l->n_tap = cJSON_GetArraySize(taps);
        for (int i = 0; i < l->n_tap; i++) l->taps[i] = cJSON_GetArrayItem(taps, i)->valueint;
    }
    cJSON_Delete(j);
    if (!ok) ds_error("%s: malformed (format 2 expected: target_fingerprint, dim, taps, top_k, final)", p);
    return ok ? 0 : -1;
}

static int layout_same(const traindata_layout *a, const traindata_layout *b) {
    return strcmp(a->fp, b->fp) == 0 && a->dim == b->dim && a->n_tap == b->n_tap && a->top_k == b->top_k &&
           a->has_final == b->has_final && memcmp(a->taps, b->taps, sizeof(int) * (size_t)a->n_tap) == 0;
}

typedef struct {
    int n_seq;
    long n_tok, n_resp;
    int32_t *rec; /* [n_seq][3]: len, n_prompt, source */
} sidx;

static int sidx_read(sidx *x, const char *dir) {
    memset(x, 0, sizeof *x);
    char p[4200], *txt = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/index.bin", dir);
    struct stat st;
    if (stat(p, &st) == 0 && st.st_size > 0 && ds_read_file(p, &txt, &n)) return -1;
    x->n_seq = (int)(n / 12);
    x->rec = (int32_t *)txt;
    for (int i = 0; i < x->n_seq; i++) {
        int32_t *r = x->rec + 3 * i;
        DS_CHECK(r[0] > 1 && r[1] >= 1 && r[1] < r[0] && r[2] >= 0, "%s: sequence %d is malformed (len %d, prompt %d)", p, i,
                 r[0], r[1]);
        x->n_tok += r[0];
        x->n_resp += r[0] - r[1];
    }
    return 0;
fail:
    free(txt);
    x->rec = NULL;
    return -1;
}

static void file_sizes(const traindata_layout *l, long n_tok, long n_resp, off_t *want) {
    want[F_TOK] = (off_t)n_tok * 4;
    want[F_TAPS] = (off_t)n_tok * l->n_tap * l->dim * 2;
    want[F_ID] = (off_t)n_resp * l->top_k * 4;
    want[F_LP] = (off_t)n_resp * l->top_k * 4;
    want[F_FINAL] = l->has_final ? (off_t)n_tok * l->dim * 4 : 0;
}

/* bring the data files back to what the index records (a build killed mid-append), and the index to its
 * whole records: a short write's partial record kept would put every later record at a wrong offset */
static int trim_files(const char *dir, const traindata_layout *l, const sidx *x) {
    off_t want[N_FILES];
    file_sizes(l, x->n_tok, x->n_resp, want);
    char ip[4200];
    struct stat ist;
    snprintf(ip, sizeof ip, "%s/index.bin", dir);
    if (stat(ip, &ist) == 0 && ist.st_size > (off_t)x->n_seq * 12 && truncate(ip, (off_t)x->n_seq * 12) != 0) {
        ds_error("%s: cannot truncate: %s", ip, strerror(errno));
        return -1;
    }
    for (int i = 0; i < N_FILES; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, FILES[i]);
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

static int append_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4200];
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

/* open a shard for appending: its layout written or checked, its files trimmed to its index */
static int shard_prepare(const char *dir, const traindata_layout *lay, sidx *x) {
    traindata_layout have;
    if (ds_mkdirs(dir, "the data cache shard")) return -1;
    int r = layout_read(&have, dir);
    if (r < 0) return -1;
    if (r == 1) {
        cJSON *j = layout_json(lay);
        char p[4200], *txt = cJSON_Print(j);
        cJSON_Delete(j);
        snprintf(p, sizeof p, "%s/layout.json", dir);
        int w = txt ? ds_write_file_atomic(p, txt, strlen(txt)) : -1;
        free(txt);
        if (w) return -1;
    } else if (!layout_same(&have, lay)) {
        ds_error("%s: the shard was built for another target, other tap layers, another top_k or store_final", dir);
        return -1;
    }
    if (sidx_read(x, dir)) return -1;
    if (trim_files(dir, lay, x)) {
        free(x->rec);
        return -1;
    }
    return 0;
}

/* append one sequence's arrays to a shard; the index last: the sequence exists once indexed */
static int append_seq(const char *dir, const int *tokens, int n, int n_prompt, int source, const uint16_t *taps16,
                      const int32_t *id, const float *lp, const float *fin, const traindata_layout *l) {
    size_t R = (size_t)(n - n_prompt), per = (size_t)l->n_tap * l->dim;
    int32_t rec[3] = {n, n_prompt, source};
    if (append_file(dir, FILES[F_TOK], tokens, sizeof(int) * (size_t)n) ||
        append_file(dir, FILES[F_TAPS], taps16, sizeof(uint16_t) * (size_t)n * per) ||
        append_file(dir, FILES[F_ID], id, sizeof(int32_t) * R * l->top_k) ||
        append_file(dir, FILES[F_LP], lp, sizeof(float) * R * l->top_k) ||
        (l->has_final && append_file(dir, FILES[F_FINAL], fin, sizeof(float) * (size_t)n * l->dim)))
        return -1;
    return append_file(dir, "index.bin", rec, sizeof rec);
}

/* one sequence, teacher-forced: taps for every position, top-K at positions n_prompt-1 .. n-2 */
static int capture_append(target *t, const char *dir, const int *tokens, int n, int n_prompt, int source,
                          const traindata_layout *lay) {
    int D = t->m.cfg.dim, V = t->m.cfg.vocab_size, K = lay->top_k, R = n - n_prompt, rc = -1;
    float *cap = NULL, *fin = NULL, *logits = NULL, *lp = NULL;
    uint16_t *bf = NULL;
    int32_t *id = NULL;
    kv_cache *kv = NULL;
    DS_CHECK(n <= t->m.cfg.max_seq, "a sequence of %d tokens exceeds the target's context of %d", n, t->m.cfg.max_seq);
    DS_TRYP(cap = ds_malloc(sizeof(float) * (size_t)lay->n_tap * n * D, "capture"));
    if (lay->has_final) DS_TRYP(fin = ds_malloc(sizeof(float) * (size_t)n * D, "capture"));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)n * V, "capture logits"));
    DS_TRYP(bf = ds_malloc(sizeof(uint16_t) * (size_t)lay->n_tap * n * D, "capture"));
    DS_TRYP(id = ds_malloc(sizeof(int32_t) * (size_t)R * K, "top-k"));
    DS_TRYP(lp = ds_malloc(sizeof(float) * (size_t)R * K, "top-k"));
    DS_TRYP(kv = kv_cache_new(t->be, &t->m.cfg, n));
    kv_cache *kvs[1] = {kv};
    fwd_batch b = {.n_seq = 1, .kv = kvs, .n_new = &n, .tokens = tokens, .all_logits = 1, .logits = logits,
                   .n_capture = lay->n_tap, .capture_layers = lay->taps, .capture = cap, .final_hidden = fin};
    DS_TRY(model_forward(&t->m, &t->fs, &b));
    for (int i = 0; i < n; i++) /* [tap][row][dim] -> [row][tap][dim], bf16 */
        for (int k = 0; k < lay->n_tap; k++)
            for (int d = 0; d < D; d++)
                bf[((size_t)i * lay->n_tap + k) * D + d] = ds_f32_to_bf16(cap[((size_t)k * n + i) * D + d]);
    for (int r = 0; r < R; r++)
        topk_logprobs(logits + (size_t)(n_prompt - 1 + r) * V, V, K, id + (size_t)r * K, lp + (size_t)r * K);
    DS_TRY(append_seq(dir, tokens, n, n_prompt, source, bf, id, lp, fin, lay));
    rc = 0;
fail:
    if (kv) kv_cache_free(t->be, kv);
    free(cap), free(fin), free(logits), free(bf), free(id), free(lp);
    return rc;
}

int traindata_append(target *t, const char *dir, const int *tokens, int n, int n_prompt, int source,
                     const traindata_layout *lay0) {
    traindata_layout lay = *lay0;
    sidx x;
    lay.dim = t->m.cfg.dim;
    snprintf(lay.fp, sizeof lay.fp, "%s", t->m.fingerprint);
    DS_CHECK(n_prompt >= 1 && n > n_prompt, "a training sequence needs a prompt and a response (%d of %d tokens)",
             n_prompt, n);
    if (shard_prepare(dir, &lay, &x)) return -1;
    free(x.rec);
    return capture_append(t, dir, tokens, n, n_prompt, source, &lay);
fail:
    return -1;
}

/* ---------------------------------------------------------------- what the cache was built from */

static uint64_t fnv_str(uint64_t h, const char *s) {
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator, so ("ab","c") != ("a","bc") */
}

static cJSON *provenance(const target *t, const traindata_opts *o, const prompt_set *ps, int n_eval, int n_overlap) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < ps->n; i++) h = fnv_str(fnv_str(h, ps->v[i].text), o->given ? ps->v[i].text2 : NULL);
    char hex[20];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "format", 2);
    cJSON_AddStringToObject(j, "dataset", o->dataset);
    cJSON_AddStringToObject(j, "prompts_hash", hex);
    cJSON_AddNumberToObject(j, "prompts", ps->n);
    cJSON_AddNumberToObject(j, "limit", o->limit);
    cJSON_AddBoolToObject(j, "given", o->given);
    cJSON_AddNumberToObject(j, "temperature", o->sp.temperature);
    cJSON_AddNumberToObject(j, "top_p", o->sp.top_p);
    if (o->sp.min_p > 0) cJSON_AddNumberToObject(j, "min_p", o->sp.min_p); /* absent: caches built before it stay valid */
    cJSON_AddNumberToObject(j, "top_k", o->sp.top_k);
    cJSON_AddNumberToObject(j, "max_new_tokens", o->max_new);
    cJSON_AddNumberToObject(j, "max_prompt", o->max_prompt);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON *tp = cJSON_AddArrayToObject(j, "taps");
    for (int i = 0; i < o->n_tap; i++) cJSON_AddItemToArray(tp, cJSON_CreateNumber(o->taps[i]));
    cJSON_AddNumberToObject(j, "target_top_k", o->top_k);
    cJSON_AddBoolToObject(j, "store_final", o->store_final);
    cJSON_AddNumberToObject(j, "shard_size", o->shard_size);
    cJSON_AddStringToObject(j, "target_fingerprint", t->m.fingerprint);
    char contract[96];
    backend_contract(t->be, contract, sizeof contract);
    cJSON_AddStringToObject(j, "target_contract", contract); /* a resumed build adds the same numbers */
    cJSON_AddNumberToObject(j, "vocab", t->tk.n_vocab);
    cJSON_AddStringToObject(j, "chat_template", chat_family_name(&t->ct));
    cJSON_AddNumberToObject(j, "evaluation_prompts_checked", n_eval);
    cJSON_AddNumberToObject(j, "evaluation_overlap_dropped", n_overlap);
    return j;
}

/* the first field that differs, named */
static int provenance_check(const char *dir, const cJSON *want) {
    char p[4200];
    snprintf(p, sizeof p, "%s/built_from.json", dir);
    cJSON *have = ds_read_json(p);
    if (!have) return -1;
    char msg[600];
    /* how many evaluation prompts were compared is a record, not a setting: a build that checks more sets
     * (Spec-Bench's categories joined the list after caches were built) keeps the same prompts, which
     * prompts_hash pins */
    cJSON *w = cJSON_Duplicate(want, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(w, "evaluation_prompts_checked");
    cJSON_DeleteItemFromObjectCaseSensitive(have, "evaluation_prompts_checked");
    int rc = !w || jcfg_diff(w, have, msg, sizeof msg) ? -1 : 0;
    if (rc && w)
        ds_error("%s: the cache was built with data.%s; use another data.cache folder, or data.rebuild: true to replace it",
                 dir, msg);
    cJSON_Delete(w);
    cJSON_Delete(have);
    return rc;
}

static void shard_dir(char *out, size_t n, const char *dir, int s) { snprintf(out, n, "%s/shard-%04d", dir, s); }

static int remove_cache(const char *dir) {
    char p[4200], q[4400];
    for (int s = 0;; s++) {
        shard_dir(p, sizeof p, dir, s);
        struct stat st;
        if (stat(p, &st) != 0) break;
        const char *extra[3] = {"index.bin", "layout.json", "done"};
        for (int i = 0; i < N_FILES + 3; i++) {
            snprintf(q, sizeof q, "%s/%s", p, i < N_FILES ? FILES[i] : extra[i - N_FILES]);
            if (remove(q) != 0 && errno != ENOENT) return ds_error("%s: cannot remove: %s", q, strerror(errno)), -1;
        }
        if (rmdir(p) != 0) return ds_error("%s: cannot remove (not only cache files in it?): %s", p, strerror(errno)), -1;
    }
    snprintf(p, sizeof p, "%s/built_from.json", dir);
    if (remove(p) != 0 && errno != ENOENT) return ds_error("%s: cannot remove: %s", p, strerror(errno)), -1;
    return 0;
}

/* ------------------------------------------------------------------------------- building */

#define MAX_GEN_THREADS 64 /* threads that sample a generation step's sequences */

typedef struct {
    double t_gen;
    long gen_tok, cap_tok, done_prompts, seqs;
} build_stats;

/* One generating sequence: everything captured for it so far, appended to the shard when it ends. */
typedef struct {
    int src, n_prompt, done, fed; /* fed: tokens whose states are captured */
    ivec toks;
    uint16_t *taps;               /* [cap][n_tap][dim] bf16 */
    int32_t *id;                  /* [cap][K] */
    float *lp, *fin;
    int cap;
    kv_cache *kv;
    rng_t rng;
} gen_seq;

static void gen_seq_free(gen_seq *g, target *t) {
    ivec_free(&g->toks);
    free(g->taps), free(g->id), free(g->lp), free(g->fin);
    if (g->kv) kv_cache_free(t->be, g->kv);
    memset(g, 0, sizeof *g);
}

/* Generate responses for a batch of prompts in lockstep and capture, in the same forwards, every
 * fed token's tapped states and the top-K of every distribution a response token is drawn from:
 * one varlen forward prefills all the prompts, then each step feeds every live sequence its last
 * token. A finished sequence is fed its final token once more (for that token's states) and then
 * written. The int8 contract is batch-invariant, so the states equal a teacher-forced pass. */
static int generate_batch(target *t, const traindata_opts *o, gen_seq *g, int nb, const char *dir,
                          const traindata_layout *l, build_stats *bs) {
    int D = t->m.cfg.dim, V = t->m.cfg.vocab_size, K = l->top_k, NT = l->n_tap, rc = -1, max_rows = 0;
    float *logits = NULL, *cap = NULL, *fin = NULL, *probs = NULL;
    int *tokens = NULL, *n_new = NULL, *who = NULL;
    kv_cache **kvs = NULL;
    /* the host's threads (the caller's OpenMP setting): a GPU backend has one host thread of its own */
    int nth = DS_MAX(1, DS_MIN(omp_get_max_threads(), MAX_GEN_THREADS)), *next = NULL;
    lp_scratch scr[MAX_GEN_THREADS] = {{0}};
    for (int k = 0; k < nb; k++) max_rows += g[k].toks.n;
    DS_TRYP(tokens = ds_malloc(sizeof(int) * (size_t)max_rows, "generation"));
    DS_TRYP(n_new = ds_malloc(sizeof(int) * (size_t)nb, "generation"));
    DS_TRYP(who = ds_malloc(sizeof(int) * (size_t)nb, "generation"));
    DS_TRYP(kvs = ds_malloc(sizeof *kvs * (size_t)nb, "generation"));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)nb * V, "generation"));
    DS_TRYP(probs = ds_malloc(sizeof(float) * (size_t)V * nth, "generation"));
    DS_TRYP(next = ds_malloc(sizeof(int) * (size_t)nb, "generation"));
    DS_TRYP(cap = ds_malloc(sizeof(float) * (size_t)NT * max_rows * D, "generation"));
    if (l->has_final) DS_TRYP(fin = ds_malloc(sizeof(float) * (size_t)max_rows * D, "generation"));
    double t0 = ds_now();
    for (int step = 0;; step++) {
        /* this step's rows: the whole prompt at step 0, then each live sequence's newest token */
        int ns = 0, T = 0;
        for (int k = 0; k < nb; k++) {
            gen_seq *s = &g[k];
            if (s->fed == s->toks.n) continue; /* finished and fully captured */
            int n = s->toks.n - s->fed;
            memcpy(tokens + T, s->toks.v + s->fed, sizeof(int) * (size_t)n);
            who[ns] = k, n_new[ns] = n, kvs[ns] = s->kv;
            ns++, T += n;
        }
        if (!ns) break;
        fwd_batch fb = {.n_seq = ns, .kv = kvs, .n_new = n_new, .tokens = tokens, .all_logits = 0, .logits = logits,
                        .n_capture = NT, .capture_layers = l->taps, .capture = cap, .final_hidden = fin};
        DS_TRY(model_forward(&t->m, &t->fs, &fb));
        for (int j = 0, row = 0; j < ns; row += n_new[j], j++) {
            gen_seq *s = &g[who[j]];
            for (int i = 0; i < n_new[j]; i++) { /* states of the fed tokens */
                uint16_t *dst = s->taps + (size_t)(s->fed + i) * NT * D;
                for (int tp = 0; tp < NT; tp++)
                    for (int d = 0; d < D; d++) dst[tp * D + d] = ds_f32_to_bf16(cap[((size_t)tp * T + row + i) * D + d]);
                if (fin) memcpy(s->fin + (size_t)(s->fed + i) * D, fin + (size_t)(row + i) * D, sizeof(float) * D);
            }
            s->fed += n_new[j];
        }
        /* each live sequence's top-K and next token, split over the threads: a sequence owns its
         * rng and rows, so the result does not depend on the split (this ran on one thread while
         * the other waited, ~40 % of a step at batch 16) */
        int failed = 0;
        char why[512] = "";
#pragma omp parallel num_threads(nth) reduction(| : failed)
        {
            int tid = omp_get_thread_num();
            float *pr = probs + (size_t)tid * V;
#pragma omp for schedule(dynamic, 1)
            for (int j = 0; j < ns; j++) {
                gen_seq *s = &g[who[j]];
                next[j] = -1;
                if (s->done || failed) continue; /* a done sequence was fed its final token's states only */
                const float *z = logits + (size_t)j * V;
                int r = s->toks.n - s->n_prompt; /* top-K row r: the law of token n_prompt + r */
                topk_logprobs(z, V, K, s->id + (size_t)r * K, s->lp + (size_t)r * K);
                if (logits_process(z, V, &o->sp, pr, &scr[tid])) {
#pragma omp critical(gen_error)
                    snprintf(why, sizeof why, "%s", ds_errmsg()); /* messages are per thread */
                    failed = 1;
                } else if ((next[j] = rng_draw(&s->rng, pr, V)) < 0) failed = 2;
            }
        }
        DS_CHECK(failed != 2, "sampling failed");
        DS_CHECK(!failed, "%s", why);
        for (int j = 0; j < ns; j++) {
            gen_seq *s = &g[who[j]];
            if (next[j] < 0) continue;
            DS_TRY(ivec_push(&s->toks, next[j]));
            if (tokenizer_is_eog(&t->tk, next[j]) || s->toks.n - s->n_prompt >= o->max_new) s->done = 1;
        }
    }
    bs->t_gen += ds_now() - t0;
    for (int k = 0; k < nb; k++) {
        bs->gen_tok += g[k].toks.n - g[k].n_prompt, bs->cap_tok += g[k].toks.n, bs->seqs++;
        DS_TRY(append_seq(dir, g[k].toks.v, g[k].toks.n, g[k].n_prompt, g[k].src, g[k].taps, g[k].id, g[k].lp, g[k].fin, l));
    }
    rc = 0;
fail:
    for (int i = 0; i < MAX_GEN_THREADS; i++) lp_scratch_free(&scr[i]);
    free(tokens), free(n_new), free(who), free(kvs), free(logits), free(probs), free(cap), free(fin), free(next);
    return rc;
}

/* generate responses for prompts [a, b) of the shuffled set in batches, capture and append them */
static int build_shard(target *t, const traindata_opts *o, const prompt_set *ps, const char *dir, int a, int b,
                       const traindata_layout *lay, build_stats *bs, ds_progress *pr) {
    sidx x;
    if (shard_prepare(dir, lay, &x)) return -1;
    int from = a, D = t->m.cfg.dim;
    for (int i = 0; i < x.n_seq; i++) from = DS_MAX(from, x.rec[3 * i + 2] + 1);
    bs->done_prompts += from - a;
    free(x.rec);
    int rc = -1, B = DS_MAX(1, o->batch), nb = 0;
    gen_seq *g = ds_calloc((size_t)B, sizeof *g, "generation");
    if (!g) return -1;
    for (int i = from; i < b;) {
        /* the next batch: prompts that fit */
        for (; i < b && nb < B; i++) {
            chat_msg msg = {"user", ps->v[i].text};
            ivec ids = {0};
            if (chat_encode(&t->ct, &t->tk, &msg, 1, 1, &ids)) goto done;
            int np = ids.n;
            if (np > o->max_prompt || np + o->max_new + 1 > t->m.cfg.max_seq) { /* skipped: a later source marks it done */
                ivec_free(&ids);
                continue;
            }
            if (o->given) { /* teacher forcing on the record's own second turn */
                if (!ps->v[i].text2 || tokenizer_encode(&t->tk, ps->v[i].text2, strlen(ps->v[i].text2), 0, &ids)) {
                    ivec_free(&ids);
                    if (ps->v[i].text2) goto done;
                    continue;
                }
                double t0 = ds_now();
                int e = ids.n > np + 1 ? capture_append(t, dir, ids.v, ids.n, np, i, lay) : 0;
                bs->t_gen += ds_now() - t0, bs->cap_tok += ids.n, bs->seqs += ids.n > np + 1;
                ivec_free(&ids);
                if (e) goto done;
                continue;
            }
            gen_seq *s = &g[nb++];
            int cap = np + o->max_new;
            s->src = i, s->n_prompt = np, s->toks = ids, s->cap = cap;
            rng_seed(&s->rng, o->seed * 1000003ull + (uint64_t)i);
            DS_TRYP(s->taps = ds_malloc(sizeof(uint16_t) * (size_t)cap * lay->n_tap * D, "generation"));
            DS_TRYP(s->id = ds_malloc(sizeof(int32_t) * (size_t)o->max_new * lay->top_k, "generation"));
            DS_TRYP(s->lp = ds_malloc(sizeof(float) * (size_t)o->max_new * lay->top_k, "generation"));
            if (lay->has_final) DS_TRYP(s->fin = ds_malloc(sizeof(float) * (size_t)cap * D, "generation"));
            DS_TRYP(s->kv = kv_cache_new(t->be, &t->m.cfg, cap));
        }
        if (nb) {
            if (generate_batch(t, o, g, nb, dir, lay, bs)) goto done;
            for (int k = 0; k < nb; k++) gen_seq_free(&g[k], t);
            nb = 0;
        }
        if (!o->quiet) {
            char extra[200];
            snprintf(extra, sizeof extra, "%ld seqs, %ld tokens | %.0f tok/s (%.0f generated/s)", bs->seqs, bs->cap_tok,
                     bs->t_gen > 0 ? bs->cap_tok / bs->t_gen : 0.0, bs->t_gen > 0 ? bs->gen_tok / bs->t_gen : 0.0);
            ds_progress_update(pr, bs->done_prompts + (i - from), extra);
        }
    }
    bs->done_prompts += b - from;
    {
        char p[4400];
        snprintf(p, sizeof p, "%s/done", dir);
        if (ds_write_file_atomic(p, "done\n", 5)) goto done;
    }
    rc = 0;
fail:
done:
    for (int k = 0; k < B; k++) gen_seq_free(&g[k], t);
    free(g);
    return rc;
}

int traindata_build(target *t, const traindata_opts *o) {
    prompt_set ps;
    cJSON *want = NULL;
    int rc = -1, n_eval = 0, n_overlap = 0;
    char p[4200];
    DS_CHECK(o->top_k >= 1 && o->top_k <= 4096 && o->shard_size >= 1 && o->batch >= 1,
             "data: top_k (1..4096), shard_size and batch (>= 1) are required");
    if (ds_mkdirs(o->dir, "the data cache folder")) return -1;
    if (o->rebuild && remove_cache(o->dir)) return -1;
    const char *root = o->data_root ? o->data_root : dataset_default_root();
    if (dataset_load(o->dataset, root, 0, o->skip_bad, &ps)) return -1;
    if (ps.skipped) fprintf(stderr, "data: %d malformed prompt line(s) skipped (skip_bad_lines)\n", ps.skipped);
    /* no evaluation prompt in training data: drop any that equals one (normalised) */
    if (dataset_drop_eval_overlap(&ps, root, &n_eval, &n_overlap)) goto done_ps;
    if (!o->quiet)
        fprintf(stderr, "data: %d training prompts checked against %d evaluation prompts: %d equal ones dropped\n",
                ps.n + n_overlap, n_eval, n_overlap);
    /* a seeded shuffle, so every finished shard is a uniform sample of the set */
    {
        rng_t r;
        rng_seed(&r, o->seed ^ 0x5a4d);
        for (int i = ps.n - 1; i > 0; i--) {
            int j = (int)(rng_u64(&r) % (uint64_t)(i + 1));
            prompt tmp = ps.v[i];
            ps.v[i] = ps.v[j], ps.v[j] = tmp;
        }
        if (o->limit > 0 && o->limit < ps.n) {
            for (int i = o->limit; i < ps.n; i++) free(ps.v[i].text), free(ps.v[i].text2);
            ps.n = o->limit;
        }
    }
    if (ps.n == 0) {
        ds_error("%s: no usable prompts to build the training data from", o->dataset);
        goto done_ps;
    }
    DS_TRYP(want = provenance(t, o, &ps, n_eval, n_overlap));
    snprintf(p, sizeof p, "%s/built_from.json", o->dir);
    struct stat st;
    if (stat(p, &st) == 0) {
        if (provenance_check(o->dir, want)) goto done_ps;
    } else { /* a fresh cache: say what it is built from before the first sequence lands */
        char *txt = cJSON_Print(want);
        int w = txt ? ds_write_file_atomic(p, txt, strlen(txt)) : -1;
        free(txt);
        if (w) goto done_ps;
    }
    traindata_layout lay = {.n_tap = o->n_tap, .dim = t->m.cfg.dim, .top_k = o->top_k, .has_final = o->store_final};
    memcpy(lay.taps, o->taps, sizeof lay.taps);
    snprintf(lay.fp, sizeof lay.fp, "%s", t->m.fingerprint);
    int n_shards = (ps.n + o->shard_size - 1) / o->shard_size, stop = o->max_shards > 0 ? o->max_shards : n_shards;
    build_stats bs = {0};
    ds_progress pr;
    int todo = 0;
    for (int s = 0; s < DS_MIN(stop, n_shards); s++) {
        shard_dir(p, sizeof p, o->dir, s);
        char q[4400];
        snprintf(q, sizeof q, "%s/done", p);
        todo += stat(q, &st) != 0;
    }
    if (!todo) {
        rc = 0;
        goto done_ps;
    }
    if (!o->quiet) {
        fprintf(stderr, "data: %s, %d prompts in %d shards of %d -> %s (generating %d at a time)\n", o->dataset, ps.n,
                n_shards, o->shard_size, o->dir, o->batch);
        ds_progress_start(&pr, "data: prompts", "prompts", (long)DS_MIN(ps.n, stop * o->shard_size));
    }
    for (int s = 0; s < DS_MIN(stop, n_shards); s++) {
        int a = s * o->shard_size, b = DS_MIN(ps.n, a + o->shard_size);
        char q[4400];
        shard_dir(p, sizeof p, o->dir, s);
        snprintf(q, sizeof q, "%s/done", p);
        if (stat(q, &st) == 0) {
            bs.done_prompts += b - a;
            continue;
        }
        if (build_shard(t, o, &ps, p, a, b, &lay, &bs, &pr)) goto done_ps;
    }
    if (!o->quiet) {
        ds_progress_end(&pr);
        fprintf(stderr, "data: this run: %ld sequences, %ld tokens (%ld generated) in %.0f s: %.1f tok/s, batch %d\n",
                bs.seqs, bs.cap_tok, bs.gen_tok, bs.t_gen, bs.t_gen > 0 ? bs.cap_tok / bs.t_gen : 0.0, o->batch);
    }
    rc = 0;
fail:
done_ps:
    cJSON_Delete(want);
    prompt_set_free(&ps);
    return rc;
}

/* ---------------------------------------------------------------------------------- reading */

int traindata_open(train_cache *c, const char *dir, const target *t, int max_shards) {
    memset(c, 0, sizeof *c);
    char p[4200];
    int cap = 0;
    for (int s = 0; max_shards <= 0 || s < max_shards; s++) {
        shard_dir(p, sizeof p, dir, s);
        traindata_layout lay;
        struct stat st;
        if (stat(p, &st) != 0) break;
        int r = layout_read(&lay, p);
        if (r == 1) break; /* created, nothing in it yet */
        if (r < 0) goto fail;
        if (s == 0) {
            c->n_tap = lay.n_tap, c->dim = lay.dim, c->top_k = lay.top_k, c->has_final = lay.has_final;
            memcpy(c->taps, lay.taps, sizeof c->taps);
            snprintf(c->target_fingerprint, sizeof c->target_fingerprint, "%s", lay.fp);
            DS_CHECK(!t || strcmp(lay.fp, t->m.fingerprint) == 0, "%s: the cache was built with target %s, not %s", dir,
                     lay.fp, t->m.fingerprint);
        } else {
            traindata_layout l0 = {.n_tap = c->n_tap, .dim = c->dim, .top_k = c->top_k, .has_final = c->has_final};
            memcpy(l0.taps, c->taps, sizeof l0.taps);
            snprintf(l0.fp, sizeof l0.fp, "%s", c->target_fingerprint);
            DS_CHECK(layout_same(&lay, &l0), "%s: its layout differs from shard-0000's", p);
        }
        sidx x;
        if (sidx_read(&x, p)) goto fail;
        traindata_shard *nsh = ds_realloc(c->sh, sizeof *nsh * (size_t)(s + 1), "cache shards");
        if (!nsh) {
            free(x.rec);
            goto fail;
        }
        c->sh = nsh;
        traindata_shard *sh = &c->sh[s];
        memset(sh, 0, sizeof *sh);
        c->n_shard = s + 1;
        off_t want[N_FILES];
        file_sizes(&lay, x.n_tok, x.n_resp, want);
        for (int f = 0; f < N_FILES && x.n_seq; f++) {
            if (want[f] == 0) continue;
            char q[4400];
            snprintf(q, sizeof q, "%s/%s", p, FILES[f]);
            if (ds_map_file(q, (size_t)want[f], "the size its index records", &sh->maps[f], &sh->map_len[f])) {
                free(x.rec);
                goto fail;
            }
        }
        sh->tokens = (const int *)sh->maps[F_TOK], sh->taps16 = (const uint16_t *)sh->maps[F_TAPS];
        sh->tk_id = (const int32_t *)sh->maps[F_ID], sh->tk_lp = (const float *)sh->maps[F_LP];
        sh->final = (const float *)sh->maps[F_FINAL];
        if (c->n_seq + x.n_seq > cap) {
            cap = 2 * (c->n_seq + x.n_seq) + 16;
            int *a1 = ds_realloc(c->len, sizeof(int) * (size_t)cap, "cache index");
            if (a1) c->len = a1;
            int *a2 = a1 ? ds_realloc(c->n_prompt, sizeof(int) * (size_t)cap, "cache index") : NULL;
            if (a2) c->n_prompt = a2;
            int *a3 = a2 ? ds_realloc(c->source, sizeof(int) * (size_t)cap, "cache index") : NULL;
            if (a3) c->source = a3;
            int *a4 = a3 ? ds_realloc(c->shard, sizeof(int) * (size_t)cap, "cache index") : NULL;
            if (a4) c->shard = a4;
            long *a5 = a4 ? ds_realloc(c->off, sizeof(long) * (size_t)cap, "cache index") : NULL;
            if (a5) c->off = a5;
            long *a6 = a5 ? ds_realloc(c->koff, sizeof(long) * (size_t)cap, "cache index") : NULL;
            if (a6) c->koff = a6;
            if (!a6) {
                free(x.rec);
                goto fail;
            }
        }
        long off = 0, koff = 0;
        for (int i = 0; i < x.n_seq; i++) {
            int q = c->n_seq++;
            c->len[q] = x.rec[3 * i], c->n_prompt[q] = x.rec[3 * i + 1], c->source[q] = x.rec[3 * i + 2];
            c->shard[q] = s, c->off[q] = off, c->koff[q] = koff;
            off += c->len[q], koff += c->len[q] - c->n_prompt[q];
        }
        c->n_tok += x.n_tok, c->n_resp += x.n_resp;
        free(x.rec);
        for (long i = 0; i < off; i++)
            DS_CHECK(sh->tokens[i] >= 0 && (!t || sh->tokens[i] < t->m.cfg.vocab_size), "%s: token %ld out of range", p, i);
        for (long i = 0; i < koff * c->top_k; i++)
            DS_CHECK(sh->tk_id[i] >= 0 && (!t || sh->tk_id[i] < t->m.cfg.vocab_size) && !(sh->tk_lp[i] > 0),
                     "%s: top-k entry %ld out of range", p, i);
    }
    DS_CHECK(c->n_seq > 0, "%s: no training cache here (no shard-0000 with sequences)", dir);
    return 0;
fail:
    traindata_close(c);
    return -1;
}

void traindata_close(train_cache *c) {
    for (int s = 0; s < c->n_shard; s++)
        for (int k = 0; k < N_FILES; k++) ds_unmap(c->sh[s].maps[k], c->sh[s].map_len[k]);
    free(c->sh), free(c->len), free(c->n_prompt), free(c->source), free(c->shard), free(c->off), free(c->koff);
    memset(c, 0, sizeof *c);
}

void traindata_seq(const train_cache *c, int i, const int *sel, int n_sel, float *taps, float *final) {
    const traindata_shard *sh = &c->sh[c->shard[i]];
    size_t n = (size_t)c->len[i], D = (size_t)c->dim, per = (size_t)c->n_tap * D, base = (size_t)c->off[i];
    if (!sel)
        for (size_t k = 0; k < n * per; k++) taps[k] = ds_bf16_to_f32(sh->taps16[base * per + k]);
    else
        for (size_t r = 0; r < n; r++)
            for (int j = 0; j < n_sel; j++) {
                const uint16_t *src = sh->taps16 + (base + r) * per + (size_t)sel[j] * D;
                float *dst = taps + (r * (size_t)n_sel + (size_t)j) * D;
                for (size_t k = 0; k < D; k++) dst[k] = ds_bf16_to_f32(src[k]);
            }
    if (final && c->has_final) memcpy(final, sh->final + base * c->dim, sizeof(float) * n * c->dim);
}

int traindata_select_taps(const train_cache *c, const int *layers, int n, int *sel) {
    for (int j = 0; j < n; j++) {
        sel[j] = -1;
        for (int k = 0; k < c->n_tap; k++)
            if (c->taps[k] == layers[j]) sel[j] = k;
        if (sel[j] < 0) {
            char have[96];
            int w = 0;
            for (int k = 0; k < c->n_tap; k++) w += snprintf(have + w, sizeof have - (size_t)w, "%s%d", k ? "," : "", c->taps[k]);
            ds_error("the training cache taps layers %s; the drafter reads layer %d (build a cache whose data.taps include it)",
                     have, layers[j]);
            return -1;
        }
    }
    return 0;
}
