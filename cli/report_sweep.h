/* report_sweep.h — the threshold sweep section of `report --threshold-sweep` (paper Fig. 5). */
#ifndef DS_REPORT_SWEEP_H
#define DS_REPORT_SWEEP_H

#include <stdio.h>

#include "../engine/trace.h"

int report_threshold_sweep(FILE *o, const trace_data *d);

#endif
