/* vanilla — a small autoregressive LM as drafter, with its own KV cache per request, rolled back to
 * the accepted prefix, reporting the real processed q of every draft and its top probability as the
 * confidence. Three sources of the LM:
 *   {"checkpoint": DIR}  the distilled LM trained by `train` (vanilla_lm.h): its own layers on the
 *                        target's frozen embedding and head (or the head's draft-vocabulary rows);
 *   {"model": PATH}      a separate model with the target's vocabulary;
 *   {"layers": k}        the target's own first k layers, final norm and head (self-draft, no weights).
 * Every source runs through the target runtime's forward on the backend; the head is applied to the
 * final normed state so that a draft vocabulary costs only its rows.
 *
 * "draft_lookup": m lets the draft LM speculate its own chain (staged speculation, Spector & Re 2023):
 * each of its forwards feeds, after the last draft, up to m tokens that continue the latest earlier
 * occurrence of the chain's last n-gram in the request (prompt lookup). A draft drawn from its logits
 * that equals the next looked-up token finds its own row and logits already computed; at the first
 * difference the unconfirmed rows are cropped. Every draft is still drawn from the q of its own
 * position with the same draws in the same order, so the drafts are the ones the token-by-token path
 * draws (bit for bit where the forward is batch-invariant: the int8 contract); only the number of the
 * draft LM's forwards changes. Its forwards read the weights once for up to 1 + m rows, but a row is
 * not free ("draft_lookup_cost", its cost as a share of a one-token forward, default 0.1: the 0.5B's
 * cost(8)/cost(1) is 1.75 on two cores), so a looked-up token is fed only while the chance that it and
 * those before it are drawn exceeds that cost: per n-gram length and position, a running mean of
 * whether fed tokens were drawn (one token in 8 forwards is fed regardless, to keep measuring).
 *
 * "tree_nodes": N > 0 (with "tree_width": w, default 2) proposes a tree: the chain as above, to depth
 * N / w at most, and beside each of its drafts up to w - 1 siblings from the same row, which cost the
 * draft LM nothing (they are leaves: never fed to it). At T = 0 the siblings are the row's next best
 * tokens (deterministic children, TREE_TOPK); at T > 0 they are drawn from q without replacement (the
 * chain's draft and earlier siblings removed, TREE_WOR), each with the law it was drawn from, so the
 * verifier's multi-step rejection is exact. A node's confidence is its path probability: the chain's
 * c_1 ... c_(k-1) times the row's top probability for the chain's draft and its (r + 1)-th largest for
 * sibling r - functions of the row, never of the drawn token, so the scheduler's cut stays lossless.
 * Nodes come best first (parents first, siblings in the order they are tried), so `greedy`'s admitted
 * nodes are a prefix. A sibling's row probability overstates its chance where the target's residual
 * lies off the draft's top (a draw at T = 1 is accepted ~13 % of the time on the 1.5B), so it is
 * scaled by the accepted over the summed row probabilities of the siblings verified whose parent was
 * reached (tree_calib: past rounds and finished requests only, so the gate's replays stay exact).
 *
 * "tree_mode": "dynamic" (with "tree_nodes": N, "tree_width": w, "tree_depth": D, default 8) grows the
 * tree with the draft LM itself, EAGLE-2's expansion (SpecInfer's token tree from one small LM): the
 * anchor's row gives w children; then, a level at a time, the w best nodes of the newest depth by path
 * probability are fed to the draft LM in one forward (fwd_batch.parent_slot: each attends to the
 * request and its own ancestors' rows, a tree grown over forwards) and each gives the w best tokens of
 * its row as children, up to depth D (or while `more` - greedy's draft pricing - would extend the best
 * path); the N best nodes by path probability are verified, parents first. The children are a
 * function of the context (TREE_TOPK: the verifier descends while its token is a child), so at T = 0
 * the tree is exact however it is cut. The draft LM costs a forward a level for up to w rows (the
 * 0.5B: cost(4)/cost(1) ~1), its tree rows are dropped after the proposal and the accepted tokens fed
 * with the next anchor. A node's confidence is its path probability with each row probability scaled
 * as the siblings' are (tree_calib over every verified node whose parent was reached). At T > 0 the
 * children are drawn from q without replacement instead (TREE_WOR), and a node exists when its path
 * probability reaches a threshold the node room sets, with no cut between branches (propose_sampled
 * says why EAGLE-2's keep-the-best expansion is exact only for deterministic children).
 *
 * "draft_window": W > 0 lets the draft LM read only the prompt's first "draft_sink" S tokens (default 4)
 * and its last W (StreamingLLM's cache, as MagicDec and TriForce give their drafts on long prompts): its
 * prefill of a long prompt (Spec-Bench's summaries and RAG contexts, ~750 tokens) is a share of the
 * speculative wall time the autoregressive run never pays. Its cache holds those rows at positions
 * 0 .. S + W - 1 and what follows after them; the rows after the sink stand for the tokens `skip` later
 * in the request. The drafts are the ones a draft LM given that shortened prompt would draw (test_vanilla);
 * the prompt lookup still reads the whole request. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../verify/verify.h"
#include "drafter.h"
#include "tree_build.h"
#include "vanilla_lm.h"

#define VLM_MATS 7 /* wq wk wv wo w_gate w_up w_down */
#define LOOKUP_MAX 8   /* draft_lookup's bound */
#define LOOKUP_NGRAM 3 /* the longest n-gram matched (then shorter ones, down to LOOKUP_MIN) */
#define LOOKUP_MIN 1
#define DYN_MAX 512    /* a dynamic tree's candidates a proposal at most (w + (D - 1) w^2 where it fits) */

typedef struct {
    int tok, parent, slot;   /* parent: a candidate (-1: the anchor); slot: its draft-cache row once fed */
    float p, pc, score, raw; /* its row probability (raw, calibrated); its path probability (calibrated, raw) */
} dyn_cand;

typedef struct {
    model own;       /* a separate draft model, when loaded */
    model view;      /* the target's struct with fewer (self-draft) or the distilled LM's layers */
    const model *m;
    tokenizer tk;
    int has_tk, self, lm_open;
    vlm_model lm;    /* the distilled LM (checkpoint or untrained) */
    layer_weights lw[VLM_MAX_LAYERS];
    qmat bq[VLM_MAX_LAYERS][VLM_MATS];
    uint32_t bt;     /* the distilled layers' matrices: GGML_F32 (the parameters themselves) or quantized */
    subvocab sv;     /* the head the drafts come from (the distilled LM's own, else the whole vocabulary) */
    const subvocab *svp;
    backend *be;
    int prepared_own, n_prepared;
    fwd_state fs;
    float *hid, *Xd, *Zd, *z, *qalt;
    int cap_hid;
    int lookup;      /* looked-up tokens fed with each draft step (0: token by token) */
    int *hist, cap_hist; /* the request's tokens and the drafts so far, for the lookup */
    long n_fwd, n_drafts, n_fed, n_hit; /* proposals' forwards, drafts, looked-up tokens fed and confirmed */
    float row_cost;  /* a looked-up row's cost, as a share of a one-token forward */
    float hit[LOOKUP_NGRAM + 1][LOOKUP_MAX]; /* P(the j-th looked-up token is drawn and its row read | those
                                              * before were), by match length */
    int g;           /* the match length of the tokens fed last */
    int tree_nodes, tree_width; /* > 0: a tree (the chain and w - 1 siblings beside each draft) */
    int dynamic, tree_depth;    /* "tree_mode": "dynamic": the draft LM expands w nodes a level, D levels */
    int window, sink; /* > 0: the draft LM reads the prompt's first sink and last window tokens */
    int *sib_tok, *sib_depth; /* a proposal's siblings: token, depth (0-based, the chain draft's index) */
    float *sib_conf, *sib_raw, *sib_q; /* their row probability (calibrated, raw) and q rows [tree_nodes][V] */
    int n_sib;
    tree_calib cal;  /* tree mode: finished requests' reached siblings (their row probabilities, accepted) */
    dyn_cand *dyn;   /* dynamic mode: the candidates of a proposal [DYN_MAX] */
    float *drow;     /* dynamic mode at T > 0: the law of the row children are drawn from [V] */
    lp_scratch scr;
} vanilla;

