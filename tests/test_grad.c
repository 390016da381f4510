/* test_grad — every training op's backward against central finite differences, in double
 * precision, on random small shapes; and the float build of each op against the double one.
 * Loss for an op with output y: L = sum(R * y) for a fixed random R, so dL/dy = R. The worst
 * relative error over all checks is printed. */
#include <omp.h>

#include "testutil.h"

#include "../runtime/train/train_ops.h"

static double g_worst = 0;
static char g_worst_name[64];

static rng_t g_rng;
static void fill(double *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (2 * rng_uniform(&g_rng) - 1) * scale;
}
static double *vec(size_t n, double scale) {
    double *x = malloc(sizeof(double) * (n ? n : 1));
    fill(x, n, scale);
    return x;
}
static double *zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

typedef double (*loss_fn)(void *ctx);

/* compare analytic gradient g[n] of loss w.r.t. x[n] with central differences */
static void check(const char *name, double *x, const double *g, size_t n, loss_fn f, void *ctx) {
    const double h = 1e-6;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = f(ctx);
        x[i] = keep - h;
        double lm = f(ctx);
        x[i] = keep;
        double num = (lp - lm) / (2 * h), den = fmax(fmax(fabs(num), fabs(g[i])), 1e-4); /* roundoff ~1e-9 absolute */
        double rel = fabs(num - g[i]) / den;
        if (rel > worst) {
            worst = rel;
            at = i;
        }
    }
    if (worst > g_worst) {
        g_worst = worst;
        snprintf(g_worst_name, sizeof g_worst_name, "%s", name);
    }
    if (worst > 1e-5) fail_msg("%s: relative error %.3g at element %zu (analytic %.9g)", name, worst, at, g[at]);
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ------------------------------------------------------------------------------- linear */

typedef struct {
    int N, In, O;
    double *x, *W, *b, *R, *y;
} lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    linear_forward_d(c->y, c->x, c->W, c->b, c->N, c->In, c->O);
    return dot(c->y, c->R, (size_t)c->N * c->O);
}
static void test_linear(void **state) {
    (void)state;
    lin_ctx c = {5, 7, 4};
    c.x = vec(35, 1), c.W = vec(28, 1), c.b = vec(4, 1), c.R = vec(20, 1), c.y = zeros(20);
    double *dx = zeros(35), *dW = zeros(28), *db = zeros(4);
    linear_backward_d(dx, dW, db, c.R, c.x, c.W, c.N, c.In, c.O);
    check("linear dinp", c.x, dx, 35, lin_loss, &c);
    check("linear dW", c.W, dW, 28, lin_loss, &c);
    check("linear db", c.b, db, 4, lin_loss, &c);
    /* the frozen shared LM head: gradient to its input only */
    double *dx2 = zeros(35);
    linear_backward_d(dx2, NULL, NULL, c.R, c.x, c.W, c.N, c.In, c.O);
    assert_memory_equal(dx, dx2, sizeof(double) * 35);
    /* float build agrees */
    float xf[35], Wf[28], bf[4], yf[20];
    for (int i = 0; i < 35; i++) xf[i] = (float)c.x[i];
    for (int i = 0; i < 28; i++) Wf[i] = (float)c.W[i];
    for (int i = 0; i < 4; i++) bf[i] = (float)c.b[i];
    linear_forward_f(yf, xf, Wf, bf, 5, 7, 4);
    lin_loss(&c);
    for (int i = 0; i < 20; i++) assert_float_equal(yf[i], c.y[i], 1e-5);
    free(c.x), free(c.W), free(c.b), free(c.R), free(c.y), free(dx), free(dW), free(db), free(dx2);
}

/* ------------------------------------------------------------------------------ rmsnorm */

typedef struct {
    int N, C;
    double *x, *w, *R, *y, *rstd;
} rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    rmsnorm_forward_d(c->y, c->rstd, c->x, c->w, c->N, c->C, 1e-5);
    return dot(c->y, c->R, (size_t)c->N * c->C);
}
/* the float linear ops on GEMMs large enough to be split over threads (by rows and by columns of
 * C, with A or B transposed): against plain double loops, dinp and dW accumulating into nonzero */
