/* test_tokenizer — byte-level BPE against an independent implementation (llama.cpp's tokenizer of
 * the same GGUF, ids captured by tests/ref/make_fixtures.py into tests/fixtures/tokenizer_ids.json),
 * the chat template against the reference prompt ids, round trips, merge priority on a vocabulary
 * built here, and malformed tokenizer metadata. */
#include "testutil.h"

#include <cJSON.h>

#include "../runtime/model/model.h"
#include "../runtime/text/tokenizer.h"

static cJSON *load_json(const char *path) {
    char *txt;
    size_t n;
    if (ds_read_file(path, &txt, &n)) fail_msg("%s", ds_errmsg());
    cJSON *j = cJSON_ParseWithLength(txt, n);
    free(txt);
    if (!j) fail_msg("%s: bad JSON", path);
    return j;
}

typedef struct {
    model m;
    tokenizer tk;
} real_tok;

static int setup_real(void **state) {
    if (!need_real_model()) return -1;
    real_tok *r = calloc(1, sizeof *r);
    if (model_load(&r->m, real_model_path()) || tokenizer_load_gguf(&r->tk, &r->m.gguf)) {
        fprintf(stderr, "%s\n", ds_errmsg());
        return -1;
    }
    *state = r;
    return 0;
}
static int teardown_real(void **state) {
    real_tok *r = *state;
    tokenizer_free(&r->tk);
    model_free(&r->m);
    free(r);
    return 0;
}

static void expect_ids(const tokenizer *tk, const char *text, int special, const cJSON *ids, int case_no) {
    ivec out = {0};
    assert_int_equal(tokenizer_encode(tk, text, strlen(text), special, &out), 0);
    int n = cJSON_GetArraySize(ids), ok = out.n == n;
    for (int i = 0; ok && i < n; i++) ok = out.v[i] == cJSON_GetArrayItem(ids, i)->valueint;
    if (!ok) {
        char buf[512];
        int w = 0;
        for (int i = 0; i < out.n && w < 400; i++) w += snprintf(buf + w, sizeof buf - (size_t)w, "%d ", out.v[i]);
        fail_msg("case %d %s: ids differ from llama.cpp (%d vs %d ids); got: %s\ntext: %s", case_no,
                 special ? "(special)" : "", out.n, n, buf, text);
    }
    ivec_free(&out);
}

static void test_ids_match_llamacpp(void **state) {
    real_tok *r = *state;
    cJSON *j = load_json(FIXTURE("tokenizer_ids.json"));
    const cJSON *cases = cJSON_GetObjectItem(j, "cases"), *sp = cJSON_GetObjectItem(j, "special_cases");
    assert_true(cJSON_GetArraySize(cases) >= 30);
    int k = 0;
    for (const cJSON *c = cases->child; c; c = c->next, k++) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        expect_ids(&r->tk, text, 0, cJSON_GetObjectItem(c, "ids"), k);
        /* decoding gives what llama.cpp's detokenizer gives */
        const cJSON *ids = cJSON_GetObjectItem(c, "ids");
        int n = cJSON_GetArraySize(ids), *v = malloc(sizeof(int) * (size_t)(n + 1));
        for (int i = 0; i < n; i++) v[i] = cJSON_GetArrayItem(ids, i)->valueint;
        char *dec = tokenizer_decode(&r->tk, v, n, 0);
        const char *want = cJSON_GetObjectItem(c, "detok")->valuestring;
        if (strcmp(dec, want) != 0) fail_msg("case %d: decode \"%s\" != llama.cpp \"%s\"", k, dec, want);
        free(dec);
        free(v);
    }
    k = 0;
    for (const cJSON *c = sp->child; c; c = c->next, k++)
        expect_ids(&r->tk, cJSON_GetObjectItem(c, "text")->valuestring, 1, cJSON_GetObjectItem(c, "ids"), k);
    cJSON_Delete(j);
}

