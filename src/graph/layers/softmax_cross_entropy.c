/* Layer: mean softmax cross-entropy of logits [N,C] (f32) against labels [N]
 * (i32); the output is the scalar loss [1]. The probabilities are saved for
 * the backward pass; labels get no gradient. */
#include "config.h"

#include "graph/pd_layer.h"

enum { SCE_PROBS };

static pd_status sce_setup(pd_layer *l)
{
    const pd_shape *logits = &l->in_shape[0], *labels = &l->in_shape[1];
    char a[96], b[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "logits must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (l->in_dtype[1] != PD_I32)
        return PD_LAYER_SHAPE_ERROR(l, "labels must be i32, got %s", pd_dtype_name(l->in_dtype[1]));
    if (logits->ndim != 2 || logits->dim[1] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "logits must be [N,C] with C > 0, got %s",
                                    pd_shape_format(logits, a, sizeof(a)));
    if (labels->ndim != 1 || labels->dim[0] != logits->dim[0])
        return PD_LAYER_SHAPE_ERROR(l, "labels must be [N] for logits %s, got %s",
                                    pd_shape_format(logits, a, sizeof(a)), pd_shape_format(labels, b, sizeof(b)));
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, logits, NULL));
    l->out_shape = pd_shape_make(1, (int64_t)1);
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status sce_forward(pd_layer *l, pd_device *dev, bool training)
{
    return dev->ops->softmax_cross_entropy_forward(dev, l->in[0], l->in[1], &l->saved[SCE_PROBS], l->out);
}

static pd_status sce_backward(pd_layer *l, pd_device *dev)
{
    float dloss;

    if (!l->d_in[0])
        return PD_OK;
    PD_CHECK(pd_tensor_copy_to_host(l->d_out, &dloss, sizeof(dloss)));
    return dev->ops->softmax_cross_entropy_backward(dev, &l->saved[SCE_PROBS], l->in[1], dloss, l->d_in[0]);
}

/* Per logit: the running maximum, the subtraction, the exponential and the
 * sum (4); the per-row logarithm and the mean are negligible. */
static int64_t sce_flops(const pd_layer *l) { return 4 * pd_shape_numel(&l->in_shape[0]); }

static const pd_layer_class sce_class = {
    .type = "softmax_cross_entropy",
    .min_inputs = 2,
    .max_inputs = 2,
    .setup = sce_setup,
    .forward = sce_forward,
    .backward = sce_backward,
    .flops = sce_flops,
};

pd_status pd_graph_softmax_cross_entropy(pd_graph *g, const char *name, int logits, int labels, int *out)
{
    const int inputs[2] = {logits, labels};
    return pd_graph_add_layer(g, &sce_class, name, NULL, 0, 2, inputs, out);
}
