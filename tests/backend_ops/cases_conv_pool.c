/* Backend-ops cases: conv2d (stride, padding, dilation, groups, depthwise,
 * 1x1 at strides 1 and 2, 5x5 and 7x7 kernels, rectangular, odd sizes, a
 * minibatch of several small images), linear, max and average pooling
 * (padding, ceil_mode, count_include_pad, global, overlapping windows, a
 * window of more than 64 elements; max 2x2 stride 2 on odd sizes), an input
 * that needs no gradient (parameter gradients must still be computed), and
 * a small conv -> pool -> flatten -> linear chain. */
#include "bo.h"

typedef struct conv_arg {
    pd_shape in;
    int out_channels;
    pd_conv2d_desc desc;
    bool bias;
    bool input_grad;
} conv_arg;

typedef struct linear_arg {
    pd_shape in;
    int out_features;
    bool bias;
    bool input_grad;
} linear_arg;

typedef struct pool_arg {
    pd_shape in;
    pd_pool2d_desc desc;
} pool_arg;

static pd_status build_conv2d(pd_graph *g, const void *arg, int *out)
{
    const conv_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->in, a->input_grad, &x));
    return pd_graph_conv2d(g, "conv", x, a->out_channels, &a->desc, a->bias, out);
}

static pd_status build_linear(pd_graph *g, const void *arg, int *out)
{
    const linear_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->in, a->input_grad, &x));
    return pd_graph_linear(g, "fc", x, a->out_features, a->bias, out);
}

static pd_status build_pool2d(pd_graph *g, const void *arg, int *out)
{
    const pool_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->in, true, &x));
    return pd_graph_pool2d(g, "pool", x, &a->desc, out);
}

/* x [2,3,6,6] -> conv 3x3 s2 p1 (4 channels) -> global average pool ->
 * flatten -> linear 5: gradients flow through every layer's d_in. */
static pd_status build_chain(pd_graph *g, const void *arg, int *out)
{
    const pd_shape in = {4, {2, 3, 6, 6}};
    const pd_conv2d_desc conv = {3, 3, 2, 2, 1, 1, 1, 1, 1};
    const pd_pool2d_desc pool = {PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, false};
    int x, c, p, f;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &in, true, &x));
    PD_CHECK(pd_graph_conv2d(g, "conv", x, 4, &conv, true, &c));
    PD_CHECK(pd_graph_pool2d(g, "pool", c, &pool, &p));
    PD_CHECK(pd_graph_flatten(g, "flatten", p, &f));
    return pd_graph_linear(g, "fc", f, 5, true, out);
}

/* desc: kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups */
static const conv_arg conv_k3_p1 = {{4, {2, 3, 6, 6}}, 4, {3, 3, 1, 1, 1, 1, 1, 1, 1}, true, true};
static const conv_arg conv_k3_s2_nonsquare = {{4, {2, 3, 7, 6}}, 4, {3, 3, 2, 2, 1, 1, 1, 1, 1}, true, true};
static const conv_arg conv_dilation2 = {{4, {2, 3, 7, 7}}, 2, {3, 3, 1, 1, 2, 2, 2, 2, 1}, true, true};
static const conv_arg conv_groups2 = {{4, {2, 4, 5, 5}}, 6, {3, 3, 1, 1, 1, 1, 1, 1, 2}, true, true};
static const conv_arg conv_depthwise = {{4, {2, 4, 5, 5}}, 4, {3, 3, 1, 1, 1, 1, 1, 1, 4}, false, true};
static const conv_arg conv_1x1 = {{4, {2, 4, 5, 5}}, 3, {1, 1, 1, 1, 0, 0, 1, 1, 1}, true, true};
static const conv_arg conv_rect = {{4, {2, 3, 6, 7}}, 3, {2, 3, 2, 1, 1, 0, 1, 1, 1}, true, true};
static const conv_arg conv_no_input_grad = {{4, {2, 3, 5, 5}}, 4, {3, 3, 1, 1, 1, 1, 1, 1, 1}, true, false};
static const conv_arg conv_batch5 = {{4, {5, 3, 4, 3}}, 4, {3, 3, 1, 1, 1, 1, 1, 1, 1}, true, true};
static const conv_arg conv_1x1_s2 = {{4, {2, 4, 7, 7}}, 6, {1, 1, 2, 2, 0, 0, 1, 1, 1}, false, true};
static const conv_arg conv_k5_p2 = {{4, {2, 3, 9, 8}}, 4, {5, 5, 1, 1, 2, 2, 1, 1, 1}, true, true};
static const conv_arg conv_k7_s2_p3 = {{4, {1, 3, 11, 11}}, 4, {7, 7, 2, 2, 3, 3, 1, 1, 1}, true, true};
static const conv_arg conv_groups2_s2 = {{4, {3, 4, 7, 6}}, 4, {3, 3, 2, 2, 1, 1, 1, 1, 2}, true, true};

