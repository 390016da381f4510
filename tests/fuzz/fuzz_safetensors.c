/* fuzz_safetensors — libFuzzer target for the safetensors reader and the HF config.json loader:
 * the input is config.json text, a NUL byte, then a model.safetensors image; both are also parsed
 * on their own (st_parse on the image, every tensor converted). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../runtime/model/model.h"
#include "../../runtime/formats/safetensors.h"

static void put(const char *dir, const char *name, const uint8_t *p, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t cl = nul ? (size_t)(nul - data) : size;
    const uint8_t *img = nul ? nul + 1 : data + size;
    size_t il = size - cl - (nul ? 1 : 0);
    st_file f;
    if (st_parse(&f, img, il, "fuzz.safetensors") == 0) {
        float buf[256];
        for (int i = 0; i < f.n_tensors; i++)
            if (st_numel(&f.tensors[i]) <= 256) st_to_f32(&f, &f.tensors[i], buf);
        st_close(&f);
    }
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/dsb-fuzz-st-%d", (int)getpid());
    mkdir(dir, 0755);
    put(dir, "config.json", data, cl);
    put(dir, "model.safetensors", img, il);
    model m;
    if (model_load_safetensors(&m, dir) == 0) model_free(&m);
    return 0;
}
