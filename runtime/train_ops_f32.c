/* train_ops_f32.c — the training ops in float (what drafters train with). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include "train_ops.h"

#include <tgmath.h>

#define REAL float
#define FN(name) name##_f
#define GEMM cblas_sgemm
#include "train_ops.inc"
