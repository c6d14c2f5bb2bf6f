/* Layer: batch normalisation over [N,C] or [N,C,H,W], as PyTorch's
 * BatchNorm1d/2d with affine parameters and tracked running statistics:
 * weight (gamma, init 1) and bias (beta, init 0) are trained; running_mean
 * (0) and running_var (1) are buffers updated by training forward passes and
 * used in evaluation. The batch mean and 1/sqrt(var+eps) are saved for the
 * backward pass. */
#include "config.h"

#include <assert.h>
#include <math.h>

#include "graph/pd_layer.h"

static_assert(sizeof(pd_batchnorm_desc) <= PD_LAYER_HPARAMS_BYTES, "batchnorm hyper-parameters exceed the room");

enum { BN_WEIGHT, BN_BIAS, BN_RUNNING_MEAN, BN_RUNNING_VAR };
enum { BN_SAVE_MEAN, BN_SAVE_INVSTD };

static pd_status batchnorm_setup(pd_layer *l)
{
    const pd_batchnorm_desc *d = (const pd_batchnorm_desc *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if ((in->ndim != 2 && in->ndim != 4) || in->dim[1] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "input must be [N,C] or [N,C,H,W] with C > 0, got %s",
                                    pd_shape_format(in, buf, sizeof(buf)));
    if (!(d->eps > 0.0f) || !isfinite(d->eps))
        return PD_LAYER_SHAPE_ERROR(l, "eps must be a positive number, got %g", (double)d->eps);
    if (!(d->momentum >= 0.0f && d->momentum <= 1.0f))
        return PD_LAYER_SHAPE_ERROR(l, "momentum must be in [0,1], got %g", (double)d->momentum);

    pd_shape c = pd_shape_make(1, in->dim[1]);
    PD_CHECK(pd_layer_declare_param(l, "weight", &c, true, PD_INIT_CONSTANT, 1.0f, NULL));
    PD_CHECK(pd_layer_declare_param(l, "bias", &c, true, PD_INIT_CONSTANT, 0.0f, NULL));
    PD_CHECK(pd_layer_declare_param(l, "running_mean", &c, false, PD_INIT_CONSTANT, 0.0f, NULL));
    PD_CHECK(pd_layer_declare_param(l, "running_var", &c, false, PD_INIT_CONSTANT, 1.0f, NULL));
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, &c, NULL));
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, &c, NULL));
    l->out_shape = *in;
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status batchnorm_forward(pd_layer *l, pd_device *dev, bool training)
{
    const pd_batchnorm_desc *d = (const pd_batchnorm_desc *)l->hparams;
    pd_param *const *p = l->params;

    if (!training)
        return dev->ops->batchnorm_forward_eval(dev, d, l->in[0], &p[BN_WEIGHT]->value, &p[BN_BIAS]->value,
                                                &p[BN_RUNNING_MEAN]->value, &p[BN_RUNNING_VAR]->value, l->out);
    return dev->ops->batchnorm_forward_train(dev, d, l->in[0], &p[BN_WEIGHT]->value, &p[BN_BIAS]->value,
                                             &p[BN_RUNNING_MEAN]->value, &p[BN_RUNNING_VAR]->value, l->out,
                                             &l->saved[BN_SAVE_MEAN], &l->saved[BN_SAVE_INVSTD]);
}

static pd_status batchnorm_backward(pd_layer *l, pd_device *dev)
{
    const pd_batchnorm_desc *d = (const pd_batchnorm_desc *)l->hparams;
    pd_param *const *p = l->params;

    /* dx is NULL when the input needs no gradient; gamma's and beta's are always made. */
    return dev->ops->batchnorm_backward(dev, d, l->in[0], l->d_out, &p[BN_WEIGHT]->value, &l->saved[BN_SAVE_MEAN],
                                        &l->saved[BN_SAVE_INVSTD], l->d_in[0], &p[BN_WEIGHT]->grad,
                                        &p[BN_BIAS]->grad);
}

/* The normalisation folded into one multiply-add per element (2); the
 * batch statistics are not counted, as in the usual inference counts. */
static int64_t batchnorm_flops(const pd_layer *l) { return 2 * pd_shape_numel(&l->out_shape); }

static const pd_layer_class batchnorm_class = {
    .type = "batchnorm",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = batchnorm_setup,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .flops = batchnorm_flops,
};

pd_status pd_graph_batchnorm(pd_graph *g, const char *name, int x, const pd_batchnorm_desc *desc, int *out)
{
    if (!desc)
        return PD_ERROR(PD_EINVAL, "batchnorm '%s': no descriptor", name ? name : "?");
    return pd_graph_add_layer(g, &batchnorm_class, name, desc, sizeof(*desc), 1, &x, out);
}
