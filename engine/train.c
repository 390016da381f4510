#include "train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/base/common.h"
#include "../runtime/base/jcfg.h"
#include "../runtime/formats/safetensors.h"
#include "../runtime/sampling.h"

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

static double lr_at(const train_opts *o, int step) {
    int warm = (int)(o->warmup_frac * o->steps);
    if (step < warm) return o->lr * (step + 1) / warm;
    double prog = (double)(step - warm) / DS_MAX(1, o->steps - warm), lo = o->lr * o->min_lr_frac;
    return lo + (o->lr - lo) * 0.5 * (1 + cos(M_PI * prog));
}

double tau_proxy(const train_stats *st) {
    double t = 1;
    for (int k = 1; k <= 16; k++)
        if (st->n_at[k]) t += st->alpha_sum[k] / st->n_at[k];
    return t;
}

/* anchors of one sequence: response positions p (p + 1 inside the sequence), sampled without
 * replacement by rng, ascending; n_valid = predictions that stay inside the sequence; cand is
 * scratch of len[i] ints */
static int pick_anchors(const train_cache *d, int i, int max_a, int gamma, rng_t *r, int *cand, int *anchor,
                        int *n_valid) {
    int lo = d->n_prompt[i], hi = d->len[i] - 2, n = hi - lo + 1, A = DS_MIN(max_a, DS_MAX(n, 0));
    if (n <= 0) return 0;
    for (int k = 0; k < n; k++) cand[k] = lo + k;
    for (int k = 0; k < A; k++) {
        int j = k + (int)(rng_u64(r) % (uint64_t)(n - k));
        int t = cand[k];
        cand[k] = cand[j];
        cand[j] = t;
    }
    for (int a = 1; a < A; a++) /* insertion sort: ascending positions */
        for (int b = a; b > 0 && cand[b - 1] > cand[b]; b--) {
            int t = cand[b];
            cand[b] = cand[b - 1];
            cand[b - 1] = t;
        }
    for (int a = 0; a < A; a++) {
        anchor[a] = cand[a];
        n_valid[a] = DS_MIN(gamma, d->len[i] - 1 - cand[a]);
    }
    return A;
}

static int grow(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    float *q = ds_realloc(*p, sizeof(float) * n, "training sequence");
    if (!q) return -1;
    *p = q, *cap = n;
    return 0;
}

int train_load_seq(const train_cache *d, int i, int positions, int max_a, int reference, rng_t *r, train_seq_buf *b) {
    int n = d->len[i];
    if (reference && !d->has_final) {
        ds_error("the reference path recomputes the target's distribution from its final states: build the cache with "
                 "data.store_final: true");
        return -1;
    }
    int nt = b->n_sel < 0 ? 0 : b->n_sel ? b->n_sel : d->n_tap;
    if (nt && grow(&b->taps, &b->cap_taps, (size_t)n * nt * d->dim)) return -1;
    if (d->has_final && grow(&b->final, &b->cap_final, (size_t)n * d->dim)) return -1;
    traindata_seq(d, i, b->n_sel ? b->sel : NULL, DS_MAX(b->n_sel, 0), b->taps, d->has_final ? b->final : NULL);
    if (n > b->cap_cand) {
        int *c = ds_realloc(b->cand, sizeof(int) * (size_t)n, "training sequence");
        if (!c) return -1;
        b->cand = c, b->cap_cand = n;
    }
    int A = pick_anchors(d, i, DS_MIN(max_a, 512), positions, r, b->cand, b->anchor, b->n_valid);
    b->s = (train_seq){n, b->taps, reference ? b->final : NULL, traindata_tokens(d, i), d->n_prompt[i], d->top_k,
                       reference ? NULL : traindata_topk_id(d, i), reference ? NULL : traindata_topk_lp(d, i), A,
                       b->anchor, b->n_valid};
    return 0;
}

