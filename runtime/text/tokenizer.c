#include "tokenizer.h"

#include <limits.h>
#include <string.h>

#include "../base/common.h"
#include "unicode_tables.h"

int ivec_push(ivec *a, int x) {
    if (a->n == a->cap) {
        int nc = a->cap ? 2 * a->cap : 64;
        int *nv = ds_realloc(a->v, sizeof(int) * (size_t)nc, "id list");
        if (!nv) return -1;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

void ivec_free(ivec *a) {
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* ------------------------------------------------------------------------------------- unicode */

static int in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int is_letter(uint32_t cp) {
    if (cp < 128) return (cp | 32) - 'a' < 26;
    return in_ranges(cp, UNI_LETTER, sizeof UNI_LETTER / sizeof *UNI_LETTER);
}
static int is_number(uint32_t cp) {
    if (cp < 128) return cp - '0' < 10;
    return in_ranges(cp, UNI_NUMBER, sizeof UNI_NUMBER / sizeof *UNI_NUMBER);
}
/* the Unicode White_Space property */
static int is_space(uint32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Decode one code point; invalid or truncated sequences consume one byte and give U+FFFD. */
static uint32_t utf8_next(const uint8_t *s, size_t n, size_t *i) {
    uint8_t c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    /* lead bytes: C2..DF, E0..EF, F0..F4; C0, C1 and F5..FF start no well-formed sequence */
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    if (len == 0 || *i + (size_t)len > n) goto bad;
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        uint8_t b = s[*i + (size_t)k];
        if ((b & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (b & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        goto bad;
    *i += (size_t)len;
    return cp;
bad:
    (*i)++;
    return 0xFFFD;
}

static int utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 byte alphabet: printable bytes map to themselves, the other 68 to U+0100.. in order. */
static uint32_t BYTE_CP[256];
static int16_t CP_BYTE[256 + 68];
static void byte_map_init(void) {
    static int done = 0;
    if (done) return;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        BYTE_CP[b] = keep ? (uint32_t)b : (uint32_t)(256 + extra++);
    }
    for (int i = 0; i < 256 + 68; i++) CP_BYTE[i] = -1;
    for (int b = 0; b < 256; b++) CP_BYTE[BYTE_CP[b]] = (int16_t)b;
    done = 1;
}

/* --------------------------------------------------------------------------------- hash maps */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}
static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int tokenizer_find(const tokenizer *tk, const char *s, size_t n) {
    size_t mask = tk->tmap_cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t e = tk->tmap[i];
        if (!e) return -1;
        int id = (int)e - 1;
        if ((size_t)tk->text_len[id] == n && memcmp(tk->text[id], s, n) == 0) return id;
    }
}

/* merge rank and result for the adjacent pair (a, b), or -1 */
static int merge_find(const tokenizer *tk, int a, int b, int *res) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = tk->mcap - 1;
    for (size_t i = hash_u64(key + 1) & mask;; i = (i + 1) & mask) {
        if (tk->mkey[i] == 0) return -1;
        if (tk->mkey[i] == key + 1) {
            *res = tk->mres[i];
            return tk->mrank[i];
        }
    }
}

/* ------------------------------------------------------------------------------------- loading */

static int cmp_special(const void *a, const void *b, void *tkp) {
    const tokenizer *tk = tkp;
    int x = *(const int *)a, y = *(const int *)b;
    if (tk->text_len[x] != tk->text_len[y]) return tk->text_len[y] - tk->text_len[x];
    return x - y;
}

static int opt_id(const gguf_file *g, const char *key, int n_vocab, int *out) {
    int64_t v;
    int rc = gguf_get_int(g, key, 0, INT32_MAX, &v);
    if (rc < 0) return -1;
    *out = (rc == 0 && v < n_vocab) ? (int)v : -1; /* out-of-range ids are ignored, as llama.cpp does */
    return 0;
}

/* well-formed UTF-8: no stray continuation bytes, overlongs, surrogates or code points past 0x10FFFF */
static int utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

int tokenizer_load_gguf(tokenizer *tk, const gguf_file *g) {
    memset(tk, 0, sizeof *tk);
    byte_map_init();
    const char *s;
    uint64_t sl;
    int rc = gguf_get_str(g, "tokenizer.ggml.model", &s, &sl);
    DS_TRY(rc < 0 ? -1 : 0);
    DS_CHECK(rc == 0, "%s: no tokenizer (missing 'tokenizer.ggml.model')", g->name);
    DS_CHECK(sl == 4 && memcmp(s, "gpt2", 4) == 0,
             "%s: tokenizer model '%.*s' is not supported (only byte-level BPE, 'gpt2')", g->name, (int)DS_MIN(sl, 32), s);
    rc = gguf_get_str(g, "tokenizer.ggml.pre", &s, &sl);
    DS_TRY(rc < 0 ? -1 : 0);
    if (rc == 1) {
        tk->pre = PRE_GPT2;
        strcpy(tk->pre_name, "default");
    } else {
        DS_CHECK(sl < sizeof tk->pre_name, "%s: pre-tokenizer name too long", g->name);
        memcpy(tk->pre_name, s, sl);
        if (strcmp(tk->pre_name, "smollm") == 0 || strcmp(tk->pre_name, "starcoder") == 0 ||
            strcmp(tk->pre_name, "refact") == 0)
            tk->pre = PRE_SMOLLM;
        else if (strcmp(tk->pre_name, "gpt-2") == 0 || strcmp(tk->pre_name, "default") == 0)
            tk->pre = PRE_GPT2;
        else if (strcmp(tk->pre_name, "qwen2") == 0)
            tk->pre = PRE_QWEN2;
        else
            DS_CHECK(0, "%s: pre-tokenizer '%s' is not supported (supported: smollm, starcoder, gpt-2, qwen2)", g->name,
                     tk->pre_name);
    }
    const gguf_value *toks = gguf_get(g, "tokenizer.ggml.tokens");
    DS_CHECK(toks && toks->type == GGUF_ARRAY && toks->arr.type == GGUF_STRING,
             "%s: 'tokenizer.ggml.tokens' missing or not an array of strings", g->name);
    DS_CHECK(toks->arr.n > 0 && toks->arr.n <= (1u << 22), "%s: vocabulary of %llu tokens (must be 1..2^22)", g->name,
             (unsigned long long)toks->arr.n);
    tk->n_vocab = (int)toks->arr.n;
    DS_TRYP(tk->text = ds_calloc((size_t)tk->n_vocab, sizeof(char *), "vocab"));
    DS_TRYP(tk->text_len = ds_calloc((size_t)tk->n_vocab, sizeof(int), "vocab"));
    DS_TRYP(tk->type = ds_calloc((size_t)tk->n_vocab, sizeof(int), "vocab"));
    for (int i = 0; i < tk->n_vocab; i++) {
        const gguf_value *t = &toks->arr.items[i];
        DS_CHECK(t->str.len < (1u << 16), "%s: token %d text is %llu bytes long", g->name, i, (unsigned long long)t->str.len);
        DS_CHECK(utf8_valid(t->str.s, (size_t)t->str.len), "%s: token %d text is not valid UTF-8", g->name, i);
        DS_TRYP(tk->text[i] = ds_strndup(t->str.s, t->str.len, "token text"));
        tk->text_len[i] = (int)t->str.len;
        tk->type[i] = TOK_NORMAL;
    }
    const gguf_value *tt = gguf_get(g, "tokenizer.ggml.token_type");
    if (tt) {
        DS_CHECK(tt->type == GGUF_ARRAY && tt->arr.n == (uint64_t)tk->n_vocab,
                 "%s: 'tokenizer.ggml.token_type' must be an array of %d integers", g->name, tk->n_vocab);
        for (int i = 0; i < tk->n_vocab; i++) {
            int64_t v;
            DS_CHECK(gguf_arr_int(tt, (uint64_t)i, &v) == 0 && v >= 0 && v <= 6,
                     "%s: token %d has invalid token type", g->name, i);
            tk->type[i] = (int)v;
        }
    }
    /* text -> id map (power-of-two capacity, load <= 1/2); duplicate texts are a load error */
    tk->tmap_cap = 1;
    while (tk->tmap_cap < 2 * (size_t)tk->n_vocab) tk->tmap_cap <<= 1;
    DS_TRYP(tk->tmap = ds_calloc(tk->tmap_cap, sizeof(uint32_t), "vocab index"));
    for (int i = 0; i < tk->n_vocab; i++) {
        size_t mask = tk->tmap_cap - 1, j = hash_bytes(tk->text[i], (size_t)tk->text_len[i]) & mask;
        for (; tk->tmap[j]; j = (j + 1) & mask) {
            int o = (int)tk->tmap[j] - 1;
            DS_CHECK(!(tk->text_len[o] == tk->text_len[i] && memcmp(tk->text[o], tk->text[i], (size_t)tk->text_len[i]) == 0),
                     "%s: duplicate token text at ids %d and %d", g->name, o, i);
        }
        tk->tmap[j] = (uint32_t)i + 1;
    }
    /* merges: "left right" split at the first space after position 0; index = rank */
    const gguf_value *mg = gguf_get(g, "tokenizer.ggml.merges");
    DS_CHECK(mg && mg->type == GGUF_ARRAY && mg->arr.type == GGUF_STRING,
             "%s: 'tokenizer.ggml.merges' missing or not an array of strings", g->name);
    DS_CHECK(mg->arr.n <= (1u << 23), "%s: %llu merges is too many", g->name, (unsigned long long)mg->arr.n);
    tk->mcap = 1;
    while (tk->mcap < 2 * (size_t)mg->arr.n + 2) tk->mcap <<= 1;
    DS_TRYP(tk->mkey = ds_calloc(tk->mcap, sizeof(uint64_t), "merges"));
    DS_TRYP(tk->mrank = ds_calloc(tk->mcap, sizeof(int32_t), "merges"));
    DS_TRYP(tk->mres = ds_calloc(tk->mcap, sizeof(int32_t), "merges"));
    for (uint64_t r = 0; r < mg->arr.n; r++) {
        const char *ms = mg->arr.items[r].str.s;
        size_t ml = (size_t)mg->arr.items[r].str.len;
        const char *sp = ml > 1 ? memchr(ms + 1, ' ', ml - 1) : NULL;
        DS_CHECK(sp != NULL, "%s: merge %llu ('%.*s') has no separating space", g->name, (unsigned long long)r,
                 (int)DS_MIN(ml, 40), ms);
        size_t la = (size_t)(sp - ms), lb = ml - la - 1;
        int a = tokenizer_find(tk, ms, la), b = tokenizer_find(tk, sp + 1, lb);
        char buf[1024];
        if (a < 0 || b < 0 || la + lb >= sizeof buf) continue; /* can never fire */
        memcpy(buf, ms, la);
        memcpy(buf + la, sp + 1, lb);
        int res = tokenizer_find(tk, buf, la + lb);
        if (res < 0) continue;
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t mask = tk->mcap - 1, j = hash_u64(key + 1) & mask;
        while (tk->mkey[j] && tk->mkey[j] != key + 1) j = (j + 1) & mask;
        if (tk->mkey[j]) continue; /* duplicate merge: the lower rank stands */
        tk->mkey[j] = key + 1;
        tk->mrank[j] = (int32_t)r;
        tk->mres[j] = res;
        tk->n_merges++;
    }
    /* a BPE vocabulary whose merges all name missing tokens would encode every text byte by byte */
    DS_CHECK(tk->n_merges > 0, "%s: none of the %llu merges is usable (each must join two tokens into a third)", g->name,
             (unsigned long long)mg->arr.n);
    DS_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", tk->n_vocab, &tk->bos));
    DS_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", tk->n_vocab, &tk->eos));
    DS_TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", tk->n_vocab, &tk->unk));
    DS_TRY(opt_id(g, "tokenizer.ggml.padding_token_id", tk->n_vocab, &tk->pad));
    int eot = -1;
    DS_TRY(opt_id(g, "tokenizer.ggml.eot_token_id", tk->n_vocab, &eot));
    rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &tk->add_bos);
    DS_TRY(rc < 0 ? -1 : 0);
    if (rc == 1) tk->add_bos = 0;
    /* end of generation: eos, eot, and the usual end-marker texts (as llama.cpp detects them) */
    int cand[8] = {tk->eos, eot, -1, -1, -1, -1, -1, -1};
    const char *eog_texts[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"};
    for (int i = 0; i < 5; i++) cand[2 + i] = tokenizer_find(tk, eog_texts[i], strlen(eog_texts[i]));
    for (int i = 0; i < 7; i++) {
        if (cand[i] < 0) continue;
        int dup = 0;
        for (int j = 0; j < tk->n_eog; j++) dup |= tk->eog[j] == cand[i];
        if (!dup) tk->eog[tk->n_eog++] = cand[i];
    }
    /* special tokens matched longest-first when splitting text */
    for (int i = 0; i < tk->n_vocab; i++) tk->n_special += (tk->type[i] == TOK_CONTROL || tk->type[i] == TOK_USER) && tk->text_len[i] > 0;
    DS_TRYP(tk->special = ds_calloc((size_t)tk->n_special + 1, sizeof(int), "special tokens"));
    for (int i = 0, k = 0; i < tk->n_vocab; i++)
        if ((tk->type[i] == TOK_CONTROL || tk->type[i] == TOK_USER) && tk->text_len[i] > 0) tk->special[k++] = i;
    qsort_r(tk->special, (size_t)tk->n_special, sizeof(int), cmp_special, tk);
    rc = gguf_get_str(g, "tokenizer.chat_template", &s, &sl);
    DS_TRY(rc < 0 ? -1 : 0);
    if (rc == 0) DS_TRYP(tk->chat_template = ds_strndup(s, sl, "chat template"));
    return 0;
fail:
    ds_error_prefix("cannot load tokenizer");
    tokenizer_free(tk);
    return -1;
}

void tokenizer_free(tokenizer *tk) {
    if (tk->text)
        for (int i = 0; i < tk->n_vocab; i++) free(tk->text[i]);
    free(tk->text);
    free(tk->text_len);
    free(tk->type);
    free(tk->tmap);
    free(tk->mkey);
    free(tk->mrank);
    free(tk->mres);
    free(tk->special);
    free(tk->chat_template);
    memset(tk, 0, sizeof *tk);
}

int tokenizer_is_eog(const tokenizer *tk, int id) {
    for (int i = 0; i < tk->n_eog; i++)
        if (tk->eog[i] == id) return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------ encoding */

/* BPE on one pre-tokenized word (raw bytes). Symbols form a linked list; a binary heap holds
 * candidate pairs keyed by (rank, left position). A popped pair is stale if either side changed. */
typedef struct {
    int id, prev, next, alive;
} bpe_sym;
typedef struct {
    int rank, left, a, b;
} bpe_pair;

static int pair_less(const bpe_pair *x, const bpe_pair *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->left < y->left;
}
static void heap_push(bpe_pair *h, int *n, bpe_pair p) {
    int i = (*n)++;
    h[i] = p;
    while (i > 0 && pair_less(&h[i], &h[(i - 1) / 2])) {
        bpe_pair t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}
static bpe_pair heap_pop(bpe_pair *h, int *n) {
    bpe_pair top = h[0];
    h[0] = h[--(*n)];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && pair_less(&h[l], &h[m])) m = l;
        if (r < *n && pair_less(&h[r], &h[m])) m = r;
        if (m == i) break;
        bpe_pair t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
    return top;
}

static void try_pair(const tokenizer *tk, bpe_sym *sy, int l, bpe_pair *h, int *hn) {
    if (l < 0 || sy[l].next < 0) return;
    int r = sy[l].next;
    int res, rank = merge_find(tk, sy[l].id, sy[r].id, &res);
    if (rank >= 0) heap_push(h, hn, (bpe_pair){rank, l, sy[l].id, sy[r].id});
}

static int bpe_word(const tokenizer *tk, const uint8_t *w, size_t n, ivec *out) {
    /* symbols start as single bytes in the GPT-2 alphabet; each maps to a token id (or -1) */
    bpe_sym *sy = ds_malloc(sizeof(bpe_sym) * n, "bpe symbols");
    /* live heap entries <= (n-1) initial pairs + 2 per merge - 1 pop per merge <= 2n */
    bpe_pair *h = ds_malloc(sizeof(bpe_pair) * (2 * n + 2), "bpe heap");
    int hn = 0, rc = -1;
    if (!sy || !h) goto done;
    if (n == 0) {
        rc = 0;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int ul = utf8_put(BYTE_CP[w[i]], u);
        sy[i] = (bpe_sym){tokenizer_find(tk, u, (size_t)ul), (int)i - 1, i + 1 < n ? (int)i + 1 : -1, 1};
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (sy[i].id >= 0 && sy[i + 1].id >= 0) try_pair(tk, sy, (int)i, h, &hn);
    while (hn > 0) {
        bpe_pair p = heap_pop(h, &hn);
        int l = p.left, r = sy[l].next;
        if (!sy[l].alive || r < 0 || sy[l].id != p.a || sy[r].id != p.b) continue; /* stale */
        int res;
        merge_find(tk, p.a, p.b, &res);
        sy[l].id = res;
        sy[r].alive = 0;
        sy[l].next = sy[r].next;
        if (sy[r].next >= 0) sy[sy[r].next].prev = l;
        if (sy[l].prev >= 0) try_pair(tk, sy, sy[l].prev, h, &hn);
        try_pair(tk, sy, l, h, &hn);
    }
    for (int i = 0; i >= 0; i = sy[i].next) {
        int id = sy[i].id;
        if (id < 0) id = tk->unk; /* a byte with no token: unknown, or dropped if there is none */
        if (id >= 0 && ivec_push(out, id)) goto done;
    }
    rc = 0;
done:
    free(sy);
    free(h);
    return rc;
}

#define CAT(i) ((i) >= m ? 0 : is_space(cp[i]) ? 1 : is_letter(cp[i]) ? 2 : is_number(cp[i]) ? 3 : 4)

/* GPT-2 pre-tokenizer regex, hand-coded over the code points cp[0..m); the end of the word at i:
 *   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+        */
static size_t word_gpt2(const uint32_t *cp, size_t m, size_t i) {
    size_t j = i;
    uint32_t c = cp[i];
    if (c == '\'' && i + 1 < m) {
        uint32_t d = cp[i + 1], e = i + 2 < m ? cp[i + 2] : 0;
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
    }
    size_t k = i + (c == ' ' && i + 1 < m && CAT(i + 1) != 1 ? 1 : 0); /* optional leading space */
    int cat = CAT(k);
    if (cat == 2 || cat == 3 || cat == 4) {
        j = k;
        while (j < m && CAT(j) == cat) j++;
        return j;
    }
    size_t w = i;
    while (w < m && CAT(w) == 1) w++;
    if (w - i > 1 && w < m) return w - 1; /* \s+(?!\S): leave the last space to the next word */
    return w > i ? w : i + 1;              /* \s+ */
}

static int is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
static uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Qwen2's pre-tokenizer regex (its tokenizer.json; llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2), in order:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N} | ?[^\s\p{L}\p{N}]+[\r\n]* |
 *   \s*[\r\n]+ | \s+(?!\S) | \s+
 * A digit is always a word of its own; a letter run takes one leading non-letter that is not a line
 * break (a space, a tab, a quote); punctuation keeps the line breaks that follow it. */
static size_t word_qwen2(const uint32_t *cp, size_t m, size_t i) {
    uint32_t c = cp[i];
    if (c == '\'' && i + 1 < m) {
        uint32_t d = lower_ascii(cp[i + 1]), e = i + 2 < m ? lower_ascii(cp[i + 2]) : 0;
        if (d == 's' || d == 't' || d == 'm' || d == 'd') return i + 2;
        if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return i + 3;
    }
    int cat = CAT(i);
    if (cat == 2 || (cat != 3 && !is_crlf(c) && CAT(i + 1) == 2)) { /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        size_t j = cat == 2 ? i : i + 1;
        while (j < m && CAT(j) == 2) j++;
        return j;
    }
    if (cat == 3) return i + 1; /* \p{N} */
    size_t k = i + (c == ' ' && CAT(i + 1) == 4 ? 1 : 0);
    if (CAT(k) == 4) { /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        size_t j = k;
        while (j < m && CAT(j) == 4) j++;
        while (j < m && is_crlf(cp[j])) j++;
        return j;
    }
    /* whitespace from i (cat == 1 here) */
    size_t w = i, last_nl = m;
    while (w < m && CAT(w) == 1) {
        if (is_crlf(cp[w])) last_nl = w;
        w++;
    }
    if (last_nl < m) return last_nl + 1;   /* \s*[\r\n]+: through the last line break of the run */
    if (w - i > 1 && w < m) return w - 1;  /* \s+(?!\S) */
    return w > i ? w : i + 1;              /* \s+ */
}

/* Split one fragment into words by the file's pre-tokenizer and BPE each; with `ends`, record where
 * each word ends instead (byte offsets from `base`, the fragment's own offset in the text). */
static int split_words(const tokenizer *tk, const uint8_t *s, size_t n, ivec *out, ivec *ends, size_t base) {
    /* decode once: code points and their byte offsets */
    size_t cap = n + 1, m = 0;
    uint32_t *cp = ds_malloc(sizeof(uint32_t) * cap, "code points");
    size_t *off = ds_malloc(sizeof(size_t) * cap, "code points");
    uint8_t *fix = NULL;
    int rc = -1;
    if (!cp || !off) goto done;
    for (size_t i = 0; i < n;) {
        off[m] = i;
        cp[m++] = utf8_next(s, n, &i);
    }
    off[m] = n;
    /* invalid bytes were read as U+FFFD: re-encode words from code points, as llama.cpp does */
    DS_TRYP(fix = ds_malloc(4 * m + 4, "word buffer"));
    for (size_t i = 0; i < m;) {
        size_t j = tk->pre == PRE_QWEN2 ? word_qwen2(cp, m, i) : word_gpt2(cp, m, i);
        size_t fl = 0;
        for (size_t k = i; k < j; k++) fl += (size_t)utf8_put(cp[k], (char *)fix + fl);
        if (ends ? ivec_push(ends, (int)(base + off[j])) : bpe_word(tk, fix, fl, out)) goto done;
        i = j;
    }
    rc = 0;
fail:
done:
    free(cp);
    free(off);
    free(fix);
    return rc;
}
#undef CAT

/* Pre-tokenize one text piece (no special tokens inside) and BPE every word (or, with `ends`, record
 * the words' ends: split_words). */
static int encode_piece(const tokenizer *tk, const uint8_t *s, size_t n, ivec *out, ivec *ends) {
    if (tk->pre != PRE_SMOLLM) return split_words(tk, s, n, out, ends, 0);
    /* smollm: every \p{N} code point becomes its own fragment first */
    size_t start = 0;
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = utf8_next(s, n, &i);
        if (is_number(c)) {
            if (at > start && split_words(tk, s + start, at - start, out, ends, start)) return -1;
            if (split_words(tk, s + at, i - at, out, ends, at)) return -1;
            start = i;
        }
    }
    if (n > start) return split_words(tk, s + start, n - start, out, ends, start);
    return 0;
}

int tokenizer_words(const tokenizer *tk, const char *text, size_t len, ivec *ends) {
    DS_CHECK(len <= INT_MAX, "tokenizer: a text of %zu bytes is too long to split", len);
    return encode_piece(tk, (const uint8_t *)text, len, NULL, ends);
fail:
    return -1;
}

int tokenizer_encode(const tokenizer *tk, const char *text, size_t len, int parse_special, ivec *out) {
    const uint8_t *s = (const uint8_t *)text;
    size_t start = 0;
    /* user-defined tokens always split the text; control tokens only when parse_special */
    for (size_t i = 0; i < len && tk->n_special > 0;) {
        int hit = -1;
        for (int k = 0; k < tk->n_special; k++) {
            int id = tk->special[k];
            if (!parse_special && tk->type[id] == TOK_CONTROL) continue;
            size_t tl = (size_t)tk->text_len[id];
            if (tl <= len - i && (uint8_t)tk->text[id][0] == s[i] && memcmp(tk->text[id], s + i, tl) == 0) {
                hit = id;
                break; /* longest first */
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        if (i > start && encode_piece(tk, s + start, i - start, out, NULL)) return -1;
        if (ivec_push(out, hit)) return -1;
        i += (size_t)tk->text_len[hit];
        start = i;
    }
    if (len > start) return encode_piece(tk, s + start, len - start, out, NULL);
    return 0;
}

/* ------------------------------------------------------------------------------------ decoding */

int tokenizer_piece(const tokenizer *tk, int id, int render_special, char *buf, size_t cap) {
    if (id < 0 || id >= tk->n_vocab) return -1;
    const char *t = tk->text[id];
    size_t n = (size_t)tk->text_len[id], w = 0;
    if (tk->type[id] == TOK_CONTROL || tk->type[id] == TOK_USER) {
        if (tk->type[id] == TOK_CONTROL && !render_special) return 0;
        w = DS_MIN(n, cap);
        memcpy(buf, t, w);
        return (int)w;
    }
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = utf8_next((const uint8_t *)t, n, &i);
        if (c < 256 + 68 && CP_BYTE[c] >= 0) {
            if (w < cap) buf[w++] = (char)CP_BYTE[c];
        } else { /* not in the byte alphabet: pass the text through */
            for (size_t k = at; k < i && w < cap; k++) buf[w++] = t[k];
        }
    }
    return (int)w;
}

char *tokenizer_decode(const tokenizer *tk, const int *ids, int n, int render_special) {
    size_t cap = 64, len = 0;
    char *out = ds_malloc(cap, "decoded text");
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        size_t need = (size_t)(ids[i] >= 0 && ids[i] < tk->n_vocab ? tk->text_len[ids[i]] : 0) + 1;
        if (len + need >= cap) {
            while (len + need >= cap) cap *= 2;
            char *no = ds_realloc(out, cap, "decoded text");
            if (!no) {
                free(out);
                return NULL;
            }
            out = no;
        }
        int w = tokenizer_piece(tk, ids[i], render_special, out + len, cap - len - 1);
        if (w > 0) len += (size_t)w;
    }
    out[len] = 0;
    return out;
}

/* ------------------------------------------------------------------------------ chat templates */

int chat_template_init(chat_template *ct, const tokenizer *tk) {
    memset(ct, 0, sizeof *ct);
    const char *t = tk->chat_template;
    int im_start = tokenizer_find(tk, "<|im_start|>", 12), im_end = tokenizer_find(tk, "<|im_end|>", 10);
    if (!t) {
        /* no template: ChatML if the vocabulary has its markers, else raw text */
        ct->family = (im_start >= 0 && im_end >= 0) ? 1 : 0;
        return 0;
    }
    if (!strstr(t, "<|im_start|>") || im_start < 0 || im_end < 0) {
        ct->family = -1; /* reported by info; chat_encode refuses it, plain text (--raw) still works */
        return 0;
    }
    ct->family = 1;
    /* a default system message appears as a literal '<|im_start|>system\n...<|im_end|>': the first
     * such literal of the template (Qwen's has two other '<|im_start|>system' before it, one for tool
     * use and one followed by the caller's message) */
    for (int form = 0; form < 2 && !ct->default_system; form++) {
        const char *mark = form == 0 ? "<|im_start|>system\\n" : "<|im_start|>system\n";
        size_t skip = strlen(mark);
        for (const char *p = strstr(t, mark); p; p = strstr(p + 1, mark)) {
            const char *q = strstr(p, "<|im_end|>");
            if (q && q > p + skip && !memchr(p + skip, '{', (size_t)(q - p - skip)) &&
                !memchr(p + skip, '+', (size_t)(q - p - skip))) {
                DS_TRYP(ct->default_system = ds_strndup(p + skip, (size_t)(q - p - skip), "system message"));
                break;
            }
        }
    }
    return 0;
fail:
    return -1;
}

void chat_template_free(chat_template *ct) {
    free(ct->default_system);
    ct->default_system = NULL;
}

const char *chat_family_name(const chat_template *ct) {
    return ct->family == 1 ? "chatml" : ct->family < 0 ? "not recognised (supported: ChatML; --raw sends plain text)" : "raw";
}

int chat_encode(const chat_template *ct, const tokenizer *tk, const chat_msg *msgs, int n, int add_generation_prompt,
                ivec *out) {
    if (ct->family < 0) {
        ds_error("the model's chat template is not recognised (supported: ChatML); use --raw to send the prompt as "
                 "plain text");
        return -1;
    }
    if (ct->family == 0) {
        for (int i = 0; i < n; i++)
            if (tokenizer_encode(tk, msgs[i].content, strlen(msgs[i].content), 0, out)) return -1;
        return 0;
    }
    int s = tokenizer_find(tk, "<|im_start|>", 12), e = tokenizer_find(tk, "<|im_end|>", 10);
    for (int i = -1; i < n; i++) {
        const char *role, *content;
        if (i < 0) {
            if (!ct->default_system || (n > 0 && strcmp(msgs[0].role, "system") == 0)) continue;
            role = "system";
            content = ct->default_system;
        } else {
            role = msgs[i].role;
            content = msgs[i].content;
        }
        /* the role's line and the content are one text, as the rendered template is tokenized: a
         * content that starts with spaces or line breaks joins the role's "\n" in one word */
        size_t lr = strlen(role), lc = strlen(content);
        char *txt = ds_malloc(lr + lc + 2, "chat message");
        if (!txt) return -1;
        memcpy(txt, role, lr);
        txt[lr] = '\n';
        memcpy(txt + lr + 1, content, lc + 1);
        int rc = ivec_push(out, s) || tokenizer_encode(tk, txt, lr + 1 + lc, 0, out);
        free(txt);
        if (rc || ivec_push(out, e) || tokenizer_encode(tk, "\n", 1, 0, out)) return -1;
    }
    if (add_generation_prompt) {
        if (ivec_push(out, s) || tokenizer_encode(tk, "assistant\n", 10, 0, out)) return -1;
    }
    return 0;
}

char *chat_render(const chat_template *ct, const chat_msg *msgs, int n, int add_generation_prompt) {
    size_t cap = 256, len = 0;
    for (int i = 0; i < n; i++) cap += strlen(msgs[i].role) + strlen(msgs[i].content) + 32;
    if (ct->default_system) cap += strlen(ct->default_system) + 32;
    char *o = ds_malloc(cap, "chat text");
    if (!o) return NULL;
    o[0] = 0;
    if (ct->family == 0) {
        for (int i = 0; i < n; i++) len += (size_t)snprintf(o + len, cap - len, "%s", msgs[i].content);
        return o;
    }
    if (ct->default_system && !(n > 0 && strcmp(msgs[0].role, "system") == 0))
        len += (size_t)snprintf(o + len, cap - len, "<|im_start|>system\n%s<|im_end|>\n", ct->default_system);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(o + len, cap - len, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
    if (add_generation_prompt) snprintf(o + len, cap - len, "<|im_start|>assistant\n");
    return o;
}

void tokenizer_fingerprint(const tokenizer *tk, char out[20]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < tk->n_vocab; i++) {
        for (int k = 0; k < tk->text_len[i]; k++) h = (h ^ (unsigned char)tk->text[i][k]) * 0x100000001b3ull;
        h = (h ^ (unsigned)(0x100 + (tk->type ? tk->type[i] : 0))) * 0x100000001b3ull;
    }
    snprintf(out, 20, "%016llx", (unsigned long long)h);
}
