/* report_curve.h — `report --train-curve RUN_DIR ...`: the held-out τ proxy of training runs
 * against supervised positions seen (from each run's train_log.jsonl and eval_log.jsonl), as a
 * table and a gnuplot figure. */
#ifndef DS_REPORT_CURVE_H
#define DS_REPORT_CURVE_H

#include <stdio.h>

/* -1 with the file and line named when a log is missing or malformed. plot_dir may be NULL; link is
 * how the report links the plot folder (plot_link_dir; NULL = the path as given). */
int report_train_curve(FILE *o, const char **runs, int n, const char *plot_dir, const char *link);

#endif
