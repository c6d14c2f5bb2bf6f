/* Layer: cross-channel local response normalisation over [N,C,H,W], as
 * torch.nn.LocalResponseNorm(size, alpha, beta, k) (AlexNet, GoogLeNet). The
 * backward pass reads the input and the output. */
#include "config.h"

#include <assert.h>
#include <math.h>

#include "graph/pd_layer.h"

static_assert(sizeof(pd_lrn_desc) <= PD_LAYER_HPARAMS_BYTES, "lrn hyper-parameters exceed the layer's room");

static pd_status lrn_setup(pd_layer *l)
{
    const pd_lrn_desc *d = (const pd_lrn_desc *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 4)
        return PD_LAYER_SHAPE_ERROR(l, "input must be [N,C,H,W], got %s", pd_shape_format(in, buf, sizeof(buf)));
    if (d->size < 1)
        return PD_LAYER_SHAPE_ERROR(l, "size must be >= 1, got %d", d->size);
    /* k > 0 keeps the denominator away from 0^-beta on all-zero windows. */
    if (!(d->k > 0.0f) || !isfinite(d->k))
        return PD_LAYER_SHAPE_ERROR(l, "k must be a positive number, got %g", (double)d->k);
    if (!(d->alpha >= 0.0f) || !isfinite(d->alpha))
        return PD_LAYER_SHAPE_ERROR(l, "alpha must be a number >= 0, got %g", (double)d->alpha);
    if (!isfinite(d->beta))
        return PD_LAYER_SHAPE_ERROR(l, "beta must be finite, got %g", (double)d->beta);
    l->out_shape = *in;
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status lrn_forward(pd_layer *l, pd_device *dev, bool training)
{
    return dev->ops->lrn_forward(dev, (const pd_lrn_desc *)l->hparams, l->in[0], l->out);
}

static pd_status lrn_backward(pd_layer *l, pd_device *dev)
{
    if (!l->d_in[0])
        return PD_OK;
    return dev->ops->lrn_backward(dev, (const pd_lrn_desc *)l->hparams, l->in[0], l->out, l->d_out, l->d_in[0]);
}

/* Per element: the square, `size` additions over the channel window, the
 * scale and offset (2), the power and the division. */
static int64_t lrn_flops(const pd_layer *l)
{
    const pd_lrn_desc *d = (const pd_lrn_desc *)l->hparams;

    return pd_shape_numel(&l->out_shape) * ((int64_t)d->size + 5);
}

static const pd_layer_class lrn_class = {
    .type = "lrn",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = lrn_setup,
    .forward = lrn_forward,
    .backward = lrn_backward,
    .flops = lrn_flops,
};

pd_status pd_graph_lrn(pd_graph *g, const char *name, int x, const pd_lrn_desc *desc, int *out)
{
    if (!desc)
        return PD_ERROR(PD_EINVAL, "lrn '%s': no descriptor", name ? name : "?");
    return pd_graph_add_layer(g, &lrn_class, name, desc, sizeof(*desc), 1, &x, out);
}
