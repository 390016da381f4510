/* test_datasets — prompt loading: malformed and truncated lines reported as FILE:LINE and skipped
 * (fatal with strict), JSON-array files, field detection, built-in prompts, unknown names, and
 * the ten shared sets (counts, domains, MT-Bench's second turn, a U+2028 kept inside a prompt). */
#include "testutil.h"

#include <ctype.h>

#include "../datasets/datasets.h"

static void test_malformed_lines(void **state) {
    (void)state;
    const char *p = tmp_path("prompts.jsonl");
    const char *body = "{\"prompt\": \"first\"}\n"
                       "{\"prompt\": \"second\", \"category\": \"code\"}\n"
                       "this is not json\n"
                       "\n"
                       "{\"other\": 1}\n"
                       "{\"turns\": [\"t1\", \"t2\"]}\n"
                       "{\"prompt\": \"cut off"; /* truncated last line, no newline */
    write_file(p, body, strlen(body));
    prompt_set s;
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), 0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.skipped, 3);
    assert_string_equal(s.v[0].text, "first");
    assert_string_equal(s.v[1].domain, "code");
    assert_string_equal(s.v[2].text, "t1");
    assert_string_equal(s.v[2].text2, "t2");
    assert_int_equal(s.v[2].index, 4); /* record number among non-empty lines */
    prompt_set_free(&s);
    /* by default the first problem is fatal and names the file and line (issue 11: it used to warn
     * and go on unless --strict) */
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), -1);
    char want[600];
    snprintf(want, sizeof want, "%s:3: malformed or truncated JSON line", p);
    if (!strstr(ds_errmsg(), want)) fail_msg("message \"%s\" lacks \"%s\"", ds_errmsg(), want);
    /* limit stops early */
    assert_int_equal(dataset_load(p, NULL, 2, 0, &s), 0);
    assert_int_equal(s.n, 2);
    prompt_set_free(&s);
    /* two records glued on one line: cJSON stops after the first value, so "x" was dropped and the
     * line counted as one good prompt; trailing blanks and a CRLF are fine */
    const char *glued = "{\"prompt\": \"a\"} \t\r\n  {\"prompt\": \"hi\"} {\"prompt\": \"x\"}\n{\"prompt\": \"b\"}\r\n"
                        "{\"prompt\": \"c\"}]\n";
    write_file(p, glued, strlen(glued));
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), -1);
    snprintf(want, sizeof want, "%s:2: text after the JSON value at column 20 (one JSON record a line)", p);
    if (!strstr(ds_errmsg(), want)) fail_msg("message \"%s\" lacks \"%s\"", ds_errmsg(), want);
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.skipped, 2); /* line 2 and line 4's stray ']' */
    assert_string_equal(s.v[0].text, "a");
    assert_string_equal(s.v[1].text, "b");
    prompt_set_free(&s);
    /* a \u0000 escape: the prompt's C string ended there ("abc" ran, "def" was lost); an escaped
     * backslash before "u0000" is six plain characters */
    const char *nul = "{\"prompt\": \"a\\\\u0000\\\\\"}\n{\"prompt\": \"abc\\u0000def\"}\n{\"prompt\": \"\\u00001\"}\n";
    write_file(p, nul, strlen(nul));
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), -1);
    snprintf(want, sizeof want, "%s:2: a \\u0000 escape (U+0000 would end the text there) at column 16", p);
    if (!strstr(ds_errmsg(), want)) fail_msg("message \"%s\" lacks \"%s\"", ds_errmsg(), want);
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.skipped, 2);
    assert_string_equal(s.v[0].text, "a\\u0000\\");
    prompt_set_free(&s);
    /* a turn list is one or two non-empty strings: a third turn or a number was dropped silently */
    const char *turns = "{\"turns\": [\"a\", 5]}\n{\"turns\": [\"a\", \"b\", \"c\"]}\n{\"turns\": []}\n"
                        "{\"turns\": [\"a\", \"\"]}\n{\"turns\": [[\"a\"]]}\n{\"turns\": [\"x\", \"y\"]}\n{\"turns\": [\"z\"]}\n";
    write_file(p, turns, strlen(turns));
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), -1);
    snprintf(want, sizeof want, "%s:1: no non-empty 'turns/prompt/question/...' prompt field (a string, or a list of one or two strings)", p);
    if (!strstr(ds_errmsg(), want)) fail_msg("message \"%s\" lacks \"%s\"", ds_errmsg(), want);
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.skipped, 5);
    assert_string_equal(s.v[0].text, "x");
    assert_string_equal(s.v[0].text2, "y");
    assert_string_equal(s.v[1].text, "z");
    assert_null(s.v[1].text2);
    prompt_set_free(&s);
    remove(p);
}

