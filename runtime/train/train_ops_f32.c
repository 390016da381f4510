/* train_ops_f32.c — the training ops in float (what drafters train with). */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "train_ops.h"

#include <tgmath.h>

#define REAL float
#define FN(name) name##_f

void openblas_set_num_threads(int); /* OpenBLAS extension */

/* OpenBLAS single-threaded, set here rather than assumed: the CPU backend sets it when it is made,
 * but `train --backend cuda` makes none, which leaves OpenBLAS's own pool (all cores) called from
 * every OpenMP thread at once (a 16-core GPU host's first training step took over 100 s so) */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single(void) { openblas_set_num_threads(1); }

/* OpenBLAS stays single-threaded (the attention GEMMs run inside our parallel loops, where a
 * threaded OpenBLAS only adds a second pool spinning in sched_yield); a GEMM called outside a
 * parallel region is split here over the OpenMP threads by rows or columns of C, each part one
 * single-threaded call. */
static void train_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    pthread_once(&blas_once, blas_single);
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || order != CblasRowMajor || (double)M * N * K < 1 << 20) {
        cblas_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int by_rows = M >= N, n = by_rows ? M : N, chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int len = n - i0 < chunk ? n - i0 : chunk;
        if (by_rows) /* row i of op(A): row i of A, or its column i */
            cblas_sgemm(order, ta, tb, len, N, K, alpha, A + (size_t)i0 * (ta == CblasNoTrans ? lda : 1), lda, B, ldb,
                        beta, C + (size_t)i0 * ldc, ldc);
        else /* column j of op(B): column j of B, or its row j */
            cblas_sgemm(order, ta, tb, M, len, K, alpha, A, lda, B + (size_t)i0 * (tb == CblasNoTrans ? 1 : ldb), ldb,
                        beta, C + i0, ldc);
    }
}

#define GEMM train_sgemm
#include "train_ops.inc"