static const linear_arg linear_bias = {{2, {4, 10}}, 6, true, true};
static const linear_arg linear_no_bias = {{2, {3, 7}}, 5, false, true};
static const linear_arg linear_no_input_grad = {{2, {4, 6}}, 3, true, false};
/* 600 rows: a device's bias gradient adds them in more than one chunk; 37
 * outputs: not a multiple of a warp or of 4. */
static const linear_arg linear_tall = {{2, {600, 5}}, 37, true, true};
/* 8 outputs: the bias added four at a time. */
static const linear_arg linear_bias_by_4 = {{2, {9, 12}}, 8, true, true};

/* desc: mode, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, ceil_mode, count_include_pad */
static const pool_arg max_k2_s2 = {{4, {2, 3, 6, 6}}, {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false}};
static const pool_arg max_k2_s2_odd = {{4, {2, 3, 5, 7}}, {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false}};
static const pool_arg max_k2_s2_ceil = {{4, {2, 3, 5, 7}}, {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, true, false}};
static const pool_arg max_k3_s2_p1 = {{4, {2, 3, 7, 7}}, {PD_POOL_MAX, 3, 3, 2, 2, 1, 1, false, false}};
static const pool_arg max_k3_s2_ceil = {{4, {2, 3, 6, 6}}, {PD_POOL_MAX, 3, 3, 2, 2, 0, 0, true, false}};
static const pool_arg max_k3_s2_p1_ceil = {{4, {2, 3, 6, 7}}, {PD_POOL_MAX, 3, 3, 2, 2, 1, 1, true, false}};
static const pool_arg max_global = {{4, {2, 3, 5, 5}}, {PD_POOL_MAX, 0, 0, 0, 0, 0, 0, false, false}};
static const pool_arg avg_k3_s1_p1_incl = {{4, {2, 3, 5, 5}}, {PD_POOL_AVG, 3, 3, 1, 1, 1, 1, false, true}};
static const pool_arg avg_k3_s1_p1_excl = {{4, {2, 3, 5, 5}}, {PD_POOL_AVG, 3, 3, 1, 1, 1, 1, false, false}};
static const pool_arg avg_k3_s2_p1_ceil_incl = {{4, {2, 3, 6, 7}}, {PD_POOL_AVG, 3, 3, 2, 2, 1, 1, true, true}};
static const pool_arg avg_k3_s2_p1_ceil_excl = {{4, {2, 3, 6, 7}}, {PD_POOL_AVG, 3, 3, 2, 2, 1, 1, true, false}};
static const pool_arg avg_k2_s2_ceil = {{4, {2, 3, 5, 5}}, {PD_POOL_AVG, 2, 2, 2, 2, 0, 0, true, true}};
static const pool_arg avg_global = {{4, {2, 4, 5, 6}}, {PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, false}};
static const pool_arg max_k3_s1_p1 = {{4, {2, 3, 5, 6}}, {PD_POOL_MAX, 3, 3, 1, 1, 1, 1, false, false}};
static const pool_arg max_k3_s3_ceil = {{4, {2, 3, 7, 8}}, {PD_POOL_MAX, 3, 3, 3, 3, 0, 0, true, false}};
static const pool_arg max_global_9x9 = {{4, {2, 3, 9, 9}}, {PD_POOL_MAX, 0, 0, 0, 0, 0, 0, false, false}};
static const pool_arg avg_k2_s1 = {{4, {2, 3, 4, 5}}, {PD_POOL_AVG, 2, 2, 1, 1, 0, 0, false, false}};
static const pool_arg avg_k3_s2_p1_incl = {{4, {2, 3, 7, 7}}, {PD_POOL_AVG, 3, 3, 2, 2, 1, 1, false, true}};

