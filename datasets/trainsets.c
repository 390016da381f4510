/* trainsets.c — the drafter training mix (MANIFEST.md, "Training prompt sets") and the check
 * that no evaluation prompt reaches training data.
 *
 * train20k = GSM8K train + MBPP's non-test tasks + trainmix (Alpaca, Code-Alpaca, and its own
 * GSM8K/MBPP picks) + GPTeacher codegen and roleplay + ShareGPT (first human turn, the ids the
 * MANIFEST lists dropped). Prompts are matched after normalisation (lowercase, every run of
 * non-alphanumerics one space): repeats inside the mix are dropped, and so is any prompt equal to
 * one of an evaluation set's. */
#include <cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "datasets.h"

/* ShareGPT ids MANIFEST.md says to drop (AlpacaEval overlap) */
static const char *SHAREGPT_DROP[] = {"k5HzBL1", "BRNEIhb", "k0S032L", "YId9B8p", "oNzQSNG", "sqV107y",
                                      "bp4xiTU_0", "G7rPs6v_0"};

/* the evaluation sets whose prompts must never be trained on */
static const char *EVAL_SETS[] = {"gsm8k", "math500", "aime25", "mbpp", "humaneval", "livecodebench", "mtbench",
                                  "alpaca", "arenahard", "sb-mt", "sb-trans", "sb-sum", "sb-qa", "sb-math", "sb-rag"};

static uint64_t prompt_norm_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    int space = 1; /* leading separators dropped */
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c >= 0x80) {
            if (space == 2) h = (h ^ ' ') * 0x100000001b3ull;
            h = (h ^ (unsigned char)tolower(c)) * 0x100000001b3ull;
            space = 0;
        } else if (space == 0)
            space = 2; /* a separator, written only if more text follows */
    }
    return h;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int add(prompt_set *s, const char *text, const char *dataset, const char *domain, int index) {
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 1024;
        prompt *nv = ds_realloc(s->v, sizeof *nv * (size_t)nc, "prompts");
        if (!nv) return -1;
        s->v = nv, s->cap = nc;
    }
    prompt *p = &s->v[s->n];
    memset(p, 0, sizeof *p);
    DS_TRYP(p->text = ds_strndup(text, strlen(text), "prompt"));
    snprintf(p->dataset, sizeof p->dataset, "%s", dataset);
    snprintf(p->domain, sizeof p->domain, "%s", domain);
    p->index = index;
    s->n++;
    return 0;
fail:
    return -1;
}

/* a JSON array or JSONL file, every record handed to fn */
typedef int (*rec_fn)(prompt_set *out, const cJSON *rec, int index, const char *path);

typedef struct {
    prompt_set *out;
    rec_fn fn;
} rec_ctx;

static int rec_adapt(void *ctx, const cJSON *rec, int index, int line, const char *path) {
    (void)line;
    const rec_ctx *c = ctx;
    return c->fn(c->out, rec, index, path);
}

static int each_record(const char *root, const char *file, prompt_set *out, rec_fn fn) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, file);
    rec_ctx c = {out, fn};
    return jcfg_each_record(path, rec_adapt, &c);
}

static const char *str_field(const cJSON *rec, const char *f) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, f);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int rec_gsm8k(prompt_set *o, const cJSON *r, int i, const char *path) {
    const char *q = str_field(r, "question");
    if (!q || !*q) return ds_error("%s: record %d has no question", path, i + 1), -1;
    return add(o, q, "gsm8k-train", "math", i);
}

/* MBPP's test split is tasks 11-510 (the evaluation draws from it) */
static int rec_mbpp(prompt_set *o, const cJSON *r, int i, const char *path) {
    const char *t = str_field(r, "text");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "task_id");
    if (!t || !cJSON_IsNumber(id)) return ds_error("%s: record %d lacks text or task_id", path, i + 1), -1;
    if (id->valueint >= 11 && id->valueint <= 510) return 0;
    return add(o, t, "mbpp-nontest", "code", i);
}

static int rec_trainmix(prompt_set *o, const cJSON *r, int i, const char *path) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "turns");
    const char *c = str_field(r, "category");
    if (!cJSON_IsString(cJSON_GetArrayItem(t, 0))) return ds_error("%s: record %d has no turns[0]", path, i + 1), -1;
    const char *dom = c && strcmp(c, "math") == 0 ? "math" : c && strcmp(c, "code") == 0 ? "code" : "chat";
    return add(o, cJSON_GetArrayItem(t, 0)->valuestring, "trainmix", dom, i);
}

static int gpteacher(prompt_set *o, const cJSON *r, int i, const char *path, const char *name, const char *dom) {
    const char *ins = str_field(r, "instruction"), *in = str_field(r, "input");
    if (!ins || !*ins) return ds_error("%s: record %d has no instruction", path, i + 1), -1;
    if (!in || !*in) return add(o, ins, name, dom, i);
    size_t n = strlen(ins) + strlen(in) + 3;
    char *t = ds_malloc(n, "prompt");
    if (!t) return -1;
    snprintf(t, n, "%s\n\n%s", ins, in);
    int rc = add(o, t, name, dom, i);
    free(t);
    return rc;
}
static int rec_gpt_code(prompt_set *o, const cJSON *r, int i, const char *p) { return gpteacher(o, r, i, p, "gpteacher-code", "code"); }
static int rec_gpt_role(prompt_set *o, const cJSON *r, int i, const char *p) { return gpteacher(o, r, i, p, "gpteacher-roleplay", "chat"); }

