/* accept_stats.c — online acceptance rates of deterministic drafts (see accept_stats.h). */
#include "accept_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

int accept_counts_init(accept_counts *c, int n_cells, float prior, float weight) {
    size_t n = (size_t)n_cells * AS_POS;
    c->n_cells = n_cells;
    c->acc = ds_malloc(sizeof(float) * n, "acceptance counts");
    c->obs = ds_malloc(sizeof(float) * n, "acceptance counts");
    if (!c->acc || !c->obs) {
        accept_counts_free(c);
        return -1;
    }
    for (size_t i = 0; i < n; i++) c->acc[i] = prior * weight, c->obs[i] = weight;
    return 0;
}

void accept_counts_free(accept_counts *c) {
    free(c->acc);
    free(c->obs);
    memset(c, 0, sizeof *c);
}

void accept_counts_zero(accept_counts *c) {
    size_t n = (size_t)c->n_cells * AS_POS;
    c->hits = c->expect = 0;
    memset(c->acc, 0, sizeof(float) * n);
    memset(c->obs, 0, sizeof(float) * n);
}

void accept_counts_add(accept_counts *dst, const accept_counts *src) {
    size_t n = (size_t)dst->n_cells * AS_POS;
    for (size_t i = 0; i < n; i++) dst->acc[i] += src->acc[i], dst->obs[i] += src->obs[i];
}

static float base_rate(const accept_counts *run, const accept_counts *own, float shrink, size_t i) {
    float rate = run->obs[i] > 0 ? run->acc[i] / run->obs[i] : 0.5f;
    return (own->acc[i] + shrink * rate) / (own->obs[i] + shrink);
}

float accept_conf(const accept_counts *run, const accept_counts *own, const accept_prior *ap, int cell, int k) {
    size_t i = (size_t)cell * AS_POS + (size_t)DS_MIN(k, AS_POS - 1);
    float f = (float)((own->hits + ap->req_weight) / (own->expect + ap->req_weight));
    float c = base_rate(run, own, ap->shrink, i) * f;
    return DS_MIN(0.999f, DS_MAX(0.001f, c));
}

static void count(accept_counts *own, const accept_counts *run, const accept_prior *ap, int cell, int k, int accepted) {
    size_t i = (size_t)cell * AS_POS + (size_t)DS_MIN(k, AS_POS - 1);
    own->expect += base_rate(run, own, ap->shrink, i); /* what was predicted before this outcome */
    own->hits += accepted;
    own->obs[i] += 1;
    own->acc[i] += (float)accepted;
}

int accept_observe(accept_counts *own, const accept_counts *run, const accept_prior *ap, const int *cell, const int *tok,
                   int n, const int *com, int m, int after) {
    int k = 0;
    for (; k < n && k < m && com[k] == tok[k]; k++) count(own, run, ap, cell[k], k, 1);
    if (k < n && k < m) { /* the first committed token that differs from the draft: a miss */
        count(own, run, ap, cell[k], k, 0);
        return k;
    }
    return k == n && n > 0 && k < m && after >= 0 && com[k] == after ? k + 1 : k;
}

int accept_prior_read(jcfg *r, accept_prior *ap) {
    *ap = (accept_prior){.prior = 0.2f, .prior_n = 2, .shrink = 8, .req_weight = 4};
    DS_TRY(jcfg_float(r, "prior", 0.001, 0.999, &ap->prior));
    DS_TRY(jcfg_float(r, "prior_weight", 0.01, 1e6, &ap->prior_n));
    DS_TRY(jcfg_float(r, "shrink", 0, 1e6, &ap->shrink));
    DS_TRY(jcfg_float(r, "request_weight", 0.01f, 1e9, &ap->req_weight));
    const cJSON *arr = jcfg_get(r, "calibration");
    if (!arr) return 0;
    DS_CHECK(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) <= AS_POS,
             "drafter: 'calibration' must be an array of at most %d temperatures", AS_POS);
    for (const cJSON *e = arr->child; e; e = e->next) {
        DS_CHECK(cJSON_IsNumber(e) && e->valuedouble > 0 && isfinite(e->valuedouble),
                 "drafter: 'calibration'[%d] must be a positive temperature", ap->n_calib);
        ap->calib[ap->n_calib++] = (float)e->valuedouble;
    }
    return 0;
fail:
    return -1;
}

void accept_draft(draft_block *out, int k, int tok, int cell, verify_fault fault, const accept_counts *run,
                  const accept_counts *own, const accept_prior *ap) {
    float *q = out->q + (size_t)k * out->V;
    memset(q, 0, sizeof(float) * (size_t)out->V);
    if (fault == FAULT_DRAFT_WRONG_Q) q[tok] = 0.5f, q[(tok + 1) % out->V] = 0.5f;
    else q[tok] = 1.0f;
    out->tok[k] = tok;
    float c = out->conf_raw[k] = accept_conf(run, own, ap, cell, k);
    if (k < ap->n_calib) c = 1.0f / (1.0f + expf(-logf(c / (1 - c)) / ap->calib[k]));
    out->conf[k] = c;
}
