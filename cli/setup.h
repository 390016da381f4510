/* setup.h — what `run` and `serve` load from a resolved run config before they decode: the
 * prompt sets, the target with its tokenizer, the drafter (gamma within its training), and the
 * SPS(B) cost table. One place, so both commands check the same things with the same words. */
#ifndef DS_SETUP_H
#define DS_SETUP_H

#include "../datasets/datasets.h"
#include "../drafters/drafter.h"
#include "../runtime/target.h"
#include "../schedulers/scheduler.h"
#include "../engine/trace.h"
#include "config.h"

typedef struct {
    prompt_set *sets;
    int n_sets;
    int total;   /* prompts over all sets */
    int skipped; /* malformed lines skipped on request (skip_bad_lines) */
} run_prompts;

/* Every configured dataset; each must have a usable prompt. */
int run_prompts_load(const run_config *rc, run_prompts *p);
void run_prompts_free(run_prompts *p);

/* The target (a GGUF with a tokenizer) and, when one is configured, the drafter, with the
 * config's gamma no longer than the drafter was trained to draft. `cmd` names the command in errors. */
int run_models_open(const run_config *rc, const char *cmd, target *t, drafter *d);

/* The SPS(B) table: the configured file; else bench/bench-target.json when it exists; else, when
 * `needed`, a flat unit-cost table (one step per second at every batch); else left empty. */
/* The SPS(B) table: --sps FILE, else bench/bench-target.json where present. A table that records
 * another model's fingerprint is refused when named, and passed over (with a note, when the
 * scheduler prices rounds) when it is only the default; with none, a needed table is flat. */
int run_sps_load(const run_config *rc, int needed, const char *target_fingerprint, sps_table *sps);

/* A new trace at `path` (its folder made) with the root attributes every run writes: the resolved
 * config, target and drafter fingerprints, backend, kernels, version, seed. `scheduler`, when not
 * NULL, replaces the config's scheduler in the recorded config (serve: the arm that ran; JSON null
 * for the baseline). NULL with a message. */
trace *run_trace_open(const run_config *rc, const char *path, const target *t, const drafter *d, const cJSON *scheduler);

#endif
