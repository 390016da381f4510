/* test_training_free — the deterministic drafters' pieces against brute force: the suffix trie's
 * counts, continuations and most frequent children (with FIFO eviction), the acceptance counts,
 * ngram's drafts on crafted contexts, and the suffix drafter drafting from the run's corpus. */
#include "testutil.h"

#include "../drafters/accept_stats.h"
#include "../drafters/drafter.h"
#include "../drafters/suffix_tree.h"

/* occurrences of p[0..m) in x[0..n), and of those the ones followed by a token */
static void brute(const int *x, int n, const int *p, int m, int *occ, int *cont) {
    for (int i = 0; i + m <= n; i++) {
        int ok = 1;
        for (int j = 0; j < m && ok; j++) ok = x[i + j] == p[j];
        if (ok) (*occ)++, *cont += i + m < n;
    }
}

/* every substring (length <= D) of the kept sequences has its node with the right counts, the
 * most frequent child is a child of maximal count, and nothing else is in the tree */
static void check_tree(suffix_tree *t, int **seq, const int *len, int first, int last) {
    int D = t->max_depth;
    long distinct = 0;
    for (int s = first; s < last; s++)
        for (int i = 0; i < len[s]; i++)
            for (int m = 1; m <= D && i + m <= len[s]; m++) {
                const int *p = seq[s] + i;
                /* count each distinct substring once: at its first occurrence over the kept sequences */
                int seen = 0;
                for (int s2 = first; s2 <= s && !seen; s2++)
                    for (int i2 = 0; i2 + m <= len[s2] && !seen && (s2 < s || i2 < i); i2++)
                        seen = memcmp(seq[s2] + i2, p, sizeof(int) * (size_t)m) == 0;
                if (seen) continue;
                distinct++;
                int occ = 0, cont = 0;
                for (int s2 = first; s2 < last; s2++) brute(seq[s2], len[s2], p, m, &occ, &cont);
                int v = suffix_tree_find(t, p, m);
                assert_true(v > 0);
                assert_int_equal(t->count[v], occ);
                if (m < D) {
                    assert_int_equal(t->cont[v], cont);
                    int b = suffix_tree_best(t, v);
                    if (cont == 0) {
                        assert_int_equal(b, -1);
                    } else {
                        assert_true(b >= 0);
                        for (int c = t->child[v]; c >= 0; c = t->sib[c]) assert_true(t->count[c] <= t->count[b]);
                    }
                }
            }
    assert_int_equal(t->n_live, distinct + 1);
}

static void test_suffix_tree_counts(void **state) {
    (void)state;
    enum { NS = 12, L = 40, D = 5 };
    int *seq[NS], len[NS];
    rng_t rng;
    rng_seed(&rng, 7);
    suffix_tree t;
    /* small enough that the later sequences evict the early ones */
    assert_int_equal(suffix_tree_init(&t, D, 300), 0);
    int first = 0;
    for (int s = 0; s < NS; s++) {
        len[s] = 10 + (int)(rng_u64(&rng) % L);
        seq[s] = malloc(sizeof(int) * (size_t)len[s]);
        for (int i = 0; i < len[s]; i++) seq[s][i] = (int)(rng_u64(&rng) % 5); /* 5 tokens: many repeats */
        assert_int_equal(suffix_tree_begin(&t, 1), 0);
        /* in two pieces: appends continue the sequence */
        assert_int_equal(suffix_tree_append(&t, seq[s], len[s] / 2), 0);
        assert_int_equal(suffix_tree_append(&t, seq[s] + len[s] / 2, len[s] - len[s] / 2), 0);
        first = s + 1 - t.n_seq; /* FIFO: the kept ones are the newest */
        check_tree(&t, seq, len, first, s + 1);
    }
    assert_true(first > 0); /* eviction happened */
    /* match: the longest suffix with a continuation */
    int ctx[3] = {seq[NS - 1][0], seq[NS - 1][1], 99}, ml;
    assert_int_equal(suffix_tree_match(&t, ctx, 3, &ml), 0); /* token 99 never occurs: the root */
    assert_int_equal(ml, 0);
    suffix_tree_match(&t, ctx, 2, &ml);
    assert_true(ml >= 1 && ml <= 2);
    /* cleared and used again: the counts are the new sequences' alone (the root's too: one a token) */
    suffix_tree_clear(&t);
    for (int s = NS - 2; s < NS; s++) {
        assert_int_equal(suffix_tree_begin(&t, 1), 0);
        assert_int_equal(suffix_tree_append(&t, seq[s], len[s]), 0);
    }
    check_tree(&t, seq, len, NS - 2, NS);
    assert_int_equal(t.cont[0], len[NS - 2] + len[NS - 1]);
    suffix_tree_free(&t);
    for (int s = 0; s < NS; s++) free(seq[s]);
}

static void test_accept_observe(void **state) {
    (void)state;
    accept_counts run, own;
    accept_prior flat = {.shrink = 8, .req_weight = 1e9f}; /* no request factor */
    assert_int_equal(accept_counts_init(&run, 2, 0.25f, 4), 0);
    assert_int_equal(accept_counts_init(&own, 2, 0, 0), 0);
    int cell[3] = {1, 1, 1}, tok[3] = {5, 6, 7};
    assert_float_equal(accept_conf(&run, &own, &flat, 1, 0), 0.25f, 1e-6);
    /* 1 accepted, then the committed token equals x_2 (not verified, bonus drawn as x_2) */
    int c1[] = {5, 6}, c2[] = {9}, c3[] = {5, 6, 7, 8};
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 3, c1, 2, -1), 2);
    assert_float_equal(own.obs[1 * AS_POS + 0], 1, 0);
    assert_float_equal(own.acc[1 * AS_POS + 1], 1, 0);
    /* nothing accepted, a different token committed: one observation, a miss */
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 3, c2, 1, -1), 0);
    assert_float_equal(own.obs[1 * AS_POS + 0], 2, 0);
    assert_float_equal(own.acc[1 * AS_POS + 0], 1, 0);
    /* all accepted: positions 1..3, the bonus compared with what the copy would draft next */
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 3, c3, 4, 8), 4);
    assert_float_equal(own.obs[1 * AS_POS + 2], 1, 0);
    /* shrinkage: (own acc + 8 * 0.25) / (own obs + 8) at position 1 */
    assert_float_equal(accept_conf(&run, &own, &flat, 1, 0), (2 + 8 * 0.25f) / (3 + 8), 1e-6);
    /* the request factor: 5 hits where the rates predicted less, so every cell is scaled up */
    assert_float_equal((float)own.hits, 5, 0);
    assert_true(own.expect > 0 && own.expect < 5);
    accept_prior req = {.shrink = 8, .req_weight = 4};
    float f = (float)((own.hits + 4) / (own.expect + 4));
    assert_float_equal(accept_conf(&run, &own, &req, 0, 0), 0.25f * f, 1e-6); /* an unseen cell */
    /* another drafter's tokens were verified (combine): observed while they agree with this draft,
     * a miss at the first difference, nothing after; an end of generation cuts the observation */
    accept_counts o2;
    assert_int_equal(accept_counts_init(&o2, 2, 0, 0), 0);
    int c4[] = {5, 2, 7, 8}, c5[] = {5};
    assert_int_equal(accept_observe(&o2, &run, &flat, cell, tok, 3, c4, 4, -1), 1);
    assert_float_equal(o2.obs[1 * AS_POS + 1], 1, 0);
    assert_float_equal(o2.acc[1 * AS_POS + 1], 0, 0);
    assert_float_equal(o2.obs[1 * AS_POS + 2], 0, 0);
    assert_int_equal(accept_observe(&o2, &run, &flat, cell, tok, 3, c5, 1, -1), 1);
    assert_float_equal(o2.obs[1 * AS_POS + 1], 1, 0);
    assert_int_equal(accept_observe(&o2, &run, &flat, cell, tok, 0, c4, 4, -1), 0); /* no proposal */
    accept_counts_free(&o2);
    accept_counts_add(&run, &own);
    assert_float_equal(run.obs[1 * AS_POS], 4 + 3, 0);
    accept_counts_zero(&own);
    assert_true(own.hits == 0 && own.expect == 0);
    accept_counts_free(&run);
    accept_counts_free(&own);
}

/* The counts' whole table, not its first cells: every cell and position starts at the prior (the last
 * too), positions past AS_POS - 1 share the last slot (a 20-token accepted draft puts 5 observations
 * there, one in each earlier slot, none in other cells), a request's counts merge into the run's entry
 * by entry and are zeroed entry by entry, and the confidence a draft carries is the calibrated one for
 * the positions that have a temperature and the raw one after them. */
