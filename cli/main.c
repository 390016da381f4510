/* main.c — dspark-bench entry point: dispatch to a subcommand, turn its error into one line on
 * stderr and a non-zero exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/base/common.h"
#include "../runtime/base/cpu_features.h"
#include "args.h"
#include "commands.h"

char *openblas_get_corename(void); /* OpenBLAS extension */

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command COMMANDS[] = {
    {"info", cmd_info, "describe a model file: architecture, sizes, tensor types, tokenizer, chat template"},
    {"generate", cmd_generate, "chat generation with the target model (streams text, tok/s on stderr)"},
    {"score", cmd_score, "token ids, teacher-forced top-k logits and greedy continuations of given sequences (JSON lines)"},
    {"bench-target", cmd_bench_target, "benchmark the target runtime: prefill, decode, SPS(B) curve (JSON)"},
    {"bench-train", cmd_bench_train, "training throughput of a config, side by side with the reference path"},
    {"run", cmd_run, "an experiment: baseline and speculative decoding on benchmark prompts, HDF5 trace"},
    {"serve", cmd_serve, "serving simulation: arrivals, continuous batching, throughput vs per-user speed per scheduler"},
    {"report", cmd_report, "Markdown tables (and gnuplot plots) from one or more traces"},
    {"train", cmd_train, "train a learned drafter (the trainable families below) against the frozen target"},
    {"calibrate", cmd_calibrate, "Sequential Temperature Scaling of a drafter's confidences from a trace (writes the checkpoint)"},
    {"lossless", cmd_lossless, "the losslessness gate: exact enumeration, chi-square, KS, negative controls"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof *COMMANDS)

static void usage(FILE *f) {
    fprintf(f, "usage: dspark-bench COMMAND [options]   (dspark-bench COMMAND --help for its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n");
    args_registries(f);
}

int main(int argc, char **argv) {
    const char *core = cpu_blas_core_override();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) { /* start again with the kernels this CPU runs */
        execv("/proc/self/exe", argv);
        fprintf(stderr, "dspark-bench: OpenBLAS runs its %s kernels here (set OPENBLAS_CORETYPE=%s to use the wide ones)\n",
                openblas_get_corename(), core);
        unsetenv("OPENBLAS_CORETYPE");
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(argv[1], COMMANDS[i].name) != 0) continue;
        if (COMMANDS[i].fn(argc - 2, argv + 2) != 0) {
            fflush(stdout);
            fprintf(stderr, "dspark-bench: error: %s\n", ds_errmsg());
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "dspark-bench: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