void train_seq_buf_free(train_seq_buf *b) {
    free(b->taps), free(b->final), free(b->cand);
    memset(b, 0, sizeof *b);
}

/* --------------------------------------------------------------------------- checkpoints */

static int rm_tree(const char *dir) {
    const char *files[4] = {"model.safetensors", "config.json", "optimizer.safetensors", "trainer.json"};
    char p[4200];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

/* everything that shapes the loss curve: resuming under another one is not the same run */
static cJSON *run_contract(const trainable *m, const train_cache *d, const train_opts *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "seqs_per_step", o->seqs_per_step);
    cJSON_AddNumberToObject(j, "anchors", o->anchors);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "min_lr_frac", o->min_lr_frac);
    cJSON_AddNumberToObject(j, "warmup_frac", o->warmup_frac);
    cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(j, "clip", o->clip);
    cJSON_AddNumberToObject(j, "beta1", o->beta1);
    cJSON_AddNumberToObject(j, "beta2", o->beta2);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "holdout", o->holdout);
    cJSON_AddItemToObject(j, "drafter", m->config_json(m));
    cJSON_AddBoolToObject(j, "reference", o->reference);
    cJSON_AddNumberToObject(j, "data_top_k", d->top_k);
    cJSON_AddNumberToObject(j, "data_sequences", d->n_seq);
    cJSON_AddNumberToObject(j, "data_tokens", (double)d->n_tok);
    cJSON_AddStringToObject(j, "data_target", d->target_fingerprint);
    return j;
}

/* keep the lines of a jsonl log whose "step" is at most `upto` (a resumed run re-logs the rest) */
static int trim_log(const char *path, int upto) {
    char *txt, *out;
    size_t n, w = 0;
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (ds_read_file(path, &txt, &n)) return -1;
    out = ds_malloc(n + 1, "log");
    if (!out) {
        free(txt);
        return -1;
    }
    for (char *line = txt; line < txt + n;) {
        char *nl = memchr(line, '\n', (size_t)(txt + n - line));
        size_t len = nl ? (size_t)(nl - line) + 1 : (size_t)(txt + n - line);
        const char *s = strstr(line, "\"step\":");
        if (s && s < line + len && atoi(s + 7) <= upto) {
            memcpy(out + w, line, len);
            w += len;
        }
        line += len;
    }
    int rc = ds_write_file_atomic(path, out, w);
    free(txt);
    free(out);
    return rc;
}

static int save_checkpoint(const trainable *m, const float *am, const float *av, int step, const train_opts *o,
                           const cJSON *contract) {
    char tmp[4096], last[4096], old[4096], p[4200];
    snprintf(tmp, sizeof tmp, "%s/last.tmp", o->out);
    snprintf(last, sizeof last, "%s/last", o->out);
    snprintf(old, sizeof old, "%s/last.old", o->out);
    rm_tree(tmp);
    if (m->save(m, tmp)) return -1;
    st_write_tensor t[2] = {{"adam.m", am, 1, {(int64_t)m->n_params}}, {"adam.v", av, 1, {(int64_t)m->n_params}}};
    snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
    if (st_write(p, t, 2, ST_F32, NULL, 0)) return -1;
    snprintf(p, sizeof p, "%s/trainer.json", tmp);
    cJSON *tj = cJSON_CreateObject();
    cJSON_AddNumberToObject(tj, "step", step);
    cJSON_AddItemToObject(tj, "contract", cJSON_Duplicate(contract, 1));
    char *txt = cJSON_Print(tj);
    cJSON_Delete(tj);
    int wr = txt ? ds_write_file_atomic(p, txt, strlen(txt)) : -1;
    free(txt);
    if (wr) return -1;
    /* swap in: last -> last.old, last.tmp -> last, drop last.old */
    rm_tree(old);
    if (rename(last, old) != 0 && errno != ENOENT) {
        ds_error("%s: cannot move the previous checkpoint aside", last);
        return -1;
    }
    if (rename(tmp, last) != 0) {
        ds_error("%s: cannot rename to %s", tmp, last);
        return -1;
    }
    rm_tree(old);
    return 0;
}