typedef struct {
    kv_cache *kv;
    int base;        /* committed tokens (anchor included) when the last block was drafted */
    int skip;        /* the prompt's tokens after the sink that the draft LM never reads (draft_window):
                      * its cache's rows from the sink on hold the tokens skip later */
    int proposed;    /* a proposal since the last commit (under combine a member may skip a round) */
    int n_cached;    /* its drafts in the cache (rows base .. base + n_cached - 1) */
    int tok[64];     /* ... and their tokens */
    /* tree mode: the last tree's nodes (parent, token, a sibling's row probability or -1 for a chain
     * draft), how many were verified, and this request's reached siblings */
    int tn, tpar[DRAFT_TREE_MAX], ttok[DRAFT_TREE_MAX], n_verified;
    float trow[DRAFT_TREE_MAX];
    tree_calib cal;
} vstate;

/* the distilled LM as a model view: the target's config with its layers, its final norm, the target's
 * embedding; matrices quantized to bt (or the fp32 parameters) and prepared on the backend */
static int lm_view(vanilla *v, const model *t, const char *bp) {
    const vlm_config *c = &v->lm.cfg;
    const mtp_config *g = &c->c;
    int fits = g->dim % QK8_0 == 0 && (g->n_heads * g->head_dim) % QK8_0 == 0 && g->hidden_dim % QK8_0 == 0;
    DS_TRY(drafter_type_of(bp, "block_precision", fits, "widths that are multiples of 32", &v->bt));
    v->view = *t; /* shallow: embedding, rope tables, head; never freed as a model */
    v->view.cfg.n_layers = c->n_layers;
    v->view.cfg.hidden_dim = g->hidden_dim;
    v->view.out_norm = v->lm.final_norm;
    v->view.layers = v->lw;
    v->view.owned = NULL, v->view.n_owned = 0;
    const qmat *prep[VLM_MAX_LAYERS * VLM_MATS];
    for (int l = 0; l < c->n_layers; l++) {
        const mtp_pv_f *p = &v->lm.lay[l];
        float *const src[VLM_MATS] = {p->wq, p->wk, p->wv, p->wo, p->w_gate, p->w_up, p->w_down};
        const int rows[VLM_MATS] = {g->n_heads * g->head_dim, g->n_kv_heads * g->head_dim, g->n_kv_heads * g->head_dim,
                                    g->dim, g->hidden_dim, g->hidden_dim, g->dim};
        const int cols[VLM_MATS] = {g->dim, g->dim, g->dim, g->n_heads * g->head_dim, g->dim, g->dim, g->hidden_dim};
        for (int i = 0; i < VLM_MATS; i++) {
            if (v->bt == GGML_F32) v->bq[l][i] = (qmat){GGML_F32, rows[i], cols[i], sizeof(float) * (size_t)cols[i], src[i]};
            else DS_TRY(drafter_quantize(src[i], rows[i], cols[i], v->bt, &v->bq[l][i], "vanilla layer"));
            prep[v->n_prepared++] = &v->bq[l][i];
        }
        layer_weights *w = &v->lw[l];
        memset(w, 0, sizeof *w);
        w->attn_norm = p->attn_norm, w->ffn_norm = p->ffn_norm;
        w->bq = p->bq, w->bk = p->bk, w->bv = p->bv; /* NULL unless the LM has biases (its target's, Qwen2) */
        w->wq = v->bq[l][0], w->wk = v->bq[l][1], w->wv = v->bq[l][2], w->wo = v->bq[l][3];
        w->w_gate = v->bq[l][4], w->w_up = v->bq[l][5], w->w_down = v->bq[l][6];
    }
    DS_TRY(v->be->prepare_mats(v->be, prep, v->n_prepared));
    v->m = &v->view;
    return 0;
fail:
    return -1;
}

/* {"checkpoint": DIR} or the untrained LM of the tests and the gate */
static int open_lm(vanilla *v, drafter *d, jcfg *r, const char *ck, target *t) {
    const char *bp;
    DS_TRY(drafter_precision(r, "block_precision", &bp));
    if (ck) {
        DS_TRY(jcfg_close(r)); /* a checkpoint carries its architecture */
        DS_TRY(vlm_load(&v->lm, ck, &t->m, 0));
        v->lm_open = 1;
        snprintf(d->describe, sizeof d->describe, "vanilla: distilled LM %s (%d layers, FFN %d)", ck, v->lm.cfg.n_layers,
                 v->lm.cfg.c.hidden_dim);
    } else { /* {"n_layers": k, "seed": S, "init_layers": true, "hidden_dim": H, "vocab_ids": [...]} */
        vlm_config c;
        uint64_t seed = 1;
        int vids[256], nv = 0;
        DS_TRY(vlm_config_init(&c, &t->m, NULL));
        DS_TRY(jcfg_int(r, "n_layers", 1, VLM_MAX_LAYERS, &c.n_layers));
        DS_TRY(jcfg_u64(r, "seed", &seed));
        DS_TRY(jcfg_bool(r, "init_layers", &c.init_layers));
        DS_TRY(jcfg_int(r, "hidden_dim", 1, 1 << 20, &c.c.hidden_dim));
        const cJSON *vj = jcfg_get(r, "vocab_ids");
        if (vj) DS_TRY(subvocab_json_ids(vj, vids, 256, &nv));
        DS_TRY(jcfg_close(r));
        c.c.contract.draft_vocab = nv < c.c.vocab ? nv : 0;
        DS_TRY(vlm_config_check(&c, &t->m));
        DS_TRY(vlm_model_init(&v->lm, &c, &t->m, seed, 0, nv ? vids : NULL));
        v->lm_open = 1;
        snprintf(d->describe, sizeof d->describe, "vanilla: untrained distilled LM (%d layers)", c.n_layers);
    }
    const mtp_config *c = &v->lm.cfg.c;
    DS_TRY(contract_check_serving(&c->contract, t, ck ? ck : "vanilla"));
    DS_TRY(lm_view(v, &t->m, bp));
    snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", %s, draft vocabulary %d",
             drafter_type_key(v->bt), v->lm.sv.Vd);
    snprintf(d->fingerprint, sizeof d->fingerprint, "vanilla-lm-%d-%016llx", v->lm.cfg.n_layers,
             (unsigned long long)v->lm.n_params);
    contract_weights_tag(&c->contract, v->lm.params, v->lm.n_params, d->fingerprint, sizeof d->fingerprint);
    v->svp = &v->lm.sv;
    return 0;
fail:
    return -1;
}

