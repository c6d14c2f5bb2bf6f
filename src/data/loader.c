/* The loader: options, geometry, the minibatch sequence (order, sharding,
 * drop_last), replacement of unreadable samples, and for sources worth it a
 * pool of threads filling a ring of minibatch buffers ahead of the consumer.
 *
 * Every minibatch has a sequence number seq = epoch * per_epoch + position.
 * What it holds is a function of seq alone (the shard's j-th minibatch is
 * the unsharded loader's minibatch shard + j * num_shards; its samples come
 * from the epoch's order; their randomness from (seed, epoch, sample)), so
 * threads may fill rows in any order and seeking is setting seq.
 *
 * The pool: the ring has `prefetch` slots; slot seq % prefetch holds
 * minibatch seq while seq < consumed + prefetch. Threads claim single rows
 * (sample decodes) in sequence order under one mutex, decode without it, and
 * count the row done; the consumer waits for its slot to be complete, copies
 * it out and frees it. Seeking and shutting down wait until no row is being
 * decoded, so a thread never writes into a slot that changed hands. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream/log.h>

#include "data/pd_data_int.h"

#define LOADER_MAX_SIDE 16384
#define LOADER_MAX_THREADS 256
#define LOADER_DEFAULT_PREFETCH 3
#define LOADER_MESSAGE_BYTES 1024

/* One minibatch buffer of the ring. */
typedef struct loader_slot {
    int64_t seq;   /* the minibatch it holds or is being filled with; -1 free */
    int rows;      /* samples in it */
    int done;      /* rows finished */
    pd_status status; /* the first fatal failure of a row */
    char message[LOADER_MESSAGE_BYTES];
    float *images; /* [B,C,H,W] */
    int32_t *labels;
} loader_slot;

typedef struct loader_thread {
    struct pd_loader *loader;
    void *worker;
    pthread_t id;
    bool started;
} loader_thread;

struct pd_loader {
    pd_source src;
    pd_sample_geometry geom;
    int batch;
    bool train;
    uint64_t seed;
    int shard, num_shards;
    int64_t per_epoch; /* this shard's minibatches per epoch */
    size_t image_floats; /* C*H*W */
    char **number_names; /* class names when the source has none */
    atomic_uchar *unreadable; /* [count] samples found unreadable */
    atomic_llong skipped;
    int64_t *order;    /* [count] the order of epoch order_epoch */
    int64_t order_epoch;
    int64_t seq;       /* the next minibatch the consumer gets */
    void *sync_worker; /* without a pool: the consumer's worker */

    /* The pool (threads == 0: none). */
    int threads, prefetch;
    loader_thread *pool;
    loader_slot *slots;
    pthread_mutex_t mutex;
    pthread_cond_t work;  /* a row may be claimable, or stop/pause changed */
    pthread_cond_t ready; /* a slot completed */
    pthread_cond_t idle;  /* busy dropped to 0 */
    bool locks_made;
    int64_t claim_seq;    /* the next row to claim: (claim_seq, claim_row) */
    int claim_row;
    int busy;             /* rows being decoded */
    bool paused, stop;
};

/* ---- the minibatch sequence ---- */

/* The unsharded minibatch index of this shard's minibatch `seq`. */
static int64_t global_batch(const pd_loader *l, int64_t seq)
{
    return l->shard + (seq % l->per_epoch) * l->num_shards;
}

static int rows_of(const pd_loader *l, int64_t seq)
{
    int64_t left = l->src.count - global_batch(l, seq) * l->batch;
    return left < l->batch ? (int)left : l->batch;
}

/* The epoch and sample index of row `row` of minibatch `seq`. Not thread-safe
 * (the order cache): the pool calls it under its mutex. */
static void resolve(pd_loader *l, int64_t seq, int row, int64_t *epoch, int64_t *index)
{
    int64_t e = seq / l->per_epoch;

    if (l->order_epoch != e) {
        pd_data_epoch_order(l->order, l->src.count, l->train, l->seed, e);
        l->order_epoch = e;
    }
    *epoch = e;
    *index = l->order[global_batch(l, seq) * l->batch + row];
}

/* Loads sample `index` of epoch `epoch`, or when it cannot be read the next
 * readable one after it (wrapping around): the same image in every run. */
