/* The CUDA backend's layer entries (module-private): convolution and batch
 * normalisation through cuDNN (only when built with it, HAVE_CUDNN; without
 * it those entries stay unsupported), pooling and local response
 * normalisation in our own kernels (pool.cu, lrn.cu: cuDNN's versions differ
 * from the CPU's functions, see there), and the cuDNN plumbing: the
 * per-device handle, status conversion with file:line, descriptors and the
 * per-shape convolution plans. Every entry computes the function of the CPU
 * entry of the same name (kernels/cpu/), checks its arguments with the
 * shared pd_kernel_check_* and queues its work on the device's stream.
 * Includers include "config.h" first; the .cu files include it too, so it
 * stays plain C. */
#ifndef PD_CUDA_NN_H
#define PD_CUDA_NN_H

#include "kernels/cuda/pd_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pooling (pool.c, pool.cu) ---- */

pd_status pd_cuda_pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y);
pd_status pd_cuda_pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                  const pd_tensor *dy, pd_tensor *dx);

/* A checked pooling as the kernels see it: `planes` (N*C) planes of h x w
 * in, p x q out, h*w < 2^31 (plane indices are int). */
typedef struct pd_cuda_pool_geom {
    pd_pool2d_desc d;
    int64_t planes;
    int h, w, p, q;
} pd_cuda_pool_geom;

/* y [planes, p, q] = the pooling of x [planes, h, w]. */
pd_status pd_cuda_launch_pool2d_forward(const pd_cuda_launch *launch, const pd_cuda_pool_geom *g, const float *x,
                                        float *y);
/* dx [planes, h, w] = the gradient of the pooling from dy [planes, p, q]
 * (x is read by max pooling only). `argmax`: scratch of planes*p*q ints for
 * max pooling with large windows, NULL otherwise (see
 * pd_cuda_pool2d_argmax_ints). */
pd_status pd_cuda_launch_pool2d_backward(const pd_cuda_launch *launch, const pd_cuda_pool_geom *g, const float *x,
                                         const float *dy, int *argmax, float *dx);
/* How many ints of argmax scratch pd_cuda_launch_pool2d_backward needs for g. */
int64_t pd_cuda_pool2d_argmax_ints(const pd_cuda_pool_geom *g);

/* ---- local response normalisation (lrn.c, lrn.cu) ---- */

pd_status pd_cuda_lrn_forward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y);
pd_status pd_cuda_lrn_backward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                               const pd_tensor *dy, pd_tensor *dx);

/* y = lrn(x) over [n, c, spatial] (desc checked). */
pd_status pd_cuda_launch_lrn_forward(const pd_cuda_launch *launch, const pd_lrn_desc *desc, int64_t n, int64_t c,
                                     int64_t spatial, const float *x, float *y);
/* dx from x, y, dy over [n, c, spatial] (desc checked). */
pd_status pd_cuda_launch_lrn_backward(const pd_cuda_launch *launch, const pd_lrn_desc *desc, int64_t n, int64_t c,
                                      int64_t spatial, const float *x, const float *y, const float *dy, float *dx);

#ifdef HAVE_CUDNN
/* ---- cuDNN plumbing (cudnn_util.c) ---- */

/* Default of pd_cuda_state.cudnn_workspace_limit, in MiB; the environment
 * variable PD_CUDNN_WORKSPACE (MiB, an integer >= 0) overrides it. */
#define PD_CUDNN_WORKSPACE_DEFAULT_MIB 256

/* Creates the device's cuDNN handle bound to its stream and reads the
 * workspace limit; the device is current. On failure nothing is left. */
pd_status pd_cudnn_open(const char *device_name, pd_cuda_state *st);

/* Frees the convolution plans and destroys the handle (stream idle). */
void pd_cudnn_close(pd_cuda_state *st);

/* Records "<call> failed: <cuDNN's message> (<status>)[: detail]" at
 * file:line: PD_ENOMEM for an allocation failure, PD_ENOTSUP for a
 * configuration cuDNN does not support, PD_EDEVICE for anything else. */
pd_status pd_cudnn_error_at(const char *file, int line, const char *call, cudnnStatus_t st);

/* Evaluates a cuDNN call and returns its failure as a pd_status. */
#define PD_CUDNN_CHECK(call)                                                 \
    do {                                                                     \
        cudnnStatus_t pd_cudnn_s_ = (call);                                  \
        if (pd_cudnn_s_ != CUDNN_STATUS_SUCCESS)                             \
            return pd_cudnn_error_at(__FILE__, __LINE__, #call, pd_cudnn_s_); \
    } while (0)

/* Like PD_CUDNN_CHECK, but stores the status in `var` and jumps to `label`. */
#define PD_CUDNN_CHECK_GOTO(call, var, label)                                   \
    do {                                                                        \
        cudnnStatus_t pd_cudnn_s_ = (call);                                     \
        if (pd_cudnn_s_ != CUDNN_STATUS_SUCCESS) {                              \
            (var) = pd_cudnn_error_at(__FILE__, __LINE__, #call, pd_cudnn_s_); \
            goto label;                                                         \
        }                                                                       \
    } while (0)

/* PD_ENOTSUP naming `what` unless [n, c, h, w] fits cuDNN's tensor
 * descriptors: positive int dimensions, fewer than 2^31 elements. */
pd_status pd_cudnn_check_tensor(int64_t n, int64_t c, int64_t h, int64_t w, const char *what);

/* Sets desc to a packed NCHW f32 tensor [n, c, h, w] (pd_cudnn_check_tensor
 * first). */
pd_status pd_cudnn_set_tensor(cudnnTensorDescriptor_t desc, int64_t n, int64_t c, int64_t h, int64_t w,
                              const char *what);

/* ---- convolutions (conv.c) ---- */

pd_status pd_cuda_conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                 const pd_tensor *bias, pd_tensor *y);
pd_status pd_cuda_conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                       const pd_tensor *w, pd_tensor *dx);
pd_status pd_cuda_conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                         const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias);

/* Frees a list of convolution plans (pd_cuda_state.conv_plans). */
void pd_cudnn_conv_plans_free(struct pd_cudnn_conv_plan *plans);

/* ---- batch normalisation (batchnorm.c) ---- */

pd_status pd_cuda_batchnorm_forward_train(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                          const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                          pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                          pd_tensor *save_invstd);
pd_status pd_cuda_batchnorm_forward_eval(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta,
                                         const pd_tensor *running_mean, const pd_tensor *running_var, pd_tensor *y);
pd_status pd_cuda_batchnorm_backward(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                     const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                     const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma,
                                     pd_tensor *dbeta);
#endif /* HAVE_CUDNN */

#ifdef __cplusplus
}
#endif
#endif
