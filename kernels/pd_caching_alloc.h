/* A caching allocator for one device's memory (module-private): blocks freed
 * by the caller go to per-size-class free lists and serve later requests of
 * about the same size, so a training step that allocates and frees the same
 * sizes every time reaches the raw allocator (cudaMalloc) only in its first
 * step. The raw allocation is a callback, so the bookkeeping runs and is
 * tested on the host (tests/unit/test_caching_allocator.c).
 *
 * Blocks are never split or merged: a block is one raw allocation, so its
 * address is the allocation's base (CUDA IPC and RDMA registration work at
 * that granularity), and a cached block serves a request of at least 4/5 of
 * its size (best fit), which bounds the waste to a fifth.
 *
 * Stream order: a freed block may still be read or written by work queued
 * on the device's stream. It is safe to hand it out again at once as long as
 * every user of the memory queues on that same stream (which all of a
 * device's entries do), because the new owner's work runs after the old
 * owner's. Memory used by other streams, host threads or RDMA must be
 * synchronised before it is freed. Before giving cached blocks back to the
 * raw allocator, the cache calls the `synchronize` callback. */
#ifndef PD_CACHING_ALLOC_H
#define PD_CACHING_ALLOC_H

#include <stddef.h>

#include <pipedream/kernels.h>

/* Every block is a multiple of this many bytes (0 bytes get one granule). */
#define PD_CACHING_ALLOC_GRANULE 512

/* The raw allocator under the cache. `alloc` returns PD_ENOMEM (with a
 * message) when the memory is exhausted, which makes the cache free what it
 * holds and retry once; any other failure is returned as it is. `free` never
 * fails. `synchronize` (nullable) waits until no queued work can use a freed
 * block. */
typedef struct pd_caching_alloc_ops {
    pd_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    pd_status (*synchronize)(void *ctx);
} pd_caching_alloc_ops;

typedef struct pd_caching_alloc pd_caching_alloc;

/* Creates a cache over `ops` (borrowed, as is ctx, passed to every
 * callback) holding at most `max_cached_bytes` of freed blocks (SIZE_MAX:
 * no limit; a block that would exceed it is given back at once). `name`
 * (copied) prefixes log messages. PD_ENOMEM for host memory. */
pd_status pd_caching_alloc_create(const char *name, const pd_caching_alloc_ops *ops, void *ctx,
                                  size_t max_cached_bytes, pd_caching_alloc **out);

/* Gives every block back to the raw allocator (blocks still in use too:
 * their memory is gone with the device; a debug message counts them) and
 * frees the cache. NULL is ignored. */
void pd_caching_alloc_destroy(pd_caching_alloc *a);

/* A block of at least `bytes`: the smallest cached block that fits within
 * the waste bound, else a new raw allocation (retried once after emptying
 * the cache when the raw allocator reports PD_ENOMEM). Thread-safe. */
pd_status pd_caching_alloc_get(pd_caching_alloc *a, size_t bytes, void **out);

/* Returns a block from pd_caching_alloc_get to the cache. NULL is ignored;
 * an unknown pointer is reported as a warning and left alone. Thread-safe. */
void pd_caching_alloc_put(pd_caching_alloc *a, void *ptr);

/* Gives the cached (free) blocks back to the raw allocator, after the
 * `synchronize` callback; its failure is returned and nothing is freed. */
pd_status pd_caching_alloc_release_cached(pd_caching_alloc *a);

/* The statistics so far. */
void pd_caching_alloc_stats(pd_caching_alloc *a, pd_device_memory_stats *out);

#endif
