/* tokenizer.h — byte-level BPE from GGUF tokenizer metadata (tokens, merges, token types,
 * pre-tokenizer), special tokens, and chat templates.
 *
 * Encoding: (1) optionally split the text on special-token strings, (2) pre-tokenize each piece
 * with the model's regex split (smollm = isolate every \p{N} digit, then the GPT-2 pattern),
 * (3) map each word's bytes to the GPT-2 byte alphabet, (4) merge adjacent symbols by lowest merge
 * rank (leftmost on ties) until no merge applies. */
#ifndef DS_TOKENIZER_H
#define DS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../formats/gguf.h"

enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };
enum { PRE_GPT2 = 0, PRE_SMOLLM = 1, PRE_QWEN2 = 2 };

typedef struct {
    int *v;
    int n, cap;
} ivec;
int ivec_push(ivec *a, int x);
void ivec_free(ivec *a);

typedef struct tokenizer {
    int n_vocab;
    char **text;            /* [n_vocab] token text (GPT-2 byte alphabet), NUL-terminated */
    int *text_len;
    int *type;              /* TOK_* */
    int pre;                /* PRE_* */
    char pre_name[32];
    int bos, eos, unk, pad; /* -1 when absent */
    int add_bos;
    int eog[8], n_eog;      /* end-of-generation ids */
    int *special;           /* control + user-defined ids, longest text first */
    int n_special;
    uint32_t *tmap;         /* open-addressing text -> id+1 */
    size_t tmap_cap;
    uint64_t *mkey;         /* open-addressing (left id, right id) -> merge */
    int32_t *mrank, *mres;
    size_t mcap;
    int n_merges;
    char *chat_template;    /* as stored in the file, or NULL */
} tokenizer;

int tokenizer_load_gguf(tokenizer *tk, const gguf_file *g);
void tokenizer_free(tokenizer *tk);

/* Append the ids of text[0..len) to out. parse_special: special-token text maps to its id. */
int tokenizer_encode(const tokenizer *tk, const char *text, size_t len, int parse_special, ivec *out);
/* The pre-tokenizer's words of text[0..len) (no special tokens inside): appends to `ends` the byte
 * offset where each word ends, in order. What tokenizer_encode BPEs word by word; the tests compare it
 * with the pre-tokenizer's regular expression. */
int tokenizer_words(const tokenizer *tk, const char *text, size_t len, ivec *ends);
/* Bytes of one token; control tokens give "" unless render_special. Returns the byte count
 * written (at most cap), or -1 for an id outside the vocabulary. */
int tokenizer_piece(const tokenizer *tk, int id, int render_special, char *buf, size_t cap);
/* Whole sequence to a NUL-terminated heap string. */
char *tokenizer_decode(const tokenizer *tk, const int *ids, int n, int render_special);
int tokenizer_find(const tokenizer *tk, const char *text, size_t len); /* id or -1 */
int tokenizer_is_eog(const tokenizer *tk, int id);
/* FNV-1a of every token's text and type, hex: two tokenizers that hash alike map text alike */
void tokenizer_fingerprint(const tokenizer *tk, char out[20]);

/* Chat templates. Recognised families: ChatML (SmolLM2, Qwen). */
typedef struct {
    const char *role;
    const char *content;
} chat_msg;
typedef struct {
    int family;             /* 0 = none (raw text), 1 = ChatML, -1 = a template we do not recognise */
    char *default_system;   /* injected when the first message is not a system message, or NULL */
} chat_template;
int chat_template_init(chat_template *ct, const tokenizer *tk);
void chat_template_free(chat_template *ct);
const char *chat_family_name(const chat_template *ct);
/* Token ids of the rendered conversation; role markers are special tokens, message content is
 * encoded as plain text (a literal "<|im_start|>" inside a message stays text). */
int chat_encode(const chat_template *ct, const tokenizer *tk, const chat_msg *msgs, int n, int add_generation_prompt,
                ivec *out);
/* The same conversation as text (for display). */
char *chat_render(const chat_template *ct, const chat_msg *msgs, int n, int add_generation_prompt);

#endif
