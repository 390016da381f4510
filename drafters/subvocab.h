/* subvocab.h — a drafter's draft vocabulary (FR-Spec style), one definition for every family with a
 * head over the target's vocabulary (DFlash, DSpark, Medusa, MTP): the Vd target ids its head
 * covers, chosen from the training cache (draft_vocab.h). The draft's q is 0 outside them,
 * so verification stays exact; the drafter simply cannot propose the other tokens. A checkpoint
 * stores the ids as the tensor "vocab.ids" (fp32, exact below 2^24) and their hash in its config.
 * Vd == V with vid == NULL is the whole vocabulary: every function then does the plain thing. */
#ifndef DS_SUBVOCAB_H
#define DS_SUBVOCAB_H

#include <cJSON.h>
#include <stdint.h>

#include "../runtime/formats/quant.h"
#include "../runtime/formats/safetensors.h"

typedef struct {
    int V, Vd;      /* the target's vocabulary; the draft's rows */
    int *vid;       /* [Vd] the target id of draft row j (NULL: the whole vocabulary) */
    int *vmap;      /* [V] the draft row of target id v, -1 outside */
    char hash[20];  /* FNV-1a of the ids, hex ("" for the whole vocabulary) */
    uint8_t *rows;  /* the target head's rows of the subset, in the file's own format */
    qmat head;      /* what the drafter runs: those rows, or the target's head itself */
} subvocab;

/* The whole vocabulary of V tokens. */
void subvocab_full(subvocab *s, int V);
/* ids[0..Vd) (distinct, in 0..V); Vd >= V or ids == NULL means the whole vocabulary. A recorded
 * hash ("" or NULL: none) must match the ids' own. -1 with a message naming the bad id. */
int subvocab_set(subvocab *s, int V, const int *ids, int Vd, const char *recorded_hash);
/* Vd ids with no data: every control, user-defined, byte and end-of-generation token (what any
 * output may need; -1 when they alone are more than Vd), then the lowest remaining ids. A byte-level BPE numbers its tokens in the order
 * its merges were learned, most frequent pair first, so the low ids are the tokenizer corpus's
 * common pieces: FR-Spec's frequency ranking without a cache, for a separate draft LM. */
struct tokenizer;
int subvocab_by_rank(subvocab *s, const struct tokenizer *tk, int V, int Vd);
/* 1 when every draft vocabulary keeps token v: control, user-defined, byte or end-of-generation
 * (what any output may need) */
int subvocab_pinned(const struct tokenizer *tk, int v);
/* the gathered head re-quantized to type (GGML_Q5_0 or GGML_Q4_1) row by row from its dequantized
 * values: a smaller draft head to stream (the draft's q is what it computes, so verification stays
 * exact; only acceptance can change) */
int subvocab_requant_head(subvocab *s, uint32_t type);
/* the ids from a checkpoint's "vocab.ids" tensor (path: its safetensors file), then subvocab_set */
int subvocab_read(subvocab *s, const char *path, int V, int Vd, const char *recorded_hash);
/* 0 when the checkpoint file at path drafts over exactly s's vocabulary (or s is the whole one) */
int subvocab_check_file(const subvocab *s, const char *path);
/* the ids as floats for "vocab.ids" (caller frees), NULL on failure */
float *subvocab_ids_f32(const subvocab *s);
/* A drafter's checkpoint in dir: model.safetensors from w[0..nw) (fp32; w has room for one more
 * entry, the draft vocabulary's "vocab.ids" when s has ids) and config.json from config (consumed),
 * each written atomically. */
int subvocab_write_checkpoint(const subvocab *s, const char *dir, st_write_tensor *w, int nw, cJSON *config);
/* The inverse: the tensors w[0..nw) (their names, ranks and shapes) read from dir/model.safetensors
 * into w[i].data (the model's own fp32 parameters); -1 naming a missing tensor or a wrong shape, or a
 * draft vocabulary other than s's. */
int subvocab_read_checkpoint(const subvocab *s, const char *dir, const st_write_tensor *w, int nw);
/* head = the target's output matrix restricted to the subset (rows gathered in its own format) */
int subvocab_gather_head(subvocab *s, const qmat *output);
/* Eh[j] = E[vid[j]] for fp32 rows of D (training's frozen head); a copy of E when whole */
void subvocab_gather_f32(const subvocab *s, const float *E, int D, float *Eh);
/* full[V] = sub[Vd] on the subset's ids, 0 elsewhere */
void subvocab_scatter(const subvocab *s, const float *sub, float *full);
/* the ids of a JSON array (the untrained drafters' "vocab_ids", for tests and the gate), at most
 * max of them; -1 with a message naming the entry */
int subvocab_json_ids(const cJSON *arr, int *ids, int max, int *n);
/* The training step's fp32 copies of the target's frozen tables: *Ein the embedding [V][dim] (skipped
 * when Ein is NULL), *E the head's rows over s [Vd][dim] (*E == *Ein for a tied head over the whole
 * vocabulary; the caller frees both, *E only when it differs). */
struct model;
int subvocab_frozen_f32(const subvocab *s, const struct model *target, float **Ein, float **E);
/* dir/config.json of a drafter checkpoint whose "kind" is kind (the caller deletes it), or NULL with a
 * message naming the file and the kind it has */
cJSON *subvocab_read_config(const char *dir, const char *kind);
void subvocab_free(subvocab *s);
void subvocab_hash(const int *ids, int n, char out[20]);

#endif
