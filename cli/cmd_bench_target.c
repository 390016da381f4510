/* bench-target — what the target runtime costs on this machine: memory bandwidth, prefill and
 * decode throughput, and the time of one forward at B tokens (the SPS(B) curve the hardware-aware
 * scheduler consumes), written as JSON. */
#include <cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/base/cpu_features.h"
#include "../runtime/kernels/kernels_cpu.h"
#include "../runtime/formats/quant.h"
#include "../runtime/sampling.h"
#include "../runtime/synthetic.h"
#include "../runtime/target.h"
#include "args.h"
#include "commands.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Read bandwidth: every thread sums its slice of a buffer far larger than the caches. The sums are
 * integer, so the compiler may reorder and vectorize them: a float sum in order is one chain of
 * dependent adds (2-4 cycles each), which measured the add's latency, not the memory (14 GB/s on a
 * Xeon whose decode streamed its weights at 23). */
static double measure_bandwidth(int threads, size_t bytes) {
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = ds_aligned_alloc(n * sizeof(uint64_t), "bandwidth buffer");
    if (!buf) return 0;
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    double best = 0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = ds_now();
        uint64_t total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total)
        for (size_t i = 0; i < n; i += 8) {
            uint64_t a = buf[i] + buf[i + 1], b = buf[i + 2] + buf[i + 3], c = buf[i + 4] + buf[i + 5],
                     d = buf[i + 6] + buf[i + 7];
            total += (a + b) + (c + d);
        }
        double dt = ds_now() - t0;
        sink += total;
        if (bytes / dt > best) best = (double)bytes / dt;
    }
    free(buf);
    return sink == 1 ? 0 : best / 1e9; /* read the sums, so the loops stay */
}

/* The int8 roof: every thread issues the kernel path's multiply-adds on registers only; best of 5
 * (a run is ~10 ms, and a shared machine's clock and neighbours move it). */
static double measure_peak(const qk_kernels *k, int threads) {
    long n = 4000000;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = ds_now(), macs = 0;
#pragma omp parallel num_threads(threads) reduction(+ : macs)
        macs += k->peak_i8(n);
        double dt = ds_now() - t0;
        if (macs / dt > best) best = macs / dt;
    }
    return best / 1e9;
}

/* multiply-adds of the weight matrices per token (attention over the context is fp32 and extra) */
static double matmul_macs(const model *m) {
    double s = (double)m->output.rows * m->output.cols;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const qmat *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) s += (double)ws[i]->rows * ws[i]->cols;
    }
    return s;
}

/* "N % of the int8 roof", where the roof is the machine's: an accelerator's throughput is not a
 * share of the host CPU's int8 peak */
static const char *roof_share(char *buf, size_t n, double gmacs, double peak, int on_cpu) {
    if (on_cpu) snprintf(buf, n, "%.0f %%", 100 * gmacs / peak);
    else snprintf(buf, n, "-");
    return buf;
}

static size_t mat_bytes(const qmat *w) { return (size_t)w->rows * w->row_bytes; }

/* Bytes one decode step must read: every weight matrix once, the head, one embedding row, the
 * norms and the KV cache of the context. */
static double decode_bytes(const model *m, int ctx) {
    const model_config *c = &m->cfg;
    double b = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        b += (double)(mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
                      mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down));
        b += 2.0 * c->dim * 4;
    }
    b += (double)mat_bytes(&m->output) + (double)m->tok_embd.row_bytes + c->dim * 4.0;
    b += 2.0 * c->n_layers * (double)ctx * c->n_kv_heads * c->head_dim * 4;
    return b;
}

/* tmb[i * reps + r]: repetition r of one forward of 2^i tokens after ctx positions, for i < nb. The
 * points are measured interleaved: every repetition times each B once. Timed one B after another,
 * this machine's drift (minutes of 20-40 % swings on a shared 2-core guest) went into the ratios the
 * scheduler prices drafts with: one table said cost(2)/cost(1) = 1.15 where the rounds of the run
 * that used it cost 1.3-1.4x a one-token round. Each repetition's order is a fresh (seeded) shuffle:
 * a forward's cost depends on the one before it (on a VM whose weights sit in a shared L3, B = 1
 * took 2.7 ms after another B = 1 and 3.7-4.2 after a B = 16), and a rotated order put B = 1 after
 * the largest B every time, which inflated cost(1) and deflated every cost(B)/cost(1). */
