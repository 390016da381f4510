/* train_family.h — how `train` and `bench-train` make a trainable family's model from the drafter
 * registry: a trainable drafter's ops point at one of these (drafter_ops.train), so a new trainable
 * family is its own files plus its registry line, and the commands name no family.
 *
 * A session: configure (the architecture from the config's drafter object, and the target layers the
 * data cache must tap), then init (the model to train on the built cache, its draft vocabulary chosen
 * from the cache, as a trainable for the loop), then release. The state is the family's own struct,
 * state_size bytes the caller zeroes. */
#ifndef DS_TRAIN_FAMILY_H
#define DS_TRAIN_FAMILY_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "../datasets/traindata.h"
#include "../runtime/target.h"
#include "trainable.h"

typedef struct train_family {
    size_t state_size;
    /* arch: the drafter object without "name"; name: the registered name (a file may serve several
     * families). taps[0..*n_tap): the layers its training reads (at most 8); *n_tap = 0: none (the
     * cache then keeps the last layer, so it serves the families that read it) */
    int (*configure)(void *st, const char *name, const cJSON *arch, const target *t, int *taps, int *n_tap);
    /* the model to train on the cache d: its draft vocabulary chosen from d (none with full_vocab), or,
     * where the family resumes that way, the checkpoint in resume_dir (NULL: none); tr: what the loop
     * runs; describe: one line about it for the log */
    int (*init)(void *st, const target *t, const train_cache *d, uint64_t seed, int full_vocab, const char *resume_dir,
                trainable *tr, char *describe, size_t n);
    void (*release)(void *st); /* what configure and init made (either may have failed) */
} train_family;

/* the draft vocabulary of Vd ids chosen from d for a fresh model, reported on stderr, into *ids
 * (the caller frees); NULL when Vd is 0, the whole vocabulary, or full_vocab */
int train_family_vocab(const train_cache *d, const target *t, int Vd, int full_vocab, int **ids);

#endif