/* the chat template renders the reference prompts to the same ids */
static void test_chat_template_ids(void **state) {
    real_tok *r = *state;
    chat_template ct;
    assert_int_equal(chat_template_init(&ct, &r->tk), 0);
    assert_int_equal(ct.family, 1);
    assert_string_equal(ct.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    cJSON *j = load_json(FIXTURE("smollm2_ref.json"));
    int k = 0;
    for (const cJSON *p = cJSON_GetObjectItem(j, "prompts")->child; p; p = p->next, k++) {
        chat_msg msg = {"user", cJSON_GetObjectItem(p, "user")->valuestring};
        ivec out = {0};
        assert_int_equal(chat_encode(&ct, &r->tk, &msg, 1, 1, &out), 0);
        const cJSON *ids = cJSON_GetObjectItem(p, "prompt_ids");
        assert_int_equal(out.n, cJSON_GetArraySize(ids));
        for (int i = 0; i < out.n; i++) assert_int_equal(out.v[i], cJSON_GetArrayItem(ids, i)->valueint);
        char *txt = chat_render(&ct, &msg, 1, 1);
        assert_string_equal(txt, cJSON_GetObjectItem(p, "prompt_text")->valuestring);
        free(txt);
        ivec_free(&out);
    }
    /* the prompt is the rendered template tokenized as one text (llama.cpp's and HF's way), whatever
     * the content's first and last characters: leading spaces (an indented code line), line breaks,
     * a tab, trailing spaces, several turns, the default system message and the caller's own */
    char longer[400];
    memset(longer, 'w', sizeof longer - 1), longer[sizeof longer - 1] = 0;
    for (size_t i = 7; i < sizeof longer - 1; i += 8) longer[i] = ' ';
    const char *const contents[] = {"  def f(x):\n    return x", "\n\nHello", "\tx", " a ", "end  \n", "\n", "", longer};
    for (size_t c = 0; c < sizeof contents / sizeof *contents; c++) {
        chat_msg turns[3] = {{"system", "  be brief"}, {"user", contents[c]}, {"assistant", contents[c]}};
        for (int first = 0; first < 2; first++) {
            ivec got = {0}, want = {0};
            assert_int_equal(chat_encode(&ct, &r->tk, turns + first, 3 - first, 1, &got), 0);
            char *txt = chat_render(&ct, turns + first, 3 - first, 1);
            assert_int_equal(tokenizer_encode(&r->tk, txt, strlen(txt), 1, &want), 0);
            if (got.n != want.n || memcmp(got.v, want.v, sizeof(int) * (size_t)got.n) != 0)
                fail_msg("chat prompt for content %zu (from turn %d): %d ids, its rendered text %d", c, first, got.n, want.n);
            free(txt);
            ivec_free(&got), ivec_free(&want);
        }
    }
    /* message content is text, never special tokens */
    chat_msg inj = {"user", "<|im_end|>"};
    ivec out = {0};
    assert_int_equal(chat_encode(&ct, &r->tk, &inj, 1, 0, &out), 0);
    int specials = 0;
    for (int i = 0; i < out.n; i++) specials += out.v[i] == 2;
    assert_int_equal(specials, 2); /* the system and the user message's own end markers only */
    ivec_free(&out);
    chat_template_free(&ct);
    cJSON_Delete(j);
}

/* encode then decode gives the text back for any valid UTF-8 */
static void test_roundtrip_random(void **state) {
    real_tok *r = *state;
    rng_t rng;
    rng_seed(&rng, 5);
    static const uint32_t pool[] = {' ', ' ', '\n', '\t', 'a', 'Z', 'e', '0', '7', '\'', 's', '.', '{', '}', '_',
                                    0xE9, 0xDF, 0x416, 0x3B1, 0x627, 0x928, 0x4E2D, 0x6587, 0x3042, 0xD55C,
                                    0x1F600, 0x1F468, 0x200D, 0x2028, 0xA0, 0x3000, 0x2167, 0xFF11};
    for (int it = 0; it < 300; it++) {
        char s[600];
        int n = 0, len = 1 + (int)(rng_u64(&rng) % 60);
        for (int i = 0; i < len; i++) {
            uint32_t cp = pool[rng_u64(&rng) % (sizeof pool / sizeof *pool)];
            if (cp < 0x80) s[n++] = (char)cp;
            else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | (cp >> 6));
                s[n++] = (char)(0x80 | (cp & 63));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | (cp >> 12));
                s[n++] = (char)(0x80 | ((cp >> 6) & 63));
                s[n++] = (char)(0x80 | (cp & 63));
            } else {
                s[n++] = (char)(0xF0 | (cp >> 18));
                s[n++] = (char)(0x80 | ((cp >> 12) & 63));
                s[n++] = (char)(0x80 | ((cp >> 6) & 63));
                s[n++] = (char)(0x80 | (cp & 63));
            }
        }
        s[n] = 0;
        ivec ids = {0};
        assert_int_equal(tokenizer_encode(&r->tk, s, (size_t)n, 0, &ids), 0);
        for (int i = 0; i < ids.n; i++) assert_in_range(ids.v[i], 0, r->tk.n_vocab - 1);
        char *d = tokenizer_decode(&r->tk, ids.v, ids.n, 0);
        if (strcmp(d, s) != 0) fail_msg("round trip failed for \"%s\" -> \"%s\"", s, d);
        free(d);
        ivec_free(&ids);
    }
    /* invalid UTF-8 is replaced by U+FFFD, as llama.cpp does, and never crashes */
    ivec ids = {0};
    assert_int_equal(tokenizer_encode(&r->tk, "a\xff\xc3", 3, 0, &ids), 0);
    char *d = tokenizer_decode(&r->tk, ids.v, ids.n, 0);
    assert_string_equal(d, "a\xef\xbf\xbd\xef\xbf\xbd");
    free(d);
    ivec_free(&ids);
    /* control tokens decode to nothing unless rendered */
    int ctl[2] = {1, 2};
    d = tokenizer_decode(&r->tk, ctl, 2, 0);
    assert_string_equal(d, "");
    free(d);
    d = tokenizer_decode(&r->tk, ctl, 2, 1);
    assert_string_equal(d, "<|im_start|><|im_end|>");
    free(d);
    assert_true(tokenizer_is_eog(&r->tk, 2));
    assert_true(tokenizer_is_eog(&r->tk, 0));
    assert_false(tokenizer_is_eog(&r->tk, 1));
}

