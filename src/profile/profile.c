/* The profile data model: a model's nodes in topological order with their
 * times, sizes and input edges; every node and field validated on entry so
 * that readers and the partitioner can trust what they get. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/profile.h>

struct pd_profile {
    pd_profile_info info; /* strings owned */
    pd_profile_node *nodes; /* strings and inputs owned */
    int n_nodes, cap_nodes;
};

static bool has_space(const char *s)
{
    for (; *s; s++)
        if (isspace((unsigned char)*s))
            return true;
    return false;
}

static bool has_line_break(const char *s) { return strchr(s, '\n') || strchr(s, '\r'); }

static pd_status check_info(const pd_profile_info *info)
{
    if (!info)
        return PD_ERROR(PD_EINVAL, "profile: NULL description");
    if (!info->model || !info->model[0] || has_line_break(info->model))
        return PD_ERROR(PD_EINVAL, "profile: model: a non-empty name on one line is needed");
    if (info->batch < 0)
        return PD_ERROR(PD_EINVAL, "profile: batch %d is negative", info->batch);
    if ((unsigned)info->dtype >= PD_DTYPE_COUNT)
        return PD_ERROR(PD_EINVAL, "profile: invalid dtype %d", (int)info->dtype);
    if (!info->device || !info->device[0] || has_line_break(info->device))
        return PD_ERROR(PD_EINVAL, "profile: device: a non-empty name on one line is needed");
    if (!info->source || !info->source[0] || has_line_break(info->source))
        return PD_ERROR(PD_EINVAL, "profile: source: a non-empty text on one line is needed");
    if (info->warmup < 0 || info->iterations < 0)
        return PD_ERROR(PD_EINVAL, "profile: warmup %d and iterations %d must not be negative", info->warmup,
                        info->iterations);
    if (!isfinite(info->step_ms) || info->step_ms < 0)
        return PD_ERROR(PD_EINVAL, "profile: step_ms %g must be a finite number >= 0", info->step_ms);
    if (info->data_note && has_line_break(info->data_note))
        return PD_ERROR(PD_EINVAL, "profile: data_note must be one line");
    return PD_OK;
}

pd_status pd_profile_create(const pd_profile_info *info, pd_profile **out)
{
    pd_profile *p;

    PD_CHECK(check_info(info));
    p = calloc(1, sizeof(*p));
    if (!p)
        return PD_ERROR(PD_ENOMEM, "profile: out of host memory");
    p->info = *info;
    p->info.model = strdup(info->model);
    p->info.device = strdup(info->device);
    p->info.source = strdup(info->source);
    p->info.data_note = strdup(info->data_note ? info->data_note : "");
    if (!p->info.model || !p->info.device || !p->info.source || !p->info.data_note) {
        pd_profile_destroy(p);
        return PD_ERROR(PD_ENOMEM, "profile: out of host memory");
    }
    *out = p;
    return PD_OK;
}

static void node_release(pd_profile_node *n)
{
    free((char *)n->name);
    free((char *)n->type);
    free((char *)n->description);
    free((int *)n->inputs);
}

void pd_profile_destroy(pd_profile *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_nodes; i++)
        node_release(&p->nodes[i]);
    free(p->nodes);
    free((char *)p->info.model);
    free((char *)p->info.device);
    free((char *)p->info.source);
    free((char *)p->info.data_note);
    free(p);
}

