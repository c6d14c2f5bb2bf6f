/* Running a graph: memory planned once for a training step, parameter
 * initialisation, and the forward and backward passes. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/pd_graph_int.h"
#include "graph/pd_mem_plan.h"

#define ARENA_ALIGNMENT 256

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
    return g->allocated && node >= 0 && node < g->n_layers ? &g->outputs[node] : NULL;
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

/* ---- allocation ---------------------------------------------------------- */

static bool layer_has_trainable_params(const pd_layer *l)
{
    for (int p = 0; p < l->n_params; p++)
        if (l->params[p]->trainable)
            return true;
    return false;
}

/* Which nodes a gradient flows to: those with trainable parameters at or
 * before them, and inputs created with requires_grad; never integer data. */
static void mark_needs_grad(pd_graph *g)
{
    for (int k = 0; k < g->n_layers; k++) {
        const pd_layer *l = g->layers[k];
        bool needs = layer_has_trainable_params(l);
        if (strcmp(l->cls->type, "input") == 0)
            needs = l->hparams[0] != 0; /* input hparams start with requires_grad */
        for (int i = 0; i < l->n_inputs; i++)
            needs = needs || g->needs_grad[l->inputs[i]];
        g->needs_grad[k] = needs && (l->out_dtype == PD_F32);
    }
}

static pd_status init_param(pd_graph *g, pd_param *p, pd_rng *rng)
{
    size_t n = (size_t)pd_shape_numel(&p->value.shape);
    float *host = malloc(n ? n * sizeof(float) : 1);
    pd_status s;

    if (!host)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory initialising %s", p->name);
    for (size_t i = 0; i < n; i++) {
        switch (p->init) {
        case PD_INIT_CONSTANT: host[i] = p->init_a; break;
        case PD_INIT_UNIFORM: host[i] = pd_rng_range(rng, -p->init_a, p->init_a); break;
        case PD_INIT_NORMAL: host[i] = p->init_a * pd_rng_normal(rng); break;
        }
    }
    s = pd_tensor_copy_from_host(&p->value, host, n * sizeof(float));
    free(host);
    return s;
}

static pd_status allocate_params(pd_graph *g)
{
    pd_rng rng;

    g->param_memory = calloc((size_t)g->n_params * 2, sizeof(void *));
    if (!g->param_memory)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    pd_rng_init(&rng, g->seed);
    for (int i = 0; i < g->n_params; i++) {
        pd_param *p = g->params[i];
        size_t bytes = pd_tensor_nbytes(&p->value);
        PD_CHECK(g->dev->mem->alloc(g->dev, bytes, &g->param_memory[2 * i]));
        p->value.data = g->param_memory[2 * i];
        PD_CHECK(init_param(g, p, &rng));
        if (p->trainable) {
            PD_CHECK(g->dev->mem->alloc(g->dev, bytes, &g->param_memory[2 * i + 1]));
            p->grad.data = g->param_memory[2 * i + 1];
            PD_CHECK(pd_tensor_zero(&p->grad));
        }
    }
    return PD_OK;
}

/* Kinds of arena blocks, in the order they are listed. */
typedef struct block_owner {
    enum { OWNER_OUTPUT, OWNER_GRAD, OWNER_SAVED, OWNER_SCRATCH } kind;
    int node, index;
} block_owner;

