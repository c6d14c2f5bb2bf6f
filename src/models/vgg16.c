/* VGG-16 as torchvision builds it, and torchvision's adaptive average
 * pooling in front of the classifier, which AlexNet shares: PyTorch's
 * adaptive windows are fixed ones when the map's sides are multiples of the
 * target, so only those maps (and maps already at most the target, which
 * the zoo's small variants feed to the classifier unchanged) are built. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <pipedream/models.h>

#define VGG_POOL 0
#define VGG_POOLED_SIZE 7
#define VGG_HIDDEN 4096
#define VGG_LINEAR_STD 0.01f
/* Input sides scanned when an error message lists the ones that work. */
#define SIDE_SCAN_LIMIT 4096
#define SIDE_RANGES_LISTED 3

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

static bool side_fits(int64_t map, int size, bool multiples)
{
    return multiples ? map >= size && map % size == 0 : map >= 1 && map <= size;
}

/* "32..255" or "224..255, 448..479, 672..703, ..." into buf. */
static void describe_sides(int64_t (*map_side)(int64_t), int size, bool multiples, char *buf, size_t len)
{
    int64_t start = -1;
    int ranges = 0;
    size_t used = 0;

    buf[0] = '\0';
    for (int64_t s = 1; s <= SIDE_SCAN_LIMIT + 1 && used < len; s++) {
        bool fits = s <= SIDE_SCAN_LIMIT && side_fits(map_side(s), size, multiples);
        if (fits && start < 0)
            start = s;
        if (fits || start < 0)
            continue;
        if (ranges == SIDE_RANGES_LISTED) {
            snprintf(buf + used, len - used, ", ...");
            return;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%lld..%lld", ranges ? ", " : "", (long long)start,
                                 (long long)(s - 1));
        ranges++;
        start = -1;
    }
    if (ranges == 0)
        snprintf(buf, len, "none up to %d", SIDE_SCAN_LIMIT);
}

pd_status pd_model_check_feature_map(const char *model, const pd_model_options *opts,
                                     int64_t (*map_side)(int64_t side), int size)
{
    char small[96], multiples[96];

    PD_CHECK(pd_model_check_options(opts));
    if (size <= 0)
        return PD_ERROR(PD_EINVAL, "%s: adaptive pooling to %dx%d", model, size, size);
    int64_t mh = map_side(opts->height), mw = map_side(opts->width);
    bool fits = mh >= 1 && mw >= 1 &&
                ((mh <= size && mw <= size) || (side_fits(mh, size, true) && side_fits(mw, size, true)));
    if (fits)
        return PD_OK;
    describe_sides(map_side, size, false, small, sizeof(small));
    describe_sides(map_side, size, true, multiples, sizeof(multiples));
    if (mh < 1 || mw < 1)
        return PD_ERROR(PD_ESHAPE, "%s: input %dx%d is too small; input sides that work: %s (feature map up to "
                        "%dx%d), or both sides in %s (map sides multiples of %d)", model, opts->height,
                        opts->width, small, size, size, multiples, size);
    return PD_ERROR(PD_ESHAPE, "%s: input %dx%d gives a %lldx%lld feature map, which torchvision's adaptive "
                    "average pooling to %dx%d splits into uneven windows; both input sides must lie in %s "
                    "(map up to %dx%d) or both in %s (map sides multiples of %d)", model, opts->height,
                    opts->width, (long long)mh, (long long)mw, size, size, small, size, size, multiples, size);
}

pd_status pd_model_adaptive_avgpool(pd_graph *g, const char *name, int x, int size, int *out)
{
    const pd_shape *in = pd_graph_node_shape(g, x);
    char buf[96];

    if (in->ndim != 4 || size <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: adaptive pooling to %dx%d of %s needs an [N,C,H,W] input", name, size,
                        size, pd_shape_format(in, buf, sizeof(buf)));
    int64_t h = in->dim[2], w = in->dim[3];
    if (h <= size && w <= size) {
        *out = x;
        return PD_OK;
    }
    if (h % size != 0 || w % size != 0)
        return PD_ERROR(PD_ESHAPE, "%s: a %lldx%lld map does not divide into %dx%d equal windows", name,
                        (long long)h, (long long)w, size, size);
    const pd_pool2d_desc pool = {PD_POOL_AVG, (int)(h / size), (int)(w / size), (int)(h / size), (int)(w / size),
                                 0, 0, false, true};
    return pd_graph_pool2d(g, name, x, &pool, out);
}

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