/* -------------------------------------------------------- a vocabulary built here: merge order */

/* GPT-2 byte alphabet text of one byte */
static void byte_text(int b, char *o) {
    int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, extra = 0;
    for (int i = 0; i < b; i++) extra += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE);
    uint32_t cp = keep ? (uint32_t)b : (uint32_t)(256 + extra);
    if (cp < 0x80) {
        o[0] = (char)cp;
        o[1] = 0;
    } else {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 63));
        o[2] = 0;
    }
}

static int build_tok_pre(tokenizer *tk, const char *pre, const char *const *extra, int n_extra, const char *const *merges,
                         int n_merges, const int32_t *types, int dup) {
    gguf_builder g;
    gb_init(&g);
    gb_str(&g, "tokenizer.ggml.model", "gpt2");
    gb_str(&g, "tokenizer.ggml.pre", pre);
    int n = 256 + n_extra;
    char **toks = malloc(sizeof(char *) * (size_t)n);
    for (int b = 0; b < 256; b++) {
        toks[b] = malloc(4);
        byte_text(b, toks[b]);
    }
    for (int i = 0; i < n_extra; i++) toks[256 + i] = strdup(extra[i]);
    if (dup) strcpy(toks[256 + n_extra - 1], toks['a']); /* the last extra token repeats "a" */
    gb_arr_str(&g, "tokenizer.ggml.tokens", (const char *const *)toks, n);
    gb_arr_str(&g, "tokenizer.ggml.merges", merges, n_merges);
    if (types) gb_arr_i32(&g, "tokenizer.ggml.token_type", types, 5);
    size_t sz;
    uint8_t *img = gb_finish(&g, &sz);
    gguf_file f;
    assert_int_equal(gguf_parse(&f, img, sz, "tok.gguf"), 0);
    int rc = tokenizer_load_gguf(tk, &f);
    gguf_close(&f);
    free(img);
    gb_free(&g);
    for (int i = 0; i < n; i++) free(toks[i]);
    free(toks);
    return rc;
}

static int build_tok(tokenizer *tk, const char *const *extra, int n_extra, const char *const *merges, int n_merges,
                     const int32_t *types, int dup) {
    return build_tok_pre(tk, "gpt-2", extra, n_extra, merges, n_merges, types, dup);
}

/* the tokens and merges that build `word` left to right, byte by byte (each prefix a token) */
static void add_chain(const char *word, char **extra, int *n_extra, char **merges, int *n_merges) {
    char prefix[256] = "", piece[8];
    for (size_t i = 0; word[i]; i++) {
        byte_text((unsigned char)word[i], piece);
        if (i > 0) {
            char next[256], m[520];
            snprintf(next, sizeof next, "%s%s", prefix, piece);
            snprintf(m, sizeof m, "%s %s", prefix, piece);
            int have = 0;
            for (int k = 0; k < *n_extra; k++) have |= strcmp(extra[k], next) == 0;
            if (!have) {
                extra[(*n_extra)++] = strdup(next);
                merges[(*n_merges)++] = strdup(m);
            }
        }
        strncat(prefix, piece, sizeof prefix - strlen(prefix) - 1);
    }
}

/* Qwen2's pre-tokenizer, word by word: every expected word is one token of the vocabulary built
 * here, and so are the words a wrong split would make (digits grouped, a space or a line break
 * joined to what follows, a case-sensitive contraction), so any wrong boundary changes the ids. */
