/* blockdraft_f64.c — the training sequence forward/backward in double, for gradient checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/common.h"
#include "../runtime/train_ops.h"
#include "blockdraft.h"

#define REAL double
#define FN(name) name##_d
#define SEQ bd_seq_d
#include "blockdraft_train.inc"
