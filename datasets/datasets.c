#include "datasets.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/base/common.h"

typedef struct {
    const char *name, *file, *field, *domain;
    const char *cats; /* NULL, or the records kept: their "category" is one of these (",a,b,") */
    int bundled;      /* the file comes with the project (datasets/prompts/), not from the data root */
} dataset_def;

/* The paper's prompt files where they exist (DeepSpec eval_datasets), per MANIFEST.md. */
static const dataset_def DATASETS[] = {
    {"gsm8k", "gsm8k/deepspec_gsm8k.jsonl", "turns", "math"},
    {"math500", "math500/deepspec_math500.jsonl", "turns", "math"},
    {"aime25", "aime25/deepspec_aime25.jsonl", "turns", "math"},
    {"mbpp", "mbpp/deepspec_mbpp.jsonl", "turns", "code"},
    {"humaneval", "humaneval/deepspec_humaneval.jsonl", "turns", "code"},
    {"livecodebench", "livecodebench/deepspec_livecodebench.jsonl", "turns", "code"},
    {"mtbench", "mtbench/question.jsonl", "turns", "chat"},
    {"alpaca", "alpaca/alpaca_eval_805.json", "instruction", "chat"},
    {"arenahard", "arenahard/deepspec_arena-hard-v2.jsonl", "turns", "chat"},
    {"trainmix", "trainmix/trainmix.jsonl", "turns", NULL /* per record: category */},
#define SB_MT ",writing,roleplay,reasoning,math,coding,extraction,stem,humanities,"
    /* Spec-Bench's six categories (its question.jsonl; multi-turn = the 80 MT-Bench questions, both turns) */
    {"sb-mt", "specbench/question.jsonl", "turns", "chat", SB_MT},
    {"sb-trans", "specbench/question.jsonl", "turns", "chat", ",translation,"},
    {"sb-sum", "specbench/question.jsonl", "turns", "chat", ",summarization,"},
    {"sb-qa", "specbench/question.jsonl", "turns", "chat", ",qa,"},
    {"sb-math", "specbench/question.jsonl", "turns", "math", ",math_reasoning,"},
    {"sb-rag", "specbench/question.jsonl", "turns", "chat", ",rag,"},
    /* the first 8 of each Spec-Bench category, carried by the project (datasets/prompts/PROVENANCE.md) so
     * the README's commands run on a machine with nothing but the clone */
    {"sbmini-mt", "specbench-mini.jsonl", "turns", "chat", SB_MT, 1},
    {"sbmini-trans", "specbench-mini.jsonl", "turns", "chat", ",translation,", 1},
    {"sbmini-sum", "specbench-mini.jsonl", "turns", "chat", ",summarization,", 1},
    {"sbmini-qa", "specbench-mini.jsonl", "turns", "chat", ",qa,", 1},
    {"sbmini-math", "specbench-mini.jsonl", "turns", "math", ",math_reasoning,", 1},
    {"sbmini-rag", "specbench-mini.jsonl", "turns", "chat", ",rag,", 1},
};
#define N_DATASETS (int)(sizeof DATASETS / sizeof *DATASETS)

static const struct {
    const char *domain, *text;
} BUILTIN[] = {
    {"math", "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain step by step."},
    {"math", "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
             "clips did Natalia sell altogether in April and May?"},
    {"math", "What is the sum of the first 20 positive odd numbers? Show your reasoning."},
    {"code", "Write a Python function that returns the n-th Fibonacci number using iteration."},
    {"code", "Write a C function that reverses a null-terminated string in place."},
    {"code", "Write a Python function that checks whether a string is a palindrome, ignoring case and spaces."},
    {"chat", "What are three tips for staying focused while studying?"},
    {"chat", "Explain in a few sentences why the sky is blue."},
    {"chat", "Write a short, friendly email inviting a colleague to lunch on Friday."},
};
#define N_BUILTIN (int)(sizeof BUILTIN / sizeof *BUILTIN)

const char *dataset_names(void) {
    return "gsm8k, math500, aime25, mbpp, humaneval, livecodebench, mtbench, alpaca, arenahard, trainmix, train20k, builtin, "
           "Spec-Bench's sb-mt, sb-trans, sb-sum, sb-qa, sb-math, sb-rag (under the data root), their first 8 prompts "
           "sbmini-mt, sbmini-trans, sbmini-sum, sbmini-qa, sbmini-math, sbmini-rag (with the project), or a .jsonl/.json path";
}

const char *dataset_default_root(void) {
    const char *env = getenv("DSPARK_DATA");
    return env && *env ? env : "../shared/datasets";
}

