#include "metrics.h"

#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

static int in_group(const trace_request *r, const char *group) {
    if (!group[0]) return 1;
    if (strncmp(group, "dataset:", 8) == 0) return strcmp(r->dataset, group + 8) == 0;
    if (strncmp(group, "domain:", 7) == 0) return strcmp(r->domain, group + 7) == 0;
    return 0;
}

/* request rows by (id, mode): ids are small non-negative integers, so an array per mode */
typedef struct {
    long *row[2];
    int max_id;
} req_index;

static int index_build(const trace_data *d, req_index *ix) {
    ix->max_id = 0;
    for (long i = 0; i < d->n_requests; i++) ix->max_id = DS_MAX(ix->max_id, d->requests[i].request);
    for (int m = 0; m < 2; m++) {
        ix->row[m] = malloc(sizeof(long) * (size_t)(ix->max_id + 1));
        if (!ix->row[m]) return -1;
        for (int i = 0; i <= ix->max_id; i++) ix->row[m][i] = -1;
    }
    for (long i = 0; i < d->n_requests; i++) {
        const trace_request *r = &d->requests[i];
        if (r->request >= 0 && (r->mode == MODE_AR || r->mode == MODE_SPEC)) ix->row[r->mode][r->request] = i;
    }
    return 0;
}

static const trace_request *find_req(const trace_data *d, const req_index *ix, int id, int mode) {
    if (id < 0 || id > ix->max_id || ix->row[mode][id] < 0) return NULL;
    return &d->requests[ix->row[mode][id]];
}

int metrics_compute(const trace_data *d, const char *group, metrics *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", group[0] ? strchr(group, ':') + 1 : "all");
    double macro = 0;
    req_index ix = {{NULL, NULL}, 0};
    if (index_build(d, &ix)) {
        free(ix.row[0]);
        free(ix.row[1]);
        ds_error("out of memory in report");
        return -1;
    }
    for (long i = 0; i < d->n_requests; i++) {
        const trace_request *r = &d->requests[i];
        if (!in_group(r, group)) continue;
        if (r->mode == MODE_AR) {
            m->ar_tokens += r->output_tokens;
            m->ar_wall += r->wall_s;
            continue;
        }
        m->n_prompts++;
        m->sp_tokens += r->output_tokens;
        m->sp_wall += r->wall_s;
        const trace_request *ar = find_req(d, &ix, r->request, MODE_AR);
        if (ar) {
            m->n_pairs++;
            m->identical += ar->output_hash == r->output_hash;
        }
    }
    /* rounds of the speculative requests in the group (request ids index the request table) */
    long *rr = calloc((size_t)(d->n_requests + 1), sizeof(long)), *re = calloc((size_t)(d->n_requests + 1), sizeof(long));
    if (!rr || !re) {
        free(rr), free(re), free(ix.row[0]), free(ix.row[1]);
        ds_error("out of memory in report");
        return -1;
    }
    for (long i = 0; i < d->n_rounds; i++) {
        const trace_round *t = &d->rounds[i];
        if (t->mode == MODE_AR) {
            const trace_request *r = find_req(d, &ix, t->request, MODE_AR);
            if (r && in_group(r, group)) {
                m->ar_decode += (t->t_draft_us + t->t_sched_us + t->t_verify_us) * 1e-6;
                m->ar_emitted += t->emitted;
            }
            continue;
        }
        if (t->mode != MODE_SPEC) continue;
        const trace_request *r = find_req(d, &ix, t->request, MODE_SPEC);
        if (!r || !in_group(r, group)) continue;
        long ri = r - d->requests;
        rr[ri]++;
        re[ri] += t->emitted;
        m->rounds++;
        m->emitted += t->emitted;
        m->verified += t->verified;
        m->accepted += t->accepted;
        m->t_draft += t->t_draft_us * 1e-6;
        m->t_sched += t->t_sched_us * 1e-6;
        m->t_verify += t->t_verify_us * 1e-6;
        int l = DS_MIN(t->verified, METRICS_MAX_POS);
        m->max_pos = DS_MAX(m->max_pos, l);
        for (int k = 1; k <= l; k++) {
            if (t->accepted >= k - 1) m->att[k]++;
            if (t->accepted >= k) m->acc[k]++;
            m->ver_ge[k]++;
            if (t->accepted >= k) m->acc_ge[k]++;
        }
    }
    int counted = 0;
    for (long i = 0; i < d->n_requests; i++)
        if (rr[i]) {
            macro += (double)re[i] / (double)rr[i];
            counted++;
        }
    free(rr);
    free(re);
    for (long i = 0; i < d->n_conf; i++) {
        const trace_conf *c = &d->conf[i];
        const trace_request *r = find_req(d, &ix, c->request, MODE_SPEC);
        if (!r || !in_group(r, group) || c->position > METRICS_MAX_POS || c->c_star != c->c_star) continue;
        m->cstar_sum[c->position] += c->c_star;
        m->cstar_n[c->position]++;
    }
    free(ix.row[0]);
    free(ix.row[1]);
    m->tau = m->rounds ? (double)m->emitted / (double)m->rounds : 0;
    m->tau_macro = counted ? macro / counted : 0;
    m->accept_rate = m->verified ? (double)m->accepted / (double)m->verified : 0;
    m->ar_tok_s = m->ar_wall > 0 ? m->ar_tokens / m->ar_wall : 0;
    m->sp_tok_s = m->sp_wall > 0 ? m->sp_tokens / m->sp_wall : 0;
    m->sp_decode = m->t_draft + m->t_sched + m->t_verify;
    m->speedup = speedup_wall(m->ar_wall, m->sp_wall, m->sp_decode, m->ar_emitted, m->emitted);
    m->decode_speedup = speedup_decode(m->ar_decode, m->sp_decode, m->ar_emitted, m->emitted);
    return 0;
}

/* the speculative time rescaled to the autoregressive output lengths (its prefill, then the AR's
 * decoded tokens at its own decode rate); at T = 0 the lengths are equal and this is sp_wall */
double speedup_wall(double ar_wall, double sp_wall, double sp_decode, long ar_emitted, long sp_emitted) {
    if (ar_wall <= 0 || sp_wall <= 0) return 0;
    if (sp_emitted <= 0 || ar_emitted <= 0 || sp_decode <= 0) return ar_wall / sp_wall;
    return ar_wall / (DS_MAX(0.0, sp_wall - sp_decode) + (double)ar_emitted * sp_decode / (double)sp_emitted);
}

double speedup_decode(double ar_decode, double sp_decode, long ar_emitted, long sp_emitted) {
    if (sp_decode <= 0 || ar_decode <= 0 || ar_emitted <= 0) return 0;
    return ((double)sp_emitted / sp_decode) / ((double)ar_emitted / ar_decode);
}
