/* Stashing the state a set of nodes' backward pass reads (their inputs'
 * and their own outputs, their saved buffers) in host memory, so that a
 * pipeline stage can run the forward passes of several minibatches before
 * their backward passes on one graph. */
#include "config.h"

#include <string.h>

#include <pipedream/graph.h>

#include "graph/pd_graph_int.h"

/* Calls `visit` on every tensor the stash of `nodes` holds, in a fixed
 * order, with its offset in the stash. */
typedef pd_status (*stash_visit)(pd_tensor *t, size_t offset, void *buf);

static pd_status walk(pd_graph *g, const int *nodes, int n, stash_visit visit, void *buf, size_t *bytes)
{
    size_t offset = 0;

    if (!g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: stash before pd_graph_allocate");
    for (int i = 0; i < n; i++) {
        if (nodes[i] < 0 || nodes[i] >= g->n_layers)
            return PD_ERROR(PD_EINVAL, "graph: stash of node %d of %d", nodes[i], g->n_layers);
        if (!g->runs[nodes[i]])
            return PD_ERROR(PD_ESTATE, "graph: stash of node '%s' (%d), which is not in the allocated part of the "
                                       "graph", g->layers[nodes[i]]->name, nodes[i]);
        pd_layer *l = g->layers[nodes[i]];
        pd_tensor *tensors[PD_LAYER_MAX_INPUTS + 1 + PD_LAYER_MAX_SAVED];
        int count = 0;
        for (int k = 0; k < l->n_inputs; k++)
            tensors[count++] = &g->outputs[l->inputs[k]];
        tensors[count++] = &g->outputs[l->id];
        for (int k = 0; k < l->n_saved; k++)
            tensors[count++] = &l->saved[k];
        for (int k = 0; k < count; k++) {
            if (!tensors[k]->data)
                continue;
            if (visit)
                PD_CHECK(visit(tensors[k], offset, buf));
            offset += pd_tensor_nbytes(tensors[k]);
        }
    }
    if (bytes)
        *bytes = offset;
    return PD_OK;
}

static pd_status save_one(pd_tensor *t, size_t offset, void *buf)
{
    return pd_tensor_copy_to_host(t, (char *)buf + offset, pd_tensor_nbytes(t));
}

static pd_status restore_one(pd_tensor *t, size_t offset, void *buf)
{
    return pd_tensor_copy_from_host(t, (const char *)buf + offset, pd_tensor_nbytes(t));
}

pd_status pd_graph_stash_bytes(pd_graph *g, const int *nodes, int n, size_t *bytes)
{
    return walk(g, nodes, n, NULL, NULL, bytes);
}

pd_status pd_graph_stash_save(pd_graph *g, const int *nodes, int n, void *host)
{
    return walk(g, nodes, n, save_one, host, NULL);
}

pd_status pd_graph_stash_restore(pd_graph *g, const int *nodes, int n, int64_t minibatch, const void *host)
{
    PD_CHECK(walk(g, nodes, n, restore_one, (void *)host, NULL));
    /* The restored state is a completed training forward pass again. */
    g->forward_minibatch = minibatch;
    g->forward_training = true;
    g->forward_done = true;
    return PD_OK;
}
