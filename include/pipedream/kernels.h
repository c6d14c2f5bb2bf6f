/* The device compute table: every layer computes only through these entries,
 * and each backend (cpu, cuda) implements them. Conventions:
 *  - all tensors are contiguous, row-major, batch-first (NCHW), f32 unless said;
 *  - an entry overwrites its outputs (never accumulates); outputs marked
 *    "nullable" are skipped when NULL;
 *  - shapes are checked: a mismatch returns PD_ESHAPE with a message;
 *  - an entry a backend lacks returns PD_ENOTSUP naming the entry and backend;
 *  - on a GPU the entries are asynchronous on the device's stream; results are
 *    visible to host copies (which synchronise) in order. */
#ifndef PIPEDREAM_KERNELS_H
#define PIPEDREAM_KERNELS_H

#include <pipedream/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_conv2d_desc {
    int kernel_h, kernel_w;
    int stride_h, stride_w;
    int pad_h, pad_w;
    int dilation_h, dilation_w;
    int groups;
} pd_conv2d_desc;

typedef enum { PD_POOL_MAX = 0, PD_POOL_AVG = 1 } pd_pool_mode;

typedef struct pd_pool2d_desc {
    pd_pool_mode mode;
    int kernel_h, kernel_w;
    int stride_h, stride_w;
    int pad_h, pad_w;
    bool ceil_mode;         /* output size rounds up, as PyTorch's ceil_mode */
    bool count_include_pad; /* average pooling divides by the padded window */
} pd_pool2d_desc;

/* Cross-channel local response normalisation as PyTorch's LocalResponseNorm:
 * y = x / (k + alpha/size * sum_{window of `size` channels} x^2)^beta. */
typedef struct pd_lrn_desc {
    int size;
    float alpha, beta, k;
} pd_lrn_desc;

/* Batch normalisation over N (and H, W): per-channel statistics. Running
 * statistics update as running = (1-momentum)*running + momentum*batch, with
 * the unbiased batch variance, as PyTorch. */
typedef struct pd_batchnorm_desc {
    float eps;
    float momentum;
} pd_batchnorm_desc;

/* SGD as torch.optim.SGD: g += wd*w; buf = momentum*buf + (1-dampening)*g
 * (buf = g on the first step); g = nesterov ? g + momentum*buf : buf; w -= lr*g. */
typedef struct pd_sgd_desc {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step; /* momentum buffer is initialised from g */
} pd_sgd_desc;

/* Adam as torch.optim.Adam (decoupled = AdamW); step counts from 1. */
typedef struct pd_adam_desc {
    float lr, beta1, beta2, eps, weight_decay;
    bool decoupled;
    int64_t step;
} pd_adam_desc;

/* The arithmetic of a run (`--precision`). Storage stays f32 but for the
 * graph's bf16 activations (pd_graph_set_precision). */
typedef enum pd_precision {
    PD_PRECISION_F32 = 0,  /* strict IEEE f32 everywhere: the default */
    PD_PRECISION_TF32 = 1, /* CUDA only: gemm and convolution inputs rounded to TF32 on tensor cores */
    PD_PRECISION_BF16 = 2, /* bf16 activations and weights, f32 master weights and f32 accumulation */
} pd_precision;

/* "f32", "tf32", "bf16". */
const char *pd_precision_name(pd_precision precision);

/* Parses a name of pd_precision_name(); PD_EINVAL naming it otherwise. */
pd_status pd_precision_parse(const char *name, pd_precision *out);

/* A device's memory as its caching allocator sees it (kernels/pd_caching_alloc.h):
 * tensors and scratch buffers, in the bytes the allocator hands out (requests
 * rounded up to its granularity). The raw counts are calls of cudaMalloc /
 * cudaFree on a GPU and of the host allocator on the CPU; after a warm-up
 * step, a training step that allocates and frees the same sizes adds none. */
typedef struct pd_device_memory_stats {
    uint64_t bytes_in_use;      /* handed out and not yet freed */
    uint64_t peak_bytes_in_use; /* the most ever in use at once */
    uint64_t bytes_cached;      /* freed, kept for reuse without a raw allocation */
    uint64_t allocs, frees;     /* requests served, blocks given back */
    uint64_t cache_hits;        /* requests served from the cache */
    uint64_t raw_allocs;        /* raw allocator calls, failed ones included */
    uint64_t raw_frees;         /* raw frees */
    uint64_t cache_flushes;     /* times the cache was emptied to retry a failed raw allocation */
} pd_device_memory_stats;

/* Bytes of a CUDA IPC handle (ipc_export, ipc_open): cudaIpcMemHandle_t. */
#define PD_DEVICE_IPC_HANDLE_BYTES 64

/* A point in the device's stream, for timing work on the device (a CUDA
 * event; a monotonic clock reading on the CPU, whose work is synchronous). */
typedef struct pd_device_event pd_device_event;

