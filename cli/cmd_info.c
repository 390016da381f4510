/* info — what a model file holds, read through the same loader the runtime uses. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/cpu_features.h"
#include "../runtime/formats/quant.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/model/models.h"
#include "../runtime/target.h"
#include "args.h"
#include "commands.h"

/* the ids of one record's "text" as a JSON array line */
static int tokenize_line(void *ctx, const cJSON *rec, int index, int line, const char *file) {
    (void)index;
    const tokenizer *tk = ctx;
    ivec ids = {0};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "text");
    DS_CHECK(cJSON_IsString(t), "%s:%d: not a JSON object with a \"text\" string", file, line);
    DS_TRY(tokenizer_encode(tk, t->valuestring, strlen(t->valuestring), 0, &ids));
    putchar('[');
    for (int i = 0; i < ids.n; i++) printf("%s%d", i ? "," : "", ids.v[i]);
    printf("]\n");
    ivec_free(&ids);
    return 0;
fail:
    ivec_free(&ids);
    return -1;
}

/* the ids of every line's "text" (what scripts/check_tokenizer.py compares with an independent BPE):
 * the tokenizer alone, no weights packed */
static int tokenize_file(const char *model_path, const char *file) {
    gguf_file g = {0};
    tokenizer tk;
    char path[4096];
    const model_name *named;
    int rc = -1;
    DS_TRY(model_resolve(model_path, path, sizeof path, &named));
    DS_TRY(gguf_open(&g, path));
    DS_CHECK(gguf_get(&g, "tokenizer.ggml.model") != NULL, "%s: the model has no tokenizer", path);
    DS_TRY(tokenizer_load_gguf(&tk, &g));
    rc = jcfg_each_record(file, tokenize_line, &tk);
    tokenizer_free(&tk);
fail:
    gguf_close(&g);
    return rc;
}

int cmd_info(int argc, char **argv) {
    const char *pos[1];
    int npos;
    const char *tok_file = NULL;
    opt_def opts[] = {
        {"tokenize", OPT_STR, &tok_file, "FILE.jsonl",
         "instead: the token ids of each line's \"text\" (plain text, no special tokens), one JSON array a line on stdout",
         0, 0, 0},
        OPT_END};
    int rc = args_parse("info", "[MODEL]   (a name or a file; default: smollm2-135m)", opts, argc, argv, pos, 1, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    const char *path = npos ? pos[0] : target_default_path();
    if (tok_file) return tokenize_file(path, tok_file);
    target t;
    if (target_open(&t, path, &(backend_opts){.n_threads = 1})) return -1;
    const model *m = &t.m;
    const model_config *c = &m->cfg;
    printf("file:          %s\n", path);
    printf("format:        %s", m->format == 0 ? "GGUF" : "safetensors + config.json");
    if (m->format == 0) printf(" v%u, %llu tensors, %llu metadata keys, alignment %u", m->gguf.version,
                               (unsigned long long)m->gguf.n_tensors, (unsigned long long)m->gguf.n_kv, m->gguf.alignment);
    printf("\nfingerprint:   %s\n", m->fingerprint);
    printf("architecture:  %s\n", model_arch_name(c->arch));
    printf("parameters:    %.1f M\n", (double)model_n_params(m) / 1e6);
    printf("dims:          dim %d, layers %d, heads %d (kv %d, head size %d), ffn %d, vocab %d, context %d\n", c->dim,
           c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->hidden_dim, c->vocab_size, c->max_seq);
    printf("norm:          RMSNorm eps %g\n", (double)c->norm_eps);
    printf("rope:          base %g, %s pairs, linear scale %g%s\n", (double)c->rope_theta,
           c->rope_neox ? "rotate-half" : "adjacent", (double)c->rope_scale, m->rope_freqs ? ", frequency factors" : "");
    printf("head:          %s\n", c->tied ? "tied to the token embedding" : "separate output matrix");
    char cpu[256];
    cpu_describe(cpu, sizeof cpu);
    printf("kernels:       %s on %s (backends: %s)\n", t.be->kernels, cpu, backend_names());
    if (m->format == 0) {
        int count[GGML_TYPE_LIMIT] = {0};
        uint64_t bytes[GGML_TYPE_LIMIT] = {0};
        for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
            count[m->gguf.tensors[i].type]++;
            bytes[m->gguf.tensors[i].type] += m->gguf.tensors[i].nbytes;
        }
        printf("tensor types: ");
        for (int ty = 0; ty < GGML_TYPE_LIMIT; ty++)
            if (count[ty]) printf(" %s x%d (%.1f MB)", ggml_type_name((uint32_t)ty), count[ty], (double)bytes[ty] / 1e6);
        printf("\n");
    } else {
        printf("tensor types:  F32 in memory (converted from the checkpoint's dtype)\n");
    }
    if (t.has_tokenizer) {
        const tokenizer *tk = &t.tk;
        printf("tokenizer:     byte-level BPE, pre-tokenizer '%s', %d tokens, %d merges, %d special\n", tk->pre_name,
               tk->n_vocab, tk->n_merges, tk->n_special);
        printf("special ids:   bos %d, eos %d, unk %d, pad %d, add_bos %d; end of generation:", tk->bos, tk->eos, tk->unk,
               tk->pad, tk->add_bos);
        for (int i = 0; i < tk->n_eog; i++) printf(" %d %s", tk->eog[i], tk->text[tk->eog[i]]);
        printf("\nchat template: %s%s%s%s\n", chat_family_name(&t.ct), t.ct.default_system ? ", default system message \"" : "",
               t.ct.default_system ? t.ct.default_system : "", t.ct.default_system ? "\"" : "");
    } else {
        printf("tokenizer:     none in this checkpoint\n");
    }
    target_close(&t);
    return 0;
}
