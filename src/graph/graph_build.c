/* Building a graph: nodes, shape inference through each layer's setup,
 * parameter and saved-buffer declarations, and queries on the structure. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/pd_graph_int.h"

pd_status pd_graph_create(pd_device *dev, uint64_t seed, pd_graph **out)
{
    pd_graph *g;

    if (!dev)
        return PD_ERROR(PD_EINVAL, "graph: no device");
    g = calloc(1, sizeof(*g));
    if (!g)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    g->dev = dev;
    g->seed = seed;
    *out = g;
    return PD_OK;
}

void pd_graph_destroy(pd_graph *g)
{
    if (!g)
        return;
    pd_graph_release_memory(g);
    for (int i = 0; i < g->n_layers; i++)
        free(g->layers[i]);
    for (int i = 0; i < g->n_params; i++)
        free(g->params[i]);
    free(g->layers);
    free(g->params);
    free(g);
}

pd_device *pd_graph_device(const pd_graph *g) { return g->dev; }

pd_status pd_layer_shape_error_at(const char *file, int line, const pd_layer *l, const char *fmt, ...)
{
    char message[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    return pd_error_at(file, line, PD_ESHAPE, "layer '%s' (%s): %s", l->name, l->cls->type, message);
}

static pd_status grow(void **array, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return PD_OK;
    int new_cap = *cap ? *cap * 2 : 16;
    while (new_cap < need)
        new_cap *= 2;
    void *p = realloc(*array, (size_t)new_cap * elem);
    if (!p)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    *array = p;
    *cap = new_cap;
    return PD_OK;
}

int pd_graph_find(const pd_graph *g, const char *name)
{
    for (int i = 0; i < g->n_layers; i++)
        if (strcmp(g->layers[i]->name, name) == 0)
            return i;
    return -1;
}

/* The graph a layer under construction belongs to is needed to register its
 * parameters; layers do not hold a back pointer, so setup runs with this one. */
static _Thread_local pd_graph *graph_in_setup;

pd_status pd_graph_add_layer(pd_graph *g, const pd_layer_class *cls, const char *name, const void *hparams,
                             size_t hparams_size, int n_inputs, const int *inputs, int *out)
{
    pd_layer *l;
    pd_status s;

    if (g->allocated)
        return PD_ERROR(PD_ESTATE, "graph: cannot add '%s' after the graph was allocated", name ? name : "?");
    if (!name || !*name || strlen(name) >= sizeof(l->name))
        return PD_ERROR(PD_EINVAL, "graph: a %s layer needs a name of 1..%zu characters", cls->type,
                        sizeof(l->name) - 1);
    if (pd_graph_find(g, name) >= 0)
        return PD_ERROR(PD_EINVAL, "graph: a node named '%s' exists already", name);
    if (n_inputs < cls->min_inputs || n_inputs > cls->max_inputs || n_inputs > PD_LAYER_MAX_INPUTS)
        return PD_ERROR(PD_EINVAL, "layer '%s' (%s): takes %d..%d inputs, got %d", name, cls->type,
                        cls->min_inputs, cls->max_inputs, n_inputs);
    if (hparams_size > PD_LAYER_HPARAMS_BYTES)
        return PD_ERROR(PD_EINVAL, "layer '%s': hyper-parameters too large", name);
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] < 0 || inputs[i] >= g->n_layers)
            return PD_ERROR(PD_EINVAL, "layer '%s' (%s): input %d is node %d, which does not exist", name,
                            cls->type, i, inputs[i]);
    PD_CHECK(grow((void **)&g->layers, &g->cap_layers, g->n_layers + 1, sizeof(*g->layers)));

    l = calloc(1, sizeof(*l));
    if (!l)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    l->cls = cls;
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->id = g->n_layers;
    l->seed = g->seed;
    l->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) {
        const pd_layer *src = g->layers[inputs[i]];
        l->inputs[i] = inputs[i];
        l->in_shape[i] = src->out_shape;
        l->in_dtype[i] = src->out_dtype;
    }
    if (hparams_size)
        memcpy(l->hparams, hparams, hparams_size);

    /* Parameters declared by setup are appended to g->params; undo on failure. */
    int params_before = g->n_params;
    graph_in_setup = g;
    s = cls->setup(l);
    graph_in_setup = NULL;
    if (s != PD_OK) {
        for (int i = params_before; i < g->n_params; i++)
            free(g->params[i]);
        g->n_params = params_before;
        free(l);
        return s;
    }
    g->layers[g->n_layers++] = l;
    if (out)
        *out = l->id;
    return PD_OK;
}

pd_status pd_layer_declare_param(pd_layer *l, const char *suffix, const pd_shape *shape, bool trainable,
                                 pd_init_kind init, float init_a, pd_param **out)
{
    pd_graph *g = graph_in_setup;
    pd_param *p;

    if (!g)
        return PD_ERROR(PD_ESTATE, "layer '%s': parameters can only be declared during setup", l->name);
    if (l->n_params >= PD_LAYER_MAX_PARAMS)
        return PD_ERROR(PD_EINVAL, "layer '%s': more than %d parameters", l->name, PD_LAYER_MAX_PARAMS);
    PD_CHECK(grow((void **)&g->params, &g->cap_params, g->n_params + 1, sizeof(*g->params)));
    p = calloc(1, sizeof(*p));
    if (!p)
        return PD_ERROR(PD_ENOMEM, "graph: out of host memory");
    snprintf(p->name, sizeof(p->name), "%s.%s", l->name, suffix);
    pd_tensor_view(&p->value, g->dev, PD_F32, shape, NULL);
    pd_tensor_view(&p->grad, g->dev, PD_F32, shape, NULL);
    p->trainable = trainable;
    p->init = init;
    p->init_a = init_a;
    g->params[g->n_params++] = p;
    l->params[l->n_params++] = p;
    if (out)
        *out = p;
    return PD_OK;
}

pd_status pd_layer_declare_saved(pd_layer *l, pd_dtype dtype, const pd_shape *shape, int *index)
{
    if (l->n_saved >= PD_LAYER_MAX_SAVED)
        return PD_ERROR(PD_EINVAL, "layer '%s': more than %d saved buffers", l->name, PD_LAYER_MAX_SAVED);
    pd_tensor_view(&l->saved[l->n_saved], NULL, dtype, shape, NULL);
    if (index)
        *index = l->n_saved;
    l->n_saved++;
    return PD_OK;
}
