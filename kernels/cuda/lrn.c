/* Local response normalisation entries of the CUDA backend: the shared
 * checks, then our kernels (lrn.cu), which compute the CPU's function for
 * every window size, alpha, beta and k (cuDNN's LRN does not; see lrn.cu). */
#include "config.h"

#include "kernels/cuda/pd_cuda_nn.h"
#include "kernels/pd_kernels_int.h"

pd_status pd_cuda_lrn_forward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    pd_lrn_dims d;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_lrn_forward(desc, x, y, &d));
    const pd_tensor *tensors[] = {x, y};
    const char *const names[] = {"x", "y"};
    PD_CHECK(pd_cuda_expect_on_gpu("lrn forward", 2, tensors, names));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_lrn_forward(&st->launch, desc, d.n, d.c, d.spatial, x->data, y->data);
}

pd_status pd_cuda_lrn_backward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                               const pd_tensor *dy, pd_tensor *dx)
{
    pd_lrn_dims d;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_lrn_backward(desc, x, y, dy, dx, &d));
    const pd_tensor *tensors[] = {x, y, dy, dx};
    const char *const names[] = {"x", "y", "dy", "dx"};
    PD_CHECK(pd_cuda_expect_on_gpu("lrn backward", 4, tensors, names));
    PD_CHECK(pd_cuda_enter(dev, &st));
    return pd_cuda_launch_lrn_backward(&st->launch, desc, d.n, d.c, d.spatial, x->data, y->data, dy->data,
                                       dx->data);
}
