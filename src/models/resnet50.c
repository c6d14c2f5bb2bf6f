/* ResNet-50 as torchvision builds it: bottleneck blocks with the stride on
 * the 3x3 convolution ("v1.5"), a projection shortcut on the first block of
 * each layer, Kaiming-normal convolutions and batch norm at 1 and 0. Nodes
 * are created in torchvision's module order, so the parameters list in its
 * state_dict order (the shortcut after bn3). */
#include "config.h"

#include <stdio.h>

#include <pipedream/models.h>

#define RESNET_EXPANSION 4
#define RESNET_STEM_CHANNELS 64

static const int resnet50_blocks[4] = {3, 4, 6, 3};

static const pd_batchnorm_desc resnet_bn = {1e-5f, 0.1f};

/* "<prefix>.<what>" */
static const char *child(char *buf, size_t len, const char *prefix, const char *what)
{
    snprintf(buf, len, "%s.%s", prefix, what);
    return buf;
}

/* A bias-free convolution `conv` (Kaiming normal) followed by batch norm `bn`. */
static pd_status conv_bn(pd_graph *g, const char *conv, const char *bn, int x, int channels, int kernel, int stride,
                         int *out)
{
    const pd_conv2d_desc desc = {kernel, kernel, stride, stride, kernel / 2, kernel / 2, 1, 1, 1};

    PD_CHECK(pd_graph_conv2d(g, conv, x, channels, &desc, false, &x));
    PD_CHECK(pd_model_init_weight(g, conv, 0.0f, false));
    return pd_graph_batchnorm(g, bn, x, &resnet_bn, out);
}

/* One bottleneck "<block>": 1x1 to width, 3x3 (stride) at width, 1x1 to
 * 4 x width; the shortcut projects when the shape changes. */
static pd_status bottleneck(pd_graph *g, const char *block, int x, int width, int stride, int *out)
{
    const int64_t in_channels = pd_graph_node_shape(g, x)->dim[1];
    const int out_channels = RESNET_EXPANSION * width;
    char a[96], b[96];
    int y, shortcut = x;

    PD_CHECK(conv_bn(g, child(a, sizeof(a), block, "conv1"), child(b, sizeof(b), block, "bn1"), x, width, 1, 1, &y));
    PD_CHECK(pd_graph_relu(g, child(a, sizeof(a), block, "relu1"), y, &y));
    PD_CHECK(conv_bn(g, child(a, sizeof(a), block, "conv2"), child(b, sizeof(b), block, "bn2"), y, width, 3, stride,
                     &y));
    PD_CHECK(pd_graph_relu(g, child(a, sizeof(a), block, "relu2"), y, &y));
    PD_CHECK(conv_bn(g, child(a, sizeof(a), block, "conv3"), child(b, sizeof(b), block, "bn3"), y, out_channels, 1,
                     1, &y));
    if (stride != 1 || in_channels != out_channels)
        PD_CHECK(conv_bn(g, child(a, sizeof(a), block, "downsample.0"), child(b, sizeof(b), block, "downsample.1"), x,
                         out_channels, 1, stride, &shortcut));
    PD_CHECK(pd_graph_add(g, child(a, sizeof(a), block, "add"), y, shortcut, &y));
    return pd_graph_relu(g, child(a, sizeof(a), block, "relu3"), y, out);
}

pd_status pd_model_resnet50(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    const pd_pool2d_desc maxpool = {PD_POOL_MAX, 3, 3, 2, 2, 1, 1, false, false};
    const pd_pool2d_desc global_avg = {PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, true};
    pd_model_io got;
    char name[32];
    int x;

    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    const float m = opts->width_multiplier;
    PD_CHECK(conv_bn(g, "conv1", "bn1", got.images, pd_model_scale(RESNET_STEM_CHANNELS, m), 7, 2, &x));
    PD_CHECK(pd_graph_relu(g, "relu", x, &x));
    PD_CHECK(pd_graph_pool2d(g, "maxpool", x, &maxpool, &x));
    for (int layer = 0; layer < 4; layer++) {
        const int width = pd_model_scale(RESNET_STEM_CHANNELS << layer, m);
        for (int block = 0; block < resnet50_blocks[layer]; block++) {
            snprintf(name, sizeof(name), "layer%d.%d", layer + 1, block);
            PD_CHECK(bottleneck(g, name, x, width, block == 0 && layer > 0 ? 2 : 1, &x));
        }
    }
    PD_CHECK(pd_graph_pool2d(g, "avgpool", x, &global_avg, &x));
    PD_CHECK(pd_graph_flatten(g, "flatten", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc", x, opts->classes, true, &got.logits));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
