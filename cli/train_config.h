/* train_config.h — a training config file, read strictly (jcfg): the target, the drafter object,
 * the data options and the training options. Pointers refer into the cJSON tree. */
#ifndef DS_TRAIN_CONFIG_H
#define DS_TRAIN_CONFIG_H

#include <cJSON.h>

#include "../datasets/traindata.h"
#include "../drafters/blockdraft.h"
#include "../drafters/medusa.h"
#include "../drafters/mtp.h"
#include "../drafters/vanilla_lm.h"
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
/* the cache folder with a leading ~ expanded (into buf) */
const char *train_config_expand_home(const char *p, char *buf, size_t n);
/* the drafter's architecture from the config (c), for a target */
int train_config_drafter(const train_config *tc, const target *t, bd_config *c);
/* the same for a Medusa drafter ("name": "medusa") */
int train_config_medusa(const train_config *tc, const target *t, md_config *c);
/* the same for an MTP module ("name": "mtp") */
int train_config_mtp(const train_config *tc, const target *t, mtp_config *c);
/* the same for the distilled small LM ("name": "vanilla") */
int train_config_vanilla(const train_config *tc, const target *t, vlm_config *c);
/* the draft vocabulary of Vd ids chosen from d (reported on stderr) into *ids (caller frees); NULL
 * when Vd is 0 or the whole vocabulary */
int train_config_vocab(const train_cache *d, const target *t, int Vd, int **ids);
/* a fresh drafter for training on d: its draft vocabulary chosen from d (and reported on stderr)
 * unless full_vocab; with a checkpoint in resume_dir (may be NULL), that checkpoint's model */
int train_drafter_new(const bd_config *c, const target *t, const train_cache *d, int full_vocab, uint64_t seed,
                      const char *resume_dir, bd_model *m);

#endif
