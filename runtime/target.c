#include "target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "model/models.h"

const char *target_default_path(void) {
    static char buf[4200];
    const char *env = getenv("DSPARK_MODEL");
    if (env && *env) return env;
    snprintf(buf, sizeof buf, "%s/%s", model_cache_dir(), model_name_nth(0)->file); /* smollm2-135m */
    return buf;
}

int target_open(target *t, const char *path, const backend_opts *bo) {
    memset(t, 0, sizeof *t);
    DS_TRY(model_load(&t->m, path));
    if (t->m.format == 0 && gguf_get(&t->m.gguf, "tokenizer.ggml.model")) {
        DS_TRY(tokenizer_load_gguf(&t->tk, &t->m.gguf));
        t->has_tokenizer = 1;
        DS_CHECK(t->tk.n_vocab == t->m.cfg.vocab_size, "%s: tokenizer has %d tokens but the embedding has %d rows", path,
                 t->tk.n_vocab, t->m.cfg.vocab_size);
        DS_TRY(chat_template_init(&t->ct, &t->tk));
    }
    DS_TRYP(t->be = backend_new(bo));
    DS_TRY(t->be->prepare(t->be, &t->m));
    DS_TRY(fwd_state_init(&t->fs, t->be));
    return 0;
fail:
    target_close(t);
    return -1;
}

void target_close(target *t) {
    if (t->be) fwd_state_free(&t->fs);
    backend_free(t->be);
    chat_template_free(&t->ct);
    if (t->has_tokenizer) tokenizer_free(&t->tk);
    model_free(&t->m);
    memset(t, 0, sizeof *t);
}
