/* The CUDA backend: opening a GPU (stream, cuBLAS handle), its memory (a
 * caching allocator over cudaMalloc, pinned host memory), the scratch
 * buffer, events, precision and the entry table. Each entry validates its
 * arguments with the checks every backend shares, then queues its work on
 * the device's stream: cuBLAS for gemm, elementwise.cu and optimizer.cu for
 * the rest. */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <pipedream/log.h>

#include "kernels/cuda/pd_cuda.h"
#include "kernels/cuda/pd_cuda_nn.h"
#include "kernels/pd_caching_alloc.h"
#include "kernels/pd_kernels_int.h"

/* A CUDA event of the device's stream. */
struct pd_device_event {
    cudaEvent_t event;
    bool recorded;
};

pd_status pd_cuda_enter(pd_device *dev, pd_cuda_state **out)
{
    pd_cuda_state *st = dev->backend;
    int current;

    /* Another device may be current on this thread (several GPUs in one
     * process); the stream and cuBLAS handle belong to ours. */
    PD_CUDA_CHECK(cudaGetDevice(&current));
    if (current != st->ordinal)
        PD_CUDA_CHECK(cudaSetDevice(st->ordinal));
    *out = st;
    return PD_OK;
}

/* A failed allocation of `bytes` of `what` as a status naming the device:
 * PD_ENOMEM when the memory is exhausted (the cache then retries). */
static pd_status allocation_failure(const pd_device *dev, cudaError_t err, size_t bytes, const char *what)
{
    (void)cudaGetLastError();
    return PD_ERROR(err == cudaErrorMemoryAllocation ? PD_ENOMEM : PD_EDEVICE,
                    "%s: cannot allocate %zu bytes of %s: %s", dev->name, bytes, what, cudaGetErrorString(err));
}

/* The caching allocator's raw allocator: cudaMalloc on the current device
 * (the callers entered it). */
static pd_status raw_alloc(void *ctx, size_t bytes, void **out)
{
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes);

    if (err != cudaSuccess)
        return allocation_failure(ctx, err, bytes, "device memory");
    *out = p;
    return PD_OK;
}

static void raw_free(void *ctx, void *ptr)
{
    const pd_device *dev = ctx;
    cudaError_t err = cudaFree(ptr);

    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        PD_LOG_WARNF("%s: cudaFree failed: %s", dev->name, cudaGetErrorString(err));
    }
}

/* Before cached blocks go back to cudaMalloc's pool: queued work may use them. */
static pd_status raw_synchronize(void *ctx)
{
    pd_cuda_state *st = ((pd_device *)ctx)->backend;

    PD_CUDA_CHECK(cudaStreamSynchronize(st->launch.stream));
    return PD_OK;
}

static const pd_caching_alloc_ops cuda_raw_ops = {
    .alloc = raw_alloc,
    .free = raw_free,
    .synchronize = raw_synchronize,
};

static pd_status cuda_alloc(pd_device *dev, size_t bytes, void **out)
{
    pd_cuda_state *st;

    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_caching_alloc_get(st->memory, bytes, out);
}

/* Back to the cache at once: later work on the stream runs after the
 * owner's, so nothing waits here. */
static void cuda_free(pd_device *dev, void *ptr)
{
    pd_cuda_state *st = dev->backend;

    pd_caching_alloc_put(st->memory, ptr);
}

static pd_status cuda_copy(pd_device *dev, void *dst, const void *src, size_t bytes, pd_copy_kind kind)
{
    pd_cuda_state *st;
    enum cudaMemcpyKind direction;

    switch (kind) {
    case PD_COPY_HOST_TO_DEVICE: direction = cudaMemcpyHostToDevice; break;
    case PD_COPY_DEVICE_TO_HOST: direction = cudaMemcpyDeviceToHost; break;
    case PD_COPY_DEVICE_TO_DEVICE: direction = cudaMemcpyDeviceToDevice; break;
    default: return PD_ERROR(PD_EINVAL, "%s: invalid copy kind %d", dev->name, (int)kind);
    }
    if (bytes == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, direction, st->launch.stream));
    /* The host side may be pageable, reused or read as soon as we return
     * (and a device-to-host copy must be complete): wait. Device-to-device
     * copies stay ordered on the stream. */
    if (kind != PD_COPY_DEVICE_TO_DEVICE)
        PD_CUDA_CHECK(cudaStreamSynchronize(st->launch.stream));
    return PD_OK;
}