static int vanilla_open(drafter *d, const cJSON *cfg, target *t) {
    vanilla *v = ds_calloc(1, sizeof *v, "vanilla drafter");
    if (!v) return -1;
    d->impl = v;
    v->be = t->be;
    jcfg r;
    int k = 4, vd = 0, la = 0;
    double lc = 0.1;
    const char *path = NULL, *ck = NULL, *ht = "file";
    DS_TRY(jcfg_open(&r, cfg, "drafter"));
    int has_layers = jcfg_get(&r, "layers") != NULL;
    DS_TRY(jcfg_int(&r, "layers", 1, 1 << 20, &k));
    DS_TRY(jcfg_str(&r, "model", &path));
    DS_TRY(jcfg_str(&r, "checkpoint", &ck));
    DS_TRY(jcfg_int(&r, "draft_vocab", 1, 1 << 24, &vd));
    DS_TRY(jcfg_str(&r, "head_type", &ht));
    DS_TRY(jcfg_int(&r, "draft_lookup", 0, LOOKUP_MAX, &la));
    DS_TRY(jcfg_double(&r, "draft_lookup_cost", 0, 1, &lc));
    v->tree_width = 2;
    DS_TRY(jcfg_int(&r, "tree_nodes", 0, 64, &v->tree_nodes));
    DS_TRY(jcfg_int(&r, "tree_width", 2, TREE_MAX_K, &v->tree_width));
    const char *tm = "siblings";
    v->tree_depth = 8;
    DS_TRY(jcfg_str(&r, "tree_mode", &tm));
    DS_TRY(jcfg_int(&r, "tree_depth", 1, 64, &v->tree_depth));
    DS_CHECK(!strcmp(tm, "siblings") || !strcmp(tm, "dynamic"), "drafter: tree_mode '%s' is not one of siblings, dynamic", tm);
    v->dynamic = !strcmp(tm, "dynamic");
    DS_CHECK(!v->dynamic || v->tree_nodes, "drafter: \"tree_mode\": \"dynamic\" needs \"tree_nodes\"");
    DS_CHECK(!v->dynamic || !la, "drafter: \"tree_mode\": \"dynamic\" feeds its own tree; it does not take \"draft_lookup\"");
    DS_CHECK(v->dynamic || !jcfg_get(&r, "tree_depth"), "drafter: \"tree_depth\" is for \"tree_mode\": \"dynamic\"");
    v->sink = 4;
    DS_TRY(jcfg_int(&r, "draft_window", 0, 1 << 24, &v->window));
    DS_TRY(jcfg_int(&r, "draft_sink", 0, 1 << 24, &v->sink));
    DS_CHECK(v->window || !jcfg_get(&r, "draft_sink"), "drafter: \"draft_sink\" is for \"draft_window\"");
    v->lookup = la, v->row_cost = (float)lc;
    for (int g = 0; g <= LOOKUP_NGRAM; g++)
        for (int j = 0; j < LOOKUP_MAX; j++) v->hit[g][j] = 0.5f;
    DS_CHECK(!strcmp(ht, "file") || !strcmp(ht, "q5_0") || !strcmp(ht, "q4_1"),
             "drafter: head_type '%s' is not one of file, q5_0, q4_1", ht);
    int distilled = ck || jcfg_get(&r, "n_layers") != NULL;
    DS_CHECK(has_layers + !!path + distilled <= 1,
             "drafter: give one of \"layers\" (self-draft), \"model\" (a separate LM) or \"checkpoint\" (a distilled LM)");
    DS_CHECK(!vd || !distilled, "drafter: \"draft_vocab\" is for \"model\" and \"layers\"; a distilled LM carries its own");
    DS_CHECK(!strcmp(ht, "file") || !distilled, "drafter: \"head_type\" is for \"model\" and \"layers\"");
    DS_CHECK(!vd || t->has_tokenizer, "drafter: \"draft_vocab\" ranks the target's tokens, and this target has no tokenizer");
    if (distilled) DS_TRY(open_lm(v, d, &r, ck, t));
    else if (path) {
        DS_TRY(jcfg_close(&r));
        DS_TRY(model_load(&v->own, path));
        if (v->own.format == 0 && gguf_get(&v->own.gguf, "tokenizer.ggml.model")) {
            DS_TRY(tokenizer_load_gguf(&v->tk, &v->own.gguf));
            v->has_tk = 1;
        }
        DS_TRY(vocab_compatible(t, &v->own, v->has_tk ? &v->tk : NULL, path));
        DS_TRY(t->be->prepare(t->be, &v->own)); /* the backend's copies of the draft model's weights */
        v->prepared_own = 1;
        v->m = &v->own;
        snprintf(d->describe, sizeof d->describe, "vanilla: separate LM %s (%d layers, dim %d)", path,
                 v->own.cfg.n_layers, v->own.cfg.dim);
        snprintf(d->fingerprint, sizeof d->fingerprint, "%s", v->own.fingerprint);
    } else {
        DS_TRY(jcfg_close(&r));
        /* k = L drafts with the whole target: every draft is accepted (a check of the loop, not a speedup) */
        DS_CHECK(k >= 1 && k <= t->m.cfg.n_layers, "\"layers\" %d must be in 1..%d (the target's layer count)", k,
                 t->m.cfg.n_layers);
        v->view = t->m; /* shallow: same weights, fewer layers; never freed as a model */
        v->view.cfg.n_layers = k;
        v->m = &v->view;
        v->self = 1;
        snprintf(d->describe, sizeof d->describe, "vanilla: self-draft, first %d of %d target layers + final norm + head",
                 k, t->m.cfg.n_layers);
        snprintf(d->fingerprint, sizeof d->fingerprint, "self:%s:%d", t->m.fingerprint, k);
    }
    if (!v->svp) { /* the whole vocabulary through the LM's own head, or its first draft_vocab ids by rank */
        if (vd) {
            DS_TRY(subvocab_by_rank(&v->sv, &t->tk, v->m->cfg.vocab_size, vd));
            snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe),
                     ", draft vocabulary %d of %d (by merge rank)", v->sv.Vd, v->m->cfg.vocab_size);
            snprintf(d->fingerprint + strlen(d->fingerprint), sizeof d->fingerprint - strlen(d->fingerprint), ":v%d", vd);
        } else
            subvocab_full(&v->sv, v->m->cfg.vocab_size);
        DS_TRY(subvocab_gather_head(&v->sv, &v->m->output));
        if (strcmp(ht, "file")) { /* the head re-quantized: the draft's own copy, the model's stays as it is */
            DS_TRY(subvocab_requant_head(&v->sv, !strcmp(ht, "q5_0") ? GGML_Q5_0 : GGML_Q4_1));
            snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe), ", head as %s", ht);
            snprintf(d->fingerprint + strlen(d->fingerprint), sizeof d->fingerprint - strlen(d->fingerprint), ":h%s", ht);
        }
        v->svp = &v->sv;
    } else
        DS_TRY(subvocab_gather_head(&v->lm.sv, &t->m.output));
    if (v->svp->rows) DS_TRY(v->be->prepare_mats(v->be, (const qmat *[]){&v->svp->head}, 1));
    d->has_conf = 1;
    int D = v->m->cfg.dim, V = t->m.cfg.vocab_size, Vd = v->svp->Vd;
    DS_TRY(fwd_state_init(&v->fs, t->be));
    /* the head's rows a step: the last draft's and the looked-up tokens', or a dynamic tree's level (at
     * T > 0 a sampled shape's internal nodes of one depth: up to tree_nodes) */
    int rows = DS_MAX(1 + v->lookup, v->dynamic ? DS_MAX(v->tree_width, v->tree_nodes) : 1);
    DS_TRYP(v->Xd = v->be->alloc(v->be, sizeof(float) * (size_t)rows * D));
    DS_TRYP(v->Zd = v->be->alloc(v->be, sizeof(float) * (size_t)rows * Vd));
    DS_TRYP(v->z = ds_malloc(sizeof(float) * (size_t)rows * Vd, "draft logits"));
    if (v->lookup)
        snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe),
                 ", its own chain sped by %d looked-up tokens a step", v->lookup);
    if (v->window) {
        snprintf(d->describe + strlen(d->describe), sizeof d->describe - strlen(d->describe),
                 ", reading the prompt's first %d and last %d tokens", v->sink, v->window);
        snprintf(d->fingerprint + strlen(d->fingerprint), sizeof d->fingerprint - strlen(d->fingerprint), ":w%d-%d",
                 v->sink, v->window);
    }
    DS_TRYP(v->qalt = ds_malloc(sizeof(float) * (size_t)V, "draft logits"));
    if (v->tree_nodes) {
        int n = v->tree_nodes;
        DS_TRYP(v->sib_tok = ds_malloc(sizeof(int) * (size_t)n * 2, "draft tree"));
        v->sib_depth = v->sib_tok + n;
        DS_TRYP(v->sib_conf = ds_malloc(sizeof(float) * (size_t)n * 2, "draft tree"));
        v->sib_raw = v->sib_conf + n;
        DS_TRYP(v->sib_q = ds_malloc(sizeof(float) * (size_t)n * V, "draft tree"));
        tree_mark(d, v->dynamic ? "a tree the draft LM expands level by level" : "a chain with siblings", v->tree_nodes,
                  v->tree_width);
        if (v->dynamic)
            snprintf(d->fingerprint + strlen(d->fingerprint), sizeof d->fingerprint - strlen(d->fingerprint), "d%d",
                     v->tree_depth);
        d->tree_sampled = 1; /* siblings, and the dynamic mode's shape, drawn without replacement at T > 0 */
        if (v->dynamic) DS_TRYP(v->dyn = ds_malloc(sizeof(dyn_cand) * DYN_MAX, "draft tree"));
        if (v->dynamic) DS_TRYP(v->drow = ds_malloc(sizeof(float) * (size_t)V, "draft tree"));
        d->tree_counts = 1;
    }
    return 0;
