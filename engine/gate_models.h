/* gate_models.h — losslessness-gate cases whose distributions come from the real drafter and
 * target modules (DFlash, DSpark-Markov, DSpark-RNN on a tiny random target). */
#ifndef DS_GATE_MODELS_H
#define DS_GATE_MODELS_H

#include "../verify/lossless.h"

/* exact enumeration (every scheduler the drafter supports, T = 1 and T = 0.7 with top-p) and KS
 * with `draws` samples at T = 1; records are appended to rep */
#define GATE_MODEL_KS_TESTS 3 /* one KS test per drafter kind */
int gate_model_cases(gate_report *rep, long draws, double alpha_each);

#endif