static int rec_sharegpt(prompt_set *o, const cJSON *r, int i, const char *path) {
    const char *id = str_field(r, "id");
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "conversations"), 0);
    const char *from = str_field(c0, "from"), *v = str_field(c0, "value");
    (void)path;
    if (!from || strcmp(from, "human") != 0 || !v || !*v) return 0; /* system/gpt/empty first turns */
    for (size_t k = 0; id && k < sizeof SHAREGPT_DROP / sizeof *SHAREGPT_DROP; k++)
        if (strcmp(id, SHAREGPT_DROP[k]) == 0) return 0;
    return add(o, v, "sharegpt", "chat", i);
}

/* sorted hashes of every evaluation prompt found under root (both MT-Bench turns). A set absent here
 * cannot leak; one present that does not read is an error (skipping it would let its prompts through). */
static int eval_hashes(const char *root, uint64_t **out, int *n_out) {
    uint64_t *h = NULL;
    int n = 0, cap = 0;
    for (size_t e = 0; e < sizeof EVAL_SETS / sizeof *EVAL_SETS; e++) {
        prompt_set ps;
        if (!dataset_present(EVAL_SETS[e], root)) continue;
        if (dataset_load(EVAL_SETS[e], root, 0, 1, &ps)) {
            ds_error_prefix("the overlap check reads every evaluation set present (evaluation set '%s')", EVAL_SETS[e]);
            free(h);
            return -1;
        }
        for (int i = 0; i < ps.n; i++)
            for (int t = 0; t < 2; t++) {
                const char *s = t ? ps.v[i].text2 : ps.v[i].text;
                if (!s) continue;
                if (n == cap) {
                    cap = cap ? 2 * cap : 4096;
                    uint64_t *nh = ds_realloc(h, sizeof *h * (size_t)cap, "evaluation prompts");
                    if (!nh) {
                        prompt_set_free(&ps);
                        free(h);
                        return -1;
                    }
                    h = nh;
                }
                h[n++] = prompt_norm_hash(s);
            }
        prompt_set_free(&ps);
    }
    if (n) qsort(h, (size_t)n, sizeof *h, cmp_u64);
    *out = h, *n_out = n;
    return 0;
}

int dataset_drop_eval_overlap(prompt_set *s, const char *root, int *n_eval, int *n_dropped) {
    uint64_t *h = NULL;
    int n = 0, w = 0;
    if (eval_hashes(root, &h, &n)) return -1;
    for (int i = 0; i < s->n; i++) {
        uint64_t k = prompt_norm_hash(s->v[i].text);
        int hit = n && bsearch(&k, h, (size_t)n, sizeof *h, cmp_u64);
        if (hit) {
            free(s->v[i].text), free(s->v[i].text2);
            continue;
        }
        s->v[w++] = s->v[i];
    }
    *n_dropped = s->n - w;
    *n_eval = n;
    s->n = w;
    free(h);
    return 0;
}

/* keep the first of prompts that normalise alike: sort (hash, index) pairs, keep each run's first */
typedef struct {
    uint64_t h;
    int i;
} hash_idx;

static int cmp_hash_idx(const void *a, const void *b) {
    const hash_idx *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return x->i - y->i;
}

static int dedup(prompt_set *s, int *n_dup) {
    hash_idx *k = ds_malloc(sizeof *k * (size_t)(s->n ? s->n : 1), "dedup");
    unsigned char *keep = ds_calloc((size_t)(s->n ? s->n : 1), 1, "dedup");
    if (!k || !keep) return free(k), free(keep), -1;
    for (int i = 0; i < s->n; i++) k[i] = (hash_idx){prompt_norm_hash(s->v[i].text), i};
    qsort(k, (size_t)s->n, sizeof *k, cmp_hash_idx);
    for (int i = 0; i < s->n; i++) keep[k[i].i] = i == 0 || k[i].h != k[i - 1].h;
    int w = 0;
    for (int i = 0; i < s->n; i++) {
        if (!keep[i]) {
            free(s->v[i].text), free(s->v[i].text2);
            continue;
        }
        s->v[w++] = s->v[i];
    }
    *n_dup = s->n - w;
    s->n = w;
    free(k), free(keep);
    return 0;
}

int trainset_load(const char *root, prompt_set *out) {
    static const struct {
        const char *file;
        rec_fn fn;
    } SRC[] = {
        {"gsm8k/train.jsonl", rec_gsm8k},
        {"mbpp/mbpp.jsonl", rec_mbpp},
        {"trainmix/trainmix.jsonl", rec_trainmix},
        {"gpteacher/codegen-instruct.json", rec_gpt_code},
        {"gpteacher/roleplay-simple-deduped-roleplay-instruct.json", rec_gpt_role},
        {"sharegpt/sg_90k_part1_html_cleaned_lang_first_sampled_sorted.json", rec_sharegpt},
        {"sharegpt/ShareGPT_V3_filtered_500.json", rec_sharegpt},
    };
    memset(out, 0, sizeof *out);
    int counts[8], n_dup = 0;
    for (size_t s = 0; s < sizeof SRC / sizeof *SRC; s++) {
        int before = out->n;
        if (each_record(root, SRC[s].file, out, SRC[s].fn)) {
            ds_error_prefix("training prompt set train20k (../shared/datasets, MANIFEST.md)");
            prompt_set_free(out);
            return -1;
        }
        counts[s] = out->n - before;
    }
    if (dedup(out, &n_dup)) {
        prompt_set_free(out);
        return -1;
    }
    fprintf(stderr,
            "train20k: %d gsm8k-train, %d mbpp non-test, %d trainmix, %d gpteacher-code, %d gpteacher-roleplay, %d+%d "
            "sharegpt; %d repeats dropped -> %d prompts\n",
            counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], n_dup, out->n);
    return 0;
}
