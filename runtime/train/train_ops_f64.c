/* train_ops_f64.c — the same training ops in double, for finite-difference gradient checks. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include "train_ops.h"

#include <tgmath.h>

#define REAL double
#define FN(name) name##_d
#define GEMM cblas_dgemm
#include "train_ops.inc"