static pd_status load_sample(pd_loader *l, void *worker, int64_t epoch, int64_t index, float *image,
                             int32_t *label)
{
    const int64_t n = l->src.count;

    for (int64_t k = 0; k < n; k++) {
        int64_t i = (index + k) % n;
        pd_status s;

        if (atomic_load_explicit(&l->unreadable[i], memory_order_relaxed))
            continue;
        s = l->src.ops->load(l->src.state, worker, &l->geom, i, pd_data_sample_seed(l->seed, epoch, i), image,
                             label);
        if (s == PD_OK)
            return PD_OK;
        if (s != PD_EFORMAT && s != PD_EIO)
            return s;
        /* Two threads may meet the same bad file: one of them reports it. */
        if (!atomic_exchange(&l->unreadable[i], 1)) {
            PD_LOG_WARNF("skipping an unreadable image, using the next one instead: %s", pd_last_error());
            atomic_fetch_add(&l->skipped, 1);
        }
    }
    return PD_ERROR(PD_EFORMAT, "none of the %lld images of the data set can be read", (long long)n);
}

/* Zeros rows [rows, batch) of a minibatch. */
static void clear_tail(const pd_loader *l, int rows, float *images, int32_t *labels)
{
    if (rows >= l->batch)
        return;
    memset(images + (size_t)rows * l->image_floats, 0,
           (size_t)(l->batch - rows) * l->image_floats * sizeof(*images));
    memset(labels + rows, 0, (size_t)(l->batch - rows) * sizeof(*labels));
}

/* ---- the pool ---- */

static void *pool_main(void *arg)
{
    loader_thread *t = arg;
    pd_loader *l = t->loader;

    pthread_mutex_lock(&l->mutex);
    for (;;) {
        while (!l->stop && (l->paused || l->claim_seq >= l->seq + l->prefetch))
            pthread_cond_wait(&l->work, &l->mutex);
        if (l->stop)
            break;

        int64_t seq = l->claim_seq, epoch, index;
        int row = l->claim_row;
        loader_slot *slot = &l->slots[seq % l->prefetch];

        if (row == 0) {
            slot->seq = seq;
            slot->rows = rows_of(l, seq);
            slot->done = 0;
            slot->status = PD_OK;
        }
        resolve(l, seq, row, &epoch, &index);
        if (++l->claim_row == slot->rows) {
            l->claim_seq++;
            l->claim_row = 0;
        }
        l->busy++;
        pthread_mutex_unlock(&l->mutex);

        pd_status s = load_sample(l, t->worker, epoch, index, slot->images + (size_t)row * l->image_floats,
                                  &slot->labels[row]);

        pthread_mutex_lock(&l->mutex);
        if (s != PD_OK && slot->status == PD_OK) {
            slot->status = s;
            snprintf(slot->message, sizeof(slot->message), "%s", pd_last_error());
        }
        if (++slot->done == slot->rows)
            pthread_cond_broadcast(&l->ready);
        if (--l->busy == 0)
            pthread_cond_broadcast(&l->idle);
    }
    pthread_mutex_unlock(&l->mutex);
    return NULL;
}

/* Makes the threads stop claiming and waits for the rows in progress. */
static void pool_quiesce(pd_loader *l)
{
    l->paused = true;
    while (l->busy > 0)
        pthread_cond_wait(&l->idle, &l->mutex);
}

/* Empties the ring and restarts claiming at the consumer's position. */
static void pool_restart(pd_loader *l)
{
    for (int i = 0; i < l->prefetch; i++)
        l->slots[i].seq = -1;
    l->claim_seq = l->seq;
    l->claim_row = 0;
    l->paused = false;
    pthread_cond_broadcast(&l->work);
}

static void pool_stop(pd_loader *l)
{
    if (!l->locks_made)
        return;
    pthread_mutex_lock(&l->mutex);
    l->stop = true;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mutex);
    for (int i = 0; i < l->threads; i++)
        if (l->pool[i].started)
            pthread_join(l->pool[i].id, NULL);
}

static pd_status pool_start(pd_loader *l)
{
    int err;

    if (!(l->pool = calloc((size_t)l->threads, sizeof(*l->pool))) ||
        !(l->slots = calloc((size_t)l->prefetch, sizeof(*l->slots))))
        return PD_ERROR(PD_ENOMEM, "loader: out of host memory for %d threads", l->threads);
    for (int i = 0; i < l->prefetch; i++) {
        loader_slot *slot = &l->slots[i];
        slot->seq = -1;
        if (!(slot->images = malloc((size_t)l->batch * l->image_floats * sizeof(*slot->images))) ||
            !(slot->labels = malloc((size_t)l->batch * sizeof(*slot->labels))))
            return PD_ERROR(PD_ENOMEM, "loader: out of host memory for %d prefetch buffers of %d x %zu floats",
                            l->prefetch, l->batch, l->image_floats);
    }
    for (int i = 0; i < l->threads; i++) {
        l->pool[i].loader = l;
        PD_CHECK(l->src.ops->worker_create(l->src.state, &l->pool[i].worker));
    }
    if ((err = pthread_mutex_init(&l->mutex, NULL)) != 0)
        return PD_ERROR(PD_ENOMEM, "loader: cannot create a mutex: %s", strerror(err));
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    pthread_cond_init(&l->idle, NULL);
    l->locks_made = true;
    l->claim_seq = l->seq;
    for (int i = 0; i < l->threads; i++) {
        if ((err = pthread_create(&l->pool[i].id, NULL, pool_main, &l->pool[i])) != 0)
            return PD_ERROR(PD_ENOMEM, "loader: cannot start loader thread %d of %d: %s", i + 1, l->threads,
                            strerror(err));
        l->pool[i].started = true;
    }
    return PD_OK;
}

