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

/* mlp.c, vgg16.c, alexnet.c, resnet50.c, inception_v3.c
 *
 * The image classifiers of the paper, as torchvision defines them. Each
 * takes images [N,C,H,W] and labels [N], ends in "loss", and honours every
 * option: width_multiplier scales every channel and hidden feature count
 * (pd_model_scale), never the classes, so at 1 the architectures are exact.
 * Graph node names are torchvision's module names, so parameter names are
 * its state_dict keys ("features.0.weight", "layer1.0.downsample.1.bias",
 * "Mixed_5b.branch1x1.bn.running_mean"). Batch norm keeps running_mean and
 * running_var as buffers but has no "num_batches_tracked" (PyTorch's step
 * counter, used only when momentum is None): load a checkpoint into
 * torchvision with strict=False, or add those keys. Weights are initialised
 * as torchvision initialises an untrained model (stated per model).
 * Layers that torchvision reuses or applies as functions (ReLU, pooling)
 * get node names of their own ("layer1.0.relu1"); they hold no parameter. */

/* Multi-layer perceptron: flatten; fc1 256, relu1; fc2 256, relu2; fc3
 * classes; PyTorch's default Linear initialisation. 269,322 parameters on
 * 1x28x28 and 10 classes. */
pd_status pd_model_mlp(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* VGG-16 (configuration D, no batch norm) as torchvision's vgg16: thirteen
 * 3x3 convolutions (pad 1, bias, ReLU) of 64, 64 | 128, 128 | 256 x3 |
 * 512 x3 | 512 x3 channels, each group ending in a 2x2 max-pool
 * ("features.0" .. "features.30"); "avgpool" (AdaptiveAvgPool2d 7x7, see
 * pd_model_adaptive_avgpool); "classifier.0" fc 4096, ReLU, dropout 0.5,
 * "classifier.3" fc 4096, ReLU, dropout, "classifier.6" fc classes.
 * Initialisation: convolutions Kaiming normal (fan_out, ReLU), linear
 * N(0, 0.01^2), biases 0. 138,357,544 parameters on 3x224x224 and 1000
 * classes. Input sides below 224 give a feature map smaller than 7x7, which
 * the classifier takes as it is (3x32x32: 512 features instead of 512x7x7;
 * torchvision would replicate the map up to 7x7). PD_ESHAPE for sides below
 * 32 or maps larger than 7 that are not multiples of 7, naming the sides
 * that work. */
pd_status pd_model_vgg16(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* AlexNet as torchvision's alexnet (the one-tower variant of "One weird
 * trick", no LRN): features.0 conv 64 11x11 stride 4 pad 2, ReLU, 3x3/2
 * max-pool; features.3 conv 192 5x5 pad 2, ReLU, max-pool; features.6,
 * .8, .10 conv 384, 256, 256 3x3 pad 1 with ReLUs; max-pool "features.12";
 * "avgpool" (AdaptiveAvgPool2d 6x6 as for VGG-16: maps below 6x6, from
 * sides below 223, feed the classifier as they are); classifier.0 dropout
 * 0.5, .1 fc 4096, ReLU, .3 dropout, .4 fc 4096, ReLU, .6 fc classes.
 * PyTorch's default initialisation (torchvision sets none). 61,100,840
 * parameters on 3x224x224 and 1000 classes. Input sides from 63 (64x64
 * gives a 1x1 map); PD_ESHAPE otherwise, naming the sides that work. */
pd_status pd_model_alexnet(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* ResNet-50 as torchvision's resnet50 (bottleneck v1.5: the stride sits on
 * the 3x3 convolution): conv1 7x7/2 64, bn1, ReLU, 3x3/2 max-pool (pad 1);
 * layer1..layer4 of 3, 4, 6, 3 bottlenecks (widths 64, 128, 256, 512,
 * outputs 4x; "layerL.B.conv1..3", "bn1..3", and "downsample.0" conv 1x1 /
 * "downsample.1" bn on the first block of each layer), the sum then ReLU;
 * global average pooling; fc classes. Convolutions have no bias; batch
 * norm eps 1e-5, momentum 0.1, weight 1, bias 0 (no zero-init of the last
 * BN); convolutions Kaiming normal (fan_out, ReLU), fc PyTorch's default.
 * 25,557,032 parameters on 3x224x224 and 1000 classes; any input side. */
pd_status pd_model_resnet50(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* Inception-v3 as torchvision's inception_v3(aux_logits=False,
 * transform_input=False): BasicConv2d blocks ("<name>.conv" without bias,
 * "<name>.bn" eps 0.001, ReLU) Conv2d_1a_3x3 .. Conv2d_4a_3x3 with two
 * 3x3/2 max-pools, Mixed_5b..5d (InceptionA), Mixed_6a (B), Mixed_6b..6e
 * (C, with 1x7 and 7x1 convolutions), Mixed_7a (D), Mixed_7b..7c (E); the
 * branches' 3x3 stride-1 average pools count the padding; branches
 * concatenate on channels; global average pooling, dropout 0.5, fc classes.
 * Convolutions and fc weights N(0, 0.1^2) (torchvision's truncated normal,
 * truncated at +-2, i.e. 20 sigma), batch norm 1 and 0, fc bias PyTorch's
 * default. 23,834,568 parameters on 3x299x299 and 1000 classes. The
 * auxiliary classifier is not built. Inputs smaller than 75x75 are
 * PD_ESHAPE. */
pd_status pd_model_inception_v3(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* For builders (mlp.c): checks opts and adds the inputs "images" f32
 * [N,C,H,W] and "labels" i32 [N]; sets io->images and io->labels, and
 * io->logits, io->loss, io->words to -1. */
pd_status pd_model_image_inputs(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

/* For builders (mlp.c): re-initialises "<node>.weight" N(0, std^2), or,
 * with std 0, Kaiming's normal for ReLU over fan_out (std = sqrt(2 /
 * (dim0 x kernel area)), torchvision's kaiming_normal_(mode="fan_out"));
 * with zero_bias also sets "<node>.bias", where there is one, to 0.
 * PD_ENOTFOUND if the node has no weight. Call before pd_graph_allocate. */
pd_status pd_model_init_weight(pd_graph *g, const char *node, float std, bool zero_bias);

/* For builders (vgg16.c) of classifiers behind torchvision's
 * AdaptiveAvgPool2d(size): map_side(s) is the feature map's side for an
 * input side s (0 where the input is too small). PD_OK if both sides give
 * maps of at most size x size, or both give multiples of size; PD_ESHAPE
 * otherwise, with a message naming `model` and the input sides that work. */
pd_status pd_model_check_feature_map(const char *model, const pd_model_options *opts,
                                     int64_t (*map_side)(int64_t side), int size);

/* For builders (vgg16.c): AdaptiveAvgPool2d(size) on x [N,C,H,W] where
 * PyTorch's adaptive windows are fixed ones. Maps of at most size x size
 * pass through (*out = x, no node), sides that are multiples of size get a
 * pool2d `name` with kernel = stride = side/size (PyTorch's windows exactly);
 * other maps are PD_ESHAPE (pd_model_check_feature_map rejects them first). */
pd_status pd_model_adaptive_avgpool(pd_graph *g, const char *name, int x, int size, int *out);

/* s2vt.c */

/* S2VT (Venugopalan et al. 2015): frames -> frame_proj (linear F->E) ->
 * lstm1 (H) over T_f frame steps then T_w zero steps; lstm2 (H) over
 * [h1, 0] while encoding and [h1, embedding(previous word)] (V x E) while
 * decoding; out (linear H->V) on the T_w decoding steps; the loss is the
 * mean cross-entropy over the targets that are not PD_S2VT_IGNORE (-1,
 * sequence.h). Options: channels = F, height = T_f, width = T_w, classes =
 * V; H = 1000 and E = 500 scaled by width_multiplier. Inputs: images f32
 * [N,T_f,F], words i32 [N,T_w] (decoder inputs: BOS, then the caption),
 * labels i32 [N*T_w] (row n*T_w + t); logits [N*T_w,V]. Parameters, named
 * as PyTorch's modules: frame_proj (F+1)E, lstm1 4H(E+H) + 8H, embedding
 * VE, lstm2 4H(2H+E) + 8H, out (H+1)V: 33,074,500 for F=4096, V=10000. */
pd_status pd_model_s2vt(pd_graph *g, const pd_model_options *opts, pd_model_io *io);

#ifdef __cplusplus
}
#endif
#endif