fail:
    return -1; /* close() frees what was made */
}

static int vanilla_begin(drafter *d, request *r, const float *prompt_hidden) {
    DS_UNUSED(prompt_hidden);
    vanilla *v = d->impl;
    vstate *s = ds_calloc(1, sizeof *s, "draft state");
    if (!s) return -1;
    /* the distilled LM's cache is fp32, what its training computed; the target's own layers and a
     * separate model keep a target's cache (bf16 on the int8 contract): a full-depth self-draft
     * must compute exactly the target's q */
    const model_config *mc = &v->m->cfg;
    int cap = DS_MIN(r->n_prompt + r->max_new + 64, mc->max_seq);
    s->kv = v->lm_open ? kv_cache_new_dims(d->t->be, mc->n_layers, mc->n_kv_heads, mc->head_dim, cap)
                       : kv_cache_new(d->t->be, mc, cap);
    if (!s->kv) {
        free(s);
        return -1;
    }
    s->skip = v->window && r->n_prompt > v->sink + v->window ? r->n_prompt - v->sink - v->window : 0;
    r->dstate = s;
    return 0;
}

/* how many of the request's tokens the draft cache stands for: its rows, plus the prompt tokens the
 * window skipped once it holds anything (its first feed is the whole window, never the sink alone) */
static int cached_tokens(const vstate *s) { return s->kv->len ? s->kv->len + s->skip : 0; }

/* the cache cropped to the request's first `tokens` tokens (never fewer than the window's prompt) */
static void crop_to(vstate *s, int tokens) { kv_cache_crop(s->kv, tokens - s->skip); }

/* n tokens into the LM's cache (a tree's nodes when ps gives their parents' slots: fwd_batch.parent_slot);
 * the last nl ones' logits over the draft head into v->z's rows */
static int step_tree(vanilla *v, vstate *s, const int *tok, int n, int nl, const int *ps) {
    backend *be = v->be;
    int D = v->m->cfg.dim;
    if (n > v->cap_hid) {
        float *h = ds_realloc(v->hid, sizeof(float) * (size_t)n * D, "draft states");
        if (!h) return -1;
        v->hid = h, v->cap_hid = n;
    }
    kv_cache *kvs[1] = {s->kv};
    fwd_batch b = {.n_seq = 1, .kv = kvs, .n_new = &n, .tokens = tok, .final_hidden = v->hid, .parent_slot = ps};
    DS_TRY(model_forward(v->m, &v->fs, &b));
    float *o[1] = {v->Zd};
    const qmat *w[1] = {&v->svp->head};
    DS_TRY(be->to_device(be, v->Xd, v->hid + (size_t)(n - nl) * D, sizeof(float) * (size_t)nl * D));
    DS_TRY(be->matmul(be, 1, o, w, v->Xd, nl));
    DS_TRY(be->to_host(be, v->z, v->Zd, sizeof(float) * (size_t)nl * v->svp->Vd));
    return 0;
fail:
    return -1;
}

static int step(vanilla *v, vstate *s, const int *tok, int n, int nl) { return step_tree(v, s, tok, n, nl, NULL); }

/* up to m tokens that followed the latest earlier occurrence of h's last g tokens (g = LOOKUP_NGRAM
 * down to LOOKUP_MIN) into out; how many, and g into *mg */
static int lookup(const int *h, int n, int m, int *out, int *mg) {
    for (int g = DS_MIN(LOOKUP_NGRAM, n - 1); g >= LOOKUP_MIN; g--)
        for (int i = n - g - 1; i >= 0; i--) {
            int j = 0;
            while (j < g && h[i + j] == h[n - g + j]) j++;
            if (j < g) continue;
            int c = DS_MIN(m, n - (i + g));
            for (j = 0; j < c; j++) out[j] = h[i + g + j];
            *mg = g;
            return c;
        }
    return 0;
}

/* feed tok[0..n) (the cache's missing tokens, or the last draft) and, with draft_lookup, the tokens
 * that continue the history h[0..nh) (which ends with tok's last) up to `room` of them; the fed
 * lookup tokens into la[], their count into *nla; v->z's rows: after tok's last, then after each */
static int feed(vanilla *v, vstate *s, const int *tok, int n, const int *h, int nh, int room, int *la, int *nla) {
    int buf[64 + LOOKUP_MAX];
    int c = v->lookup && room > 0 && n <= 64 ? lookup(h, nh, DS_MIN(room, v->lookup), la, &v->g) : 0, k = 0;
    float p = 1; /* the chance that looked-up tokens 1..k are all drawn */
    while (k < c && (p *= v->hit[v->g][k]) > v->row_cost) k++;
    if (!k && c && v->n_fwd % 8 == 0) k = 1; /* keep measuring */
    *nla = v->row_cost > 0 ? k : c;
    v->n_fwd++, v->n_fed += *nla;
    if (!*nla) return step(v, s, tok, n, 1);
    memcpy(buf, tok, sizeof(int) * (size_t)n);
    memcpy(buf + n, la, sizeof(int) * (size_t)*nla);
    return step(v, s, buf, n + *nla, 1 + *nla);
}

/* the j-th looked-up token of the last feed: its row read (1) or not (0), into the running mean */
static void hit_seen(vanilla *v, int j, int read) { v->hit[v->g][j] += 0.1f * ((float)read - v->hit[v->g][j]); }

/* the siblings of chain draft k (the row z it was drawn from) into v->sib_*: the row's next best tokens
 * at T = 0, draws from q_k without replacement at T > 0, w - 1 at most and `room` at most. Their
 * confidence is the row's (r + 1)-th largest probability (calibrated as the draft's own c_k): a
 * function of the row, never of the token drawn. */
static int siblings(vanilla *v, request *r, const sampling_params *sp, const draft_contract *ck, int k, int room,
                    const float *z, draft_block *out) {
    int ids[TREE_MAX_K], V = out->V, x = out->tok[k], greedy = sampling_is_greedy(sp);
    double scale = tree_calib_scale(&v->cal, &((vstate *)r->dstate)->cal);
    float p[TREE_MAX_K];
    int m = tree_topk_softmax(z, v->svp->Vd, v->svp->vid, v->tree_width, ids, p, v->qalt);
    const float *prev = out->q + (size_t)k * V;
    int drop = x; /* the token the next sibling's law leaves out */
    for (int rk = 1, j = 0; rk < m && room > 0; rk++, room--) {
        int s;
        if (greedy) { /* the next of the row's best tokens that is not the chain's draft (q unused: TREE_TOPK) */
            while (j < m && ids[j] == x) j++;
            if (j == m) break;
            s = ids[j++];
        } else { /* drawn from q_k with the draft and the earlier siblings removed: the law it is drawn from */
            float *qs = v->sib_q + (size_t)v->n_sib * V;
            memcpy(qs, prev, sizeof(float) * (size_t)V);
            qs[drop] = 0;
            if (!(row_sum(qs, V) > 0)) break; /* q_k's support is used up */
            DS_CHECK((s = rng_draw(&r->rng_draft, qs, V)) >= 0, "vanilla: no sibling to draw at depth %d", k + 1);
            prev = qs, drop = s;
        }
        v->sib_tok[v->n_sib] = s, v->sib_depth[v->n_sib] = k;
        v->sib_raw[v->n_sib] = p[rk], v->sib_conf[v->n_sib] = (float)DS_MIN(1.0, scale * draft_conf_calibrated(p[rk], ck, k));
        v->n_sib++;
    }
    return 0;
fail:
    return -1;
}