static void test_accept_counts_table(void **state) {
    (void)state;
    enum { NC = 3, N = 20 };
    accept_counts run, own;
    accept_prior flat = {.shrink = 8, .req_weight = 1e9f};
    assert_int_equal(accept_counts_init(&run, NC, 0.4f, 5), 0);
    assert_int_equal(accept_counts_init(&own, NC, 0, 0), 0);
    for (int i = 0; i < NC * AS_POS; i++) {
        assert_float_equal(run.acc[i], 2, 1e-6);
        assert_float_equal(run.obs[i], 5, 0);
        assert_true(own.acc[i] == 0 && own.obs[i] == 0);
    }
    int cell[N], tok[N], com[N + 1];
    for (int k = 0; k < N; k++) cell[k] = 2, tok[k] = com[k] = 10 + k;
    com[N] = 3;
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, N, com, N + 1, -1), N);
    for (int c = 0; c < NC; c++)
        for (int k = 0; k < AS_POS; k++) {
            float want = c != 2 ? 0 : k < AS_POS - 1 ? 1 : N - (AS_POS - 1);
            assert_float_equal(own.obs[c * AS_POS + k], want, 0);
            assert_float_equal(own.acc[c * AS_POS + k], want, 0);
        }
    float deep = (5 + 8 * 0.4f) / (5 + 8), first = (1 + 8 * 0.4f) / (1 + 8);
    assert_float_equal(accept_conf(&run, &own, &flat, 2, AS_POS - 1), deep, 1e-5);
    assert_float_equal(accept_conf(&run, &own, &flat, 2, 40), deep, 1e-5);
    assert_float_equal(accept_conf(&run, &own, &flat, 2, 0), first, 1e-5);
    assert_float_equal(accept_conf(&run, &own, &flat, 1, AS_POS - 1), 0.4f, 1e-5);
    /* a draft's q and confidences: calibrated at positions 0 and 1 (temperatures 2 and 0.5), raw at 2 */
    accept_prior cal = flat;
    cal.n_calib = 2, cal.calib[0] = 2, cal.calib[1] = 0.5f;
    draft_block b;
    assert_int_equal(draft_block_init(&b, 4, 32, 1), 0);
    for (int k = 0; k < 3; k++) accept_draft(&b, k, 7 + k, 2, FAULT_NONE, &run, &own, &cal);
    for (int k = 0; k < 3; k++) {
        float raw = accept_conf(&run, &own, &cal, 2, k), want = raw;
        if (k < 2) want = 1 / (1 + expf(-logf(raw / (1 - raw)) / cal.calib[k]));
        assert_int_equal(b.tok[k], 7 + k);
        assert_float_equal(b.conf_raw[k], raw, 0);
        assert_float_equal(b.conf[k], want, 1e-6);
        for (int v = 0; v < 32; v++) assert_float_equal(b.q[k * 32 + v], v == 7 + k, 0);
    }
    /* T = 2 pulls toward 1/2, T = 0.5 pushes away */
    assert_true(fabsf(b.conf[0] - 0.5f) < fabsf(b.conf_raw[0] - 0.5f) && fabsf(b.conf[1] - 0.5f) > fabsf(b.conf_raw[1] - 0.5f));
    accept_draft(&b, 3, 31, 2, FAULT_DRAFT_WRONG_Q, &run, &own, &cal); /* the gate's control: q wraps */
    assert_true(b.q[3 * 32 + 31] == 0.5f && b.q[3 * 32 + 0] == 0.5f);
    draft_block_free(&b);
    /* merge and zero, entry by entry (a miss in cell 0 first, so the table's first entry has one) */
    int c0[1] = {0}, t0[1] = {4}, m0[1] = {9};
    assert_int_equal(accept_observe(&own, &run, &flat, c0, t0, 1, m0, 1, -1), 0);
    assert_true(own.obs[0] == 1 && own.acc[0] == 0);
    accept_counts_add(&run, &own);
    for (int i = 0; i < NC * AS_POS; i++) {
        assert_float_equal(run.obs[i], 5 + own.obs[i], 0);
        assert_float_equal(run.acc[i], 2 + own.acc[i], 1e-6);
    }
    accept_counts_zero(&own);
    for (int i = 0; i < NC * AS_POS; i++) assert_true(own.acc[i] == 0 && own.obs[i] == 0);
    assert_true(own.hits == 0 && own.expect == 0);
    /* the request's own counts gone: the run's rate, now (2 + 5) / (5 + 5) at cell 2's last slot */
    assert_float_equal(accept_conf(&run, &own, &flat, 2, AS_POS + 3), 7.0f / 10, 1e-5);
    accept_counts_free(&run);
    accept_counts_free(&own);
}

/* The acceptance prior's keys: the defaults, each key read, the calibration temperatures in order,
 * bad ones refused by name; and accept_observe's count when the copy's next token is id 0 or nothing
 * was proposed. */
static int prior_of(const char *json, accept_prior *ap) {
    cJSON *c = cJSON_Parse(json);
    assert_non_null(c);
    jcfg r;
    int rc = jcfg_open(&r, c, "drafter") || accept_prior_read(&r, ap) || jcfg_close(&r) ? -1 : 0;
    cJSON_Delete(c);
    return rc;
}

static void test_accept_prior_keys(void **state) {
    (void)state;
    accept_prior ap;
    assert_int_equal(prior_of("{}", &ap), 0);
    assert_true(ap.prior == 0.2f && ap.prior_n == 2 && ap.shrink == 8 && ap.req_weight == 4 && ap.n_calib == 0);
    assert_int_equal(prior_of("{\"prior\": 0.5, \"prior_weight\": 3, \"shrink\": 0.5, \"request_weight\": 7, "
                              "\"calibration\": [2, 0.5, 1.25]}", &ap), 0);
    assert_true(ap.prior == 0.5f && ap.prior_n == 3 && ap.shrink == 0.5f && ap.req_weight == 7);
    assert_int_equal(ap.n_calib, 3);
    assert_true(ap.calib[0] == 2 && ap.calib[1] == 0.5f && ap.calib[2] == 1.25f);
    assert_int_equal(prior_of("{\"shrink\": 0}", &ap), 0); /* own counts alone */
    static const char *const bad[][2] = {{"{\"calibration\": [1, 0]}", "'calibration'[1]"},
                                         {"{\"calibration\": [1, -2]}", "'calibration'[1]"},
                                         {"{\"calibration\": [\"1\"]}", "'calibration'[0]"},
                                         {"{\"calibration\": 2}", "at most 16"},
                                         {"{\"calibration\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}", "at most 16"},
                                         {"{\"prior\": 1}", "prior"},
                                         {"{\"shrink\": -1}", "shrink"}};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(prior_of(bad[i][0], &ap), -1);
        if (!strstr(ds_errmsg(), bad[i][1])) fail_msg("%s: %s", bad[i][0], ds_errmsg());
    }
    /* the count accept_observe returns: every draft copied and the next committed token is token 0, the
     * copy's next (n + 1); nothing proposed: 0 whatever was committed */
    accept_counts run, own;
    accept_prior flat = {.shrink = 8, .req_weight = 1e9f};
    assert_int_equal(accept_counts_init(&run, 1, 0.25f, 4), 0);
    assert_int_equal(accept_counts_init(&own, 1, 0, 0), 0);
    int cell[2] = {0, 0}, tok[2] = {5, 6}, com[3] = {5, 6, 0};
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 2, com, 3, 0), 3);
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 2, com, 2, 0), 2); /* an end: no next token */
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 0, com + 2, 1, 0), 0);
    assert_int_equal(accept_observe(&own, &run, &flat, cell, tok, 2, com, 3, 7), 2);
    accept_counts_free(&run);
    accept_counts_free(&own);
}

/* a drafter on a fake target: a vocabulary and no tokenizer is all the training-free ones read */
typedef struct {
    target t;
    drafter d;
    draft_block b;
} fake;

/* a drafter over a bare target of V ids; eog >= 0: the target has a tokenizer whose end token is eog */
static void fake_open_v(fake *f, const char *name, const char *cfg, int V, int eog) {
    memset(f, 0, sizeof *f);
    f->t.m.cfg.vocab_size = V;
    if (eog >= 0) f->t.has_tokenizer = 1, f->t.tk.n_eog = 1, f->t.tk.eog[0] = eog;
    cJSON *c = cJSON_Parse(cfg);
    assert_non_null(c);
    assert_int_equal(drafter_open(&f->d, name, c, &f->t), 0);
    cJSON_Delete(c);
    assert_int_equal(draft_block_init(&f->b, 16, V, 1), 0);
}

static void fake_open(fake *f, const char *name, const char *cfg) { fake_open_v(f, name, cfg, 16, -1); }

static void fake_close(fake *f) {
    draft_block_free(&f->b);
    drafter_close(&f->d);
}

static void req_set(request *r, const int *x, int n, int n_prompt) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < n; i++) assert_int_equal(ivec_push(&r->toks, x[i]), 0);
    r->n_prompt = n_prompt;
    r->max_new = 64;
}

static void check_onehot(const draft_block *b) {
    for (int k = 0; k < b->n; k++)
        for (int v = 0; v < b->V; v++) assert_float_equal(b->q[(size_t)k * b->V + v], v == b->tok[k] ? 1.0f : 0.0f, 0);
}

/* one request with context x[0..n): the drafter's proposal of at most gamma tokens is want[0..n_want) */
static void ngram_expects(fake *f, const int *x, int n, int gamma, const int *want, int n_want) {
    request r;
    req_set(&r, x, n, n);
    assert_int_equal(f->d.ops->begin(&f->d, &r, NULL), 0);
    assert_int_equal(f->d.ops->propose(&f->d, &r, gamma, NULL, &f->b), 0);
    assert_int_equal(f->b.n, n_want);
    if (n_want) assert_memory_equal(f->b.tok, want, sizeof(int) * (size_t)n_want);
    f->d.ops->end(&f->d, &r);
    ivec_free(&r.toks);
}

