/* The CUDA backend (module-private): the device state, the checks that turn
 * CUDA and cuBLAS failures into a pd_status with a message and file:line, and
 * the kernel launchers the .cu files implement. Included by the C host code
 * (gcc) and the .cu files (nvcc) alike, so it stays plain C. Every includer
 * includes "config.h" first: the state's layout depends on HAVE_CUBLAS. */
#ifndef PD_CUDA_H
#define PD_CUDA_H

#ifndef HAVE_CUDA
#error "include config.h (of a build configured with CUDA) before kernels/cuda/pd_cuda.h"
#endif

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#ifdef HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <pipedream/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every grid-stride kernel. */
#define PD_CUDA_BLOCK 256

/* Most blocks of the first pass of a sum, hence the doubles of scratch it
 * needs; fixed (not derived from the device) so a sum of n elements adds in
 * the same order on every GPU. */
#define PD_CUDA_SUM_BLOCKS 1024

/* Where and how wide a kernel launches: the device's stream, and the most
 * blocks of PD_CUDA_BLOCK threads the device holds at once (a grid-stride
 * loop gains nothing from more). */
typedef struct pd_cuda_launch {
    cudaStream_t stream;
    int max_blocks;
} pd_cuda_launch;

/* The state behind pd_device.backend for a CUDA device. Everything runs on
 * one non-blocking stream; the scratch buffer grows and is never shrunk. */
typedef struct pd_cuda_state {
    int ordinal;
    pd_cuda_launch launch;
#ifdef HAVE_CUBLAS
    cublasHandle_t cublas; /* bound to launch.stream */
#endif
    void *scratch;
    size_t scratch_bytes;
} pd_cuda_state;

/* Makes the device current on the calling thread and returns its state
 * (PD_EDEVICE if the runtime refuses). */
pd_status pd_cuda_enter(pd_device *dev, pd_cuda_state **out);

/* Returns device scratch memory of at least `bytes` (256-byte aligned), owned
 * by the device and reused by every kernel, so no kernel may hold it across
 * another's call. Growing waits for the stream before freeing the old one. */
pd_status pd_cuda_scratch(pd_device *dev, size_t bytes, void **out);

/* Records "<call> failed: <CUDA's message> (<error name>)" at file:line:
 * PD_ENOMEM for an allocation failure, PD_EDEVICE for anything else. It
 * also clears the runtime's last error, so that a handled failure (say, an
 * allocation) is not reported again by the next launch check. */
static inline pd_status pd_cuda_error_at(const char *file, int line, const char *call, cudaError_t err)
{
    (void)cudaGetLastError();
    return pd_error_at(file, line, err == cudaErrorMemoryAllocation ? PD_ENOMEM : PD_EDEVICE, "%s failed: %s (%s)",
                       call, cudaGetErrorString(err), cudaGetErrorName(err));
}