static void test_qwen2_pretokenizer(void **state) {
    (void)state;
    static const char *const want[] = {"x", "'S", "\tfoo", " ", "1", "2", " ", " bar", "\n\n", "baz", ".\n\n", "y",
                                       "   \n", " ", " z", "q", "\n", "w", "'LL", "ama", "!!", "  "};
    static const char *const wrong[] = {"12", " 1", " 12", "\nw", "\n\nbaz", "\tf", "'", "S", "   \n ", "!!  ", "'LLama"};
    const char *text = "x'S\tfoo 12  bar\n\nbaz.\n\ny   \n  zq\nw'LLama!!  ";
    char *extra[256], *merges[256];
    int ne = 0, nm = 0;
    /* the wrong words' merges rank first: a wrong word becomes its own token, never the right pieces
     * (".\n\n" before all: its merges must outrank "\n\n"'s for the word to be one token) */
    add_chain(".\n\n", extra, &ne, merges, &nm);
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) add_chain(wrong[i], extra, &ne, merges, &nm);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) add_chain(want[i], extra, &ne, merges, &nm);
    tokenizer tk;
    assert_int_equal(build_tok_pre(&tk, "qwen2", (const char *const *)extra, ne, (const char *const *)merges, nm, NULL, 0), 0);
    ivec out = {0};
    assert_int_equal(tokenizer_encode(&tk, text, strlen(text), 0, &out), 0);
    char got[1024] = "", exp[1024] = "";
    for (int i = 0; i < out.n; i++) {
        char p[64];
        int w = tokenizer_piece(&tk, out.v[i], 1, p, sizeof p - 1);
        p[w > 0 ? w : 0] = 0;
        strncat(got, p, sizeof got - strlen(got) - 2);
        strcat(got, "|");
    }
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        strncat(exp, want[i], sizeof exp - strlen(exp) - 2);
        strcat(exp, "|");
    }
    if (strcmp(got, exp) != 0) fail_msg("qwen2 words:\n got  %s\n want %s", got, exp);
    /* the same vocabulary under GPT-2's rules splits differently (the test can see a wrong rule) */
    tokenizer g2;
    assert_int_equal(build_tok_pre(&g2, "gpt-2", (const char *const *)extra, ne, (const char *const *)merges, nm, NULL, 0), 0);
    ivec o2 = {0};
    assert_int_equal(tokenizer_encode(&g2, text, strlen(text), 0, &o2), 0);
    assert_true(o2.n != out.n || memcmp(o2.v, out.v, sizeof(int) * (size_t)out.n) != 0);
    ivec_free(&out), ivec_free(&o2);
    tokenizer_free(&tk), tokenizer_free(&g2);
    for (int i = 0; i < ne; i++) free(extra[i]);
    for (int i = 0; i < nm; i++) free(merges[i]);
}

/* Every pre-tokenizer against its regular expression run by an independent engine (PyPI regex, via
 * tests/ref/make_pretok.py into tests/fixtures/pretok_words.json): the words of Unicode-rich texts,
 * every White_Space code point, scripts whose combining marks are not letters, numbers of every
 * kind, 4-byte characters, contractions in both cases, line breaks after punctuation and in space
 * runs. The ids tests above see a split only where the vocabulary happens to tell it. */
static void test_pretokenizers_match_regex(void **state) {
    (void)state;
    cJSON *j = load_json(FIXTURE("pretok_words.json"));
    const cJSON *cases = cJSON_GetObjectItem(j, "cases");
    assert_true(cJSON_GetArraySize(cases) >= 100);
    const char *extra[] = {"zz"}, *merges[] = {"z z"};
    int n = 0, per_pre[5] = {0};
    const char *pres[5] = {"gpt-2", "default", "smollm", "starcoder", "qwen2"};
    for (const cJSON *c = cases->child; c; c = c->next, n++) {
        const char *pre = cJSON_GetObjectItem(c, "pre")->valuestring, *text = cJSON_GetObjectItem(c, "text")->valuestring;
        const cJSON *ends = cJSON_GetObjectItem(c, "ends");
        for (int p = 0; p < 5; p++) per_pre[p] += strcmp(pre, pres[p]) == 0;
        tokenizer tk;
        assert_int_equal(build_tok_pre(&tk, pre, extra, 1, merges, 1, NULL, 0), 0);
        ivec got = {0};
        assert_int_equal(tokenizer_words(&tk, text, strlen(text), &got), 0);
        int ok = got.n == cJSON_GetArraySize(ends), i = 0;
        for (const cJSON *e = ends->child; ok && e; e = e->next, i++) ok = got.v[i] == e->valueint;
        if (!ok) {
            char g[512] = "", w[512] = "";
            for (int k = 0; k < got.n; k++) snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got.v[k]);
            for (const cJSON *e = ends->child; e; e = e->next) snprintf(w + strlen(w), sizeof w - strlen(w), " %d", e->valueint);
            fail_msg("%s words of \"%s\" end at\n got %s\n want%s", pre, text, g, w);
        }
        ivec_free(&got);
        tokenizer_free(&tk);
    }
    for (int p = 0; p < 5; p++) assert_true(per_pre[p] >= 20); /* every name the loader accepts */
    cJSON_Delete(j);
}

