/* Inception-v3 as torchvision builds it (aux_logits=False): BasicConv2d
 * blocks (bias-free convolution, batch norm eps 0.001, ReLU), the five
 * Inception block types with their exact branches, and torchvision's
 * N(0, 0.1^2) initialisation. Every branch list below is in torchvision's
 * module order, which is also the channel order of the concatenation. */
#include "config.h"

#include <stdio.h>

#include <pipedream/models.h>

#define INCEPTION_MIN_SIDE 75
#define INCEPTION_STD 0.1f

/* What every block builder needs. */
typedef struct inception {
    pd_graph *g;
    float m; /* width multiplier */
} inception;

static const pd_batchnorm_desc basic_bn = {1e-3f, 0.1f};

/* BasicConv2d "<block>.<branch>": conv (no bias) + bn + ReLU; `channels` at
 * width 1. */
static pd_status basic_conv(const inception *net, const char *block, const char *branch, int x, int channels,
                            int kernel_h, int kernel_w, int stride, int pad_h, int pad_w, int *out)
{
    const pd_conv2d_desc desc = {kernel_h, kernel_w, stride, stride, pad_h, pad_w, 1, 1, 1};
    char prefix[64], name[96];

    if (block)
        snprintf(prefix, sizeof(prefix), "%s.%s", block, branch);
    else
        snprintf(prefix, sizeof(prefix), "%s", branch);
    snprintf(name, sizeof(name), "%s.conv", prefix);
    PD_CHECK(pd_graph_conv2d(net->g, name, x, pd_model_scale(channels, net->m), &desc, false, &x));
    PD_CHECK(pd_model_init_weight(net->g, name, INCEPTION_STD, false));
    snprintf(name, sizeof(name), "%s.bn", prefix);
    PD_CHECK(pd_graph_batchnorm(net->g, name, x, &basic_bn, &x));
    snprintf(name, sizeof(name), "%s.relu", prefix);
    return pd_graph_relu(net->g, name, x, out);
}

/* Square kernels with stride 1 and "same" padding, the common case. */
static pd_status same_conv(const inception *net, const char *block, const char *branch, int x, int channels,
                           int kernel, int *out)
{
    return basic_conv(net, block, branch, x, channels, kernel, kernel, 1, kernel / 2, kernel / 2, out);
}

/* "<block>.<what>" pooling over 3x3: average (stride 1, pad 1, padding
 * counted, as F.avg_pool2d) or max (stride 2, no padding). */
static pd_status pool3x3(const inception *net, const char *block, const char *what, int x, bool average, int *out)
{
    const pd_pool2d_desc avg = {PD_POOL_AVG, 3, 3, 1, 1, 1, 1, false, true};
    const pd_pool2d_desc max = {PD_POOL_MAX, 3, 3, 2, 2, 0, 0, false, false};
    char name[96];

    snprintf(name, sizeof(name), "%s.%s", block, what);
    return pd_graph_pool2d(net->g, name, x, average ? &avg : &max, out);
}

static pd_status concat(const inception *net, const char *block, int n, const int *branches, int *out)
{
    char name[96];

    snprintf(name, sizeof(name), "%s.concat", block);
    return pd_graph_concat(net->g, name, n, branches, 1, out);
}

/* InceptionA: 1x1 64 | 1x1 48, 5x5 64 | 1x1 64, 3x3 96, 3x3 96 | avg, 1x1 pool_features. */
static pd_status inception_a(const inception *net, const char *b, int x, int pool_features, int *out)
{
    int br[4], t;

    PD_CHECK(same_conv(net, b, "branch1x1", x, 64, 1, &br[0]));
    PD_CHECK(same_conv(net, b, "branch5x5_1", x, 48, 1, &t));
    PD_CHECK(same_conv(net, b, "branch5x5_2", t, 64, 5, &br[1]));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_1", x, 64, 1, &t));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_2", t, 96, 3, &t));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_3", t, 96, 3, &br[2]));
    PD_CHECK(pool3x3(net, b, "avg_pool", x, true, &t));
    PD_CHECK(same_conv(net, b, "branch_pool", t, pool_features, 1, &br[3]));
    return concat(net, b, 4, br, out);
}

