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

/* The layer entries' argument checks, one per entry of pd_device_ops, so
 * that every backend accepts and refuses the same calls with the same
 * messages: descriptor values, f32 contiguous tensors of the shapes the
 * entry's contract gives (nullable outputs checked when present). Each
 * fills the sizes it derived. */

/* A convolution's sizes: input [N,C,H,W], output channels K and plane P x Q. */
typedef struct pd_conv2d_dims {
    int64_t n, c, h, w;
    int64_t k, p, q;
} pd_conv2d_dims;

pd_status pd_kernel_check_conv2d_forward(const pd_conv2d_desc *d, const pd_tensor *x, const pd_tensor *w,
                                         const pd_tensor *bias, const pd_tensor *y, pd_conv2d_dims *dims);
pd_status pd_kernel_check_conv2d_backward_data(const pd_conv2d_desc *d, const pd_tensor *dy, const pd_tensor *w,
                                               const pd_tensor *dx, pd_conv2d_dims *dims);
pd_status pd_kernel_check_conv2d_backward_filter(const pd_conv2d_desc *d, const pd_tensor *x, const pd_tensor *dy,
                                                 const pd_tensor *dw, const pd_tensor *dbias, pd_conv2d_dims *dims);

/* A pooling's sizes: input [N,C,H,W], output plane P x Q (ceil_mode applied). */
typedef struct pd_pool2d_dims {
    int64_t n, c, h, w;
    int64_t p, q;
} pd_pool2d_dims;

pd_status pd_kernel_check_pool2d_forward(const pd_pool2d_desc *d, const pd_tensor *x, const pd_tensor *y,
                                         pd_pool2d_dims *dims);
pd_status pd_kernel_check_pool2d_backward(const pd_pool2d_desc *d, const pd_tensor *x, const pd_tensor *y,
                                          const pd_tensor *dy, const pd_tensor *dx, pd_pool2d_dims *dims);

/* x viewed as [n, c, spatial]. */
typedef struct pd_lrn_dims {
    int64_t n, c, spatial;
} pd_lrn_dims;

pd_status pd_kernel_check_lrn_forward(const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                      pd_lrn_dims *dims);
pd_status pd_kernel_check_lrn_backward(const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                       const pd_tensor *dy, const pd_tensor *dx, pd_lrn_dims *dims);

/* x viewed as [n, c, spatial]; statistics are per channel over n * spatial
 * values (training refuses fewer than two). */
typedef struct pd_batchnorm_dims {
    int64_t n, c, spatial;
} pd_batchnorm_dims;

pd_status pd_kernel_check_batchnorm_train(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *gamma,
                                          const pd_tensor *beta, const pd_tensor *running_mean,
                                          const pd_tensor *running_var, const pd_tensor *y,
                                          const pd_tensor *save_mean, const pd_tensor *save_invstd,
                                          pd_batchnorm_dims *dims);
pd_status pd_kernel_check_batchnorm_eval(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *gamma,
                                         const pd_tensor *beta, const pd_tensor *running_mean,
                                         const pd_tensor *running_var, const pd_tensor *y, pd_batchnorm_dims *dims);
pd_status pd_kernel_check_batchnorm_backward(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *dy,
                                             const pd_tensor *gamma, const pd_tensor *save_mean,
                                             const pd_tensor *save_invstd, const pd_tensor *dx,
                                             const pd_tensor *dgamma, const pd_tensor *dbeta, pd_batchnorm_dims *dims);

/* A fully connected layer's sizes: x [N,K], w [M,K], y [N,M]. */
typedef struct pd_linear_dims {
    int64_t n, k, m;
} pd_linear_dims;

pd_status pd_kernel_check_linear_forward(const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                         const pd_tensor *y, pd_linear_dims *dims);
pd_status pd_kernel_check_linear_backward(const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                          const pd_tensor *dx, const pd_tensor *dw, const pd_tensor *dbias,
                                          pd_linear_dims *dims);

/* Softmax cross-entropy's sizes: logits [n, classes], labels [n]. The
 * checks cover shapes and dtypes; the labels' range is checked by the
 * backend where the labels are (pd_kernel_first_outside on the host),
 * reported by pd_kernel_label_outside naming the labels as below. */
typedef struct pd_sce_dims {
    int64_t n, classes;
} pd_sce_dims;

#define PD_SCE_FORWARD_LABELS "softmax_cross_entropy forward labels"
#define PD_SCE_BACKWARD_LABELS "softmax_cross_entropy backward labels"

pd_status pd_kernel_check_sce_forward(const pd_tensor *logits, const pd_tensor *labels, const pd_tensor *probs,
                                      const pd_tensor *loss, pd_sce_dims *dims);
pd_status pd_kernel_check_sce_backward(const pd_tensor *probs, const pd_tensor *labels, const pd_tensor *dlogits,
                                       pd_sce_dims *dims);

/* The position of the first of n host ids outside [0, limit), or n. */
int64_t pd_kernel_first_outside(const int32_t *ids, int64_t n, int64_t limit);

/* PD_EINVAL: "<what_labels>: label of row R is L, outside [0,C)". */
pd_status pd_kernel_label_outside(const char *what_labels, int64_t row, int32_t label, int64_t classes);

/* Concatenation: parts of one dtype, contiguous, equal but along `axis`,
 * spanning the concatenated tensor; the forward pass also refuses a
 * non-empty x without data (the split skips such a dx). */
pd_status pd_kernel_check_concat_forward(int axis, int n, const pd_tensor *const *xs, const pd_tensor *y);
pd_status pd_kernel_check_concat_backward(int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs);

/* An embedding's sizes: `ids` ids (any shape), table [vocab, dim]. */
typedef struct pd_embedding_dims {
    int64_t ids, vocab, dim;
} pd_embedding_dims;

/* Checks the table (or its gradient) [V,D], contiguous i32 ids and `rows`
 * (y or dy, named rows_name) of shape ids.shape + [D]; `what` names the
 * entry ("embedding", "embedding backward"). The ids' range is the
 * backend's to check (pd_kernel_first_outside), reported by
 * pd_kernel_id_outside with the id's coordinates. */
pd_status pd_kernel_check_embedding(const char *what, const pd_tensor *ids, const pd_tensor *table,
                                    const pd_tensor *rows, const char *rows_name, pd_embedding_dims *dims);
pd_status pd_kernel_id_outside(const char *what, const pd_tensor *ids, int64_t position, int32_t id, int64_t vocab);

/* An LSTM cell's sizes: c_prev, c, h [n, hidden]; gates-shaped [n, 4 hidden]. */
typedef struct pd_lstm_cell_dims {
    int64_t n, hidden;
} pd_lstm_cell_dims;

pd_status pd_kernel_check_lstm_cell_forward(const pd_tensor *gates, const pd_tensor *c_prev, const pd_tensor *act,
                                            const pd_tensor *c, const pd_tensor *h, pd_lstm_cell_dims *dims);
/* dc is nullable (no gradient from step t+1). */
pd_status pd_kernel_check_lstm_cell_backward(const pd_tensor *act, const pd_tensor *c_prev, const pd_tensor *c,
                                             const pd_tensor *dh, const pd_tensor *dc, const pd_tensor *dgates,
                                             const pd_tensor *dc_prev, pd_lstm_cell_dims *dims);

#endif