static void test_ngram_drafts(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "ngram", "{\"n_min\": 2, \"n_max\": 4}");
    assert_true(f.d.deterministic && f.d.has_conf);
    request r;
    /* "1 2 3 4 9 ... 1 2 3": the longest match (1 2 3) is followed by 4 9 */
    int x[] = {1, 2, 3, 4, 9, 5, 2, 3, 7, 1, 2, 3};
    req_set(&r, x, 12, 12);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 4);
    int want[] = {4, 9, 5, 2};
    assert_memory_equal(f.b.tok, want, sizeof want);
    check_onehot(&f.b);
    for (int k = 0; k < 4; k++) assert_float_equal(f.b.conf[k], 0.2f, 1e-6); /* nothing learned: the prior */
    /* commit 2 accepted + a token that is not the copy's: the context grows, the cell learns */
    int com[] = {4, 9, 8};
    for (int i = 0; i < 3; i++) assert_int_equal(ivec_push(&r.toks, com[i]), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 2, 8, NULL), 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    /* the most recent of two equally long matches; a run that copies into its own draft */
    int y[] = {6, 6, 5, 1, 6, 6, 7, 3, 6, 6}, want2[] = {7, 3, 6};
    ngram_expects(&f, y, 10, 3, want2, 3);
    int z[] = {4, 4, 4}, want3[] = {4, 4, 4, 4, 4};
    ngram_expects(&f, z, 3, 5, want3, 5);
    ngram_expects(&f, x, 12, 1, want, 1); /* one draft asked for: one */
    /* below n_min: nothing */
    int w[] = {1, 2, 3, 1};
    ngram_expects(&f, w, 4, 4, NULL, 0);
    fake_close(&f);
    /* a match at the context's very first token (n_min 1, the default): "7 8 9 7" drafts 8 9 7; no
     * match, nothing (with n_min 0: the last token again) */
    fake_open(&f, "ngram", "{}");
    int v[] = {7, 8, 9, 7}, want4[] = {8, 9, 7}, none[] = {7, 8, 9}, rep[] = {9, 9};
    ngram_expects(&f, v, 4, 3, want4, 3);
    ngram_expects(&f, none, 3, 3, NULL, 0);
    int two[] = {5, 5}, want5[] = {5, 5};
    ngram_expects(&f, two, 2, 2, want5, 2); /* the shortest context that has a match */
    fake_close(&f);
    fake_open(&f, "ngram", "{\"n_min\": 0}");
    ngram_expects(&f, none, 3, 2, rep, 2);
    fake_close(&f);
    /* bad settings name the key */
    cJSON *c = cJSON_Parse("{\"n_min\": 5, \"n_max\": 2}");
    drafter d;
    assert_int_equal(drafter_open(&d, "ngram", c, &f.t), -1);
    cJSON_Delete(c);
    c = cJSON_Parse("{\"n_max\": 0}");
    assert_int_equal(drafter_open(&d, "ngram", c, &f.t), -1);
    assert_non_null(strstr(ds_errmsg(), "n_max"));
    cJSON_Delete(c);
    c = cJSON_Parse("{\"nmax\": 2}");
    assert_int_equal(drafter_open(&d, "ngram", c, &f.t), -1);
    cJSON_Delete(c);
}

/* The deterministic drafters' confidence cells, seen from outside: a rejected draft in one cell lowers
 * the next request's confidence in that cell and in no other. ngram's: (match length bucket, whether the
 * matched n-gram's occurrences agree on what follows, whether the match continues the last round's fully
 * committed copy). */
static float first_conf(fake *f, const int *x, int n) {
    request r;
    req_set(&r, x, n, n);
    assert_int_equal(f->d.ops->begin(&f->d, &r, NULL), 0);
    assert_int_equal(f->d.ops->propose(&f->d, &r, 2, NULL, &f->b), 0);
    assert_true(f->b.n > 0);
    float c = f->b.conf[0];
    f->d.ops->end(&f->d, &r);
    ivec_free(&r.toks);
    return c;
}

/* one round of a request on x whose first draft the target rejects; the request ends (its counts join the run's) */
static void miss_first(fake *f, const int *x, int n) {
    request r;
    req_set(&r, x, n, n);
    assert_int_equal(f->d.ops->begin(&f->d, &r, NULL), 0);
    assert_int_equal(f->d.ops->propose(&f->d, &r, 2, NULL, &f->b), 0);
    assert_true(f->b.n > 0);
    int other = (f->b.tok[0] + 1) % f->b.V;
    assert_int_equal(ivec_push(&r.toks, other), 0);
    assert_int_equal(f->d.ops->commit(&f->d, &r, 0, other, NULL), 0);
    f->d.ops->end(&f->d, &r);
    ivec_free(&r.toks);
}

/* does a miss in a's cell lower b's confidence? */
static int same_cell(const char *name, const char *cfg, const int *a, int na, const int *b, int nb) {
    fake f;
    fake_open_v(&f, name, cfg, 64, -1);
    float before = first_conf(&f, b, nb);
    miss_first(&f, a, na);
    float after = first_conf(&f, b, nb);
    fake_close(&f);
    assert_true(after <= before);
    return after < before;
}

/* 40, 1..m, 41 42 43 44, 1..m: a match of exactly m tokens, found once */
static int ctx_len(int m, int *x) {
    int n = 0;
    x[n++] = 40;
    for (int i = 1; i <= m; i++) x[n++] = i;
    for (int i = 41; i <= 44; i++) x[n++] = i;
    for (int i = 1; i <= m; i++) x[n++] = i;
    return n;
}

/* ngram's and suffix's match-length buckets (1, 2, 3, 4-5, 6-8, 9-15, 16+), at and beside each edge, both ways */
static void length_cells(const char *name, const char *cfg) {
    int pairs[][3] = {{1, 2, 0}, {2, 3, 0}, {3, 4, 0}, {4, 5, 1}, {5, 6, 0}, {6, 8, 1}, {8, 9, 0},
                      {9, 15, 1}, {15, 16, 0}, {16, 20, 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int a[64], b[64], na = ctx_len(pairs[i][0], a), nb = ctx_len(pairs[i][1], b), one = pairs[i][2];
        if (same_cell(name, cfg, a, na, b, nb) != one || same_cell(name, cfg, b, nb, a, na) != one)
            fail_msg("%s: matches of %d and %d tokens: %s cell expected", name, pairs[i][0], pairs[i][1], one ? "one" : "not one");
    }
}

static void test_ngram_cells(void **state) {
    (void)state;
    const char *cfg = "{\"n_max\": 20}";
    length_cells("ngram", cfg);
    /* agreement, matches of 2: found once; twice, both followed by 5; twice, followed by 5 and 6 */
    int once[] = {9, 1, 2, 5, 6, 7, 8, 1, 2}, agree[] = {9, 1, 2, 5, 10, 1, 2, 5, 8, 1, 2},
        split[] = {9, 1, 2, 5, 10, 1, 2, 6, 8, 1, 2}, split2[] = {3, 7, 4, 11, 12, 7, 4, 13, 14, 7, 4};
    assert_false(same_cell("ngram", cfg, once, 9, agree, 11));
    assert_false(same_cell("ngram", cfg, agree, 11, once, 9));
    assert_false(same_cell("ngram", cfg, agree, 11, split, 11));
    assert_false(same_cell("ngram", cfg, split, 11, agree, 11));
    assert_false(same_cell("ngram", cfg, once, 9, split, 11));
    assert_true(same_cell("ngram", cfg, split2, 11, split, 11));
    /* matches of 1: found twice (once at the context's first token), followed by 6 and 5; followed by 6 twice */
    int split1[] = {7, 5, 7, 6, 7}, agree1[] = {7, 6, 9, 7, 6, 8, 7}, split1b[] = {9, 7, 5, 7, 6, 7};
    assert_false(same_cell("ngram", cfg, split1, 5, agree1, 7));
    assert_true(same_cell("ngram", cfg, split1, 5, split1b, 6));
    /* n_max 2: "2 3" is the match; its older occurrence within "1 2 3" still counts (both followed by 8) */
    int longer[] = {1, 2, 3, 8, 5, 2, 3, 8, 1, 2, 3};
    assert_true(same_cell("ngram", "{\"n_max\": 2}", longer, 11, agree, 11));
    /* continuation: a round whose drafts and bonus all came from the copy, then a match that goes on
     * with it (its own cell): its miss leaves a fresh match's cell (length 2, found once) as one round
     * left it */
    const char *c2 = "{\"n_max\": 2}";
    int c[] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2}, com[] = {3, 4, 5};
    float conf[2];
    for (int rounds = 1; rounds <= 2; rounds++) {
        fake f;
        fake_open_v(&f, "ngram", c2, 64, -1);
        request r;
        req_set(&r, c, 11, 11);
        assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
        assert_int_equal(f.d.ops->propose(&f.d, &r, 2, NULL, &f.b), 0);
        assert_int_equal(f.b.n, 2);
        assert_memory_equal(f.b.tok, com, 2 * sizeof(int));
        for (int i = 0; i < 3; i++) assert_int_equal(ivec_push(&r.toks, com[i]), 0);
        assert_int_equal(f.d.ops->commit(&f.d, &r, 2, 5, NULL), 0);
        if (rounds == 2) { /* "4 5" continues the copy: 6 7, rejected */
            assert_int_equal(f.d.ops->propose(&f.d, &r, 2, NULL, &f.b), 0);
            assert_int_equal(f.b.tok[0], 6);
            assert_int_equal(ivec_push(&r.toks, 9), 0);
            assert_int_equal(f.d.ops->commit(&f.d, &r, 0, 9, NULL), 0);
        }
        f.d.ops->end(&f.d, &r);
        ivec_free(&r.toks);
        conf[rounds - 1] = first_conf(&f, once, 9);
        fake_close(&f);
    }
    assert_true(conf[0] > 0.2f); /* the accepted copy raised the fresh cell */
    assert_float_equal(conf[1], conf[0], 0);
}