static void test_linear_f32_split(void **state) {
    (void)state;
    int shapes[][3] = {{200, 64, 160}, {64, 200, 160}, {64, 160, 200}, {150, 170, 64}}; /* N, In, O */
    omp_set_num_threads(2);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int N = shapes[si][0], In = shapes[si][1], O = shapes[si][2];
        float *x = malloc(sizeof(float) * N * In), *W = malloc(sizeof(float) * O * In), *y = malloc(sizeof(float) * N * O);
        float *dy = malloc(sizeof(float) * N * O), *dx = malloc(sizeof(float) * N * In), *dW = malloc(sizeof(float) * O * In);
        rng_t r;
        rng_seed(&r, 7 + si);
        for (int i = 0; i < N * In; i++) x[i] = (float)rng_uniform(&r) - 0.5f, dx[i] = 0.25f;
        for (int i = 0; i < O * In; i++) W[i] = (float)rng_uniform(&r) - 0.5f, dW[i] = -0.5f;
        for (int i = 0; i < N * O; i++) dy[i] = (float)rng_uniform(&r) - 0.5f;
        linear_forward_f(y, x, W, NULL, N, In, O);
        linear_backward_f(dx, dW, NULL, dy, x, W, N, In, O);
        double worst = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < O; o++) {
                double a = 0;
                for (int i = 0; i < In; i++) a += (double)x[n * In + i] * W[o * In + i];
                worst = fmax(worst, fabs(a - y[n * O + o]));
            }
        for (int n = 0; n < N; n++)
            for (int i = 0; i < In; i++) {
                double a = 0.25;
                for (int o = 0; o < O; o++) a += (double)dy[n * O + o] * W[o * In + i];
                worst = fmax(worst, fabs(a - dx[n * In + i]));
            }
        for (int o = 0; o < O; o++)
            for (int i = 0; i < In; i++) {
                double a = -0.5;
                for (int n = 0; n < N; n++) a += (double)dy[n * O + o] * x[n * In + i];
                worst = fmax(worst, fabs(a - dW[o * In + i]));
            }
        if (worst > 1e-4) fail_msg("N %d In %d O %d: largest difference %g", N, In, O, worst);
        free(x), free(W), free(y), free(dy), free(dx), free(dW);
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    rms_ctx c = {3, 9};
    c.x = vec(27, 2), c.w = vec(9, 1), c.R = vec(27, 1), c.y = zeros(27), c.rstd = zeros(3);
    rms_loss(&c);
    double *dx = zeros(27), *dw = zeros(9);
    rmsnorm_backward_d(dx, dw, c.R, c.x, c.w, c.rstd, 3, 9);
    check("rmsnorm dx", c.x, dx, 27, rms_loss, &c);
    check("rmsnorm dw", c.w, dw, 9, rms_loss, &c);
    free(c.x), free(c.w), free(c.R), free(c.y), free(c.rstd), free(dx), free(dw);
}

/* --------------------------------------------------------------------------------- rope */

typedef struct {
    int N, H, hd;
    int pos[4];
    double *x, *R, *y;
    int neox;
} rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->N * c->H * c->hd;
    memcpy(c->y, c->x, sizeof(double) * n);
    rope_forward_d(c->y, c->pos, c->N, c->H, c->hd, 10000, c->neox);
    return dot(c->y, c->R, n);
}
/* both pair layouts; the half-rotation one also against adjacent pairs permuted per head (pair i of the
 * halves is elements i and i + hd/2: the same rotation on a reordered vector) */