/* ---- options ---- */

static const char *const kinds[] = {"mnist", "fashion-mnist", "cifar10", "imagenet", "synthetic"};

static pd_status open_source(const pd_loader_options *o, pd_source *src)
{
    if (strcmp(o->kind, "mnist") == 0)
        return pd_source_open_mnist(o, false, src);
    if (strcmp(o->kind, "fashion-mnist") == 0)
        return pd_source_open_mnist(o, true, src);
    if (strcmp(o->kind, "cifar10") == 0)
        return pd_source_open_cifar10(o, src);
    if (strcmp(o->kind, "imagenet") == 0)
        return pd_source_open_imagenet(o, src);
    if (strcmp(o->kind, "synthetic") == 0)
        return pd_source_open_synthetic(o, src);
    return PD_ERROR(PD_EINVAL, "loader: unknown data set kind '%s' (known: %s, %s, %s, %s, %s)", o->kind, kinds[0],
                    kinds[1], kinds[2], kinds[3], kinds[4]);
}

/* Checks the options every kind shares; `o` gets the normalised split. */
static pd_status check_options(const pd_loader_options *in, pd_loader_options *o)
{
    *o = *in;
    if (!o->kind)
        return PD_ERROR(PD_EINVAL, "loader: no data set kind given");
    if (!o->split || strcmp(o->split, "train") == 0)
        o->split = "train";
    else if (strcmp(o->split, "test") == 0 || strcmp(o->split, "t10k") == 0 || strcmp(o->split, "val") == 0)
        o->split = "test";
    else
        return PD_ERROR(PD_EINVAL, "loader: unknown split '%s' (use train or test)", o->split);
    if (o->batch <= 0)
        return PD_ERROR(PD_EINVAL, "loader: batch size %d must be positive", o->batch);
    if (o->limit < 0)
        return PD_ERROR(PD_EINVAL, "loader: negative sample limit %lld", (long long)o->limit);
    if (o->num_shards == 0 && o->shard == 0)
        o->num_shards = 1;
    if (o->num_shards < 1 || o->shard < 0 || o->shard >= o->num_shards)
        return PD_ERROR(PD_EINVAL, "loader: shard %d of %d is not in [0, %d)", o->shard, o->num_shards,
                        o->num_shards);
    if (o->threads < 0 || o->threads > LOADER_MAX_THREADS)
        return PD_ERROR(PD_EINVAL, "loader: %d threads is outside [0, %d]", o->threads, LOADER_MAX_THREADS);
    if (o->prefetch < 0)
        return PD_ERROR(PD_EINVAL, "loader: negative prefetch depth %d", o->prefetch);
    if (o->channels != 0 && o->channels != 1 && o->channels != 3)
        return PD_ERROR(PD_EINVAL, "loader: %d output channels (use 1 or 3)", o->channels);
    if (o->height < 0 || o->height > LOADER_MAX_SIDE || o->width < 0 || o->width > LOADER_MAX_SIDE)
        return PD_ERROR(PD_EINVAL, "loader: output size %dx%d is outside [1, %d]", o->height, o->width,
                        LOADER_MAX_SIDE);
    return PD_OK;
}