/* the project's own prompt files: beside the binary (build/../datasets/prompts; a test binary's is
 * one folder deeper), else under the working directory */
const char *dataset_bundled_dir(void) {
    static char dir[4200];
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = 0;
            struct stat st;
            snprintf(dir, sizeof dir, "%s/../datasets/prompts", exe);
            if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return dir;
        }
    }
    return "datasets/prompts";
}

void prompt_set_free(prompt_set *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->v[i].text);
        free(s->v[i].text2);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int push(prompt_set *s, const char *text, const char *text2, const char *dataset, const char *domain, int index) {
    if (s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 64;
        prompt *nv = ds_realloc(s->v, sizeof *nv * (size_t)nc, "prompts");
        if (!nv) return -1;
        s->v = nv;
        s->cap = nc;
    }
    prompt *p = &s->v[s->n];
    memset(p, 0, sizeof *p);
    p->text = ds_strndup(text, strlen(text), "prompt");
    p->text2 = text2 ? ds_strndup(text2, strlen(text2), "prompt") : NULL;
    if (!p->text || (text2 && !p->text2)) {
        free(p->text);
        free(p->text2);
        return -1;
    }
    snprintf(p->dataset, sizeof p->dataset, "%s", dataset);
    snprintf(p->domain, sizeof p->domain, "%s", domain);
    p->index = index;
    s->n++;
    return 0;
}

static const char *category_domain(const char *c) {
    if (!c) return "chat";
    if (strcmp(c, "math") == 0) return "math";
    if (strcmp(c, "code") == 0) return "code";
    return "chat";
}

/* the prompt of one record: a named field, or the first that exists of the usual ones. A list holds
 * one or two turns, all strings: a third turn or a number in the list was dropped without a word. */
static int record_prompt(const cJSON *rec, const char *field, const char **t1, const char **t2) {
    static const char *fields[] = {"turns", "prompt", "question", "problem", "instruction", "text"};
    *t1 = *t2 = NULL;
    for (int i = 0; i < 6; i++) {
        const char *f = field ? field : fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, f);
        if (field) i = 6;
        if (!v) continue;
        if (cJSON_IsString(v)) {
            *t1 = v->valuestring;
            return 0;
        }
        int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
        const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
        if ((k == 1 || k == 2) && cJSON_IsString(a) && (k == 1 || cJSON_IsString(b))) {
            *t1 = a->valuestring;
            if (k == 2) *t2 = b->valuestring;
            return 0;
        }
        return -1;
    }
    return -1;
}

static int problem(prompt_set *s, int skip_bad, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int problem(prompt_set *s, int skip_bad, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!skip_bad) {
        ds_error("%s (skip_bad_lines / --skip-bad-lines skips such lines and records how many)", msg);
        return -1;
    }
    fprintf(stderr, "warning: %s (skipped)\n", msg);
    s->skipped++;
    return 0;
}

static int add_record(prompt_set *out, const cJSON *rec, const dataset_def *def, const char *path, int line, int index,
                      int skip_bad) {
    const char *t1, *t2;
    if (!cJSON_IsObject(rec))
        return problem(out, skip_bad, "%s:%d: record is not a JSON object", path, line);
    if (def->cats) { /* a category subset of the file: other records are not ours (not an error) */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "category");
        char key[64];
        if (!cJSON_IsString(c)) return problem(out, skip_bad, "%s:%d: no 'category' string", path, line);
        snprintf(key, sizeof key, ",%.60s,", c->valuestring);
        if (!strstr(def->cats, key)) return 0;
    }
    if (record_prompt(rec, def->field, &t1, &t2) || !*t1 || (t2 && !*t2))
        return problem(out, skip_bad, "%s:%d: no non-empty '%s' prompt field (a string, or a list of one or two strings)", path,
                       line, def->field ? def->field : "turns/prompt/question/...");
    const char *domain = def->domain;
    if (!domain) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(rec, "category");
        domain = category_domain(cJSON_IsString(c) ? c->valuestring : NULL);
    }
    return push(out, t1, t2, def->name, domain, index);
}