static void test_rope(void **state) {
    (void)state;
    for (int neox = 0; neox < 2; neox++) {
        rope_ctx c = {4, 2, 8, {0, 3, 17, 250}, NULL, NULL, NULL, neox};
        size_t n = 64;
        c.x = vec(n, 1), c.R = vec(n, 1), c.y = zeros(n);
        double *dx = malloc(sizeof(double) * n);
        memcpy(dx, c.R, sizeof(double) * n);
        rope_backward_d(dx, c.pos, c.N, c.H, c.hd, 10000, neox);
        check(neox ? "rope (halves) dx" : "rope dx", c.x, dx, n, rope_loss, &c);
        if (neox) {
            double *a = zeros(n), *b = zeros(n);
            for (size_t r = 0; r < n / 8; r++)
                for (int i = 0; i < 4; i++) /* a: adjacent layout of the same head vector */
                    a[r * 8 + 2 * i] = c.x[r * 8 + i], a[r * 8 + 2 * i + 1] = c.x[r * 8 + 4 + i];
            memcpy(b, c.x, sizeof(double) * n);
            rope_forward_d(a, c.pos, c.N, c.H, c.hd, 10000, 0);
            rope_forward_d(b, c.pos, c.N, c.H, c.hd, 10000, 1);
            for (size_t r = 0; r < n / 8; r++)
                for (int i = 0; i < 4; i++) {
                    assert_true(fabs(a[r * 8 + 2 * i] - b[r * 8 + i]) < 1e-12);
                    assert_true(fabs(a[r * 8 + 2 * i + 1] - b[r * 8 + 4 + i]) < 1e-12);
                }
            free(a), free(b);
        }
        free(c.x), free(c.R), free(c.y), free(dx);
    }
}

/* ------------------------------------------------------------------------------- swiglu */

typedef struct {
    double *g, *u, *R, *y;
    long n;
} sw_ctx;
static double sw_loss(void *p) {
    sw_ctx *c = p;
    swiglu_forward_d(c->y, c->g, c->u, c->n);
    return dot(c->y, c->R, (size_t)c->n);
}
static void test_swiglu(void **state) {
    (void)state;
    sw_ctx c = {vec(30, 3), vec(30, 1), vec(30, 1), zeros(30), 30};
    double *dg = zeros(30), *du = zeros(30);
    swiglu_backward_d(dg, du, c.R, c.g, c.u, 30);
    check("swiglu dg", c.g, dg, 30, sw_loss, &c);
    check("swiglu du", c.u, du, 30, sw_loss, &c);
    free(c.g), free(c.u), free(c.R), free(c.y), free(dg), free(du);
}

/* ---------------------------------------------------------------------------- attention */