/* step to continue from (0 = fresh); m's parameters and the Adam moments come from out/last. The
 * checkpoint's contract must be this run's, unless warm_start (weights only, from step 0). */
static int try_resume(trainable *m, float **am, float **av, const train_opts *o, const cJSON *contract) {
    char last[4096], p[4200], msg[600];
    snprintf(last, sizeof last, "%s/last", o->out);
    snprintf(p, sizeof p, "%s/trainer.json", last);
    struct stat st;
    if (stat(p, &st) != 0) return 0;
    cJSON *tj = ds_read_json(p);
    if (!tj) return -1;
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(tj, "step"), *cj = cJSON_GetObjectItemCaseSensitive(tj, "contract");
    int step = jcfg_integral(sj, 0, 1 << 30) ? sj->valueint : -1; /* 2.5 is no step, 1e30 none either */
    int differs = jcfg_diff(contract, cj, msg, sizeof msg);
    cJSON_Delete(tj);
    if (step < 0) {
        ds_error("%s: no step recorded (a whole number from 0)", p);
        return -1;
    }
    if (differs && !o->warm_start) {
        ds_error("%s: the checkpoint's run had %s; resuming would not continue the same run (give train.warm_start: "
                 "true, or --warm-start, to start a new run from its weights, or use another out folder)",
                 last, msg);
        return -1;
    }
    if (m->read_params(m, last)) {
        ds_error_prefix("cannot resume (is %s a checkpoint of another drafter?)", last);
        return -1;
    }
    if (o->warm_start) return 0; /* weights only: fresh moments, schedule and logs */
    st_file f;
    snprintf(p, sizeof p, "%s/optimizer.safetensors", last);
    if (st_open(&f, p)) return -1;
    const st_tensor *tm = st_find(&f, "adam.m"), *tv = st_find(&f, "adam.v");
    int ok = tm && tv && st_numel(tm) == m->n_params && st_numel(tv) == m->n_params && st_to_f32(&f, tm, *am) == 0 &&
             st_to_f32(&f, tv, *av) == 0;
    st_close(&f);
    if (!ok) {
        ds_error("%s: optimizer state missing or of the wrong size", p);
        return -1;
    }
    return step;
}

/* ------------------------------------------------------------------------------ the loop */

