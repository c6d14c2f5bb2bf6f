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

/* batchnorm.c, lrn.c, dropout.c, softmax_cross_entropy.c, optimizer.c */

/* concat.c, embedding.c, lstm_cell.c */

#endif