typedef struct {
    int Nq, Nc, H, Hkv, hd, Lmax;
    int ctx_len[8], lo[8], hi[8];
    double *q, *kc, *vc, *kb, *vb, *R, *y, *prob;
} att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    attn_forward_d(c->y, c->prob, c->q, c->kc, c->vc, c->kb, c->vb, c->ctx_len, c->lo, c->hi, c->Nq, c->H, c->Hkv, c->hd,
                   c->Lmax);
    return dot(c->y, c->R, (size_t)c->Nq * c->H * c->hd);
}
static void attention_case(int causal) {
    /* two blocks of 3 rows (anchors at context lengths 2 and 5), GQA 4 heads over 2 kv heads */
    att_ctx c = {6, 5, 4, 2, 4, 8};
    for (int i = 0; i < 6; i++) {
        int blk = i / 3;
        c.ctx_len[i] = blk ? 5 : 2;
        c.lo[i] = blk * 3;
        c.hi[i] = causal ? i + 1 : blk * 3 + 3;
    }
    size_t qn = (size_t)c.Nq * c.H * c.hd, cn = (size_t)c.Nc * c.Hkv * c.hd, bn = (size_t)c.Nq * c.Hkv * c.hd;
    c.q = vec(qn, 1), c.kc = vec(cn, 1), c.vc = vec(cn, 1), c.kb = vec(bn, 1), c.vb = vec(bn, 1), c.R = vec(qn, 1);
    c.y = zeros(qn), c.prob = zeros((size_t)c.Nq * c.H * c.Lmax);
    att_loss(&c);
    double *dq = zeros(qn), *dkc = zeros(cn), *dvc = zeros(cn), *dkb = zeros(bn), *dvb = zeros(bn);
    attn_backward_d(dq, dkc, dvc, dkb, dvb, c.R, c.prob, c.q, c.kc, c.vc, c.kb, c.vb, c.ctx_len, c.lo, c.hi, c.Nq, c.H,
                    c.Hkv, c.hd, c.Lmax);
    const char *tag = causal ? "attention (causal)" : "attention (bidirectional block)";
    char n[64];
    snprintf(n, sizeof n, "%s dq", tag);
    check(n, c.q, dq, qn, att_loss, &c);
    snprintf(n, sizeof n, "%s dk context", tag);
    check(n, c.kc, dkc, cn, att_loss, &c);
    snprintf(n, sizeof n, "%s dv context", tag);
    check(n, c.vc, dvc, cn, att_loss, &c);
    snprintf(n, sizeof n, "%s dk block", tag);
    check(n, c.kb, dkb, bn, att_loss, &c);
    snprintf(n, sizeof n, "%s dv block", tag);
    check(n, c.vb, dvb, bn, att_loss, &c);
    /* the mask: with a gradient on block 0's rows only, context rows 2..4 (after its anchor) and
     * block 1's rows receive nothing */
    double *R0 = zeros(qn), *gkc = zeros(cn), *gvc = zeros(cn), *gkb = zeros(bn), *gvb = zeros(bn), *gq = zeros(qn);
    memcpy(R0, c.R, sizeof(double) * qn / 2);
    attn_backward_d(gq, gkc, gvc, gkb, gvb, R0, c.prob, c.q, c.kc, c.vc, c.kb, c.vb, c.ctx_len, c.lo, c.hi, c.Nq, c.H,
                    c.Hkv, c.hd, c.Lmax);
    for (size_t k = 2 * (size_t)c.Hkv * c.hd; k < cn; k++) assert_true(gkc[k] == 0 && gvc[k] == 0);
    for (size_t k = bn / 2; k < bn; k++) assert_true(gkb[k] == 0 && gvb[k] == 0);
    assert_true(gkc[0] != 0 && gkb[0] != 0);
    free(R0), free(gkc), free(gvc), free(gkb), free(gvb), free(gq);
    free(c.q), free(c.kc), free(c.vc), free(c.kb), free(c.vb), free(c.R), free(c.y), free(c.prob);
    free(dq), free(dkc), free(dvc), free(dkb), free(dvb);
}
static void test_attention(void **state) {
    (void)state;
    attention_case(0);
    attention_case(1);
}

/* -------------------------------------------------------------------------------- losses */

typedef struct {
    int V, y;
    double *z, *t, *p;
    double l, c;
} loss_ctx;
static double ce_loss(void *p) {
    loss_ctx *c = p;
    return ce_row_d(NULL, c->z, c->y, c->V, 1, c->p);
}
static double l1_loss(void *p) {
    loss_ctx *c = p;
    return l1_row_d(NULL, c->z, c->t, c->V, 1, c->p);
}
static double bce_loss(void *p) {
    loss_ctx *c = p;
    return bce_logit_d(NULL, c->l, c->c, 1);
}
static void test_losses(void **state) {
    (void)state;
    loss_ctx c = {11, 4};
    c.z = vec(11, 3), c.t = zeros(11), c.p = zeros(11);
    /* a fixed target distribution with one zero entry; no p_i == t_i ties */
    double tz[11];
    fill(tz, 11, 2);
    softmax_row_d(c.t, tz, 11);
    c.t[7] = 0;
    double *dz = zeros(11);
    ce_row_d(dz, c.z, c.y, 11, 1, c.p);
    check("cross-entropy dz", c.z, dz, 11, ce_loss, &c);
    memset(dz, 0, sizeof(double) * 11);
    l1_row_d(dz, c.z, c.t, 11, 1, c.p);
    check("L1 (total variation) dz", c.z, dz, 11, l1_loss, &c);
    double ls[4] = {-3, -0.2, 0.7, 5}, cs[4] = {0, 0.3, 0.81, 1};
    for (int k = 0; k < 4; k++) {
        c.l = ls[k];
        c.c = cs[k];
        double dl = 0;
        bce_logit_d(&dl, c.l, c.c, 1);
        check("BCE dlogit", &c.l, &dl, 1, bce_loss, &c);
    }
    free(c.z), free(c.t), free(c.p), free(dz);
}

