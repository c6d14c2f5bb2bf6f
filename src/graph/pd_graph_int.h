/* The graph's internals (module-private). */
#ifndef PD_GRAPH_INT_H
#define PD_GRAPH_INT_H

#include "graph/pd_layer.h"

struct pd_graph {
    pd_device *dev;
    uint64_t seed;

    pd_layer **layers; /* node id = index, topological by construction */
    int n_layers, cap_layers;
    pd_param **params; /* owned; stable addresses */
    int n_params, cap_params;

    /* Filled by pd_graph_allocate(_nodes) (graph_alloc.c). */
    bool allocated;
    void *arena;
    size_t arena_bytes, unplanned_bytes;
    size_t param_bytes;    /* parameter values and gradients allocated */
    bool *runs;            /* [n] the node's steps were allocated (its saved buffers, parameters) */
    bool *held;            /* [n] the node's output (and gradient) has memory */
    pd_tensor *outputs;    /* [n] views into the arena (or the aliased input); no data where not held */
    pd_tensor *grads;      /* [n] views; data NULL where no gradient flows */
    pd_tensor **scratch;   /* [n][PD_LAYER_MAX_INPUTS] per input slot, for summing fan-in gradients */
    bool *needs_grad;      /* [n] */
    bool *grad_written;    /* [n] during a backward pass */
    int *n_uses;           /* [n] how many input slots read the node */
    void **param_memory;   /* [n_params] value and grad allocations */

    int64_t forward_minibatch;
    bool forward_training;
    bool forward_done;
};

/* The device the graph computes on. */
pd_device *pd_graph_device(const pd_graph *g);

/* Frees what pd_graph_allocate made (graph_alloc.c). */
void pd_graph_release_memory(pd_graph *g);

#endif
