/* Layer: 2-D max or average pooling over NCHW input with PyTorch's
 * MaxPool2d/AvgPool2d semantics. A 0x0 kernel means global pooling: the
 * window is the whole input plane (stride = kernel, no padding), resolved
 * from the input shape at every call so the hyper-parameters stay as given. */
#include "config.h"

#include <assert.h>
#include <limits.h>

#include "graph/pd_layer.h"
#include "kernels/pd_kernels_int.h"

static_assert(sizeof(pd_pool2d_desc) <= PD_LAYER_HPARAMS_BYTES, "pool2d hyper-parameters exceed the layer's room");

static bool is_global(const pd_pool2d_desc *d) { return d->kernel_h == 0 && d->kernel_w == 0; }

/* The descriptor the kernels run with. */
static pd_pool2d_desc pool2d_resolve(const pd_layer *l)
{
    pd_pool2d_desc d = *(const pd_pool2d_desc *)l->hparams;

    if (is_global(&d)) {
        d.kernel_h = d.stride_h = (int)l->in_shape[0].dim[2];
        d.kernel_w = d.stride_w = (int)l->in_shape[0].dim[3];
        d.pad_h = d.pad_w = 0;
        d.ceil_mode = false;
    }
    return d;
}

static pd_status pool2d_setup(pd_layer *l)
{
    const pd_pool2d_desc *given = (const pd_pool2d_desc *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 4 || in->dim[1] <= 0 || in->dim[2] <= 0 || in->dim[3] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "input must be [N,C,H,W] with C, H, W > 0, got %s",
                                    pd_shape_format(in, buf, sizeof(buf)));
    if (given->mode != PD_POOL_MAX && given->mode != PD_POOL_AVG)
        return PD_LAYER_SHAPE_ERROR(l, "unknown pooling mode %d", (int)given->mode);
    if (is_global(given)) {
        if (given->pad_h != 0 || given->pad_w != 0)
            return PD_LAYER_SHAPE_ERROR(l, "global pooling (kernel 0x0) takes no padding, got %dx%d", given->pad_h,
                                        given->pad_w);
        if (in->dim[2] > INT_MAX || in->dim[3] > INT_MAX)
            return PD_LAYER_SHAPE_ERROR(l, "input plane %s too large for global pooling",
                                        pd_shape_format(in, buf, sizeof(buf)));
    } else {
        if (given->kernel_h <= 0 || given->kernel_w <= 0)
            return PD_LAYER_SHAPE_ERROR(l, "kernel %dx%d must be positive (or 0x0 for global pooling)",
                                        given->kernel_h, given->kernel_w);
        if (given->stride_h <= 0 || given->stride_w <= 0)
            return PD_LAYER_SHAPE_ERROR(l, "stride %dx%d must be positive", given->stride_h, given->stride_w);
        if (given->pad_h < 0 || given->pad_w < 0 || given->pad_h > given->kernel_h / 2 ||
            given->pad_w > given->kernel_w / 2)
            return PD_LAYER_SHAPE_ERROR(l, "padding %dx%d must lie between 0 and half the kernel %dx%d",
                                        given->pad_h, given->pad_w, given->kernel_h, given->kernel_w);
    }

    pd_pool2d_desc d = pool2d_resolve(l);
    int64_t p = pd_window_output_size(in->dim[2], d.kernel_h, d.stride_h, d.pad_h, 1, d.ceil_mode);
    int64_t q = pd_window_output_size(in->dim[3], d.kernel_w, d.stride_w, d.pad_w, 1, d.ceil_mode);
    if (p <= 0 || q <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "kernel %dx%d does not fit the padded input %lldx%lld", d.kernel_h, d.kernel_w,
                                    (long long)(in->dim[2] + 2 * d.pad_h), (long long)(in->dim[3] + 2 * d.pad_w));
    l->out_shape = pd_shape_make(4, in->dim[0], in->dim[1], p, q);
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status pool2d_forward(pd_layer *l, pd_device *dev, bool training)
{
    pd_pool2d_desc d = pool2d_resolve(l);

    return dev->ops->pool2d_forward(dev, &d, l->in[0], l->out);
}

static pd_status pool2d_backward(pd_layer *l, pd_device *dev)
{
    pd_pool2d_desc d = pool2d_resolve(l);

    if (!l->d_in[0])
        return PD_OK;
    return dev->ops->pool2d_backward(dev, &d, l->in[0], l->out, l->d_out, l->d_in[0]);
}

/* One comparison (max) or addition (average) per window element of every
 * output, padding included. */
static int64_t pool2d_flops(const pd_layer *l)
{
    pd_pool2d_desc d = pool2d_resolve(l);

    return pd_shape_numel(&l->out_shape) * d.kernel_h * d.kernel_w;
}

static const pd_layer_class pool2d_class = {
    .type = "pool2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = pool2d_setup,
    .forward = pool2d_forward,
    .backward = pool2d_backward,
    .flops = pool2d_flops,
};

pd_status pd_graph_pool2d(pd_graph *g, const char *name, int x, const pd_pool2d_desc *desc, int *out)
{
    if (!desc)
        return PD_ERROR(PD_EINVAL, "pool2d '%s': missing descriptor", name ? name : "");
    return pd_graph_add_layer(g, &pool2d_class, name, desc, sizeof(*desc), 1, &x, out);
}
