/* Pooling entries of the CUDA backend: the shared checks, then our kernels
 * (pool.cu), which compute exactly the CPU's function: max pooling's first
 * maximum (NaN first), ceil_mode, and PyTorch's padded average divisor.
 * With these semantics cuDNN's pooling cannot be used; see pool.cu. */
#include "config.h"

#include <limits.h>

#include "kernels/cuda/pd_cuda_nn.h"
#include "kernels/pd_kernels_int.h"

/* The kernels' view of a checked pooling; PD_ENOTSUP if a plane has 2^31
 * elements or more (the kernels index planes with int). */
static pd_status pool_geometry(const char *op, const pd_pool2d_desc *desc, const pd_pool2d_dims *dims,
                               pd_cuda_pool_geom *g)
{
    if (dims->h * dims->w > INT_MAX || dims->p * dims->q > INT_MAX)
        return PD_ERROR(PD_ENOTSUP, "%s: a %lldx%lld plane is too large for the CUDA pooling kernels (2^31 "
                        "elements at most)", op, (long long)dims->h, (long long)dims->w);
    g->d = *desc;
    g->planes = dims->n * dims->c;
    g->h = (int)dims->h;
    g->w = (int)dims->w;
    g->p = (int)dims->p;
    g->q = (int)dims->q;
    return PD_OK;
}

pd_status pd_cuda_pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    pd_pool2d_dims dims;
    pd_cuda_pool_geom g;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_pool2d_forward(desc, x, y, &dims));
    PD_CHECK(pool_geometry("pool2d forward", desc, &dims, &g));
    const pd_tensor *tensors[] = {x, y};
    const char *const names[] = {"x", "y"};
    PD_CHECK(pd_cuda_expect_on_gpu("pool2d forward", 2, tensors, names));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_pool2d_forward(&st->launch, &g, x->data, y->data);
}

pd_status pd_cuda_pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                  const pd_tensor *dy, pd_tensor *dx)
{
    pd_pool2d_dims dims;
    pd_cuda_pool_geom g;
    pd_cuda_state *st;
    void *argmax = NULL;

    PD_CHECK(pd_kernel_check_pool2d_backward(desc, x, y, dy, dx, &dims));
    PD_CHECK(pool_geometry("pool2d backward", desc, &dims, &g));
    const pd_tensor *tensors[] = {x, y, dy, dx};
    const char *const names[] = {"x", "y", "dy", "dx"};
    PD_CHECK(pd_cuda_expect_on_gpu("pool2d backward", 4, tensors, names));
    const int64_t table = pd_cuda_pool2d_argmax_ints(&g);
    if (table > 0)
        PD_CHECK(pd_cuda_scratch(dev, (size_t)table * sizeof(int), &argmax));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_pool2d_backward(&st->launch, &g, x->data, dy->data, argmax, dx->data);
}