static pd_status cuda_zero(pd_device *dev, void *ptr, size_t bytes)
{
    pd_cuda_state *st;

    if (bytes == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, st->launch.stream));
    return PD_OK;
}

static pd_status cuda_synchronize(pd_device *dev)
{
    pd_cuda_state *st;

    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CUDA_CHECK(cudaStreamSynchronize(st->launch.stream));
    return PD_OK;
}

static const pd_mem_ops cuda_mem_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
};

pd_status pd_cuda_scratch(pd_device *dev, size_t bytes, void **out)
{
    pd_cuda_state *st;

    PD_CHECK(pd_cuda_enter(dev, &st));
    if (bytes > st->scratch_bytes) {
        /* The old contents are not kept: its block may serve this request,
         * or be given back if memory runs short. */
        pd_caching_alloc_put(st->memory, st->scratch);
        st->scratch = NULL;
        st->scratch_bytes = 0;
        PD_CHECK(pd_caching_alloc_get(st->memory, bytes, &st->scratch));
        st->scratch_bytes = bytes;
    }
    *out = st->scratch;
    return PD_OK;
}

static pd_status cuda_memory_stats(pd_device *dev, pd_device_memory_stats *out)
{
    pd_cuda_state *st = dev->backend;

    pd_caching_alloc_stats(st->memory, out);
    return PD_OK;
}

/* Page-locked and portable (pinned for every device of the process). */
static pd_status cuda_host_alloc(pd_device *dev, size_t bytes, void **out)
{
    pd_cuda_state *st;
    void *p = NULL;
    cudaError_t err;

    PD_CHECK(pd_cuda_enter(dev, &st));
    err = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (err != cudaSuccess)
        return allocation_failure(dev, err, bytes, "pinned host memory");
    *out = p;
    return PD_OK;
}

static void cuda_host_free(pd_device *dev, void *ptr)
{
    cudaError_t err;

    if (!ptr)
        return;
    err = cudaFreeHost(ptr);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        PD_LOG_WARNF("%s: cudaFreeHost failed: %s", dev->name, cudaGetErrorString(err));
    }
}

static pd_status cuda_event_create(pd_device *dev, pd_device_event **out)
{
    pd_cuda_state *st;
    pd_device_event *ev;
    pd_status s = PD_OK;

    PD_CHECK(pd_cuda_enter(dev, &st));
    if (!(ev = calloc(1, sizeof(*ev))))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory for an event", dev->name);
    /* Timing enabled (the default flags); a spinning wait keeps the
     * profiler's synchronisation short. */
    PD_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&ev->event, cudaEventDefault), s, free_event);
    *out = ev;
    return PD_OK;
free_event:
    free(ev);
    return s;
}

static pd_status cuda_event_record(pd_device *dev, pd_device_event *event)
{
    pd_cuda_state *st;

    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CUDA_CHECK(cudaEventRecord(event->event, st->launch.stream));
    event->recorded = true;
    return PD_OK;
}

static pd_status cuda_event_elapsed_ms(pd_device *dev, pd_device_event *start, pd_device_event *stop, double *ms)
{
    pd_cuda_state *st;
    float elapsed = 0.0f;

    if (!start->recorded || !stop->recorded)
        return PD_ERROR(PD_ESTATE, "%s: elapsed time asked of an event never recorded", dev->name);
    PD_CHECK(pd_cuda_enter(dev, &st));
    /* Recorded in stream order, start first: once stop completed, so did start. */
    PD_CUDA_CHECK(cudaEventSynchronize(stop->event));
    PD_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start->event, stop->event));
    *ms = (double)elapsed;
    return PD_OK;
}

static void cuda_event_destroy(pd_device *dev, pd_device_event *event)
{
    pd_cuda_state *st;

    if (!event)
        return;
    if (pd_cuda_enter(dev, &st) != PD_OK)
        PD_LOG_WARNF("%s", pd_last_error());
    (void)cudaEventDestroy(event->event);
    (void)cudaGetLastError();
    free(event);
}

