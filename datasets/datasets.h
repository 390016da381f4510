/* datasets.h — benchmark prompt sets: the nine evaluation sets and the training mix from
 * ../shared/datasets (fields per its MANIFEST.md), any JSONL/JSON file of prompts, and a few
 * built-in prompts per domain.
 *
 * A line that is not valid JSON, or lacks the prompt field, is reported as FILE:LINE on stderr and
 * an error naming the file and line, unless skip_bad (then skipped and counted). Each prompt carries its dataset name and domain. */
#ifndef DS_DATASETS_H
#define DS_DATASETS_H

typedef struct {
    char *text;       /* the first user turn */
    char *text2;      /* MT-Bench's second turn, or NULL */
    char dataset[32];
    char domain[16];  /* math, code, chat */
    int index;        /* position in the source file (0-based record number) */
} prompt;

typedef struct {
    prompt *v;
    int n, cap;
    int skipped;      /* malformed lines skipped (skip_bad) */
} prompt_set;

/* name: gsm8k math500 aime25 mbpp humaneval livecodebench mtbench alpaca arenahard trainmix
 * builtin, Spec-Bench's categories sb-mt sb-trans sb-sum sb-qa sb-math sb-rag (their first 8 prompts,
 * carried by the project: sbmini-mt ... sbmini-rag), or a path to a .jsonl / .json file (field: "turns"[0], "prompt", "question",
 * "problem", "instruction" or "text", whichever is present). root: the folder holding the shared
 * datasets (NULL: $DSPARK_DATA, else ../shared/datasets). limit <= 0: all. */
int dataset_load(const char *name, const char *root, int limit, int skip_bad, prompt_set *out);
void prompt_set_free(prompt_set *s);
/* the ~20k-prompt drafter training mix (trainsets.c; also dataset_load("train20k")) */
int trainset_load(const char *root, prompt_set *out);
/* drop every prompt equal, after normalisation, to a prompt of an evaluation set under root;
 * n_eval = evaluation prompts compared against */
int dataset_drop_eval_overlap(prompt_set *s, const char *root, int *n_eval, int *n_dropped);
/* 1 when the named set's file exists under root (NULL: the default root), whether or not it reads */
int dataset_present(const char *name, const char *root);
const char *dataset_default_root(void);
/* where the prompt files that come with the project are (datasets/prompts) */
const char *dataset_bundled_dir(void);
/* "known: ..." list for messages */
const char *dataset_names(void);

#endif
