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
    pd_tensor skipped[PD_LAYER_MAX_INPUTS];
    pd_tensor *parts[PD_LAYER_MAX_INPUTS];
    int wanted = 0;

    /* Inputs that need no gradient get a data-less part: the split skips it
     * but its shape still places the others. */
    for (int i = 0; i < l->n_inputs; i++) {
        parts[i] = l->d_in[i];
        if (!parts[i]) {
            pd_tensor_view(&skipped[i], dev, l->in_dtype[i], &l->in_shape[i], NULL);
            parts[i] = &skipped[i];
        } else {
            wanted++;
        }
    }
    if (wanted == 0)
        return PD_OK;
    return dev->ops->concat_backward(dev, hp->axis, l->n_inputs, l->d_out, parts);
}

static const pd_layer_class concat_class = {
    .type = "concat",
    .min_inputs = 1,
    .max_inputs = PD_LAYER_MAX_INPUTS,
    .setup = concat_setup,
    .forward = concat_forward,
    .backward = concat_backward,
    /* no .flops: data movement only, 0 FLOPs */
};

pd_status pd_graph_concat(pd_graph *g, const char *name, int n, const int *xs, int axis, int *out)
{
    concat_hparams hp = {0};

    hp.axis = axis;
    return pd_graph_add_layer(g, &concat_class, name, &hp, sizeof(hp), n, xs, out);
}
