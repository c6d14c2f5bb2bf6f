/* The model zoo: builder functions that add a whole network, from its input
 * nodes to its loss, to a pd_graph, and a registry that finds them by name. */
#ifndef PIPEDREAM_MODELS_H
#define PIPEDREAM_MODELS_H

#include <pipedream/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of the problem a model is built for. The published
 * architectures are width_multiplier 1; smaller multipliers scale every
 * layer's channel and feature counts (rounded, at least 1) so the same
 * network can run small on a CPU. */
typedef struct pd_model_options {
    int batch;              /* N of the input nodes, > 0 */
    int channels;           /* C of the image input, > 0 */
    int height, width;      /* H, W of the image input, > 0 */
    int classes;            /* logits per sample, >= 2 */
    float width_multiplier; /* > 0 */
} pd_model_options;

/* The nodes a training loop feeds and reads. */
typedef struct pd_model_io {
    int images; /* input f32 [N,C,H,W], named "images" */
    int labels; /* input i32 [N], named "labels" */
    int logits; /* f32 [N,classes] */
    int loss;   /* f32 [1], mean softmax cross-entropy, named "loss" */
    int words;  /* input i32 [N,T] of caption word ids (S2VT); -1 for image models */
} pd_model_io;

/* Adds the model `name` (see pd_model_name) to the empty graph `g`, built
 * for `opts`, and fills *io. PD_ENOTFOUND for an unknown name (the message
 * lists the known ones), PD_EINVAL for bad options, PD_ESHAPE if the input
 * is too small for the network. Parameter names follow the PyTorch
 * definitions ("conv1.weight", "fc1.bias"). */
pd_status pd_model_build(const char *name, pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* The name of the index-th registered model (0-based); NULL past the last,
 * so `for (i = 0; pd_model_name(i); i++)` lists them all. */
const char *pd_model_name(int index);

/* A one-line description of a registered model; NULL for an unknown name. */
const char *pd_model_description(const char *name);

/* For builders: PD_EINVAL with a message naming the field unless every
 * option is in range. */
pd_status pd_model_check_options(const pd_model_options *opts);

/* For builders: a channel or feature count scaled by the width multiplier,
 * rounded to nearest, at least 1. */
int pd_model_scale(int count, float width_multiplier);

/* LeNet-5 (LeCun et al. 1998, with ReLU and max pooling): conv1 6@5x5 pad 2,
 * relu, maxpool 2; conv2 16@5x5, relu, maxpool 2; flatten; fc1 120, relu;
 * fc2 84, relu; fc3 classes. 61,706 parameters for 1x28x28 and 10 classes. */
pd_status pd_model_lenet(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* mlp.c, vgg16.c, alexnet.c, resnet50.c, inception_v3.c */

/* s2vt.c */

#ifdef __cplusplus
}
#endif
#endif