static void test_suffix_corpus(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "suffix", "{\"max_depth\": 8, \"min_prob\": 0.1}");
    request r;
    /* request 1: its output 3 4 5 6 7 8 goes to the corpus when it ends */
    int a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    req_set(&r, a, 8, 2);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    /* request 2 never saw "5 6" continue, the corpus has: 7 8 */
    int b[] = {9, 10, 11, 5, 6};
    req_set(&r, b, 5, 5);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    int want[] = {7, 8};
    assert_int_equal(f.b.n, 2);
    assert_memory_equal(f.b.tok, want, sizeof want);
    check_onehot(&f.b);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    /* a tie of scores (1 for one token each) goes to the request's own history */
    int c[] = {1, 5, 6, 9, 1, 5, 6, 9, 1, 5, 6};
    req_set(&r, c, 11, 11);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 1, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 1);
    assert_int_equal(f.b.tok[0], 9); /* own: 1 5 6 -> 9 (twice); corpus: 5 6 -> 7 */
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    /* the chain follows the most frequent continuation, and stops where the product of the ratios
     * falls under min_prob: 2 -> 3 (3 of 4), then 2 3 -> 4, 5 or 6 (1 of 3 each): 0.75 / 3 < 0.3 */
    fake_close(&f);
    fake_open(&f, "suffix", "{\"max_depth\": 8, \"min_prob\": 0.3, \"corpus\": false}");
    int e[] = {2, 3, 4, 2, 3, 5, 2, 3, 6, 2, 7, 3, 8, 2};
    req_set(&r, e, 14, 14);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 1);
    assert_int_equal(f.b.tok[0], 3);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}


/* suffix's cells: (local or corpus trie, match length bucket, the draft's count ratio: < 1/3, < 2/3, < 1,
 * 1 of several, 1 of one). "p_i 1 2 c_i" for each continuation c_i, then "30 1 2": a match of 2 tokens
 * whose first draft's ratio is the most frequent c_i's share */
static int ctx_conts(const int *c, int nc, int *x) {
    int n = 0;
    for (int i = 0; i < nc; i++) x[n++] = 20 + i, x[n++] = 1, x[n++] = 2, x[n++] = c[i];
    x[n++] = 30, x[n++] = 1, x[n++] = 2;
    return n;
}

static void test_suffix_cells(void **state) {
    (void)state;
    const char *cfg = "{\"corpus\": false, \"min_prob\": 0}";
    fake f;
    int a[64], b[64], na, nb;
    fake_open_v(&f, "suffix", cfg, 64, -1);
    na = ctx_len(3, a);
    assert_float_equal(first_conf(&f, a, na), 0.2f, 1e-6); /* nothing learned: the prior */
    fake_close(&f);
    length_cells("suffix", cfg);
    /* ratios at and beside the bucket edges: 1/4 | 1/3, 1/2 | 2/3, 3/4 | 1 of 2 | 1 of 1 */
    struct {
        int c[4], n;
    } r[] = {{{5, 6, 7, 8}, 4}, {{5, 6, 7}, 3}, {{5, 6}, 2}, {{5, 5, 6}, 3}, {{5, 5, 5, 6}, 4}, {{5, 5}, 2}, {{5}, 1}};
    int bucket[] = {0, 1, 1, 2, 2, 3, 4};
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 7; j++) {
            if (i == j) continue;
            na = ctx_conts(r[i].c, r[i].n, a), nb = ctx_conts(r[j].c, r[j].n, b);
            if (same_cell("suffix", cfg, a, na, b, nb) != (bucket[i] == bucket[j]))
                fail_msg("continuations %d and %d: %s cell expected", i, j, bucket[i] == bucket[j] ? "one" : "not one");
        }
}

/* suffix's best-first tree by hand: candidates popped by path frequency, ties to the one pushed first
 * (a node's next sibling before its child), the popped one leaving the list */
static void test_suffix_best_first_by_hand(void **state) {
    (void)state;
    fake f;
    fake_open_v(&f, "suffix", "{\"corpus\": false, \"min_prob\": 0, \"max_depth\": 4, \"tree_nodes\": 12, "
                "\"tree_mode\": \"best-first\"}", 64, -1);
    int x[] = {20, 5, 7, 9, 1, 21, 5, 7, 9, 2, 22, 5, 8, 3, 1, 23, 5, 8, 6, 2, 24, 5};
    request r;
    req_set(&r, x, 22, 22);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 12, NULL, &f.b), 0);
    /* after 5: 7 and 8 twice each; 5 7 -> 9 twice; 5 7 9 -> 1, 2; 5 8 -> 3, 6; 5 8 3 -> 1; 5 8 6 -> 2 (depth
     * cap 4). Popped: 7 (.5; pushes its sibling 8 and child 9, both .5), 8 (first pushed; pushes 3 .25), 9
     * (pushes 1), 3 (pushes its sibling 6, then its child 1), 1 under 9 (pushes its sibling 2), 6 (pushes
     * 2), then the rest in order pushed */
    int tok[] = {7, 8, 9, 3, 1, 6, 1, 2, 2}, par[] = {-1, -1, 0, 1, 2, 1, 3, 2, 5};
    float raw[] = {.5f, .5f, .5f, .25f, .25f, .25f, .25f, .25f, .25f};
    assert_int_equal(f.b.n, 9);
    assert_memory_equal(f.b.tok, tok, sizeof tok);
    assert_memory_equal(f.b.parent, par, sizeof par);
    for (int i = 0; i < 9; i++) assert_float_equal(f.b.conf_raw[i], raw[i], 1e-7);
    /* a budget takes the same order's first nodes (below: min_prob 0.3 drops the quarter paths) */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 4);
    assert_memory_equal(f.b.tok, tok, 4 * sizeof(int));
    assert_memory_equal(f.b.parent, par, 4 * sizeof(int));
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
    fake_open_v(&f, "suffix", "{\"corpus\": false, \"min_prob\": 0.3, \"max_depth\": 4, \"tree_nodes\": 12, "
                "\"tree_mode\": \"best-first\"}", 64, -1);
    req_set(&r, x, 22, 22);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 12, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 3);
    assert_memory_equal(f.b.tok, tok, 3 * sizeof(int));
    assert_memory_equal(f.b.parent, par, 3 * sizeof(int));
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}

/* suffix's siblings by hand: after 5, 7 three times and 8, 9, 6 once each; the chain (min_prob .3) is 7
 * alone, and beside it the w - 1 most frequent other children, ties to the earlier-made node */
static void test_suffix_siblings_by_hand(void **state) {
    (void)state;
    int x[] = {5, 7, 11, 21, 5, 7, 12, 22, 5, 7, 13, 23, 5, 8, 14, 24, 5, 9, 15, 25, 5, 6, 16, 26, 5};
    for (int w = 2; w <= 4; w++) {
        char cfg[160];
        snprintf(cfg, sizeof cfg, "{\"corpus\": false, \"min_prob\": 0.3, \"tree_nodes\": 8, \"tree_width\": %d}", w);
        fake f;
        fake_open_v(&f, "suffix", cfg, 64, -1);
        request r;
        req_set(&r, x, 25, 25);
        assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
        assert_int_equal(f.d.ops->propose(&f.d, &r, 8, NULL, &f.b), 0);
        int tok[] = {7, 8, 9, 6}; /* the draft, then siblings by count (1 of 6 each), ties by age */
        assert_int_equal(f.b.n, w);
        assert_memory_equal(f.b.tok, tok, sizeof(int) * (size_t)w);
        for (int i = 0; i < w; i++) assert_int_equal(f.b.parent[i], -1);
        assert_float_equal(f.b.conf_raw[0], 0.2f, 1e-6); /* the chain's draft: its cell's prior */
        for (int i = 1; i < w; i++) assert_float_equal(f.b.conf_raw[i], 1.0f / 6, 1e-6);
        f.d.ops->end(&f.d, &r);
        ivec_free(&r.toks);
        fake_close(&f);
    }
}

/* suffix's edges: a path frequency exactly at min_prob is drafted, in a chain and in a tree; three
 * siblings tied in count come in the order they were first seen; a rewind rebuilds the request's trie
 * from its first token; no match, nothing (min_match 1) */