static int sps_times(target *t, kv_cache *kv, const int *toks, float *logits, int ctx, int nb, int reps, double *tmb,
                     rng_t *rng) {
    int order[32];
    kv_cache_crop(kv, 0);
    DS_TRY(model_forward_one(&t->m, &t->fs, kv, toks, ctx, 0, logits));
    for (int r = -3; r < reps; r++) { /* three untimed rounds first: the first steps after the prefill run slow */
        for (int j = 0; j < nb; j++) order[j] = j;
        for (int j = nb - 1; j > 0; j--) { /* Fisher-Yates */
            int k = (int)(rng_u64(rng) % (uint64_t)(j + 1)), tmp = order[j];
            order[j] = order[k], order[k] = tmp;
        }
        for (int j = 0; j < nb; j++) {
            int i = order[j], B = 1 << i;
            double t0 = ds_now();
            DS_TRY(model_forward_one(&t->m, &t->fs, kv, toks + ctx, B, 1, logits));
            if (r >= 0) tmb[(size_t)i * reps + r] = ds_now() - t0;
            kv_cache_crop(kv, ctx);
        }
    }
    return 0;
fail:
    return -1;
}

int cmd_bench_target(int argc, char **argv) {
    const char *model_path = target_default_path(), *out_path = NULL, *synth = NULL, *synth_type = "q4_1";
    int threads = 0, reps = 5, ctx = 128, ctx2 = 1024, decode_n = 128, max_b = 64, roof_only = 0;
    backend_opts bo = {0};
    opt_def opts[] = {
        {"model", OPT_STR, &model_path, "NAME|PATH", "target model: a name (below) or a file (default: smollm2-135m)", 0, 0, 0},
        {"threads", OPT_INT, &threads, "N", "CPU threads, 0 = OMP_NUM_THREADS or all cores", 0, 256, 0},
        {"reps", OPT_INT, &reps, "N", "repetitions per measurement, median reported (default 5)", 1, 1000, 0},
        {"context", OPT_INT, &ctx, "N", "context length before decode and SPS(B) steps (default 128)", 1, 1 << 20, 0},
        {"context2", OPT_INT, &ctx2, "N", "a second context for the SPS(B) points, to fit what attention adds per "
         "position (default 1024; 0 or <= --context: none)", 0, 1 << 20, 0},
        {"decode-tokens", OPT_INT, &decode_n, "N", "tokens per decode measurement (default 128)", 1, 1 << 20, 0},
        {"max-B", OPT_INT, &max_b, "N", "largest batch in the SPS(B) curve (default 64)", 1, 4096, 0},
        {"out", OPT_STR, &out_path, "FILE", "write the results as JSON", 0, 0, 0},
        {"synthetic", OPT_STR, &synth, "SHAPE", "a random timing model of this shape made on the GPU instead of --model "
         "(smollm2-135m, llama-1b, llama-3b, qwen3-4b, qwen2.5-1.5b; needs --backend cuda)", 0, 0, 0},
        {"synthetic-type", OPT_STR, &synth_type, "TYPE", "its matrices' type: q4_1 (default), q4_0, q8_0, f16, bf16", 0, 0, 0},
        {"roof", OPT_FLAG, &roof_only, NULL, "measure only the roof (int8 peak, bandwidth, cores) and stop", 0, 0, 0},
        OPT_BACKEND(bo),
        OPT_END};
    const char *pos[1];
    int npos, rc = args_parse("bench-target", "[options]", opts, argc, argv, pos, 0, &npos);
    if (rc) return rc < 0 ? -1 : 0;

    bo.n_threads = threads; /* --threads: the backend's threads (and the roof's and the bandwidth's) */
    target t;
    if (synth) { /* weights only on the backend: no tokenizer, no file */
        const char *tn[] = {"q4_1", "q4_0", "q8_0", "f16", "bf16"};
        const uint32_t ty[] = {GGML_Q4_1, GGML_Q4_0, GGML_Q8_0, GGML_F16, GGML_BF16};
        int k = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(synth_type, tn[i]) == 0) k = i;
        if (k < 0) {
            ds_error("--synthetic-type: unknown type '%s' (q4_1, q4_0, q8_0, f16, bf16)", synth_type);
            return -1;
        }
        memset(&t, 0, sizeof t);
        if (!(t.be = backend_new(&bo)) || model_synthetic(&t.m, synth, ty[k], t.be, 1234) || fwd_state_init(&t.fs, t.be)) {
            target_close(&t);
            return -1;
        }
        model_path = synth;
    } else if (target_open(&t, model_path, &bo)) return -1;
    const model *m = &t.m;
    int V = m->cfg.vocab_size, nt = t.be->n_threads;
    if (ctx2 > 0 && ctx2 + max_b + 8 > m->cfg.max_seq) ctx2 = 0; /* a model with a short context: no second point */
    int maxlen = DS_MAX(DS_MAX(512, ctx + DS_MAX(max_b, decode_n)), ctx2 + max_b) + 8;
    kv_cache *kv = NULL;
    float *logits = NULL;
    int *toks = NULL;
    double *tm = NULL, *tmb = NULL, *med1 = NULL;
    cJSON *root = cJSON_CreateObject(), *sps = NULL;
    rng_t rng;
    rng_seed(&rng, 1234);
    DS_CHECK(maxlen <= m->cfg.max_seq, "context %d plus batch exceeds the model's context length %d", ctx, m->cfg.max_seq);
    DS_TRYP(kv = kv_cache_new(t.be, &m->cfg, maxlen));
    DS_TRYP(logits = ds_malloc(sizeof(float) * (size_t)V * (size_t)DS_MAX(max_b, 1), "logits"));
    DS_TRYP(toks = ds_malloc(sizeof(int) * (size_t)maxlen, "tokens"));
    DS_TRYP(tm = ds_malloc(sizeof(double) * (size_t)reps, "timings"));
    for (int i = 0; i < maxlen; i++) toks[i] = 100 + (int)(rng_u64(&rng) % (uint64_t)(V - 100));

    char cpu[256];
    cpu_describe(cpu, sizeof cpu);
    fprintf(stderr, "bench-target: %s, %d threads, %s%s%s\n", model_path, nt, cpu, t.be->device ? ", " : "",
            t.be->device ? t.be->device : "");
    if (t.be->device) printf("kernels: %s (backend %s) on %s, host %s\n", t.be->kernels, t.be->name, t.be->device, cpu);
    else printf("kernels: %s (backend %s, %d threads) on %s\n", t.be->kernels, t.be->name, nt, cpu);
    if (synth) printf("model: synthetic %s, %.2f B parameters, random weights (timing only)\n", synth,
                      model_n_params(m) / 1e9);

    /* warm up both matmul paths (the GEMM path makes its fp32 weight copies here) */
    kv_cache_crop(kv, 0);
    DS_TRY(model_forward_one(m, &t.fs, kv, toks, 64, 0, logits));
    DS_TRY(model_forward_one(m, &t.fs, kv, toks, 4, 0, logits));

    /* the roof: the kernel path's int8 peak on 1 and on nt threads (nt x the first if the threads
     * have cores of their own, ~1x if they are SMT siblings), and the memory bandwidth */
    cpu_isa isa;
    DS_TRY(cpu_isa_parse(bo.isa, &isa));
    const qk_kernels *qk = qk_kernels_for(isa);
    double peak1 = measure_peak(qk, 1), peak = measure_peak(qk, nt), macs = matmul_macs(m);
    int n_logical, n_cores;
    cpu_topology(&n_logical, &n_cores);
    /* an accelerator's floor is its own memory's bandwidth */
    double bw = t.be->bandwidth ? t.be->bandwidth(t.be) : measure_bandwidth(nt, (size_t)1 << 30);
    double bytes = decode_bytes(m, ctx);
    printf("roof: int8 peak %.1f G MAC/s on %d threads, %.1f on 1 (%s, registers only; %.2fx with %d threads);"
           " %d logical CPUs on %d physical cores (as the OS sees them)\n",
           peak, nt, peak1, qk->peak_what, peak / peak1, nt, n_logical, n_cores);
    if (t.be->device) printf("device memory read bandwidth: %.1f GB/s (%s; the int8 roof above is the host CPU's)\n", bw,
                             t.be->device);
    else printf("memory read bandwidth: %.1f GB/s (%d threads)\n", bw, nt);
    int on_cpu = !t.be->device;
    char share[32];
    printf("decode reads %.1f MB per token -> bandwidth floor %.2f ms/token (%.0f tok/s); %.1f M MAC per token",
           bytes / 1e6, 1e3 * bytes / (bw * 1e9), bw * 1e9 / bytes, macs / 1e6);
    if (on_cpu) printf(" -> int8 compute floor %.2f ms/token", 1e3 * macs / (peak * 1e9));
    printf("\n");
    cJSON *jroof = cJSON_AddObjectToObject(root, "roof");
    cJSON_AddNumberToObject(jroof, "int8_GMACps", peak);
    cJSON_AddNumberToObject(jroof, "int8_GMACps_1thread", peak1);
    cJSON_AddStringToObject(jroof, "instruction", qk->peak_what);
    cJSON_AddNumberToObject(jroof, "logical_cpus", n_logical);
    cJSON_AddNumberToObject(jroof, "physical_cores", n_cores);
    cJSON_AddNumberToObject(jroof, "bandwidth_GBps", bw);
    cJSON_AddNumberToObject(root, "matmul_macs_per_token", macs);
    if (roof_only) goto write;

    cJSON_AddStringToObject(root, "cpu", cpu);
    cJSON_AddNumberToObject(root, "threads", nt);
    cJSON_AddStringToObject(root, "model", model_path);
    cJSON_AddStringToObject(root, "fingerprint", m->fingerprint);
    cJSON_AddStringToObject(root, "backend", t.be->name);
    if (t.be->device) cJSON_AddStringToObject(root, "device", t.be->device);
    if (synth) cJSON_AddStringToObject(root, "synthetic", synth);
    cJSON_AddStringToObject(root, "kernels", t.be->kernels);
    cJSON_AddBoolToObject(root, "exact", t.be->exact);
    cJSON_AddNumberToObject(root, "gemm_min_T", t.be->gemm_min_T);
    cJSON_AddNumberToObject(root, "bandwidth_GBps", bw);
    cJSON_AddNumberToObject(root, "decode_bytes_per_token", bytes);
    cJSON_AddNumberToObject(root, "decode_floor_ms", 1e3 * bytes / (bw * 1e9));

    /* prefill from an empty cache */
    cJSON *pf = cJSON_AddObjectToObject(root, "prefill_tok_s");
    int pf_n[2] = {128, 512};
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < reps; r++) {
            kv_cache_crop(kv, 0);
            double t0 = ds_now();
            DS_TRY(model_forward_one(m, &t.fs, kv, toks, pf_n[k], 0, logits));
            tm[r] = ds_now() - t0;
        }
        double med = median(tm, reps);
        printf("prefill %4d tokens: %8.1f tok/s  (%.1f ms; %.1f G MAC/s, %s of the int8 roof)\n", pf_n[k],
               pf_n[k] / med, 1e3 * med, pf_n[k] * macs / med / 1e9,
               roof_share(share, sizeof share, pf_n[k] * macs / med / 1e9, peak, on_cpu));
        char key[16];
        snprintf(key, sizeof key, "%d", pf_n[k]);
        cJSON_AddNumberToObject(pf, key, pf_n[k] / med);
    }

    /* autoregressive decode after a context of ctx tokens */
    for (int r = 0; r < reps; r++) {
        kv_cache_crop(kv, 0);
        DS_TRY(model_forward_one(m, &t.fs, kv, toks, ctx, 0, logits));
        int tok = toks[ctx];
        double t0 = ds_now();
        for (int i = 0; i < decode_n; i++) {
            DS_TRY(model_forward_one(m, &t.fs, kv, &tok, 1, 0, logits));
            tok = argmax_f32(logits, V);
        }
        tm[r] = ds_now() - t0;
    }
    double dmed = median(tm, reps);
    printf("decode (context %d, %d tokens): %.1f tok/s  (%.2f ms/token, %.2fx the bandwidth floor, %s of the int8"
           " roof)\n", ctx, decode_n, decode_n / dmed, 1e3 * dmed / decode_n, (dmed / decode_n) / (bytes / (bw * 1e9)),
           roof_share(share, sizeof share, decode_n * macs / dmed / 1e9, peak, on_cpu));
    cJSON_AddNumberToObject(root, "decode_tok_s", decode_n / dmed);
    cJSON_AddNumberToObject(root, "decode_context", ctx);

    /* SPS(B): one forward of B tokens (logits for all, as verification needs) after ctx tokens */
    sps = cJSON_AddObjectToObject(root, "sps");
    cJSON_AddNumberToObject(sps, "context", ctx);
    cJSON *jb = cJSON_AddArrayToObject(sps, "B"), *js = cJSON_AddArrayToObject(sps, "seconds"),
          *jr = cJSON_AddArrayToObject(sps, "steps_per_s");
    printf("\nSPS(B): one forward of B tokens after %d of context (what verifying B-1 drafts + the bonus costs)\n", ctx);
    printf("%6s %10s %12s %12s %14s %10s %8s\n", "B", "ms", "steps/s", "tokens/s", "cost(B)/cost(1)", "G MAC/s",
           "of roof");
    /* each point the median of its repetitions (sps_times) */
    int nb = 0;
    for (int B = 1; B <= max_b; B *= 2) nb++;
    DS_TRYP(tmb = ds_malloc(sizeof(double) * (size_t)nb * (size_t)reps, "timings"));
    DS_TRYP(med1 = ds_malloc(sizeof(double) * (size_t)nb, "timings"));
    DS_TRY(sps_times(&t, kv, toks, logits, ctx, nb, reps, tmb, &rng));
    double cost1 = 0;
    for (int i = 0; i < nb; i++) {
        int B = 1 << i;
        double med = med1[i] = median(tmb + (size_t)i * reps, reps);
        if (B == 1) cost1 = med;
        printf("%6d %10.2f %12.1f %12.1f %14.2f %10.1f %8s\n", B, 1e3 * med, 1 / med, B / med, med / cost1,
               B * macs / med / 1e9, roof_share(share, sizeof share, B * macs / med / 1e9, peak, on_cpu));
        cJSON_AddItemToArray(jb, cJSON_CreateNumber(B));
        cJSON_AddItemToArray(js, cJSON_CreateNumber(med));
        cJSON_AddItemToArray(jr, cJSON_CreateNumber(1 / med));
    }
    if (ctx2 > ctx) {
        /* the same points after ctx2 positions: what attention over a longer context adds. Per B, the
         * extra time per position is fitted as a + b B (least squares): a request's cache is read once
         * a forward whatever its B (a), each token's scores and P V grow with it (b) */
        DS_TRY(sps_times(&t, kv, toks, logits, ctx2, nb, reps, tmb, &rng));
        cJSON *js2 = cJSON_AddArrayToObject(sps, "seconds2");
        double sx = 0, sy = 0, sxx = 0, sxy = 0, med2 = 0;
        printf("\nthe same after %d of context (cost(B)/cost(1)): ", ctx2);
        for (int i = 0; i < nb; i++) {
            double med = median(tmb + (size_t)i * reps, reps), x = 1 << i, y = (med - med1[i]) / (ctx2 - ctx);
            if (i == 0) med2 = med;
            printf("%sB=%d %.2f ms (%.2f)", i ? ", " : "", 1 << i, 1e3 * med, med / med2);
            cJSON_AddItemToArray(js2, cJSON_CreateNumber(med));
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        double b = nb > 1 ? (nb * sxy - sx * sy) / (nb * sxx - sx * sx) : 0, a = (sy - b * sx) / nb;
        printf("\neach position of context past %d adds %.2f us a forward + %.2f us a token\n", ctx, 1e6 * a, 1e6 * b);
        cJSON_AddNumberToObject(sps, "context2", ctx2);
    }
write:
    if (out_path) {
        DS_TRY(ds_write_json(root, out_path));
        fprintf(stderr, "wrote %s\n", out_path);
    }
    rc = 0;
    goto done;
fail:
    rc = -1;
done:
    cJSON_Delete(root);
    free(tm);
    free(tmb);
    free(med1);
    free(toks);
    free(logits);
    if (kv) kv_cache_free(t.be, kv);
    target_close(&t);
    return rc;
}
