/* contract.c — a learned drafter's checkpoint contract (contract.h). */
#include "contract.h"

#include <stdio.h>
#include <string.h>

#include "../runtime/base/common.h"

void contract_init(draft_contract *k, const model *target) {
    memset(k, 0, sizeof *k);
    snprintf(k->target_fingerprint, sizeof k->target_fingerprint, "%s", target->fingerprint);
}

int contract_read(jcfg *r, draft_contract *k) {
    DS_TRY(jcfg_strcpy(r, "target_fingerprint", k->target_fingerprint, sizeof k->target_fingerprint));
    DS_TRY(jcfg_strcpy(r, "chat_template", k->chat_template, sizeof k->chat_template));
    DS_TRY(jcfg_strcpy(r, "tokenizer", k->tokenizer, sizeof k->tokenizer));
    DS_TRY(jcfg_int(r, "draft_vocab", 0, 1 << 24, &k->draft_vocab));
    DS_TRY(jcfg_strcpy(r, "vocab_hash", k->vocab_hash, sizeof k->vocab_hash));
    DS_TRY(jcfg_floats(r, "calibration", CONTRACT_MAX_CALIB, 0, 1e6, k->calib, &k->n_calib)); /* temperatures */
    return 0;
fail:
    return -1;
}

int contract_check_target(draft_contract *k, const model *target, int vocab, const char *what) {
    DS_CHECK(strcmp(k->target_fingerprint, target->fingerprint) == 0,
             "%s: trained against target %s, but the target is %s", what, k->target_fingerprint, target->fingerprint);
    if (k->draft_vocab >= vocab) k->draft_vocab = 0; /* the whole vocabulary */
    return 0;
fail:
    return -1;
}

void contract_json(cJSON *j, const draft_contract *k) {
    cJSON_AddStringToObject(j, "target_fingerprint", k->target_fingerprint);
    if (k->chat_template[0]) cJSON_AddStringToObject(j, "chat_template", k->chat_template);
    if (k->tokenizer[0]) cJSON_AddStringToObject(j, "tokenizer", k->tokenizer);
    if (k->draft_vocab) { /* absent: the whole vocabulary (as checkpoints before draft vocabularies have it) */
        cJSON_AddNumberToObject(j, "draft_vocab", k->draft_vocab);
        cJSON_AddStringToObject(j, "vocab_hash", k->vocab_hash);
    }
    cJSON *cal = cJSON_AddArrayToObject(j, "calibration");
    for (int i = 0; i < k->n_calib; i++) cJSON_AddItemToArray(cal, cJSON_CreateNumber(k->calib[i]));
}

void contract_stamp(draft_contract *k, const target *t) {
    if (!t->has_tokenizer) return;
    snprintf(k->chat_template, sizeof k->chat_template, "%s", chat_family_name(&t->ct));
    tokenizer_fingerprint(&t->tk, k->tokenizer);
}

int contract_check_serving(const draft_contract *k, const target *t, const char *what) {
    if (!t->has_tokenizer || (!k->chat_template[0] && !k->tokenizer[0])) return 0;
    char tf[20];
    tokenizer_fingerprint(&t->tk, tf);
    DS_CHECK(!k->tokenizer[0] || strcmp(tf, k->tokenizer) == 0,
             "%s: trained with tokenizer %s, but the target's tokenizer is %s", what, k->tokenizer, tf);
    DS_CHECK(!k->chat_template[0] || strcmp(chat_family_name(&t->ct), k->chat_template) == 0,
             "%s: trained with chat_template '%s', but the target's is '%s'", what, k->chat_template,
             chat_family_name(&t->ct));
    return 0;
fail:
    return -1;
}

int contract_vocab_set(const draft_contract *k, subvocab *sv, int V, const int *ids, const char *what) {
    DS_CHECK(!k->draft_vocab || ids, "%s: a draft vocabulary of %d needs its ids (a checkpoint's vocab.ids)", what,
             k->draft_vocab);
    return subvocab_set(sv, V, ids, contract_rows(k, V), k->vocab_hash);
fail:
    return -1;
}

void contract_weights_tag(const draft_contract *k, const float *params, size_t n, char *fp, size_t cap) {
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)params;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 0x100000001b3ull;
    p = (const unsigned char *)k->calib;
    for (size_t i = 0; i < (size_t)k->n_calib * sizeof(float); i++) h = (h ^ p[i]) * 0x100000001b3ull;
    for (const char *s = k->vocab_hash; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    size_t l = strlen(fp);
    snprintf(fp + l, cap - l, "-w%016llx", (unsigned long long)h);
}

int contract_vocab_read(const draft_contract *k, subvocab *sv, int V, const char *path) {
    return subvocab_read(sv, path, V, contract_rows(k, V), k->vocab_hash);
}