/* Steps: forward of node k is step k, backward of node k is 2n-1-k. */
static pd_status plan_arena(pd_graph *g)
{
    int n = g->n_layers, count = 0, cap = 0;
    pd_mem_block *blocks = NULL;
    block_owner *owners = NULL;
    bool *keep = NULL;
    pd_status s = PD_OK;

    for (int k = 0; k < n; k++)
        cap += 2 + g->layers[k]->n_saved + g->layers[k]->n_inputs;
    blocks = calloc((size_t)cap, sizeof(*blocks));
    owners = calloc((size_t)cap, sizeof(*owners));
    keep = calloc((size_t)(n > 0 ? n : 1), sizeof(*keep));
    if (!blocks || !owners || !keep) {
        s = PD_ERROR(PD_ENOMEM, "graph: out of host memory planning %d nodes", n);
        goto free_lists;
    }
    /* Graph inputs (fed by the caller) and outputs (read after the step,
     * e.g. the loss and logits) keep their memory for the whole step; an
     * aliasing output passes that on to the memory it views. */
    for (int k = n - 1; k >= 0; k--) {
        const pd_layer *l = g->layers[k];
        keep[k] = keep[k] || l->n_inputs == 0 || g->n_uses[k] == 0;
        if (keep[k] && l->cls->output_aliases_input)
            keep[l->inputs[0]] = true;
    }
    for (int k = 0; k < n; k++) {
        const pd_layer *l = g->layers[k];
        int bwd = 2 * n - 1 - k;
        size_t out_bytes = (size_t)pd_shape_numel(&l->out_shape) * pd_dtype_size(l->out_dtype);

        if (!l->cls->output_aliases_input) {
            /* Activations live until their own backward step (consumers'
             * backward steps come earlier); inputs are written before step
             * 0, and inputs and outputs stay readable until the end. */
            blocks[count] = (pd_mem_block){out_bytes, l->n_inputs ? k : 0, keep[k] ? 2 * n - 1 : bwd, 0};
            owners[count++] = (block_owner){OWNER_OUTPUT, k, 0};
        }
        for (int i = 0; i < l->n_saved; i++) {
            blocks[count] = (pd_mem_block){pd_tensor_nbytes(&l->saved[i]), k, bwd, 0};
            owners[count++] = (block_owner){OWNER_SAVED, k, i};
        }
        if (g->needs_grad[k]) {
            /* Written from the first consumer's backward (or seeded at this
             * node's own step) until this node's backward has read it. */
            int first = bwd;
            for (int c = k + 1; c < n; c++)
                for (int i = 0; i < g->layers[c]->n_inputs; i++)
                    if (g->layers[c]->inputs[i] == k && 2 * n - 1 - c < first)
                        first = 2 * n - 1 - c;
            blocks[count] = (pd_mem_block){out_bytes, first, bwd, 0};
            owners[count++] = (block_owner){OWNER_GRAD, k, 0};
        }
        for (int i = 0; i < l->n_inputs; i++) {
            int src = l->inputs[i];
            if (g->needs_grad[src] && g->n_uses[src] > 1) {
                /* A second contribution to a fan-in gradient lands here and
                 * is summed in the same step. */
                const pd_layer *sl = g->layers[src];
                size_t bytes = (size_t)pd_shape_numel(&sl->out_shape) * pd_dtype_size(sl->out_dtype);
                blocks[count] = (pd_mem_block){bytes, bwd, bwd, 0};
                owners[count++] = (block_owner){OWNER_SCRATCH, k, i};
            }
        }
    }
    g->unplanned_bytes = 0;
    for (int b = 0; b < count; b++)
        g->unplanned_bytes += (blocks[b].bytes + ARENA_ALIGNMENT - 1) & ~(size_t)(ARENA_ALIGNMENT - 1);
    PD_CHECK_GOTO(pd_mem_plan(blocks, count, ARENA_ALIGNMENT, &g->arena_bytes), s, free_lists);
    PD_CHECK_GOTO(g->dev->mem->alloc(g->dev, g->arena_bytes ? g->arena_bytes : 1, &g->arena), s, free_lists);
    PD_CHECK_GOTO(g->dev->mem->zero(g->dev, g->arena, g->arena_bytes), s, free_lists);

    for (int b = 0; b < count; b++) {
        pd_layer *l = g->layers[owners[b].node];
        void *data = (char *)g->arena + blocks[b].offset;
        switch (owners[b].kind) {
        case OWNER_OUTPUT: g->outputs[l->id].data = data; break;
        case OWNER_GRAD: g->grads[l->id].data = data; break;
        case OWNER_SAVED:
            l->saved[owners[b].index].device = g->dev;
            l->saved[owners[b].index].data = data;
            break;
        case OWNER_SCRATCH: g->scratch[l->id][owners[b].index].data = data; break;
        }
    }
free_lists:
    free(blocks);
    free(owners);
    free(keep);
    return s;
}

