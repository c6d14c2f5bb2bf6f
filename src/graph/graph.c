/* Running a graph: queries on an allocated graph (graph_alloc.c allocates
 * it), and the forward and backward passes, whole or of some nodes. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/pd_graph_int.h"

int pd_graph_size(const pd_graph *g) { return g->n_layers; }

const char *pd_graph_node_name(const pd_graph *g, int node) { return g->layers[node]->name; }

const char *pd_graph_node_type(const pd_graph *g, int node) { return g->layers[node]->cls->type; }

const pd_shape *pd_graph_node_shape(const pd_graph *g, int node) { return &g->layers[node]->out_shape; }

int pd_graph_node_inputs(const pd_graph *g, int node, const int **inputs)
{
    *inputs = g->layers[node]->inputs;
    return g->layers[node]->n_inputs;
}

int pd_graph_params(pd_graph *g, pd_param ***params_out)
{
    *params_out = g->params;
    return g->n_params;
}

int64_t pd_graph_param_count(const pd_graph *g)
{
    int64_t n = 0;

    for (int i = 0; i < g->n_layers; i++)
        n += pd_graph_node_param_count(g, i);
    return n;
}

size_t pd_graph_arena_bytes(const pd_graph *g) { return g->arena_bytes; }

size_t pd_graph_unplanned_bytes(const pd_graph *g) { return g->unplanned_bytes; }

pd_tensor *pd_graph_output(pd_graph *g, int node)
{
    return g->allocated && node >= 0 && node < g->n_layers && g->held[node] ? &g->outputs[node] : NULL;
}

pd_tensor *pd_graph_grad(pd_graph *g, int node)
{
    if (!g->allocated || node < 0 || node >= g->n_layers || !g->grad_written[node])
        return NULL;
    return &g->grads[node];
}

void pd_graph_print(const pd_graph *g, FILE *f)
{
    char shape[96];

    for (int i = 0; i < g->n_layers; i++) {
        const pd_layer *l = g->layers[i];
        fprintf(f, "%4d  %-28s %-22s %-5s %-20s %10lld  <-", i, l->name, l->cls->type, pd_dtype_name(l->out_dtype),
                pd_shape_format(&l->out_shape, shape, sizeof(shape)), (long long)pd_graph_node_param_count(g, i));
        for (int k = 0; k < l->n_inputs; k++)
            fprintf(f, " %d", l->inputs[k]);
        fputc('\n', f);
    }
}

/* ---- passes -------------------------------------------------------------- */

/* Binds node k's input and output tensors and its minibatch, as every pass
 * (whole or single-node) does before calling the layer. */
static void bind_inputs(pd_graph *g, pd_layer *l, int64_t minibatch)
{
    for (int i = 0; i < l->n_inputs; i++)
        l->in[i] = &g->outputs[l->inputs[i]];
    l->out = &g->outputs[l->id];
    l->minibatch = minibatch;
}

/* PD_ESTATE unless node k's steps were allocated (pd_graph_allocate_nodes). */
static pd_status check_runs(const pd_graph *g, int k, const char *pass)
{
    if (!g->runs[k])
        return PD_ERROR(PD_ESTATE, "graph: %s of node '%s' (%d), which is not in the allocated part of the graph",
                        pass, g->layers[k]->name, k);
    return PD_OK;
}

/* Step k of a forward pass. */
static pd_status forward_step(pd_graph *g, int k, int64_t minibatch, bool training)
{
    pd_layer *l = g->layers[k];
    pd_graph_step st;

    PD_CHECK(check_runs(g, k, "forward"));
    bind_inputs(g, l, minibatch);
    PD_CHECK(pd_graph_step_bind(g, l, false, &st));
    return pd_graph_step_finish(g, l, &st, true, l->cls->forward(l, g->dev, training));
}