static void test_json_array_and_errors(void **state) {
    (void)state;
    const char *p = tmp_path("arr.json");
    const char *body = "[{\"instruction\": \"a\"}, {\"instruction\": \"b\"}, 3]";
    write_file(p, body, strlen(body));
    prompt_set s;
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.skipped, 1);
    prompt_set_free(&s);
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), -1);
    assert_non_null(strstr(ds_errmsg(), ":3: record is not a JSON object"));
    write_file(p, "[{\"instruction\": ", 17);
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), -1);
    assert_non_null(strstr(ds_errmsg(), "not a valid JSON array"));
    /* an array and then more text (a second array, a JSONL tail): refused, not read as its first array */
    const char *two = "[{\"instruction\": \"a\"}]\n[{\"instruction\": \"b\"}]\n";
    write_file(p, two, strlen(two));
    assert_int_equal(dataset_load(p, NULL, 0, 1, &s), -1);
    assert_non_null(strstr(ds_errmsg(), "text after the JSON value at byte 23"));
    const char *padded = " \t\r\n [{\"instruction\": \"a\"}] \r\n\n";
    write_file(p, padded, strlen(padded));
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), 0);
    assert_int_equal(s.n, 1);
    prompt_set_free(&s);
    /* an array's limit, and a category's domain (math, code; anything else is chat) */
    const char *cats = "[{\"prompt\": \"m\", \"category\": \"math\"}, {\"prompt\": \"c\", \"category\": \"code\"}, "
                       "{\"prompt\": \"w\", \"category\": \"writing\"}, {\"prompt\": \"n\", \"category\": 7}]";
    write_file(p, cats, strlen(cats));
    assert_int_equal(dataset_load(p, NULL, 0, 0, &s), 0);
    assert_int_equal(s.n, 4);
    assert_string_equal(s.v[0].domain, "math");
    assert_string_equal(s.v[1].domain, "code");
    assert_string_equal(s.v[2].domain, "chat");
    assert_string_equal(s.v[3].domain, "chat");
    prompt_set_free(&s);
    assert_int_equal(dataset_load(p, NULL, 1, 0, &s), 0);
    assert_int_equal(s.n, 1);
    prompt_set_free(&s);
    assert_int_equal(dataset_load("builtin", NULL, 2, 0, &s), 0);
    assert_int_equal(s.n, 2);
    prompt_set_free(&s);
    remove(p);
    assert_int_equal(dataset_load("gsm9k", NULL, 0, 1, &s), -1);
    assert_non_null(strstr(ds_errmsg(), "unknown dataset 'gsm9k'"));
    assert_int_equal(dataset_load("/nonexistent/x.jsonl", NULL, 0, 1, &s), -1);
    assert_non_null(strstr(ds_errmsg(), "/nonexistent/x.jsonl"));
    assert_int_equal(dataset_load("gsm8k", "/nonexistent-root", 0, 1, &s), -1);
    assert_non_null(strstr(ds_errmsg(), "/nonexistent-root/gsm8k/deepspec_gsm8k.jsonl"));
    assert_int_equal(dataset_load("builtin", NULL, 0, 1, &s), 0);
    int dom[3] = {0};
    for (int i = 0; i < s.n; i++) {
        dom[0] += strcmp(s.v[i].domain, "math") == 0;
        dom[1] += strcmp(s.v[i].domain, "code") == 0;
        dom[2] += strcmp(s.v[i].domain, "chat") == 0;
    }
    assert_true(dom[0] >= 3 && dom[1] >= 3 && dom[2] >= 3);
    prompt_set_free(&s);
}

/* The prompts that come with the project load with no data root at all (a fresh clone), the first 8
 * of each Spec-Bench category; a full-set name without its root says which bundled name to use; and
 * where the full file is present, each bundled set is the full set's first 8, text for text. */
