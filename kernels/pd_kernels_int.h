/* Backend plumbing shared by kernels/ (module-private): the backend table
 * that pd_device_open() walks, the default "unsupported" entries, and the
 * shape checks every backend runs before computing. */
#ifndef PD_KERNELS_INT_H
#define PD_KERNELS_INT_H

#include <pipedream/kernels.h>

typedef struct pd_backend {
    const char *name; /* "cpu", "cuda" */
    /* Opens device `ordinal`; fills everything in *dev but ops, which the
     * caller overlays on the defaults from backend_ops. */
    pd_status (*open)(int ordinal, pd_device *dev);
    void (*close)(pd_device *dev);
    const pd_device_ops *ops; /* entries the backend implements; others NULL */
} pd_backend;

extern const pd_backend pd_backend_cpu;
#ifdef HAVE_CUDA
extern const pd_backend pd_backend_cuda;
#endif

/* Fills `table` with the backend's entries, and "unsupported" ones (which
 * return PD_ENOTSUP naming the entry and device) where it has none, so the
 * hot path never tests for NULL. */
void pd_device_ops_overlay(pd_device_ops *table, const pd_device_ops *backend);

/* PD_ESHAPE naming `what` unless t is a contiguous f32 tensor of `shape`. */
pd_status pd_kernel_expect_f32(const pd_tensor *t, const pd_shape *shape, const char *what);

/* PD_ESHAPE naming `what` unless a and b have the same dtype and shape. */
pd_status pd_kernel_expect_same(const pd_tensor *a, const pd_tensor *b, const char *what);

/* Checks a gemm call (see pd_device_ops.gemm): dimensions within int (BLAS
 * takes int), leading dimensions that fit the stored matrices, pointers
 * present. Sets *empty when m or n is 0, so there is nothing to compute. */
pd_status pd_kernel_check_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t lda, const float *b, int64_t ldb, const float *c, int64_t ldc, bool *empty);

/* Checks an SGD step: hyper-parameters and the f32 tensors (the momentum
 * buffer only when momentum is not 0). */
pd_status pd_kernel_check_sgd(const pd_sgd_desc *desc, const pd_tensor *w, const pd_tensor *g,
                              const pd_tensor *momentum_buf);

/* Checks an Adam step: hyper-parameters, step >= 1 and the f32 tensors. */
pd_status pd_kernel_check_adam(const pd_adam_desc *desc, const pd_tensor *w, const pd_tensor *g, const pd_tensor *m,
                               const pd_tensor *v);

/* Output size of a sliding window along one axis:
 * floor((in + 2*pad - dilation*(kernel-1) - 1) / stride) + 1 (ceil when
 * ceil_mode, keeping the last window starting inside the input or left
 * padding, as PyTorch). Returns <= 0 if no window fits. */
int64_t pd_window_output_size(int64_t in, int kernel, int stride, int pad, int dilation, bool ceil_mode);

#endif
