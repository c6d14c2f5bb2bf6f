/* The planning graph: a profile's compute nodes without its input nodes and
 * PipeDream's `__getitem__` sinks (PIPEDREAM-OPTIMIZER.md, preprocessing
 * step 1), and its branch-collapsed form (the original's
 * Graph.compress_branches, used by compress_graph_branches.py). */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

/* A list of n ints that is never NULL on success, even when empty. */
static int *int_list(int n)
{
    return malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
}

void pd_plan_graph_destroy(pd_plan_graph *g)
{
    if (!g)
        return;
    for (int v = 0; v < g->n; v++) {
        if (g->in)
            free(g->in[v]);
        if (g->out)
            free(g->out[v]);
        if (g->members)
            free(g->members[v]);
    }
    for (int d = 0; d < g->n_dropped && g->dropped_in; d++)
        free(g->dropped_in[d]);
    for (int v = 0; v < g->n && g->exits; v++) {
        for (int k = 0; g->exits[v] && k < g->n_exits[v]; k++)
            free(g->exits[v][k].to);
        free(g->exits[v]);
    }
    free(g->n_exits);
    free(g->exits);
    free(g->fwd_ms);
    free(g->bwd_ms);
    free(g->act_bytes);
    free(g->par_bytes);
    free(g->n_in);
    free(g->in);
    free(g->n_out);
    free(g->out);
    free(g->n_members);
    free(g->members);
    free(g->inputs);
    free(g->dropped);
    free(g->n_dropped_in);
    free(g->dropped_in);
    free(g);
}

pd_plan_graph *pd_plan_graph_alloc(int n, int n_inputs, int n_dropped)
{
    pd_plan_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->n = n;
    g->n_inputs = n_inputs;
    g->n_dropped = n_dropped;
    size_t sz = (size_t)(n > 0 ? n : 1);
    g->fwd_ms = calloc(sz, sizeof(double));
    g->bwd_ms = calloc(sz, sizeof(double));
    g->act_bytes = calloc(sz, sizeof(double));
    g->par_bytes = calloc(sz, sizeof(double));
    g->n_in = calloc(sz, sizeof(int));
    g->in = calloc(sz, sizeof(int *));
    g->n_out = calloc(sz, sizeof(int));
    g->out = calloc(sz, sizeof(int *));
    g->n_members = calloc(sz, sizeof(int));
    g->members = calloc(sz, sizeof(int *));
    g->inputs = int_list(n_inputs);
    g->dropped = int_list(n_dropped);
    g->n_dropped_in = calloc((size_t)(n_dropped > 0 ? n_dropped : 1), sizeof(int));
    g->dropped_in = calloc((size_t)(n_dropped > 0 ? n_dropped : 1), sizeof(int *));
    if (!g->fwd_ms || !g->bwd_ms || !g->act_bytes || !g->par_bytes || !g->n_in || !g->in || !g->n_out || !g->out ||
        !g->n_members || !g->members || !g->inputs || !g->dropped || !g->n_dropped_in || !g->dropped_in) {
        pd_plan_graph_destroy(g);
        return NULL;
    }
    return g;
}

pd_status pd_plan_graph_fill_outputs(pd_plan_graph *g)
{
    int *fill = calloc((size_t)(g->n > 0 ? g->n : 1), sizeof(int));
    if (!fill)
        return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
    for (int v = 0; v < g->n; v++)
        for (int e = 0; e < g->n_in[v]; e++)
            g->n_out[g->in[v][e]]++;
    for (int v = 0; v < g->n; v++) {
        g->out[v] = int_list(g->n_out[v]);
        if (!g->out[v]) {
            free(fill);
            return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        }
    }
    for (int v = 0; v < g->n; v++)
        for (int e = 0; e < g->n_in[v]; e++) {
            int u = g->in[v][e];
            g->out[u][fill[u]++] = v;
        }
    free(fill);
    return PD_OK;
}

/* ---- from a profile ---- */

#define NODE_INPUT (-1)
#define NODE_DROPPED (-2)

static bool is_input_node(const pd_profile_node *node)
{
    return strcmp(node->type, PD_PROFILE_INPUT_TYPE) == 0;
}

/* node_of[p]: the graph node of profile node p, NODE_INPUT or NODE_DROPPED
 * (a sink, after the inputs are gone, described "__getitem__..."). */
static pd_status classify_nodes(const pd_profile *profile, int *node_of, int *n, int *n_inputs, int *n_dropped)
{
    int size = pd_profile_size(profile);
    int *consumers = calloc((size_t)(size > 0 ? size : 1), sizeof(int));
    if (!consumers)
        return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
    for (int p = 0; p < size; p++) {
        const pd_profile_node *node = pd_profile_node_at(profile, p);
        for (int e = 0; e < node->n_inputs; e++)
            consumers[node->inputs[e]]++;
    }
    *n = *n_inputs = *n_dropped = 0;
    for (int p = 0; p < size; p++) {
        const pd_profile_node *node = pd_profile_node_at(profile, p);
        if (is_input_node(node)) {
            node_of[p] = NODE_INPUT;
            (*n_inputs)++;
        } else if (consumers[p] == 0 && strncmp(node->description, "__getitem__", 11) == 0) {
            node_of[p] = NODE_DROPPED;
            (*n_dropped)++;
        } else {
            node_of[p] = (*n)++;
        }
    }
    free(consumers);
    return PD_OK;
}