/* InceptionB (grid reduction): 3x3/2 384 | 1x1 64, 3x3 96, 3x3/2 96 | max-pool/2. */
static pd_status inception_b(const inception *net, const char *b, int x, int *out)
{
    int br[3], t;

    PD_CHECK(basic_conv(net, b, "branch3x3", x, 384, 3, 3, 2, 0, 0, &br[0]));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_1", x, 64, 1, &t));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_2", t, 96, 3, &t));
    PD_CHECK(basic_conv(net, b, "branch3x3dbl_3", t, 96, 3, 3, 2, 0, 0, &br[1]));
    PD_CHECK(pool3x3(net, b, "max_pool", x, false, &br[2]));
    return concat(net, b, 3, br, out);
}

/* 1x7 (pad 0,3) or 7x1 (pad 3,0) convolution. */
static pd_status conv_1x7(const inception *net, const char *b, const char *branch, int x, int channels, bool wide,
                          int *out)
{
    return wide ? basic_conv(net, b, branch, x, channels, 1, 7, 1, 0, 3, out)
                : basic_conv(net, b, branch, x, channels, 7, 1, 1, 3, 0, out);
}

/* InceptionC: 1x1 192 | 1x1 c7, 1x7 c7, 7x1 192 | 1x1 c7, 7x1 c7, 1x7 c7,
 * 7x1 c7, 1x7 192 | avg, 1x1 192. */
static pd_status inception_c(const inception *net, const char *b, int x, int c7, int *out)
{
    int br[4], t;

    PD_CHECK(same_conv(net, b, "branch1x1", x, 192, 1, &br[0]));
    PD_CHECK(same_conv(net, b, "branch7x7_1", x, c7, 1, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7_2", t, c7, true, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7_3", t, 192, false, &br[1]));
    PD_CHECK(same_conv(net, b, "branch7x7dbl_1", x, c7, 1, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7dbl_2", t, c7, false, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7dbl_3", t, c7, true, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7dbl_4", t, c7, false, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7dbl_5", t, 192, true, &br[2]));
    PD_CHECK(pool3x3(net, b, "avg_pool", x, true, &t));
    PD_CHECK(same_conv(net, b, "branch_pool", t, 192, 1, &br[3]));
    return concat(net, b, 4, br, out);
}

/* InceptionD (grid reduction): 1x1 192, 3x3/2 320 | 1x1 192, 1x7 192,
 * 7x1 192, 3x3/2 192 | max-pool/2. */
