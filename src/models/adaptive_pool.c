/* torchvision's adaptive average pooling in front of the VGG and AlexNet
 * classifiers: PyTorch's adaptive windows are fixed ones when the map's
 * sides are multiples of the target, so only those maps (and maps already
 * at most the target, which the zoo's small variants feed to the classifier
 * unchanged) are built; other inputs get an error listing the sides that
 * work. */
#include "config.h"

#include <stdio.h>

#include <pipedream/models.h>

/* Input sides scanned when an error message lists the ones that work. */
#define SIDE_SCAN_LIMIT 4096
#define SIDE_RANGES_LISTED 3

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
