/* kernels_cuda.h — the CUDA kernels behind backend_cuda.c, with a plain C interface (the .cu file
 * is the only C++ in the project; the backend, its tests and the rest stay C).
 *
 * Every pointer named *_dev or handed over as an activation is device memory; a weight is the
 * device copy of the file's blocks (F32, F16, BF16, Q4_0, Q4_1, Q8_0 are read as they are; other
 * types are decoded to F32 at upload). All launches go to one stream (kc_set_stream: the legacy
 * default stream, or a blocking stream the backend records graphs for), so ops run in call order
 * and a device-to-host copy on the legacy stream waits for them. Each function returns 0, or -1 after a
 * launch error (kc_last_error() says which). */
#ifndef DS_KERNELS_CUDA_H
#define DS_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Up to this many tokens, the per-token tables of kv_write and attention travel as a kernel
 * argument (no copy, no synchronisation); more tokens copy them to device scratch first. */
#define KC_TAB_MAX 32
#define KC_TOK_MAX 64    /* token ids for embed, likewise */
#define KC_ROPE_MAX 256  /* T * head_dim/2 entries of the rope tables, likewise */
#define KC_MAX_HEAD_DIM 256

typedef struct { float *k, *v; } kc_kvdst;                      /* where a token's K and V rows go */
/* the cache rows a token attends over; in a draft tree's round (bf16 attention only) the slots from
 * tree0 on are visible only where bit (slot - tree0) of anc is set (its ancestors and itself);
 * tree0 = INT_MAX: no mask */
#define KC_TREE_SLOTS 128
typedef struct {
    const float *k, *v;
    int n_vis, ld, tree0;
    unsigned anc[KC_TREE_SLOTS / 32];
} kc_kvsrc;

const char *kc_last_error(void);
/* the stream kernels are launched on (a cudaStream_t; NULL: the legacy default stream) */
void kc_set_stream(void *stream);
/* Recording: between kc_record_begin and kc_record_end every launch is kept instead of issued, and
 * run at kc_record_flush / kc_record_end (run != 0): as a CUDA graph made from the same kernels and
 * launch shapes the second time they are seen (its nodes' arguments updated where they changed), else
 * one launch at a time. Anything that reads or replaces device memory from the host (a copy, a free,
 * cuBLAS) must flush first. Graphs are shared by every backend of the process. */
void kc_record_begin(void);
int kc_recording(void);
int kc_record_flush(void);
int kc_record_end(int run);
void kc_graphs_free(void);
enum { KC_GRAPH_RUNS, KC_GRAPH_UPDATES, KC_GRAPH_BUILDS, KC_GRAPH_EAGER, KC_GRAPH_NSTAT };
/* graphs run, nodes updated, graphs made, recorded stretches launched one kernel at a time */
void kc_graph_stats(long *out);
/* 1 if the type is read on the device as stored */
int kc_type_native(uint32_t type);

/* tok: T host ids; tok_dev: a device copy of them, needed only when T > KC_TOK_MAX */
int kc_embed(float *out, const void *emb, uint32_t type, size_t row_bytes, int cols, const int *tok, const int *tok_dev,
             int T);
int kc_rmsnorm(float *out, const float *x, const float *w, int n_rows, int C, float eps);
/* out[T][rows] = x[T][cols] . W^T, one warp per row, T tokens in tiles of 8 (each output summed in
 * the same order whatever T: small batches are batch-invariant) */
int kc_matvec(float *out, const void *W, uint32_t type, size_t row_bytes, int rows, int cols, const float *x, int T);
/* one matrix of a set that shares its input (device pointers) */
typedef struct {
    const void *W;
    float *out;
    size_t row_bytes;
    int rows;
} kc_mat;
#define KC_MV_SET 8
/* kc_matvec for n <= KC_MV_SET matrices of one type sharing x, in one launch (each output the same
 * sums as kc_matvec's); the matrices must be whole blocks on their type's alignment, x on 16 bytes.
 * add: out += the product (the same rounding as kc_add after kc_matvec) */