static int load_file(const dataset_def *def, const char *path, int limit, int skip_bad, prompt_set *out) {
    char *txt;
    size_t n;
    if (ds_read_file(path, &txt, &n)) {
        ds_error_prefix("dataset '%s'", def->name);
        return -1;
    }
    int rc = 0, index = 0;
    size_t i = 0;
    while (i < n && (txt[i] == ' ' || txt[i] == '\n' || txt[i] == '\r' || txt[i] == '\t')) i++;
    if (i < n && txt[i] == '[') { /* one JSON array of records */
        size_t stop;
        int why;
        cJSON *arr = ds_json_parse(txt, n, &stop, &why);
        if (!arr || !cJSON_IsArray(arr)) {
            if (arr || why == DS_JSON_BAD) ds_error("%s: not a valid JSON array of records", path);
            else ds_error("%s: %s at byte %zu", path, ds_json_why(why), stop);
            cJSON_Delete(arr);
            free(txt);
            return -1;
        }
        for (const cJSON *rec = arr->child; rec && rc == 0 && (limit <= 0 || out->n < limit); rec = rec->next, index++)
            rc = add_record(out, rec, def, path, index + 1, index, skip_bad);
        cJSON_Delete(arr);
        free(txt);
        return rc;
    }
    /* JSONL: records separated by '\n' only (a raw U+2028 inside a string is not a line break) */
    int line = 0;
    for (size_t start = 0; start < n && rc == 0 && (limit <= 0 || out->n < limit);) {
        char *nl = memchr(txt + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - txt) : n;
        line++;
        size_t a = start, b = end;
        while (a < b && (txt[a] == ' ' || txt[a] == '\t' || txt[a] == '\r')) a++;
        while (b > a && (txt[b - 1] == ' ' || txt[b - 1] == '\t' || txt[b - 1] == '\r')) b--;
        if (b > a) {
            size_t stop;
            int why;
            cJSON *rec = ds_json_parse(txt + a, b - a, &stop, &why);
            if (!rec && why != DS_JSON_BAD) /* two records glued on a line, or a prompt a NUL would cut short */
                rc = problem(out, skip_bad, "%s:%d: %s at column %zu (one JSON record a line)", path, line, ds_json_why(why),
                             a - start + stop + 1);
            else if (!rec) rc = problem(out, skip_bad, "%s:%d: malformed or truncated JSON line", path, line);
            else rc = add_record(out, rec, def, path, line, index, skip_bad);
            cJSON_Delete(rec);
            index++;
        }
        start = end + 1;
    }
    free(txt);
    return rc;
}

/* where a named set's file lies: under root, or with the project for the bundled ones */
static void def_path(const dataset_def *def, const char *root, char *path, size_t n) {
    snprintf(path, n, "%s/%s", def->bundled ? dataset_bundled_dir() : root, def->file);
}

int dataset_present(const char *name, const char *root) {
    if (!root) root = dataset_default_root();
    for (int i = 0; i < N_DATASETS; i++) {
        if (strcmp(name, DATASETS[i].name) != 0) continue;
        char path[4200];
        struct stat st;
        def_path(&DATASETS[i], root, path, sizeof path);
        return stat(path, &st) == 0;
    }
    return 0;
}

int dataset_load(const char *name, const char *root, int limit, int skip_bad, prompt_set *out) {
    memset(out, 0, sizeof *out);
    if (!root) root = dataset_default_root();
    if (strcmp(name, "builtin") == 0) {
        for (int i = 0; i < N_BUILTIN && (limit <= 0 || out->n < limit); i++)
            if (push(out, BUILTIN[i].text, NULL, "builtin", BUILTIN[i].domain, i)) goto fail;
        return 0;
    }
    if (strcmp(name, "train20k") == 0) return trainset_load(root, out);
    for (int i = 0; i < N_DATASETS; i++) {
        if (strcmp(name, DATASETS[i].name) != 0) continue;
        char path[4200];
        def_path(&DATASETS[i], root, path, sizeof path);
        if (load_file(&DATASETS[i], path, limit, skip_bad, out)) {
            struct stat st;
            if (!DATASETS[i].bundled && strncmp(name, "sb-", 3) == 0 && stat(root, &st) != 0)
                ds_error("dataset '%s': the data root %s is missing (--data-root or $DSPARK_DATA names it); the "
                         "project carries this set's first 8 prompts as 'sbmini-%s'", name, root, name + 3);
            goto fail;
        }
        return 0;
    }
    size_t nl = strlen(name);
    if ((nl > 6 && strcmp(name + nl - 6, ".jsonl") == 0) || (nl > 5 && strcmp(name + nl - 5, ".json") == 0)) {
        const char *base = strrchr(name, '/');
        static char label[32];
        snprintf(label, sizeof label, "%.*s", (int)(strcspn(base ? base + 1 : name, ".")), base ? base + 1 : name);
        dataset_def def = {label, name, NULL, NULL, NULL}; /* domain from a "category" field, else chat */
        if (load_file(&def, name, limit, skip_bad, out)) goto fail;
        return 0;
    }
    ds_error("unknown dataset '%s' (known: %s)", name, dataset_names());
    return -1;
fail:
    prompt_set_free(out);
    return -1;
}