static int train_loop(trainable *m, const train_cache *d, const train_opts *o, train_point *hist, int cap, int *n_hist) {
    const trainable *c = m;
    int rc = -1, *train_idx = NULL, *eval_idx = NULL, *perm = NULL, n_train = 0, n_eval = 0, perm_epoch = -1;
    float *grad = NULL, *am = NULL, *av = NULL;
    train_seq_buf sb = {0}, *bufs = NULL;
    FILE *tlog = NULL, *elog = NULL;
    cJSON *contract = NULL;
    char path[4200];
    if (n_hist) *n_hist = 0;
    /* the cache may tap more layers than the drafter reads (one cache for several families) */
    int sel[8];
    DS_CHECK(d->dim == c->dim && c->n_tap <= 8, "the training cache's width %d is not the drafter's %d", d->dim, c->dim);
    DS_TRY(traindata_select_taps(d, c->taps, c->n_tap, sel));
    DS_CHECK(!o->reference || m->full_vocab, "the reference path needs the full draft vocabulary (draft_vocab 0)");
    DS_TRYP(bufs = ds_calloc((size_t)o->seqs_per_step, sizeof *bufs, "batch"));
    for (int j = 0; j <= o->seqs_per_step; j++) {
        train_seq_buf *b = j < o->seqs_per_step ? &bufs[j] : &sb;
        memcpy(b->sel, sel, sizeof sel);
        b->n_sel = c->n_tap ? c->n_tap : -1; /* -1: a drafter that reads no states (vanilla) */
    }
    DS_TRY(ds_mkdirs(o->out, "the run folder"));
    /* train / held-out split by a seeded hash of the sequence id */
    DS_TRYP(train_idx = ds_malloc(sizeof(int) * (size_t)(d->n_seq + 1), "split"));
    DS_TRYP(eval_idx = ds_malloc(sizeof(int) * (size_t)(d->n_seq + 1), "split"));
    for (int i = 0; i < d->n_seq; i++) {
        double u = (double)(mix(o->seed ^ 0x5eed, (uint64_t)i) >> 11) * 0x1p-53;
        if (u < o->holdout) eval_idx[n_eval++] = i;
        else train_idx[n_train++] = i;
    }
    DS_CHECK(n_train > 0, "no training sequences (cache of %d, holdout %.2f)", d->n_seq, (double)o->holdout);
    DS_TRYP(perm = ds_malloc(sizeof(int) * (size_t)n_train, "order"));
    DS_TRYP(grad = ds_calloc(m->n_params, sizeof(float), "gradients"));
    DS_TRYP(am = ds_calloc(m->n_params, sizeof(float), "Adam moments"));
    DS_TRYP(av = ds_calloc(m->n_params, sizeof(float), "Adam moments"));
    DS_TRYP(contract = run_contract(m, d, o));
    int start = try_resume(m, &am, &av, o, contract);
    if (start < 0) goto fail;
    if (!o->quiet && start > 0) fprintf(stderr, "train: resuming %s at step %d of %d\n", o->out, start, o->steps);
    if (!o->quiet && o->warm_start) fprintf(stderr, "train: warm start in %s (weights of its last checkpoint)\n", o->out);
    if (start > 0) { /* steps logged after the checkpoint are run again: drop their old lines */
        snprintf(path, sizeof path, "%s/train_log.jsonl", o->out);
        DS_TRY(trim_log(path, start));
        snprintf(path, sizeof path, "%s/eval_log.jsonl", o->out);
        DS_TRY(trim_log(path, start));
    }
    snprintf(path, sizeof path, "%s/train_log.jsonl", o->out);
    DS_CHECK((tlog = fopen(path, start ? "a" : "w")) != NULL, "%s: cannot open", path);
    snprintf(path, sizeof path, "%s/eval_log.jsonl", o->out);
    DS_CHECK((elog = fopen(path, start ? "a" : "w")) != NULL, "%s: cannot open", path);

    ds_progress pr;
    ds_progress_start(&pr, "train: step", "steps", o->steps);
    double t_run = ds_now();
    long rows_run = 0;
    int ran = 0;
    for (int step = start; step < o->steps; step++) {
        if (o->stop_after > 0 && ran == o->stop_after) break;
        memset(grad, 0, sizeof(float) * m->n_params);
        train_stats st;
        memset(&st, 0, sizeof st);
        /* the batch: the next sequences of this epoch's seeded order, anchors seeded per slot */
        double norm = 0, t0 = ds_now();
        for (int j = 0; j < o->seqs_per_step; j++) {
            long g = (long)step * o->seqs_per_step + j;
            int epoch = (int)(g / n_train), k = (int)(g % n_train);
            if (epoch != perm_epoch) {
                rng_t pr_;
                rng_seed(&pr_, mix(o->seed, (uint64_t)epoch + 1));
                for (int q = 0; q < n_train; q++) perm[q] = train_idx[q];
                for (int q = n_train - 1; q > 0; q--) {
                    int w = (int)(rng_u64(&pr_) % (uint64_t)(q + 1)), t = perm[q];
                    perm[q] = perm[w];
                    perm[w] = t;
                }
                perm_epoch = epoch;
            }
            rng_t ar;
            rng_seed(&ar, mix(o->seed ^ 0xa11c, (uint64_t)g));
            if (train_load_seq(d, perm[k], c->positions, o->anchors, o->reference, &ar, &bufs[j])) goto fail;
            norm += m->seq_weight(m, bufs[j].s.A, bufs[j].s.n_valid);
        }
        double t_load = ds_now() - t0;
        for (int j = 0; j < o->seqs_per_step && norm > 0; j++)
            if (bufs[j].s.A > 0 && m->step(m, &bufs[j].s, grad, norm, &st)) goto fail;
        double t_step = ds_now() - t0 - t_load;
        /* clip, then AdamW with the scheduled learning rate */
        double gn = 0;
        { /* fixed chunks summed in a fixed order: the same norm whatever the thread count */
            double part[64] = {0};
            size_t chunk = (m->n_params + 63) / 64;
#pragma omp parallel for schedule(static)
            for (int ch = 0; ch < 64; ch++)
                for (size_t i = (size_t)ch * chunk; i < DS_MIN(m->n_params, (size_t)(ch + 1) * chunk); i++)
                    part[ch] += (double)grad[i] * grad[i];
            for (int ch = 0; ch < 64; ch++) gn += part[ch];
        }
        gn = sqrt(gn);
        float gscale = gn > o->clip ? (float)(o->clip / gn) : 1.0f;
        double lr = lr_at(o, step);
        float b1 = o->beta1, b2 = o->beta2, bc1 = (float)(1 - pow(b1, step + 1)), bc2 = (float)(1 - pow(b2, step + 1));
        for (int ti = 0; ti < m->n_t; ti++) {
            const train_tensor *t = &m->t[ti];
            float wd = t->decay ? o->weight_decay : 0.0f;
            float *p = m->params + t->offset, *g = grad + t->offset, *mm = am + t->offset, *vv = av + t->offset;
#pragma omp parallel for schedule(static) if (t->numel > 65536)
            for (size_t i = 0; i < t->numel; i++) {
                float gi = g[i] * gscale;
                mm[i] = b1 * mm[i] + (1 - b1) * gi;
                vv[i] = b2 * vv[i] + (1 - b2) * gi * gi;
                p[i] -= (float)lr * ((mm[i] / bc1) / (sqrtf(vv[i] / bc2) + 1e-8f) + wd * p[i]);
            }
        }
        double dt = ds_now() - t0;
        if (o->prof) {
            o->prof->load += t_load, o->prof->step += t_step, o->prof->opt += dt - t_load - t_step;
            o->prof->rows += st.rows, o->prof->steps++;
        }
        rows_run += st.rows;
        ran++;
        double w = st.weight > 0 ? st.weight : 1;
        train_point tp = {step + 1, (c->w_ce * st.ce + c->w_l1 * st.l1 + c->w_bce * st.bce) / w, st.ce / w, st.l1 / w,
                          st.bce / w, tau_proxy(&st), gn, st.rows / dt};
        if (hist && *n_hist < cap) hist[(*n_hist)++] = tp;
        fprintf(tlog, "{\"step\": %d, \"loss\": %.6f, \"ce\": %.6f, \"l1\": %.6f, \"bce\": %.6f, \"tau_proxy\": %.4f, "
                      "\"grad_norm\": %.4f, \"lr\": %.6g, \"rows\": %ld, \"label_outside\": %ld, \"seconds\": %.3f, "
                      "\"load_seconds\": %.3f}\n",
                tp.step, tp.loss, tp.ce, tp.l1, tp.bce, tp.tau_proxy, gn, lr, st.rows, st.label_outside, dt, t_load);
        fflush(tlog);
        if (!o->quiet) {
            char extra[200];
            snprintf(extra, sizeof extra, "| loss %.4f (ce %.3f l1 %.3f bce %.3f) tau~%.2f | %.0f tok/s | lr %.2e",
                     tp.loss, tp.ce, tp.l1, tp.bce, tp.tau_proxy, rows_run / (ds_now() - t_run), lr);
            ds_progress_update(&pr, step + 1, extra);
        }
        int last_step = step + 1 == o->steps || (o->stop_after > 0 && ran == o->stop_after);
        if (o->eval_every > 0 && n_eval > 0 && ((step + 1) % o->eval_every == 0 || last_step)) {
            train_stats es;
            memset(&es, 0, sizeof es);
            for (int q = 0; q < DS_MIN(n_eval, o->eval_seqs); q++) {
                rng_t ar;
                rng_seed(&ar, mix(o->seed ^ 0xe7a1, (uint64_t)eval_idx[q])); /* the same anchors at every evaluation */
                if (train_load_seq(d, eval_idx[q], c->positions, o->anchors, o->reference, &ar, &sb)) goto fail;
                if (sb.s.A > 0 && m->step(m, &sb.s, NULL, 1, &es)) goto fail;
            }
            double ew = es.weight > 0 ? es.weight : 1;
            fprintf(elog, "{\"step\": %d, \"loss\": %.6f, \"ce\": %.6f, \"l1\": %.6f, \"bce\": %.6f, \"tau_proxy\": %.4f, "
                          "\"sequences\": %d}\n",
                    step + 1, (c->w_ce * es.ce + c->w_l1 * es.l1 + c->w_bce * es.bce) / ew, es.ce / ew, es.l1 / ew,
                    es.bce / ew, tau_proxy(&es), DS_MIN(n_eval, o->eval_seqs));
            fflush(elog);
            if (!o->quiet)
                fprintf(stderr, "\n  held-out (%d sequences): loss %.4f, ce %.3f, l1 %.3f, tau proxy %.3f\n",
                        DS_MIN(n_eval, o->eval_seqs), (c->w_ce * es.ce + c->w_l1 * es.l1 + c->w_bce * es.bce) / ew,
                        es.ce / ew, es.l1 / ew, tau_proxy(&es));
        }
        if ((o->ckpt_every > 0 && (step + 1) % o->ckpt_every == 0) || last_step)
            if (save_checkpoint(m, am, av, step + 1, o, contract)) goto fail;
    }
    if (!o->quiet) ds_progress_end(&pr);
    rc = 0;
fail:
    if (tlog) fclose(tlog);
    if (elog) fclose(elog);
    train_seq_buf_free(&sb);
    for (int j = 0; bufs && j < o->seqs_per_step; j++) train_seq_buf_free(&bufs[j]);
    free(bufs), free(train_idx), free(eval_idx), free(perm), free(grad), free(am), free(av);
    cJSON_Delete(contract);
    return rc;
}

