/* train_config.h — a training config file, read strictly (jcfg): the target, the drafter object,
 * the data options and the training options. Pointers refer into the cJSON tree. */
#ifndef DS_TRAIN_CONFIG_H
#define DS_TRAIN_CONFIG_H

#include <cJSON.h>

#include "../datasets/traindata.h"
#include "../drafters/blockdraft.h"
#include "../engine/train.h"

typedef struct {
    const char *target;          /* NULL: the embedded default */
    const cJSON *drafter;        /* {"name": kind, architecture...} */
    const cJSON *drafter_name;
    const struct train_family *family; /* the registry's: how this family trains (train_family.h) */
    const char *cache;           /* data cache folder (may start with ~) */
    traindata_opts data;         /* dir left NULL: the caller expands cache */
    train_opts train;            /* out from "out" (may be NULL) */
} train_config;

int train_config_parse(const cJSON *cfg, const char *path, train_config *tc);
/* the cache folder with a leading ~ expanded (into buf) */
const char *train_config_expand_home(const char *p, char *buf, size_t n);
/* the drafter object without its name: the family's architecture (the caller deletes it; NULL when
 * out of memory) */
cJSON *train_config_arch(const train_config *tc);
/* a block drafter's architecture from the config (c), for a target (bench-train) */
int train_config_drafter(const train_config *tc, const target *t, bd_config *c);

#endif
