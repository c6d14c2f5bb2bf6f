/* Layer: inverted dropout. The mask of minibatch b is drawn from
 * pd_rng_derive(graph seed, layer id, b), so the backward pass of b — even
 * after other minibatches' forward passes, as in 1F1B — recomputes the same
 * mask instead of storing it. Evaluation passes the input through. */
#include "config.h"

#include <assert.h>

#include "graph/pd_layer.h"

typedef struct dropout_hparams {
    float p;
} dropout_hparams;

static_assert(sizeof(dropout_hparams) <= PD_LAYER_HPARAMS_BYTES, "dropout hyper-parameters exceed the room");

static uint64_t dropout_seed(const pd_layer *l)
{
    return pd_rng_derive(l->seed, (uint64_t)l->id, (uint64_t)l->minibatch);
}

static pd_status dropout_setup(pd_layer *l)
{
    const dropout_hparams *hp = (const dropout_hparams *)l->hparams;

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (!(hp->p >= 0.0f && hp->p < 1.0f))
        return PD_LAYER_SHAPE_ERROR(l, "drop probability p must be in [0,1), got %g", (double)hp->p);
    l->out_shape = l->in_shape[0];
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status dropout_forward(pd_layer *l, pd_device *dev, bool training)
{
    const dropout_hparams *hp = (const dropout_hparams *)l->hparams;

    if (!training)
        return pd_tensor_copy(l->out, l->in[0]);
    return dev->ops->dropout_forward(dev, hp->p, dropout_seed(l), l->in[0], l->out);
}

static pd_status dropout_backward(pd_layer *l, pd_device *dev)
{
    const dropout_hparams *hp = (const dropout_hparams *)l->hparams;

    if (!l->d_in[0])
        return PD_OK;
    return dev->ops->dropout_backward(dev, hp->p, dropout_seed(l), l->d_out, l->d_in[0]);
}

/* The mask's multiplication, one per element (of a training pass). */
static int64_t dropout_flops(const pd_layer *l) { return pd_shape_numel(&l->out_shape); }

static const pd_layer_class dropout_class = {
    .type = "dropout",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = dropout_setup,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .flops = dropout_flops,
};

pd_status pd_graph_dropout(pd_graph *g, const char *name, int x, float p, int *out)
{
    dropout_hparams hp = {p};
    return pd_graph_add_layer(g, &dropout_class, name, &hp, sizeof(hp), 1, &x, out);
}