/* Evaluates a CUDA runtime call and returns its failure as a pd_status. */
#define PD_CUDA_CHECK(call)                                                \
    do {                                                                   \
        cudaError_t pd_cuda_e_ = (call);                                   \
        if (pd_cuda_e_ != cudaSuccess)                                     \
            return pd_cuda_error_at(__FILE__, __LINE__, #call, pd_cuda_e_); \
    } while (0)

/* Like PD_CUDA_CHECK, but stores the status in `var` and jumps to `label`. */
#define PD_CUDA_CHECK_GOTO(call, var, label)                                  \
    do {                                                                      \
        cudaError_t pd_cuda_e_ = (call);                                      \
        if (pd_cuda_e_ != cudaSuccess) {                                      \
            (var) = pd_cuda_error_at(__FILE__, __LINE__, #call, pd_cuda_e_); \
            goto label;                                                       \
        }                                                                     \
    } while (0)

/* After a <<<...>>> launch: a bad configuration (or an earlier asynchronous
 * fault) surfaces here as "<what> failed: ...", `what` naming the kernel. */
#define PD_CUDA_CHECK_LAUNCH(what)                                            \
    do {                                                                      \
        cudaError_t pd_cuda_e_ = cudaGetLastError();                          \
        if (pd_cuda_e_ != cudaSuccess)                                        \
            return pd_cuda_error_at(__FILE__, __LINE__, (what), pd_cuda_e_); \
    } while (0)

/* Blocks for `items` one-per-thread work items of a grid-stride kernel:
 * at least one, at most what the device holds at once. */
static inline unsigned pd_cuda_grid(const pd_cuda_launch *launch, int64_t items)
{
    int64_t blocks = (items + PD_CUDA_BLOCK - 1) / PD_CUDA_BLOCK;

    if (blocks > launch->max_blocks)
        blocks = launch->max_blocks;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

/* True if p may be accessed as float4 (16-byte aligned); NULL is. */
static inline int pd_cuda_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#ifdef HAVE_CUBLAS
/* Records "<call> failed: <cuBLAS's message> (<status name>)" at file:line. */
static inline pd_status pd_cublas_error_at(const char *file, int line, const char *call, cublasStatus_t st)
{
    return pd_error_at(file, line, st == CUBLAS_STATUS_ALLOC_FAILED ? PD_ENOMEM : PD_EDEVICE, "%s failed: %s (%s)",
                       call, cublasGetStatusString(st), cublasGetStatusName(st));
}

/* Evaluates a cuBLAS call and returns its failure as a pd_status. */
#define PD_CUBLAS_CHECK(call)                                                 \
    do {                                                                      \
        cublasStatus_t pd_cublas_s_ = (call);                                 \
        if (pd_cublas_s_ != CUBLAS_STATUS_SUCCESS)                            \
            return pd_cublas_error_at(__FILE__, __LINE__, #call, pd_cublas_s_); \
    } while (0)

/* Like PD_CUBLAS_CHECK, but stores the status in `var` and jumps to `label`. */
#define PD_CUBLAS_CHECK_GOTO(call, var, label)                                   \
    do {                                                                         \
        cublasStatus_t pd_cublas_s_ = (call);                                    \
        if (pd_cublas_s_ != CUBLAS_STATUS_SUCCESS) {                             \
            (var) = pd_cublas_error_at(__FILE__, __LINE__, #call, pd_cublas_s_); \
            goto label;                                                          \
        }                                                                        \
    } while (0)
#endif

/* Launchers (elementwise.cu, optimizer.cu): asynchronous on launch->stream,
 * device pointers of n contiguous elements, arguments already validated by
 * the caller; each returns a launch failure as a pd_status. Element-wise
 * arithmetic is rounded step by step exactly as the CPU kernels write it (no
 * fused multiply-add), so both backends agree bit for bit. */

/* y[i] = value. */
pd_status pd_cuda_launch_fill(const pd_cuda_launch *launch, float *y, int64_t n, float value);
/* y[i] = alpha * x[i] + beta * y[i]; y is not read when beta == 0 (NaN
 * garbage in it must not leak through 0 * NaN). */
pd_status pd_cuda_launch_axpby(const pd_cuda_launch *launch, float alpha, const float *x, float beta, float *y,
                               int64_t n);
/* y[i] = a[i] + b[i]. */
pd_status pd_cuda_launch_add(const pd_cuda_launch *launch, const float *a, const float *b, float *y, int64_t n);
/* y = x converted element-wise as pd_dtype_convert() does (distinct dtypes). */
pd_status pd_cuda_launch_convert(const pd_cuda_launch *launch, pd_dtype x_dtype, const void *x, pd_dtype y_dtype,
                                 void *y, int64_t n);
/* *out = sum of x in double precision, rounded once to float; `partials`
 * is scratch for PD_CUDA_SUM_BLOCKS doubles. Deterministic for a given n. */
pd_status pd_cuda_launch_sum(const pd_cuda_launch *launch, const float *x, int64_t n, double *partials, float *out);
/* C[i, j] = beta * C[i, j] for a rows x cols matrix of row stride ld (the
 * gemm without a product term); beta == 0 writes zeros without reading. */
pd_status pd_cuda_launch_scale_matrix(const pd_cuda_launch *launch, float *c, int64_t rows, int64_t cols, int64_t ld,
                                      float beta);
/* y[i] = max(x[i], 0). */
pd_status pd_cuda_launch_relu_forward(const pd_cuda_launch *launch, const float *x, float *y, int64_t n);
/* dx[i] = y[i] > 0 ? dy[i] : 0. */
pd_status pd_cuda_launch_relu_backward(const pd_cuda_launch *launch, const float *y, const float *dy, float *dx,
                                       int64_t n);
/* y[i] = pd_rng_uniform(seed, i) >= p ? x[i] * (1/(1-p)) : 0, for p in
 * (0,1): the same mask in the forward and the backward pass. */
pd_status pd_cuda_launch_dropout(const pd_cuda_launch *launch, float p, uint64_t seed, const float *x, float *y,
                                 int64_t n);

/* One torch.optim.SGD step in place (desc validated; momentum_buf is read
 * and written only when desc->momentum != 0). */
pd_status pd_cuda_launch_sgd(const pd_cuda_launch *launch, const pd_sgd_desc *desc, float *w, const float *g,
                             float *momentum_buf, int64_t n);
/* One torch.optim.Adam / AdamW step in place (desc validated, step >= 1). */
pd_status pd_cuda_launch_adam(const pd_cuda_launch *launch, const pd_adam_desc *desc, float *w, const float *g,
                              float *m, float *v, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