static pd_status cuda_set_precision(pd_device *dev, pd_precision precision)
{
    pd_cuda_state *st;

    /* bf16: the kernels take f32 operands that the graph widened from bf16
     * (activations, their gradients) or rounded to bf16 (the weights), see
     * pd_graph_set_precision. bf16's 8-bit significand fits in TF32's 11
     * bits, so TF32 tensor cores multiply such operands exactly and sum in
     * f32: bf16 mode takes the TF32 path of cuBLAS and cuDNN, keeping its
     * semantics (f32 accumulation of bf16 products) at tensor-core speed.
     * Only an operand that is not bf16, the model's f32 input to its first
     * layer, gets rounded to TF32 on the way. */
    if (precision != PD_PRECISION_BF16 && precision != PD_PRECISION_F32 && precision != PD_PRECISION_TF32)
        return PD_ERROR(PD_EINVAL, "%s: unknown precision %d", dev->name, (int)precision);
    PD_CHECK(pd_cuda_enter(dev, &st));
#ifdef HAVE_CUBLAS
    /* The default mode keeps Sgemm in strict FP32; TF32 rounds its inputs
     * to 10-bit mantissas on the tensor cores, accumulating in FP32. */
    PD_CUBLAS_CHECK(cublasSetMathMode(st->cublas, precision != PD_PRECISION_F32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                 : CUBLAS_DEFAULT_MATH));
#endif
    st->allow_tf32 = precision != PD_PRECISION_F32;
    return PD_OK;
}

static pd_status cuda_open(int ordinal, pd_device *dev)
{
    pd_cuda_state *st;
    pd_status s = PD_OK;
    int count = 0, sms = 0, threads = 0;
    cudaError_t err = cudaGetDeviceCount(&count);

    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return PD_ERROR(PD_EDEVICE, "cuda:%d: no usable CUDA device (cudaGetDeviceCount: %s, %s; is the NVIDIA "
                        "driver installed and a GPU visible?)", ordinal, cudaGetErrorString(err),
                        cudaGetErrorName(err));
    }
    if (count == 0)
        return PD_ERROR(PD_EDEVICE, "cuda:%d: no CUDA device (cudaGetDeviceCount found none)", ordinal);
    if (ordinal >= count)
        return PD_ERROR(PD_EDEVICE, "cuda:%d: no such device (%d CUDA device%s visible, cuda:0..cuda:%d)", ordinal,
                        count, count == 1 ? "" : "s", count - 1);

    st = calloc(1, sizeof(*st));
    if (!st)
        return PD_ERROR(PD_ENOMEM, "cuda:%d: out of host memory", ordinal);
    st->ordinal = ordinal;
    PD_CUDA_CHECK_GOTO(cudaSetDevice(ordinal), s, free_state);
    PD_CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal), s, free_state);
    PD_CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, ordinal), s,
                       free_state);
    st->launch.max_blocks = sms * (threads / PD_CUDA_BLOCK);
    if (st->launch.max_blocks < 1)
        st->launch.max_blocks = 1;
    pd_cuda_rdma_flush_probe(st);
    PD_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&st->launch.stream, cudaStreamNonBlocking), s, free_state);
    /* dev->backend is read by the allocator's synchronize callback. */
    dev->backend = st;
    snprintf(dev->name, sizeof(dev->name), "cuda:%d", ordinal);
    PD_CHECK_GOTO(pd_caching_alloc_create(dev->name, &cuda_raw_ops, dev, SIZE_MAX, &st->memory), s,
                  destroy_stream);
#ifdef HAVE_CUBLAS
    /* The default math mode keeps Sgemm in strict FP32 (no TF32), so results
     * differ from the CPU's only by the order of additions. */
    PD_CUBLAS_CHECK_GOTO(cublasCreate(&st->cublas), s, destroy_memory);
    PD_CUBLAS_CHECK_GOTO(cublasSetStream(st->cublas, st->launch.stream), s, destroy_cublas);