int kc_matvec_set(const kc_mat *mats, int n, uint32_t type, int cols, const float *x, int T, int add);
/* 1 if kc_matvec_set takes this matrix */
int kc_matvec_set_ok(const void *W, uint32_t type, size_t row_bytes, int cols, const float *x);
/* dst[rows][cols] = W in fp32 (for cuBLAS GEMMs on large batches) */
int kc_dequant(float *dst, const void *W, uint32_t type, size_t row_bytes, int rows, int cols);
/* the tables from the host when T * hd/2 <= KC_ROPE_MAX, else from their device copies */
int kc_rope(float *x, int T, int n_heads, int hd, int neox, const float *cos, const float *sin, const float *cos_dev,
            const float *sin_dev);
/* tab: T host entries; tab_dev: device scratch of T entries, used when T > KC_TAB_MAX; bf16: the
 * cache holds bf16 (the rows' pointers address uint16_t elements), rounded as ds_f32_to_bf16 */
int kc_kv_write(const kc_kvdst *tab, kc_kvdst *tab_dev, int T, int d, const float *k, const float *v, int bf16);
/* softmax(q k^T * scale) v per (token, head); scores: device scratch [T*n_heads][stride]. bf16: over a
 * bf16 cache (ld in elements) with the CPU's operations in its order (kernels_cpu.h attend_multi_bf16:
 * its attention dot, qk_softmax's exp and double lanes, P V by fused multiply-adds in order of
 * position), so the result is the CPU's bit for bit */
int kc_attention(float *out, const float *q, const kc_kvsrc *tab, kc_kvsrc *tab_dev, int T, int n_heads,
                 int n_kv_heads, int hd, float scale, float *scores, size_t stride, int bf16);
int kc_swiglu(float *out, const float *g, const float *u, size_t n);
int kc_add(float *x, const float *y, size_t n);
/* x[r][c] += b[c] for n_rows rows of width C */
int kc_add_bias(float *x, const float *b, int n_rows, int C);
/* The int8 contract of kernels_cpu.h for quantized matrices (kernels_cuda_i8.cu): bit for bit the
 * CPU's. A matrix is qk_pack's QK_DEVICE form on the device: codes (rows x nb blocks) then scales
 * (srb bytes a row); kind is its qk_kind (Q5_0 packed as Q8_0). */
enum { KC_I8_Q8_0 = 0, KC_I8_Q4_1 = 1, KC_I8_Q4_K = 2, KC_I8_Q6_K = 3 }; /* qk_kind's values */
typedef struct {
    const uint8_t *codes, *scales;
    size_t srb;
    float *out;
    int rows;
} kc_i8mat;
/* x[T][cols] quantized per token and block of 32 (qk_quantize_rows): q [T][cols], e and s [T][cols/32] */
int kc_quantize(const float *x, int T, int cols, int8_t *q, float *e, float *s);
/* out[T][rows] (+)= the int8 contract's product, for n <= KC_MV_SET matrices of one kind sharing x's
 * quantization q, e, s (kc_quantize) */
int kc_matvec_i8(const kc_i8mat *mats, int n, int kind, int cols, const int8_t *q, const float *e, const float *s,
                 int T, int add);
/* tests: 1 sums the epilogue's lanes in another order (a mutant the bitwise checks must catch) */
void kc_i8_mutant(int on);
/* timing models: random codes and small finite scales for a QK_DEVICE matrix */
int kc_fill_i8(void *codes, size_t code_bytes, void *scales, size_t scale_bytes, uint64_t seed);
/* n bytes device to device on the kernels' stream (a kernel while recording) */
int kc_copy(void *dst, const void *src, size_t n);
/* n bytes of random but valid blocks of the type (scales small and finite): timing models */
int kc_fill_random(void *dst, uint32_t type, size_t row_bytes, int rows, int cols, uint64_t seed);
/* device read bandwidth in GB/s: best of a few reads of a buffer of `bytes` */
double kc_bandwidth(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
