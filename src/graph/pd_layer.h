/* The contract between the graph and one layer type (module-private).
 * Each layer type lives in layers/<type>.c and defines a pd_layer_class plus
 * its public builder (pd_graph_<type>) on top of pd_graph_add_layer(). */
#ifndef PD_LAYER_H
#define PD_LAYER_H

#include <pipedream/graph.h>

#include "core/pd_rng.h"

#define PD_LAYER_MAX_INPUTS 8
#define PD_LAYER_MAX_PARAMS 4
#define PD_LAYER_MAX_SAVED 4
#define PD_LAYER_HPARAMS_BYTES 128

typedef struct pd_layer pd_layer;

typedef struct pd_layer_class {
    const char *type;
    int min_inputs, max_inputs;

    /* Checks the inputs (l->in_shape, l->in_dtype, l->n_inputs), sets
     * l->out_shape and l->out_dtype, and declares parameters and saved
     * buffers. Reports PD_ESHAPE with a message naming l->name on a misfit. */
    pd_status (*setup)(pd_layer *l);

    /* Computes l->out from l->in; `training` as in pd_graph_forward. */
    pd_status (*forward)(pd_layer *l, pd_device *dev, bool training);

    /* From l->d_out computes l->d_in[i] (skipping NULL entries) and the
     * parameters' gradients. Reads l->in, l->out and the saved buffers. */
    pd_status (*backward)(pd_layer *l, pd_device *dev);

    /* Forward FLOPs over l's shapes (whole batch), by the conventions of
     * pd_graph_node_flops; NULL counts as 0 (data movement only). */
    int64_t (*flops)(const pd_layer *l);

    /* True if the output is the (reshaped) input memory: no copy, no buffer. */
    bool output_aliases_input;
} pd_layer_class;

struct pd_layer {
    const pd_layer_class *cls;
    char name[64];
    int id;

    int n_inputs;
    int inputs[PD_LAYER_MAX_INPUTS];
    pd_shape in_shape[PD_LAYER_MAX_INPUTS];
    pd_dtype in_dtype[PD_LAYER_MAX_INPUTS];
    pd_shape out_shape;
    pd_dtype out_dtype;

    /* Hyper-parameters, a copy of the builder's struct (cls-specific). */
    unsigned char hparams[PD_LAYER_HPARAMS_BYTES];

    pd_param *params[PD_LAYER_MAX_PARAMS];
    int n_params;

    /* Buffers written by forward and read by backward (e.g. batch-norm's
     * saved statistics, the softmax probabilities, LSTM gate activations);
     * planned and allocated by the graph. */
    pd_tensor saved[PD_LAYER_MAX_SAVED];
    int n_saved;

    /* Bound by the graph before each call. */
    const pd_tensor *in[PD_LAYER_MAX_INPUTS];
    pd_tensor *out;
    const pd_tensor *d_out;
    pd_tensor *d_in[PD_LAYER_MAX_INPUTS]; /* NULL where no gradient is needed */
    int64_t minibatch;                     /* seeds dropout */
    uint64_t seed;                         /* the graph's seed */
};

/* Adds a layer of class `cls` with hyper-parameters copied from `hparams`
 * (cls-specific struct, at most PD_LAYER_HPARAMS_BYTES). */
pd_status pd_graph_add_layer(pd_graph *g, const pd_layer_class *cls, const char *name, const void *hparams,
                             size_t hparams_size, int n_inputs, const int *inputs, int *out);

/* Declares a parameter "<layer>.<suffix>" of `shape` (f32) during setup. */
pd_status pd_layer_declare_param(pd_layer *l, const char *suffix, const pd_shape *shape, bool trainable,
                                 pd_init_kind init, float init_a, pd_param **out);

/* Declares a saved buffer of `shape` and `dtype` during setup; its tensor is
 * l->saved[index] once the graph is allocated. */
pd_status pd_layer_declare_saved(pd_layer *l, pd_dtype dtype, const pd_shape *shape, int *index);

/* PD_ESHAPE with "layer '<name>' (<type>): <message>". */
pd_status pd_layer_shape_error_at(const char *file, int line, const pd_layer *l, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define PD_LAYER_SHAPE_ERROR(l, ...) pd_layer_shape_error_at(__FILE__, __LINE__, (l), __VA_ARGS__)

#endif