static void test_bundled_sets(void **state) {
    (void)state;
    static const struct {
        const char *name, *domain;
    } sets[] = {{"sbmini-mt", "chat"}, {"sbmini-trans", "chat"}, {"sbmini-sum", "chat"},
                {"sbmini-qa", "chat"}, {"sbmini-math", "math"},  {"sbmini-rag", "chat"}};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        prompt_set s, full;
        if (dataset_load(sets[i].name, "/nonexistent-root", 0, 0, &s)) fail_msg("%s: %s", sets[i].name, ds_errmsg());
        assert_int_equal(s.n, 8);
        assert_string_equal(s.v[0].domain, sets[i].domain);
        assert_string_equal(s.v[0].dataset, sets[i].name);
        if (i == 0)
            for (int k = 0; k < s.n; k++) assert_non_null(s.v[k].text2);
        if (i == 2) assert_non_null(strstr(s.v[0].text, "Summarize"));
        char full_name[32];
        snprintf(full_name, sizeof full_name, "sb-%s", sets[i].name + 7);
        if (dataset_load(full_name, NULL, 8, 0, &full) == 0) {
            assert_int_equal(full.n, 8);
            for (int k = 0; k < 8; k++) {
                assert_string_equal(s.v[k].text, full.v[k].text);
                assert_int_equal(!s.v[k].text2, !full.v[k].text2);
                if (s.v[k].text2) assert_string_equal(s.v[k].text2, full.v[k].text2);
            }
            prompt_set_free(&full);
        } else
            printf("  (the full %s is not under %s: compared counts only)\n", full_name, dataset_default_root());
        prompt_set_free(&s);
    }
    prompt_set s;
    assert_int_equal(dataset_load("sb-trans", "/nonexistent-root", 0, 0, &s), -1);
    if (!strstr(ds_errmsg(), "'sbmini-trans'")) fail_msg("message \"%s\" does not name sbmini-trans", ds_errmsg());
}

static void test_shared_sets(void **state) {
    (void)state;
    struct stat st;
    const char *root = dataset_default_root();
    if (stat(root, &st) != 0) {
        printf("  skipped: the shared datasets are not at %s (set DSPARK_DATA)\n", root);
        skip();
    }
    static const struct {
        const char *name, *domain;
        int n;
    } sets[] = {{"gsm8k", "math", 1319},     {"math500", "math", 500},        {"aime25", "math", 30},
                {"mbpp", "code", 257},       {"humaneval", "code", 164},      {"livecodebench", "code", 1055},
                {"mtbench", "chat", 80},     {"alpaca", "chat", 805},         {"arenahard", "chat", 750},
                {"trainmix", NULL, 1325},
                /* Spec-Bench's categories out of one file (MANIFEST: 480 = 80 MT-Bench + 5 x 80) */
                {"sb-mt", "chat", 80},       {"sb-trans", "chat", 80},        {"sb-sum", "chat", 80},
                {"sb-qa", "chat", 80},       {"sb-math", "math", 80},         {"sb-rag", "chat", 80}};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        prompt_set s;
        if (dataset_load(sets[i].name, NULL, 0, 0, &s)) fail_msg("%s: %s", sets[i].name, ds_errmsg());
        if (s.n != sets[i].n) fail_msg("%s: %d prompts, MANIFEST says %d", sets[i].name, s.n, sets[i].n);
        if (sets[i].domain) assert_string_equal(s.v[0].domain, sets[i].domain);
        if (strcmp(sets[i].name, "mtbench") == 0 || strcmp(sets[i].name, "sb-mt") == 0)
            for (int k = 0; k < s.n; k++) assert_non_null(s.v[k].text2);
        if (strcmp(sets[i].name, "sb-sum") == 0) assert_non_null(strstr(s.v[0].text, "Summarize"));
        if (strcmp(sets[i].name, "arenahard") == 0) { /* a raw U+2028 stays inside its prompt */
            int found = 0;
            for (int k = 0; k < s.n; k++) found |= strstr(s.v[k].text, "\xe2\x80\xa8") != NULL;
            assert_true(found);
        }
        if (strcmp(sets[i].name, "trainmix") == 0) {
            int math = 0, code = 0;
            for (int k = 0; k < s.n; k++) {
                math += strcmp(s.v[k].domain, "math") == 0;
                code += strcmp(s.v[k].domain, "code") == 0;
            }
            assert_int_equal(math, 517);
            assert_int_equal(code, 517);
        }
        prompt_set_free(&s);
    }
}

/* The training mix: the MANIFEST's sources, repeats dropped; and no evaluation prompt survives the
 * overlap check (a planted copy of a GSM8K test question and of an MT-Bench second turn is caught). */
