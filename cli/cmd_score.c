/* score — the target on given sequences, for checks against other implementations: a prompt's
 * token ids (chat-rendered), the top-k of every teacher-forced position, and greedy continuations.
 *
 * Input, one JSON object a line: {"prompt": TEXT} (rendered by the model's chat template) or
 * {"ids": [...]}, optionally "greedy": N. Output, one line each: {"ids": the sequence's ids,
 * "top": [[id, logit] x k] for every position (the law of the token after it), and with "greedy"
 * "greedy": N argmax ids after the sequence (no stop at end of turn)}. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/kernels/kernels_cpu.h"
#include "../runtime/target.h"
#include "args.h"
#include "commands.h"

/* the k largest logits of z[0..V), descending (ties: the lower id first) */
static void top_k(const float *z, int V, int k, int *id) {
    for (int j = 0; j < k; j++) id[j] = -1;
    for (int i = 0; i < V; i++) {
        int at = k;
        while (at > 0 && (id[at - 1] < 0 || z[i] > z[id[at - 1]])) at--;
        if (at == k) continue;
        memmove(id + at + 1, id + at, sizeof(int) * (size_t)(k - at - 1));
        id[at] = i;
    }
}

typedef struct {
    target *t;
    int k;
} score_ctx;

static int score_line(void *ctx, const cJSON *in, int index, int line, const char *file) {
    (void)index;
    target *t = ((score_ctx *)ctx)->t;
    int k = ((score_ctx *)ctx)->k;
    ivec ids = {0};
    kv_cache *kv = NULL;
    float *z = NULL;
    int rc = -1, V = t->m.cfg.vocab_size, greedy = 0, id[64];
    cJSON *o = NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "prompt"), *ja = cJSON_GetObjectItemCaseSensitive(in, "ids"),
                *g = cJSON_GetObjectItemCaseSensitive(in, "greedy");
    DS_CHECK(cJSON_IsObject(in) && (cJSON_IsString(p) != cJSON_IsArray(ja)),
             "%s:%d: needs one of \"prompt\" (a string) or \"ids\" (an array)", file, line);
    { /* a misspelt key ("greddy") is an error, not a line scored without it */
        char where[600];
        snprintf(where, sizeof where, "%s:%d", file, line);
        jcfg kc;
        DS_TRY(jcfg_open(&kc, in, where));
        jcfg_skip(&kc, "prompt"), jcfg_skip(&kc, "ids"), jcfg_skip(&kc, "greedy");
        DS_TRY(jcfg_close(&kc));
    }
    if (g) {
        DS_CHECK(jcfg_integral(g, 0, 1 << 16), "%s:%d: \"greedy\" must be an integer 0..65536", file, line);
        greedy = g->valueint;
    }
    if (p) {
        DS_CHECK(t->has_tokenizer, "%s:%d: the model has no tokenizer to render a prompt", file, line);
        chat_msg m = {"user", p->valuestring};
        DS_TRY(chat_encode(&t->ct, &t->tk, &m, 1, 1, &ids));
    } else
        for (const cJSON *e = ja->child; e; e = e->next) {
            DS_CHECK(jcfg_integral(e, 0, V - 1), "%s:%d: an id outside the vocabulary (0..%d)", file, line, V - 1);
            DS_TRY(ivec_push(&ids, e->valueint));
        }
    DS_CHECK(ids.n > 0, "%s:%d: no ids to score", file, line);
    DS_CHECK(ids.n + greedy <= t->m.cfg.max_seq, "%s:%d: %d ids and %d greedy exceed the context (%d)", file,
             line, ids.n, greedy, t->m.cfg.max_seq);
    DS_TRYP(kv = kv_cache_new(t->be, &t->m.cfg, ids.n + greedy));
    DS_TRYP(z = ds_malloc(sizeof(float) * (size_t)V * (size_t)ids.n, "logits"));
    DS_TRY(model_forward_one(&t->m, &t->fs, kv, ids.v, ids.n, 1, z));
    DS_TRYP(o = cJSON_CreateObject());
    cJSON *jid = cJSON_AddArrayToObject(o, "ids"), *top = cJSON_AddArrayToObject(o, "top");
    for (int i = 0; i < ids.n; i++) cJSON_AddItemToArray(jid, cJSON_CreateNumber(ids.v[i]));
    for (int i = 0; i < ids.n; i++) {
        const float *zi = z + (size_t)i * V;
        top_k(zi, V, k, id);
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < k; j++) {
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(id[j]));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber(zi[id[j]]));
            cJSON_AddItemToArray(row, pair);
        }
        cJSON_AddItemToArray(top, row);
    }
    if (g) {
        cJSON *gr = cJSON_AddArrayToObject(o, "greedy");
        const float *last = z + (size_t)(ids.n - 1) * V;
        float *zn = z; /* row 0 is free now */
        for (int n = 0; n < greedy; n++) {
            id[0] = qk_argmax(last, V); /* the first of the largest: the lower id on a tie, as top_k */
            cJSON_AddItemToArray(gr, cJSON_CreateNumber(id[0]));
            if (n + 1 < greedy) DS_TRY(model_forward_one(&t->m, &t->fs, kv, id, 1, 0, zn));
            last = zn;
        }
    }
    char *txt = cJSON_PrintUnformatted(o);
    DS_CHECK(txt != NULL, "out of memory printing the result");
    printf("%s\n", txt);
    fflush(stdout);
    free(txt);
    rc = 0;
fail:
    cJSON_Delete(o);
    free(z);
    if (kv) kv_cache_free(t->be, kv);
    ivec_free(&ids);
    return rc;
}

int cmd_score(int argc, char **argv) {
    const char *model_path = target_default_path(), *file = NULL;
    int k = 8, threads = 0;
    backend_opts bo = {0};
    opt_def opts[] = {
        {"model", OPT_STR, &model_path, "NAME|PATH", "target model: a name (below) or a file (default: smollm2-135m)", 0, 0, 0},
        {"in", OPT_STR, &file, "FILE.jsonl", "sequences: {\"prompt\": TEXT} or {\"ids\": [...]}, optionally \"greedy\": N", 0, 0, 0},
        {"top", OPT_INT, &k, "K", "logits kept per position (default 8)", 1, 64, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores (default 0)", 0, 256, 0},
        OPT_BACKEND(bo),
        OPT_END};
    const char *pos[1];
    int npos;
    int rc = args_parse("score", "--in FILE.jsonl [options]   (one JSON line out per line in)", opts, argc, argv, pos, 0,
                        &npos);
    if (rc) return rc < 0 ? -1 : 0;
    DS_CHECK(file != NULL, "score: --in FILE.jsonl is required");
    target t;
    bo.n_threads = threads;
    DS_TRY(target_open(&t, model_path, &bo));
    score_ctx c = {&t, k};
    rc = jcfg_each_record(file, score_line, &c);
    target_close(&t);
    return rc;
fail:
    return -1;
}
