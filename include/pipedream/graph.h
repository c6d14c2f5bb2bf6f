/* The layer graph: a DAG of layers built by the model zoo, with shapes
 * inferred as layers are added, activation memory planned once, and forward
 * and backward passes through the device table. */
#ifndef PIPEDREAM_GRAPH_H
#define PIPEDREAM_GRAPH_H

#include <stdio.h>

#include <pipedream/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_graph pd_graph;

/* How a parameter is initialised (host RNG seeded by the graph's seed). */
typedef enum {
    PD_INIT_CONSTANT = 0, /* every element = a */
    PD_INIT_UNIFORM = 1,  /* U(-a, a) */
    PD_INIT_NORMAL = 2,   /* N(0, a^2) */
} pd_init_kind;

/* A named weight of a layer ("conv1.weight"), its gradient (same shape, or
 * no data for buffers) and how to initialise it. Buffers (trainable=false,
 * e.g. batch-norm running statistics) are saved in checkpoints but never
 * updated by the optimizer. The graph owns both tensors. */
typedef struct pd_param {
    char name[96];
    pd_tensor value;
    pd_tensor grad;
    bool trainable;
    pd_init_kind init;
    float init_a;
} pd_param;

/* Creates an empty graph computing on `dev` (borrowed; it must outlive the
 * graph). `seed` drives parameter initialisation and dropout. */
pd_status pd_graph_create(pd_device *dev, uint64_t seed, pd_graph **out);

/* Frees the graph, its layers, parameters and planned memory. */
void pd_graph_destroy(pd_graph *g);

/* Adds an input node of the given dtype and shape (batch first). Gradients
 * with respect to it are computed when `requires_grad` (a pipeline stage's
 * input activation; false for images and labels). */
pd_status pd_graph_input(pd_graph *g, const char *name, pd_dtype dtype, const pd_shape *shape,
                         bool requires_grad, int *out);

/* Layer builders. Each takes the ids of its inputs, infers its output shape
 * (PD_ESHAPE with a message naming the layer if the inputs do not fit) and
 * returns the new node's id in *out. Names must be unique; parameter names
 * are "<name>.weight", "<name>.bias", ... as in PyTorch state dicts. */
pd_status pd_graph_conv2d(pd_graph *g, const char *name, int x, int out_channels, const pd_conv2d_desc *desc,
                          bool bias, int *out);
pd_status pd_graph_linear(pd_graph *g, const char *name, int x, int out_features, bool bias, int *out);
pd_status pd_graph_relu(pd_graph *g, const char *name, int x, int *out);
/* kernel 0 x 0 in desc means global pooling (the whole H x W). */
pd_status pd_graph_pool2d(pd_graph *g, const char *name, int x, const pd_pool2d_desc *desc, int *out);
pd_status pd_graph_lrn(pd_graph *g, const char *name, int x, const pd_lrn_desc *desc, int *out);
pd_status pd_graph_batchnorm(pd_graph *g, const char *name, int x, const pd_batchnorm_desc *desc, int *out);
pd_status pd_graph_dropout(pd_graph *g, const char *name, int x, float p, int *out);
/* [N, ...] -> [N, prod(...)] without copying. */
pd_status pd_graph_flatten(pd_graph *g, const char *name, int x, int *out);
pd_status pd_graph_concat(pd_graph *g, const char *name, int n, const int *xs, int axis, int *out);
pd_status pd_graph_add(pd_graph *g, const char *name, int a, int b, int *out);
/* Mean softmax cross-entropy of logits [N,C] against i32 labels [N]; the
 * output is the scalar loss [1]; the backward pass starts here. */
pd_status pd_graph_softmax_cross_entropy(pd_graph *g, const char *name, int logits, int labels, int *out);
/* ids [N,T] i32 -> [N,T,dim]. */
pd_status pd_graph_embedding(pd_graph *g, const char *name, int ids, int vocab, int dim, int *out);
/* One LSTM layer over x [N,T,I] -> h [N,T,hidden], zero initial state,
 * parameters weight_ih [4H,I], weight_hh [4H,H], bias_ih, bias_hh as PyTorch. */
pd_status pd_graph_lstm(pd_graph *g, const char *name, int x, int hidden, int *out);

/* Number of nodes; node ids run 0..n-1 in topological order. */
int pd_graph_size(const pd_graph *g);

/* The node's name, layer type ("conv2d", ...), output shape and inputs. */
const char *pd_graph_node_name(const pd_graph *g, int node);
const char *pd_graph_node_type(const pd_graph *g, int node);
const pd_shape *pd_graph_node_shape(const pd_graph *g, int node);
int pd_graph_node_inputs(const pd_graph *g, int node, const int **inputs);

/* Looks a node up by name; -1 if there is none. */
int pd_graph_find(const pd_graph *g, const char *name);

