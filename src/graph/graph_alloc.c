/* Allocating a graph, whole or the part of it a pipeline stage runs: the
 * nodes' activations, gradients, saved buffers and fan-in scratch planned
 * into one arena over the steps of a training step, and the parameters of
 * the nodes that run, initialised from the graph's seed so that every
 * parameter gets the same values whichever part is allocated. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/pd_graph_int.h"
#include "graph/pd_mem_plan.h"

#define ARENA_ALIGNMENT 256

/* What an allocation covers, node by node, and what planning it reads. */
typedef struct node_sets {
    bool *runs;       /* [n] its forward and backward steps may run */
    bool *held;       /* [n] its output (and gradient) has memory */
    bool *needs_grad; /* [n] */
    int *n_uses;      /* [n] input slots reading it, in the whole graph */
} node_sets;

/* Kinds of arena blocks, in the order they are listed. */
typedef struct block_owner {
    enum { OWNER_OUTPUT, OWNER_GRAD, OWNER_SAVED, OWNER_SCRATCH } kind;
    int node, index;
} block_owner;

static void sets_free(node_sets *ns)
{
    free(ns->runs);
    free(ns->held);
    free(ns->needs_grad);
    free(ns->n_uses);
    *ns = (node_sets){0};
}

static bool layer_has_trainable_params(const pd_layer *l)
{
    for (int p = 0; p < l->n_params; p++)
        if (l->params[p]->trainable)
            return true;
    return false;
}

/* Which nodes a gradient flows to: those with trainable parameters at or
 * before them, and inputs created with requires_grad; never integer data.
 * A property of the whole graph, whatever part is allocated. */
static void mark_needs_grad(const pd_graph *g, bool *needs_grad)
{
    for (int k = 0; k < g->n_layers; k++) {
        const pd_layer *l = g->layers[k];
        bool needs = layer_has_trainable_params(l);
        if (strcmp(l->cls->type, "input") == 0)
            needs = l->hparams[0] != 0; /* input hparams start with requires_grad */
        for (int i = 0; i < l->n_inputs; i++)
            needs = needs || needs_grad[l->inputs[i]];
        needs_grad[k] = needs && (l->out_dtype == PD_F32);
    }
}

/* The sets of a part: `run` (NULL: every node) and what it holds: `hold`
 * (nullable) and the inputs of the nodes that run. An input node that holds
 * data runs too (its steps do nothing). */
static pd_status sets_make(const pd_graph *g, const bool *run, const bool *hold, node_sets *ns)
{
    const int n = g->n_layers;
    bool any = false;

    ns->runs = calloc((size_t)n, sizeof(*ns->runs));
    ns->held = calloc((size_t)n, sizeof(*ns->held));
    ns->needs_grad = calloc((size_t)n, sizeof(*ns->needs_grad));
    ns->n_uses = calloc((size_t)n, sizeof(*ns->n_uses));
    if (!ns->runs || !ns->held || !ns->needs_grad || !ns->n_uses) {
        sets_free(ns);
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory for %d nodes", n);
    }
    for (int k = 0; k < n; k++) {
        ns->runs[k] = !run || run[k];
        ns->held[k] = ns->held[k] || ns->runs[k] || (hold && hold[k]);
        for (int i = 0; i < g->layers[k]->n_inputs; i++) {
            ns->n_uses[g->layers[k]->inputs[i]]++;
            if (ns->runs[k])
                ns->held[g->layers[k]->inputs[i]] = true;
        }
    }
    for (int k = 0; k < n; k++) {
        ns->runs[k] = ns->runs[k] || (ns->held[k] && g->layers[k]->n_inputs == 0);
        any = any || ns->held[k];
    }
    if (!any) {
        sets_free(ns);
        return PD_ERROR(PD_EINVAL, "graph: the part to allocate has none of the %d nodes", n);
    }
    mark_needs_grad(g, ns->needs_grad);
    return PD_OK;
}

/* Whether node k's output is its input's memory (a view): only where k runs,
 * so that its input is held; a held view that does not run has its own copy. */
static bool output_is_view(const pd_graph *g, const node_sets *ns, int k)
{
    return g->layers[k]->cls->output_aliases_input && ns->runs[k];
}

/* The arena's blocks of the part, with lifetimes in steps: the forward step
 * of node k is step k, its backward step 2n-1-k, whichever nodes run.
 * `to_end` is [n] zeroed scratch. Returns the count. */
