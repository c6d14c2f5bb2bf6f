/* Layer: ReLU. The backward pass reads the output (y > 0), not the input. */
#include "config.h"

#include "graph/pd_layer.h"

static pd_status relu_setup(pd_layer *l)
{
    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    l->out_shape = l->in_shape[0];
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status relu_forward(pd_layer *l, pd_device *dev, bool training)
{
    return dev->ops->relu_forward(dev, l->in[0], l->out);
}

static pd_status relu_backward(pd_layer *l, pd_device *dev)
{
    if (!l->d_in[0])
        return PD_OK;
    return dev->ops->relu_backward(dev, l->out, l->d_out, l->d_in[0]);
}

/* One comparison per element. */
static int64_t relu_flops(const pd_layer *l) { return pd_shape_numel(&l->out_shape); }

static const pd_layer_class relu_class = {
    .type = "relu",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = relu_setup,
    .forward = relu_forward,
    .backward = relu_backward,
    .flops = relu_flops,
};

pd_status pd_graph_relu(pd_graph *g, const char *name, int x, int *out)
{
    return pd_graph_add_layer(g, &relu_class, name, NULL, 0, 1, &x, out);
}
