/* The caching allocator (pd_caching_alloc.h): free lists in size classes of
 * a quarter of a power of two, each sorted by size, and a hash table of the
 * blocks in use keyed by address. A request served from the cache touches
 * no allocator at all, host or device: the block record moves between the
 * two structures. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/log.h>

#include "kernels/pd_caching_alloc.h"

/* Size classes: 4 per power of two, for sizes up to 2^63. */
#define CLASSES_PER_OCTAVE 4
#define CLASS_COUNT (64 * CLASSES_PER_OCTAVE)
#define INITIAL_BUCKETS 256

/* One raw allocation: in a free list or in a hash chain, never both. */
typedef struct block {
    void *ptr;
    size_t size;
    struct block *next;
} block;

struct pd_caching_alloc {
    char name[64];
    const pd_caching_alloc_ops *ops;
    void *ctx;
    size_t max_cached_bytes;
    pthread_mutex_t lock;
    block *free_lists[CLASS_COUNT]; /* each ascending by size */
    block **buckets;                /* blocks in use, by address */
    size_t n_buckets, n_live;
    pd_device_memory_stats stats;
};

/* The size class of a block of `size` >= PD_CACHING_ALLOC_GRANULE bytes:
 * monotonic in size. */
static int size_class(size_t size)
{
    const int octave = 63 - __builtin_clzll((unsigned long long)size);
    return octave * CLASSES_PER_OCTAVE + (int)((size >> (octave - 2)) & (CLASSES_PER_OCTAVE - 1));
}

/* The largest block that may serve `size`: 5/4 of it (saturating). */
static size_t reuse_limit(size_t size) { return size / 4 > SIZE_MAX - size ? SIZE_MAX : size + size / 4; }

static size_t bucket_of(const pd_caching_alloc *a, const void *ptr)
{
    uint64_t h = (uint64_t)(uintptr_t)ptr * UINT64_C(0x9e3779b97f4a7c15);
    return (size_t)(h >> 32) & (a->n_buckets - 1);
}

/* Doubles the hash table; on a host allocation failure the table keeps its
 * size (longer chains, nothing lost). */
static void grow_buckets(pd_caching_alloc *a)
{
    size_t old_n = a->n_buckets;
    block **old = a->buckets, **fresh = calloc(old_n * 2, sizeof(*fresh));

    if (!fresh)
        return;
    a->buckets = fresh;
    a->n_buckets = old_n * 2;
    for (size_t i = 0; i < old_n; i++) {
        block *b = old[i];
        while (b) {
            block *next = b->next;
            size_t k = bucket_of(a, b->ptr);
            b->next = a->buckets[k];
            a->buckets[k] = b;
            b = next;
        }
    }
    free(old);
}

static void live_insert(pd_caching_alloc *a, block *b)
{
    size_t k;

    if (a->n_live >= a->n_buckets)
        grow_buckets(a);
    k = bucket_of(a, b->ptr);
    b->next = a->buckets[k];
    a->buckets[k] = b;
    a->n_live++;
}

static block *live_remove(pd_caching_alloc *a, const void *ptr)
{
    for (block **link = &a->buckets[bucket_of(a, ptr)]; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->ptr == ptr) {
            *link = b->next;
            a->n_live--;
            return b;
        }
    }
    return NULL;
}

static void cache_insert(pd_caching_alloc *a, block *b)
{
    block **link = &a->free_lists[size_class(b->size)];

    while (*link && (*link)->size < b->size)
        link = &(*link)->next;
    b->next = *link;
    *link = b;
    a->stats.bytes_cached += b->size;
}

/* Best fit: the smallest cached block of `size` to reuse_limit(size) bytes,
 * unlinked; NULL if none. Classes and lists ascend, so the first block at
 * least `size` large is the smallest. */
static block *cache_take(pd_caching_alloc *a, size_t size)
{
    const size_t limit = reuse_limit(size);
    const int last = size_class(limit);

    for (int c = size_class(size); c <= last; c++) {
        for (block **link = &a->free_lists[c]; *link; link = &(*link)->next) {
            block *b = *link;
            if (b->size < size)
                continue;
            if (b->size > limit)
                return NULL;
            *link = b->next;
            a->stats.bytes_cached -= b->size;
            return b;
        }
    }
    return NULL;
}

static void raw_free(pd_caching_alloc *a, block *b)
{
    a->ops->free(a->ctx, b->ptr);
    a->stats.raw_frees++;
    free(b);
}

/* Gives the cached blocks to the raw allocator; the caller holds the lock
 * and has synchronised. */
static void free_cached_locked(pd_caching_alloc *a)
{
    for (int c = 0; c < CLASS_COUNT; c++) {
        while (a->free_lists[c]) {
            block *b = a->free_lists[c];
            a->free_lists[c] = b->next;
            raw_free(a, b);
        }
    }
    a->stats.bytes_cached = 0;
}

/* Queued work may still use a cached block: wait for it, then give them back. */
static pd_status release_cached_locked(pd_caching_alloc *a)
{
    if (a->stats.bytes_cached == 0)
        return PD_OK;
    if (a->ops->synchronize)
        PD_CHECK(a->ops->synchronize(a->ctx));
    free_cached_locked(a);
    return PD_OK;
}