static int plan_blocks(const pd_graph *g, const node_sets *ns, pd_mem_block *blocks, block_owner *owners, bool *to_end)
{
    const int n = g->n_layers, end = 2 * n - 1;
    int count = 0;

    /* Graph inputs (fed by the caller), outputs (read after the step, e.g.
     * the loss and logits) and the tensors a part holds without computing
     * them (received before the step, their gradients sent after it) keep
     * their memory for the whole step; a view passes that on to the memory
     * it views. */
    for (int k = n - 1; k >= 0; k--) {
        const pd_layer *l = g->layers[k];
        if (!ns->held[k])
            continue;
        to_end[k] = to_end[k] || l->n_inputs == 0 || ns->n_uses[k] == 0 || !ns->runs[k];
        if (to_end[k] && output_is_view(g, ns, k))
            to_end[l->inputs[0]] = true;
    }
    for (int k = 0; k < n; k++) {
        const pd_layer *l = g->layers[k];
        const int bwd = end - k;
        /* bf16 activations and their gradients take half (graph_precision.c). */
        const size_t out_bytes = (size_t)pd_shape_numel(&l->out_shape) * pd_dtype_size(pd_graph_stored_dtype(g, k));

        if (!ns->held[k])
            continue;
        if (!output_is_view(g, ns, k)) {
            /* Activations live until their own backward step (consumers'
             * backward steps come earlier); what the caller writes is
             * written before step 0. */
            const int first = ns->runs[k] && l->n_inputs ? k : 0;
            blocks[count] = (pd_mem_block){out_bytes, first, to_end[k] ? end : bwd, 0};
            owners[count++] = (block_owner){OWNER_OUTPUT, k, 0};
        }
        for (int i = 0; ns->runs[k] && i < l->n_saved; i++) {
            blocks[count] = (pd_mem_block){pd_tensor_nbytes(&l->saved[i]), k, bwd, 0};
            owners[count++] = (block_owner){OWNER_SAVED, k, i};
        }
        if (ns->needs_grad[k]) {
            /* Written from the first consumer's backward step (or seeded at
             * this node's own step, or, for a consumer elsewhere, seeded
             * before the part's first backward step) until this node's
             * backward step has read it, or to the end when the caller
             * reads it after the step. */
            int first = bwd;
            for (int c = k + 1; c < n; c++)
                for (int i = 0; i < g->layers[c]->n_inputs; i++)
                    if (g->layers[c]->inputs[i] == k) {
                        const int step = ns->runs[c] ? end - c : n;
                        first = step < first ? step : first;
                    }
            blocks[count] = (pd_mem_block){out_bytes, first, ns->runs[k] ? bwd : end, 0};
            owners[count++] = (block_owner){OWNER_GRAD, k, 0};
        }
        for (int i = 0; ns->runs[k] && i < l->n_inputs; i++) {
            const int src = l->inputs[i];
            if (ns->needs_grad[src] && ns->n_uses[src] > 1 && pd_graph_stored_dtype(g, src) != PD_BF16) {
                /* A second contribution to a fan-in gradient lands here and
                 * is summed in the same step (a bf16 one is summed in the
                 * step's f32 work buffer: graph_precision.c). */
                const pd_layer *sl = g->layers[src];
                size_t bytes = (size_t)pd_shape_numel(&sl->out_shape) * pd_dtype_size(sl->out_dtype);
                blocks[count] = (pd_mem_block){bytes, bwd, bwd, 0};
                owners[count++] = (block_owner){OWNER_SCRATCH, k, i};
            }
        }
    }
    return count;
}

/* Bytes of the values, and gradients of the trainable ones, of the
 * parameters of the nodes that run. */
static size_t param_bytes(const pd_graph *g, const node_sets *ns)
{
    size_t bytes = 0;

    for (int k = 0; k < g->n_layers; k++)
        for (int i = 0; ns->runs[k] && i < g->layers[k]->n_params; i++) {
            const pd_param *p = g->layers[k]->params[i];
            bytes += pd_tensor_nbytes(&p->value) * (p->trainable ? 2 : 1);
        }
    return bytes;
}

/* The part's blocks placed by the planner: *blocks and *owners (freed by
 * the caller), *count of them, the arena's size and the size without
 * reuse. */
