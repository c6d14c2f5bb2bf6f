/* The "mnist" and "fashion-mnist" kinds: an MNIST-layout IDX directory read
 * whole by pd_dataset_load_mnist, each image placed by the shared planar
 * writer (padding, channel replication). No augmentation. */
#include "config.h"

#include <string.h>

#include <pipedream/data.h>

#include "data/pd_data_int.h"

static pd_status mnist_load(void *state, void *worker, const pd_sample_geometry *g, int64_t index,
                            uint64_t rng_seed, float *image, int32_t *label)
{
    const pd_dataset *ds = state;

    (void)worker;
    (void)rng_seed;
    pd_source_put_planar_u8(ds->images + index * ds->height * ds->width, 1, ds->height, ds->width, g, 0, 0, false,
                            image);
    *label = ds->labels[index];
    return PD_OK;
}

static void mnist_destroy(void *state) { pd_dataset_destroy(state); }

static const pd_source_ops mnist_ops = {
    .prepare = pd_source_no_prepare,
    .worker_create = pd_source_no_worker,
    .worker_destroy = pd_source_no_worker_destroy,
    .load = mnist_load,
    .destroy = mnist_destroy,
};

pd_status pd_source_open_mnist(const pd_loader_options *o, bool fashion, pd_source *out)
{
    pd_dataset *ds;

    if (!o->path)
        return PD_ERROR(PD_EINVAL, "%s: no data directory given", o->kind);
    PD_CHECK(pd_dataset_load_mnist(o->path, strcmp(o->split, "test") == 0 ? "t10k" : "train", o->limit, &ds));
    *out = (pd_source){
        .ops = &mnist_ops,
        .state = ds,
        .count = ds->count,
        .classes = ds->classes,
        .channels = 1,
        .height = ds->height,
        .width = ds->width,
        .mean = {fashion ? PD_FASHION_MNIST_MEAN : PD_MNIST_MEAN},
        .std = {fashion ? PD_FASHION_MNIST_STD : PD_MNIST_STD},
    };
    return PD_OK;
}
