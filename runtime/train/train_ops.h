/* train_ops.h — forward/backward pairs of every op a drafter is trained with, in llm.c style:
 * plain loops and GEMMs, row-major [rows][cols], backward ops ACCUMULATE (+=) into gradients.
 *
 * The ops are written once (train_ops.inc) and compiled twice: *_f (float) for training, *_d
 * (double) for the finite-difference gradient checks in tests/test_grad.c, so the code checked in
 * double precision is the code that trains. */
#ifndef DS_TRAIN_OPS_H
#define DS_TRAIN_OPS_H

#define TRAIN_OPS_DECL(REAL, S)                                                                                   \
    /* out[N][O] = inp[N][In] W[O][In]^T + b[O] (b may be NULL) */                                                 \
    void linear_forward##S(REAL *out, const REAL *inp, const REAL *W, const REAL *b, int N, int In, int O);      \
    /* dinp += dout W, dW += dout^T inp, db += colsum(dout); any of them may be NULL */                          \
    void linear_backward##S(REAL *dinp, REAL *dW, REAL *db, const REAL *dout, const REAL *inp, const REAL *W,  \
                            int N, int In, int O);                                                                \
    /* out = x / rms(x) * w; rstd[N] saved for backward */                                                       \
    void rmsnorm_forward##S(REAL *out, REAL *rstd, const REAL *x, const REAL *w, int N, int C, REAL eps);       \
    void rmsnorm_backward##S(REAL *dx, REAL *dw, const REAL *dout, const REAL *x, const REAL *w,               \
                             const REAL *rstd, int N, int C);                                                    \
    /* rotate pairs of x[N][H][hd] by pos * theta^(-2i/hd): adjacent (2i, 2i+1), or with neox the halves'   \
     * (i, i + hd/2) as Qwen2's layers expect; backward rotates back */                                        \
    void rope_forward##S(REAL *x, const int *pos, int N, int H, int hd, REAL theta, int neox);                  \
    void rope_backward##S(REAL *dx, const int *pos, int N, int H, int hd, REAL theta, int neox);                \
    /* out = silu(g) * u */                                                                                      \
    void swiglu_forward##S(REAL *out, const REAL *g, const REAL *u, long n);                                    \
    void swiglu_backward##S(REAL *dg, REAL *du, const REAL *dout, const REAL *g, const REAL *u, long n);        \
    /* Attention of Nq query rows over injected context rows and block rows. Query i sees context rows  \
     * [0, ctx_len[i]) and block rows [blk_lo[i], blk_hi[i]) (bidirectional block: the whole block;     \
     * causal variant: up to itself). prob[Nq][H][Lmax] is saved for backward. */                         \
    void attn_forward##S(REAL *out, REAL *prob, const REAL *q, const REAL *kc, const REAL *vc, const REAL *kb, \
                         const REAL *vb, const int *ctx_len, const int *blk_lo, const int *blk_hi, int Nq, int H,  \
                         int Hkv, int hd, int Lmax);                                                             \
    void attn_backward##S(REAL *dq, REAL *dkc, REAL *dvc, REAL *dkb, REAL *dvb, const REAL *dout,              \
                          const REAL *prob, const REAL *q, const REAL *kc, const REAL *vc, const REAL *kb,      \
                          const REAL *vb, const int *ctx_len, const int *blk_lo, const int *blk_hi, int Nq,      \
                          int H, int Hkv, int hd, int Lmax);                                                     \
    /* the same through GEMMs: context columns [0, Tc) masked past ctx_len, block columns from Tc; ds is    \
     * scratch [Nq][H][Lmax] */                                                                                \
    void attn_gemm_forward##S(REAL *out, REAL *prob, const REAL *q, const REAL *kc, const REAL *vc,             \
                              const REAL *kb, const REAL *vb, const int *ctx_len, const int *blk_lo,           \
                              const int *blk_hi, int Nq, int Tc, int H, int Hkv, int hd, int Lmax);             \
    void attn_gemm_backward##S(REAL *dq, REAL *dkc, REAL *dvc, REAL *dkb, REAL *dvb, const REAL *dout,          \
                               const REAL *prob, const REAL *q, const REAL *kc, const REAL *vc, const REAL *kb, \
                               const REAL *vb, const int *ctx_len, const int *blk_lo, const int *blk_hi, int Nq, \
                               int Tc, int H, int Hkv, int hd, int Lmax, REAL *ds);                             \
    /* rows of a table: out[n] = E[idx[n]]; backward scatters dout into dE */                                     \
    void gather_forward##S(REAL *out, const REAL *E, const int *idx, int N, int C);                             \
    void gather_backward##S(REAL *dE, const REAL *dout, const int *idx, int N, int C);                          \
    /* losses on one row of logits: each returns the loss and ADDS scale * dloss/dz into dz */                  \
    REAL softmax_row##S(REAL *p, const REAL *z, int V);                                                          \
    REAL ce_row##S(REAL *dz, const REAL *z, int y, int V, REAL scale, REAL *scratch);                           \
    /* || softmax(z) - t ||_1 against a fixed distribution t (2 x total variation) */                            \
    REAL l1_row##S(REAL *dz, const REAL *z, const REAL *t, int V, REAL scale, REAL *scratch);                   \
    /* the same against a target kept as K entries plus the rest as one bucket (see train_ops.inc) */       \
    REAL l1_topk_row##S(REAL *dz, const REAL *z, int V, const int *tk, const REAL *t, int K, REAL scale,       \
                        REAL *p, REAL *g);                                                                       \
    /* binary cross-entropy of sigmoid(l) against a soft label c in [0, 1] */                                    \
    REAL bce_logit##S(REAL *dl, REAL l, REAL c, REAL scale);                                                     \
    /* RNN head cell: pre = [s_prev; e; h] Wr^T + br -> (g, c, o); s = sig(g) s_prev + (1 - sig(g)) tanh(c); \
     * out = tanh(o). inp[N][2r+d] and pre[N][3r] are saved for backward. */                                    \
    void rnn_cell_forward##S(REAL *s, REAL *out, REAL *inp, REAL *pre, const REAL *s_prev, const REAL *e,       \
                             const REAL *h, const REAL *Wr, const REAL *br, int N, int r, int d);               \
    /* ds: gradient w.r.t. s (from later steps), dout w.r.t. out; adds into ds_prev, de, dh, dWr, dbr */       \
    void rnn_cell_backward##S(REAL *ds_prev, REAL *de, REAL *dh, REAL *dWr, REAL *dbr, const REAL *ds,          \
                              const REAL *dout, const REAL *inp, const REAL *pre, const REAL *Wr, int N, int r,  \
                              int d);

TRAIN_OPS_DECL(float, _f)
TRAIN_OPS_DECL(double, _d)

#endif