static pd_status inception_d(const inception *net, const char *b, int x, int *out)
{
    int br[3], t;

    PD_CHECK(same_conv(net, b, "branch3x3_1", x, 192, 1, &t));
    PD_CHECK(basic_conv(net, b, "branch3x3_2", t, 320, 3, 3, 2, 0, 0, &br[0]));
    PD_CHECK(same_conv(net, b, "branch7x7x3_1", x, 192, 1, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7x3_2", t, 192, true, &t));
    PD_CHECK(conv_1x7(net, b, "branch7x7x3_3", t, 192, false, &t));
    PD_CHECK(basic_conv(net, b, "branch7x7x3_4", t, 192, 3, 3, 2, 0, 0, &br[1]));
    PD_CHECK(pool3x3(net, b, "max_pool", x, false, &br[2]));
    return concat(net, b, 3, br, out);
}

/* InceptionE: 1x1 320 | 1x1 384, then 1x3 384 and 3x1 384 side by side |
 * 1x1 448, 3x3 384, then 1x3 384 and 3x1 384 | avg, 1x1 192. torchvision
 * concatenates each split pair first; one concatenation of the six gives
 * the same channel order. */
static pd_status inception_e(const inception *net, const char *b, int x, int *out)
{
    int br[6], t;

    PD_CHECK(same_conv(net, b, "branch1x1", x, 320, 1, &br[0]));
    PD_CHECK(same_conv(net, b, "branch3x3_1", x, 384, 1, &t));
    PD_CHECK(basic_conv(net, b, "branch3x3_2a", t, 384, 1, 3, 1, 0, 1, &br[1]));
    PD_CHECK(basic_conv(net, b, "branch3x3_2b", t, 384, 3, 1, 1, 1, 0, &br[2]));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_1", x, 448, 1, &t));
    PD_CHECK(same_conv(net, b, "branch3x3dbl_2", t, 384, 3, &t));
    PD_CHECK(basic_conv(net, b, "branch3x3dbl_3a", t, 384, 1, 3, 1, 0, 1, &br[3]));
    PD_CHECK(basic_conv(net, b, "branch3x3dbl_3b", t, 384, 3, 1, 1, 1, 0, &br[4]));
    PD_CHECK(pool3x3(net, b, "avg_pool", x, true, &t));
    PD_CHECK(same_conv(net, b, "branch_pool", t, 192, 1, &br[5]));
    return concat(net, b, 6, br, out);
}

static pd_status add_stem(const inception *net, int x, int *out)
{
    const pd_pool2d_desc max = {PD_POOL_MAX, 3, 3, 2, 2, 0, 0, false, false};

    PD_CHECK(basic_conv(net, NULL, "Conv2d_1a_3x3", x, 32, 3, 3, 2, 0, 0, &x));
    PD_CHECK(basic_conv(net, NULL, "Conv2d_2a_3x3", x, 32, 3, 3, 1, 0, 0, &x));
    PD_CHECK(same_conv(net, NULL, "Conv2d_2b_3x3", x, 64, 3, &x));
    PD_CHECK(pd_graph_pool2d(net->g, "maxpool1", x, &max, &x));
    PD_CHECK(same_conv(net, NULL, "Conv2d_3b_1x1", x, 80, 1, &x));
    PD_CHECK(basic_conv(net, NULL, "Conv2d_4a_3x3", x, 192, 3, 3, 1, 0, 0, &x));
    return pd_graph_pool2d(net->g, "maxpool2", x, &max, out);
}

pd_status pd_model_inception_v3(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    const pd_pool2d_desc global_avg = {PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, true};
    pd_model_io got;
    int x;

    PD_CHECK(pd_model_check_options(opts));
    if (opts->height < INCEPTION_MIN_SIDE || opts->width < INCEPTION_MIN_SIDE)
        return PD_ERROR(PD_ESHAPE, "inception_v3: input %dx%d is smaller than the minimum %dx%d", opts->height,
                        opts->width, INCEPTION_MIN_SIDE, INCEPTION_MIN_SIDE);
    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    const inception net = {g, opts->width_multiplier};
    PD_CHECK(add_stem(&net, got.images, &x));
    PD_CHECK(inception_a(&net, "Mixed_5b", x, 32, &x));
    PD_CHECK(inception_a(&net, "Mixed_5c", x, 64, &x));
    PD_CHECK(inception_a(&net, "Mixed_5d", x, 64, &x));
    PD_CHECK(inception_b(&net, "Mixed_6a", x, &x));
    PD_CHECK(inception_c(&net, "Mixed_6b", x, 128, &x));
    PD_CHECK(inception_c(&net, "Mixed_6c", x, 160, &x));
    PD_CHECK(inception_c(&net, "Mixed_6d", x, 160, &x));
    PD_CHECK(inception_c(&net, "Mixed_6e", x, 192, &x));
    PD_CHECK(inception_d(&net, "Mixed_7a", x, &x));
    PD_CHECK(inception_e(&net, "Mixed_7b", x, &x));
    PD_CHECK(inception_e(&net, "Mixed_7c", x, &x));
    PD_CHECK(pd_graph_pool2d(g, "avgpool", x, &global_avg, &x));
    PD_CHECK(pd_graph_dropout(g, "dropout", x, 0.5f, &x));
    PD_CHECK(pd_graph_flatten(g, "flatten", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc", x, opts->classes, true, &got.logits));
    PD_CHECK(pd_model_init_weight(g, "fc", INCEPTION_STD, false));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