/* The UTF-8 a word is re-encoded from: on a vocabulary of the 256 bytes (and one merge no text here
 * has), well-formed text encodes to its own bytes at every length boundary, and every byte of an
 * ill-formed sequence (a surrogate, an overlong form, past U+10FFFF, a lead byte no sequence starts
 * with, a truncated or stray piece) becomes U+FFFD, one each, as llama.cpp replaces them */
static void test_utf8_bytes_and_replacement(void **state) {
    (void)state;
    const char *extra[] = {"zz"}, *merges[] = {"z z"};
    tokenizer tk;
    assert_int_equal(build_tok(&tk, extra, 1, merges, 1, NULL, 0), 0);
    static const char *const valid[] = {"\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
                                        "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "a \xe3\x80\x80 b\xe2\x80\xa8"};
    for (size_t v = 0; v < sizeof valid / sizeof *valid; v++) {
        ivec ids = {0};
        size_t n = strlen(valid[v]);
        assert_int_equal(tokenizer_encode(&tk, valid[v], n, 0, &ids), 0);
        assert_int_equal(ids.n, (int)n);
        for (size_t i = 0; i < n; i++) assert_int_equal(ids.v[i], (unsigned char)valid[v][i]);
        ivec_free(&ids);
    }
    static const char *const bad[] = {"\xed\xa0\x80", "\xed\xbf\xbf", "\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf",
                                      "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xf8\x88\x80",
                                      "\xfe\x80\x80", "\xff\xbf\xbf", "\xe2\x82", "\x80", "\xbf\xbf"};
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        char text[16];
        size_t n = strlen(bad[b]);
        snprintf(text, sizeof text, "a%sb", bad[b]);
        ivec ids = {0};
        assert_int_equal(tokenizer_encode(&tk, text, n + 2, 0, &ids), 0);
        int ok = ids.n == 2 + 3 * (int)n && ids.v[0] == 'a' && ids.v[ids.n - 1] == 'b';
        for (size_t i = 0; ok && i < n; i++)
            ok = ids.v[1 + 3 * i] == 0xef && ids.v[2 + 3 * i] == 0xbf && ids.v[3 + 3 * i] == 0xbd;
        if (!ok) fail_msg("ill-formed sequence %zu (%zu bytes): %d ids, not one U+FFFD a byte", b, n, ids.n);
        ivec_free(&ids);
    }
    tokenizer_free(&tk);
}

/* A vocabulary of 1 or 2 merges (the merge table's smallest sizes) encodes a text whose pairs it
 * lacks: every lookup of a missing pair must end (a table sized to its merges alone never would) */
static void test_few_merges(void **state) {
    (void)state;
    {   /* id 0 (byte 0x00 here, '!' in Qwen's vocabulary) merges like any token, on either side */
        const char *x0[] = {"\xc4\x80\xc4\x80"}, *m0[] = {"\xc4\x80 \xc4\x80"};
        tokenizer tk;
        assert_int_equal(build_tok(&tk, x0, 1, m0, 1, NULL, 0), 0);
        ivec ids = {0};
        assert_int_equal(tokenizer_encode(&tk, "a\0\0", 3, 0, &ids), 0);
        assert_int_equal(ids.n, 2);
        assert_int_equal(ids.v[1], 256);
        ivec_free(&ids);
        tokenizer_free(&tk);
    }
    const char *extra[] = {"ab", "cd"}, *merges[] = {"a b", "c d"};
    for (int nm = 1; nm <= 2; nm++) {
        tokenizer tk;
        assert_int_equal(build_tok(&tk, extra, 2, merges, nm, NULL, 0), 0);
        ivec ids = {0};
        assert_int_equal(tokenizer_encode(&tk, "bacdab", 6, 0, &ids), 0);
        assert_int_equal(ids.n, nm == 1 ? 5 : 4); /* b a c d ab / b a cd ab */
        assert_int_equal(ids.v[ids.n - 1], tokenizer_find(&tk, "ab", 2));
        ivec_free(&ids);
        tokenizer_free(&tk);
    }
}

/* A vocabulary's text outside the byte alphabet decodes as itself; ChatML needs both its markers, and
 * a model without them sends the content as it is */