static void test_suffix_edges(void **state) {
    (void)state;
    fake f;
    request r;
    int none[] = {1, 2, 3}, half[] = {5, 7, 21, 5, 8, 22, 5}, tie[] = {5, 7, 21, 5, 7, 22, 5, 8, 23, 5, 9, 24, 5, 6, 25, 5};
    const char *cfgs[] = {"{\"corpus\": false, \"min_prob\": 0.5}",
                          "{\"corpus\": false, \"min_prob\": 0.5, \"tree_nodes\": 4, \"tree_mode\": \"best-first\"}"};
    for (int i = 0; i < 2; i++) {
        fake_open_v(&f, "suffix", cfgs[i], 64, -1);
        req_set(&r, half, 7, 7); /* after 5: 7 and 8, one each: 7 at exactly .5 */
        assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
        assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
        assert_true(f.b.n >= 1); /* and on at ratio 1 */
        assert_int_equal(f.b.tok[0], 7);
        f.d.ops->end(&f.d, &r);
        ivec_free(&r.toks);
        fake_close(&f);
    }
    fake_open_v(&f, "suffix", "{\"corpus\": false, \"min_prob\": 0, \"max_depth\": 2, \"tree_nodes\": 4, \"tree_mode\": \"best-first\"}",
                64, -1);
    req_set(&r, tie, 16, 16); /* after 5: 7 twice, then 8, 9, 6 once each */
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    int want[] = {7, 8, 9, 6};
    assert_int_equal(f.b.n, 4);
    assert_memory_equal(f.b.tok, want, sizeof want);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
    /* "5 7 9 5": 5 -> 7 only through the first token */
    fake_open_v(&f, "suffix", "{\"corpus\": false, \"min_prob\": 0}", 64, -1);
    req_set(&r, none, 3, 3); /* nothing matches: no draft (not the root's most frequent token) */
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    int first[] = {5, 7, 9, 5}, want2[] = {7, 9};
    req_set(&r, first, 4, 4);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    for (int k = 0; k < 2; k++) {
        if (k) assert_int_equal(f.d.ops->rewind(&f.d, &r), 0);
        assert_int_equal(f.d.ops->propose(&f.d, &r, 2, NULL, &f.b), 0);
        assert_int_equal(f.b.n, 2);
        assert_memory_equal(f.b.tok, want2, sizeof want2);
    }
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}

/* a logits row of 16 whose top entries are ids[0] > ids[1] > ... */
static void row_of(float *z, const int *ids, int n) {
    for (int v = 0; v < 16; v++) z[v] = -(float)v * 0.01f;
    for (int j = 0; j < n; j++) z[ids[j]] = 10.0f - (float)j;
}

static void test_recycling(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "recycling", "{\"k\": 3}");
    assert_true(f.d.deterministic && f.d.has_conf);
    assert_non_null(f.d.ops->observe);
    request r, r2;
    int p[] = {1, 2, 3, 4};
    req_set(&r, p, 4, 3); /* the prompt 1 2 3 and the first token 4 */
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    /* prefill: the prompt's last row says 3 -> 4, 5, 6 */
    float z[3][16];
    int a[] = {4, 5, 6}, b[] = {7, 8, 9}, c[] = {10, 11, 12}, e[] = {13, 14, 15};
    row_of(z[0], a, 3);
    assert_int_equal(f.d.ops->observe(&f.d, &r, &p[2], z[0], 1, 1), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 0); /* nothing known after 4 */
    /* a round's rows: 4 -> 7, 7 -> 10 (the second a rejected draft's: recorded all the same) */
    int in[] = {4, 7};
    row_of(z[0], b, 3), row_of(z[1], c, 3);
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], 2, 0), 0);
    assert_int_equal(ivec_push(&r.toks, 7), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 0, 7, NULL), 0);
    r.toks.v[r.toks.n - 2] = 4;
    /* anchor 7: 7 -> 10, then 10 is unknown: one draft */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 1);
    assert_int_equal(f.b.tok[0], 10);
    check_onehot(&f.b);
    assert_true(f.b.conf[0] > 0 && f.b.conf[0] < 1);
    /* 10 -> 13 and 13 -> 3: the chain 10 13 3 4 7 runs through the prompt's row, cut at gamma */
    int in2[] = {10, 13};
    row_of(z[0], e, 3);
    int g[] = {3, 1, 2};
    row_of(z[1], g, 3);
    assert_int_equal(f.d.ops->observe(&f.d, &r, in2, &z[0][0], 2, 0), 0);
    assert_int_equal(ivec_push(&r.toks, 10), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 1, 10, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 5, NULL, &f.b), 0);
    int want[] = {13, 3, 4, 7, 10};
    assert_int_equal(f.b.n, 5);
    assert_memory_equal(f.b.tok, want, sizeof want);
    /* a second request begun now sees none of the first's rows (they join the run's table at its end) */
    int q[] = {5, 9, 7};
    req_set(&r2, q, 3, 2);
    assert_int_equal(f.d.ops->begin(&f.d, &r2, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r2, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 0);
    f.d.ops->end(&f.d, &r2);
    /* a rewind keeps only the prompt's row: 3 -> 4 */
    assert_int_equal(f.d.ops->rewind(&f.d, &r), 0);
    r.toks.n = 4;
    r.toks.v[3] = 3; /* an anchor that is the prompt's last token */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 1);
    assert_int_equal(f.b.tok[0], 4);
    /* its decode-time rows are back by the end: the run's table learns them (hot start) */
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], 1, 0), 0); /* 4 -> 13 */
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    ivec_free(&r2.toks);
    int t[] = {8, 3};
    req_set(&r2, t, 2, 1);
    assert_int_equal(f.d.ops->begin(&f.d, &r2, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r2, 2, NULL, &f.b), 0);
    int want2[] = {4, 13};
    assert_int_equal(f.b.n, 2);
    assert_memory_equal(f.b.tok, want2, sizeof want2);
    f.d.ops->end(&f.d, &r2);
    ivec_free(&r2.toks);
    /* bad settings name the key; a token outside the vocabulary is refused */
    fake_close(&f);
    cJSON *cj = cJSON_Parse("{\"k\": 0}");
    drafter d;
    assert_int_equal(drafter_open(&d, "recycling", cj, &f.t), -1);
    assert_non_null(strstr(ds_errmsg(), "k"));
    cJSON_Delete(cj);
}

/* recycling's chain cells: the recorded probability of the draft's row (buckets at .05 .1 .2 .35 .5 .7
 * .9). A request whose prompt ends 3 | 4 sees row 4 -> 7 with probability p (the rest spread evenly over
 * 64 ids) and drafts 7; with miss, the target takes 8 instead and the request ends */
static float rc_first(fake *f, float p, int miss) {
    request r;
    int pr[] = {1, 2, 3, 4}, in = 4;
    float z[64];
    for (int v = 0; v < 64; v++) z[v] = logf((1 - p) / 63);
    z[7] = logf(p);
    req_set(&r, pr, 4, 3);
    assert_int_equal(f->d.ops->begin(&f->d, &r, NULL), 0);
    assert_int_equal(f->d.ops->observe(&f->d, &r, &in, z, 1, 0), 0);
    assert_int_equal(f->d.ops->propose(&f->d, &r, 1, NULL, &f->b), 0);
    assert_int_equal(f->b.n, 1);
    assert_int_equal(f->b.tok[0], 7);
    float c = f->b.conf[0];
    if (miss) {
        assert_int_equal(ivec_push(&r.toks, 8), 0);
        assert_int_equal(f->d.ops->commit(&f->d, &r, 0, 8, NULL), 0);
    }
    f->d.ops->end(&f->d, &r);
    ivec_free(&r.toks);
    return c;
}

static int rc_same_cell(float pa, float pb) {
    fake f;
    fake_open_v(&f, "recycling", "{\"k\": 2}", 64, -1);
    float before = rc_first(&f, pb, 0);
    rc_first(&f, pa, 1);
    float after = rc_first(&f, pb, 0);
    fake_close(&f);
    assert_true(after <= before);
    return after < before;
}

static void test_recycling_cells(void **state) {
    (void)state;
    fake f;
    fake_open_v(&f, "recycling", "{\"k\": 2}", 64, -1);
    assert_float_equal(rc_first(&f, 0.5f, 0), 0.2f, 1e-6); /* nothing learned: the prior */
    fake_close(&f);
    float one[] = {0.03f, 0.07f, 0.15f, 0.3f, 0.4f, 0.6f, 0.8f, 0.95f}; /* one a bucket */
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            if (i != j && rc_same_cell(one[i], one[j])) fail_msg("rows of %.2f and %.2f share a cell", one[i], one[j]);
    float same[][2] = {{0.02f, 0.04f}, {0.25f, 0.3f}, {0.91f, 0.99f}};
    for (int i = 0; i < 3; i++) assert_true(rc_same_cell(same[i][0], same[i][1]));
}

/* a scheduler's draft_more stand-in that refuses and counts the asks */
static int refuse_more(void *ctx, int k, const float *conf) {
    (void)k, (void)conf;
    ++*(int *)ctx;
    return 0;
}

/* The paper's static tree, whole: with a row of 8 known for every token, all 80 nodes are present, and
 * numbered breadth first (a node's children by the rank of their token in its row) they have the
 * template's child counts (Luo et al., Fig. 5; SAM-Decoding's token_recycle.json), restated here */