pd_status pd_graph_forward(pd_graph *g, int64_t minibatch, bool training)
{
    if (!g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: forward before pd_graph_allocate");
    for (int k = 0; k < g->n_layers; k++)
        PD_CHECK(forward_step(g, k, minibatch, training));
    g->forward_minibatch = minibatch;
    g->forward_training = training;
    g->forward_done = true;
    return PD_OK;
}

static pd_status seed_gradient(pd_graph *g, int from, const pd_tensor *seed_grad)
{
    pd_tensor *grad = &g->grads[from];

    if (seed_grad) {
        PD_CHECK(pd_tensor_expect(seed_grad, grad->dtype, &grad->shape, "backward seed gradient"));
        return pd_tensor_copy(grad, seed_grad);
    }
    if (pd_tensor_numel(grad) != 1)
        return PD_ERROR(PD_EINVAL, "backward from '%s': a seed gradient is needed for a non-scalar output",
                        g->layers[from]->name);
    return g->dev->ops->fill(g->dev, grad, 1.0f);
}

/* The checks before a backward pass from `from` of `minibatch`. */
static pd_status check_backward(const pd_graph *g, int64_t minibatch, int from)
{
    if (!g->allocated || !g->forward_done)
        return PD_ERROR(PD_ESTATE, "graph: backward before a forward pass");
    if (!g->forward_training || g->forward_minibatch != minibatch)
        return PD_ERROR(PD_ESTATE, "graph: backward of minibatch %lld, but the last forward was %s of %lld",
                        (long long)minibatch, g->forward_training ? "training" : "inference",
                        (long long)g->forward_minibatch);
    if (from < 0 || from >= g->n_layers)
        return PD_ERROR(PD_EINVAL, "graph: backward from node %d of %d", from, g->n_layers);
    PD_CHECK(check_runs(g, from, "backward"));
    if (!g->needs_grad[from])
        return PD_ERROR(PD_EINVAL, "graph: no gradient flows through '%s' (no trainable parameter before it)",
                        g->layers[from]->name);
    return PD_OK;
}

/* Starts a backward pass: no gradient written yet, then `from` seeded. */
static pd_status begin_backward(pd_graph *g, int from, const pd_tensor *seed_grad)
{
    memset(g->grad_written, 0, (size_t)g->n_layers * sizeof(*g->grad_written));
    PD_CHECK(seed_gradient(g, from, seed_grad));
    g->grad_written[from] = true;
    return PD_OK;
}

/* Step k of a backward pass begun by begin_backward and continued for the
 * nodes above k: the first gradient reaching an input is written in place,
 * later ones go to the slot's scratch and are summed. */
static pd_status backward_step(pd_graph *g, int k, int64_t minibatch)
{
    pd_layer *l = g->layers[k];
    bool accumulate[PD_LAYER_MAX_INPUTS] = {false};

    PD_CHECK(check_runs(g, k, "backward"));
    if (!g->needs_grad[k] || !g->grad_written[k] || l->n_inputs == 0)
        return PD_OK; /* nothing flows back through this node in this pass */
    bind_inputs(g, l, minibatch);
    l->d_out = &g->grads[k];
    for (int i = 0; i < l->n_inputs; i++) {
        int src = l->inputs[i];
        if (!g->needs_grad[src]) {
            l->d_in[i] = NULL;
        } else if (!g->grad_written[src]) {
            l->d_in[i] = &g->grads[src];
            g->grad_written[src] = true;
        } else {
            l->d_in[i] = &g->scratch[k][i];
            accumulate[i] = true;
        }
    }
    pd_graph_step st;
    PD_CHECK(pd_graph_step_bind(g, l, true, &st));
    PD_CHECK(pd_graph_step_finish(g, l, &st, false, l->cls->backward(l, g->dev)));
    for (int i = 0; i < l->n_inputs; i++)
        if (accumulate[i] && !st.stored_d_in[i]) /* bf16 gradients were summed by pd_graph_step_finish */
            PD_CHECK(g->dev->ops->axpby(g->dev, 1.0f, &g->scratch[k][i], 1.0f, &g->grads[l->inputs[i]]));
    return PD_OK;
}

pd_status pd_graph_backward(pd_graph *g, int64_t minibatch, int from, const pd_tensor *seed_grad)
{
    PD_CHECK(check_backward(g, minibatch, from));
    PD_CHECK(begin_backward(g, from, seed_grad));
    for (int k = from; k >= 0; k--)
        PD_CHECK(backward_step(g, k, minibatch));
    return PD_OK;
}

/* ---- node statistics (zoo) ---- */

int64_t pd_graph_node_flops(const pd_graph *g, int node)
{
    const pd_layer *l = g->layers[node];

    return l->cls->flops ? l->cls->flops(l) : 0;
}

pd_dtype pd_graph_node_dtype(const pd_graph *g, int node) { return g->layers[node]->out_dtype; }

size_t pd_graph_node_activation_bytes(const pd_graph *g, int node)
{
    const pd_layer *l = g->layers[node];

    return (size_t)pd_shape_numel(&l->out_shape) * pd_dtype_size(pd_graph_stored_dtype(g, node));
}

int64_t pd_graph_node_param_count(const pd_graph *g, int node)
{
    const pd_layer *l = g->layers[node];
    int64_t n = 0;

    for (int p = 0; p < l->n_params; p++)
        if (l->params[p]->trainable)
            n += pd_shape_numel(&l->params[p]->value.shape);
    return n;
}

/* ---- single-node passes (profile) ---- */

pd_status pd_graph_run_node(pd_graph *g, int node, int64_t minibatch, bool backward)
{
    const int last = g->n_layers - 1;

    if (node < 0 || node > last)
        return PD_ERROR(PD_EINVAL, "graph: node %d of %d", node, g->n_layers);
    if (!backward) {
        if (!g->allocated)
            return PD_ERROR(PD_ESTATE, "graph: forward before pd_graph_allocate");
        PD_CHECK(forward_step(g, node, minibatch, true));
        /* Only the last node completes a pass a backward may follow. */
        g->forward_minibatch = minibatch;
        g->forward_training = true;
        g->forward_done = node == last;
        return PD_OK;
    }
    PD_CHECK(check_backward(g, minibatch, last));
    if (node == last)
        PD_CHECK(begin_backward(g, last, NULL));
    return backward_step(g, node, minibatch);
}

/* ---- a pipeline stage's part of a pass ---- */

pd_status pd_graph_forward_nodes(pd_graph *g, const int *nodes, int n, int64_t minibatch, bool training)
{
    if (!g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: forward before pd_graph_allocate");
    for (int i = 0; i < n; i++) {
        if (nodes[i] < 0 || nodes[i] >= g->n_layers || (i > 0 && nodes[i] <= nodes[i - 1]))
            return PD_ERROR(PD_EINVAL, "graph: forward of node %d (entry %d): nodes must increase within 0..%d",
                            nodes[i], i, g->n_layers - 1);
        PD_CHECK(forward_step(g, nodes[i], minibatch, training));
    }
    g->forward_minibatch = minibatch;
    g->forward_training = training;
    g->forward_done = true;
    return PD_OK;
}

pd_status pd_graph_backward_nodes(pd_graph *g, const int *nodes, int n, int64_t minibatch, int n_seeds,
                                  const int *seed_nodes, const pd_tensor *const *seeds)
{
    if (!g->allocated || !g->forward_done || !g->forward_training || g->forward_minibatch != minibatch)
        return PD_ERROR(PD_ESTATE, "graph: backward of minibatch %lld without its training forward pass",
                        (long long)minibatch);
    memset(g->grad_written, 0, (size_t)g->n_layers * sizeof(*g->grad_written));
    for (int i = 0; i < n_seeds; i++) {
        int k = seed_nodes[i];
        if (k < 0 || k >= g->n_layers)
            return PD_ERROR(PD_EINVAL, "graph: backward seed node %d of %d", k, g->n_layers);
        if (!g->held[k])
            return PD_ERROR(PD_ESTATE, "graph: backward seed for node '%s' (%d), which has no memory in the "
                                       "allocated part of the graph", g->layers[k]->name, k);
        if (!g->needs_grad[k])
            continue; /* nothing flows back from there */
        PD_CHECK(seed_gradient(g, k, seeds ? seeds[i] : NULL));
        g->grad_written[k] = true;
    }
    for (int i = n - 1; i >= 0; i--) {
        if (nodes[i] < 0 || nodes[i] >= g->n_layers || (i > 0 && nodes[i] <= nodes[i - 1]))
            return PD_ERROR(PD_EINVAL, "graph: backward of node %d (entry %d): nodes must increase within 0..%d",
                            nodes[i], i, g->n_layers - 1);
        PD_CHECK(backward_step(g, nodes[i], minibatch));
    }
    return PD_OK;
}

bool pd_graph_node_needs_grad(const pd_graph *g, int node)
{
    return g->allocated && node >= 0 && node < g->n_layers && g->needs_grad[node];
}