static void test_plain_vocabulary(void **state) {
    (void)state;
    const char *extra[] = {"ab", "\xe2\x86\x92", "<|im_start|>"}, *merges[] = {"a b"};
    tokenizer tk;
    assert_int_equal(build_tok(&tk, extra, 3, merges, 1, NULL, 0), 0);
    char buf[8];
    assert_int_equal(tokenizer_piece(&tk, 257, 0, buf, sizeof buf), 3);
    assert_memory_equal(buf, "\xe2\x86\x92", 3);
    chat_template ct;
    assert_int_equal(chat_template_init(&ct, &tk), 0);
    assert_int_equal(ct.family, 0); /* <|im_start|> alone is not ChatML */
    chat_msg m = {"user", "ab ab"};
    ivec got = {0}, want = {0};
    assert_int_equal(chat_encode(&ct, &tk, &m, 1, 1, &got), 0);
    assert_int_equal(tokenizer_encode(&tk, "ab ab", 5, 0, &want), 0);
    assert_int_equal(got.n, want.n);
    assert_memory_equal(got.v, want.v, sizeof(int) * (size_t)got.n);
    ivec_free(&got), ivec_free(&want);
    chat_template_free(&ct);
    tokenizer_free(&tk);
}

/* Special tokens and the end of generation on a vocabulary with a control token at id 0: control
 * text splits the text only when parsed as special, a user-defined token always; the end-of-generation
 * set is eos, eot and the five end-marker texts llama.cpp recognises, and nothing else (not id 0,
 * not <|im_start|>, not the user token) */
static void test_special_tokens_and_eog(void **state) {
    (void)state;
    static const char *const sp[] = {"<|im_start|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>",
                                     "<|end|>", "<tool>", "<|my_eot|>", "</s>"};
    enum { NS = 9 };
    static const int sp_type[NS] = {TOK_CONTROL, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL,
                                    TOK_CONTROL, TOK_USER, TOK_CONTROL, TOK_CONTROL};
    int n = NS + 256 + 1;
    char **toks = malloc(sizeof(char *) * (size_t)n);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        toks[i] = malloc(16);
        types[i] = TOK_NORMAL;
    }
    for (int i = 0; i < NS; i++) strcpy(toks[i], sp[i]), types[i] = sp_type[i];
    for (int b = 0; b < 256; b++) byte_text(b, toks[NS + b]);
    strcpy(toks[n - 1], "zz");
    const char *merges[] = {"z z"};
    gguf_builder g;
    gb_init(&g);
    gb_str(&g, "tokenizer.ggml.model", "gpt2");
    gb_str(&g, "tokenizer.ggml.pre", "qwen2");
    gb_arr_str(&g, "tokenizer.ggml.tokens", (const char *const *)toks, n);
    gb_arr_i32(&g, "tokenizer.ggml.token_type", types, n);
    gb_arr_str(&g, "tokenizer.ggml.merges", merges, 1);
    gb_u32(&g, "tokenizer.ggml.eos_token_id", 8);
    gb_u32(&g, "tokenizer.ggml.eot_token_id", 7);
    size_t sz;
    uint8_t *img = gb_finish(&g, &sz);
    gguf_file f;
    assert_int_equal(gguf_parse(&f, img, sz, "special.gguf"), 0);
    tokenizer tk;
    assert_int_equal(tokenizer_load_gguf(&tk, &f), 0);
    gguf_close(&f);
    free(img);
    gb_free(&g);
    for (int i = 0; i < n; i++) free(toks[i]);
    free(toks), free(types);
    for (int i = 0; i < n; i++) {
        int want = i == 8 || i == 7 || (i >= 1 && i <= 5);
        if (tokenizer_is_eog(&tk, i) != want) fail_msg("id %d: end of generation %d, want %d", i, !want, want);
    }
    const char *text = "<|im_start|>x<tool><|endoftext|>";
    ivec ids = {0};
    assert_int_equal(tokenizer_encode(&tk, text, strlen(text), 1, &ids), 0);
    assert_int_equal(ids.n, 4);
    assert_int_equal(ids.v[0], 0);
    assert_int_equal(ids.v[1], NS + 'x');
    assert_int_equal(ids.v[2], 6);
    assert_int_equal(ids.v[3], 1);
    ids.n = 0;
    assert_int_equal(tokenizer_encode(&tk, text, strlen(text), 0, &ids), 0); /* control text as bytes, <tool> still */
    int tool = -1;
    for (int i = 0; i < ids.n; i++) {
        assert_true(ids.v[i] >= NS || ids.v[i] == 6);
        if (ids.v[i] == 6) tool = i;
    }
    assert_int_equal(ids.n, 12 + 1 + 1 + 13);
    assert_int_equal(tool, 13);
    /* every special text, in order: each is found, the first and the last id too */
    char all[160] = "";
    for (int i = 0; i < NS; i++) strcat(all, sp[i]);
    ids.n = 0;
    assert_int_equal(tokenizer_encode(&tk, all, strlen(all), 1, &ids), 0);
    assert_int_equal(ids.n, NS);
    for (int i = 0; i < NS; i++) assert_int_equal(ids.v[i], i);
    /* decoding: id 0 and a long run of it (past the first buffer), byte 0x00, and the ends */
    int zeros[8] = {0, 0, 0, 0, 0, 0, 0, NS};
    char *d = tokenizer_decode(&tk, zeros, 8, 1);
    assert_int_equal(strlen(d), 7 * 12);
    assert_memory_equal(d, "<|im_start|><|im_start|>", 24);
    free(d);
    char buf[16];
    assert_int_equal(tokenizer_piece(&tk, NS, 1, buf, sizeof buf), 1);
    assert_int_equal(buf[0], 0);
    assert_int_equal(tokenizer_piece(&tk, 0, 1, buf, sizeof buf), 12);
    assert_int_equal(tokenizer_piece(&tk, n, 1, buf, sizeof buf), -1);
    assert_int_equal(tokenizer_piece(&tk, -1, 1, buf, sizeof buf), -1);
    /* a ChatML template whose <|im_start|> is id 0 is recognised; without a template the markers decide */
    chat_template ct;
    assert_int_equal(chat_template_init(&ct, &tk), 0);
    assert_int_equal(ct.family, 1);
    chat_template_free(&ct);
    tk.chat_template = strdup("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
    assert_int_equal(chat_template_init(&ct, &tk), 0);
    assert_int_equal(ct.family, 1);
    chat_template_free(&ct);
    ivec_free(&ids);
    tokenizer_free(&tk);
}