static void test_recycling_template_whole(void **state) {
    (void)state;
    static const int paper[81] = {8, 8, 4, 3, 2, 1, 1, 1, 1, 8, 3, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 1, 0, 0, 1, 0, 1,
                                  1, 0, 0, 5, 2, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0,
                                  0, 3, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    fake f;
    fake_open(&f, "recycling", "{\"k\": 8, \"tree_shape\": \"static\"}");
    draft_block_free(&f.b); /* room for the whole tree */
    assert_int_equal(draft_block_init(&f.b, 80, 16, 1), 0);
    request r;
    int p[] = {1, 2, 3, 4};
    req_set(&r, p, 4, 3);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    /* token x's row: x + 9, ..., x + 16 (mod 16), in that order (id 0 in most rows) */
    float z[16][16];
    int in[16];
    for (int x = 0; x < 16; x++) {
        int ids[8];
        for (int j = 0; j < 8; j++) ids[j] = (x + 9 + j) % 16;
        row_of(z[x], ids, 8);
        in[x] = x;
    }
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], 16, 0), 0);
    int asks = 0;
    f.b.more = refuse_more, f.b.more_ctx = &asks; /* rows cost nothing: never asked */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 80, NULL, &f.b), 0);
    assert_int_equal(asks, 0);
    assert_int_equal(f.b.n, 80);
    /* breadth-first numbers: level by level, by the parent's number, then by rank */
    int depth[80], rank[80], bfs[80], kids[81] = {0}, m = 0;
    for (int i = 0; i < 80; i++) {
        int u = f.b.parent[i], pt = u < 0 ? 4 : f.b.tok[u];
        assert_true(u < i);
        depth[i] = u < 0 ? 1 : depth[u] + 1;
        rank[i] = (f.b.tok[i] - pt - 9 + 32) % 16;
        assert_true(rank[i] < 8);
    }
    for (int dd = 1; dd <= 6; dd++)
        for (int pb = 0; pb <= m; pb++)
            for (int rk = 0; rk < 8; rk++)
                for (int i = 0; i < 80; i++)
                    if (depth[i] == dd && rank[i] == rk && (f.b.parent[i] < 0 ? 0 : bfs[f.b.parent[i]]) == pb)
                        bfs[i] = ++m, kids[pb]++;
    assert_int_equal(m, 80);
    assert_memory_equal(kids, paper, sizeof kids);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}

/* recycling's tree: "repeat" with no row makes the token its own child at .5; the calibration scale
 * (accepted + 1) / (verified nodes' raw confidences + 1), back to 1 after a rewind */
static void test_recycling_tree_repeat_calib(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "recycling", "{\"k\": 3, \"tree_nodes\": 4, \"repeat\": true}");
    request r;
    int p[] = {1, 2, 3, 4};
    req_set(&r, p, 4, 3);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    /* no rows at all: 4 -> 4 -> 4 ... at .5 a level; rows cost nothing: the scheduler is never asked */
    int asks = 0;
    f.b.more = refuse_more, f.b.more_ctx = &asks;
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_int_equal(asks, 0);
    f.b.more = NULL;
    int tok0[] = {4, 4, 4, 4}, par0[] = {-1, 0, 1, 2};
    assert_int_equal(f.b.n, 4);
    assert_memory_equal(f.b.tok, tok0, sizeof tok0);
    assert_memory_equal(f.b.parent, par0, sizeof par0);
    for (int i = 0; i < 4; i++) assert_float_equal(f.b.conf_raw[i], ldexpf(1, -(i + 1)), 1e-7);
    /* row 4 -> 7 8 9 (~.665 .245 .090): 7 (no row) repeats at half its path */
    float z[16];
    int a[] = {7, 8, 9}, in = 4;
    row_of(z, a, 3);
    assert_int_equal(f.d.ops->observe(&f.d, &r, &in, z, 1, 0), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    int tok[] = {7, 7, 8, 7}, par[] = {-1, 0, -1, 1};
    assert_memory_equal(f.b.tok, tok, sizeof tok);
    assert_memory_equal(f.b.parent, par, sizeof par);
    float raw[4];
    for (int i = 0; i < 4; i++) raw[i] = f.b.conf_raw[i], assert_float_equal(f.b.conf[i], raw[i], 0); /* scale 1 */
    assert_float_equal(raw[1], raw[0] / 2, 1e-7);
    /* a round verifying nodes 0 and 1 (observe: the anchor's row and theirs), one accepted */
    int in2[] = {4, 7, 7};
    float z2[3][16];
    for (int i = 0; i < 3; i++) memcpy(z2[i], z, sizeof z);
    assert_int_equal(f.d.ops->observe(&f.d, &r, in2, &z2[0][0], 3, 0), 0);
    assert_int_equal(ivec_push(&r.toks, 7), 0);
    assert_int_equal(ivec_push(&r.toks, 8), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 1, 8, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    double scale = (1.0 + 1) / (raw[0] + raw[1] + 1);
    assert_true(f.b.n > 0);
    for (int i = 0; i < f.b.n; i++) assert_float_equal(f.b.conf[i], fmin(1.0, f.b.conf_raw[i] * scale), 1e-6);
    /* a rewind forgets the request's judgement */
    assert_int_equal(f.d.ops->rewind(&f.d, &r), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 4, NULL, &f.b), 0);
    assert_true(f.b.n > 0);
    for (int i = 0; i < f.b.n; i++) assert_float_equal(f.b.conf[i], f.b.conf_raw[i], 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}

/* recycling's static tree: the paper's template filled breadth first (the c-th child of a node is the
 * c-th token of its row), a node absent with its subtree when its parent's row is unknown or short,
 * handed out by path probability (ties breadth first), its N most probable nodes under a budget */
static void test_recycling_static_tree(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "recycling", "{\"k\": 3, \"tree_shape\": \"static\"}");
    assert_int_equal(f.d.tree_nodes, 80);
    request r;
    int p[] = {1, 2, 3, 4};
    req_set(&r, p, 4, 3);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    /* rows: 4 -> 7 8 9, 7 -> 10 11 12, 8 -> 13 14 15, 10 -> 1 2 3 */
    float z[4][16];
    int in[] = {4, 7, 8, 10}, a[] = {7, 8, 9}, b[] = {10, 11, 12}, e[] = {13, 14, 15}, h[] = {1, 2, 3};
    row_of(z[0], a, 3), row_of(z[1], b, 3), row_of(z[2], e, 3), row_of(z[3], h, 3);
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], 4, 0), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 80, NULL, &f.b), 0);
    /* present: the anchor's 8 children (3 known: 7 8 9), 7's 8 (10 11 12), 8's 4 (13 14 15), 10's 8 (1 2 3);
     * by path (row probabilities ~.665 .245 .090, a row's tail shifting them slightly): 7 .665, 10 .442,
     * 1 .294, 8 .245, 11 .163, 13 .163, 2 .108, 9 .090, 12 .060, 14 .060, 3 .040, 15 .022 */
    int tok[] = {7, 10, 1, 8, 11, 13, 2, 9, 12, 14, 3, 15}, par[] = {-1, 0, 1, -1, 0, 3, 1, -1, 0, 3, 1, 3};
    assert_int_equal(f.b.tree, TREE_TOPK);
    assert_int_equal(f.b.n, 12);
    assert_memory_equal(f.b.tok, tok, sizeof tok);
    assert_memory_equal(f.b.parent, par, sizeof par);
    assert_float_equal(f.b.conf_raw[1], f.b.conf_raw[0] * f.b.conf_raw[0], 1e-5); /* 7 then 10: the same row shape */
    assert_float_equal(f.b.conf_raw[2], f.b.conf_raw[1] * f.b.conf_raw[0], 1e-5);
    for (int i = 1; i < 12; i++) assert_true(f.b.conf_raw[i] <= f.b.conf_raw[i - 1]);
    /* a budget keeps the most probable nodes: the same order cut */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 5, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 5);
    assert_memory_equal(f.b.tok, tok, 5 * sizeof(int));
    assert_memory_equal(f.b.parent, par, 5 * sizeof(int));
    assert_int_equal(f.d.ops->commit(&f.d, &r, 0, 7, NULL), 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
    const char *bad[] = {"{\"tree_shape\": \"round\"}", "{\"tree_shape\": \"static\", \"tree_nodes\": 81}"};
    for (int i = 0; i < 2; i++) {
        cJSON *cj = cJSON_Parse(bad[i]);
        drafter d;
        assert_int_equal(drafter_open(&d, "recycling", cj, &f.t), -1);
        assert_non_null(strstr(ds_errmsg(), i ? "tree_nodes" : "tree_shape"));
        cJSON_Delete(cj);
    }
}

/* recycling's tree: DDTree's best-first order over the recorded probabilities, parents before children,
 * siblings by rank, scores the path products */
