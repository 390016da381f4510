/* fuzz_gguf — libFuzzer target for the GGUF reader, the decoders and the tokenizer loader.
 * Built and run by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined); seeds come from
 * tests/fuzz/make_seeds.py. Any crash, sanitizer report, leak or timeout is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/formats/gguf.h"
#include "../../runtime/formats/quant.h"
#include "../../runtime/text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file g;
    if (gguf_parse(&g, data, size, "fuzz.gguf") != 0) return 0;
    float buf[1024];
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.tensors[i];
        const ggml_type_info *ti = ggml_type_get(t->type);
        if (!ti->to_float || t->ne[0] == 0) continue;
        /* decode up to the first 1024 elements of the first row: within nbytes by construction */
        int64_t n = t->ne[0] < 1024 ? t->ne[0] : 1024 / ti->blck * ti->blck;
        if (n > 0 && (uint64_t)(n / ti->blck * ti->size) <= t->nbytes) ti->to_float(t->data, buf, n);
    }
    tokenizer tk;
    if (tokenizer_load_gguf(&tk, &g) == 0) {
        ivec ids = {0};
        static const char text[] = "Hello world's 123 <|im_start|> \xe4\xb8\xad\xe6\x96\x87  \n\n";
        if (tokenizer_encode(&tk, text, sizeof text - 1, 1, &ids) == 0) {
            char *s = tokenizer_decode(&tk, ids.v, ids.n, 1);
            free(s);
        }
        ivec_free(&ids);
        tokenizer_free(&tk);
    }
    gguf_close(&g);
    return 0;
}