/* the chain out->tok[0..n) and the siblings of its drafts into one tree in out, best first: a node's
 * confidence is its path probability (its ancestors' c times its own), sorted descending and stable
 * over an order with parents first and a draft before its siblings, so every prefix is a tree whose
 * siblings come in the order they were drawn (the order verification must try them). parent_q: the
 * control FAULT_TREE_WOR_PARENT_Q, a sibling reported with its draft's whole row q_k (the law before the
 * draft and the earlier siblings were removed) while it was drawn without them. */
static void tree_assemble(vanilla *v, vstate *st, draft_block *out, int greedy, int parent_q) {
    int n = out->n, V = out->V, N = 0;
    struct node {
        float c, cr;
        int depth, sib; /* the chain's draft at depth (sib -1) or sibling sib */
    } nd[DRAFT_TREE_MAX], t;
    int chain_pos[64], tok[DRAFT_TREE_MAX], par[DRAFT_TREE_MAX];
    float conf[DRAFT_TREE_MAX], raw[DRAFT_TREE_MAX];
    float P = 1, Pr = 1; /* the path probability of the chain's first k drafts */
    for (int k = 0, i = 0; k < n; k++) {
        float ck = out->conf ? out->conf[k] : 1, cr = out->conf_raw ? out->conf_raw[k] : ck, last = ck, lastr = cr;
        nd[N++] = (struct node){P * ck, Pr * cr, k, -1};
        for (; i < v->n_sib && v->sib_depth[i] <= k; i++) {
            if (v->sib_depth[i] < k) continue;
            /* never above the draft or an earlier sibling: parents and order survive rounding */
            last = fminf(last, v->sib_conf[i]), lastr = fminf(lastr, v->sib_raw[i]);
            nd[N++] = (struct node){P * last, Pr * lastr, k, i};
        }
        P *= ck, Pr *= cr;
    }
    for (int i = 1; i < N; i++) { /* stable: equal confidences keep parents and drafts first */
        int j = i;
        for (t = nd[i]; j > 0 && nd[j - 1].c < t.c; j--) nd[j] = nd[j - 1];
        nd[j] = t;
    }
    for (int i = 0; i < N; i++)
        if (nd[i].sib < 0) chain_pos[nd[i].depth] = i;
    for (int i = 0; i < N; i++) {
        tok[i] = nd[i].sib < 0 ? out->tok[nd[i].depth] : v->sib_tok[nd[i].sib];
        par[i] = nd[i].depth ? chain_pos[nd[i].depth - 1] : -1;
        conf[i] = nd[i].c, raw[i] = nd[i].cr;
        st->tpar[i] = par[i], st->ttok[i] = tok[i], st->trow[i] = nd[i].sib < 0 ? -1 : v->sib_raw[nd[i].sib];
    }
    st->tn = N, st->n_verified = 0;
    /* the drafts' q rows move up to their places, deepest first (a draft's place is never before its
     * row), then sampled siblings' rows fill theirs (top-k siblings have none: TREE_TOPK reads no q) */
    for (int k = n - 1; k >= 0; k--)
        if (chain_pos[k] != k) memcpy(out->q + (size_t)chain_pos[k] * V, out->q + (size_t)k * V, sizeof(float) * (size_t)V);
    for (int i = 0; i < N && !greedy; i++)
        if (nd[i].sib >= 0)
            memcpy(out->q + (size_t)i * V, parent_q ? out->q + (size_t)chain_pos[nd[i].depth] * V : v->sib_q + (size_t)nd[i].sib * V,
                   sizeof(float) * (size_t)V);
    memcpy(out->tok, tok, sizeof(int) * (size_t)N);
    memcpy(out->parent, par, sizeof(int) * (size_t)N);
    if (out->conf) memcpy(out->conf, conf, sizeof(float) * (size_t)N);
    if (out->conf_raw) memcpy(out->conf_raw, raw, sizeof(float) * (size_t)N);
    out->n = N;
    out->tree = greedy ? TREE_TOPK : TREE_WOR;
}

/* candidate i into ord[0..*n), the best (at most cap) by path probability, descending; stable, so among
 * equal scores the earlier candidate (a parent, a sibling of better rank) stays first */
static void best_insert(int *ord, int *n, int cap, const dyn_cand *c, int i) {
    int j = *n < cap ? (*n)++ : cap;
    if (j == cap) {
        if (!(c[i].score > c[ord[cap - 1]].score)) return;
        j = cap - 1;
    }
    while (j > 0 && c[i].score > c[ord[j - 1]].score) ord[j] = ord[j - 1], j--;
    ord[j] = i;
}

/* "tree_mode": "dynamic": after the catch-up feed left the anchor's row in v->z, the tree grown a level a
 * forward (the header), its `budget` best nodes into out, best first; the draft cache back to the
 * anchor's history after */
static int propose_dynamic(drafter *d, request *r, int budget, const sampling_params *sp, draft_block *out) {
    vanilla *v = d->impl;
    vstate *s = r->dstate;
    const draft_contract *ck = v->lm_open ? &v->lm.cfg.c.contract : NULL;
    dyn_cand *c = v->dyn;
    int w = v->tree_width, Vd = v->svp->Vd, nc = 0, lv0 = 0, base = s->kv->len, ids[TREE_MAX_K], tk[TREE_MAX_K],
        ps[TREE_MAX_K], sel[TREE_MAX_K];
    float p[TREE_MAX_K];
    double scale = tree_calib_scale(&v->cal, &s->cal);
    budget = DS_MIN(DS_MIN(budget, out->cap), DRAFT_TREE_MAX);
    int depth = DS_MIN(DS_MIN(v->tree_depth, budget), (v->m->cfg.max_seq - base) / w + 1);
    for (int lv = 0; lv < depth; lv++) {
        int ns = 0;
        if (lv > 0) { /* the w best candidates of the newest depth, fed as one forward */
            for (int i = lv0; i < nc; i++) best_insert(sel, &ns, w, c, i);
            if (!ns) break;
            if (out->more && out->conf) { /* greedy's price of one more level: the best path's row probabilities */
                float pc[64];
                int k = 0;
                for (int u = sel[0]; u >= 0 && k < 64; u = c[u].parent) k++;
                for (int u = sel[0], i = k - 1; u >= 0 && i >= 0; u = c[u].parent, i--) pc[i] = c[u].pc;
                if (!out->more(out->more_ctx, k, pc)) break;
            }
            for (int j = 0; j < ns; j++) {
                dyn_cand *x = &c[sel[j]];
                tk[j] = x->tok, ps[j] = x->parent < 0 ? -1 : c[x->parent].slot, x->slot = s->kv->len + j;
            }
            v->n_fwd++;
            DS_TRY(step_tree(v, s, tk, ns, ns, ps));
            lv0 = nc;
        }
        for (int j = 0; j < (lv ? ns : 1); j++) { /* each fed row's w best tokens as its children */
            int m = tree_topk_softmax(v->z + (size_t)j * Vd, Vd, v->svp->vid, w, ids, p, v->qalt);
            const dyn_cand *x = lv ? &c[sel[j]] : NULL;
            for (int i = 0; i < m && nc < DYN_MAX; i++) {
                float pc = (float)DS_MIN(1.0, scale * draft_conf_calibrated(p[i], ck, lv));
                c[nc++] = (dyn_cand){ids[i], lv ? sel[j] : -1, -1, p[i], pc, (x ? x->score : 1) * pc, (x ? x->raw : 1) * p[i]};
            }
        }
    }
    kv_cache_crop(s->kv, base); /* the tree's rows go: the next proposal feeds the accepted tokens */
    /* the budget best by path probability, stable over creation order (a parent before its children,
     * siblings by rank), so every prefix is a tree and siblings come in the order they are tried */
    int ord[DYN_MAX], n = 0, at[DYN_MAX];
    for (int i = 0; i < nc; i++) best_insert(ord, &n, budget, c, i);
    for (int i = 0; i < n; i++) at[ord[i]] = i;
    for (int i = 0; i < n; i++) {
        const dyn_cand *x = &c[ord[i]];
        out->tok[i] = x->tok;
        out->parent[i] = x->parent < 0 ? -1 : at[x->parent];
        if (out->conf) out->conf[i] = x->score;
        if (out->conf_raw) out->conf_raw[i] = x->raw;
        s->tpar[i] = out->parent[i], s->ttok[i] = x->tok, s->trow[i] = x->p;
    }
    v->n_drafts += n;
    s->tn = n, s->n_verified = 0;
    out->n = n;
    out->tree = TREE_TOPK;
    DS_UNUSED(sp);
    return 0;
fail:
    kv_cache_crop(s->kv, base);
    out->n = 0;
    return -1;
}

