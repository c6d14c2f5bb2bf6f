/* bf16 mixed precision in the graph: with PD_PRECISION_BF16 the outputs of
 * the computed nodes that other nodes read, and their gradients, are stored
 * in bf16 (half the activation memory), while the parameters (master
 * weights), their gradients, the saved buffers and the graph's outputs (the
 * loss) stay f32. Around each layer step the bf16 tensors it reads and
 * writes are converted to f32 temporaries in a work buffer, the trainable
 * weights are rounded to bf16 there (the copy the step computes with), the
 * layer's f32 kernels compute and accumulate in f32, and a forward step's
 * output is rounded back to bf16. The kernels themselves stay f32: this
 * halves the stored activations, not the bandwidth of the kernels. */
#include "config.h"

#include "graph/pd_graph_int.h"

#define WORK_ALIGNMENT 256

static size_t aligned(size_t bytes) { return (bytes + WORK_ALIGNMENT - 1) & ~(size_t)(WORK_ALIGNMENT - 1); }

pd_status pd_graph_set_precision(pd_graph *g, pd_precision precision)
{
    if (!g)
        return PD_ERROR(PD_EINVAL, "graph: set_precision needs a graph");
    if (g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: the precision is set before pd_graph_allocate");
    if (precision != PD_PRECISION_F32 && precision != PD_PRECISION_TF32 && precision != PD_PRECISION_BF16)
        return PD_ERROR(PD_EINVAL, "graph: unknown precision %d", (int)precision);
    g->precision = precision;
    return PD_OK;
}

pd_dtype pd_graph_stored_dtype(const pd_graph *g, int node)
{
    const pd_layer *l = g->layers[node];

    if (g->precision != PD_PRECISION_BF16 || l->out_dtype != PD_F32 || l->n_inputs == 0)
        return l->out_dtype; /* the caller's inputs keep their dtype */
    if (l->cls->output_aliases_input)
        return pd_graph_stored_dtype(g, l->inputs[0]);
    for (int c = node + 1; c < g->n_layers; c++)
        for (int i = 0; i < g->layers[c]->n_inputs; i++)
            if (g->layers[c]->inputs[i] == node)
                return PD_BF16;
    return l->out_dtype; /* a graph output (the loss) stays f32 */
}

/* The work bytes one step of node k takes. */
static size_t step_work_bytes(const pd_graph *g, int k)
{
    const pd_layer *l = g->layers[k];
    size_t bytes = 0;

    if (l->cls->output_aliases_input)
        return 0; /* a view computes nothing */
    /* A backward step's layout, the larger: the input, its gradient and
     * their sum; the output and its gradient. */
    for (int i = 0; i < l->n_inputs; i++)
        if (pd_graph_stored_dtype(g, l->inputs[i]) == PD_BF16)
            bytes += 3 * aligned((size_t)pd_shape_numel(&l->in_shape[i]) * sizeof(float));
    if (pd_graph_stored_dtype(g, k) == PD_BF16)
        bytes += 2 * aligned((size_t)pd_shape_numel(&l->out_shape) * sizeof(float));
    for (int p = 0; p < l->n_params; p++)
        if (l->params[p]->trainable) {
            const size_t n = (size_t)pd_shape_numel(&l->params[p]->value.shape);
            bytes += aligned(n * pd_dtype_size(PD_BF16)) + aligned(n * sizeof(float));
        }
    return bytes;
}

size_t pd_graph_work_bytes(const pd_graph *g, const bool *runs)
{
    size_t most = 0;

    if (g->precision != PD_PRECISION_BF16)
        return 0;
    for (int k = 0; k < g->n_layers; k++) {
        const size_t bytes = !runs || runs[k] ? step_work_bytes(g, k) : 0;
        most = bytes > most ? bytes : most;
    }
    return most;
}

/* A tensor of `dtype` and `shape` at the work buffer's *cursor, which it
 * advances. */
static void carve(pd_graph *g, char **cursor, pd_dtype dtype, const pd_shape *shape, pd_tensor *t)
{
    pd_tensor_view(t, g->dev, dtype, shape, *cursor);
    *cursor += aligned(pd_tensor_nbytes(t));
}

pd_status pd_graph_step_bind(pd_graph *g, pd_layer *l, bool backward, pd_graph_step *st)
{
    char *cursor = g->work;
    pd_device *dev = g->dev;

    *st = (pd_graph_step){0};
    if (g->precision != PD_PRECISION_BF16 || l->cls->output_aliases_input)
        return PD_OK;
    for (int i = 0; i < l->n_inputs; i++) {
        if (l->in[i]->dtype != PD_BF16)
            continue;
        carve(g, &cursor, PD_F32, &l->in[i]->shape, &st->in[i]);
        PD_CHECK(dev->ops->convert(dev, l->in[i], &st->in[i]));
        l->in[i] = &st->in[i];
    }
    if (l->out->dtype == PD_BF16) {
        carve(g, &cursor, PD_F32, &l->out->shape, &st->out);
        if (backward) /* e.g. relu's backward reads its output */
            PD_CHECK(dev->ops->convert(dev, l->out, &st->out));
        st->stored_out = l->out;
        l->out = &st->out;
    }
    if (backward && l->d_out->dtype == PD_BF16) {
        carve(g, &cursor, PD_F32, &l->d_out->shape, &st->d_out);
        PD_CHECK(dev->ops->convert(dev, l->d_out, &st->d_out));
        l->d_out = &st->d_out;
    }
    for (int i = 0; backward && i < l->n_inputs; i++) {
        pd_tensor *grad = &g->grads[l->inputs[i]];
        if (!l->d_in[i] || l->d_in[i]->dtype != PD_BF16)
            continue;
        carve(g, &cursor, PD_F32, &grad->shape, &st->d_in[i]);
        carve(g, &cursor, PD_F32, &grad->shape, &st->sum[i]);
        st->accumulate[i] = l->d_in[i] != grad;
        st->stored_d_in[i] = grad;
        l->d_in[i] = &st->d_in[i];
    }
    /* The step computes with the bf16 rounding of the master weights,
     * widened to f32 for the f32 kernels; the gradients go to the f32
     * master's gradient tensors. */
    for (int p = 0; p < l->n_params; p++) {
        pd_param *param = l->params[p];
        pd_tensor rounded;
        if (!param->trainable)
            continue;
        carve(g, &cursor, PD_BF16, &param->value.shape, &rounded);
        carve(g, &cursor, PD_F32, &param->value.shape, &st->weight[p]);
        PD_CHECK(dev->ops->convert(dev, &param->value, &rounded));
        PD_CHECK(dev->ops->convert(dev, &rounded, &st->weight[p]));
    }
    /* Swapped only once every conversion succeeded, so that a failure
     * leaves the masters in place. */
    for (int p = 0; p < l->n_params; p++)
        if (st->weight[p].data) {
            st->master[p] = l->params[p]->value.data;
            l->params[p]->value.data = st->weight[p].data;
        }
    return PD_OK;
}

pd_status pd_graph_step_finish(pd_graph *g, pd_layer *l, pd_graph_step *st, bool forward, pd_status s)
{
    pd_device *dev = g->dev;

    for (int p = 0; p < l->n_params; p++)
        if (st->master[p])
            l->params[p]->value.data = st->master[p];
    if (s == PD_OK && forward && st->stored_out)
        s = dev->ops->convert(dev, &st->out, st->stored_out);
    for (int i = 0; s == PD_OK && !forward && i < l->n_inputs; i++) {
        if (!st->stored_d_in[i])
            continue;
        if (!st->accumulate[i]) {
            s = dev->ops->convert(dev, &st->d_in[i], st->stored_d_in[i]);
            continue;
        }
        /* A fan-in gradient sums in f32 and is rounded once per step. */
        s = dev->ops->convert(dev, st->stored_d_in[i], &st->sum[i]);
        if (s == PD_OK)
            s = dev->ops->axpby(dev, 1.0f, &st->d_in[i], 1.0f, &st->sum[i]);
        if (s == PD_OK)
            s = dev->ops->convert(dev, &st->sum[i], st->stored_d_in[i]);
    }
    return s;
}