/* Denormals flushed to zero (MXCSR FTZ + DAZ) on this thread and the OpenMP workers while a run
 * trains: a softmax over 16,384 draft rows leaves most probabilities, and so most of dZ, below
 * FLT_MIN, and on Intel cores an FMA that touches a denormal takes a microcode assist (seen on a
 * Xeon, family 6 model 207: the Markov backward took 26.5 s of a 40 s step, 0.8 s with the flush).
 * Values under 1.2e-38 are noise to a gradient; the previous modes come back when the run ends. */
#if defined(__SSE__)
#include <xmmintrin.h>
#define FP_FLUSH 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */
static void fp_flush_set(int on, unsigned *saved) {
#pragma omp parallel
    {
        if (on) {
            if (omp_get_thread_num() == 0) *saved = _mm_getcsr() & FP_FLUSH;
            _mm_setcsr(_mm_getcsr() | FP_FLUSH);
        } else
            _mm_setcsr((_mm_getcsr() & ~FP_FLUSH) | *saved);
    }
}
#else
static void fp_flush_set(int on, unsigned *saved) { (void)on, (void)saved; }
#endif

int train_run(trainable *m, const train_cache *d, const train_opts *o, train_point *hist, int cap, int *n_hist) {
    unsigned saved = 0;
    fp_flush_set(1, &saved);
    int rc = train_loop(m, d, o, hist, cap, n_hist);
    fp_flush_set(0, &saved);
    return rc;
}