static void test_recycling_tree(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "recycling", "{\"k\": 3, \"tree_nodes\": 6}");
    assert_int_equal(f.d.tree_nodes, 6);
    request r;
    int p[] = {1, 2, 3, 4};
    req_set(&r, p, 4, 3);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    /* rows: 4 -> 7 8 9 (p ~ .665 .245 .090), 7 -> 10 11 12 (the same), 8 -> 13 14 15 (steeper: ~.88 .12) */
    float z[3][16];
    int in[] = {4, 7, 8}, a[] = {7, 8, 9}, b[] = {10, 11, 12}, e[] = {13, 14, 15};
    row_of(z[0], a, 3), row_of(z[1], b, 3), row_of(z[2], e, 3);
    z[2][14] = 8.0f, z[2][15] = 6.0f;
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], 3, 0), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 6, NULL, &f.b), 0);
    int tok[] = {7, 10, 8, 13, 11, 9}, par[] = {-1, 0, -1, 2, 0, -1};
    assert_int_equal(f.b.tree, TREE_TOPK);
    assert_int_equal(f.b.n, 6);
    assert_memory_equal(f.b.tok, tok, sizeof tok);
    assert_memory_equal(f.b.parent, par, sizeof par);
    for (int i = 1; i < 6; i++) assert_true(f.b.conf[i] <= f.b.conf[i - 1]); /* best first */
    assert_float_equal(f.b.conf[1], f.b.conf[0] * f.b.conf[0], 1e-5); /* 7 then 10: .665^2 */
    /* a budget cuts the same order */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 3, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 3);
    assert_memory_equal(f.b.tok, tok, 3 * sizeof(int));
    assert_int_equal(f.d.ops->commit(&f.d, &r, 0, 7, NULL), 0);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
    cJSON *cj = cJSON_Parse("{\"tree_nodes\": 65}");
    drafter d;
    assert_int_equal(drafter_open(&d, "recycling", cj, &f.t), -1);
    assert_non_null(strstr(ds_errmsg(), "tree_nodes"));
    cJSON_Delete(cj);
}

/* suffix's tree: the matched context's continuations best first by frequency, siblings by count */
static void test_suffix_tree_mode(void **state) {
    (void)state;
    fake f;
    fake_open(&f, "suffix", "{\"tree_nodes\": 3, \"max_depth\": 2, \"corpus\": false, \"min_prob\": 0, "
                            "\"tree_mode\": \"best-first\"}");
    assert_int_equal(f.d.tree_nodes, 3);
    request r;
    int x[] = {5, 7, 5, 8, 5, 7, 5}; /* after 5: 7 twice, 8 once */
    req_set(&r, x, 7, 3);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 3, NULL, &f.b), 0);
    int tok[] = {7, 8}, par[] = {-1, -1};
    assert_int_equal(f.b.tree, TREE_TOPK);
    assert_int_equal(f.b.n, 2); /* the depth cap leaves two */
    assert_memory_equal(f.b.tok, tok, sizeof tok);
    assert_memory_equal(f.b.parent, par, sizeof par);
    assert_float_equal(f.b.conf[0], 2.0 / 3, 1e-6);
    assert_float_equal(f.b.conf[1], 1.0 / 3, 1e-6);
    /* calibration: both nodes verified (raw confidences summing to 1), none accepted: the scheduler's
     * confidences halve, (0 + 1) / (1 + 1); the raw frequencies stay */
    int in[] = {5, 7, 8};
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, NULL, 3, 0), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 0, 7, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 3, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 2);
    assert_float_equal(f.b.conf_raw[0], 2.0 / 3, 1e-6);
    assert_float_equal(f.b.conf[0], 1.0 / 3, 1e-6);
    assert_float_equal(f.b.conf[1], 1.0 / 6, 1e-6);
    /* a cut tree: the anchor's row and one node verified, one accepted: (0 + 1 + 1) / (1 + 2/3 + 1) */
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, NULL, 2, 0), 0);
    assert_int_equal(f.d.ops->commit(&f.d, &r, 1, 7, NULL), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 3, NULL, &f.b), 0);
    assert_float_equal(f.b.conf[0], 2.0 / 3 * 2 / (8.0 / 3), 1e-6);
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
}

/* node i's path of tokens from the anchor, into path (returns its length) */
static int node_path(const draft_block *b, int i, int *path) {
    int n = 0, tmp[64];
    for (; i >= 0; i = b->parent[i]) tmp[n++] = b->tok[i];
    for (int j = 0; j < n; j++) path[j] = tmp[n - 1 - j];
    return n;
}

/* a round's committed tokens (the last one the next anchor) into both requests, both drafters
 * committing and proposing again; the tree's spine must carry the chain's confidences */
static void both_round(fake *ch, request *rc, fake *f, request *r, const int *com, int n, int n_acc) {
    for (int i = 0; i < n; i++) {
        assert_int_equal(ivec_push(&rc->toks, com[i]), 0);
        assert_int_equal(ivec_push(&r->toks, com[i]), 0);
        if (i == n - 2) {
            assert_int_equal(ch->d.ops->commit(&ch->d, rc, n_acc, com[i], NULL), 0);
            assert_int_equal(f->d.ops->commit(&f->d, r, n_acc, com[i], NULL), 0);
        }
    }
    assert_int_equal(ch->d.ops->propose(&ch->d, rc, 6, NULL, &ch->b), 0);
    assert_int_equal(f->d.ops->propose(&f->d, r, 12, NULL, &f->b), 0);
    float a = 1;
    for (int k = 0, par = -1; k < ch->b.n; k++) {
        int at = -1;
        for (int i = 0; i < f->b.n; i++)
            if (f->b.parent[i] == par && f->b.tok[i] == ch->b.tok[k]) at = i;
        assert_true(at > par);
        a *= ch->b.conf[k];
        assert_float_equal(f->b.conf[at], a, 1e-6);
        par = at;
    }
}

/* suffix's siblings mode: the chain mode's drafts as the spine (re-matched past the depth cap, which
 * the best-first tree cannot do), beside each draft the trie's next most frequent children of its
 * parent, best first by path confidence; siblings judged only when verified with their parent reached */
static void test_suffix_sibling_tree(void **state) {
    (void)state;
    /* after 5: 7 three times, 8 once; after 5 7: 9 twice, 4 once; depth cap 3 */
    int x[] = {5, 7, 9, 5, 7, 9, 5, 8, 3, 5, 7, 4, 5};
    const char *base = "\"max_depth\": 3, \"corpus\": false, \"min_prob\": 0.3, \"prior\": 0.9";
    char cfg[256];
    fake ch, f;
    snprintf(cfg, sizeof cfg, "{%s}", base);
    fake_open(&ch, "suffix", cfg);
    snprintf(cfg, sizeof cfg, "{%s, \"tree_nodes\": 12}", base);
    fake_open(&f, "suffix", cfg);
    assert_int_equal(f.d.tree_nodes, 12);
    request rc, r;
    req_set(&rc, x, 13, 13);
    req_set(&r, x, 13, 13);
    assert_int_equal(ch.d.ops->begin(&ch.d, &rc, NULL), 0);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    assert_int_equal(ch.d.ops->propose(&ch.d, &rc, 6, NULL, &ch.b), 0);
    assert_int_equal(f.d.ops->propose(&f.d, &r, 12, NULL, &f.b), 0);
    /* 7 (3 of 4), 9 (2 of 3), 5 past the depth cap by re-matching "7 9"; then 7 or 8 (1 of 2 each)
     * would take the product of the ratios under min_prob */
    assert_int_equal(ch.b.n, 3);
    assert_int_equal(f.b.tree, TREE_TOPK);
    /* the spine: the chain's 3 drafts, each the child of the one before, with the chain's c's */
    int spine[3], path[64], par = -1;
    assert_int_equal(f.b.n, 5); /* and two siblings */
    for (int k = 0; k < 3; k++) {
        spine[k] = -1;
        for (int i = 0; i < f.b.n; i++)
            if (f.b.parent[i] == par && f.b.tok[i] == ch.b.tok[k]) spine[k] = i;
        assert_true(spine[k] > par); /* found, after its parent */
        par = spine[k];
    }
    assert_float_equal(f.b.conf[spine[0]], ch.b.conf[0], 1e-6);
    assert_float_equal(f.b.conf[spine[1]], ch.b.conf[0] * ch.b.conf[1], 1e-6);
    /* the siblings: 8 beside the first draft (1 of 4 after 5), 4 beside the second (1 of 3 after 5 7);
     * after 7 9 only 5 was seen: no sibling. Confidences descend, every node after its parent */
    int sib8 = -1, sib4 = -1;
    for (int i = 0; i < f.b.n; i++) {
        if (i) assert_true(f.b.conf[i] <= f.b.conf[i - 1]);
        assert_true(f.b.parent[i] < i);
        if (f.b.parent[i] == -1 && f.b.tok[i] == 8) sib8 = i;
        if (f.b.parent[i] == spine[0] && f.b.tok[i] == 4) sib4 = i;
        if (f.b.parent[i] == spine[1]) assert_int_equal(f.b.tok[i], 5);
        for (int j = 0; j < i; j++) /* siblings are distinct tokens */
            if (f.b.parent[j] == f.b.parent[i]) assert_int_not_equal(f.b.tok[j], f.b.tok[i]);
    }
    assert_true(sib8 >= 0 && sib4 >= 0);
    assert_float_equal(f.b.conf_raw[sib8], fminf(ch.b.conf_raw[0], 0.25f), 1e-6);
    assert_float_equal(f.b.conf[sib8], fminf(ch.b.conf[0], 0.25f), 1e-6);
    assert_float_equal(f.b.conf[sib4], ch.b.conf[0] * fminf(ch.b.conf[1], 1.0f / 3), 1e-6);
    assert_int_equal(node_path(&f.b, sib4, path), 2);
    /* a round verifying every node, the target taking 8: the first sibling was reached and accepted,
     * the one beside the second draft not reached (its parent was rejected): the scale becomes
     * (1 + 1) / (0.25 + 1) on the reached siblings alone. The chain drafter sees the same rounds: its
     * cells judge its drafts against the committed tokens, and the spine's must move alike */
    int in[13];
    for (int i = 0; i < 13; i++) in[i] = 5;
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, NULL, f.b.n + 1, 0), 0);
    int round1[] = {8, 6, 5}, round2[] = {10, 5}, round3[] = {7, 9, 5};
    both_round(&ch, &rc, &f, &r, round1, 3, 1);
    sib8 = -1;
    for (int i = 0; i < f.b.n; i++)
        if (f.b.parent[i] == -1 && f.b.tok[i] == 8) sib8 = i;
    /* the same match again ("6 5" unseen): 5 -> 7 (3 of 5 now), 8 (2 of 5) */
    assert_true(sib8 > 0 && f.b.tok[0] == 7);
    assert_float_equal(f.b.conf_raw[sib8], fminf(f.b.conf_raw[0], 0.4f), 1e-6);
    assert_float_equal(f.b.conf[sib8], fminf(f.b.conf[0], (float)fmin(1.0, 0.4 * 2 / 1.25)), 1e-6);
    /* a cut tree: only the first draft verified and rejected: no sibling judged, the scale stays */
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, NULL, 2, 0), 0);
    both_round(&ch, &rc, &f, &r, round2, 2, 0);
    sib8 = -1;
    for (int i = 0; i < f.b.n; i++)
        if (f.b.parent[i] == -1 && f.b.tok[i] == 8) sib8 = i;
    assert_true(sib8 > 0 && f.b.tok[0] == 7); /* 5 -> 7, 8 or 10: 8 is 2 of 6 */
    assert_float_equal(f.b.conf[sib8], fminf(f.b.conf[0], (float)fmin(1.0, 2.0 / 6 * 2 / 1.25)), 1e-6);
    /* cut after the first draft, accepted, the bonus token the second draft's: the draft the round did
     * not verify is judged by the bonus, as the chain's is */
    assert_int_equal(f.d.ops->observe(&f.d, &r, in, NULL, 2, 0), 0);
    both_round(&ch, &rc, &f, &r, round3, 3, 1);
    /* the budget cuts the least confident nodes; what is left is a tree */
    assert_int_equal(f.d.ops->propose(&f.d, &r, 3, NULL, &f.b), 0);
    assert_int_equal(f.b.n, 3);
    for (int i = 0; i < 3; i++) assert_true(f.b.parent[i] < i);
    ch.d.ops->end(&ch.d, &rc);
    f.d.ops->end(&f.d, &r);
    ivec_free(&rc.toks);
    ivec_free(&r.toks);
    fake_close(&ch);
    fake_close(&f);
    /* bad tree settings name the key */
    const char *bad[] = {"{\"tree_nodes\": 4, \"tree_mode\": \"wide\"}", "{\"tree_nodes\": 4, \"tree_width\": 5}"};
    for (int i = 0; i < 2; i++) {
        cJSON *cj = cJSON_Parse(bad[i]);
        drafter d;
        assert_int_equal(drafter_open(&d, "suffix", cj, &f.t), -1);
        assert_non_null(strstr(ds_errmsg(), i ? "tree_width" : "tree_mode"));
        cJSON_Delete(cj);
    }
}

