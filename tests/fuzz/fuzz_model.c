/* fuzz_model — libFuzzer target for what a model file reaches after the GGUF reader: model_load
 * (the architecture's metadata, tensor shapes and types, the finite check) and, for a model small
 * enough, the CPU backend's packing and a forward of a few tokens in both contracts (int8 panels,
 * exact rows) with a KV cache reused across two calls. fuzz_gguf covers the reader and tokenizer
 * alone; the bugs this looks for live behind them (a block type's repacking, a head count the
 * attention cannot split, a shape that passes one check and not the next).
 * Seeds: FUZZ_MODEL_SEEDS=DIR fuzz_model writes tiny models of every family and block type there
 * and exits (make fuzz does). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../runtime/backends/backend.h"
#include "../../runtime/base/common.h"
#include "../../runtime/formats/quant.h"
#include "../../runtime/forward.h"
#include "../../runtime/model/model.h"
#include "../../runtime/tiny_model.h"

/* one layer, small dims: a seed is a few KB (K types need dims of 256: ~100-330 KB) */
static const tiny_spec SEEDS[] = {
    {64, 1, 4, 2, 96, 64, GGML_Q4_1, GGML_Q8_0, 0, 10000.0f, 0},       /* llama, SmolLM2's types */
    {64, 1, 4, 2, 96, 64, GGML_F32, GGML_F32, 0, 10000.0f, 0},
    {64, 1, 4, 1, 96, 64, GGML_Q8_0, GGML_Q8_0, 1, 1000000.0f, 0},     /* qwen3 */
    {64, 1, 4, 2, 96, 64, GGML_Q4_1, GGML_Q8_0, 2, 1000000.0f, 0},     /* qwen2 */
    {64, 1, 4, 2, 96, 64, GGML_Q5_0, GGML_Q8_0, 2, 1000000.0f, 0},     /* the 0.5B's Q5_0 */
    {256, 1, 2, 1, 256, 64, GGML_Q4_K, GGML_Q6_K, 2, 1000000.0f, 0},   /* the 1.5B's Q4_K, Q6_K */
    {256, 1, 2, 2, 256, 64, GGML_Q6_K, GGML_Q4_K, 0, 10000.0f, 0},
};

static int write_seeds(const char *dir) {
    for (size_t i = 0; i < sizeof SEEDS / sizeof SEEDS[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tiny%zu.gguf", dir, i);
        if (tiny_model_write(path, &SEEDS[i], 1 + i)) {
            fprintf(stderr, "fuzz_model: %s: %s\n", path, ds_errmsg());
            return 1;
        }
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FUZZ_MODEL_SEEDS");
    if (dir) exit(write_seeds(dir));
    return 0;
}

/* the forward's cost grows with these; past them only loading and the finite check run */
static int small(const model_config *c) {
    return c->dim <= 512 && c->hidden_dim <= 1024 && c->n_layers <= 2 && c->vocab_size <= 4096 &&
           c->n_heads * c->head_dim <= 1024;
}

static void forward(const model *m, int exact) {
    backend *be = backend_cpu_new(&(backend_opts){.n_threads = 1, .exact = exact});
    if (!be) return;
    fwd_state fs;
    if (fwd_state_init(&fs, be) == 0) {
        kv_cache *kv = kv_cache_new(be, &m->cfg, 8);
        int V = m->cfg.vocab_size;
        float *logits = malloc(sizeof(float) * 3 * (size_t)V);
        if (kv && logits) {
            int tk[3] = {0, V - 1, V / 2};
            if (model_forward_one(m, &fs, kv, tk, 3, 1, logits) == 0) /* a prefill, then one more token */
                (void)model_forward_one(m, &fs, kv, tk + 1, 1, 0, logits);
        }
        free(logits);
        if (kv) kv_cache_free(be, kv);
        fwd_state_free(&fs);
    }
    backend_free(be);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz.gguf", 0);
    if (fd < 0) return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    model m;
    if (off == size && model_load(&m, path) == 0) { /* model_load checks every weight finite */
        if (small(&m.cfg)) {
            forward(&m, 0);
            forward(&m, 1);
        }
        model_free(&m);
    }
    close(fd);
    return 0;
}