/* the largest theta such that a tree whose nodes each have a path probability >= theta (the product of
 * their ranks' row probabilities: a depth's nodes sum to <= 1, so <= 1 / theta of them) and at most w
 * children, down to depth D, has at most cap nodes */
static double sampled_theta(int w, int D, int cap) {
    for (int m = 64; m >= 1; m--) { /* at most m nodes a depth */
        long n = 0, lv = 1;
        for (int d = 1; d <= D; d++) lv = DS_MIN(lv * w, (long)m), n += lv;
        if (n <= cap) return 1.0 / m;
    }
    return 1.0;
}

/* "tree_mode": "dynamic" at T > 0: children drawn from their parent's row without replacement (TREE_WOR:
 * each with the law it was drawn from, the earlier siblings removed). EAGLE-2's expansion keeps the
 * tree_width best nodes of a depth to grow and the N best nodes overall; with drawn children that makes
 * a node's place depend on its own token (its subtree takes another branch's budget, and that branch's
 * nodes then rank above or below it), which the verifier's rule for sampled children does not allow
 * (a fixed shape filled by draws, Sequoia's, is exact but cannot follow the rows: Spec-Bench tau 1.72
 * against the chain's 2.15 on the 1.5B, report.md). Here nothing is cut by competition: a node exists
 * when its path probability (its ancestors' and its own rank's row probabilities: functions of the rows
 * above it, never of its token) is at least theta, sampled_theta's bound for the draft block's room, and
 * its parent's row still has support after the earlier siblings; so a node's existence and its score
 * depend only on the tokens above it and on earlier siblings. A depth's nodes go to the draft LM in
 * one forward (each attending to the request and its own ancestors), after `more` (greedy's price of a
 * forward) accepts the depth's best path. Confidences are the calibrated path probabilities (as
 * propose_dynamic's), sorted stable: parents first, siblings in the order they were drawn. */
/* the controls' readings of a drawn token x: its share of what is left of the processed row
 * (FAULT_TREE_CONF_TOKEN's score), and its probability in the raw draft row z (FAULT_TREE_KEEP_TOKEN's) */
static float own_share(const float *row, int x, int V) {
    float t = row_sum(row, V);
    return t > 0 ? row[x] / t : 0;
}

static double token_prob(const float *z, int Vd, const int *vid, int x) {
    int e = x;
    if (vid)
        for (e = 0; e < Vd && vid[e] != x; e++) {}
    if (e >= Vd) return 0;
    double mx = -INFINITY, sm = 0;
    for (int i = 0; i < Vd; i++) mx = z[i] > mx ? z[i] : mx;
    for (int i = 0; i < Vd; i++) sm += exp((double)z[i] - mx);
    return exp((double)z[e] - mx) / sm;
}

static int propose_sampled(drafter *d, request *r, int budget, const sampling_params *sp, draft_block *out) {
    vanilla *v = d->impl;
    vstate *s = r->dstate;
    const draft_contract *ck = v->lm_open ? &v->lm.cfg.c.contract : NULL;
    int V = out->V, Vd = v->svp->Vd, w = v->tree_width, base = s->kv->len, sub = v->svp->vid != NULL;
    int cap = DS_MIN(DS_MIN(DS_MIN(budget, v->tree_nodes), out->cap), DRAFT_TREE_MAX), D = DS_MIN(v->tree_depth, cap);
    D = DS_MIN(D, v->m->cfg.max_seq - base); /* the fed depths' rows fit the draft cache */
    double theta = sampled_theta(w, D, cap), scale = tree_calib_scale(&v->cal, &s->cal);
    int par[DRAFT_TREE_MAX], dep[DRAFT_TREE_MAX], slot[DRAFT_TREE_MAX], tk[DRAFT_TREE_MAX], ps[DRAFT_TREE_MAX],
        fed[DRAFT_TREE_MAX], ids[TREE_MAX_K], n = 0;
    float raw[DRAFT_TREE_MAX], sc[DRAFT_TREE_MAX], own[DRAFT_TREE_MAX], rowp[DRAFT_TREE_MAX], p[TREE_MAX_K];
    for (int dl = 0; dl < D; dl++) { /* the nodes at depth dl draw their children (depth dl + 1) */
        int nf = 0, best = -1;
        if (dl > 0) {
            for (int i = 0; i < n; i++)
                if (dep[i] == dl) {
                    if (best < 0 || sc[i] > sc[best]) best = i;
                    fed[nf] = i, tk[nf] = out->tok[i], ps[nf] = par[i] < 0 ? -1 : slot[par[i]];
                    slot[i] = s->kv->len + nf++;
                }
            if (!nf) break;
            if (out->more && out->conf) { /* greedy's price of this depth's forward: its best path */
                float pc[64];
                for (int u = best, i = dl - 1; u >= 0 && i >= 0; u = par[u], i--) pc[i] = own[u];
                if (!out->more(out->more_ctx, dl, pc)) break;
            }
            v->n_fwd++;
            DS_TRY(step_tree(v, s, tk, nf, nf, ps));
        }
        for (int j = 0; j < (dl ? nf : 1); j++) {
            int u = dl ? fed[j] : -1, nrem = 0, remt[TREE_MAX_K];
            float remv[TREE_MAX_K], pr = u < 0 ? 1 : raw[u], ps_ = u < 0 ? 1 : sc[u];
            const float *z = v->z + (size_t)j * Vd;
            int m = tree_topk_softmax(z, Vd, v->svp->vid, w, ids, p, v->qalt);
            if (!m || !(pr * p[0] >= theta)) continue; /* no child of u reaches theta */
            DS_TRY(logits_process(z, sub ? Vd : V, sp, sub ? v->qalt : v->drow, &v->scr));
            if (sub) subvocab_scatter(v->svp, v->qalt, v->drow);
            for (int k = 0; k < m && n < cap && pr * p[k] >= theta; k++) { /* rank k: drawn from the row, earlier ranks removed */
                if (!(row_sum(v->drow, V) > 0)) break; /* the row's support is used up */
                float *qc = out->q + (size_t)n * V;
                memcpy(qc, v->drow, sizeof(float) * (size_t)V);
                int x = rng_draw(&r->rng_draft, qc, V);
                DS_CHECK(x >= 0, "vanilla: no child to draw at depth %d", dl + 1);
                /* the control: a drawn sibling kept only when its own token's path probability reaches theta */
                if (d->fault == FAULT_TREE_KEEP_TOKEN && k > 0 && pr * token_prob(z, Vd, v->svp->vid, x) < theta) break;
                if (d->fault == FAULT_TREE_KEEP_SHARE && k > 0 && pr * own_share(v->drow, x, V) < theta) break;
                if (d->fault == FAULT_TREE_WOR_PARENT_Q) /* the control: the parent's whole row as the law */
                    for (int e = 0; e < nrem; e++) qc[remt[e]] = remv[e];
                /* the control: a node scored by its drawn token's own probability (its place reads its token) */
                float pk = d->fault == FAULT_TREE_CONF_TOKEN ? own_share(v->drow, x, V) : p[k];
                float pc = (float)DS_MIN(1.0, scale * draft_conf_calibrated(pk, ck, dl));
                out->tok[n] = x, par[n] = u, dep[n] = dl + 1, raw[n] = pr * p[k], sc[n] = ps_ * pc, own[n] = pc, rowp[n] = p[k];
                n++;
                remt[nrem] = x, remv[nrem++] = v->drow[x];
                v->drow[x] = 0;
            }
        }
    }
    kv_cache_crop(s->kv, base); /* the tree's rows go: the next proposal feeds the accepted tokens */
    /* best first by calibrated path probability, stable over creation order (parents before children,
     * siblings by rank): a child's is never above its parent's, nor a later rank's above an earlier's */
    int ord[DRAFT_TREE_MAX], at[DRAFT_TREE_MAX];
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && sc[i] > sc[ord[j - 1]]) ord[j] = ord[j - 1], j--;
        ord[j] = i;
    }
    for (int i = 0; i < n; i++) at[ord[i]] = i;
    /* the q rows into their places (place i takes node ord[i]'s), one permutation cycle at a time */
    int done[DRAFT_TREE_MAX] = {0};
    for (int c0 = 0; c0 < n; c0++) {
        if (done[c0] || ord[c0] == c0) continue;
        memcpy(v->drow, out->q + (size_t)c0 * V, sizeof(float) * (size_t)V);
        for (int i = c0;;) {
            int src = ord[i];
            done[i] = 1;
            memcpy(out->q + (size_t)i * V, src == c0 ? v->drow : out->q + (size_t)src * V, sizeof(float) * (size_t)V);
            if (src == c0) break;
            i = src;
        }
    }
    int tok[DRAFT_TREE_MAX];
    memcpy(tok, out->tok, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int o = ord[i];
        out->tok[i] = tok[o], out->parent[i] = par[o] < 0 ? -1 : at[par[o]];
        if (out->conf) out->conf[i] = sc[o];
        if (out->conf_raw) out->conf_raw[i] = raw[o];
        s->tpar[i] = out->parent[i], s->ttok[i] = out->tok[i], s->trow[i] = rowp[o];
    }
    v->n_drafts += n;
    s->tn = n, s->n_verified = 0;
    out->n = n;
    out->tree = TREE_WOR;
    return 0;
