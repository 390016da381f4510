/* models.c — see models.h. The table mirrors scripts/fetch_model.py's (test_models checks it). */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/common.h"

/* the embedded default first; the wheels each comes from are in scripts/fetch_model.py */
static const model_name MODELS[] = {
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432LL,
     "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
    {"qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768LL,
     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"},
    {"qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064LL,
     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"},
};
#define N_MODELS (int)(sizeof MODELS / sizeof *MODELS)

const model_name *model_name_nth(int i) { return i >= 0 && i < N_MODELS ? &MODELS[i] : NULL; }

const char *model_names(void) {
    static char buf[256];
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < N_MODELS && w < sizeof buf; i++)
        w += (size_t)snprintf(buf + w, sizeof buf - w, "%s%s", i ? ", " : "", MODELS[i].name);
    return buf;
}

const char *model_cache_dir(void) {
    static char buf[4096];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/dspark-bench", xdg);
    else snprintf(buf, sizeof buf, "%s/.cache/dspark-bench", home && *home ? home : ".");
    return buf;
}

int model_resolve(const char *name_or_path, char *out, size_t cap, const model_name **named) {
    *named = NULL;
    DS_CHECK(name_or_path && *name_or_path, "empty model name or path (known names: %s)", model_names());
    for (int i = 0; i < N_MODELS; i++) {
        if (strcmp(name_or_path, MODELS[i].name) != 0) continue;
        int w = snprintf(out, cap, "%s/%s", model_cache_dir(), MODELS[i].file);
        DS_CHECK(w > 0 && (size_t)w < cap, "model '%s': the cache path is too long", MODELS[i].name);
        struct stat st;
        DS_CHECK(stat(out, &st) == 0, "model '%s' is not in the cache (%s): fetch it with `make model MODEL=%s` (%.1f MB)",
                 MODELS[i].name, out, MODELS[i].name, MODELS[i].size / 1e6);
        DS_CHECK((long long)st.st_size == MODELS[i].size,
                 "model '%s': %s has %lld bytes, not %lld (an interrupted copy? `make model MODEL=%s` checks and fetches it)",
                 MODELS[i].name, out, (long long)st.st_size, MODELS[i].size, MODELS[i].name);
        *named = &MODELS[i];
        return 0;
    }
    int w = snprintf(out, cap, "%s", name_or_path);
    DS_CHECK(w >= 0 && (size_t)w < cap, "model path too long: %.80s...", name_or_path);
    return 0;
fail:
    return -1;
}
