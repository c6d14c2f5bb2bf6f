/* The CPU backend (module-private): its entry points, grouped by the file
 * that implements them, and the device's scratch memory. */
#ifndef PD_CPU_H
#define PD_CPU_H

#include "kernels/pd_kernels_int.h"

/* Returns a 64-byte aligned scratch buffer of at least `bytes`, owned by the
 * device and reused across calls (grown, never shrunk): one per device, so
 * a kernel must not hold it across another kernel's call. */
pd_status pd_cpu_scratch(pd_device *dev, size_t bytes, float **out);

/* elementwise.c */
pd_status pd_cpu_fill(pd_device *dev, pd_tensor *y, float value);
pd_status pd_cpu_axpby(pd_device *dev, float alpha, const pd_tensor *x, float beta, pd_tensor *y);
pd_status pd_cpu_add(pd_device *dev, const pd_tensor *a, const pd_tensor *b, pd_tensor *y);
pd_status pd_cpu_convert(pd_device *dev, const pd_tensor *x, pd_tensor *y);
pd_status pd_cpu_sum(pd_device *dev, const pd_tensor *x, pd_tensor *out);
pd_status pd_cpu_relu_forward(pd_device *dev, const pd_tensor *x, pd_tensor *y);
pd_status pd_cpu_relu_backward(pd_device *dev, const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx);

/* gemm.c, conv2d.c, linear.c, pool2d.c */
pd_status pd_cpu_gemm(pd_device *dev, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* pd_cpu_gemm in two halves, for kernels that run many products from their
 * own parallel region: _prepare checks the arguments (pd_kernel_check_gemm)
 * and readies BLAS once; _checked then computes, on the calling thread when
 * in a parallel region, and has nothing left to fail. A prepared product
 * covers smaller ones of the same operands and leading dimensions.
 * _checked needs m, n, k > 0. */
pd_status pd_cpu_gemm_prepare(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                              const float *b, int64_t ldb, const float *c, int64_t ldc, bool *empty);
void pd_cpu_gemm_checked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
pd_status pd_cpu_conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                const pd_tensor *bias, pd_tensor *y);
pd_status pd_cpu_conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                      const pd_tensor *w, pd_tensor *dx);
pd_status pd_cpu_conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                        const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias);
pd_status pd_cpu_linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                pd_tensor *y);
pd_status pd_cpu_linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                 pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias);
pd_status pd_cpu_pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y);
pd_status pd_cpu_pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                 const pd_tensor *dy, pd_tensor *dx);

/* batchnorm.c, lrn.c, dropout.c, softmax_cross_entropy.c, optimizer.c */
pd_status pd_cpu_batchnorm_forward_train(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                         pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                         pd_tensor *save_invstd);
pd_status pd_cpu_batchnorm_forward_eval(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                        const pd_tensor *gamma, const pd_tensor *beta,
                                        const pd_tensor *running_mean, const pd_tensor *running_var, pd_tensor *y);
pd_status pd_cpu_batchnorm_backward(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                    const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                    const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma,
                                    pd_tensor *dbeta);
pd_status pd_cpu_lrn_forward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y);
pd_status pd_cpu_lrn_backward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                              const pd_tensor *dy, pd_tensor *dx);
pd_status pd_cpu_dropout_forward(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y);
pd_status pd_cpu_dropout_backward(pd_device *dev, float p, uint64_t seed, const pd_tensor *dy, pd_tensor *dx);
pd_status pd_cpu_softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                               pd_tensor *probs, pd_tensor *loss);
pd_status pd_cpu_softmax_cross_entropy_backward(pd_device *dev, const pd_tensor *probs, const pd_tensor *labels,
                                                float dloss, pd_tensor *dlogits);
pd_status pd_cpu_sgd_update(pd_device *dev, const pd_sgd_desc *desc, pd_tensor *w, const pd_tensor *g,
                            pd_tensor *momentum_buf);
pd_status pd_cpu_adam_update(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g,
                             pd_tensor *m, pd_tensor *v);

/* concat.c, embedding.c, lstm_cell.c */
pd_status pd_cpu_concat_forward(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y);
pd_status pd_cpu_concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs);
pd_status pd_cpu_embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y);
pd_status pd_cpu_embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable);
pd_status pd_cpu_lstm_cell_forward(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev, pd_tensor *act,
                                   pd_tensor *c, pd_tensor *h);
pd_status pd_cpu_lstm_cell_backward(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev,
                                    const pd_tensor *c, const pd_tensor *dh, const pd_tensor *dc,
                                    pd_tensor *dgates, pd_tensor *dc_prev);

#endif
