/* The "synthetic" kind: a fixed set of random images for throughput runs (as
 * the paper did for AlexNet), with no I/O and almost no work: per channel,
 * one array of random normalised pixel bytes is drawn at open, H*W +
 * SYNTHETIC_SPAN long, and sample i's planes are the windows of them at an
 * offset drawn, like its label, from (seed, split, i) only. So a sample is
 * the same image in every epoch, on every rank and in every run, and costs
 * one copy. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/pd_rng.h"
#include "data/pd_data_int.h"

#define SYNTHETIC_SIDE 224
#define SYNTHETIC_CLASSES 1000
#define SYNTHETIC_BATCHES 50
#define SYNTHETIC_SPAN 4093 /* distinct windows (prime: offsets spread) */

typedef struct synthetic_set {
    uint64_t seed; /* of the split */
    int classes;
    float *bank;   /* [C][H*W + SYNTHETIC_SPAN] */
    int channels;
    size_t plane;  /* H*W */
} synthetic_set;

/* Draws the banks: uniformly random bytes, normalised per channel. */
static pd_status synthetic_prepare(void *state, const pd_sample_geometry *g)
{
    synthetic_set *set = state;
    const size_t plane = (size_t)g->height * g->width, row = plane + SYNTHETIC_SPAN;
    pd_rng rng;

    set->channels = g->channels;
    set->plane = plane;
    if (!(set->bank = malloc((size_t)g->channels * row * sizeof(*set->bank))))
        return PD_ERROR(PD_ENOMEM, "synthetic: out of host memory for %d x %zu random pixels", g->channels, row);
    pd_rng_init(&rng, set->seed);
    for (int c = 0; c < g->channels; c++) {
        float *bank = set->bank + (size_t)c * row;
        for (size_t i = 0; i < row; i += 8) {
            uint64_t bytes = pd_rng_next(&rng);
            for (size_t k = i; k < i + 8 && k < row; k++, bytes >>= 8)
                bank[k] = g->table[c][bytes & 0xff];
        }
    }
    return PD_OK;
}

static pd_status synthetic_load(void *state, void *worker, const pd_sample_geometry *g, int64_t index,
                                uint64_t rng_seed, float *image, int32_t *label)
{
    const synthetic_set *set = state;
    const uint64_t draw = pd_rng_mix64(set->seed ^ pd_rng_mix64((uint64_t)index + 1));
    const size_t offset = (size_t)((draw >> 32) % SYNTHETIC_SPAN);

    (void)worker;
    (void)g;
    (void)rng_seed; /* per epoch: the images do not change between epochs */
    *label = (int32_t)(draw % (uint64_t)set->classes);
    for (int c = 0; c < set->channels; c++)
        memcpy(image + (size_t)c * set->plane, set->bank + (size_t)c * (set->plane + SYNTHETIC_SPAN) + offset,
               set->plane * sizeof(*image));
    return PD_OK;
}

static void synthetic_destroy(void *state)
{
    synthetic_set *set = state;

    if (!set)
        return;
    free(set->bank);
    free(set);
}

static const pd_source_ops synthetic_ops = {
    .prepare = synthetic_prepare,
    .worker_create = pd_source_no_worker,
    .worker_destroy = pd_source_no_worker_destroy,
    .load = synthetic_load,
    .destroy = synthetic_destroy,
};

pd_status pd_source_open_synthetic(const pd_loader_options *o, pd_source *out)
{
    int classes = o->classes ? o->classes : SYNTHETIC_CLASSES;
    int64_t samples = o->samples ? o->samples : (int64_t)SYNTHETIC_BATCHES * o->batch;
    synthetic_set *set;

    if (classes < 1)
        return PD_ERROR(PD_EINVAL, "synthetic: %d classes (must be >= 1)", classes);
    if (samples < 1)
        return PD_ERROR(PD_EINVAL, "synthetic: %lld samples per epoch (must be >= 1)", (long long)samples);
    if (o->limit > 0 && o->limit < samples)
        samples = o->limit;
    if (!(set = calloc(1, sizeof(*set))))
        return PD_ERROR(PD_ENOMEM, "synthetic: out of host memory");
    set->classes = classes;
    set->seed = pd_rng_mix64(o->seed ^ (strcmp(o->split, "train") == 0 ? 0x74726169ULL : 0x74657374ULL));
    *out = (pd_source){
        .ops = &synthetic_ops,
        .state = set,
        .count = samples,
        .classes = classes,
        .channels = 3,
        .height = SYNTHETIC_SIDE,
        .width = SYNTHETIC_SIDE,
        .resamples = true,
        .mean = PD_IMAGENET_MEAN,
        .std = PD_IMAGENET_STD,
    };
    return PD_OK;
}