static void test_train_mix_and_overlap(void **state) {
    (void)state;
    const char *root = dataset_default_root();
    char p[4200];
    snprintf(p, sizeof p, "%s/sharegpt/ShareGPT_V3_filtered_500.json", root);
    FILE *f = fopen(p, "r");
    if (!f) {
        printf("  skipped: the shared training sets are not at %s (set DSPARK_DATA)\n", root);
        skip();
    }
    fclose(f);
    prompt_set s, g, m;
    if (dataset_load("train20k", NULL, 0, 0, &s)) fail_msg("%s", ds_errmsg());
    assert_int_equal(s.n, 18517);
    int n_eval = 0, dropped = 0;
    assert_int_equal(dataset_drop_eval_overlap(&s, NULL, &n_eval, &dropped), 0);
    assert_int_equal(dropped, 2);
    assert_true(n_eval > 5000);
    /* plant two evaluation prompts, re-punctuated and re-cased: both are dropped */
    assert_int_equal(dataset_load("gsm8k", NULL, 1, 0, &g), 0);
    assert_int_equal(dataset_load("mtbench", NULL, 1, 0, &m), 0);
    char *a = malloc(strlen(g.v[0].text) + 8), *b = strdup(m.v[0].text2);
    sprintf(a, "  %s!!", g.v[0].text);
    for (char *c = b; *c; c++) *c = (char)toupper((unsigned char)*c);
    free(s.v[0].text), free(s.v[1].text);
    s.v[0].text = a, s.v[1].text = b;
    assert_int_equal(dataset_drop_eval_overlap(&s, NULL, &n_eval, &dropped), 0);
    assert_int_equal(dropped, 2);
    prompt_set_free(&s), prompt_set_free(&g), prompt_set_free(&m);
}

/* The overlap check on a data root the test writes (no shared datasets needed): evaluation prompts planted
 * in a training set - re-cased, re-punctuated, MT-Bench's second turn, Spec-Bench's translation and QA
 * prompts - are dropped, prompts a word apart kept; a set absent from the root is not needed; a set present
 * that does not read is refused by name (it was skipped: its prompts would have reached training) */
static void test_overlap_own_root(void **state) {
    (void)state;
    char root[600], p[700];
    snprintf(root, sizeof root, "%s", tmp_path("overlap-root"));
    rm_dir(root);
    const char *files[][2] = {
        {"mtbench/question.jsonl", "{\"category\": \"writing\", \"turns\": [\"Compose a travel blog post.\", "
                                   "\"Rewrite your previous response, starting every sentence with A.\"]}\n"},
        {"specbench/question.jsonl", "{\"category\": \"translation\", \"turns\": [\"Translate German to English: Guten Morgen.\"]}\n"
                                     "{\"category\": \"qa\", \"turns\": [\"Who wrote Hamlet?\"]}\n"},
        {"gsm8k/deepspec_gsm8k.jsonl", "{\"turns\": [\"Natalia sold 48 clips.\"]}\n"}};
    for (int f = 0; f < 3; f++) {
        snprintf(p, sizeof p, "%s/%s", root, files[f][0]);
        *strrchr(p, '/') = 0;
        assert_int_equal(ds_mkdirs(p, "test"), 0);
        snprintf(p, sizeof p, "%s/%s", root, files[f][0]);
        write_file(p, files[f][1], strlen(files[f][1]));
    }
    const char *texts[] = {"compose a TRAVEL blog post!!", "  Rewrite your previous response: starting every sentence with A",
                           "Translate German to English -- Guten Morgen", "who wrote hamlet", "Natalia sold 48 clips",
                           "Natalia sold 49 clips.", "Compose a travel blog", "Who wrote Hamlet? Twice"};
    const int kept[] = {5, 6, 7};
    prompt_set s = {0};
    s.n = s.cap = 8;
    s.v = calloc(8, sizeof *s.v);
    for (int i = 0; i < 8; i++) s.v[i].text = strdup(texts[i]), s.v[i].index = i;
    int n_eval = 0, dropped = 0;
    if (dataset_drop_eval_overlap(&s, root, &n_eval, &dropped)) fail_msg("%s", ds_errmsg());
    assert_int_equal(n_eval, 5); /* two MT-Bench turns, translation, QA, GSM8K */
    assert_int_equal(dropped, 5);
    assert_int_equal(s.n, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(s.v[i].index, kept[i]);
    /* an evaluation set present but cut short (a JSON array without its end): refused by name */
    const char *cut = "[{\"turns\": [\"Natalia sold 48 clips.\"]}";
    snprintf(p, sizeof p, "%s/%s", root, files[2][0]);
    write_file(p, cut, strlen(cut));
    assert_int_equal(dataset_drop_eval_overlap(&s, root, &n_eval, &dropped), -1);
    if (!strstr(ds_errmsg(), "evaluation set 'gsm8k'") || !strstr(ds_errmsg(), p)) fail_msg("%s", ds_errmsg());
    assert_int_equal(s.n, 3); /* nothing dropped by the refused call */
    prompt_set_free(&s);
    rm_dir(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_mix_and_overlap),
        cmocka_unit_test(test_overlap_own_root),
        cmocka_unit_test(test_malformed_lines),
        cmocka_unit_test(test_json_array_and_errors),
        cmocka_unit_test(test_bundled_sets),
        cmocka_unit_test(test_shared_sets),
    };
    return cmocka_run_group_tests_name("datasets", tests, NULL, NULL);
}
