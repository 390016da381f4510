/* test_config — the experiment and training configs (cli/config.c, cli/train_config.c) read in process:
 * every documented default, every key's range at its bounds (the bound taken, one step past refused by
 * the key's name), the datasets list, the drafter / scheduler objects merged from the command line or
 * replaced by a file, and the resolved config written back and read again to itself. test_cli drives the
 * same code through the binary; here each case costs microseconds, so a mutation campaign can afford it. */
#include "testutil.h"

#include "../cli/config.h"
#include "../cli/train_config.h"

/* apply the JSON text to c; 0 or -1 (the message in ds_errmsg) */
static int apply(run_config *c, const char *json, int merge) {
    cJSON *j = cJSON_Parse(json);
    if (!j) fail_msg("test JSON does not parse: %s", json);
    int rc = run_config_apply(c, j, "cfg.json", merge);
    cJSON_Delete(j);
    return rc;
}

/* refused over c's settings (a copy: a refused config is not used, and may be half applied) */
static void refused(const run_config *c, const char *json, const char *names) {
    run_config t = *c;
    t.drafter_cfg = cJSON_Duplicate(c->drafter_cfg, 1);
    t.scheduler_cfg = cJSON_Duplicate(c->scheduler_cfg, 1);
    t.serve_cfg = cJSON_Duplicate(c->serve_cfg, 1);
    int rc = apply(&t, json, 0);
    run_config_free(&t);
    if (rc == 0) fail_msg("%s was taken", json);
    if (!strstr(ds_errmsg(), names)) fail_msg("%s: '%s' does not name '%s'", json, ds_errmsg(), names);
}

static void test_run_defaults(void **state) {
    (void)state;
    run_config c;
    run_config_defaults(&c);
    assert_string_equal(c.scheduler, "fixed");
    assert_int_equal(c.gamma, 4);
    assert_int_equal(c.n_datasets, 1);
    assert_string_equal(c.datasets[0], "builtin");
    assert_true(c.sp.temperature == 0.0f && c.sp.top_k == 0 && c.sp.top_p == 1.0f && c.sp.min_p == 0.0f);
    assert_true(c.seed == 1);
    assert_int_equal(c.max_new, 128);
    assert_int_equal(c.baseline, 1);
    assert_int_equal(c.concurrency, 1);
    assert_string_equal(c.backend, "cpu");
    assert_string_equal(c.isa, "auto");
    assert_string_equal(c.verifier, "token");
    assert_int_equal(c.limit, 0);
    assert_int_equal(c.threads, 0);
    assert_int_equal(c.exact, 0);
    assert_int_equal(c.skip_bad, 0);
    assert_int_equal(c.compare_verifiers, 0);
    assert_string_equal(c.drafter, "");
    assert_null(c.drafter_cfg);
    /* an empty object changes nothing */
    run_config d;
    run_config_defaults(&d);
    assert_int_equal(apply(&d, "{}", 0), 0);
    assert_memory_equal(&c, &d, sizeof c);
    run_config_free(&c);
    run_config_free(&d);
}

