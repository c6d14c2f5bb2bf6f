/* Layer: element-wise sum of two activations of one shape (ResNet's
 * shortcut). The gradient passes unchanged to both inputs. */
#include "config.h"

#include "graph/pd_layer.h"

static pd_status add_setup(pd_layer *l)
{
    char a[96], b[96];

    if (l->in_dtype[0] != PD_F32 || l->in_dtype[1] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "inputs must be f32");
    if (!pd_shape_equal(&l->in_shape[0], &l->in_shape[1]))
        return PD_LAYER_SHAPE_ERROR(l, "input shapes differ: %s and %s",
                                    pd_shape_format(&l->in_shape[0], a, sizeof(a)),
                                    pd_shape_format(&l->in_shape[1], b, sizeof(b)));
    l->out_shape = l->in_shape[0];
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status add_forward(pd_layer *l, pd_device *dev, bool training)
{
    return dev->ops->add(dev, l->in[0], l->in[1], l->out);
}

static pd_status add_backward(pd_layer *l, pd_device *dev)
{
    for (int i = 0; i < 2; i++)
        if (l->d_in[i])
            PD_CHECK(pd_tensor_copy(l->d_in[i], l->d_out));
    return PD_OK;
}

/* One addition per element. */
static int64_t add_flops(const pd_layer *l) { return pd_shape_numel(&l->out_shape); }

static const pd_layer_class add_class = {
    .type = "add",
    .min_inputs = 2,
    .max_inputs = 2,
    .setup = add_setup,
    .forward = add_forward,
    .backward = add_backward,
    .flops = add_flops,
};

pd_status pd_graph_add(pd_graph *g, const char *name, int a, int b, int *out)
{
    int inputs[2] = {a, b};
    return pd_graph_add_layer(g, &add_class, name, NULL, 0, 2, inputs, out);
}
