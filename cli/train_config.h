/* train_config.h — a training config file, read strictly (jcfg): the target, the drafter object,
 * the data options and the training options. Pointers refer into the cJSON tree. */
#ifndef DS_TRAIN_CONFIG_H
#define DS_TRAIN_CONFIG_H

#include <cJSON.h>

#include "../datasets/traindata.h"
#include "../engine/train.h"

typedef struct {
    const char *target;          /* NULL: the embedded default */
    const cJSON *drafter;        /* {"name": kind, architecture...} */
    const cJSON *drafter_name;
    const char *cache;           /* data cache folder (may start with ~) */
    traindata_opts data;         /* dir left NULL: the caller expands cache */
    train_opts train;            /* out from "out" (may be NULL) */
} train_config;

int train_config_parse(const cJSON *cfg, const char *path, train_config *tc);

#endif
