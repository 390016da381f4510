/* test_contract.c — a learned drafter's checkpoint contract (drafters/contract.h), shared by the
 * block drafters, Medusa, MTP / EAGLE-3 and the vanilla LM: its keys read back as written, a
 * checkpoint of another target is refused, and at serving a tokenizer or chat template other than
 * the target's is refused with a message naming it. */
#include "testutil.h"

#include "../drafters/contract.h"
#include "../drafters/drafter.h"

/* the contract's keys through contract_json and back through contract_read, nothing left unread */
static void round_trip(const draft_contract *k, const model *m, draft_contract *back) {
    cJSON *j = cJSON_CreateObject();
    contract_json(j, k);
    contract_init(back, m);
    jcfg r;
    assert_int_equal(jcfg_open(&r, j, "config.json"), 0);
    assert_int_equal(contract_read(&r, back), 0);
    assert_int_equal(jcfg_close(&r), 0);
    cJSON_Delete(j);
}

static void test_round_trip(void **state) {
    (void)state;
    static model m; /* only its fingerprint is read */
    snprintf(m.fingerprint, sizeof m.fingerprint, "0123456789abcdef");
    draft_contract k, b;
    contract_init(&k, &m);
    snprintf(k.chat_template, sizeof k.chat_template, "chatml");
    snprintf(k.tokenizer, sizeof k.tokenizer, "fedcba9876543210");
    k.draft_vocab = 4096;
    snprintf(k.vocab_hash, sizeof k.vocab_hash, "00ff00ff00ff00ff");
    k.n_calib = 3, k.calib[0] = 1.25f, k.calib[1] = 0.5f, k.calib[2] = 3.0f;
    round_trip(&k, &m, &b);
    assert_memory_equal(&k, &b, sizeof k);
    /* the whole vocabulary, nothing recorded: the keys are absent and read back as the defaults */
    contract_init(&k, &m);
    round_trip(&k, &m, &b);
    assert_memory_equal(&k, &b, sizeof k);
    /* a draft vocabulary as large as the target's is the whole one */
    k.draft_vocab = 500;
    assert_int_equal(contract_check_target(&k, &m, 500, "ck"), 0);
    assert_int_equal(k.draft_vocab, 0);
    k.draft_vocab = 499;
    assert_int_equal(contract_check_target(&k, &m, 500, "ck"), 0);
    assert_int_equal(k.draft_vocab, 499);
    /* trained against another target */
    static model other;
    snprintf(other.fingerprint, sizeof other.fingerprint, "aaaaaaaaaaaaaaaa");
    assert_int_equal(contract_check_target(&k, &other, 500, "ck"), -1);
    assert_non_null(
        strstr(ds_errmsg(), "ck: trained against target 0123456789abcdef, but the target is aaaaaaaaaaaaaaaa"));
}

static void test_bad_keys(void **state) {
    (void)state;
    static model m;
    const char *bad[][2] = {
        {"{\"calibration\": [1.0, -2.0]}", "calibration"},
        {"{\"draft_vocab\": -1}", "draft_vocab"},
        {"{\"vocab_hash\": 7}", "vocab_hash"},
        {"{\"tokenizer\": \"a tokenizer fingerprint far too long\"}", "tokenizer"},
        {"{\"target_fingerprint\": [1]}", "target_fingerprint"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        assert_non_null(j);
        draft_contract k;
        contract_init(&k, &m);
        jcfg r;
        assert_int_equal(jcfg_open(&r, j, "config.json"), 0);
        assert_int_equal(contract_read(&r, &k), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("%s: '%s' does not name '%s'", bad[i][0], ds_errmsg(), bad[i][1]);
        cJSON_Delete(j);
    }
}

/* serving: what the data was rendered with must be the target's (SmolLM2: a tokenizer and ChatML) */
static void test_serving(void **state) {
    (void)state;
    if (!need_real_model()) skip();
    static target t;
    if (target_open(&t, real_model_path(), &(backend_opts){.n_threads = 1})) fail_msg("%s", ds_errmsg());
    draft_contract k;
    contract_init(&k, &t.m);
    assert_int_equal(contract_check_serving(&k, &t, "ck"), 0); /* nothing recorded: nothing to check */
    contract_stamp(&k, &t);
    assert_true(k.tokenizer[0] && k.chat_template[0]);
    assert_int_equal(contract_check_serving(&k, &t, "ck"), 0);
    draft_contract w = k;
    w.tokenizer[0] = w.tokenizer[0] == '0' ? '1' : '0';
    assert_int_equal(contract_check_serving(&w, &t, "ck"), -1);
    assert_non_null(strstr(ds_errmsg(), "ck: trained with tokenizer"));
    w = k;
    snprintf(w.chat_template, sizeof w.chat_template, "llama3");
    assert_int_equal(contract_check_serving(&w, &t, "ck"), -1);
    assert_non_null(strstr(ds_errmsg(), "ck: trained with chat_template 'llama3'"));
    w.tokenizer[0] = 0; /* one of the two recorded is still checked */
    assert_int_equal(contract_check_serving(&w, &t, "ck"), -1);
    w = k;
    w.tokenizer[0] = w.tokenizer[0] == '0' ? '1' : '0';
    w.chat_template[0] = 0;
    assert_int_equal(contract_check_serving(&w, &t, "ck"), -1);
    w.tokenizer[0] = 0, w.chat_template[0] = 0; /* a checkpoint from before the contract was recorded */
    assert_int_equal(contract_check_serving(&w, &t, "ck"), 0);
    target_close(&t);
}

/* a confidence through its position's temperature: the odds to the power 1 / T (p = 0.8: T = 0.5 squares
 * the odds 4 to 16, 16 / 17; T = 2 roots them to 2, 2 / 3), untouched past the listed positions, for a
 * temperature of 0 (none fitted) and without a contract */
static void test_calibrated_conf(void **state) {
    (void)state;
    draft_contract ck;
    memset(&ck, 0, sizeof ck);
    ck.n_calib = 3, ck.calib[0] = 0.5f, ck.calib[1] = 2.0f, ck.calib[2] = 0;
    assert_true(fabs(draft_conf_calibrated(0.8, &ck, 0) - 16.0 / 17) < 1e-9);
    assert_true(fabs(draft_conf_calibrated(0.8, &ck, 1) - 2.0 / 3) < 1e-9);
    assert_true(fabs(draft_conf_calibrated(0.8, &ck, 2) - 0.8) < 1e-9);
    assert_true(fabs(draft_conf_calibrated(0.8, &ck, 3) - 0.8) < 1e-9);
    assert_true(fabs(draft_conf_calibrated(0.8, NULL, 0) - 0.8) < 1e-9);
    assert_true(fabs(draft_conf_calibrated(0.2, &ck, 0) - 1.0 / 17) < 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibrated_conf),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_serving),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
