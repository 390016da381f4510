/* blockdraft_f64.c — the training sequence forward/backward in double, for gradient checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/train/train_ops.h"
#include "blockdraft.h"

#define REAL double
#define FN(name) name##_d
#define bd_train_seq_d bd_train_seq_d_
#define SEQ bd_seq_d
#include "blockdraft_train.inc"
#undef bd_train_seq_d

int bd_train_seq_d(const bd_config *c, const bd_tensor *tab, const double *params, const double *E, const double *Eh,
                   int Vd, const int *vmap, const bd_seq_d *s, double *grad, double norm, bd_stats *st) {
    bd_pv_d p, g;
    bd_ws_d w = {0};
    bd_pv_set_d(&p, c, tab, (double *)params);
    bd_pv_set_d(&g, c, tab, grad);
    int rc = bd_train_seq_d_(c, &p, grad ? &g : NULL, E, Eh, Vd, vmap, s, norm, st, &w);
    bd_ws_free_d(&w);
    return rc;
}