fail:
    kv_cache_crop(s->kv, base);
    out->n = 0;
    return -1;
}

static int vanilla_propose(drafter *d, request *r, int gamma, const sampling_params *sp, draft_block *out) {
    vanilla *v = d->impl;
    vstate *s = r->dstate;
    const mtp_config *c = v->lm_open ? &v->lm.cfg.c : NULL;
    int Vd = v->svp->Vd, la[LOOKUP_MAX], nla = 0, zi = 0; /* the looked-up tokens fed; v->z's row drawn from */
    out->n = 0;
    /* feed what the draft cache lacks: the anchor, and accepted tokens it never saw */
    int have = cached_tokens(s);
    DS_CHECK(have < r->toks.n, "vanilla: a proposal over a cache of %d tokens with %d committed (a second "
             "proposal without a commit or a rewind)", have, r->toks.n);
    int nodes = gamma; /* a tree's budget: the chain to depth nodes / w, w - 1 siblings beside each draft */
    if (v->tree_nodes) gamma = DS_MAX(1, DS_MIN(nodes, out->cap) / v->tree_width);
    gamma = DS_MIN(DS_MIN(gamma, (int)(sizeof s->tok / sizeof *s->tok)), v->m->cfg.max_seq - s->kv->len);
    v->n_sib = 0;
    int nh = r->toks.n;
    if (v->lookup) { /* the history the lookup reads: the request's tokens, then the drafts as they come */
        if (nh + gamma > v->cap_hist) {
            int *h = ds_realloc(v->hist, sizeof(int) * (size_t)(nh + gamma), "draft lookup");
            if (!h) goto fail;
            v->hist = h, v->cap_hist = nh + gamma;
        }
        memcpy(v->hist, r->toks.v, sizeof(int) * (size_t)nh);
    }
    if (!have && s->skip) { /* draft_window: the sink, then the prompt's tail and what follows it */
        int n = r->toks.n - s->skip, *w = ds_malloc(sizeof(int) * (size_t)n, "draft window");
        if (!w) goto fail;
        memcpy(w, r->toks.v, sizeof(int) * (size_t)v->sink);
        memcpy(w + v->sink, r->toks.v + v->sink + s->skip, sizeof(int) * (size_t)(n - v->sink));
        int rc = feed(v, s, w, n, v->hist, nh, gamma - 1, la, &nla);
        free(w);
        DS_TRY(rc);
    } else
        DS_TRY(feed(v, s, r->toks.v + have, r->toks.n - have, v->hist, nh, gamma - 1, la, &nla));
    s->base = r->toks.n;
    s->proposed = 1;
    s->n_cached = 0;
    s->tn = 0;
    if (v->dynamic)
        return sampling_is_greedy(sp) ? propose_dynamic(d, r, nodes, sp, out) : propose_sampled(d, r, nodes, sp, out);
    for (int k = 0; k < gamma; k++) {
        DS_TRY(draft_from_logits(d, r, v->z + (size_t)zi * Vd, v->svp, sp, c ? &c->contract : NULL, k, out, &v->scr,
                                 v->qalt));
        out->n = k + 1;
        v->n_drafts++;
        if (v->tree_nodes)
            DS_TRY(siblings(v, r, sp, c ? &c->contract : NULL, k, DS_MIN(nodes, out->cap) - gamma - v->n_sib,
                            v->z + (size_t)zi * Vd, out));
        if (k + 1 < gamma && out->more && out->conf && !out->more(out->more_ctx, k + 1, out->conf)) {
            if (d->fault == FAULT_DRAFT_STOP_PEEKS && out->q[(size_t)k * out->V + out->tok[k]] < out->conf_raw[k])
                out->n = k; /* the control: a stop that also drops x_k by its own value */
            /* the next looked-up row goes unused whatever x_k is: a miss. What a fed token is worth is
             * the chance its row is read, so a chain that stops short counts against feeding */
            if (zi < nla) hit_seen(v, zi, 0);
            break;
        }
        if (k + 1 < gamma) {
            int x = out->tok[k];
            if (v->lookup) v->hist[nh++] = x;
            int drawn = zi < nla && la[zi] == x; /* x was looked up: its row and logits are there */
            if (zi < nla) hit_seen(v, zi, drawn);
            if (drawn) zi++, v->n_hit++;
            else { /* the unconfirmed looked-up rows go; x and a new lookup */
                crop_to(s, s->base + s->n_cached);
                DS_TRY(feed(v, s, &x, 1, v->hist, nh, gamma - k - 2, la, &nla));
                zi = 0;
            }
            s->tok[s->n_cached++] = x;
        }
    }
    crop_to(s, s->base + s->n_cached); /* the cache holds the anchor's history and the fed drafts */
    if (v->tree_nodes && out->n > 0) tree_assemble(v, s, out, sampling_is_greedy(sp), d->fault == FAULT_TREE_WOR_PARENT_Q);
    return 0;
fail:
    out->n = 0;
    return -1;
}