typedef struct pd_device_ops {
    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major, device pointers;
     * op(A) is [m,k] (A stored [k,m] when trans_a), op(B) is [k,n]. */
    pd_status (*gemm)(pd_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc);

    /* y = value everywhere (f32). */
    pd_status (*fill)(pd_device *dev, pd_tensor *y, float value);
    /* y = alpha * x + beta * y (same shape). */
    pd_status (*axpby)(pd_device *dev, float alpha, const pd_tensor *x, float beta, pd_tensor *y);
    /* y = a + b (same shape). */
    pd_status (*add)(pd_device *dev, const pd_tensor *a, const pd_tensor *b, pd_tensor *y);
    /* Element-wise dtype conversion (same element count). */
    pd_status (*convert)(pd_device *dev, const pd_tensor *x, pd_tensor *y);
    /* Sum of all elements into a one-element f32 tensor. */
    pd_status (*sum)(pd_device *dev, const pd_tensor *x, pd_tensor *out);

    /* y = max(x, 0); dx = dy where y > 0, else 0. */
    pd_status (*relu_forward)(pd_device *dev, const pd_tensor *x, pd_tensor *y);
    pd_status (*relu_backward)(pd_device *dev, const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx);

    /* x [N,C,H,W], w [K,C/groups,R,S], bias [K] (nullable), y [N,K,P,Q]. */
    pd_status (*conv2d_forward)(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                const pd_tensor *w, const pd_tensor *bias, pd_tensor *y);
    pd_status (*conv2d_backward_data)(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                      const pd_tensor *w, pd_tensor *dx);
    /* dw [K,C/groups,R,S]; dbias [K] (nullable) = sum of dy over N, P, Q. */
    pd_status (*conv2d_backward_filter)(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                        const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias);

    /* x [N,K], w [M,K] (PyTorch layout), bias [M] (nullable), y [N,M]. */
    pd_status (*linear_forward)(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                pd_tensor *y);
    /* dx [N,K] (nullable), dw [M,K], dbias [M] (nullable). */
    pd_status (*linear_backward)(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                 pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias);

    /* x [N,C,H,W], y [N,C,P,Q]; the backward pass reads x and y (max picks the
     * first maximum in the window, like cuDNN's deterministic mode). */
    pd_status (*pool2d_forward)(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y);
    pd_status (*pool2d_backward)(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x,
                                 const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx);

    /* x, y [N,C,H,W]. */
    pd_status (*lrn_forward)(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y);
    pd_status (*lrn_backward)(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                              const pd_tensor *dy, pd_tensor *dx);

    /* x, y [N,C] or [N,C,H,W]; gamma, beta, running_*, save_* [C]. save_mean
     * and save_invstd (1/sqrt(var+eps), biased var) feed the backward pass,
     * whose dx is nullable (the input needs no gradient). */
    pd_status (*batchnorm_forward_train)(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                         pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                         pd_tensor *save_invstd);
    pd_status (*batchnorm_forward_eval)(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                        const pd_tensor *gamma, const pd_tensor *beta,
                                        const pd_tensor *running_mean, const pd_tensor *running_var,
                                        pd_tensor *y);
    pd_status (*batchnorm_backward)(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                    const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                    const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma,
                                    pd_tensor *dbeta);

    /* Inverted dropout: element i is kept iff pd_rng_uniform(seed, i) >= p
     * (pd_rng.h), kept values scaled by 1/(1-p). The mask is recomputed from
     * the seed in the backward pass, identically on every backend. */
    pd_status (*dropout_forward)(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y);
    pd_status (*dropout_backward)(pd_device *dev, float p, uint64_t seed, const pd_tensor *dy, pd_tensor *dx);

    /* logits [N,C] f32, labels [N] i32 in [0,C) (else PD_EINVAL), probs [N,C],
     * loss [1] = mean over N of -log softmax(logits)[label]. */
    pd_status (*softmax_cross_entropy_forward)(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                               pd_tensor *probs, pd_tensor *loss);
    /* dlogits = dloss * (probs - onehot(labels)) / N. */
    pd_status (*softmax_cross_entropy_backward)(pd_device *dev, const pd_tensor *probs, const pd_tensor *labels,
                                                float dloss, pd_tensor *dlogits);

    /* Concatenates n tensors along `axis` (all other dimensions equal). */
    pd_status (*concat_forward)(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y);
    /* Splits dy along `axis` into dxs; an entry without data (a view with
     * data NULL) is skipped, its shape still placing the others. */
    pd_status (*concat_backward)(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs);

    /* ids [...] i32 in [0,V) (else PD_EINVAL), table [V,D], y [..., D]. */
    pd_status (*embedding_forward)(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y);
    /* dtable = scatter-add of dy rows at ids (zeroed first). */
    pd_status (*embedding_backward)(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable);

    /* One LSTM time step on pre-activations. gates [N,4H] = x W_ih^T + h W_hh^T
     * + b in PyTorch's order (i, f, g, o). act [N,4H] receives the activated
     * gates (sigmoid i,f,o; tanh g) for the backward pass; c, h [N,H]. */
    pd_status (*lstm_cell_forward)(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev,
                                   pd_tensor *act, pd_tensor *c, pd_tensor *h);
    /* From dh and dc (gradient flowing into c from step t+1; nullable = 0),
     * computes dgates [N,4H] (w.r.t. the pre-activations) and dc_prev [N,H]. */
    pd_status (*lstm_cell_backward)(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev,
                                    const pd_tensor *c, const pd_tensor *dh, const pd_tensor *dc,
                                    pd_tensor *dgates, pd_tensor *dc_prev);

    /* In-place optimizer updates of w from g (same shapes); momentum_buf is
     * nullable when desc->momentum is 0. */
    pd_status (*sgd_update)(pd_device *dev, const pd_sgd_desc *desc, pd_tensor *w, const pd_tensor *g,
                            pd_tensor *momentum_buf);
    pd_status (*adam_update)(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g,
                             pd_tensor *m, pd_tensor *v);

    /* ---- device-level: memory statistics, pinned host memory, events, precision ---- */

    /* The device allocator's statistics (see pd_device_memory_stats). */
    pd_status (*memory_stats)(pd_device *dev, pd_device_memory_stats *out);

    /* Host memory for data on its way to or from the device (staging of
     * minibatches): page-locked (cudaHostAlloc) on a GPU, so that copies
     * run at full bus speed; plain aligned memory on the CPU. Free it with
     * host_free of the same device, before closing the device; NULL is
     * ignored. */
    pd_status (*host_alloc)(pd_device *dev, size_t bytes, void **out);
    void (*host_free)(pd_device *dev, void *ptr);

    /* Optional (NULL where a device has none, as the CPU): a dmabuf file
     * descriptor for [ptr, ptr + bytes) of this device's memory, for an
     * RDMA adapter to register (ibv_reg_dmabuf_mr: GPUDirect RDMA). The
     * range exported is rounded out to the host page size and must stay
     * within one allocation (one padded by a page on each side does);
     * *offset is ptr's offset in it. The caller closes *fd. PD_ENOTSUP
     * where the device or its driver cannot export dma_buf. */
    pd_status (*export_dmabuf)(pd_device *dev, const void *ptr, size_t bytes, int *fd, uint64_t *offset);

    /* Optional, all three or none (NULL where a device has none, as the
     * CPU): CUDA IPC, device memory of one process written by another on
     * the same node. ipc_export writes a handle of
     * PD_DEVICE_IPC_HANDLE_BYTES for `ptr`, a block from this device's
     * mem->alloc (a whole allocation: blocks are never split); the block
     * must stay allocated, and must not be reused, until every process
     * that opened the handle closed it. ipc_open maps a handle exported by
     * another process (not this one: PD_EDEVICE) and sets *ptr to the
     * block's first byte in this process; ipc_close unmaps it and never
     * fails (a failure is a warning). */
    pd_status (*ipc_export)(pd_device *dev, void *ptr, uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES]);
    pd_status (*ipc_open)(pd_device *dev, const uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES], void **ptr);
    void (*ipc_close)(pd_device *dev, void *ptr);

    /* Optional (NULL where nothing needs it, as the CPU): makes writes an
     * RDMA adapter has completed into this device's memory (GPUDirect RDMA)
     * visible to work the device runs from now on, before a receiver hands
     * such memory out. A no-op where the device orders those writes itself
     * (CUDA: GPU_DIRECT_RDMA_WRITES_ORDERING at least OWNER, read once at
     * open); PD_ENOTSUP where it neither orders nor can flush them. */
    pd_status (*flush_rdma_writes)(pd_device *dev);

    /* Events time work on the device itself: event_record marks the point
     * after all work queued so far; event_elapsed_ms waits until `stop` is
     * reached and gives the milliseconds from `start` to `stop` (both
     * recorded on this device, start first; PD_ESTATE if one never was). On
     * an idle stream the span includes the host's launch latency between
     * them. event_destroy ignores NULL. */
    pd_status (*event_create)(pd_device *dev, pd_device_event **out);
    pd_status (*event_record)(pd_device *dev, pd_device_event *event);
    pd_status (*event_elapsed_ms)(pd_device *dev, pd_device_event *start, pd_device_event *stop, double *ms);
    void (*event_destroy)(pd_device *dev, pd_device_event *event);

    /* Sets the arithmetic of later work (PD_PRECISION_F32 after opening):
     * PD_ENOTSUP with a message for one the device cannot do (tf32 on the
     * CPU). bf16 keeps the kernels' f32 interface: the graph rounds the
     * stored activations and the weights it passes them to bf16; the CPU
     * computes in strict f32, CUDA on TF32 tensor cores (exact products of
     * bf16 operands, f32 sums). */
    pd_status (*set_precision)(pd_device *dev, pd_precision precision);
} pd_device_ops;

/* Opens a device by name: "cpu", "cuda" or "cuda:N". PD_ENOTSUP if the backend
 * was not built, PD_EDEVICE if it was built but no such device answers. */
pd_status pd_device_open(const char *name, pd_device **out);

/* Closes a device opened by pd_device_open; NULL is ignored. */
void pd_device_close(pd_device *dev);

/* The names of the backends compiled into this library, e.g. {"cpu","cuda"}. */
int pd_device_backends(const char *const **names);

#ifdef __cplusplus
}
#endif
#endif
