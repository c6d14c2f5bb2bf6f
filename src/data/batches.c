/* The minibatch iterator: the per-epoch order of order.c (shared with
 * pd_loader, so both walk a data set identically for one seed) and
 * normalisation through a 256-entry table of the pixel values. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/data.h>

#include "data/pd_data_int.h"

struct pd_batches {
    const pd_dataset *ds;
    pd_batches_options opts;
    int64_t *order;     /* [N] the sample at each position of the current epoch */
    int64_t per_epoch;  /* minibatches per epoch */
    int64_t epoch;      /* of the next minibatch */
    int64_t position;   /* index of the next minibatch within the epoch */
    float normalised[256];
};

/* The order of epoch `it->epoch`. */
static void order_epoch(pd_batches *it)
{
    pd_data_epoch_order(it->order, it->ds->count, it->opts.shuffle, it->opts.seed, it->epoch);
}

pd_status pd_batches_create(const pd_dataset *ds, const pd_batches_options *opts, pd_batches **out)
{
    pd_batches *it;

    if (!ds || !opts || !out)
        return PD_ERROR(PD_EINVAL, "batches: NULL data set, options or output");
    if (ds->count <= 0)
        return PD_ERROR(PD_EINVAL, "batches: the data set is empty");
    if (opts->batch <= 0)
        return PD_ERROR(PD_EINVAL, "batches: batch size %d must be positive", opts->batch);
    if (!isfinite(opts->mean) || !isfinite(opts->std) || !(opts->std > 0))
        return PD_ERROR(PD_EINVAL, "batches: normalisation mean %g / std %g must be finite with std > 0",
                        (double)opts->mean, (double)opts->std);
    if (opts->drop_last && ds->count < opts->batch)
        return PD_ERROR(PD_EINVAL, "batches: %lld samples do not fill one minibatch of %d (drop_last)",
                        (long long)ds->count, opts->batch);
    if (!(it = calloc(1, sizeof(*it))) || !(it->order = malloc((size_t)ds->count * sizeof(*it->order)))) {
        free(it);
        return PD_ERROR(PD_ENOMEM, "batches: out of host memory for the order of %lld samples",
                        (long long)ds->count);
    }
    it->ds = ds;
    it->opts = *opts;
    it->per_epoch = opts->drop_last ? ds->count / opts->batch : (ds->count + opts->batch - 1) / opts->batch;
    for (int v = 0; v < 256; v++)
        it->normalised[v] = ((float)v / 255.0f - opts->mean) / opts->std;
    order_epoch(it);
    *out = it;
    return PD_OK;
}

pd_status pd_batches_next(pd_batches *it, float *images, int32_t *labels, int *valid)
{
    const pd_dataset *ds = it->ds;
    const int64_t plane = (int64_t)ds->height * ds->width;
    const int batch = it->opts.batch;
    int64_t first = it->position * batch;
    int rows = ds->count - first < batch ? (int)(ds->count - first) : batch;

    if (!images || !labels || !valid)
        return PD_ERROR(PD_EINVAL, "batches: NULL image, label or count buffer");
    for (int r = 0; r < rows; r++) {
        int64_t sample = it->order[first + r];
        const uint8_t *src = ds->images + sample * plane;
        float *dst = images + r * plane;

        for (int64_t p = 0; p < plane; p++)
            dst[p] = it->normalised[src[p]];
        labels[r] = ds->labels[sample];
    }
    if (rows < batch) {
        memset(images + rows * plane, 0, (size_t)((batch - rows) * plane) * sizeof(*images));
        memset(labels + rows, 0, (size_t)(batch - rows) * sizeof(*labels));
    }
    *valid = rows;
    if (++it->position == it->per_epoch) {
        it->position = 0;
        it->epoch++;
        order_epoch(it);
    }
    return PD_OK;
}

int64_t pd_batches_per_epoch(const pd_batches *it) { return it->per_epoch; }

int64_t pd_batches_epoch(const pd_batches *it) { return it->epoch; }

void pd_batches_destroy(pd_batches *it)
{
    if (!it)
        return;
    free(it->order);
    free(it);
}
