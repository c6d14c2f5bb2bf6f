/* Layer: 2-D convolution over NCHW input, weight [K, C/groups, R, S] and an
 * optional bias [K], initialised as PyTorch's Conv2d: U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)) with fan_in = C/groups * R * S for both. */
#include "config.h"

#include <assert.h>
#include <math.h>

#include "graph/pd_layer.h"
#include "kernels/pd_kernels_int.h"

typedef struct conv2d_hparams {
    pd_conv2d_desc desc;
    int out_channels;
    bool bias;
} conv2d_hparams;

static_assert(sizeof(conv2d_hparams) <= PD_LAYER_HPARAMS_BYTES, "conv2d hyper-parameters exceed the layer's room");

static pd_status conv2d_setup(pd_layer *l)
{
    const conv2d_hparams *hp = (const conv2d_hparams *)l->hparams;
    const pd_conv2d_desc *d = &hp->desc;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 4 || in->dim[1] <= 0 || in->dim[2] <= 0 || in->dim[3] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "input must be [N,C,H,W] with C, H, W > 0, got %s",
                                    pd_shape_format(in, buf, sizeof(buf)));
    if (d->kernel_h <= 0 || d->kernel_w <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "kernel %dx%d must be positive", d->kernel_h, d->kernel_w);
    if (d->stride_h <= 0 || d->stride_w <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "stride %dx%d must be positive", d->stride_h, d->stride_w);
    if (d->pad_h < 0 || d->pad_w < 0)
        return PD_LAYER_SHAPE_ERROR(l, "padding %dx%d must not be negative", d->pad_h, d->pad_w);
    if (d->dilation_h <= 0 || d->dilation_w <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "dilation %dx%d must be positive", d->dilation_h, d->dilation_w);
    if (hp->out_channels <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "output channels %d must be positive", hp->out_channels);
    if (d->groups <= 0 || in->dim[1] % d->groups != 0 || hp->out_channels % d->groups != 0)
        return PD_LAYER_SHAPE_ERROR(l, "groups %d must be positive and divide input channels %lld and output "
                                    "channels %d", d->groups, (long long)in->dim[1], hp->out_channels);

    int64_t p = pd_window_output_size(in->dim[2], d->kernel_h, d->stride_h, d->pad_h, d->dilation_h, false);
    int64_t q = pd_window_output_size(in->dim[3], d->kernel_w, d->stride_w, d->pad_w, d->dilation_w, false);
    if (p <= 0 || q <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "kernel %dx%d with dilation %dx%d does not fit the padded input %lldx%lld",
                                    d->kernel_h, d->kernel_w, d->dilation_h, d->dilation_w,
                                    (long long)(in->dim[2] + 2 * d->pad_h), (long long)(in->dim[3] + 2 * d->pad_w));

    int64_t cg = in->dim[1] / d->groups;
    float bound = (float)(1.0 / sqrt((double)(cg * d->kernel_h * d->kernel_w)));
    pd_shape w_shape = pd_shape_make(4, (int64_t)hp->out_channels, cg, (int64_t)d->kernel_h, (int64_t)d->kernel_w);
    PD_CHECK(pd_layer_declare_param(l, "weight", &w_shape, true, PD_INIT_UNIFORM, bound, NULL));
    if (hp->bias) {
        pd_shape b_shape = pd_shape_make(1, (int64_t)hp->out_channels);
        PD_CHECK(pd_layer_declare_param(l, "bias", &b_shape, true, PD_INIT_UNIFORM, bound, NULL));
    }
    l->out_shape = pd_shape_make(4, in->dim[0], (int64_t)hp->out_channels, p, q);
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status conv2d_forward(pd_layer *l, pd_device *dev, bool training)
{
    const conv2d_hparams *hp = (const conv2d_hparams *)l->hparams;

    return dev->ops->conv2d_forward(dev, &hp->desc, l->in[0], &l->params[0]->value,
                                    hp->bias ? &l->params[1]->value : NULL, l->out);
}

static pd_status conv2d_backward(pd_layer *l, pd_device *dev)
{
    const conv2d_hparams *hp = (const conv2d_hparams *)l->hparams;

    PD_CHECK(dev->ops->conv2d_backward_filter(dev, &hp->desc, l->in[0], l->d_out, &l->params[0]->grad,
                                              hp->bias ? &l->params[1]->grad : NULL));
    if (!l->d_in[0])
        return PD_OK;
    return dev->ops->conv2d_backward_data(dev, &hp->desc, l->d_out, &l->params[0]->value, l->d_in[0]);
}

/* 2 per multiply-add of the convolution, 1 per output for the bias. */
static int64_t conv2d_flops(const pd_layer *l)
{
    const conv2d_hparams *hp = (const conv2d_hparams *)l->hparams;
    const pd_conv2d_desc *d = &hp->desc;
    int64_t outputs = pd_shape_numel(&l->out_shape);
    int64_t macs_per_output = l->in_shape[0].dim[1] / d->groups * d->kernel_h * d->kernel_w;

    return outputs * (2 * macs_per_output + (hp->bias ? 1 : 0));
}

static const pd_layer_class conv2d_class = {
    .type = "conv2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = conv2d_setup,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .flops = conv2d_flops,
};

pd_status pd_graph_conv2d(pd_graph *g, const char *name, int x, int out_channels, const pd_conv2d_desc *desc,
                          bool bias, int *out)
{
    conv2d_hparams hp = {0};

    if (!desc)
        return PD_ERROR(PD_EINVAL, "conv2d '%s': missing descriptor", name ? name : "");
    hp.desc = *desc;
    hp.out_channels = out_channels;
    hp.bias = bias;
    return pd_graph_add_layer(g, &conv2d_class, name, &hp, sizeof(hp), 1, &x, out);
}