/* ------------------------------------------------------------------- Markov and confidence */

/* Markov head: bias = W2 . W1[prev]; confidence: sigmoid(w . [h; W1[prev]] + b) with BCE */
typedef struct {
    int N, V, r, d;
    int prev[4];
    double *W1, *W2, *h, *wc, *bc, *R, *e, *bias, *cin, *lab;
} mk_ctx;
static double mk_loss(void *p) {
    mk_ctx *c = p;
    gather_forward_d(c->e, c->W1, c->prev, c->N, c->r);
    linear_forward_d(c->bias, c->e, c->W2, NULL, c->N, c->r, c->V);
    double L = dot(c->bias, c->R, (size_t)c->N * c->V);
    for (int n = 0; n < c->N; n++) {
        memcpy(c->cin + (size_t)n * (c->d + c->r), c->h + (size_t)n * c->d, sizeof(double) * (size_t)c->d);
        memcpy(c->cin + (size_t)n * (c->d + c->r) + c->d, c->e + (size_t)n * c->r, sizeof(double) * (size_t)c->r);
    }
    double logit[4];
    linear_forward_d(logit, c->cin, c->wc, c->bc, c->N, c->d + c->r, 1);
    for (int n = 0; n < c->N; n++) L += bce_logit_d(NULL, logit[n], c->lab[n], 1);
    return L;
}
static void test_markov_confidence(void **state) {
    (void)state;
    mk_ctx c = {4, 10, 3, 5, {2, 7, 2, 9}};
    c.W1 = vec(30, 1), c.W2 = vec(30, 1), c.h = vec(20, 1), c.wc = vec(8, 1), c.bc = vec(1, 1), c.R = vec(40, 1);
    c.e = zeros(12), c.bias = zeros(40), c.cin = zeros(32), c.lab = vec(4, 0.5);
    for (int i = 0; i < 4; i++) c.lab[i] += 0.5;
    mk_loss(&c);
    double *dW1 = zeros(30), *dW2 = zeros(30), *dh = zeros(20), *dwc = zeros(8), *dbc = zeros(1), *de = zeros(12);
    double *dcin = zeros(32), logit[4], dlogit[4] = {0};
    linear_backward_d(de, dW2, NULL, c.R, c.e, c.W2, c.N, c.r, c.V);
    linear_forward_d(logit, c.cin, c.wc, c.bc, c.N, c.d + c.r, 1);
    for (int n = 0; n < 4; n++) bce_logit_d(&dlogit[n], logit[n], c.lab[n], 1);
    linear_backward_d(dcin, dwc, dbc, dlogit, c.cin, c.wc, c.N, c.d + c.r, 1);
    for (int n = 0; n < 4; n++) {
        for (int k = 0; k < 5; k++) dh[n * 5 + k] += dcin[n * 8 + k];
        for (int k = 0; k < 3; k++) de[n * 3 + k] += dcin[n * 8 + 5 + k];
    }
    gather_backward_d(dW1, de, c.prev, c.N, c.r);
    check("Markov head dW1 (shared rows)", c.W1, dW1, 30, mk_loss, &c);
    check("Markov head dW2", c.W2, dW2, 30, mk_loss, &c);
    check("confidence head dw", c.wc, dwc, 8, mk_loss, &c);
    check("confidence head db", c.bc, dbc, 1, mk_loss, &c);
    check("confidence head dh", c.h, dh, 20, mk_loss, &c);
    free(c.W1), free(c.W2), free(c.h), free(c.wc), free(c.bc), free(c.R), free(c.e), free(c.bias), free(c.cin), free(c.lab);
    free(dW1), free(dW2), free(dh), free(dwc), free(dbc), free(de), free(dcin);
}

