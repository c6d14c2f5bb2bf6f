/* The CUDA fully connected layer: y = x w^T + bias (PyTorch's w [M,K]
 * layout) and its gradients. The products go through the device's gemm
 * entry (cuBLAS, in the device's precision); the bias is added after the
 * product and its gradient is a deterministic column sum of dy (bias.cu). */
#include "config.h"

#include "kernels/cuda/pd_cuda.h"
#include "kernels/pd_kernels_int.h"

pd_status pd_cuda_linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                 pd_tensor *y)
{
    const pd_tensor *tensors[] = {x, w, bias, y};
    static const char *const names[] = {"x", "w", "bias", "y"};
    pd_linear_dims d;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_linear_forward(x, w, bias, y, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("linear forward", 4, tensors, names));
    /* y [N,M] = x [N,K] w^T [K,M] */
    PD_CHECK(dev->ops->gemm(dev, false, true, d.n, d.m, d.k, 1.0f, x->data, d.k, w->data, d.k, 0.0f, y->data, d.m));
    if (!bias)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_bias_add(&st->launch, y->data, bias->data, d.n, d.m);
}

pd_status pd_cuda_linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                  pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias)
{
    const pd_tensor *tensors[] = {x, w, dy, dx, dw, dbias};
    static const char *const names[] = {"x", "w", "dy", "dx", "dw", "dbias"};
    pd_linear_dims d;
    pd_cuda_state *st;
    void *partials;

    PD_CHECK(pd_kernel_check_linear_backward(x, w, dy, dx, dw, dbias, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("linear backward", 6, tensors, names));
    if (dx) /* dx [N,K] = dy [N,M] w [M,K] */
        PD_CHECK(dev->ops->gemm(dev, false, false, d.n, d.k, d.m, 1.0f, dy->data, d.m, w->data, d.k, 0.0f, dx->data,
                                d.k));
    /* dw [M,K] = dy^T [M,N] x [N,K] */
    PD_CHECK(dev->ops->gemm(dev, true, false, d.m, d.k, d.n, 1.0f, dy->data, d.m, x->data, d.k, 0.0f, dw->data, d.k));
    if (!dbias)
        return PD_OK;
    PD_CHECK(pd_cuda_scratch(dev, pd_cuda_column_sum_scratch(d.n, d.m), &partials));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_column_sum(&st->launch, dy->data, d.n, d.m, partials, dbias->data);
}
