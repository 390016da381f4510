/* lossless_real.h — the real-model part of the losslessness gate (not run in CI). */
#ifndef DS_LOSSLESS_REAL_H
#define DS_LOSSLESS_REAL_H

#include <stdint.h>

#include "../verify/logits.h"

typedef struct {
    const char *model;
    int draws, draft_layers, gamma;
    sampling_params sp;
    uint64_t seed;
    int exact;          /* the target's matmul contract */
    const char *backend; /* NULL: cpu */
} real_opts;

/* 0: every two-sample test passes; 1: some test rejects; -1: error */
int lossless_real(const real_opts *o);

#endif
