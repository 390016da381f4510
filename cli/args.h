/* args.h — table-driven option parsing for the subcommands: "--name value" or "--name=value",
 * typed and range-checked; unknown options and bad values are errors that name the option. */
#ifndef DS_ARGS_H
#define DS_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum { OPT_INT, OPT_FLOAT, OPT_STR, OPT_FLAG, OPT_U64 } opt_type;

typedef struct {
    const char *name;    /* without the leading "--" */
    opt_type type;
    void *ptr;           /* int*, float*, const char**, int* (flag: set to 1), uint64_t* */
    const char *metavar;
    const char *help;
    double lo, hi;       /* numeric range (ignored when lo == hi == 0) */
    int *seen;           /* optional: set to 1 when given on the command line */
} opt_def;

#define OPT_END {0}

/* the backend options every command that runs a model takes (fills a backend_opts) */
#define OPT_BACKEND(bo)                                                                                              \
    {"backend", OPT_STR, &(bo).name, "NAME", "compute backend (default cpu)", 0, 0, 0},                             \
    {"exact", OPT_FLAG, &(bo).exact, NULL, "fp32 activations in every matmul (the reference contract; default int8)", \
     0, 0, 0},                                                                                                       \
    {"isa", OPT_STR, &(bo).isa, "PATH", "CPU kernel path: auto (default), scalar, avx2, avx512-vnni, avx512-amx", 0, 0, 0}

/* Returns 0 on success, 1 if --help was printed (exit 0), -1 on error (message set).
 * Positional arguments are collected into pos (up to max_pos). */
int args_parse(const char *cmd, const char *usage, const opt_def *opts, int argc, char **argv, const char **pos,
               int max_pos, int *n_pos);
void args_help(const char *cmd, const char *usage, const opt_def *opts);
/* the registered drafters, schedulers and backends by name (every --help ends with them) */
void args_registries(FILE *f);

#endif