pd_status pd_caching_alloc_create(const char *name, const pd_caching_alloc_ops *ops, void *ctx,
                                  size_t max_cached_bytes, pd_caching_alloc **out)
{
    pd_caching_alloc *a;

    if (!ops || !ops->alloc || !ops->free || !out)
        return PD_ERROR(PD_EINVAL, "caching allocator: missing raw allocator or output");
    if (!(a = calloc(1, sizeof(*a))))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory for the allocator", name ? name : "device");
    if (!(a->buckets = calloc(INITIAL_BUCKETS, sizeof(*a->buckets)))) {
        free(a);
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory for the allocator", name ? name : "device");
    }
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a->buckets);
        free(a);
        return PD_ERROR(PD_ENOMEM, "%s: cannot create the allocator's lock", name ? name : "device");
    }
    snprintf(a->name, sizeof(a->name), "%s", name ? name : "device");
    a->ops = ops;
    a->ctx = ctx;
    a->max_cached_bytes = max_cached_bytes;
    a->n_buckets = INITIAL_BUCKETS;
    *out = a;
    return PD_OK;
}

void pd_caching_alloc_destroy(pd_caching_alloc *a)
{
    size_t live_bytes = 0, live = 0;

    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    /* A failed stream runs no more work, so freeing after it is safe too. */
    if (a->ops->synchronize && a->ops->synchronize(a->ctx) != PD_OK)
        PD_LOG_WARNF("%s: closing: %s", a->name, pd_last_error());
    free_cached_locked(a);
    for (size_t i = 0; i < a->n_buckets; i++) {
        while (a->buckets[i]) {
            block *b = a->buckets[i];
            a->buckets[i] = b->next;
            live_bytes += b->size;
            live++;
            raw_free(a, b);
        }
    }
    if (live)
        PD_LOG_DEBUGF("%s: %zu blocks (%zu bytes) still in use at close, freed with the device", a->name, live,
                      live_bytes);
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    free(a->buckets);
    free(a);
}

pd_status pd_caching_alloc_get(pd_caching_alloc *a, size_t bytes, void **out)
{
    pd_status s = PD_OK;
    size_t size;
    block *b;

    if (bytes > SIZE_MAX - PD_CACHING_ALLOC_GRANULE)
        return PD_ERROR(PD_ENOMEM, "%s: cannot allocate %zu bytes", a->name, bytes);
    size = bytes ? (bytes + PD_CACHING_ALLOC_GRANULE - 1) / PD_CACHING_ALLOC_GRANULE * PD_CACHING_ALLOC_GRANULE
                 : PD_CACHING_ALLOC_GRANULE;
    pthread_mutex_lock(&a->lock);
    if ((b = cache_take(a, size))) {
        a->stats.cache_hits++;
    } else {
        if (!(b = malloc(sizeof(*b)))) {
            s = PD_ERROR(PD_ENOMEM, "%s: out of host memory for a block record", a->name);
            goto unlock;
        }
        b->size = size;
        a->stats.raw_allocs++;
        s = a->ops->alloc(a->ctx, size, &b->ptr);
        if (s == PD_ENOMEM && a->stats.bytes_cached > 0) {
            /* The memory may be held by this cache: give it back, retry once. */
            pd_status released = release_cached_locked(a);
            if (released != PD_OK) {
                s = released;
            } else {
                a->stats.cache_flushes++;
                a->stats.raw_allocs++;
                s = a->ops->alloc(a->ctx, size, &b->ptr);
            }
        }
        if (s != PD_OK) {
            free(b);
            goto unlock;
        }
    }
    live_insert(a, b);
    a->stats.allocs++;
    a->stats.bytes_in_use += b->size;
    if (a->stats.bytes_in_use > a->stats.peak_bytes_in_use)
        a->stats.peak_bytes_in_use = a->stats.bytes_in_use;
    *out = b->ptr;
unlock:
    pthread_mutex_unlock(&a->lock);
    return s;
}

void pd_caching_alloc_put(pd_caching_alloc *a, void *ptr)
{
    block *b;

    if (!ptr)
        return;
    pthread_mutex_lock(&a->lock);
    if (!(b = live_remove(a, ptr))) {
        pthread_mutex_unlock(&a->lock);
        PD_LOG_WARNF("%s: freeing %p, which this device did not allocate (or freed already); ignored", a->name, ptr);
        return;
    }
    a->stats.frees++;
    a->stats.bytes_in_use -= b->size;
    if (b->size <= a->max_cached_bytes && a->stats.bytes_cached <= a->max_cached_bytes - b->size) {
        cache_insert(a, b);
    } else {
        /* Over the cache's limit: queued work may still use the block. */
        if (a->ops->synchronize && a->ops->synchronize(a->ctx) != PD_OK)
            PD_LOG_WARNF("%s: freeing a block: %s", a->name, pd_last_error());
        raw_free(a, b);
    }
    pthread_mutex_unlock(&a->lock);
}

pd_status pd_caching_alloc_release_cached(pd_caching_alloc *a)
{
    pd_status s;

    pthread_mutex_lock(&a->lock);
    s = release_cached_locked(a);
    pthread_mutex_unlock(&a->lock);
    return s;
}

void pd_caching_alloc_stats(pd_caching_alloc *a, pd_device_memory_stats *out)
{
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
}