/* each numeric key at its bounds: both taken, one step outside refused by the key's name */
static void test_run_ranges(void **state) {
    (void)state;
    const struct {
        const char *key, *lo, *hi, *below, *above;
    } K[] = {{"gamma", "1", "64", "0", "65"},
             {"limit", "0", "1000000", "-1", "1000001"},
             {"temperature", "0", "100", "-0.001", "100.001"},
             {"top_p", "1e-6", "1", "0", "1.001"},
             {"min_p", "0", "1", "-0.001", "1.001"},
             {"top_k", "0", "4194304", "-1", "4194305"},
             {"max_new_tokens", "1", "1048576", "0", "1048577"},
             {"threads", "0", "256", "-1", "257"},
             {"concurrency", "1", "256", "0", "257"}};
    for (size_t i = 0; i < sizeof K / sizeof *K; i++) {
        char js[200];
        run_config c;
        run_config_defaults(&c);
        snprintf(js, sizeof js, "{\"%s\": %s}", K[i].key, K[i].lo);
        if (apply(&c, js, 0)) fail_msg("%s: %s", js, ds_errmsg());
        snprintf(js, sizeof js, "{\"%s\": %s}", K[i].key, K[i].hi);
        if (apply(&c, js, 0)) fail_msg("%s: %s", js, ds_errmsg());
        snprintf(js, sizeof js, "{\"%s\": %s}", K[i].key, K[i].below);
        refused(&c, js, K[i].key);
        snprintf(js, sizeof js, "{\"%s\": %s}", K[i].key, K[i].above);
        refused(&c, js, K[i].key);
        run_config_free(&c);
    }
    /* the values land where they belong */
    run_config c;
    run_config_defaults(&c);
    assert_int_equal(apply(&c, "{\"gamma\": 7, \"limit\": 3, \"temperature\": 0.5, \"top_p\": 0.9, \"min_p\": 0.05, "
                               "\"top_k\": 40, \"seed\": 99, \"max_new_tokens\": 17, \"threads\": 2, \"concurrency\": 5, "
                               "\"skip_bad_lines\": true, \"exact\": true, \"baseline\": false, \"compare_verifiers\": true, "
                               "\"verifier\": \"block\", \"backend\": \"cuda\", \"isa\": \"avx2\", \"out\": \"o.h5\", "
                               "\"prompts_out\": \"p.jsonl\", \"sps\": \"s.json\", \"data_root\": \"/d\", \"target\": \"m.gguf\", "
                               "\"comment\": \"free text\", \"description\": \"more\"}",
                         0),
                     0);
    assert_int_equal(c.gamma, 7);
    assert_int_equal(c.limit, 3);
    assert_true(c.sp.temperature == 0.5f && c.sp.top_p == 0.9f && c.sp.min_p == 0.05f && c.sp.top_k == 40);
    assert_true(c.seed == 99);
    assert_int_equal(c.max_new, 17);
    assert_int_equal(c.threads, 2);
    assert_int_equal(c.concurrency, 5);
    assert_true(c.skip_bad && c.exact && !c.baseline && c.compare_verifiers);
    assert_string_equal(c.verifier, "block");
    assert_string_equal(c.backend, "cuda");
    assert_string_equal(c.isa, "avx2");
    assert_string_equal(c.out, "o.h5");
    assert_string_equal(c.prompts_out, "p.jsonl");
    assert_string_equal(c.sps, "s.json");
    assert_string_equal(c.data_root, "/d");
    assert_string_equal(c.target, "m.gguf");
    refused(&c, "{\"verifier\": \"blocks\"}", "key 'verifier'");
    refused(&c, "{\"gama\": 4}", "gama");
    refused(&c, "{\"seed\": 1.5}", "seed");
    refused(&c, "{\"target\": 3}", "target");
    char longname[1100];
    memset(longname, 'a', sizeof longname);
    snprintf(longname, sizeof longname, "{\"target\": \"%01030d\"}", 0);
    refused(&c, longname, "target must be a string of at most 1023 characters");
    run_config_free(&c);
    assert_int_equal(run_config_apply(&c, NULL, "cfg.json", 0), -1);
    run_config_defaults(&c);
    refused(&c, "[1, 2]", "cfg.json");
    refused(&c, "3", "cfg.json");
    refused(&c, "\"gamma\"", "cfg.json");
}

/* a config file: read and applied over what is there, a missing or malformed file refused by its path; a
 * second file naming another drafter replaces the first's (files do not merge, the command line does) */
