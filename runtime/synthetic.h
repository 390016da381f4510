/* synthetic.h — random timing models of real shapes made on the backend (see synthetic.c). */
#ifndef DS_SYNTHETIC_H
#define DS_SYNTHETIC_H

#include "backends/backend.h"
#include "model/model.h"

/* the known shapes, comma-separated */
const char *synthetic_names(void);
/* m: a model of the named shape with `type` matrices (tied head), whose weights be makes randomly
 * in its own memory (be->fill_random); m's host data are stand-ins, so only be can run it */
int model_synthetic(model *m, const char *name, uint32_t type, backend *be, uint64_t seed);

#endif
