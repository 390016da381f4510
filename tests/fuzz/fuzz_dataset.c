/* fuzz_dataset — libFuzzer target for the dataset loaders: the bytes as a .jsonl file and as a .json
 * file, read strictly and with skip_bad_lines. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../datasets/datasets.h"

static void load(const uint8_t *data, size_t size, const char *ext) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/dsb-fuzz-%d%s", (int)getpid(), ext);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, size, f);
    fclose(f);
    for (int skip = 0; skip < 2; skip++) {
        prompt_set s;
        if (dataset_load(path, NULL, 0, skip, &s) == 0) prompt_set_free(&s);
    }
    remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size, ".jsonl");
    load(data, size, ".json");
    return 0;
}
