#include "logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/kernels/kernels_cpu.h"
#include "../runtime/sampling.h"

int sampling_is_greedy(const sampling_params *sp) { return sp->temperature < 1e-5f; }

int sampling_params_check(const sampling_params *sp) {
    if (!(sp->temperature >= 0) || !isfinite(sp->temperature)) {
        ds_error("temperature %g must be a finite number >= 0", (double)sp->temperature);
        return -1;
    }
    if (sp->top_k < 0) {
        ds_error("top-k %d must be >= 0 (0 = off)", sp->top_k);
        return -1;
    }
    if (!(sp->top_p > 0 && sp->top_p <= 1)) {
        ds_error("top-p %g must be in (0, 1] (1 = off)", (double)sp->top_p);
        return -1;
    }
    if (!(sp->min_p >= 0 && sp->min_p <= 1)) {
        ds_error("min-p %g must be in [0, 1] (0 = off)", (double)sp->min_p);
        return -1;
    }
    return 0;
}

void lp_scratch_free(lp_scratch *s) {
    free(s->idx);
    free(s->val);
    memset(s, 0, sizeof *s);
}

/* candidate order: larger value first, then lower id */
static int before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

/* min-heap (by `before` reversed) of the k best candidates */
static void sift_down(int *id, float *v, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(v[m], id[m], v[l], id[l])) m = l;
        if (r < n && before(v[m], id[m], v[r], id[r])) m = r;
        if (m == i) return;
        int ti = id[i];
        float tv = v[i];
        id[i] = id[m];
        v[i] = v[m];
        id[m] = ti;
        v[m] = tv;
        i = m;
    }
}

static int cmp_cand(const void *a, const void *b, void *vals) {
    int x = *(const int *)a, y = *(const int *)b;
    const float *val = vals;
    float vx = val[x], vy = val[y];
    if (vx != vy) return vx > vy ? -1 : 1;
    return x - y;
}

/* softmax of the n candidates' values v into probs[id[j]] (the rest of probs is already 0); v is
 * overwritten with exp(v - max) */
static void softmax_cand(float *v, const int *id, int n, float *probs) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = v[j] > mx ? v[j] : mx; /* no NaN here: fmaxf without its libm call */
    double sum = qk_exp_sum(v, mx, v, n);
    for (int j = 0; j < n; j++) probs[id[j]] = (float)(v[j] / sum);
}

int logits_process(const float *logits, int V, const sampling_params *sp, float *probs, lp_scratch *scr) {
    if (sampling_params_check(sp)) return -1;
    if (scr->cap < V) {
        lp_scratch_free(scr);
        scr->idx = ds_malloc(sizeof(int) * (size_t)V, "sampling scratch");
        scr->val = ds_malloc(sizeof(float) * (size_t)V, "sampling scratch");
        if (!scr->idx || !scr->val) {
            lp_scratch_free(scr);
            return -1;
        }
        scr->cap = V;
    }
    /* NaN or +Inf (a broken model or kernel) has no law to sample from; -Inf is a masked token */
    int bad;
    float top = qk_max_scan(logits, V, &bad);
    for (int i = 0; bad && i < V; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) {
            ds_error("logit of token %d is not finite (%g)", i, (double)logits[i]);
            return -1;
        }
    if (top == -INFINITY) {
        ds_error("every logit is -inf: no token is possible");
        return -1;
    }
    memset(probs, 0, sizeof(float) * (size_t)V);
    if (sampling_is_greedy(sp)) {
        probs[qk_first_eq(logits, V, top)] = 1.0f; /* argmax_f32's token: no NaN here */
        return 0;
    }
    int *id = scr->idx, n = 0;
    float *v = scr->val;
    float invT = 1.0f / sp->temperature;
    if (sp->top_k > 0 && sp->top_k < V) {
        int k = sp->top_k;
        for (int i = 0; i < V; i++) {
            float z = logits[i] * invT;
            if (n < k) {
                id[n] = i;
                v[n++] = z;
                if (n == k)
                    for (int j = k / 2 - 1; j >= 0; j--) sift_down(id, v, k, j);
            } else if (before(z, i, v[0], id[0])) {
                id[0] = i;
                v[0] = z;
                sift_down(id, v, k, 0);
            }
        }
        softmax_cand(v, id, n, probs);
    } else {
        /* every token is a candidate: the softmax indexes probs directly (no id indirection) */
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) {
            float z = logits[i] * invT;
            v[i] = z;
            mx = z > mx ? z : mx; /* no NaN here (checked above): fmaxf without its libm call */
        }
        double sum = qk_exp_sum(v, mx, probs, V);
        for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
        if (sp->top_p < 1.0f)
            for (int i = 0; i < V; i++) id[i] = i;
        n = V;
    }
    if (sp->top_p < 1.0f) {
        /* a token inside the nucleus has p > (1 - top_p) / n: drop the rest before sorting */
        float cut = (1.0f - sp->top_p) / (float)n;
        int m = 0;
        for (int j = 0; j < n; j++)
            if (probs[id[j]] >= cut) id[m++] = id[j];
        qsort_r(id, (size_t)m, sizeof(int), cmp_cand, probs);
        double c = 0, kept = 0;
        int keep = m;
        for (int j = 0; j < m; j++) {
            c += probs[id[j]];
            if (c >= sp->top_p) {
                keep = j + 1;
                break;
            }
        }
        for (int j = 0; j < keep; j++) kept += probs[id[j]];
        /* zero everything, then restore the nucleus renormalised */
        float *tmp = v; /* reuse: candidate values are no longer needed */
        for (int j = 0; j < keep; j++) tmp[j] = probs[id[j]];
        memset(probs, 0, sizeof(float) * (size_t)V);
        for (int j = 0; j < keep; j++) probs[id[j]] = (float)(tmp[j] / kept);
    }
    if (sp->min_p > 0) {
        /* min-p: the kept tokens' probabilities are their exp(z - max) over one sum, so the test against
         * min_p times the largest reads the logits' gaps alone (the most likely token always stays) */
        float mx = 0;
        for (int i = 0; i < V; i++) mx = probs[i] > mx ? probs[i] : mx;
        float cut = sp->min_p * mx;
        double kept = 0;
        for (int i = 0; i < V; i++) {
            if (probs[i] < cut) probs[i] = 0;
            kept += probs[i];
        }
        for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / kept);
    }
    return 0;
}