/* Sets *params to the array of all parameters (trainable and buffers) in
 * creation order and returns its length. The graph owns them; their tensors
 * have data once the graph is allocated (after pd_graph_allocate_nodes,
 * only those of the nodes that run). */
int pd_graph_params(pd_graph *g, pd_param ***params);

/* Sets how activations are stored (before allocation; PD_ESTATE after):
 * PD_PRECISION_F32 (the default) and TF32 store f32; PD_PRECISION_BF16
 * stores the output of every computed f32 node that other nodes read, and
 * its gradient, in bf16 (halving the planned activation bytes and
 * pd_graph_node_activation_bytes; pd_graph_output and pd_graph_grad of
 * such a node are bf16 tensors, and a backward seed for it must be one),
 * while the graph's inputs and outputs (the loss), the parameters (f32
 * master weights) and their gradients stay f32. Each layer step then
 * computes in f32 on its tensors widened from bf16 and its trainable
 * weights rounded to bf16, accumulates in f32, and rounds what it writes
 * to bf16. The device's own arithmetic is set apart
 * (pd_device_ops.set_precision). */
pd_status pd_graph_set_precision(pd_graph *g, pd_precision precision);

/* Plans activation and gradient memory for a training step (forward then
 * backward) once, allocates it and the parameters, and initialises the
 * parameters. No node can be added afterwards. */
pd_status pd_graph_allocate(pd_graph *g);

/* Allocates only part of the graph, as a pipeline stage does: the nodes
 * with run[k] (NULL: every node) get their steps (activations, saved
 * buffers, gradients, parameters and their gradients); the nodes with
 * hold[k] (nullable) and the inputs of the nodes that run get memory for
 * their output and, where a gradient flows, its gradient, both kept for the
 * whole step (the caller writes such an output before the forward pass and
 * may seed or read its gradient around the backward pass); the other nodes
 * get nothing. An input node that holds memory runs too (its steps do
 * nothing). Parameters are initialised exactly as pd_graph_allocate
 * initialises them (the values of the others are drawn and dropped), so a
 * part's parameters equal the whole graph's for the same seed, and the
 * part's passes compute bit for bit what the whole graph's compute.
 * Running a step of a node outside the part fails with PD_ESTATE naming
 * it; pd_graph_output of a node without memory is NULL. PD_EINVAL when the
 * part holds no node. */
pd_status pd_graph_allocate_nodes(pd_graph *g, const bool *run, const bool *hold);

/* The bytes pd_graph_allocate_nodes(g, run, hold) allocates (NULL run:
 * pd_graph_allocate): the planned arena plus the parameters' values and
 * gradients. Needs no allocation, so a stage can report what the whole
 * model would take. */
pd_status pd_graph_plan_bytes(const pd_graph *g, const bool *run, const bool *hold, size_t *bytes);

/* What the allocation took, counted as pd_graph_plan_bytes counts (0
 * before allocation). */
size_t pd_graph_allocated_bytes(const pd_graph *g);

/* Bytes of the planned activation/gradient arena, and what it would take
 * without reuse (for reporting). */
size_t pd_graph_arena_bytes(const pd_graph *g);
size_t pd_graph_unplanned_bytes(const pd_graph *g);

/* The output tensor of a node (an input node's tensor is where data goes);
 * NULL before allocation and for a node the allocated part holds nothing of. */
pd_tensor *pd_graph_output(pd_graph *g, int node);

/* The gradient of a node's output after pd_graph_backward (NULL if none was
 * computed): for inputs created with requires_grad it is dLoss/dInput. */
pd_tensor *pd_graph_grad(pd_graph *g, int node);

/* Runs every node forward. `minibatch` identifies the minibatch (it seeds
 * dropout so that its backward pass, even later, sees the same mask);
 * `training` selects batch statistics and dropout. */
pd_status pd_graph_forward(pd_graph *g, int64_t minibatch, bool training);

/* Runs the backward pass of the last forward(minibatch, training=true). The
 * gradient of node `from` is seeded with `seed_grad` (its shape), or with 1
 * when `seed_grad` is NULL and `from` is a scalar loss. Parameter gradients
 * are overwritten. */
pd_status pd_graph_backward(pd_graph *g, int64_t minibatch, int from, const pd_tensor *seed_grad);

/* Writes the graph as text (one line per node: id, name, type, inputs,
 * output shape, parameter count) to `f`. */
void pd_graph_print(const pd_graph *g, FILE *f);

/* Total number of trainable parameter elements. */
int64_t pd_graph_param_count(const pd_graph *g);