/* The output geometry and normalisation from the options and the source. */
static pd_status resolve_geometry(const pd_loader_options *o, const pd_source *src, pd_sample_geometry *g)
{
    bool given = false;

    memset(g, 0, sizeof(*g));
    g->train = o->train;
    g->channels = o->channels ? o->channels : src->channels;
    g->height = o->height ? o->height : src->height;
    g->width = o->width ? o->width : src->width;
    if (!src->resamples) {
        if (src->channels == 3 && g->channels == 1)
            return PD_ERROR(PD_EINVAL, "%s: 1 output channel from colour images is not supported", o->kind);
        if (g->height < src->height || g->width < src->width)
            return PD_ERROR(PD_EINVAL, "%s: output size %dx%d is smaller than the %dx%d images (they are only padded)",
                            o->kind, g->height, g->width, src->height, src->width);
    }
    for (int c = 0; c < g->channels; c++)
        given |= o->std[c] != 0;
    for (int c = 0; c < g->channels; c++) {
        int native = src->channels == 1 ? 0 : c;
        g->mean[c] = given ? o->mean[c] : src->mean[native];
        g->std[c] = given ? o->std[c] : src->std[native];
        if (!isfinite(g->mean[c]) || !isfinite(g->std[c]) || !(g->std[c] > 0))
            return PD_ERROR(PD_EINVAL, "%s: normalisation of channel %d: mean %g, std %g (std must be > 0)", o->kind,
                            c, (double)g->mean[c], (double)g->std[c]);
        for (int v = 0; v < 256; v++)
            g->table[c][v] = ((float)v / 255.0f - g->mean[c]) / g->std[c];
    }
    if ((size_t)g->channels * g->height * g->width > SIZE_MAX / sizeof(float) / (size_t)o->batch)
        return PD_ERROR(PD_EINVAL, "%s: a minibatch of %d images of %dx%dx%d does not fit in memory", o->kind,
                        o->batch, g->channels, g->height, g->width);
    return PD_OK;
}

static int default_threads(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores < 1 ? 1 : cores > 4 ? 4 : (int)cores;
}

pd_status pd_loader_open(const pd_loader_options *opts, pd_loader **out)
{
    pd_loader_options o;
    pd_loader *l;
    pd_status s;

    if (!opts || !out)
        return PD_ERROR(PD_EINVAL, "loader: NULL options or output");
    PD_CHECK(check_options(opts, &o));
    if (!(l = calloc(1, sizeof(*l))))
        return PD_ERROR(PD_ENOMEM, "loader: out of host memory");
    l->batch = o.batch;
    l->train = o.train;
    l->seed = o.seed;
    l->shard = o.shard;
    l->num_shards = o.num_shards;
    l->order_epoch = -1;
    PD_CHECK_GOTO(open_source(&o, &l->src), s, fail);
    PD_CHECK_GOTO(resolve_geometry(&o, &l->src, &l->geom), s, fail);
    l->image_floats = (size_t)l->geom.channels * l->geom.height * l->geom.width;
    PD_CHECK_GOTO(l->src.ops->prepare(l->src.state, &l->geom), s, fail);

    /* train: floor(N/B) full minibatches, evaluation: ceil(N/B); then shared. */
    int64_t n = l->src.count, k = o.train ? n / o.batch : (n + o.batch - 1) / o.batch;
    l->per_epoch = o.train ? k / o.num_shards : (k - o.shard + o.num_shards - 1) / o.num_shards;
    if (l->per_epoch <= 0) {
        s = PD_ERROR(PD_EINVAL, "%s: %lld samples give shard %d of %d no %sminibatch of %d", o.kind, (long long)n,
                     o.shard, o.num_shards, o.train ? "full " : "", o.batch);
        goto fail;
    }
    if (!(l->order = malloc((size_t)n * sizeof(*l->order))) ||
        !(l->unreadable = calloc((size_t)n, sizeof(*l->unreadable)))) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory for the order of %lld samples", o.kind, (long long)n);
        goto fail;
    }
    if (!l->src.class_names) {
        if (!(l->number_names = calloc((size_t)l->src.classes, sizeof(*l->number_names)))) {
            s = PD_ERROR(PD_ENOMEM, "%s: out of host memory for %d class names", o.kind, l->src.classes);
            goto fail;
        }
        for (int c = 0; c < l->src.classes; c++) {
            char name[16];
            snprintf(name, sizeof(name), "%d", c);
            if (!(l->number_names[c] = strdup(name))) {
                s = PD_ERROR(PD_ENOMEM, "%s: out of host memory for %d class names", o.kind, l->src.classes);
                goto fail;
            }
        }
    }
    if (l->src.threaded) {
        l->threads = o.threads ? o.threads : default_threads();
        l->prefetch = o.prefetch ? o.prefetch : LOADER_DEFAULT_PREFETCH;
        PD_CHECK_GOTO(pool_start(l), s, fail);
    } else {
        PD_CHECK_GOTO(l->src.ops->worker_create(l->src.state, &l->sync_worker), s, fail);
    }
    *out = l;
    return PD_OK;

fail:
    pd_loader_destroy(l);
    return s;
}

