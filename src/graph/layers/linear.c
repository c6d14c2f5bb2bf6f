/* Layer: fully connected, x [N,K] -> y [N,M] with weight [M,K] and an
 * optional bias [M], initialised as PyTorch's Linear: U(-1/sqrt(K),
 * 1/sqrt(K)) for both. Models flatten image activations first. */
#include "config.h"

#include <assert.h>
#include <math.h>

#include "graph/pd_layer.h"

typedef struct linear_hparams {
    int out_features;
    bool bias;
} linear_hparams;

static_assert(sizeof(linear_hparams) <= PD_LAYER_HPARAMS_BYTES, "linear hyper-parameters exceed the layer's room");

static pd_status linear_setup(pd_layer *l)
{
    const linear_hparams *hp = (const linear_hparams *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 2 || in->dim[1] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "input must be 2-D [N,K] with K > 0 (flatten first), got %s",
                                    pd_shape_format(in, buf, sizeof(buf)));
    if (hp->out_features <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "output features %d must be positive", hp->out_features);

    float bound = (float)(1.0 / sqrt((double)in->dim[1]));
    pd_shape w_shape = pd_shape_make(2, (int64_t)hp->out_features, in->dim[1]);
    PD_CHECK(pd_layer_declare_param(l, "weight", &w_shape, true, PD_INIT_UNIFORM, bound, NULL));
    if (hp->bias) {
        pd_shape b_shape = pd_shape_make(1, (int64_t)hp->out_features);
        PD_CHECK(pd_layer_declare_param(l, "bias", &b_shape, true, PD_INIT_UNIFORM, bound, NULL));
    }
    l->out_shape = pd_shape_make(2, in->dim[0], (int64_t)hp->out_features);
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status linear_forward(pd_layer *l, pd_device *dev, bool training)
{
    const linear_hparams *hp = (const linear_hparams *)l->hparams;

    return dev->ops->linear_forward(dev, l->in[0], &l->params[0]->value, hp->bias ? &l->params[1]->value : NULL,
                                    l->out);
}

static pd_status linear_backward(pd_layer *l, pd_device *dev)
{
    const linear_hparams *hp = (const linear_hparams *)l->hparams;

    /* The kernel skips dx when d_in[0] is NULL but always computes dw. */
    return dev->ops->linear_backward(dev, l->in[0], &l->params[0]->value, l->d_out, l->d_in[0],
                                     &l->params[0]->grad, hp->bias ? &l->params[1]->grad : NULL);
}

/* 2 per multiply-add of the product, 1 per output for the bias. */
static int64_t linear_flops(const pd_layer *l)
{
    const linear_hparams *hp = (const linear_hparams *)l->hparams;

    return pd_shape_numel(&l->out_shape) * (2 * l->in_shape[0].dim[1] + (hp->bias ? 1 : 0));
}

static const pd_layer_class linear_class = {
    .type = "linear",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = linear_setup,
    .forward = linear_forward,
    .backward = linear_backward,
    .flops = linear_flops,
};

pd_status pd_graph_linear(pd_graph *g, const char *name, int x, int out_features, bool bias, int *out)
{
    linear_hparams hp = {0};

    hp.out_features = out_features;
    hp.bias = bias;
    return pd_graph_add_layer(g, &linear_class, name, &hp, sizeof(hp), 1, &x, out);
}