#endif
#ifdef HAVE_CUDNN
    /* Convolutions and batch norm, on the same stream (pd_cuda_nn.h). */
    PD_CHECK_GOTO(pd_cudnn_open(dev->name, st), s, undo_libraries);
#endif

    dev->kind = PD_DEVICE_CUDA;
    dev->ordinal = ordinal;
    dev->mem = &cuda_mem_ops;
    PD_LOG_DEBUGF("%s: %d multiprocessors, grid-stride kernels use up to %d blocks", dev->name, sms,
                  st->launch.max_blocks);
    return PD_OK;

#ifdef HAVE_CUDNN
undo_libraries:
#endif
#ifdef HAVE_CUBLAS
destroy_cublas:
    cublasDestroy(st->cublas);
destroy_memory:
#endif
#if defined(HAVE_CUBLAS) || defined(HAVE_CUDNN)
    pd_caching_alloc_destroy(st->memory);
#endif
destroy_stream:
    cudaStreamDestroy(st->launch.stream);
free_state:
    dev->backend = NULL;
    free(st);
    return s;
}

static void cuda_close(pd_device *dev)
{
    pd_cuda_state *st;
    cudaError_t err;

    if (pd_cuda_enter(dev, &st) != PD_OK) {
        PD_LOG_WARNF("%s", pd_last_error());
        st = dev->backend;
    }
    /* Queued kernels may still use the scratch buffer and other blocks. */
    err = cudaStreamSynchronize(st->launch.stream);
    if (err != cudaSuccess)
        PD_LOG_WARNF("%s: closing with a failed stream: %s", dev->name, cudaGetErrorString(err));
#ifdef HAVE_CUDNN
    pd_cudnn_close(st);
#endif
#ifdef HAVE_CUBLAS
    cublasDestroy(st->cublas);
#endif
    pd_caching_alloc_put(st->memory, st->scratch);
    pd_caching_alloc_destroy(st->memory); /* cudaFree of every block */
    cudaStreamDestroy(st->launch.stream);
    (void)cudaGetLastError();
    free(st);
}

/* PD_EINVAL unless t is device memory: a host tensor would fault the stream. */
static pd_status expect_on_gpu(const pd_tensor *t, const char *what)
{
    if (t->device && t->device->kind != PD_DEVICE_CUDA)
        return PD_ERROR(PD_EINVAL, "%s: tensor is on %s, not on a CUDA device", what, t->device->name);
    return PD_OK;
}

/* A contiguous f32 tensor of `shape` in device memory. */
static pd_status expect_f32(const pd_tensor *t, const pd_shape *shape, const char *what)
{
    PD_CHECK(pd_kernel_expect_f32(t, shape, what));
    return expect_on_gpu(t, what);
}

#ifdef HAVE_CUBLAS
static pd_status cuda_gemm(pd_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                           int64_t ldc)
{
    pd_cuda_state *st;
    bool empty;

    PD_CHECK(pd_kernel_check_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, &empty));
    if (empty)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    /* No product term: C = beta * C, and beta == 0 clears NaN garbage (as
     * the CPU does, without relying on how cuBLAS treats k == 0). */
    if (k == 0 || alpha == 0.0f)
        return pd_cuda_launch_scale_matrix(&st->launch, c, m, n, ldc, beta);
    /* cuBLAS is column-major: a row-major matrix is its transpose there, so
     * row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, i.e.
     * the same call with the operands swapped and m, n exchanged. cuBLAS
     * does not read C when beta == 0. */
    PD_CUBLAS_CHECK(cublasSgemm(st->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                (int)n, (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc));
    return PD_OK;
}
#endif

