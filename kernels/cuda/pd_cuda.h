/* The CUDA backend (module-private): the device state, the checks that turn
 * CUDA and cuBLAS failures into a pd_status with a message and file:line, and
 * the kernel launchers the .cu files implement. Included by the C host code
 * (gcc) and the .cu files (nvcc) alike, so it stays plain C. Every includer
 * includes "config.h" first: the state's layout depends on HAVE_CUBLAS and
 * HAVE_CUDNN. */
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
#ifdef HAVE_CUDNN
#include <cudnn.h>
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

struct pd_caching_alloc;

/* The state behind pd_device.backend for a CUDA device. Everything runs on
 * one non-blocking stream; the scratch buffer grows and is never shrunk.
 * Device memory comes from a caching allocator (kernels/pd_caching_alloc.h),
 * whose blocks are safe to reuse in stream order. */
typedef struct pd_cuda_state {
    int ordinal;
    pd_cuda_launch launch;
#ifdef HAVE_CUBLAS
    cublasHandle_t cublas; /* bound to launch.stream */
#endif
    struct pd_caching_alloc *memory; /* tensors and scratch */
    void *scratch;
    size_t scratch_bytes;
    /* --precision tf32 or bf16 (set_precision): cuBLAS in
     * CUBLAS_TF32_TENSOR_OP_MATH, and convolutions may pick TF32 tensor-core
     * math; false: strict f32. */
    bool allow_tf32;
#ifdef HAVE_CUDNN
    cudnnHandle_t cudnn;                   /* bound to launch.stream (cudnn_util.c) */
    size_t cudnn_workspace_limit;          /* bytes a convolution algorithm may use */
    struct pd_cudnn_conv_plan *conv_plans; /* descriptors and algorithms per shape (conv.c) */
#endif
    /* GPUDirect RDMA writes into this GPU (rdma_flush.c, read at open):
     * the device's ordering attribute and what flush_rdma_writes does. */
    int rdma_ordering;
    enum { PD_CUDA_RDMA_ORDERED, PD_CUDA_RDMA_FLUSH, PD_CUDA_RDMA_UNORDERED } rdma_flush;
} pd_cuda_state;

/* Makes the device current on the calling thread and returns its state
 * (PD_EDEVICE if the runtime refuses). */
pd_status pd_cuda_enter(pd_device *dev, pd_cuda_state **out);

/* Returns device scratch memory of at least `bytes` (256-byte aligned), owned
 * by the device and reused by every kernel, so no kernel may hold it across
 * another's call. Growing returns the old block to the device's cache, where
 * only work queued later on the stream can get it: no wait. */
pd_status pd_cuda_scratch(pd_device *dev, size_t bytes, void **out);

/* The export_dmabuf entry (dmabuf.c): a dma_buf descriptor for device
 * memory, the driver's functions taken at run time (no libcuda link). */
pd_status pd_cuda_export_dmabuf(pd_device *dev, const void *ptr, size_t bytes, int *fd, uint64_t *offset);

/* The IPC entries (ipc.c): a handle for a block of mem->alloc, mapping and
 * unmapping another process's handle (kernels.h, ipc_export). */
pd_status pd_cuda_ipc_export(pd_device *dev, void *ptr, uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES]);
pd_status pd_cuda_ipc_open(pd_device *dev, const uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES], void **ptr);
void pd_cuda_ipc_close(pd_device *dev, void *ptr);

/* GPUDirect RDMA visibility (rdma_flush.c): reads the device's ordering of
 * RDMA writes into st (at open, the device current; never fails: a driver
 * that cannot say counts as unordered); the flush_rdma_writes entry. */
void pd_cuda_rdma_flush_probe(pd_cuda_state *st);
pd_status pd_cuda_flush_rdma_writes(pd_device *dev);

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

/* ---- layer entries in our own kernels: linear.c (cuBLAS through the gemm
 * entry) and bias.cu, loss.cu, concat.cu, embedding.cu, lstm_cell.cu ----
 * Each computes the function of the CPU entry of the same name
 * (kernels/cpu/), checks its arguments with the shared pd_kernel_check_*
 * and pd_cuda_expect_on_gpu, and queues its work on the device's stream.
 * Reductions add in a fixed order (no floating-point atomics), so a result
 * depends only on the input and its shape, never on the GPU or the run. */

/* PD_EINVAL naming "<entry> <names[i]>" for the first of the n tensors that
 * belongs to another device than a GPU (a host pointer would fault the
 * stream); NULL entries and views without a device pass. */
static inline pd_status pd_cuda_expect_on_gpu(const char *entry, int n, const pd_tensor *const *tensors,
                                              const char *const *names)
{
    for (int i = 0; i < n; i++)
        if (tensors[i] && tensors[i]->device && tensors[i]->device->kind != PD_DEVICE_CUDA)
            return pd_error_at(__FILE__, __LINE__, PD_EINVAL, "%s %s: tensor is on %s, not on a CUDA device", entry,
                               names[i], tensors[i]->device->name);
    return PD_OK;
}

pd_status pd_cuda_linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                 pd_tensor *y);
pd_status pd_cuda_linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                  pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias);
pd_status pd_cuda_softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                                pd_tensor *probs, pd_tensor *loss);
pd_status pd_cuda_softmax_cross_entropy_backward(pd_device *dev, const pd_tensor *probs, const pd_tensor *labels,
                                                 float dloss, pd_tensor *dlogits);
pd_status pd_cuda_concat_forward(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y);
pd_status pd_cuda_concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs);
pd_status pd_cuda_embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y);
pd_status pd_cuda_embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable);
pd_status pd_cuda_lstm_cell_forward(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev, pd_tensor *act,
                                    pd_tensor *c, pd_tensor *h);
pd_status pd_cuda_lstm_cell_backward(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev,
                                     const pd_tensor *c, const pd_tensor *dh, const pd_tensor *dc,
                                     pd_tensor *dgates, pd_tensor *dc_prev);

/* bias.cu: y[i, j] += bias[j] over a rows x cols matrix, rounded as the
 * CPU's gemm with beta = 1 onto the bias (product first, then the bias). */
pd_status pd_cuda_launch_bias_add(const pd_cuda_launch *launch, float *y, const float *bias, int64_t rows,
                                  int64_t cols);
/* Bytes of scratch pd_cuda_launch_column_sum needs for rows x cols (0 when
 * one pass suffices). */
size_t pd_cuda_column_sum_scratch(int64_t rows, int64_t cols);
/* out[j] = sum over i of x[i, j] (a bias gradient), added in double and
 * rounded once, in a fixed order: chunks of rows (their number a function
 * of `rows` only) summed per column, then the chunks in order. */
pd_status pd_cuda_launch_column_sum(const pd_cuda_launch *launch, const float *x, int64_t rows, int64_t cols,
                                    double *partials, float *out);

/* Scratch bytes that pd_cuda_first_outside keeps for itself. */
#define PD_CUDA_INDEX_SCRATCH 256

/* index_check.cu: *first = the smallest position p < n with ids[p] (device
 * memory) outside [0, limit), *value = ids[p]; *first = n if there is none.
 * Reserves the device's scratch for PD_CUDA_INDEX_SCRATCH + extra bytes
 * and returns it in *scratch: the caller's part starts at
 * PD_CUDA_INDEX_SCRATCH. Synchronous: waits for the stream. */
pd_status pd_cuda_first_outside(pd_device *dev, const int32_t *ids, int64_t n, int64_t limit, size_t extra,
                                void **scratch, int64_t *first, int32_t *value);

#ifdef __cplusplus
}
#endif
#endif