static void test_run_files(void **state) {
    (void)state;
    run_config c;
    run_config_defaults(&c);
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s", tmp_path("cfg1.json"));
    snprintf(p2, sizeof p2, "%s", tmp_path("cfg2.json"));
    const char *a = "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 3}, \"gamma\": 5}";
    const char *b = "{\"drafter\": {\"name\": \"suffix\", \"max_depth\": 4}}";
    write_file(p1, a, strlen(a));
    write_file(p2, b, strlen(b));
    if (run_config_load(&c, p1)) fail_msg("%s", ds_errmsg());
    assert_string_equal(c.drafter, "ngram");
    assert_int_equal(c.gamma, 5);
    if (run_config_load(&c, p2)) fail_msg("%s", ds_errmsg());
    assert_string_equal(c.drafter, "suffix");
    assert_null(cJSON_GetObjectItem(c.drafter_cfg, "n_max"));
    assert_int_equal(c.gamma, 5);
    const char *bad = "{\"gamma\": 4,";
    write_file(p2, bad, strlen(bad));
    assert_int_equal(run_config_load(&c, p2), -1);
    assert_non_null(strstr(ds_errmsg(), p2));
    remove(p2);
    assert_int_equal(run_config_load(&c, p2), -1);
    assert_non_null(strstr(ds_errmsg(), p2));
    const char *unk = "{\"gamma\": 4, \"gammma\": 5}";
    write_file(p1, unk, strlen(unk));
    assert_int_equal(run_config_load(&c, p1), -1);
    if (!strstr(ds_errmsg(), p1) || !strstr(ds_errmsg(), "gammma")) fail_msg("%s", ds_errmsg());
    remove(p1);
    run_config_free(&c);
}

static void test_run_datasets(void **state) {
    (void)state;
    run_config c;
    run_config_defaults(&c);
    assert_int_equal(apply(&c, "{\"dataset\": \"gsm8k\"}", 0), 0);
    assert_int_equal(c.n_datasets, 1);
    assert_string_equal(c.datasets[0], "gsm8k");
    assert_int_equal(apply(&c, "{\"datasets\": [\"mbpp\", \"alpaca\"]}", 0), 0);
    assert_int_equal(c.n_datasets, 2);
    assert_string_equal(c.datasets[0], "mbpp");
    assert_string_equal(c.datasets[1], "alpaca");
    char many[1200] = "{\"datasets\": [\"d0\"";
    for (int i = 1; i < 16; i++) snprintf(many + strlen(many), sizeof many - strlen(many), ", \"d%d\"", i);
    strcat(many, "]}");
    assert_int_equal(apply(&c, many, 0), 0);
    assert_int_equal(c.n_datasets, 16);
    assert_string_equal(c.datasets[15], "d15");
    many[strlen(many) - 2] = 0;
    strcat(many, ", \"d16\"]}");
    refused(&c, many, "1..16");
    refused(&c, "{\"datasets\": []}", "1..16");
    refused(&c, "{\"datasets\": 3}", "1..16");
    refused(&c, "{\"datasets\": [\"a\", 3]}", "datasets[]");
    refused(&c, "{\"datasets\": [\"a\", \"\"]}", "dataset 2 of 2 has an empty name");
    refused(&c, "{\"datasets\": [\"a\", \"b\", \"a\"]}", "dataset 'a' is named twice");
    refused(&c, "{\"dataset\": \"a\", \"datasets\": [\"b\"]}", "not both");
    refused(&c, "{\"dataset\": \"\"}", "empty name");
    run_config_free(&c);
}

/* a file's drafter object replaces the one before; the command line's (merge) adds settings to the
 * configured object, and naming another family while that object holds settings is refused */
