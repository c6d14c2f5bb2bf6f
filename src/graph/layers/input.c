/* Layer: a graph input (images, labels, or a pipeline stage's incoming
 * activation). Its output buffer is where the caller puts the data. */
#include "config.h"

#include "graph/pd_layer.h"

/* requires_grad must stay the first member: the graph reads it. */
typedef struct input_hparams {
    bool requires_grad;
    pd_dtype dtype;
    pd_shape shape;
} input_hparams;

_Static_assert(sizeof(input_hparams) <= PD_LAYER_HPARAMS_BYTES, "input hyper-parameters too large");

static pd_status input_setup(pd_layer *l)
{
    const input_hparams *hp = (const input_hparams *)l->hparams;

    if ((unsigned)hp->dtype >= PD_DTYPE_COUNT)
        return PD_LAYER_SHAPE_ERROR(l, "invalid dtype %d", (int)hp->dtype);
    if (hp->shape.ndim < 1 || hp->shape.ndim > PD_MAX_DIMS)
        return PD_LAYER_SHAPE_ERROR(l, "rank %d is outside 1..%d", hp->shape.ndim, PD_MAX_DIMS);
    for (int i = 0; i < hp->shape.ndim; i++)
        if (hp->shape.dim[i] <= 0)
            return PD_LAYER_SHAPE_ERROR(l, "dimension %d is %lld; dimensions must be positive", i,
                                        (long long)hp->shape.dim[i]);
    if (hp->requires_grad && hp->dtype != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "only f32 inputs can require a gradient, not %s", pd_dtype_name(hp->dtype));
    l->out_shape = hp->shape;
    l->out_dtype = hp->dtype;
    return PD_OK;
}

static pd_status input_forward(pd_layer *l, pd_device *dev, bool training) { return PD_OK; }

static pd_status input_backward(pd_layer *l, pd_device *dev) { return PD_OK; }

static const pd_layer_class input_class = {
    .type = "input",
    .min_inputs = 0,
    .max_inputs = 0,
    .setup = input_setup,
    .forward = input_forward,
    .backward = input_backward,
    /* no .flops: data arrives from outside, 0 FLOPs */
};

pd_status pd_graph_input(pd_graph *g, const char *name, pd_dtype dtype, const pd_shape *shape, bool requires_grad,
                         int *out)
{
    input_hparams hp = {requires_grad, dtype, *shape};
    return pd_graph_add_layer(g, &input_class, name, &hp, sizeof(hp), 0, NULL, out);
}