static pd_status plan_part(const pd_graph *g, const node_sets *ns, pd_mem_block **blocks, block_owner **owners,
                           int *count, size_t *arena_bytes, size_t *unplanned_bytes)
{
    const int n = g->n_layers;
    int cap = 0;
    bool *to_end = calloc((size_t)n, sizeof(*to_end));
    pd_status s = PD_OK;

    for (int k = 0; k < n; k++)
        cap += 2 + g->layers[k]->n_saved + g->layers[k]->n_inputs;
    *blocks = calloc((size_t)cap, sizeof(**blocks));
    *owners = calloc((size_t)cap, sizeof(**owners));
    if (!*blocks || !*owners || !to_end) {
        s = PD_ERROR(PD_ENOMEM, "graph: out of host memory planning %d nodes", n);
        goto fail;
    }
    *count = plan_blocks(g, ns, *blocks, *owners, to_end);
    *unplanned_bytes = 0;
    for (int b = 0; b < *count; b++)
        *unplanned_bytes += ((*blocks)[b].bytes + ARENA_ALIGNMENT - 1) & ~(size_t)(ARENA_ALIGNMENT - 1);
    PD_CHECK_GOTO(pd_mem_plan(*blocks, *count, ARENA_ALIGNMENT, arena_bytes), s, fail);
    free(to_end);
    return PD_OK;
fail:
    free(to_end);
    free(*blocks);
    free(*owners);
    *blocks = NULL;
    *owners = NULL;
    return s;
}

pd_status pd_graph_plan_bytes(const pd_graph *g, const bool *run, const bool *hold, size_t *bytes)
{
    node_sets ns = {0};
    pd_mem_block *blocks;
    block_owner *owners;
    int count;
    size_t arena, unplanned;

    if (!g || !bytes)
        return PD_ERROR(PD_EINVAL, "graph: plan_bytes needs a graph and an output");
    if (g->n_layers == 0)
        return PD_ERROR(PD_ESTATE, "graph: no nodes to plan");
    PD_CHECK(sets_make(g, run, hold, &ns));
    pd_status s = plan_part(g, &ns, &blocks, &owners, &count, &arena, &unplanned);
    if (s == PD_OK) {
        *bytes = arena + param_bytes(g, &ns) + pd_graph_work_bytes(g, ns.runs);
        free(blocks);
        free(owners);
    }
    sets_free(&ns);
    return s;
}

/* Places the planned blocks in the arena. */
static pd_status allocate_arena(pd_graph *g, const node_sets *ns)
{
    pd_mem_block *blocks;
    block_owner *owners;
    int count;
    pd_status s = PD_OK;

    PD_CHECK(plan_part(g, ns, &blocks, &owners, &count, &g->arena_bytes, &g->unplanned_bytes));
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
    /* A view is its input's memory, reshaped. */
    for (int k = 0; k < g->n_layers; k++)
        if (output_is_view(g, ns, k))
            g->outputs[k].data = g->outputs[g->layers[k]->inputs[0]].data;
free_lists:
    free(blocks);
    free(owners);
    return s;
}

/* The initial values of `p` drawn from the stream into host[0..n) (NULL:
 * drawn and dropped, so that later parameters get the values they get when
 * every parameter is allocated). */
static void draw_init(const pd_param *p, pd_rng *rng, float *host, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = 0.0f;
        switch (p->init) {
        case PD_INIT_CONSTANT: v = p->init_a; break;
        case PD_INIT_UNIFORM: v = pd_rng_range(rng, -p->init_a, p->init_a); break;
        case PD_INIT_NORMAL: v = p->init_a * pd_rng_normal(rng); break;
        }
        if (host)
            host[i] = v;
    }
}

static pd_status init_param(pd_param *p, pd_rng *rng)
{
    size_t n = (size_t)pd_shape_numel(&p->value.shape);
    float *host = malloc(n ? n * sizeof(float) : 1);
    pd_status s;

    if (!host)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory initialising %s", p->name);
    draw_init(p, rng, host, n);
    s = pd_tensor_copy_from_host(&p->value, host, n * sizeof(float));
    free(host);
    return s;
}

/* The parameters of the nodes that run, in creation order (layer by layer,
 * as g->params), from one stream seeded by the graph's seed. */
