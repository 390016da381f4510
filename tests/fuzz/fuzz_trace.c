/* fuzz_trace — libFuzzer target for the trace reader and `report` itself (our checks around HDF5:
 * the completion mark, attributes, every table's size and type, the recorded config, the metrics
 * and the report's tables). HDF5 itself is not instrumented; a crash inside it is a finding of the
 * library. The first finding was ours: report dereferenced config fields a lossless trace lacks. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "../../cli/commands.h"
#include "../../engine/trace.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (!freopen("/dev/null", "w", stdout)) return 0; /* the report's tables */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/dsb-fuzz-trace-%d.h5", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    trace_data d;
    if (trace_read(path, &d) == 0) {
        trace_data_free(&d);
        char *argv[] = {"report", path, NULL};
        cmd_report(2, argv);
    }
    remove(path);
    return 0;
}
