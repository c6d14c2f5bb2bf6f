/* CPU kernel: row-major single-precision matrix product through CBLAS
 * (OpenBLAS), with the argument checks CBLAS itself would only print.
 *
 * Threading: the CPU backend threads through OpenMP only. A pthread build of
 * OpenBLAS keeps its own worker threads, and on a small machine they and
 * OpenMP's (which spin after every parallel region) fight for the cores: an
 * im2col region followed by a threaded sgemm ran three times slower on two
 * cores than either alone. So the first gemm makes a pthread OpenBLAS
 * single-threaded (a process-wide setting) and large products are split into
 * column (or row) blocks, one sequential sgemm per OpenMP thread, which is as
 * fast as OpenBLAS's own threading; inside a parallel region (a kernel that
 * splits its own work across threads) every product runs on its thread. */
#include "config.h"

#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/pd_cpu.h"

/* Products below this many multiply-adds run on the calling thread. */
#define GEMM_PARALLEL_MIN ((int64_t)1 << 19)
/* Block boundaries are multiples of this, to keep OpenBLAS's kernels on full panels. */
#define GEMM_BLOCK_ALIGN 16

static atomic_flag blas_threads_set = ATOMIC_FLAG_INIT;

static void blas_single_threaded(void)
{
#ifdef OPENBLAS_VERSION
    if (!atomic_flag_test_and_set(&blas_threads_set) && openblas_get_parallel() == 1)
        openblas_set_num_threads(1);
#else
    (void)blas_threads_set;
#endif
}

/* CBLAS takes int dimensions (OpenBLAS's default 32-bit blasint): checked by
 * pd_kernel_check_gemm. */
static void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
                (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* How many blocks to split `extent` rows or columns into. */
static int gemm_blocks(int64_t m, int64_t n, int64_t k, int64_t extent)
{
    int64_t blocks = 1;

#ifdef _OPENMP
    if (m * n * k >= GEMM_PARALLEL_MIN && !omp_in_parallel())
        blocks = omp_get_max_threads();
#endif
    if (blocks > extent / GEMM_BLOCK_ALIGN)
        blocks = extent / GEMM_BLOCK_ALIGN;
    return blocks > 1 ? (int)blocks : 1;
}

void pd_cpu_gemm_checked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    bool split_columns = n >= m;
    int64_t extent = split_columns ? n : m;
    int blocks = gemm_blocks(m, n, k, extent);

    if (blocks == 1) {
        sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#pragma omp parallel for schedule(static, 1) num_threads(blocks)
    for (int t = 0; t < blocks; t++) {
        int64_t lo = extent * t / blocks / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;
        int64_t hi = t == blocks - 1 ? extent : extent * (t + 1) / blocks / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN;

        if (hi <= lo)
            continue;
        if (split_columns) /* C[:, lo:hi] = op(A) op(B)[:, lo:hi] */
            sgemm(trans_a, trans_b, m, hi - lo, k, alpha, a, lda, b + (trans_b ? lo * ldb : lo), ldb, beta, c + lo,
                  ldc);
        else /* C[lo:hi, :] = op(A)[lo:hi, :] op(B) */
            sgemm(trans_a, trans_b, hi - lo, n, k, alpha, a + (trans_a ? lo : lo * lda), lda, b, ldb, beta,
                  c + lo * ldc, ldc);
    }
}

pd_status pd_cpu_gemm_prepare(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                              const float *b, int64_t ldb, const float *c, int64_t ldc, bool *empty)
{
    PD_CHECK(pd_kernel_check_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, empty));
    blas_single_threaded();
    return PD_OK;
}

pd_status pd_cpu_gemm(pd_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    bool empty;

    PD_CHECK(pd_cpu_gemm_prepare(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, &empty));
    if (empty)
        return PD_OK;
    if (k == 0 || alpha == 0.0f) {
        /* No product term: C = beta * C, and beta == 0 clears NaN garbage. */
        for (int64_t i = 0; i < m; i++) {
            float *row = c + i * ldc;
            if (beta == 0.0f)
                memset(row, 0, (size_t)n * sizeof(float));
            else if (beta != 1.0f)
                for (int64_t j = 0; j < n; j++)
                    row[j] *= beta;
        }
        return PD_OK;
    }
    pd_cpu_gemm_checked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return PD_OK;
}