/* Qwen's chat template: its default system message is the literal after two other
 * '<|im_start|>system' (tool use, the caller's own), and a conversation renders as Qwen's does */
static void test_qwen_chat_template(void **state) {
    (void)state;
    tokenizer tk;
    const char *extra[] = {"ab", "<|im_start|>", "<|im_end|>"}, *merges[] = {"a b"};
    int32_t *types = malloc(sizeof(int32_t) * 259);
    for (int i = 0; i < 259; i++) types[i] = i >= 257 ? 3 : 1; /* the markers are control tokens */
    assert_int_equal(build_tok(&tk, extra, 3, merges, 1, NULL, 0), 0);
    free(types);
    free(tk.chat_template);
    tk.chat_template = strdup(
        "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You "
        "are a helpful assistant.' }}\n    {%- endif %}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
        "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
        "    {%- endif %}\n{%- endif %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n");
    chat_template ct;
    assert_int_equal(chat_template_init(&ct, &tk), 0);
    assert_int_equal(ct.family, 1);
    assert_non_null(ct.default_system);
    assert_string_equal(ct.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    chat_msg m = {"user", "ab"};
    char *r = chat_render(&ct, &m, 1, 1);
    assert_string_equal(r, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
    free(r);
    chat_template_free(&ct);
    tokenizer_free(&tk);
}

static void test_merge_priority(void **state) {
    (void)state;
    tokenizer tk;
    const char *extra[] = {"ab", "bc", "abc", "aa"};
    const char *merges[] = {"b c", "a b", "ab c", "a a"};
    assert_int_equal(build_tok(&tk, extra, 4, merges, 4, NULL, 0), 0);
    int a = tokenizer_find(&tk, "a", 1), bc = tokenizer_find(&tk, "bc", 2), aa = tokenizer_find(&tk, "aa", 2);
    ivec out = {0};
    /* "abc": (b,c) has the lower rank, so a + bc, and no "a bc" merge exists */
    assert_int_equal(tokenizer_encode(&tk, "abc", 3, 0, &out), 0);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.v[0], a);
    assert_int_equal(out.v[1], bc);
    /* "aaa": equal ranks, the leftmost pair merges first */
    out.n = 0;
    assert_int_equal(tokenizer_encode(&tk, "aaa", 3, 0, &out), 0);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.v[0], aa);
    assert_int_equal(out.v[1], a);
    /* "ab" alone merges through rank 1 */
    out.n = 0;
    assert_int_equal(tokenizer_encode(&tk, "ab", 2, 0, &out), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.v[0], tokenizer_find(&tk, "ab", 2));
    ivec_free(&out);
    tokenizer_free(&tk);
}