static int vanilla_commit(drafter *d, request *r, int n_accepted, int next_token, const float *hidden) {
    DS_UNUSED(d), DS_UNUSED(next_token), DS_UNUSED(hidden);
    vstate *s = r->dstate;
    /* tree mode: the verified siblings whose parent was reached (the anchor, or a node on the accepted
     * path) are judged: their row probabilities against whether they were the path's next node */
    if (s->proposed && s->tn > 0) {
        tree_calib_judge(&s->cal, s->tpar, s->ttok, s->trow, s->n_verified, r->toks.v + s->base, n_accepted);
        s->tn = 0;
    }
    /* keep the anchor and the cached drafts the round committed (its own accepted ones; under
     * combine another member's draft may have been verified: compare with the committed tokens);
     * the rest are forgotten and the next proposal feeds what the cache lacks */
    if (!s->proposed) return 0;
    int keep = 0;
    /* never the new anchor's row: the next proposal feeds it to get its logits */
    while (keep < s->n_cached && s->base + keep < r->toks.n - 1 && r->toks.v[s->base + keep] == s->tok[keep]) keep++;
    crop_to(s, s->base + keep);
    s->proposed = s->n_cached = 0;
    return 0;
}

static void vanilla_end(drafter *d, request *r) {
    vstate *s = r->dstate;
    if (!s) return;
    vanilla *v = d->impl;
    v->cal.conf += s->cal.conf, v->cal.acc += s->cal.acc;
    kv_cache_free(d->t->be, s->kv);
    free(s);
    r->dstate = NULL;
}

static int vanilla_rewind(drafter *d, request *r) {
    DS_UNUSED(d);
    vstate *s = r->dstate;
    crop_to(s, r->n_prompt); /* the prompt's cache stays valid */
    s->base = s->n_cached = s->proposed = s->tn = 0;
    s->cal = (tree_calib){0, 0};
    return 0;
}

/* tree mode: how many of the last tree's nodes were verified (the scheduler's prefix) */
static int vanilla_observe(drafter *d, request *r, const int *in, const float *logits, int n, int prefill) {
    DS_UNUSED(d), DS_UNUSED(in), DS_UNUSED(logits);
    vstate *s = r->dstate;
    if (!prefill && s->tn > 0) s->n_verified = DS_MIN(n - 1, s->tn);
    return 0;
}

static void vanilla_report(const drafter *d, char *buf, size_t n) {
    const vanilla *v = d->impl;
    snprintf(buf, n, "draft LM: %ld forwards for %ld drafts (%.2f a forward)", v->n_fwd, v->n_drafts,
             v->n_fwd ? (double)v->n_drafts / v->n_fwd : 0.0);
    if (v->lookup)
        snprintf(buf + strlen(buf), n - strlen(buf), "; %ld looked-up tokens fed, %ld of them drawn (%.0f %%)", v->n_fed,
                 v->n_hit, v->n_fed ? 100.0 * v->n_hit / v->n_fed : 0.0);
}

static void vanilla_close(drafter *d) {
    vanilla *v = d->impl;
    if (!v) return;
    backend *be = v->be;
    fwd_state_free(&v->fs);
    if (be) be->release(be, v->Xd), be->release(be, v->Zd);
    free(v->hid), free(v->z), free(v->qalt), free(v->hist), free(v->sib_tok), free(v->sib_conf), free(v->sib_q), free(v->dyn), free(v->drow);
    lp_scratch_free(&v->scr);
    /* the backend keys its copies by the data's address: forget them before the data is freed */
    if (be && v->svp && v->svp->rows) be->forget_mats(be, (const qmat *[]){&v->svp->head}, 1);
    for (int l = 0; l < VLM_MAX_LAYERS; l++)
        for (int i = 0; i < VLM_MATS; i++) {
            if (!v->bq[l][i].data) continue;
            if (be) be->forget_mats(be, (const qmat *[]){&v->bq[l][i]}, 1);
            if (v->bt != GGML_F32) free((void *)v->bq[l][i].data);
        }
    subvocab_free(&v->sv);
    if (v->lm_open) vlm_model_free(&v->lm);
    if (v->has_tk) tokenizer_free(&v->tk);
    if (v->prepared_own) be->forget(be, &v->own);
    if (!v->self) model_free(&v->own);
    free(v);
    d->impl = NULL;
}

const drafter_ops drafter_vanilla = {
    "vanilla",
    "small autoregressive LM: {\"checkpoint\": DIR, \"block_precision\": \"auto\" | \"q8_0\" | \"q4_1\" | \"f32\"} "
    "the distilled LM `train` makes, {\"layers\": k} self-draft from the target's first k layers, or {\"model\": PATH} "
    "(either with \"draft_vocab\": N, a head over the N first token ids by merge rank, and \"head_type\": \"q5_0\" | "
    "\"q4_1\", its head re-quantized; \"draft_lookup\": m, up to m prompt-lookup tokens fed with each of its "
    "forwards while their running hit rate pays for the row (\"draft_lookup_cost\": its share of a forward, "
    "default 0.1), the drafts it draws unchanged; \"tree_nodes\": N > 0, a tree: the chain to depth N / w and "
    "\"tree_width\" w - 1 siblings beside each draft, the row's next best tokens at T = 0, drawn without "
    "replacement at T > 0, verified exactly, or with \"tree_mode\": \"dynamic\" a tree the draft LM grows itself (EAGLE-2): "
    "\"tree_depth\" D levels, each feeding the w best nodes of the newest depth in one forward, their w best tokens as "
    "children, the N best nodes verified (at T > 0: children drawn without replacement, every node whose path "
    "probability reaches the threshold the N nodes' room allows); \"draft_window\": W > 0, the draft LM reads only the prompt's "
    "first \"draft_sink\" (default 4) and last W tokens) "
    "(untrained distilled: {\"n_layers\": 2, \"seed\": 1, \"init_layers\": true})",
    vanilla_open, vanilla_begin, vanilla_propose, vanilla_commit, vanilla_end, vanilla_rewind,
    vanilla_close,
    /* the gate's: one distilled layer copied from the tiny target's first, drafting over a scrambled
     * 6-of-8 draft vocabulary; on SmolLM2 the self-draft of 24 layers (deep enough that drafts share
     * the target's top tokens, so the sparse schedulers' cases see accepted runs). Both speed their
     * chains with draft_lookup, the path that crops unconfirmed rows (the drafts are the same) */
    "{\"n_layers\": 1, \"vocab_ids\": [6, 1, 4, 0, 7, 2], \"draft_lookup\": 2}",
    "{\"layers\": 24, \"draft_lookup\": 4}",
    .train = &vlm_train_family,
    /* its tree: two drafts deep, a sibling beside each (drawn without replacement at T > 0), over the
     * whole vocabulary: a narrow draft vocabulary left the siblings no residual mass to win, and a
     * mutant reporting q_k as a sibling's law passed there. The draft LM reads a window of the prompt
     * (its first token and last 2 of the tiny world's 6), so the gate's replays and rewinds run over
     * a cache whose rows stand for later tokens */
    .gate_config_tree = "{\"n_layers\": 1, \"draft_lookup\": 2, \"tree_nodes\": 4, \"draft_window\": 2, \"draft_sink\": 1}",
    /* its dynamic tree: the draft LM expands 2 nodes a level, 3 levels, 12 nodes verified (at T > 0
     * drawn children, each node's path probability at least 1/6), over a window of the prompt as above */
    .gate_config_tree2 = "{\"n_layers\": 1, \"tree_mode\": \"dynamic\", \"tree_nodes\": 12, \"tree_depth\": 3, "
                         "\"draft_window\": 2, \"draft_sink\": 1}",
    .report = vanilla_report,
    .observe = vanilla_observe,
};