/* The input edges of profile node `node` that come from graph nodes. */
static int *graph_inputs(const pd_profile_node *node, const int *node_of, int *count)
{
    int *list = int_list(node->n_inputs);
    *count = 0;
    if (!list)
        return NULL;
    for (int e = 0; e < node->n_inputs; e++)
        if (node_of[node->inputs[e]] >= 0)
            list[(*count)++] = node_of[node->inputs[e]];
    return list;
}

/* Copies the kept nodes, the removed inputs and the dropped sinks of
 * `profile` into `g` (sized by classify_nodes). */
static pd_status graph_copy_nodes(pd_plan_graph *g, const pd_profile *profile, const int *node_of)
{
    int n_inputs = 0, n_dropped = 0;
    for (int p = 0; p < pd_profile_size(profile); p++) {
        const pd_profile_node *node = pd_profile_node_at(profile, p);
        int v = node_of[p];
        if (v == NODE_INPUT) {
            g->inputs[n_inputs++] = p;
            g->data_loading_ms += node->fwd_ms;
            continue;
        }
        if (v == NODE_DROPPED) {
            g->dropped[n_dropped] = p;
            g->dropped_in[n_dropped] = graph_inputs(node, node_of, &g->n_dropped_in[n_dropped]);
            if (!g->dropped_in[n_dropped++])
                return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
            continue;
        }
        g->fwd_ms[v] = node->fwd_ms;
        g->bwd_ms[v] = node->bwd_ms;
        g->act_bytes[v] = (double)node->activation_bytes;
        g->par_bytes[v] = (double)node->weight_bytes;
        g->in[v] = graph_inputs(node, node_of, &g->n_in[v]);
        g->members[v] = int_list(1);
        if (!g->in[v] || !g->members[v])
            return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        g->n_members[v] = 1;
        g->members[v][0] = p;
    }
    return PD_OK;
}

pd_status pd_plan_graph_from_profile(const pd_profile *profile, pd_plan_graph **out)
{
    int size = pd_profile_size(profile), n = 0, n_inputs = 0, n_dropped = 0;
    pd_plan_graph *g = NULL;
    pd_status st;
    int *node_of = int_list(size);

    if (!node_of)
        return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
    PD_CHECK_GOTO(classify_nodes(profile, node_of, &n, &n_inputs, &n_dropped), st, out_free);
    if (n == 0) {
        st = PD_ERROR(PD_EINVAL, "profile '%s' has no compute nodes to plan", pd_profile_get_info(profile)->model);
        goto out_free;
    }
    g = pd_plan_graph_alloc(n, n_inputs, n_dropped);
    if (!g) {
        st = PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        goto out_free;
    }
    PD_CHECK_GOTO(graph_copy_nodes(g, profile, node_of), st, out_free);
    PD_CHECK_GOTO(pd_plan_graph_fill_outputs(g), st, out_free);
    *out = g;
    g = NULL;
out_free:
    pd_plan_graph_destroy(g);
    free(node_of);
    return st;
}

/* ---- branch collapsing ---- */

/* compress_branch_helper for the branch that starts at v (an output of a
 * fork): the nodes of the chain from v that have one input each, up to the
 * node before a join, or up to and including a node that forks again, get
 * group `id`. Returns the chain's last node (the branch's end, which the
 * walk continues from); v itself when nothing merges. Unlike the original,
 * a chain that runs into a sink takes the sink in (the original drops the
 * sink from its output graph). */
static int collapse_chain(const pd_plan_graph *g, int v, int id, int *group)
{
    int cur = v, length = 0;

    if (g->n_in[v] > 1)
        return v;
    while (g->n_in[cur] == 1 && g->n_out[cur] == 1) {
        int next = g->out[cur][0];
        group[cur] = id;
        length++;
        if (g->n_in[next] > 1)
            return cur;
        cur = next;
        if (g->n_out[cur] == 0) {
            group[cur] = id;
            return cur;
        }
    }
    if (length > 0 && g->n_out[cur] > 1)
        group[cur] = id;
    return cur;
}

/* The original's walk: breadth first from the sources; each output of a
 * fork starts a branch to collapse; the walk goes on from each branch's
 * end. group[v] is the chain v belongs to, -1 for a node left alone. */
static pd_status collapse_groups(const pd_plan_graph *g, int *group, int *n_groups)
{
    size_t cap = (size_t)g->n + 1;
    for (int v = 0; v < g->n; v++)
        cap += (size_t)g->n_out[v];
    int *queue = malloc(sizeof(int) * cap);
    char *seen = calloc((size_t)g->n + 1, 1);
    size_t head = 0, tail = 0;

    if (!queue || !seen) {
        free(queue);
        free(seen);
        return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
    }
    *n_groups = 0;
    for (int v = 0; v < g->n; v++) {
        group[v] = -1;
        if (g->n_in[v] == 0)
            queue[tail++] = v;
    }
    while (head < tail) {
        int v = queue[head++];
        if (seen[v])
            continue;
        for (int e = 0; e < g->n_out[v]; e++) {
            int next = g->out[v][e];
            if (g->n_out[v] > 1)
                next = collapse_chain(g, next, (*n_groups)++, group);
            if (!seen[next])
                queue[tail++] = next;
        }
        seen[v] = 1;
    }
    free(queue);
    free(seen);
    return PD_OK;
}