const bo_case bo_cases_conv_pool[] = {
    {"conv2d", "k3 s1 p1 [2,3,6,6] -> 4", build_conv2d, &conv_k3_p1, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k3 s2 p1 non-square [2,3,7,6] -> 4", build_conv2d, &conv_k3_s2_nonsquare, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k3 dilation 2 p2 [2,3,7,7] -> 2", build_conv2d, &conv_dilation2, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k3 p1 groups 2 [2,4,5,5] -> 6", build_conv2d, &conv_groups2, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "depthwise k3 p1 no bias [2,4,5,5]", build_conv2d, &conv_depthwise, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "1x1 [2,4,5,5] -> 3", build_conv2d, &conv_1x1, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k2x3 s2x1 p1x0 [2,3,6,7] -> 3", build_conv2d, &conv_rect, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "input without gradient", build_conv2d, &conv_no_input_grad, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k3 p1 minibatch of 5 small images [5,3,4,3] -> 4", build_conv2d, &conv_batch5, BO_FILL_UNIFORM, 0,
     0, 0},
    {"conv2d", "1x1 s2 no bias [2,4,7,7] -> 6 (ResNet downsample)", build_conv2d, &conv_1x1_s2, BO_FILL_UNIFORM, 0,
     0, 0},
    {"conv2d", "k5 p2 [2,3,9,8] -> 4", build_conv2d, &conv_k5_p2, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k7 s2 p3 odd [1,3,11,11] -> 4 (ResNet stem)", build_conv2d, &conv_k7_s2_p3, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "k3 s2 p1 groups 2 [3,4,7,6] -> 4", build_conv2d, &conv_groups2_s2, BO_FILL_UNIFORM, 0, 0, 0},
    {"conv2d", "chain conv -> global avg pool -> flatten -> linear", build_chain, NULL, BO_FILL_UNIFORM, 0, 0, 0},
    {"linear", "[4,10] -> 6", build_linear, &linear_bias, BO_FILL_UNIFORM, 0, 0, 0},
    {"linear", "[3,7] -> 5 no bias", build_linear, &linear_no_bias, BO_FILL_UNIFORM, 0, 0, 0},
    {"linear", "input without gradient", build_linear, &linear_no_input_grad, BO_FILL_UNIFORM, 0, 0, 0},
    {"linear", "[600,5] -> 37", build_linear, &linear_tall, BO_FILL_UNIFORM, 0, 0, 0},
    {"linear", "[9,12] -> 8", build_linear, &linear_bias_by_4, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "max k2 s2 [2,3,6,6]", build_pool2d, &max_k2_s2, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k2 s2 odd [2,3,5,7]", build_pool2d, &max_k2_s2_odd, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k2 s2 ceil_mode odd [2,3,5,7]", build_pool2d, &max_k2_s2_ceil, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k3 s2 p1 [2,3,7,7]", build_pool2d, &max_k3_s2_p1, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k3 s2 ceil_mode [2,3,6,6]", build_pool2d, &max_k3_s2_ceil, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k3 s2 p1 ceil_mode [2,3,6,7]", build_pool2d, &max_k3_s2_p1_ceil, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max global [2,3,5,5]", build_pool2d, &max_global, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "avg k3 s1 p1 count_include_pad", build_pool2d, &avg_k3_s1_p1_incl, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg k3 s1 p1 exclude pad", build_pool2d, &avg_k3_s1_p1_excl, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg k3 s2 p1 ceil_mode count_include_pad [2,3,6,7]", build_pool2d, &avg_k3_s2_p1_ceil_incl,
     BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg k3 s2 p1 ceil_mode exclude pad [2,3,6,7]", build_pool2d, &avg_k3_s2_p1_ceil_excl,
     BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg k2 s2 ceil_mode [2,3,5,5]", build_pool2d, &avg_k2_s2_ceil, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg global [2,4,5,6]", build_pool2d, &avg_global, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "max k3 s1 p1 overlapping windows [2,3,5,6]", build_pool2d, &max_k3_s1_p1, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max k3 s3 ceil_mode [2,3,7,8]", build_pool2d, &max_k3_s3_ceil, BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "max global 9x9 (a window over 64 elements) [2,3,9,9]", build_pool2d, &max_global_9x9,
     BO_FILL_DISTINCT, 0, 0, 0},
    {"pool2d", "avg k2 s1 no padding [2,3,4,5]", build_pool2d, &avg_k2_s1, BO_FILL_UNIFORM, 0, 0, 0},
    {"pool2d", "avg k3 s2 p1 count_include_pad odd [2,3,7,7]", build_pool2d, &avg_k3_s2_p1_incl, BO_FILL_UNIFORM, 0,
     0, 0},
};
const size_t bo_cases_conv_pool_count = sizeof(bo_cases_conv_pool) / sizeof(bo_cases_conv_pool[0]);
