/* Layer: word embedding, i32 ids [N,T] -> f32 [N,T,dim] through a table
 * "<name>.weight" [vocab,dim] initialised N(0,1) as PyTorch's Embedding.
 * Ids carry no gradient; the table's gradient is a scatter-add of d_out. */
#include "config.h"

#include <assert.h>

#include "graph/pd_layer.h"

typedef struct embedding_hparams {
    int vocab, dim;
} embedding_hparams;

static_assert(sizeof(embedding_hparams) <= PD_LAYER_HPARAMS_BYTES,
              "embedding hyper-parameters exceed the layer's room");

static pd_status embedding_setup(pd_layer *l)
{
    const embedding_hparams *hp = (const embedding_hparams *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_I32)
        return PD_LAYER_SHAPE_ERROR(l, "ids must be i32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 2)
        return PD_LAYER_SHAPE_ERROR(l, "ids must be [N,T], got %s", pd_shape_format(in, buf, sizeof(buf)));
    if (hp->vocab <= 0 || hp->dim <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "vocabulary %d and dimension %d must be positive", hp->vocab, hp->dim);

    pd_shape w_shape = pd_shape_make(2, (int64_t)hp->vocab, (int64_t)hp->dim);
    PD_CHECK(pd_layer_declare_param(l, "weight", &w_shape, true, PD_INIT_NORMAL, 1.0f, NULL));
    l->out_shape = pd_shape_make(3, in->dim[0], in->dim[1], (int64_t)hp->dim);
    l->out_dtype = PD_F32;
    return PD_OK;
}

static pd_status embedding_forward(pd_layer *l, pd_device *dev, bool training)
{
    return dev->ops->embedding_forward(dev, l->in[0], &l->params[0]->value, l->out);
}

static pd_status embedding_backward(pd_layer *l, pd_device *dev)
{
    return dev->ops->embedding_backward(dev, l->in[0], l->d_out, &l->params[0]->grad);
}

static const pd_layer_class embedding_class = {
    .type = "embedding",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = embedding_setup,
    .forward = embedding_forward,
    .backward = embedding_backward,
    /* no .flops: a gather of table rows, 0 FLOPs */
};

pd_status pd_graph_embedding(pd_graph *g, const char *name, int ids, int vocab, int dim, int *out)
{
    embedding_hparams hp = {0};

    hp.vocab = vocab;
    hp.dim = dim;
    return pd_graph_add_layer(g, &embedding_class, name, &hp, sizeof(hp), 1, &ids, out);
}
