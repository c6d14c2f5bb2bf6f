/* CPU kernels: fully connected layer y = x w^T + bias (PyTorch's w [M,K]
 * layout) and its gradients, each one sgemm. */
#include "config.h"

#include "kernels/cpu/pd_cpu.h"

#define LINEAR_PARALLEL_MIN 65536

pd_status pd_cpu_linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                pd_tensor *y)
{
    pd_linear_dims d;

    PD_CHECK(pd_kernel_check_linear_forward(x, w, bias, y, &d));
    const int64_t n = d.n, k = d.k, m = d.m;
    if (bias) {
        const float *b = bias->data;
        float *out = y->data;

#pragma omp parallel for schedule(static) if (n * m > LINEAR_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                out[i * m + j] = b[j];
    }
    return pd_cpu_gemm(dev, false, true, n, m, k, 1.0f, x->data, k, w->data, k, bias ? 1.0f : 0.0f, y->data, m);
}

pd_status pd_cpu_linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                 pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias)
{
    pd_linear_dims d;

    PD_CHECK(pd_kernel_check_linear_backward(x, w, dy, dx, dw, dbias, &d));
    const int64_t n = d.n, k = d.k, m = d.m;

    if (dx) /* dx [N,K] = dy [N,M] w [M,K] */
        PD_CHECK(pd_cpu_gemm(dev, false, false, n, k, m, 1.0f, dy->data, m, w->data, k, 0.0f, dx->data, k));
    /* dw [M,K] = dy^T [M,N] x [N,K] */
    PD_CHECK(pd_cpu_gemm(dev, true, false, m, k, n, 1.0f, dy->data, m, x->data, k, 0.0f, dw->data, k));
    if (dbias) {
        const float *grad_out = dy->data;
        float *grad_b = dbias->data;

#pragma omp parallel for schedule(static) if (n * m > LINEAR_PARALLEL_MIN)
        for (int64_t j = 0; j < m; j++) {
            double total = 0.0;
            for (int64_t i = 0; i < n; i++)
                total += grad_out[i * m + j];
            grad_b[j] = (float)total;
        }
    }
    return PD_OK;
}