/* ------------------------------------------------------------------------------ RNN head */

/* two unrolled steps, so the recurrent path s_1 -> s_2 is checked too */
typedef struct {
    int N, r, d;
    double *s0, *e1, *e2, *h1, *h2, *Wr, *br, *R1, *R2, *Rs;
    double *s1, *o1, *s2, *o2, *inp1, *pre1, *inp2, *pre2;
} rnn_ctx;
static double rnn_loss(void *p) {
    rnn_ctx *c = p;
    rnn_cell_forward_d(c->s1, c->o1, c->inp1, c->pre1, c->s0, c->e1, c->h1, c->Wr, c->br, c->N, c->r, c->d);
    rnn_cell_forward_d(c->s2, c->o2, c->inp2, c->pre2, c->s1, c->e2, c->h2, c->Wr, c->br, c->N, c->r, c->d);
    size_t n = (size_t)c->N * c->r;
    return dot(c->o1, c->R1, n) + dot(c->o2, c->R2, n) + dot(c->s2, c->Rs, n);
}
static void test_rnn(void **state) {
    (void)state;
    rnn_ctx c = {2, 3, 4};
    size_t n = 6, I = 10;
    c.s0 = vec(n, 1), c.e1 = vec(n, 1), c.e2 = vec(n, 1), c.h1 = vec(8, 1), c.h2 = vec(8, 1);
    c.Wr = vec(9 * I, 0.7), c.br = vec(9, 0.5), c.R1 = vec(n, 1), c.R2 = vec(n, 1), c.Rs = vec(n, 1);
    c.s1 = zeros(n), c.o1 = zeros(n), c.s2 = zeros(n), c.o2 = zeros(n);
    c.inp1 = zeros(2 * I), c.pre1 = zeros(18), c.inp2 = zeros(2 * I), c.pre2 = zeros(18);
    rnn_loss(&c);
    double *ds1 = zeros(n), *ds0 = zeros(n), *de1 = zeros(n), *de2 = zeros(n), *dh1 = zeros(8), *dh2 = zeros(8);
    double *dWr = zeros(9 * I), *dbr = zeros(9);
    rnn_cell_backward_d(ds1, de2, dh2, dWr, dbr, c.Rs, c.R2, c.inp2, c.pre2, c.Wr, c.N, c.r, c.d);
    rnn_cell_backward_d(ds0, de1, dh1, dWr, dbr, ds1, c.R1, c.inp1, c.pre1, c.Wr, c.N, c.r, c.d);
    check("RNN head ds_prev (through two steps)", c.s0, ds0, n, rnn_loss, &c);
    check("RNN head de", c.e1, de1, n, rnn_loss, &c);
    check("RNN head dh", c.h2, dh2, 8, rnn_loss, &c);
    check("RNN head dWr", c.Wr, dWr, 9 * I, rnn_loss, &c);
    check("RNN head dbr", c.br, dbr, 9, rnn_loss, &c);
    free(c.s0), free(c.e1), free(c.e2), free(c.h1), free(c.h2), free(c.Wr), free(c.br), free(c.R1), free(c.R2), free(c.Rs);
    free(c.s1), free(c.o1), free(c.s2), free(c.o2), free(c.inp1), free(c.pre1), free(c.inp2), free(c.pre2);
    free(ds1), free(ds0), free(de1), free(de2), free(dh1), free(dh2), free(dWr), free(dbr);
}

static int report(void **state) {
    (void)state;
    printf("worst relative error over all gradient checks: %.3g (%s)\n", g_worst, g_worst_name);
    return 0;
}

int main(void) {
    rng_seed(&g_rng, 1234);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear), cmocka_unit_test(test_linear_f32_split),    cmocka_unit_test(test_rmsnorm),          cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),    cmocka_unit_test(test_attention),        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_markov_confidence), cmocka_unit_test(test_rnn),
    };
    return cmocka_run_group_tests_name("gradients (finite differences, double)", tests, NULL, report);
}
