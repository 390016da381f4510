/* enumerate.h — exact enumeration of a randomised program by replay (the losslessness gate).
 *
 * Attach a draw_enum to the program's random streams (rng_t.en) and run the program once per
 * path: every draw (rng_draw, rng_draw_d, rng_accept) takes the branch the enumerator dictates and
 * multiplies the path's probability by that branch's probability, computed from the very law the
 * program handed to the draw. draw_enum_next() then moves to the next path (depth first, the last
 * undecided draw first) until every branch of positive probability has been run once. The
 * program must be deterministic given its draws; a replay that disagrees is reported.
 *
 *     draw_enum e; draw_enum_init(&e);
 *     do { draw_enum_begin(&e); reset(); attach(&e); run(); law[outcome] += e.weight; }
 *     while (draw_enum_next(&e) > 0);  (check draw_enum_end(&e) after each run)
 *
 * Each frame also keeps the normalised law of its draw (laws[]), so a caller can compare what a
 * drafter sampled from with what it reported. */
#ifndef DS_ENUMERATE_H
#define DS_ENUMERATE_H

#include "../runtime/sampling.h"

#define DRAW_ENUM_MAX_OPT 256 /* branches of one draw (the gate's vocabularies are small) */

typedef struct {
    int kind;                      /* 0 categorical, 1 accept test */
    int n;                         /* size of the law drawn from */
    int n_opt, pick;               /* branches of positive probability, the one taken */
    int opt[DRAW_ENUM_MAX_OPT];    /* their indices */
    long double w[DRAW_ENUM_MAX_OPT]; /* their probabilities */
} draw_frame;

typedef struct draw_enum {
    rng_branches hooks;            /* what a stream's rng_t.en points at (set by draw_enum_init) */
    draw_frame *f;
    int n, cap, depth;
    long double weight;            /* probability of the current path so far */
    long paths;                    /* runs completed */
    int error;                     /* a replay mismatch or a draw the enumerator cannot branch */
} draw_enum;

int draw_enum_init(draw_enum *e);
void draw_enum_free(draw_enum *e);
void draw_enum_begin(draw_enum *e);      /* before each run */
int draw_enum_end(draw_enum *e);         /* after each run: -1 if the run did not replay its path */
int draw_enum_next(draw_enum *e);        /* 1: another path to run; 0: done */

#endif
