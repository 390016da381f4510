/* target.h — a loaded target model ready to run: weights, tokenizer, chat template, backend and
 * forward scratch. Drafters, the decoding loop and the CLI all take one of these. */
#ifndef DS_TARGET_H
#define DS_TARGET_H

#include "backends/backend.h"
#include "forward.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct target {
    model m;
    tokenizer tk;
    int has_tokenizer;  /* GGUF models usually carry one; safetensors checkpoints do not */
    chat_template ct;
    backend *be;
    fwd_state fs;
} target;

/* The embedded default target: $DSPARK_MODEL, else <cache>/dspark-bench/SmolLM2-135M-Instruct.Q4_1.gguf
 * with <cache> = $XDG_CACHE_HOME or ~/.cache (where `make model` puts it). */
const char *target_default_path(void);

/* Load the model at path (GGUF or safetensors dir) onto the backend bo names (NULL: the CPU backend
 * on all cores, int8 contract). */
int target_open(target *t, const char *path, const backend_opts *bo);
void target_close(target *t);

#endif
