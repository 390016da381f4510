/* fuzz_config — libFuzzer target for every JSON config reader: the run config (file and command-line
 * merge), the train config, a drafter/checkpoint architecture object, every scheduler's settings, an
 * SPS table (bench-target --out) and its interpolation.
 * Any crash, sanitizer report or leak is a finding; errors are the expected outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../cli/config.h"
#include "../../cli/train_config.h"
#include "../../drafters/blockdraft.h"
#include "../../schedulers/scheduler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j) return 0;
    run_config rc;
    run_config_defaults(&rc);
    run_config_apply(&rc, j, "fuzz.json", 0);
    run_config_apply(&rc, j, "command line", 1); /* the merge path, on top of whatever the file set */
    cJSON *round = run_config_json(&rc);
    cJSON_Delete(round);
    run_config_free(&rc);
    train_config tc;
    train_config_parse(j, "fuzz.json", &tc);
    bd_config c;
    memset(&c, 0, sizeof c);
    c.n_heads = c.n_kv_heads = 1; /* bd_config_init's defaults for what the fuzz input leaves out */
    c.rank = 1;
    bd_config_from_json(&c, j, "fuzz.json");
    for (int i = 0; scheduler_nth(i); i++) {
        scheduler s;
        if (scheduler_open(&s, scheduler_nth(i)->name, j, 1) == 0) scheduler_close(&s);
    }
    sps_table sps;
    if (sps_from_json(&sps, j, "fuzz.json") == 0) {
        for (int b = 1; b <= 64; b++)
            if (!(sps_seconds(&sps, b) > 0)) __builtin_trap(); /* a checked table never prices a forward at zero */
        sps_free(&sps);
    }
    cJSON_Delete(j);
    return 0;
}
