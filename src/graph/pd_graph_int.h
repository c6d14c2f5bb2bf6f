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

    pd_precision precision; /* PD_PRECISION_BF16: bf16 activations (graph_precision.c) */
    void *work;             /* the f32 temporaries of one step in bf16, work_bytes of them */
    size_t work_bytes;

    int64_t forward_minibatch;
    bool forward_training;
    bool forward_done;
};

/* The device the graph computes on. */
pd_device *pd_graph_device(const pd_graph *g);

/* Frees what pd_graph_allocate made (graph_alloc.c). */
void pd_graph_release_memory(pd_graph *g);

/* ---- bf16 mixed precision (graph_precision.c) ---- */

/* The dtype node `node`'s output and its gradient are stored in: bf16 for
 * a computed f32 output other nodes read when the precision is bf16 (a
 * view: its input's), else the layer's out_dtype. */
pd_dtype pd_graph_stored_dtype(const pd_graph *g, int node);

/* The bytes of the work buffer the steps of the nodes with runs[k] (NULL:
 * all) need: 0 unless the precision is bf16. */
size_t pd_graph_work_bytes(const pd_graph *g, const bool *runs);

/* The f32 temporaries of one layer step. */
typedef struct pd_graph_step {
    pd_tensor in[PD_LAYER_MAX_INPUTS];     /* f32 copies of the bf16 inputs */
    pd_tensor out;                         /* the f32 output of a bf16-stored output */
    pd_tensor *stored_out;                 /* that bf16 output; NULL if none */
    pd_tensor d_out;                       /* the f32 copy of a bf16 output gradient */
    pd_tensor d_in[PD_LAYER_MAX_INPUTS];   /* f32 input gradients for bf16 ones */
    pd_tensor sum[PD_LAYER_MAX_INPUTS];    /* f32 sums of a fan-in gradient */
    pd_tensor *stored_d_in[PD_LAYER_MAX_INPUTS]; /* the bf16 gradients they go to; NULL if none */
    bool accumulate[PD_LAYER_MAX_INPUTS];  /* the bf16 gradient holds earlier contributions */
    pd_tensor weight[PD_LAYER_MAX_PARAMS]; /* the bf16-rounded trainable weights, in f32 */
    void *master[PD_LAYER_MAX_PARAMS];     /* the f32 masters swapped out for them */
} pd_graph_step;

/* After the layer's tensors are bound: rebinds its bf16 inputs and output
 * to f32 copies in the work buffer (the output's copy filled only for a
 * backward step) and its trainable weights to their bf16 rounding; for a
 * backward step also its bf16 output gradient to an f32 copy and its bf16
 * input gradients (l->d_in[i] the node's gradient, `grads`[src], or the
 * fan-in scratch: a later contribution) to f32 temporaries. Does nothing
 * unless the precision is bf16. */
pd_status pd_graph_step_bind(pd_graph *g, pd_layer *l, bool backward, pd_graph_step *st);

/* After the layer's call returned `s`: puts the master weights back, and
 * if it succeeded, rounds a forward step's f32 output into its bf16
 * storage, and a backward step's f32 input gradients into theirs (summed in
 * f32 with the earlier contributions where they accumulate). Returns `s` or
 * the failure that followed. */
pd_status pd_graph_step_finish(pd_graph *g, pd_layer *l, pd_graph_step *st, bool forward, pd_status s);

#endif
