/* fuzz_trace — libFuzzer target for the trace reader and `report` itself (our checks around HDF5:
 * the completion mark, attributes, every table's size and type, the recorded config, the metrics
 * and the report's tables). HDF5 itself is not instrumented; a crash inside it is a finding of the
 * library. The first finding was ours: report dereferenced config fields a lossless trace lacks.
 * Seeds: FUZZ_TRACE_SEEDS=DIR writes a run's trace with a row in every table (rounds, requests,
 * positions, confidences, tree nodes) there and exits: the lossless trace `make fuzz` also seeds with
 * has none of them, and a node depth or confidence position out of range crashed `report` until the
 * reader checked its rows. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../cli/commands.h"
#include "../../engine/trace.h"

static int write_seed(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/run.h5", dir);
    trace *t = trace_create(path);
    if (!t) return 1;
    int bad = trace_attr(t, "config", "{\"temperature\": 0, \"gamma\": 3, \"drafter\": {\"name\": \"recycling\"}}");
    for (int i = 0; i < 3; i++) {
        trace_round sp = {i, 0, MODE_SPEC, 4, 4, i, i + 1, 5, 100, 10, 900}, ar = {i, 0, MODE_AR, 0, 0, 0, 1, 1, 0, 0, 500};
        trace_request qs = {i, MODE_SPEC, "mtbench", "chat", i, 30, 8, 3, 1.0, 7 + i};
        trace_request qa = {i, MODE_AR, "mtbench", "chat", i, 30, 8, 7, 2.0, 7};
        trace_conf c = {i, 0, 1 + i, 0.5f, 0.5f, 0.75f, i & 1};
        trace_node n = {i, 0, i, 1 + i / 2, i & 1, 0.25f, i == 0, 0};
        trace_position p = {1 + i, 5, 4 - i};
        bad |= trace_add_round(t, &sp) | trace_add_round(t, &ar) | trace_add_request(t, &qs) | trace_add_request(t, &qa) |
               trace_add_conf(t, &c) | trace_add_node(t, &n) | trace_add_position(t, &p);
    }
    if (bad) {
        trace_abort(t);
        return 1;
    }
    return trace_close(t) ? 1 : 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("FUZZ_TRACE_SEEDS");
    if (dir) exit(write_seed(dir));
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
