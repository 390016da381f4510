/* fuzz_trace — libFuzzer target for the trace reader used by `report` (our checks around HDF5:
 * the completion mark, attributes, every table's size and type). HDF5 itself is not instrumented;
 * a crash inside it is reported as a finding of the library. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "../../engine/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/dsb-fuzz-trace-%d.h5", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    trace_data d;
    if (trace_read(path, &d) == 0) trace_data_free(&d);
    remove(path);
    return 0;
}
