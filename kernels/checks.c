/* Argument checks shared by every backend. */
#include "config.h"

#include "kernels/pd_kernels_int.h"

pd_status pd_kernel_expect_f32(const pd_tensor *t, const pd_shape *shape, const char *what)
{
    if (!t)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what);
    PD_CHECK(pd_tensor_expect(t, PD_F32, shape, what));
    if (!pd_tensor_is_contiguous(t))
        return PD_ERROR(PD_ESHAPE, "%s: tensor is not contiguous", what);
    return PD_OK;
}

pd_status pd_kernel_expect_same(const pd_tensor *a, const pd_tensor *b, const char *what)
{
    if (!a || !b)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what);
    return pd_tensor_expect(b, a->dtype, &a->shape, what);
}

int64_t pd_window_output_size(int64_t in, int kernel, int stride, int pad, int dilation, bool ceil_mode)
{
    int64_t span = in + 2 * (int64_t)pad - (int64_t)dilation * (kernel - 1) - 1;
    int64_t out;

    if (stride <= 0 || kernel <= 0 || dilation <= 0 || span < 0)
        return 0;
    out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    /* PyTorch: the last window must start inside the input or left padding. */
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}