/* A draft ends at end-of-generation: with a tokenizer target, every training-free drafter's chain stops
 * after an EOG token and no tree grows children under one (the target would stop there, so whatever
 * follows is verified for nothing). The same drafts without the tokenizer run on past it, so each case
 * shows the check is what cuts them. */
#define EOG 15
/* the drafts of one request on context x (rows: recycling's recorded rows after each token in in[]) */
static int drafts_eog(const char *name, const char *cfg, int eog, const int *x, int n, int gamma, const int *in,
                      int n_in, const int (*rows)[3], int *tok, int *par) {
    fake f;
    fake_open_v(&f, name, cfg, 16, eog ? EOG : -1);
    request r;
    req_set(&r, x, n, n);
    assert_int_equal(f.d.ops->begin(&f.d, &r, NULL), 0);
    if (n_in) {
        float z[8][16];
        for (int i = 0; i < n_in; i++) row_of(z[i], rows[i], 3);
        assert_int_equal(f.d.ops->observe(&f.d, &r, in, &z[0][0], n_in, 0), 0);
    }
    assert_int_equal(f.d.ops->propose(&f.d, &r, gamma, NULL, &f.b), 0);
    int m = f.b.n;
    memcpy(tok, f.b.tok, sizeof(int) * (size_t)m);
    for (int i = 0; i < m; i++) par[i] = f.b.tree ? f.b.parent[i] : i - 1;
    f.d.ops->end(&f.d, &r);
    ivec_free(&r.toks);
    fake_close(&f);
    return m;
}

static void test_drafts_stop_at_eog(void **state) {
    (void)state;
    int x[] = {1, 2, EOG, 4, 5, 1, 2}; /* "1 2" was followed by EOG 4 5 */
    int in[] = {4, EOG, 7}, rows[][3] = {{EOG, 8, 9}, {7, 10, 11}, {8, 12, 13}}; /* 4 -> EOG -> 7 -> 8 */
    int y[] = {1, 2, 3, 4};
    /* a chain's parents are -1 0 1 ...; the trees' nodes: recycling's 8 and 9 are the anchor's other
     * children, 10 and 12 the best of EOG's and 7's rows below the path 4 -> EOG -> 7 */
    struct {
        const char *name, *cfg;
        const int *x;
        int n, n_in, n_want, tok[6], par[6], n_eog, tok_eog[3], par_eog[3];
    } c[] = {
        {"ngram", "{\"n_min\": 1}", x, 7, 0, 6, {EOG, 4, 5, 1, 2, EOG}, {-1, 0, 1, 2, 3, 4}, 1, {EOG}, {-1}},
        {"suffix", "{\"corpus\": false, \"min_prob\": 0, \"max_depth\": 8}", x, 7, 0, 6, {EOG, 4, 5, 1, 2, EOG},
         {-1, 0, 1, 2, 3, 4}, 1, {EOG}, {-1}},
        {"suffix", "{\"corpus\": false, \"min_prob\": 0, \"max_depth\": 8, \"tree_nodes\": 4}", x, 7, 0, 6,
         {EOG, 4, 5, 1, 2, EOG}, {-1, 0, 1, 2, 3, 4}, 1, {EOG}, {-1}},
        {"suffix", "{\"corpus\": false, \"min_prob\": 0, \"max_depth\": 8, \"tree_nodes\": 4, \"tree_mode\": \"best-first\"}",
         x, 7, 0, 5, {EOG, 4, 5, 1, 2}, {-1, 0, 1, 2, 3}, 1, {EOG}, {-1}},
        {"recycling", "{\"k\": 1}", y, 4, 3, 3, {EOG, 7, 8}, {-1, 0, 1}, 1, {EOG}, {-1}},
        {"recycling", "{\"k\": 3, \"tree_nodes\": 6}", y, 4, 3, 6, {EOG, 7, 8, 8, 10, 12}, {-1, 0, 1, -1, 0, 1}, 3,
         {EOG, 8, 9}, {-1, -1, -1}},
        {"recycling", "{\"k\": 3, \"tree_shape\": \"static\"}", y, 4, 3, 6, {EOG, 7, 8, 8, 10, 12}, {-1, 0, 1, -1, 0, 1}, 3,
         {EOG, 8, 9}, {-1, -1, -1}},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int tok[64], par[64];
        assert_int_equal(drafts_eog(c[i].name, c[i].cfg, 0, c[i].x, c[i].n, 6, in, c[i].n_in, rows, tok, par), c[i].n_want);
        assert_memory_equal(tok, c[i].tok, sizeof(int) * (size_t)c[i].n_want);
        assert_memory_equal(par, c[i].par, sizeof(int) * (size_t)c[i].n_want);
        assert_int_equal(drafts_eog(c[i].name, c[i].cfg, 1, c[i].x, c[i].n, 6, in, c[i].n_in, rows, tok, par), c[i].n_eog);
        assert_memory_equal(tok, c[i].tok_eog, sizeof(int) * (size_t)c[i].n_eog);
        assert_memory_equal(par, c[i].par_eog, sizeof(int) * (size_t)c[i].n_eog);
    }
}
#undef EOG

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suffix_tree_counts),
        cmocka_unit_test(test_accept_observe),
        cmocka_unit_test(test_accept_counts_table),
        cmocka_unit_test(test_accept_prior_keys),
        cmocka_unit_test(test_ngram_drafts),
        cmocka_unit_test(test_ngram_cells),
        cmocka_unit_test(test_suffix_corpus),
        cmocka_unit_test(test_suffix_cells),
        cmocka_unit_test(test_suffix_best_first_by_hand),
        cmocka_unit_test(test_suffix_siblings_by_hand),
        cmocka_unit_test(test_suffix_edges),
        cmocka_unit_test(test_recycling),
        cmocka_unit_test(test_recycling_tree),
        cmocka_unit_test(test_recycling_static_tree),
        cmocka_unit_test(test_recycling_cells),
        cmocka_unit_test(test_recycling_template_whole),
        cmocka_unit_test(test_recycling_tree_repeat_calib),
        cmocka_unit_test(test_suffix_tree_mode),
        cmocka_unit_test(test_suffix_sibling_tree),
        cmocka_unit_test(test_drafts_stop_at_eog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
