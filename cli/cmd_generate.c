/* generate — chat-templated generation with the target alone, streamed to stdout. */
#include <stdio.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/sampling.h"
#include "../runtime/target.h"
#include "../verify/logits.h"
#include "args.h"
#include "commands.h"

#define DEFAULT_PROMPT "Explain in a few sentences why the sky is blue."

int cmd_generate(int argc, char **argv) {
    const char *model_path = target_default_path(), *prompt = DEFAULT_PROMPT, *system = NULL;
    int raw = 0, top_k = 40, max_new = 256, threads = 0, show_prompt = 0;
    backend_opts bo = {0};
    float temperature = 0.7f, top_p = 0.9f, min_p = 0;
    uint64_t seed = 42;
    opt_def opts[] = {
        {"model", OPT_STR, &model_path, "NAME|PATH", "a name (below), GGUF file or safetensors directory (default: smollm2-135m)", 0, 0, 0},
        {"prompt", OPT_STR, &prompt, "TEXT", "user message (default: a built-in question)", 0, 0, 0},
        {"system", OPT_STR, &system, "TEXT", "system message (default: the template's own)", 0, 0, 0},
        {"raw", OPT_FLAG, &raw, NULL, "send the prompt as plain text, no chat template", 0, 0, 0},
        {"temperature", OPT_FLOAT, &temperature, "T", "sampling temperature, 0 = greedy (default 0.7)", 0, 100, 0},
        {"top-p", OPT_FLOAT, &top_p, "P", "nucleus mass in (0,1], 1 = off (default 0.9)", 0, 1, 0},
        {"min-p", OPT_FLOAT, &min_p, "P", "drop tokens below P times the most likely one's probability, 0 = off (default 0)", 0, 1, 0},
        {"top-k", OPT_INT, &top_k, "K", "keep the K most likely tokens, 0 = off (default 40)", 0, 1 << 22, 0},
        {"seed", OPT_U64, &seed, "N", "random seed (default 42)", 0, 0, 0},
        {"max-new-tokens", OPT_INT, &max_new, "N", "stop after N generated tokens (default 256)", 1, 1 << 20, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores (default 0)", 0, 256, 0},
        {"show-prompt", OPT_FLAG, &show_prompt, NULL, "print the rendered prompt to stderr first", 0, 0, 0},
        OPT_BACKEND(bo),
        OPT_END};
    const char *pos[1];
    int npos;
    int rc = args_parse("generate", "[options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;
    sampling_params sp = {temperature, top_k, top_p, min_p};
    if (sampling_params_check(&sp)) return -1;

    target t;
    ivec ids = {0};
    kv_cache *kv = NULL;
    float *logits = NULL, *probs = NULL;
    lp_scratch scr = {0};
    rng_t rng;
    rng_seed(&rng, seed);
    bo.n_threads = threads;
    if (target_open(&t, model_path, &bo)) {
        if (strcmp(model_path, target_default_path()) == 0 && strstr(ds_errmsg(), "not found"))
            ds_error_prefix("the default model is fetched by `make model`");
        return -1;
    }
    DS_CHECK(t.has_tokenizer, "%s: the model has no tokenizer; generate needs a GGUF model", model_path);
    chat_template ct = t.ct;
    if (raw) ct.family = 0;
    chat_msg msgs[2];
    int nm = 0;
    if (system) msgs[nm++] = (chat_msg){"system", system};
    msgs[nm++] = (chat_msg){"user", prompt};
    DS_TRY(chat_encode(&ct, &t.tk, msgs, nm, 1, &ids));
    if (show_prompt) {
        char *txt = tokenizer_decode(&t.tk, ids.v, ids.n, 1);
        fprintf(stderr, "--- prompt (%d tokens) ---\n%s\n---\n", ids.n, txt ? txt : "");
        free(txt);
    }
    DS_CHECK(ids.n > 0, "the prompt is empty");
    int V = t.m.cfg.vocab_size;
    DS_TRYP(kv = kv_cache_new(t.be, &t.m.cfg, DS_MIN(ids.n + max_new, t.m.cfg.max_seq)));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)V, "logits"));
    DS_TRYP(probs = ds_malloc(sizeof(float) * (size_t)V, "probs"));

    double t0 = ds_now();
    DS_TRY(model_forward_one(&t.m, &t.fs, kv, ids.v, ids.n, 0, logits));
    double t1 = ds_now();
    int n_gen = 0;
    char piece[256];
    const char *why = "the token budget (--max-new-tokens)";
    DS_CHECK(ids.n < t.m.cfg.max_seq, "the prompt (%d tokens) fills the model's context of %d tokens", ids.n, t.m.cfg.max_seq);
    while (n_gen < max_new) {
        DS_TRY(logits_process(logits, V, &sp, probs, &scr));
        int tok = rng_draw(&rng, probs, V);
        DS_CHECK(tok >= 0, "sampling failed");
        n_gen++;
        if (tokenizer_is_eog(&t.tk, tok)) {
            why = "an end-of-generation token";
            break;
        }
        int w = tokenizer_piece(&t.tk, tok, 0, piece, sizeof piece);
        if (w > 0) fwrite(piece, 1, (size_t)w, stdout);
        fflush(stdout);
        if (n_gen == max_new) break;
        if (kv->len >= t.m.cfg.max_seq) {
            why = "THE MODEL'S CONTEXT LIMIT (the output is cut short)";
            break;
        }
        DS_TRY(model_forward_one(&t.m, &t.fs, kv, &tok, 1, 0, logits));
    }
    double t2 = ds_now();
    printf("\n");
    fprintf(stderr, "[prompt %d tokens, prefill %.1f tok/s | generated %d tokens, %.1f tok/s | %d threads | stopped at %s]\n",
            ids.n, ids.n / (t1 - t0), n_gen, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0, t.be->n_threads, why);
    rc = 0;
    goto done;
fail:
    rc = -1;
done:
    lp_scratch_free(&scr);
    free(logits);
    free(probs);
    if (kv) kv_cache_free(t.be, kv);
    ivec_free(&ids);
    target_close(&t);
    return rc;
}