static pd_status allocate_params(pd_graph *g, const node_sets *ns)
{
    pd_rng rng;
    int index = 0;

    g->param_memory = calloc((size_t)g->n_params * 2 + 1, sizeof(void *));
    if (!g->param_memory)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    pd_rng_init(&rng, g->seed);
    g->param_bytes = param_bytes(g, ns);
    for (int k = 0; k < g->n_layers; k++) {
        for (int i = 0; i < g->layers[k]->n_params; i++, index++) {
            pd_param *p = g->layers[k]->params[i];
            size_t bytes = pd_tensor_nbytes(&p->value);
            if (!ns->runs[k]) {
                draw_init(p, &rng, NULL, (size_t)pd_shape_numel(&p->value.shape));
                continue;
            }
            PD_CHECK(g->dev->mem->alloc(g->dev, bytes, &g->param_memory[2 * index]));
            p->value.data = g->param_memory[2 * index];
            PD_CHECK(init_param(p, &rng));
            if (p->trainable) {
                PD_CHECK(g->dev->mem->alloc(g->dev, bytes, &g->param_memory[2 * index + 1]));
                p->grad.data = g->param_memory[2 * index + 1];
                PD_CHECK(pd_tensor_zero(&p->grad));
            }
        }
    }
    return PD_OK;
}

/* The per-node tensors (views without memory until the arena is placed). */
static pd_status allocate_node_tables(pd_graph *g)
{
    int n = g->n_layers;

    g->outputs = calloc((size_t)n, sizeof(*g->outputs));
    g->grads = calloc((size_t)n, sizeof(*g->grads));
    g->scratch = calloc((size_t)n, sizeof(*g->scratch));
    g->grad_written = calloc((size_t)n, sizeof(*g->grad_written));
    if (!g->outputs || !g->grads || !g->scratch || !g->grad_written)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory for %d nodes", n);
    for (int k = 0; k < n; k++) {
        const pd_layer *l = g->layers[k];
        pd_tensor_view(&g->outputs[k], g->dev, pd_graph_stored_dtype(g, k), &l->out_shape, NULL);
        pd_tensor_view(&g->grads[k], g->dev, pd_graph_stored_dtype(g, k), &l->out_shape, NULL);
        g->scratch[k] = calloc(PD_LAYER_MAX_INPUTS, sizeof(pd_tensor));
        if (!g->scratch[k])
            return PD_ERROR(PD_ENOMEM, "graph: out of host memory for %d nodes", n);
        for (int i = 0; i < l->n_inputs; i++) {
            const pd_layer *src = g->layers[l->inputs[i]];
            pd_tensor_view(&g->scratch[k][i], g->dev, pd_graph_stored_dtype(g, l->inputs[i]), &src->out_shape, NULL);
        }
    }
    return PD_OK;
}

pd_status pd_graph_allocate_nodes(pd_graph *g, const bool *run, const bool *hold)
{
    node_sets ns = {0};
    pd_status s;

    if (!g)
        return PD_ERROR(PD_EINVAL, "graph: allocate needs a graph");
    if (g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: allocated already");
    if (g->n_layers == 0)
        return PD_ERROR(PD_ESTATE, "graph: no nodes to allocate");
    PD_CHECK(sets_make(g, run, hold, &ns));
    g->runs = ns.runs;
    g->held = ns.held;
    g->needs_grad = ns.needs_grad;
    g->n_uses = ns.n_uses;
    PD_CHECK_GOTO(allocate_node_tables(g), s, fail);
    PD_CHECK_GOTO(allocate_arena(g, &ns), s, fail);
    PD_CHECK_GOTO(allocate_params(g, &ns), s, fail);
    if ((g->work_bytes = pd_graph_work_bytes(g, ns.runs)) > 0)
        PD_CHECK_GOTO(g->dev->mem->alloc(g->dev, g->work_bytes, &g->work), s, fail);
    g->allocated = true;
    return PD_OK;
fail:
    pd_graph_release_memory(g);
    return s;
}

pd_status pd_graph_allocate(pd_graph *g) { return pd_graph_allocate_nodes(g, NULL, NULL); }

size_t pd_graph_allocated_bytes(const pd_graph *g)
{
    return g->allocated ? g->arena_bytes + g->param_bytes + g->work_bytes : 0;
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
    if (g->work)
        g->dev->mem->free(g->dev, g->work);
    g->arena = g->work = NULL;
    if (g->scratch)
        for (int k = 0; k < g->n_layers; k++)
            free(g->scratch[k]);
    free(g->scratch);
    free(g->outputs);
    free(g->grads);
    free(g->grad_written);
    g->scratch = NULL;
    g->outputs = g->grads = NULL;
    g->grad_written = NULL;
    node_sets ns = {.runs = g->runs, .held = g->held, .needs_grad = g->needs_grad, .n_uses = g->n_uses};
    sets_free(&ns);
    g->runs = g->held = g->needs_grad = NULL;
    g->n_uses = NULL;
    g->arena_bytes = g->unplanned_bytes = g->param_bytes = g->work_bytes = 0;
    g->allocated = false;
}