/* Per-node statistics for the batch the graph was built for (node in
 * [0, pd_graph_size)); they need no allocation.
 *
 * pd_graph_node_flops: the forward pass's model arithmetic, where a
 * multiply-add counts 2 (so a convolution or linear layer is 2 x its
 * multiply-adds, plus 1 per output for a bias; torchvision's "15.47 GFLOPS"
 * for VGG16 are multiply-adds, 30.9 G here). Element-wise layers count 1 per
 * element (relu, add, dropout's mask), batch norm 2 (its scale and shift;
 * statistics not counted), pooling 1 per window element of every output,
 * LRN size + 5 per element, softmax cross-entropy 4 per logit, LSTM its gate
 * products plus 13 per hidden unit and step; data movement (input, flatten,
 * concat, embedding) counts 0. Copies and scratch work of an implementation
 * are not counted.
 *
 * pd_graph_node_activation_bytes: the bytes of the node's output (what a
 * pipeline stage ending there sends), also for a view such as flatten that
 * takes no memory of its own.
 *
 * pd_graph_node_param_count: the node's trainable parameter elements
 * (buffers such as running statistics excluded). */
int64_t pd_graph_node_flops(const pd_graph *g, int node);
size_t pd_graph_node_activation_bytes(const pd_graph *g, int node);
int64_t pd_graph_node_param_count(const pd_graph *g, int node);

/* The dtype of the node's output. */
pd_dtype pd_graph_node_dtype(const pd_graph *g, int node);

/* Runs one node's part of a training step, binding its tensors exactly as
 * the whole passes do; the profiler times layers with it.
 * Forward (backward false): step `node` of pd_graph_forward(g, minibatch,
 * true); calls for nodes 0..n-1 in that order are that pass, and the call for
 * node n-1 completes it (a backward pass may follow).
 * Backward: step `node` of pd_graph_backward(g, minibatch, n-1, NULL), so the
 * last node must be the scalar loss; the call for node n-1 starts the pass
 * (seeding the loss gradient with 1), and calls for n-1, n-2, ..., 0 in that
 * order are that pass. Called in another order, the gradients are not those
 * of any pass (no memory outside the graph's is touched). A node through
 * which no gradient flows does nothing. PD_ESTATE before allocation or
 * without a completed training forward pass of `minibatch`, PD_EINVAL for a
 * node out of range. */
pd_status pd_graph_run_node(pd_graph *g, int node, int64_t minibatch, bool backward);

/* ---- pipeline stages: part of a pass, and its stash ----
 *
 * A stage runs the forward and backward steps of a subset of the nodes
 * (increasing ids); the outputs of the other nodes its nodes read are
 * written by the caller (pd_graph_output) before the forward, and the
 * gradients of its outputs that later stages consumed are seeds of the
 * backward. The steps are those of the whole passes, so a pipeline of
 * stages computes bit for bit what pd_graph_forward/backward compute. */

/* Forward steps of `nodes` in order for `minibatch`, in training mode
 * (batch statistics, dropout) or inference mode; a training pass is one
 * that pd_graph_backward_nodes of the same minibatch may follow. PD_EINVAL
 * unless the ids increase within the graph. */
pd_status pd_graph_forward_nodes(pd_graph *g, const int *nodes, int n, int64_t minibatch, bool training);

/* Backward steps of `nodes` in reverse order after seeding the output
 * gradients of `seed_nodes` with `seeds` (seeds NULL or seeds[i] NULL: a
 * scalar loss, seeded with 1; seed nodes no gradient flows through are
 * skipped). A seed may name a node outside `nodes` (a tensor a later stage
 * consumed and this one forwards): its gradient is then summed with what
 * the nodes add. Afterwards pd_graph_grad of the nodes' inputs holds the
 * gradients to send upstream. PD_ESTATE without the forward pass of
 * `minibatch` (or a restored stash of it). */
pd_status pd_graph_backward_nodes(pd_graph *g, const int *nodes, int n, int64_t minibatch, int n_seeds,
                                  const int *seed_nodes, const pd_tensor *const *seeds);

/* Whether a gradient flows through `node` (a trainable parameter at or
 * before it); false before allocation. */
bool pd_graph_node_needs_grad(const pd_graph *g, int node);

/* Bytes of the state the backward steps of `nodes` read: the outputs of
 * the nodes and of their inputs, and the nodes' saved buffers. */
pd_status pd_graph_stash_bytes(pd_graph *g, const int *nodes, int n, size_t *bytes);

/* Copies that state into `host` (pd_graph_stash_bytes of them) after a
 * forward of the nodes. */
pd_status pd_graph_stash_save(pd_graph *g, const int *nodes, int n, void *host);

/* Copies a stash back and makes it the completed forward pass of
 * `minibatch`, so its backward can run after other minibatches' passes. */
pd_status pd_graph_stash_restore(pd_graph *g, const int *nodes, int n, int64_t minibatch, const void *host);

#ifdef __cplusplus
}
#endif
#endif