static pd_status allocate_node_tables(pd_graph *g)
{
    int n = g->n_layers;

    g->outputs = calloc((size_t)n, sizeof(*g->outputs));
    g->grads = calloc((size_t)n, sizeof(*g->grads));
    g->scratch = calloc((size_t)n, sizeof(*g->scratch));
    g->needs_grad = calloc((size_t)n, sizeof(*g->needs_grad));
    g->grad_written = calloc((size_t)n, sizeof(*g->grad_written));
    g->n_uses = calloc((size_t)n, sizeof(*g->n_uses));
    if (!g->outputs || !g->grads || !g->scratch || !g->needs_grad || !g->grad_written || !g->n_uses)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory for %d nodes", n);
    for (int k = 0; k < n; k++) {
        const pd_layer *l = g->layers[k];
        pd_tensor_view(&g->outputs[k], g->dev, l->out_dtype, &l->out_shape, NULL);
        pd_tensor_view(&g->grads[k], g->dev, l->out_dtype, &l->out_shape, NULL);
        g->scratch[k] = calloc(PD_LAYER_MAX_INPUTS, sizeof(pd_tensor));
        if (!g->scratch[k])
            return PD_ERROR(PD_ENOMEM, "graph: out of host memory for %d nodes", n);
        for (int i = 0; i < l->n_inputs; i++) {
            const pd_layer *src = g->layers[l->inputs[i]];
            pd_tensor_view(&g->scratch[k][i], g->dev, src->out_dtype, &src->out_shape, NULL);
            g->n_uses[l->inputs[i]]++;
        }
    }
    return PD_OK;
}

pd_status pd_graph_allocate(pd_graph *g)
{
    pd_status s;

    if (g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: allocated already");
    if (g->n_layers == 0)
        return PD_ERROR(PD_ESTATE, "graph: no nodes to allocate");
    PD_CHECK_GOTO(allocate_node_tables(g), s, fail);
    mark_needs_grad(g);
    PD_CHECK_GOTO(plan_arena(g), s, fail);
    /* An aliasing layer's output is its input's memory, reshaped. */
    for (int k = 0; k < g->n_layers; k++)
        if (g->layers[k]->cls->output_aliases_input)
            g->outputs[k].data = g->outputs[g->layers[k]->inputs[0]].data;
    PD_CHECK_GOTO(allocate_params(g), s, fail);
    g->allocated = true;
    return PD_OK;
fail:
    pd_graph_release_memory(g);
    return s;
}

void pd_graph_release_memory(pd_graph *g)
{
    if (g->param_memory) {
        for (int i = 0; i < 2 * g->n_params; i++)
            if (g->param_memory[i])
                g->dev->mem->free(g->dev, g->param_memory[i]);
        free(g->param_memory);
        g->param_memory = NULL;
    }
    for (int i = 0; i < g->n_params; i++) {
        g->params[i]->value.data = NULL;
        g->params[i]->grad.data = NULL;
    }
    if (g->arena)
        g->dev->mem->free(g->dev, g->arena);
    g->arena = NULL;
    if (g->scratch)
        for (int k = 0; k < g->n_layers; k++)
            free(g->scratch[k]);
    free(g->scratch);
    free(g->outputs);
    free(g->grads);
    free(g->needs_grad);
    free(g->grad_written);
    free(g->n_uses);
    g->scratch = NULL;
    g->outputs = g->grads = NULL;
    g->needs_grad = g->grad_written = NULL;
    g->n_uses = NULL;
    g->allocated = false;
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

/* Step k of a forward pass. */
static pd_status forward_step(pd_graph *g, int k, int64_t minibatch, bool training)
{
    pd_layer *l = g->layers[k];

    bind_inputs(g, l, minibatch);
    return l->cls->forward(l, g->dev, training);
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
    PD_CHECK(l->cls->backward(l, g->dev));
    for (int i = 0; i < l->n_inputs; i++)
        if (accumulate[i])
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

    return (size_t)pd_shape_numel(&l->out_shape) * pd_dtype_size(l->out_dtype);
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