static void test_run_modules(void **state) {
    (void)state;
    run_config c;
    run_config_defaults(&c);
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 3}}", 0), 0);
    assert_string_equal(c.drafter, "ngram");
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_max")->valueint, 3);
    assert_null(cJSON_GetObjectItem(c.drafter_cfg, "name"));
    /* from the command line: a setting merged in, the family kept */
    assert_int_equal(apply(&c, "{\"drafter\": {\"n_min\": 2}}", 1), 0);
    assert_string_equal(c.drafter, "ngram");
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_max")->valueint, 3);
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_min")->valueint, 2);
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 5}}", 1), 0);
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_max")->valueint, 5);
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_min")->valueint, 2);
    /* another family over configured settings: refused, nothing changed */
    assert_int_equal(apply(&c, "{\"drafter\": \"suffix\"}", 1), -1);
    assert_non_null(strstr(ds_errmsg(), "'suffix' would replace the configured drafter 'ngram'"));
    assert_string_equal(c.drafter, "ngram");
    /* from a file: a new object, the old settings gone */
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"suffix\", \"max_depth\": 9}}", 0), 0);
    assert_string_equal(c.drafter, "suffix");
    assert_null(cJSON_GetObjectItem(c.drafter_cfg, "n_max"));
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "max_depth")->valueint, 9);
    assert_int_equal(apply(&c, "{\"drafter\": \"ngram\"}", 0), 0);
    assert_string_equal(c.drafter, "ngram");
    assert_null(c.drafter_cfg->child);
    /* with no settings, the command line may name another family */
    assert_int_equal(apply(&c, "{\"drafter\": \"suffix\"}", 1), 0);
    assert_string_equal(c.drafter, "suffix");
    assert_int_equal(apply(&c, "{\"drafter\": null}", 0), 0);
    assert_string_equal(c.drafter, "");
    refused(&c, "{\"drafter\": {\"n_max\": 3}}", "drafter needs a \"name\"");
    refused(&c, "{\"drafter\": 3}", "must be a name or an object");
    refused(&c, "{\"drafter\": {\"name\": 3}}", "must be a string");
    refused(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 3, \"n_max\": 4}}", "twice");
    refused(&c, "{\"drafter\": {\"name\": \"a-name-longer-than-sixty-three-characters-is-not-a-drafter-name-at-all\"}}",
            "at most 63 characters");
    /* a name of exactly the buffer's size (64) is refused, not cut to 63; 31 fits the drafter's 32 */
    char nm[200];
    snprintf(nm, sizeof nm, "{\"drafter\": \"%064d\"}", 0);
    refused(&c, nm, "at most 63 characters");
    snprintf(nm, sizeof nm, "{\"drafter\": {\"name\": \"%031d\"}}", 0);
    assert_int_equal(apply(&c, nm, 0), 0);
    assert_int_equal(strlen(c.drafter), 31);
    /* a file's object without a name while a drafter is configured: refused (only the command line may
     * leave the name out, meaning the configured one) */
    assert_int_equal(apply(&c, "{\"drafter\": \"ngram\"}", 0), 0);
    refused(&c, "{\"drafter\": {\"n_max\": 3}}", "drafter needs a \"name\"");
    /* a file naming the same family again replaces its object: the earlier settings do not linger */
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 3}}", 0), 0);
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_min\": 2}}", 0), 0);
    assert_null(cJSON_GetObjectItem(c.drafter_cfg, "n_max"));
    assert_int_equal(cJSON_GetObjectItem(c.drafter_cfg, "n_min")->valueint, 2);
    /* nested settings are copied whole (arrays, objects) */
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"taps\": [1, 2], \"o\": {\"k\": [3]}}}", 0), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c.drafter_cfg, "taps")), 2);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c.drafter_cfg, "o"), "k"), 0)->valueint, 3);
    /* the scheduler the same way */
    assert_int_equal(apply(&c, "{\"scheduler\": {\"name\": \"threshold\", \"threshold\": 0.3}}", 0), 0);
    assert_string_equal(c.scheduler, "threshold");
    assert_int_equal(apply(&c, "{\"scheduler\": \"greedy\"}", 1), -1);
    assert_non_null(strstr(ds_errmsg(), "would replace the configured scheduler 'threshold'"));
    refused(&c, "{\"serve\": 3}", "serve must be an object");
    assert_int_equal(apply(&c, "{\"serve\": {\"rate\": 2}}", 0), 0);
    assert_int_equal(cJSON_GetObjectItem(c.serve_cfg, "rate")->valueint, 2);
    run_config_free(&c);
}