static pd_status cuda_fill(pd_device *dev, pd_tensor *y, float value)
{
    pd_cuda_state *st;

    PD_CHECK(expect_f32(y, y ? &y->shape : NULL, "fill y"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_fill(&st->launch, y->data, pd_tensor_numel(y), value);
}

static pd_status cuda_axpby(pd_device *dev, float alpha, const pd_tensor *x, float beta, pd_tensor *y)
{
    pd_cuda_state *st;

    PD_CHECK(expect_f32(x, x ? &x->shape : NULL, "axpby x"));
    PD_CHECK(expect_f32(y, &x->shape, "axpby y"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_axpby(&st->launch, alpha, x->data, beta, y->data, pd_tensor_numel(x));
}

static pd_status cuda_add(pd_device *dev, const pd_tensor *a, const pd_tensor *b, pd_tensor *y)
{
    pd_cuda_state *st;

    PD_CHECK(expect_f32(a, a ? &a->shape : NULL, "add a"));
    PD_CHECK(expect_f32(b, &a->shape, "add b"));
    PD_CHECK(expect_f32(y, &a->shape, "add y"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_add(&st->launch, a->data, b->data, y->data, pd_tensor_numel(a));
}

static pd_status cuda_convert(pd_device *dev, const pd_tensor *x, pd_tensor *y)
{
    pd_cuda_state *st;

    if (!x || !y)
        return PD_ERROR(PD_EINVAL, "convert: missing tensor");
    if (pd_tensor_numel(x) != pd_tensor_numel(y))
        return PD_ERROR(PD_ESHAPE, "convert: %lld elements into %lld", (long long)pd_tensor_numel(x),
                        (long long)pd_tensor_numel(y));
    if (pd_dtype_size(x->dtype) == 0 || pd_dtype_size(y->dtype) == 0)
        return PD_ERROR(PD_EINVAL, "convert: invalid dtype %d -> %d", (int)x->dtype, (int)y->dtype);
    PD_CHECK(expect_on_gpu(x, "convert x"));
    PD_CHECK(expect_on_gpu(y, "convert y"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_convert(&st->launch, x->dtype, x->data, y->dtype, y->data, pd_tensor_numel(x));
}

static pd_status cuda_sum(pd_device *dev, const pd_tensor *x, pd_tensor *out)
{
    pd_shape one = pd_shape_make(1, (int64_t)1);
    pd_cuda_state *st;
    void *partials;

    PD_CHECK(expect_f32(x, x ? &x->shape : NULL, "sum x"));
    PD_CHECK(expect_f32(out, &one, "sum out"));
    PD_CHECK(pd_cuda_scratch(dev, PD_CUDA_SUM_BLOCKS * sizeof(double), &partials));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_sum(&st->launch, x->data, pd_tensor_numel(x), partials, out->data);
}

static pd_status cuda_relu_forward(pd_device *dev, const pd_tensor *x, pd_tensor *y)
{
    pd_cuda_state *st;

    PD_CHECK(expect_f32(x, x ? &x->shape : NULL, "relu x"));
    PD_CHECK(expect_f32(y, &x->shape, "relu y"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_relu_forward(&st->launch, x->data, y->data, pd_tensor_numel(x));
}

static pd_status cuda_relu_backward(pd_device *dev, const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx)
{
    pd_cuda_state *st;

    PD_CHECK(expect_f32(y, y ? &y->shape : NULL, "relu backward y"));
    PD_CHECK(expect_f32(dy, &y->shape, "relu backward dy"));
    PD_CHECK(expect_f32(dx, &y->shape, "relu backward dx"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_relu_backward(&st->launch, y->data, dy->data, dx->data, pd_tensor_numel(y));
}

/* out = in * mask / (1-p) with the mask of (seed, index): both passes. */
static pd_status dropout_apply(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y,
                               const char *what_x, const char *what_y)
{
    pd_cuda_state *st;
    const int64_t n = x ? pd_tensor_numel(x) : 0;

    PD_CHECK(expect_f32(x, x ? &x->shape : NULL, what_x));
    PD_CHECK(expect_f32(y, &x->shape, what_y));
    if (!(p >= 0.0f && p < 1.0f))
        return PD_ERROR(PD_EINVAL, "%s: dropout probability must be in [0,1), got %g", what_x, (double)p);
    PD_CHECK(pd_cuda_enter(dev, &st));
    if (p == 0.0f) {
        if (y->data != x->data && n > 0)
            PD_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                          st->launch.stream));
        return PD_OK;
    }
    return pd_cuda_launch_dropout(&st->launch, p, seed, x->data, y->data, n);
}

static pd_status cuda_dropout_forward(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y)
{
    return dropout_apply(dev, p, seed, x, y, "dropout forward x", "dropout forward y");
}

static pd_status cuda_dropout_backward(pd_device *dev, float p, uint64_t seed, const pd_tensor *dy, pd_tensor *dx)
{
    return dropout_apply(dev, p, seed, dy, dx, "dropout backward dy", "dropout backward dx");
}

static pd_status cuda_sgd_update(pd_device *dev, const pd_sgd_desc *desc, pd_tensor *w, const pd_tensor *g,
                                 pd_tensor *momentum_buf)
{
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_sgd(desc, w, g, momentum_buf));
    PD_CHECK(expect_on_gpu(w, "sgd w"));
    PD_CHECK(expect_on_gpu(g, "sgd g"));
    if (desc->momentum != 0.0f)
        PD_CHECK(expect_on_gpu(momentum_buf, "sgd momentum buffer"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_sgd(&st->launch, desc, w->data, g->data, desc->momentum != 0.0f ? momentum_buf->data : NULL,
                              pd_tensor_numel(w));
}

static pd_status cuda_adam_update(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g,
                                  pd_tensor *m, pd_tensor *v)
{
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_adam(desc, w, g, m, v));
    PD_CHECK(expect_on_gpu(w, "adam w"));
    PD_CHECK(expect_on_gpu(g, "adam g"));
    PD_CHECK(expect_on_gpu(m, "adam m"));
    PD_CHECK(expect_on_gpu(v, "adam v"));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_adam(&st->launch, desc, w->data, g->data, m->data, v->data, pd_tensor_numel(w));
}

static const pd_device_ops cuda_ops = {
#ifdef HAVE_CUBLAS
    .gemm = cuda_gemm,
#endif
    .fill = cuda_fill,
    .axpby = cuda_axpby,
    .add = cuda_add,
    .convert = cuda_convert,
    .sum = cuda_sum,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .dropout_forward = cuda_dropout_forward,
    .dropout_backward = cuda_dropout_backward,
    .sgd_update = cuda_sgd_update,
    .adam_update = cuda_adam_update,
    /* layer entries in our own kernels (cuBLAS for linear's products) */
#ifdef HAVE_CUBLAS
    .linear_forward = pd_cuda_linear_forward,
    .linear_backward = pd_cuda_linear_backward,
#endif
    .softmax_cross_entropy_forward = pd_cuda_softmax_cross_entropy_forward,
    .softmax_cross_entropy_backward = pd_cuda_softmax_cross_entropy_backward,
    .concat_forward = pd_cuda_concat_forward,
    .concat_backward = pd_cuda_concat_backward,
    .embedding_forward = pd_cuda_embedding_forward,
    .embedding_backward = pd_cuda_embedding_backward,
    .lstm_cell_forward = pd_cuda_lstm_cell_forward,
    .lstm_cell_backward = pd_cuda_lstm_cell_backward,
    /* pooling and LRN in our kernels; convolution and batch norm on cuDNN */
    .pool2d_forward = pd_cuda_pool2d_forward,
    .pool2d_backward = pd_cuda_pool2d_backward,
    .lrn_forward = pd_cuda_lrn_forward,
    .lrn_backward = pd_cuda_lrn_backward,
#ifdef HAVE_CUDNN
    .conv2d_forward = pd_cuda_conv2d_forward,
    .conv2d_backward_data = pd_cuda_conv2d_backward_data,
    .conv2d_backward_filter = pd_cuda_conv2d_backward_filter,
    .batchnorm_forward_train = pd_cuda_batchnorm_forward_train,
    .batchnorm_forward_eval = pd_cuda_batchnorm_forward_eval,
    .batchnorm_backward = pd_cuda_batchnorm_backward,
#endif
    /* memory statistics, pinned host memory, events, precision */
    .memory_stats = cuda_memory_stats,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .export_dmabuf = pd_cuda_export_dmabuf,
    .ipc_export = pd_cuda_ipc_export,
    .ipc_open = pd_cuda_ipc_open,
    .ipc_close = pd_cuda_ipc_close,
    .flush_rdma_writes = pd_cuda_flush_rdma_writes,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .event_destroy = cuda_event_destroy,
    .set_precision = cuda_set_precision,
};

const pd_backend pd_backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .ops = &cuda_ops,
};
