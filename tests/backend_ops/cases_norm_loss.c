/* Backend-ops cases: batch normalisation (2-D and 4-D input, a batch of one
 * image), local response normalisation (odd and even windows, a window
 * wider than the channels with a beta other than 0.5 and 0.75), dropout
 * (p = 0.3 and 0) and softmax cross-entropy against i32 labels. */
#include "bo.h"

typedef struct bn_arg {
    pd_shape shape;
    pd_batchnorm_desc desc;
} bn_arg;

typedef struct lrn_arg {
    pd_shape shape;
    pd_lrn_desc desc;
} lrn_arg;

typedef struct dropout_arg {
    pd_shape shape;
    float p;
} dropout_arg;

typedef struct sce_arg {
    int64_t n, classes;
} sce_arg;

static pd_status build_batchnorm(pd_graph *g, const void *arg, int *out)
{
    const bn_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->shape, true, &x));
    return pd_graph_batchnorm(g, "bn", x, &a->desc, out);
}

static pd_status build_lrn(pd_graph *g, const void *arg, int *out)
{
    const lrn_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->shape, true, &x));
    return pd_graph_lrn(g, "lrn", x, &a->desc, out);
}

static pd_status build_dropout(pd_graph *g, const void *arg, int *out)
{
    const dropout_arg *a = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &a->shape, true, &x));
    return pd_graph_dropout(g, "dropout", x, a->p, out);
}

static pd_status build_softmax_cross_entropy(pd_graph *g, const void *arg, int *out)
{
    const sce_arg *a = arg;
    pd_shape logits_shape = pd_shape_make(2, a->n, a->classes), labels_shape = pd_shape_make(1, a->n);
    int logits, labels;

    PD_CHECK(pd_graph_input(g, "logits", PD_F32, &logits_shape, true, &logits));
    PD_CHECK(pd_graph_input(g, "labels", PD_I32, &labels_shape, false, &labels));
    return pd_graph_softmax_cross_entropy(g, "loss", logits, labels, out);
}

static const bn_arg bn_2d = {{2, {6, 4}}, {1e-5f, 0.1f}};
static const bn_arg bn_4d = {{4, {3, 4, 3, 2}}, {1e-3f, 0.1f}};
static const bn_arg bn_batch1 = {{4, {1, 4, 3, 3}}, {1e-5f, 0.1f}};
/* AlexNet's constants but a larger alpha, so that the normalisation matters. */
static const lrn_arg lrn_odd = {{4, {2, 7, 3, 2}}, {5, 0.5f, 0.75f, 2.0f}};
static const lrn_arg lrn_even = {{4, {2, 6, 2, 3}}, {4, 1.0f, 0.5f, 1.0f}};
/* A window wider than the channels and a beta taken through powf. */
static const lrn_arg lrn_wide = {{4, {2, 4, 3, 3}}, {7, 0.8f, 0.6f, 1.5f}};
static const dropout_arg dropout_03 = {{3, {4, 5, 6}}, 0.3f};
static const dropout_arg dropout_0 = {{2, {3, 5}}, 0.0f};
static const sce_arg sce_5x7 = {5, 7};
static const sce_arg sce_8x3 = {8, 3};
/* A device may give each row a warp (37 classes, 33 rows: neither a
 * multiple of 32) or a block (300 classes: not a multiple of 256). With
 * many classes most gradients are ~1/(N C), close to the float loss's
 * rounding over a difference step: a larger step and bound (the comparison
 * with the CPU keeps its own 1e-3). */
static const sce_arg sce_33x37 = {33, 37};
static const sce_arg sce_3x300 = {3, 300};

const bo_case bo_cases_norm_loss[] = {
    {"batchnorm", "[6,4]", build_batchnorm, &bn_2d, BO_FILL_UNIFORM, 0, 0, 0},
    {"batchnorm", "[3,4,3,2]", build_batchnorm, &bn_4d, BO_FILL_UNIFORM, 0, 0, 0},
    {"batchnorm", "one image [1,4,3,3]", build_batchnorm, &bn_batch1, BO_FILL_UNIFORM, 0, 0, 0},
    {"lrn", "size 5 [2,7,3,2]", build_lrn, &lrn_odd, BO_FILL_UNIFORM, 0, 0, 0},
    {"lrn", "size 4 [2,6,2,3]", build_lrn, &lrn_even, BO_FILL_UNIFORM, 0, 0, 0},
    {"lrn", "size 7 over 4 channels, beta 0.6 [2,4,3,3]", build_lrn, &lrn_wide, BO_FILL_UNIFORM, 0, 0, 0},
    {"dropout", "p=0.3 [4,5,6]", build_dropout, &dropout_03, BO_FILL_UNIFORM, 0, 0, 0},
    {"dropout", "p=0 [3,5]", build_dropout, &dropout_0, BO_FILL_UNIFORM, 0, 0, 0},
    {"softmax_cross_entropy", "[5,7]", build_softmax_cross_entropy, &sce_5x7, BO_FILL_UNIFORM, 7, 0, 0},
    {"softmax_cross_entropy", "[8,3]", build_softmax_cross_entropy, &sce_8x3, BO_FILL_UNIFORM, 3, 0, 0},
    {"softmax_cross_entropy", "[33,37]", build_softmax_cross_entropy, &sce_33x37, BO_FILL_UNIFORM, 37, 0.05f, 1e-2},
    {"softmax_cross_entropy", "[3,300]", build_softmax_cross_entropy, &sce_3x300, BO_FILL_UNIFORM, 300, 0.05f, 1e-2},
};
const size_t bo_cases_norm_loss_count = sizeof(bo_cases_norm_loss) / sizeof(bo_cases_norm_loss[0]);