/* the resolved config (the trace's copy) read back into defaults: the same config */
static void test_run_roundtrip(void **state) {
    (void)state;
    run_config c, d;
    run_config_defaults(&c);
    assert_int_equal(apply(&c, "{\"drafter\": {\"name\": \"ngram\", \"n_max\": 3}, \"scheduler\": {\"name\": \"threshold\", "
                               "\"threshold\": 0.25, \"arms\": [2, 4]}, \"gamma\": 6, \"datasets\": [\"gsm8k\", \"mbpp\"], \"limit\": 4, "
                               "\"temperature\": 0.75, \"top_p\": 0.5, \"min_p\": 0.125, \"top_k\": 9, \"seed\": 12345678901, "
                               "\"max_new_tokens\": 33, \"threads\": 3, \"exact\": true, \"isa\": \"scalar\", \"out\": \"x.h5\", "
                               "\"prompts_out\": \"p.jsonl\", \"baseline\": false, \"concurrency\": 4, \"sps\": \"s.json\", "
                               "\"verifier\": \"block\", \"compare_verifiers\": true, \"skip_bad_lines\": true, "
                               "\"data_root\": \"/r\", \"target\": \"t.gguf\", \"serve\": {\"rate\": 1.5, \"arrivals\": [1, 2]}}",
                         0),
                     0);
    cJSON *j = run_config_json(&c);
    run_config_defaults(&d);
    if (run_config_apply(&d, j, "resolved", 0)) fail_msg("%s", ds_errmsg());
    cJSON *k = run_config_json(&d);
    char *a = cJSON_PrintUnformatted(j), *b = cJSON_PrintUnformatted(k);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "\"seed\":12345678901"));
    assert_non_null(strstr(a, "\"n_max\":3"));
    assert_non_null(strstr(a, "\"arms\":[2,4]"));
    assert_non_null(strstr(a, "\"arrivals\":[1,2]"));
    free(a), free(b);
    cJSON_Delete(j), cJSON_Delete(k);
    /* the scalar fields compared directly, the module objects by their text above */
    assert_true(c.gamma == d.gamma && c.limit == d.limit && c.seed == d.seed && c.max_new == d.max_new &&
                c.threads == d.threads && c.exact == d.exact && c.baseline == d.baseline &&
                c.concurrency == d.concurrency && c.compare_verifiers == d.compare_verifiers && c.skip_bad == d.skip_bad);
    assert_memory_equal(&c.sp, &d.sp, sizeof c.sp);
    assert_int_equal(d.n_datasets, 2);
    run_config_free(&c);
    run_config_free(&d);
    /* no drafter: written as null, read back as none */
    run_config_defaults(&c);
    j = run_config_json(&c);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "drafter")));
    assert_null(cJSON_GetObjectItem(j, "prompts_out"));
    assert_null(cJSON_GetObjectItem(j, "serve"));
    run_config_defaults(&d);
    assert_int_equal(run_config_apply(&d, j, "resolved", 0), 0);
    assert_string_equal(d.drafter, "");
    cJSON_Delete(j);
    run_config_free(&c);
    run_config_free(&d);
}

static int parse_train(const char *json, train_config *tc, cJSON **keep) {
    *keep = cJSON_Parse(json);
    if (!*keep) fail_msg("test JSON does not parse: %s", json);
    return train_config_parse(*keep, "train.json", tc);
}

static void train_refused(const char *json, const char *names) {
    train_config tc;
    cJSON *j;
    if (parse_train(json, &tc, &j) == 0) fail_msg("%s was taken", json);
    if (!strstr(ds_errmsg(), names)) fail_msg("%s: '%s' does not name '%s'", json, ds_errmsg(), names);
    cJSON_Delete(j);
}

