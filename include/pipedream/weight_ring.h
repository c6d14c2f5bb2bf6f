/* The versioned weight ring of a pipeline stage (weight stashing): `depth`
 * slots, each holding one version of the stage's weights, with lock-free
 * pins.
 *
 * The forward pass of a minibatch pins the newest version and keeps the
 * pin until its backward pass is done, so both passes see the same weights;
 * the optimizer step (the one writer) acquires a slot that is neither
 * pinned nor newest, writes the updated weights into it and publishes it
 * as the next version. Readers (forward passes, a checkpoint writer,
 * replica synchronisation, --vertical-sync's pins of a given version) may
 * run on any threads; the writer must be one thread at a time. No call
 * takes a lock or waits: pins retry a compare-and-swap, the writer scans.
 *
 * The slots are opaque to the ring: the caller owns the buffers (host or
 * device memory, a set of tensors, ...) and passes one pointer per slot.
 * A pinned slot's contents are never written while the pin is held; the
 * writes of the weights of a version happen-before every read through a
 * pin of it (the publish is a release, the pin an acquire). A version that
 * is neither newest nor pinned may be reclaimed by the writer at any time.
 *
 * Versions count optimizer steps: the ring starts with `first_version` in
 * slot 0 (the initial or resumed weights) and each publish adds one. */
#ifndef PIPEDREAM_WEIGHT_RING_H
#define PIPEDREAM_WEIGHT_RING_H

#include <stddef.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most slots of one ring. */
#define PD_WEIGHT_RING_MAX_DEPTH 1024

/* weight_versions of pd_weight_ring_depth_for: keep every version an
 * in-flight minibatch needs (PipeDream's weight stashing). */
#define PD_WEIGHT_VERSIONS_STASH 0
/* weight_versions of pd_weight_ring_depth_for: PipeDream-2BW, two buffers;
 * the caller accumulates gradients over at least as many minibatches as are
 * in flight, so that the older version is unpinned by the next update. */
#define PD_WEIGHT_VERSIONS_2BW 2

typedef struct pd_weight_ring pd_weight_ring;

/* A slot with its version: a reader's pin, or the writer's slot. */
typedef struct pd_weight_pin {
    int slot;         /* 0 .. depth-1 */
    uint64_t version;
    void *weights;    /* the caller's pointer for the slot */
} pd_weight_pin;

/* The depth a stage needs with `in_flight` minibatches in flight (their
 * forward pass done, backward pass not) and `weight_versions`
 * (PD_WEIGHT_VERSIONS_STASH: in_flight + 1; PD_WEIGHT_VERSIONS_2BW: 2),
 * checked against the memory available for it: PD_ENOMEM naming the bytes
 * when depth x slot_bytes exceed memory_bytes, PD_EINVAL for other values
 * of weight_versions or in_flight < 1. */
pd_status pd_weight_ring_depth_for(int in_flight, int weight_versions, size_t slot_bytes, size_t memory_bytes,
                                   int *depth);

/* A ring over slots[0 .. depth-1] (2 <= depth <= PD_WEIGHT_RING_MAX_DEPTH;
 * the pointers are copied, the buffers stay the caller's), with
 * `first_version` newest in slot 0. PD_EINVAL for a bad depth, a NULL slot
 * or first_version UINT64_MAX. Free with pd_weight_ring_destroy. */
pd_status pd_weight_ring_create(int depth, void *const *slots, uint64_t first_version, pd_weight_ring **out);

/* Frees the ring (not the slots). Pins still held are a bug of the caller;
 * they are reported as a warning. NULL is ignored. */
void pd_weight_ring_destroy(pd_weight_ring *ring);

/* The number of slots. */
int pd_weight_ring_depth(const pd_weight_ring *ring);

/* The newest version published (a snapshot: it may change at once). */
uint64_t pd_weight_ring_newest_version(const pd_weight_ring *ring);

/* Pins outstanding on all slots (exact when no call runs concurrently). */
int64_t pd_weight_ring_pinned(const pd_weight_ring *ring);

/* ---- readers (any thread) ---- */

/* Pins the newest version: its slot cannot be written until the matching
 * pd_weight_ring_unpin. Always succeeds. */
void pd_weight_ring_pin_newest(pd_weight_ring *ring, pd_weight_pin *pin);

/* Pins `version` (--vertical-sync, or a second pin of a stashed version).
 * PD_ENOTFOUND "weight version V is no longer held ..." when it was
 * reclaimed, "... not yet published" when it is newer than the newest. */
pd_status pd_weight_ring_pin_version(pd_weight_ring *ring, uint64_t version, pd_weight_pin *pin);

/* Releases a pin of pd_weight_ring_pin_newest or _pin_version. */
void pd_weight_ring_unpin(pd_weight_ring *ring, const pd_weight_pin *pin);

/* ---- the writer (one thread at a time) ---- */

/* Takes a free slot (not pinned, not newest) for the next version:
 * `next` gets the slot and version newest + 1; `newest` (nullable) gets the
 * newest version's slot, which the writer may read without a pin until it
 * publishes. PD_ESTATE "weight ring full: all N slots pinned or newest" when
 * there is none, "... already acquired" when a slot acquired before was
 * not yet published. */
pd_status pd_weight_ring_acquire(pd_weight_ring *ring, pd_weight_pin *next, pd_weight_pin *newest);

/* Makes the acquired slot the newest version (a release: readers that pin
 * it see everything written to it before). PD_EINVAL if `next` is not what
 * pd_weight_ring_acquire returned. */
pd_status pd_weight_ring_publish(pd_weight_ring *ring, const pd_weight_pin *next);

#ifdef __cplusplus
}
#endif
#endif
