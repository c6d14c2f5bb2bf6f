/* Layer: [N, ...] -> [N, prod(...)]. The output is the input's memory with
 * another shape; the backward pass copies the gradient back. */
#include "config.h"

#include "graph/pd_layer.h"

static pd_status flatten_setup(pd_layer *l)
{
    if (l->in_shape[0].ndim < 1)
        return PD_LAYER_SHAPE_ERROR(l, "input has rank 0");
    l->out_shape = pd_shape_make(2, l->in_shape[0].dim[0], pd_shape_numel(&l->in_shape[0]) / l->in_shape[0].dim[0]);
    l->out_dtype = l->in_dtype[0];
    return PD_OK;
}

static pd_status flatten_forward(pd_layer *l, pd_device *dev, bool training) { return PD_OK; }

static pd_status flatten_backward(pd_layer *l, pd_device *dev)
{
    return l->d_in[0] ? pd_tensor_copy(l->d_in[0], l->d_out) : PD_OK;
}

static const pd_layer_class flatten_class = {
    .type = "flatten",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
    /* no .flops: a view, 0 FLOPs */
    .output_aliases_input = true,
};

pd_status pd_graph_flatten(pd_graph *g, const char *name, int x, int *out)
{
    return pd_graph_add_layer(g, &flatten_class, name, NULL, 0, 1, &x, out);
}
