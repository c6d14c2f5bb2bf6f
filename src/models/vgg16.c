/* VGG-16 as torchvision builds it (adaptive average pooling in front of
 * the classifier: adaptive_pool.c). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <pipedream/models.h>

#define VGG_POOL 0
#define VGG_POOLED_SIZE 7
#define VGG_HIDDEN 4096
#define VGG_LINEAR_STD 0.01f

/* Configuration D: channels of each 3x3 convolution, VGG_POOL for a 2x2
 * max-pool. */
static const int vgg16_layers[] = {
    64,  64,  VGG_POOL,      /* features.0 .. 4 */
    128, 128, VGG_POOL,      /* features.5 .. 9 */
    256, 256, 256, VGG_POOL, /* features.10 .. 16 */
    512, 512, 512, VGG_POOL, /* features.17 .. 23 */
    512, 512, 512, VGG_POOL, /* features.24 .. 30 */
};

/* Five 2x2 stride-2 max-pools; the padded 3x3 convolutions keep the size. */
static int64_t vgg16_map_side(int64_t side) { return side / 32; }

/* "<prefix>.<index>" */
static const char *indexed(char *buf, size_t len, const char *prefix, int index)
{
    snprintf(buf, len, "%s.%d", prefix, index);
    return buf;
}

static pd_status add_features(pd_graph *g, float m, int x, int *out)
{
    const pd_conv2d_desc conv = {3, 3, 1, 1, 1, 1, 1, 1, 1};
    const pd_pool2d_desc pool = {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false};
    char name[32];
    int index = 0;

    for (size_t i = 0; i < sizeof(vgg16_layers) / sizeof(vgg16_layers[0]); i++) {
        if (vgg16_layers[i] == VGG_POOL) {
            PD_CHECK(pd_graph_pool2d(g, indexed(name, sizeof(name), "features", index++), x, &pool, &x));
            continue;
        }
        indexed(name, sizeof(name), "features", index++);
        PD_CHECK(pd_graph_conv2d(g, name, x, pd_model_scale(vgg16_layers[i], m), &conv, true, &x));
        PD_CHECK(pd_model_init_weight(g, name, 0.0f, true));
        PD_CHECK(pd_graph_relu(g, indexed(name, sizeof(name), "features", index++), x, &x));
    }
    *out = x;
    return PD_OK;
}

/* classifier.0 .. classifier.6: fc, relu, dropout, fc, relu, dropout, fc. */
static pd_status add_classifier(pd_graph *g, const pd_model_options *opts, int x, int *logits)
{
    const int hidden = pd_model_scale(VGG_HIDDEN, opts->width_multiplier);
    char name[32];

    for (int block = 0; block < 2; block++) {
        indexed(name, sizeof(name), "classifier", 3 * block);
        PD_CHECK(pd_graph_linear(g, name, x, hidden, true, &x));
        PD_CHECK(pd_model_init_weight(g, name, VGG_LINEAR_STD, true));
        PD_CHECK(pd_graph_relu(g, indexed(name, sizeof(name), "classifier", 3 * block + 1), x, &x));
        PD_CHECK(pd_graph_dropout(g, indexed(name, sizeof(name), "classifier", 3 * block + 2), x, 0.5f, &x));
    }
    PD_CHECK(pd_graph_linear(g, "classifier.6", x, opts->classes, true, logits));
    return pd_model_init_weight(g, "classifier.6", VGG_LINEAR_STD, true);
}

pd_status pd_model_vgg16(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    pd_model_io got;
    int x;

    PD_CHECK(pd_model_check_feature_map("vgg16", opts, vgg16_map_side, VGG_POOLED_SIZE));
    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    PD_CHECK(add_features(g, opts->width_multiplier, got.images, &x));
    PD_CHECK(pd_model_adaptive_avgpool(g, "avgpool", x, VGG_POOLED_SIZE, &x));
    PD_CHECK(pd_graph_flatten(g, "flatten", x, &x));
    PD_CHECK(add_classifier(g, opts, x, &got.logits));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