void pd_loader_get_info(const pd_loader *l, pd_loader_info *out)
{
    memset(out, 0, sizeof(*out));
    out->channels = l->geom.channels;
    out->height = l->geom.height;
    out->width = l->geom.width;
    out->classes = l->src.classes;
    out->batch = l->batch;
    out->samples = 0;
    for (int64_t j = 0; j < l->per_epoch; j++)
        out->samples += rows_of(l, j);
    out->batches_per_epoch = l->per_epoch;
    out->split_samples = l->src.count;
    out->skipped = atomic_load((atomic_llong *)&l->skipped);
    for (int c = 0; c < l->geom.channels; c++) {
        out->mean[c] = l->geom.mean[c];
        out->std[c] = l->geom.std[c];
    }
}

const char *pd_loader_class_name(const pd_loader *l, int c)
{
    if (c < 0 || c >= l->src.classes)
        return NULL;
    return l->src.class_names ? l->src.class_names[c] : l->number_names[c];
}

pd_status pd_loader_next(pd_loader *l, float *images, int32_t *labels, int *valid)
{
    const int64_t seq = l->seq;
    int rows;

    if (!images || !labels || !valid)
        return PD_ERROR(PD_EINVAL, "loader: NULL image, label or count buffer");
    if (!l->pool) {
        rows = rows_of(l, seq);
        for (int r = 0; r < rows; r++) {
            int64_t epoch, index;
            resolve(l, seq, r, &epoch, &index);
            PD_CHECK(load_sample(l, l->sync_worker, epoch, index, images + (size_t)r * l->image_floats, &labels[r]));
        }
    } else {
        loader_slot *slot = &l->slots[seq % l->prefetch];

        pthread_mutex_lock(&l->mutex);
        while (slot->seq != seq || slot->done < slot->rows)
            pthread_cond_wait(&l->ready, &l->mutex);
        pthread_mutex_unlock(&l->mutex);
        /* The slot is complete and stays ours until l->seq moves on. */
        if (slot->status != PD_OK)
            return PD_ERROR(slot->status, "%s", slot->message);
        rows = slot->rows;
        memcpy(images, slot->images, (size_t)rows * l->image_floats * sizeof(*images));
        memcpy(labels, slot->labels, (size_t)rows * sizeof(*labels));
    }
    clear_tail(l, rows, images, labels);
    *valid = rows;
    if (l->pool) {
        pthread_mutex_lock(&l->mutex);
        l->seq++;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->mutex);
    } else {
        l->seq++;
    }
    return PD_OK;
}

int64_t pd_loader_epoch(const pd_loader *l) { return l->seq / l->per_epoch; }

int64_t pd_loader_position(const pd_loader *l) { return l->seq % l->per_epoch; }

pd_status pd_loader_seek(pd_loader *l, int64_t epoch, int64_t batch)
{
    if (epoch < 0 || batch < 0 || batch > l->per_epoch)
        return PD_ERROR(PD_EINVAL, "loader: cannot seek to minibatch %lld of epoch %lld (%lld minibatches per epoch)",
                        (long long)batch, (long long)epoch, (long long)l->per_epoch);
    if (epoch > (INT64_MAX - batch) / l->per_epoch - 1)
        return PD_ERROR(PD_EINVAL, "loader: epoch %lld is too large", (long long)epoch);
    if (!l->pool) {
        l->seq = epoch * l->per_epoch + batch;
        return PD_OK;
    }
    pthread_mutex_lock(&l->mutex);
    pool_quiesce(l);
    l->seq = epoch * l->per_epoch + batch;
    pool_restart(l);
    pthread_mutex_unlock(&l->mutex);
    return PD_OK;
}

void pd_loader_destroy(pd_loader *l)
{
    if (!l)
        return;
    pool_stop(l);
    if (l->locks_made) {
        pthread_cond_destroy(&l->idle);
        pthread_cond_destroy(&l->ready);
        pthread_cond_destroy(&l->work);
        pthread_mutex_destroy(&l->mutex);
    }
    if (l->pool)
        for (int i = 0; i < l->threads; i++)
            if (l->pool[i].worker)
                l->src.ops->worker_destroy(l->pool[i].worker);
    if (l->slots)
        for (int i = 0; i < l->prefetch; i++) {
            free(l->slots[i].images);
            free(l->slots[i].labels);
        }
    free(l->slots);
    free(l->pool);
    if (l->sync_worker)
        l->src.ops->worker_destroy(l->sync_worker);
    if (l->number_names)
        for (int c = 0; c < l->src.classes; c++)
            free(l->number_names[c]);
    free(l->number_names);
    free(l->unreadable);
    free(l->order);
    if (l->src.ops)
        l->src.ops->destroy(l->src.state);
    free(l);
}