static pd_status check_node(const pd_profile *p, const pd_profile_node *node)
{
    const char *name = node->name;

    if (!name || !name[0] || has_space(name))
        return PD_ERROR(PD_EINVAL, "profile: node %d: name '%s' must be non-empty, without white space", p->n_nodes,
                        name ? name : "(null)");
    if (pd_profile_find(p, name) >= 0)
        return PD_ERROR(PD_EINVAL, "profile: node '%s' exists already", name);
    if (!node->type || !node->type[0] || has_space(node->type))
        return PD_ERROR(PD_EINVAL, "profile: node '%s': type '%s' must be non-empty, without white space", name,
                        node->type ? node->type : "(null)");
    if (node->description && has_line_break(node->description))
        return PD_ERROR(PD_EINVAL, "profile: node '%s': the description must be one line", name);
    if (!isfinite(node->fwd_ms) || node->fwd_ms < 0 || !isfinite(node->bwd_ms) || node->bwd_ms < 0)
        return PD_ERROR(PD_EINVAL, "profile: node '%s': times %g ms and %g ms must be finite and >= 0", name,
                        node->fwd_ms, node->bwd_ms);
    if (node->activation_bytes < 0 || node->weight_bytes < 0 || node->flops < -1)
        return PD_ERROR(PD_EINVAL, "profile: node '%s': activation bytes %lld, weight bytes %lld, flops %lld out of range",
                        name, (long long)node->activation_bytes, (long long)node->weight_bytes,
                        (long long)node->flops);
    if (node->n_inputs < 0 || (node->n_inputs > 0 && !node->inputs))
        return PD_ERROR(PD_EINVAL, "profile: node '%s': %d inputs without a list", name, node->n_inputs);
    for (int i = 0; i < node->n_inputs; i++)
        if (node->inputs[i] < 0 || node->inputs[i] >= p->n_nodes)
            return PD_ERROR(PD_EINVAL, "profile: node '%s': input %d is node %d, not one of the %d before it", name, i,
                            node->inputs[i], p->n_nodes);
    return PD_OK;
}

pd_status pd_profile_add_node(pd_profile *p, const pd_profile_node *node, int *index)
{
    pd_profile_node copy;

    PD_CHECK(check_node(p, node));
    if (p->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes ? 2 * p->cap_nodes : 32;
        pd_profile_node *nodes = realloc(p->nodes, (size_t)cap * sizeof(*nodes));
        if (!nodes)
            return PD_ERROR(PD_ENOMEM, "profile: out of host memory for %d nodes", cap);
        p->nodes = nodes;
        p->cap_nodes = cap;
    }
    copy = *node;
    copy.name = strdup(node->name);
    copy.type = strdup(node->type);
    copy.description = strdup(node->description ? node->description : "");
    copy.inputs = malloc(node->n_inputs ? (size_t)node->n_inputs * sizeof(int) : 1);
    if (!copy.name || !copy.type || !copy.description || !copy.inputs) {
        node_release(&copy);
        return PD_ERROR(PD_ENOMEM, "profile: out of host memory");
    }
    if (node->n_inputs)
        memcpy((int *)copy.inputs, node->inputs, (size_t)node->n_inputs * sizeof(int));
    p->nodes[p->n_nodes] = copy;
    if (index)
        *index = p->n_nodes;
    p->n_nodes++;
    return PD_OK;
}

const pd_profile_info *pd_profile_get_info(const pd_profile *p) { return &p->info; }

int pd_profile_size(const pd_profile *p) { return p->n_nodes; }

const pd_profile_node *pd_profile_node_at(const pd_profile *p, int index)
{
    return index >= 0 && index < p->n_nodes ? &p->nodes[index] : NULL;
}

int pd_profile_find(const pd_profile *p, const char *name)
{
    for (int i = 0; name && i < p->n_nodes; i++)
        if (strcmp(p->nodes[i].name, name) == 0)
            return i;
    return -1;
}

static bool is_input(const pd_profile_node *n) { return strcmp(n->type, PD_PROFILE_INPUT_TYPE) == 0; }

double pd_profile_compute_ms(const pd_profile *p)
{
    double sum = 0;

    for (int i = 0; i < p->n_nodes; i++)
        if (!is_input(&p->nodes[i]))
            sum += p->nodes[i].fwd_ms + p->nodes[i].bwd_ms;
    return sum;
}

double pd_profile_data_loading_ms(const pd_profile *p)
{
    double sum = 0;

    for (int i = 0; i < p->n_nodes; i++)
        if (is_input(&p->nodes[i]))
            sum += p->nodes[i].fwd_ms;
    return sum;
}

int64_t pd_profile_weight_bytes(const pd_profile *p)
{
    int64_t sum = 0;

    for (int i = 0; i < p->n_nodes; i++)
        sum += p->nodes[i].weight_bytes;
    return sum;
}