pd_status pd_plan_graph_add_member(pd_plan_graph *c, int w, const pd_plan_graph *g, int v)
{
    int *m = realloc(c->members[w], sizeof(int) * (size_t)(c->n_members[w] + g->n_members[v]));
    if (!m)
        return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
    memcpy(m + c->n_members[w], g->members[v], sizeof(int) * (size_t)g->n_members[v]);
    c->members[w] = m;
    c->n_members[w] += g->n_members[v];
    c->fwd_ms[w] += g->fwd_ms[v];
    c->bwd_ms[w] += g->bwd_ms[v];
    c->par_bytes[w] += g->par_bytes[v];
    return PD_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The input edges of new node w: those of its members that come from other
 * new nodes, in member order. */
static pd_status collapse_inputs(pd_plan_graph *c, const pd_plan_graph *g, const int *new_of)
{
    for (int v = 0; v < g->n; v++) {
        int w = new_of[v];
        int *in = realloc(c->in[w], sizeof(int) * (size_t)(c->n_in[w] + g->n_in[v] + 1));
        if (!in)
            return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        c->in[w] = in;
        for (int e = 0; e < g->n_in[v]; e++)
            if (new_of[g->in[v][e]] != w)
                in[c->n_in[w]++] = new_of[g->in[v][e]];
    }
    return PD_OK;
}

pd_status pd_plan_graph_copy_extras(pd_plan_graph *c, const pd_plan_graph *g, const int *new_of)
{
    c->data_loading_ms = g->data_loading_ms;
    memcpy(c->inputs, g->inputs, sizeof(int) * (size_t)g->n_inputs);
    memcpy(c->dropped, g->dropped, sizeof(int) * (size_t)g->n_dropped);
    for (int d = 0; d < g->n_dropped; d++) {
        c->n_dropped_in[d] = g->n_dropped_in[d];
        c->dropped_in[d] = int_list(g->n_dropped_in[d]);
        if (!c->dropped_in[d])
            return PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        for (int e = 0; e < g->n_dropped_in[d]; e++)
            c->dropped_in[d][e] = new_of[g->dropped_in[d][e]];
    }
    return PD_OK;
}

/* new_of[v]: the collapsed node of v; new nodes are numbered by their
 * first member, which keeps a topological order (a chain is entered only
 * through its first member). Returns the number of new nodes. */
static int collapse_numbering(const pd_plan_graph *g, const int *group, int n_groups, int *new_of, int *group_new)
{
    int n = 0;
    for (int k = 0; k < n_groups; k++)
        group_new[k] = -1;
    for (int v = 0; v < g->n; v++) {
        if (group[v] < 0)
            new_of[v] = n++;
        else if (group_new[group[v]] >= 0)
            new_of[v] = group_new[group[v]];
        else
            new_of[v] = group_new[group[v]] = n++;
    }
    return n;
}

pd_status pd_plan_graph_collapse_branches(const pd_plan_graph *g, pd_plan_graph **out)
{
    int *group = int_list(g->n), *new_of = int_list(g->n), *group_new = NULL;
    int n_groups = 0, n;
    pd_plan_graph *c = NULL;
    pd_status st;

    if (!group || !new_of) {
        st = PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        goto out_free;
    }
    PD_CHECK_GOTO(collapse_groups(g, group, &n_groups), st, out_free);
    group_new = int_list(n_groups);
    if (!group_new) {
        st = PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        goto out_free;
    }
    n = collapse_numbering(g, group, n_groups, new_of, group_new);
    c = pd_plan_graph_alloc(n, g->n_inputs, g->n_dropped);
    if (!c) {
        st = PD_ERROR(PD_ENOMEM, "plan graph: out of memory");
        goto out_free;
    }
    /* Members come in increasing order: the last one's output is the
     * chain's. */
    for (int v = 0; v < g->n; v++) {
        PD_CHECK_GOTO(pd_plan_graph_add_member(c, new_of[v], g, v), st, out_free);
        c->act_bytes[new_of[v]] = g->act_bytes[v];
    }
    for (int w = 0; w < n; w++)
        qsort(c->members[w], (size_t)c->n_members[w], sizeof(int), cmp_int);
    PD_CHECK_GOTO(collapse_inputs(c, g, new_of), st, out_free);
    PD_CHECK_GOTO(pd_plan_graph_fill_outputs(c), st, out_free);
    PD_CHECK_GOTO(pd_plan_graph_copy_extras(c, g, new_of), st, out_free);
    *out = c;
    c = NULL;
out_free:
    pd_plan_graph_destroy(c);
    free(group);
    free(new_of);
    free(group_new);
    return st;
}