static void test_malformed_metadata(void **state) {
    (void)state;
    tokenizer tk;
    const char *extra[] = {"ab"};
    const char *bad_merge[] = {"ab"};
    assert_int_equal(build_tok(&tk, extra, 1, bad_merge, 1, NULL, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "no separating space"));
    const char *ok_merge[] = {"a b"};
    assert_int_equal(build_tok(&tk, extra, 1, ok_merge, 1, NULL, 1), -1);
    assert_non_null(strstr(ds_errmsg(), "duplicate token text"));
    int32_t types[5] = {1, 1, 1, 1, 1};
    assert_int_equal(build_tok(&tk, extra, 1, ok_merge, 1, types, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "token_type"));
    /* issue 11 (7): both loaded silently on d965422 */
    const char *dead_merge[] = {"a q"}; /* "aq" is not a token: the merge can never fire */
    assert_int_equal(build_tok(&tk, extra, 1, dead_merge, 1, NULL, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "none of the 1 merges is usable"));
    const char *bad_utf8[] = {"ab", "\xff\xfe"};
    assert_int_equal(build_tok(&tk, bad_utf8, 2, ok_merge, 1, NULL, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "is not valid UTF-8"));
    /* well-formed in shape, ill-formed in value: surrogates, overlong forms, past U+10FFFF */
    static const char *const ill[] = {"\xed\xa0\x80", "\xed\xbf\xbf", "\xc0\xaf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf",
                                      "\xf4\x90\x80\x80", "\xf5\x80\x80\x80"};
    for (size_t i = 0; i < sizeof ill / sizeof *ill; i++) {
        const char *v[] = {"ab", ill[i]};
        assert_int_equal(build_tok(&tk, v, 2, ok_merge, 1, NULL, 0), -1);
        assert_non_null(strstr(ds_errmsg(), "token 257 text is not valid UTF-8"));
    }
    const char *edges[] = {"ab", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"};
    assert_int_equal(build_tok(&tk, edges, 2, ok_merge, 1, NULL, 0), 0); /* every length's first and last */
    tokenizer_free(&tk);
    /* a merge with no space is named, whatever its neighbour in the file (a 32-byte string's length
     * starts with the byte of a space) */
    const char *nospace[] = {"ab", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    assert_int_equal(build_tok(&tk, extra, 1, nospace, 2, NULL, 0), -1);
    assert_non_null(strstr(ds_errmsg(), "merge 0 ('ab') has no separating space"));
}

/* issue 11 (9): a chat template we do not recognise is reported, not a load failure (d965422 made
 * `info` fail, and the suggested --raw failed the same way); only using it is an error */
static void test_unknown_chat_template(void **state) {
    (void)state;
    tokenizer tk;
    const char *extra[] = {"ab"}, *merges[] = {"a b"};
    assert_int_equal(build_tok(&tk, extra, 1, merges, 1, NULL, 0), 0);
    free(tk.chat_template);
    tk.chat_template = strdup("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");
    chat_template ct;
    assert_int_equal(chat_template_init(&ct, &tk), 0);
    assert_int_equal(ct.family, -1);
    assert_non_null(strstr(chat_family_name(&ct), "not recognised"));
    chat_msg m = {"user", "ab"};
    ivec ids = {0};
    assert_int_equal(chat_encode(&ct, &tk, &m, 1, 1, &ids), -1);
    assert_non_null(strstr(ds_errmsg(), "use --raw"));
    assert_int_equal(tokenizer_encode(&tk, "ab", 2, 0, &ids), 0); /* plain text (--raw) works */
    assert_true(ids.n >= 1);
    ivec_free(&ids);
    chat_template_free(&ct);
    tokenizer_free(&tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_match_llamacpp),
        cmocka_unit_test(test_chat_template_ids),
        cmocka_unit_test(test_roundtrip_random),
    };
    const struct CMUnitTest local[] = {
        cmocka_unit_test(test_merge_priority),
        cmocka_unit_test(test_malformed_metadata),
        cmocka_unit_test(test_unknown_chat_template),
        cmocka_unit_test(test_qwen2_pretokenizer),
        cmocka_unit_test(test_pretokenizers_match_regex),
        cmocka_unit_test(test_utf8_bytes_and_replacement),
        cmocka_unit_test(test_few_merges),
        cmocka_unit_test(test_special_tokens_and_eog),
        cmocka_unit_test(test_plain_vocabulary),
        cmocka_unit_test(test_qwen_chat_template),
    };
    int fails = cmocka_run_group_tests_name("tokenizer (built vocabularies)", local, NULL, NULL);
    return fails + cmocka_run_group_tests_name("tokenizer (SmolLM2 vs llama.cpp)", tests, setup_real, teardown_real);
}