/* the training config: its documented defaults, the ranges of its keys, taps, the drafter named */
static void test_train_config(void **state) {
    (void)state;
    train_config tc;
    cJSON *j;
    if (parse_train("{\"drafter\": {\"name\": \"dflash\", \"layers\": 1}, \"out\": \"runs/x\"}", &tc, &j))
        fail_msg("%s", ds_errmsg());
    const traindata_opts *d = &tc.data;
    const train_opts *o = &tc.train;
    assert_string_equal(tc.cache, "~/.cache/dspark-bench/train/default");
    assert_string_equal(d->dataset, "train20k");
    assert_null(d->data_root);
    assert_null(tc.target);
    assert_true(d->top_k == 64 && d->batch == 16 && d->shard_size == 500 && d->max_new == 256 && d->max_prompt == 384);
    assert_true(d->sp.temperature == 0.2f && d->sp.top_k == 0 && d->sp.top_p == 0.9f && d->sp.min_p == 0);
    assert_true(d->seed == 1 && d->n_tap == 0 && d->limit == 0 && !d->given && !d->skip_bad && !d->rebuild &&
                !d->store_final && d->max_shards == 0);
    assert_int_equal(o->steps, 1000);
    assert_int_equal(o->seqs_per_step, 4);
    assert_int_equal(o->anchors, 32);
    assert_true(o->lr == 6e-4f && o->min_lr_frac == 0.1f && o->warmup_frac == 0.04f && o->weight_decay == 0 &&
                o->clip == 1.0f && o->beta1 == 0.9f && o->beta2 == 0.95f);
    assert_true(o->seed == 1 && o->eval_every == 250 && o->ckpt_every == 250 && o->holdout == 0.05f && o->eval_seqs == 40);
    assert_true(!o->warm_start && !o->reference && !o->quiet && o->stop_after == 0);
    assert_string_equal(o->out, "runs/x");
    assert_string_equal(tc.drafter_name->valuestring, "dflash");
    cJSON *arch = train_config_arch(&tc);
    assert_null(cJSON_GetObjectItem(arch, "name"));
    assert_int_equal(cJSON_GetObjectItem(arch, "layers")->valueint, 1);
    cJSON_Delete(arch);
    cJSON_Delete(j);
    /* given values land */
    if (parse_train("{\"target\": \"t.gguf\", \"drafter\": {\"name\": \"mtp\"}, \"out\": \"o\", \"comment\": \"x\", \"data\": "
                    "{\"dataset\": \"trainmix\", \"data_root\": \"/r\", \"limit\": 7, \"given\": true, \"skip_bad_lines\": true, "
                    "\"rebuild\": true, \"temperature\": 1, \"top_p\": 0.5, \"min_p\": 0.1, \"top_k\": 5, \"max_new_tokens\": 9, "
                    "\"max_prompt\": 2, \"seed\": 4, \"target_top_k\": 4096, \"store_final\": true, \"batch\": 256, "
                    "\"shard_size\": 3, \"max_shards\": 2, \"cache\": \"c\", \"taps\": [0, 4095, 2, 3, 4, 5, 6, 7]}, "
                    "\"train\": {\"steps\": 5, \"seqs_per_step\": 4096, \"anchors\": 512, \"lr\": 1, \"min_lr_frac\": 0, "
                    "\"warmup_frac\": 1, \"weight_decay\": 10, \"clip\": 1e-6, \"beta1\": 0, \"beta2\": 1, \"seed\": 8, "
                    "\"eval_every\": 0, \"ckpt_every\": 0, \"holdout\": 0.9, \"eval_seqs\": 1, \"warm_start\": true, "
                    "\"reference\": true}}",
                    &tc, &j))
        fail_msg("%s", ds_errmsg());
    assert_string_equal(tc.target, "t.gguf");
    assert_string_equal(tc.cache, "c");
    assert_string_equal(d->dataset, "trainmix");
    assert_string_equal(d->data_root, "/r");
    assert_true(d->limit == 7 && d->given && d->skip_bad && d->rebuild && d->sp.temperature == 1 && d->sp.top_p == 0.5f &&
                d->sp.min_p == 0.1f && d->sp.top_k == 5 && d->max_new == 9 && d->max_prompt == 2 && d->seed == 4 &&
                d->top_k == 4096 && d->store_final && d->batch == 256 && d->shard_size == 3 && d->max_shards == 2);
    assert_int_equal(d->n_tap, 8);
    assert_int_equal(d->taps[1], 4095);
    assert_int_equal(d->taps[7], 7);
    assert_true(o->steps == 5 && o->seqs_per_step == 4096 && o->anchors == 512 && o->lr == 1 && o->min_lr_frac == 0 &&
                o->warmup_frac == 1 && o->weight_decay == 10 && o->clip == 1e-6f && o->beta1 == 0 && o->beta2 == 1 &&
                o->seed == 8 && o->eval_every == 0 && o->ckpt_every == 0 && o->holdout == 0.9f && o->eval_seqs == 1 &&
                o->warm_start && o->reference);
    cJSON_Delete(j);
    /* the other bound of each range */
    if (parse_train("{\"drafter\": {\"name\": \"mtp\"}, \"out\": \"o\", \"data\": {\"limit\": 0, \"temperature\": 0, "
                    "\"top_k\": 0, \"max_shards\": 0, \"min_p\": 0, \"top_p\": 1e-6, \"target_top_k\": 1, \"batch\": 1, "
                    "\"shard_size\": 1, \"max_new_tokens\": 65536, \"max_prompt\": 65536}, \"train\": {\"steps\": 1, "
                    "\"seqs_per_step\": 1, \"anchors\": 1, \"lr\": 0, \"min_lr_frac\": 1, \"warmup_frac\": 0, "
                    "\"weight_decay\": 0, \"clip\": 1e6, \"beta1\": 1, \"beta2\": 0, \"holdout\": 0, \"eval_seqs\": 1000000}}",
                    &tc, &j))
        fail_msg("%s", ds_errmsg());
    assert_true(d->limit == 0 && d->sp.temperature == 0 && d->sp.top_k == 0 && d->max_shards == 0 && d->top_k == 1 &&
                d->batch == 1 && d->shard_size == 1 && d->max_new == 65536 && d->max_prompt == 65536);
    assert_true(o->steps == 1 && o->lr == 0 && o->min_lr_frac == 1 && o->warmup_frac == 0 && o->weight_decay == 0 &&
                o->clip == 1e6f && o->beta1 == 1 && o->beta2 == 0 && o->holdout == 0 && o->eval_seqs == 1000000);
    cJSON_Delete(j);
    /* one step past each bound */
    const char *bad[][2] = {
        {"\"data\": {\"limit\": -1}", "limit"}, {"\"data\": {\"temperature\": -1}", "temperature"},
        {"\"data\": {\"top_p\": 0}", "top_p"}, {"\"data\": {\"min_p\": 1.5}", "min_p"},
        {"\"data\": {\"top_k\": -1}", "top_k"}, {"\"data\": {\"max_new_tokens\": 0}", "max_new_tokens"},
        {"\"data\": {\"max_new_tokens\": 65537}", "max_new_tokens"}, {"\"data\": {\"max_prompt\": 1}", "max_prompt"},
        {"\"data\": {\"target_top_k\": 0}", "target_top_k"}, {"\"data\": {\"target_top_k\": 4097}", "target_top_k"},
        {"\"data\": {\"batch\": 0}", "batch"}, {"\"data\": {\"batch\": 257}", "batch"},
        {"\"data\": {\"shard_size\": 0}", "shard_size"}, {"\"data\": {\"max_shards\": -1}", "max_shards"},
        {"\"data\": {\"taps\": []}", "1 to 8 layer indices"}, {"\"data\": {\"taps\": [0,1,2,3,4,5,6,7,8]}", "1 to 8"},
        {"\"data\": {\"taps\": [4096]}", "\"taps\"[0] is not a layer index"}, {"\"data\": {\"taps\": [1, -1]}", "\"taps\"[1]"},
        {"\"data\": {\"taps\": [1.5]}", "\"taps\"[0]"}, {"\"data\": {\"taps\": \"1\"}", "must be an array"},
        {"\"data\": {\"cahce\": \"x\"}", "cahce"}, {"\"data\": 3", "data"},
        {"\"train\": {\"steps\": 0}", "steps"}, {"\"train\": {\"seqs_per_step\": 0}", "seqs_per_step"},
        {"\"train\": {\"seqs_per_step\": 4097}", "seqs_per_step"}, {"\"train\": {\"anchors\": 0}", "anchors"},
        {"\"train\": {\"anchors\": 513}", "anchors"}, {"\"train\": {\"lr\": -0.1}", "lr"}, {"\"train\": {\"lr\": 1.1}", "lr"},
        {"\"train\": {\"min_lr_frac\": 1.1}", "min_lr_frac"}, {"\"train\": {\"warmup_frac\": -0.1}", "warmup_frac"},
        {"\"train\": {\"weight_decay\": 10.5}", "weight_decay"}, {"\"train\": {\"clip\": 0}", "clip"},
        {"\"train\": {\"beta1\": 1.1}", "beta1"}, {"\"train\": {\"beta2\": -0.1}", "beta2"},
        {"\"train\": {\"eval_every\": -1}", "eval_every"}, {"\"train\": {\"ckpt_every\": -1}", "ckpt_every"},
        {"\"train\": {\"holdout\": 0.95}", "holdout"}, {"\"train\": {\"eval_seqs\": 0}", "eval_seqs"},
        {"\"train\": {\"stpes\": 3}", "stpes"}, {"\"train\": {\"seed\": 1.5}", "seed"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char js[400];
        snprintf(js, sizeof js, "{\"drafter\": {\"name\": \"dflash\"}, \"out\": \"o\", %s}", bad[i][0]);
        train_refused(js, bad[i][1]);
    }
    /* the drafter: named, known, trainable; the list of trainable ones in the message */
    train_refused("{\"out\": \"o\"}", "needs \"drafter\": {\"name\": NAME");
    train_refused("{\"drafter\": \"dflash\", \"out\": \"o\"}", "needs \"drafter\"");
    train_refused("{\"drafter\": {\"name\": \"nope\"}, \"out\": \"o\"}", "nope");
    train_refused("{\"drafter\": {\"name\": \"ngram\"}, \"out\": \"o\"}", "'ngram' is not trained");
    train_refused("{\"drafter\": {\"name\": \"ngram\"}, \"out\": \"o\"}", "dflash");
    { /* the list after "trainable:" names trainable families only */
        const char *tl = strstr(ds_errmsg(), "trainable: ");
        assert_non_null(tl);
        if (strstr(tl, "suffix") || strstr(tl, "ngram") || strstr(tl, "recycling")) fail_msg("%s", ds_errmsg());
    }
    train_refused("{\"drafter\": {\"name\": \"dflash\"}, \"out\": 3}", "out");
    train_refused("{\"drafter\": {\"name\": \"dflash\"}, \"out\": \"o\", \"extra\": 1}", "extra");
    train_refused("[1]", "train.json");
    /* ~ expanded from $HOME */
    char buf[600];
    const char *home = getenv("HOME");
    snprintf(buf, sizeof buf, "%s/x", home ? home : ".");
    char out[700];
    assert_string_equal(train_config_expand_home("~/x", out, sizeof out), buf);
    assert_string_equal(train_config_expand_home("/abs", out, sizeof out), "/abs");
}

/* a block drafter's architecture from the config, stamped with the target's tokenizer and chat template
 * (what a checkpoint is later checked against); a bad architecture refused by the family */
static void test_train_drafter(void **state) {
    (void)state;
    if (!need_real_model()) return;
    target t;
    if (target_open(&t, real_model_path(), &(backend_opts){.n_threads = 1})) fail_msg("%s", ds_errmsg());
    train_config tc;
    cJSON *j;
    if (parse_train("{\"drafter\": {\"name\": \"dflash\", \"layers\": 1}, \"out\": \"o\"}", &tc, &j)) fail_msg("%s", ds_errmsg());
    bd_config c;
    if (train_config_drafter(&tc, &t, &c)) fail_msg("%s", ds_errmsg());
    char fp[20];
    tokenizer_fingerprint(&t.tk, fp);
    assert_string_equal(c.contract.tokenizer, fp);
    assert_string_equal(c.contract.chat_template, chat_family_name(&t.ct));
    assert_int_equal(c.n_layers, 1);
    cJSON_Delete(j);
    if (parse_train("{\"drafter\": {\"name\": \"dflash\", \"layers\": 0}, \"out\": \"o\"}", &tc, &j)) fail_msg("%s", ds_errmsg());
    memset(&c, 0, sizeof c);
    assert_int_equal(train_config_drafter(&tc, &t, &c), -1);
    assert_non_null(strstr(ds_errmsg(), "layers"));
    cJSON_Delete(j);
    target_close(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_defaults),  cmocka_unit_test(test_run_ranges),   cmocka_unit_test(test_run_datasets),
        cmocka_unit_test(test_run_modules),   cmocka_unit_test(test_run_roundtrip), cmocka_unit_test(test_train_config),
        cmocka_unit_test(test_run_files),     cmocka_unit_test(test_train_drafter),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
