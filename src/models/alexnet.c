/* AlexNet as torchvision builds it: Krizhevsky's "One weird trick" single
 * tower (64, 192, 384, 256, 256 channels, no LRN), the adaptive 6x6 average
 * pooling of VGG-16's head, and PyTorch's default initialisation. */
#include "config.h"

#include <stdio.h>

#include <pipedream/models.h>

#define ALEXNET_POOLED_SIZE 6
#define ALEXNET_HIDDEN 4096

/* One output side of a window of `kernel` (PyTorch's floor rule); 0 when
 * the window does not fit. */
static int64_t window_side(int64_t side, int kernel, int stride, int pad)
{
    return side + 2 * pad < kernel ? 0 : (side + 2 * pad - kernel) / stride + 1;
}

/* conv 11x11/4 pad 2, then three 3x3/2 max-pools (the other convolutions
 * keep the size). */
static int64_t alexnet_map_side(int64_t side)
{
    side = window_side(side, 11, 4, 2);
    for (int pool = 0; pool < 3; pool++)
        side = window_side(side, 3, 2, 0);
    return side;
}

pd_status pd_model_alexnet(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    static const struct {
        int index, channels, kernel, stride, pad;
        bool pool_after;
    } convs[] = {
        {0, 64, 11, 4, 2, true}, {3, 192, 5, 1, 2, true}, {6, 384, 3, 1, 1, false},
        {8, 256, 3, 1, 1, false}, {10, 256, 3, 1, 1, true},
    };
    const pd_pool2d_desc pool = {PD_POOL_MAX, 3, 3, 2, 2, 0, 0, false, false};
    pd_model_io got;
    char name[32];
    int x;

    PD_CHECK(pd_model_check_feature_map("alexnet", opts, alexnet_map_side, ALEXNET_POOLED_SIZE));
    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    const float m = opts->width_multiplier;
    const int hidden = pd_model_scale(ALEXNET_HIDDEN, m);

    x = got.images;
    for (size_t i = 0; i < sizeof(convs) / sizeof(convs[0]); i++) {
        const int k = convs[i].kernel, s = convs[i].stride, p = convs[i].pad;
        const pd_conv2d_desc conv = {k, k, s, s, p, p, 1, 1, 1};
        snprintf(name, sizeof(name), "features.%d", convs[i].index);
        PD_CHECK(pd_graph_conv2d(g, name, x, pd_model_scale(convs[i].channels, m), &conv, true, &x));
        snprintf(name, sizeof(name), "features.%d", convs[i].index + 1);
        PD_CHECK(pd_graph_relu(g, name, x, &x));
        if (convs[i].pool_after) {
            snprintf(name, sizeof(name), "features.%d", convs[i].index + 2);
            PD_CHECK(pd_graph_pool2d(g, name, x, &pool, &x));
        }
    }
    PD_CHECK(pd_model_adaptive_avgpool(g, "avgpool", x, ALEXNET_POOLED_SIZE, &x));
    PD_CHECK(pd_graph_flatten(g, "flatten", x, &x));
    PD_CHECK(pd_graph_dropout(g, "classifier.0", x, 0.5f, &x));
    PD_CHECK(pd_graph_linear(g, "classifier.1", x, hidden, true, &x));
    PD_CHECK(pd_graph_relu(g, "classifier.2", x, &x));
    PD_CHECK(pd_graph_dropout(g, "classifier.3", x, 0.5f, &x));
    PD_CHECK(pd_graph_linear(g, "classifier.4", x, hidden, true, &x));
    PD_CHECK(pd_graph_relu(g, "classifier.5", x, &x));
    PD_CHECK(pd_graph_linear(g, "classifier.6", x, opts->classes, true, &got.logits));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
