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

/* request rows by (mode, id), sorted for a binary search: ids come from the file, so an index sized by
 * the largest id would let one row of id 2e9 allocate 32 GB (it did). Writers give every request its
 * own id, so a (mode, id) twice is a trace the pairs cannot be read from: refused. */
typedef struct {
    int mode, id;
    long row;
} req_key;

typedef struct {
    req_key *k;
    long n;
} req_index;

static int key_cmp(const void *a, const void *b) {
    const req_key *x = a, *y = b;
    if (x->mode != y->mode) return x->mode < y->mode ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int index_build(const trace_data *d, req_index *ix) {
    ix->n = 0;
    DS_TRYP(ix->k = ds_malloc(sizeof *ix->k * (size_t)(d->n_requests + 1), "report's request index"));
    for (long i = 0; i < d->n_requests; i++) {
        const trace_request *r = &d->requests[i];
        ix->k[ix->n++] = (req_key){r->mode, r->request, i};
    }
    qsort(ix->k, (size_t)ix->n, sizeof *ix->k, key_cmp);
    for (long i = 1; i < ix->n; i++)
        DS_CHECK(key_cmp(&ix->k[i - 1], &ix->k[i]) != 0, "trace: request %d has two %s rows (%ld and %ld)", ix->k[i].id,
                 ix->k[i].mode == MODE_AR ? "autoregressive" : "speculative", ix->k[i - 1].row, ix->k[i].row);
    return 0;
fail:
    return -1;
}

static const trace_request *find_req(const trace_data *d, const req_index *ix, int id, int mode) {
    long lo = 0, hi = ix->n;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        const req_key *k = &ix->k[mid];
        if (k->mode < mode || (k->mode == mode && k->id < id)) lo = mid + 1;
        else hi = mid;
    }
    return lo < ix->n && ix->k[lo].mode == mode && ix->k[lo].id == id ? &d->requests[ix->k[lo].row] : NULL;
}

int metrics_compute(const trace_data *d, const char *group, metrics *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", group[0] ? strchr(group, ':') + 1 : "all");
    double macro = 0;
    req_index ix = {NULL, 0};
    if (index_build(d, &ix)) {
        free(ix.k);
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
        free(rr), free(re), free(ix.k);
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
    free(ix.k);
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
