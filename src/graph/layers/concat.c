/* Layer: concatenation of up to PD_LAYER_MAX_INPUTS activations along one
 * axis (Inception's branches along channels, S2VT's features beside word
 * embeddings). The backward pass splits the gradient into the inputs. */
#include "config.h"

#include <assert.h>

#include "graph/pd_layer.h"

typedef struct concat_hparams {
    int axis; /* as given to the builder; setup resolves a negative one */
} concat_hparams;

static_assert(sizeof(concat_hparams) <= PD_LAYER_HPARAMS_BYTES, "concat hyper-parameters exceed the layer's room");

static pd_status concat_setup(pd_layer *l)
{
    concat_hparams *hp = (concat_hparams *)l->hparams;
    const pd_shape *first = &l->in_shape[0];
    char a[96], b[96];
    int ndim = first->ndim;

    if (hp->axis < -ndim || hp->axis >= ndim || ndim == 0)
        return PD_LAYER_SHAPE_ERROR(l, "axis %d outside [%d, %d) of input 0 %s", hp->axis, -ndim, ndim,
                                    pd_shape_format(first, a, sizeof(a)));
    if (hp->axis < 0)
        hp->axis += ndim;
    l->out_shape = *first;
    l->out_dtype = l->in_dtype[0];
    for (int i = 1; i < l->n_inputs; i++) {
        const pd_shape *s = &l->in_shape[i];
        if (l->in_dtype[i] != l->in_dtype[0])
            return PD_LAYER_SHAPE_ERROR(l, "input %d is %s, input 0 %s", i, pd_dtype_name(l->in_dtype[i]),
                                        pd_dtype_name(l->in_dtype[0]));
        bool fits = s->ndim == ndim;
        for (int d = 0; fits && d < ndim; d++)
            fits = d == hp->axis || s->dim[d] == first->dim[d];
        if (!fits)
            return PD_LAYER_SHAPE_ERROR(l, "input %d %s does not match input 0 %s outside axis %d", i,
                                        pd_shape_format(s, a, sizeof(a)), pd_shape_format(first, b, sizeof(b)),
                                        hp->axis);
        l->out_shape.dim[hp->axis] += s->dim[hp->axis];
    }
    return PD_OK;
}

static pd_status concat_forward(pd_layer *l, pd_device *dev, bool training)
{
    const concat_hparams *hp = (const concat_hparams *)l->hparams;

    return dev->ops->concat_forward(dev, hp->axis, l->n_inputs, l->in, l->out);
}

static pd_status concat_backward(pd_layer *l, pd_device *dev)
{
    const concat_hparams *hp = (const concat_hparams *)l->hparams;
    int runs = 0, wanted = 0;

    /* The split infers the width of skipped inputs from the others, which
     * works for one run of consecutive skipped inputs. */
    for (int i = 0; i < l->n_inputs; i++) {
        if (l->d_in[i])
            wanted++;
        else if (i == 0 || l->d_in[i - 1])
            runs++;
    }
    if (wanted == 0)
        return PD_OK;
    if (runs > 1)
        return PD_ERROR(PD_ENOTSUP, "layer '%s' (concat): gradients are wanted for inputs separated by %d runs of "
                        "inputs without gradient; order the inputs so that those without gradient are adjacent",
                        l->name, runs);
    return dev->ops->concat_backward(dev, hp->axis, l->n_inputs, l->d_out, l->d_in);
}

static const pd_layer_class concat_class = {
    .type = "concat",
    .min_inputs = 1,
    .max_inputs = PD_LAYER_MAX_INPUTS,
    .setup = concat_setup,
    .forward = concat_forward,
    .backward = concat_backward,
};

pd_status pd_graph_concat(pd_graph *g, const char *name, int n, const int *xs, int axis, int *out)
{
    concat_hparams hp = {0};

    hp.axis = axis;
    return pd_graph_add_layer(g, &concat_class, name, &hp, sizeof(hp), n, xs, out);
}
