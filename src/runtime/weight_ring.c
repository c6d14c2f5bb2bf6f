/* The versioned weight ring (weight stashing), lock-free.
 *
 * Pins of the newest version use split reference counts (Williams, "C++
 * Concurrency in Action", 7.2.4): the word `newest` holds the newest slot
 * and an external pin count, and a reader pins with one compare-and-swap
 * that increments the count only if the newest slot is still the one it
 * read. There is therefore no window in which a reader has incremented the
 * count of a slot that is no longer newest (which would make the writer
 * see a spurious pin, and report a full ring, when the ring holds exactly
 * one free slot). When the writer publishes, it swaps in the new slot and
 * adds the old word's external count to the old slot's own count; unpins
 * always decrement the slot's own count, which is negative in between.
 *
 * Pins of a given version increment the slot's own count, then re-read its
 * version; the writer retires a slot by storing "no version", then
 * re-reads the count. Both pairs are sequentially consistent, so either
 * the reader sees the retirement (and backs off) or the writer sees the pin
 * (and restores the version untouched). */
#include "config.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/log.h>
#include <pipedream/weight_ring.h>

#define NO_VERSION UINT64_MAX
#define SLOT_BITS 16 /* PD_WEIGHT_RING_MAX_DEPTH fits; 48 bits of pins remain */
#define SLOT_MASK ((UINT64_C(1) << SLOT_BITS) - 1)
#define ONE_PIN (UINT64_C(1) << SLOT_BITS)
#define CACHE_LINE 64

/* Each slot's counters on their own cache line: readers of different
 * versions do not contend. */
typedef struct ring_slot {
    _Alignas(CACHE_LINE) _Atomic int64_t pins; /* own count; see the top */
    _Atomic uint64_t version;                  /* NO_VERSION: free or being written */
    void *weights;
} ring_slot;

struct pd_weight_ring {
    _Alignas(CACHE_LINE) _Atomic uint64_t newest; /* slot | external pins << SLOT_BITS */
    _Alignas(CACHE_LINE) _Atomic uint64_t newest_version;
    int depth;
    ring_slot *slots;
    /* the writer's own state */
    int acquired; /* slot taken by pd_weight_ring_acquire, -1 none */
    int scan;     /* where the next search for a free slot starts */
};

pd_status pd_weight_ring_depth_for(int in_flight, int weight_versions, size_t slot_bytes, size_t memory_bytes,
                                   int *depth)
{
    int d;

    if (in_flight < 1 || in_flight >= PD_WEIGHT_RING_MAX_DEPTH)
        return PD_ERROR(PD_EINVAL, "weight ring: %d minibatches in flight (expected 1 .. %d)", in_flight,
                        PD_WEIGHT_RING_MAX_DEPTH - 1);
    if (weight_versions == PD_WEIGHT_VERSIONS_STASH)
        d = in_flight + 1;
    else if (weight_versions == PD_WEIGHT_VERSIONS_2BW)
        d = 2;
    else
        return PD_ERROR(PD_EINVAL, "weight versions: %d (expected %d: one per minibatch in flight, or %d: 2BW)",
                        weight_versions, PD_WEIGHT_VERSIONS_STASH, PD_WEIGHT_VERSIONS_2BW);
    if (slot_bytes > memory_bytes / (size_t)d)
        return PD_ERROR(PD_ENOMEM,
                        "weight ring: %d versions x %zu bytes of weights need more than the %zu bytes available", d,
                        slot_bytes, memory_bytes);
    *depth = d;
    return PD_OK;
}

pd_status pd_weight_ring_create(int depth, void *const *slots, uint64_t first_version, pd_weight_ring **out)
{
    pd_weight_ring *ring;

    if (depth < 2 || depth > PD_WEIGHT_RING_MAX_DEPTH)
        return PD_ERROR(PD_EINVAL, "weight ring: depth %d (expected 2 .. %d)", depth, PD_WEIGHT_RING_MAX_DEPTH);
    if (!slots)
        return PD_ERROR(PD_EINVAL, "weight ring: no slots");
    for (int i = 0; i < depth; i++)
        if (!slots[i])
            return PD_ERROR(PD_EINVAL, "weight ring: slot %d is NULL", i);
    if (first_version == NO_VERSION)
        return PD_ERROR(PD_EINVAL, "weight ring: first version %" PRIu64 " is reserved", first_version);

    ring = aligned_alloc(CACHE_LINE, sizeof(*ring));
    if (!ring)
        return PD_ERROR(PD_ENOMEM, "weight ring: out of memory");
    memset(ring, 0, sizeof(*ring));
    ring->slots = aligned_alloc(CACHE_LINE, (size_t)depth * sizeof(ring_slot));
    if (!ring->slots) {
        free(ring);
        return PD_ERROR(PD_ENOMEM, "weight ring: out of memory for %d slots", depth);
    }
    for (int i = 0; i < depth; i++) {
        atomic_init(&ring->slots[i].pins, 0);
        atomic_init(&ring->slots[i].version, i == 0 ? first_version : NO_VERSION);
        ring->slots[i].weights = slots[i];
    }
    ring->depth = depth;
    atomic_init(&ring->newest, 0);
    atomic_init(&ring->newest_version, first_version);
    ring->acquired = -1;
    ring->scan = 1;
    *out = ring;
    return PD_OK;
}

void pd_weight_ring_destroy(pd_weight_ring *ring)
{
    int64_t pinned;

    if (!ring)
        return;
    pinned = pd_weight_ring_pinned(ring);
    if (pinned != 0)
        PD_LOG_WARNF("weight ring destroyed with %" PRId64 " pins held", pinned);
    free(ring->slots);
    free(ring);
}

int pd_weight_ring_depth(const pd_weight_ring *ring)
{
    return ring->depth;
}

uint64_t pd_weight_ring_newest_version(const pd_weight_ring *ring)
{
    return atomic_load_explicit(&((pd_weight_ring *)ring)->newest_version, memory_order_acquire);
}

int64_t pd_weight_ring_pinned(const pd_weight_ring *ring)
{
    pd_weight_ring *r = (pd_weight_ring *)ring; /* atomic loads of C11 take non-const pointers */
    int64_t pinned = (int64_t)(atomic_load(&r->newest) >> SLOT_BITS);

    for (int i = 0; i < r->depth; i++)
        pinned += atomic_load(&r->slots[i].pins);
    return pinned;
}

void pd_weight_ring_pin_newest(pd_weight_ring *ring, pd_weight_pin *pin)
{
    uint64_t word = atomic_load_explicit(&ring->newest, memory_order_relaxed);
    int slot;

    /* Acquire: pairs with the publish's release (and the release sequence
     * of other readers' increments), so the slot's weights are visible. */
    while (!atomic_compare_exchange_weak_explicit(&ring->newest, &word, word + ONE_PIN, memory_order_acquire,
                                                  memory_order_relaxed))
        ;
    slot = (int)(word & SLOT_MASK);
    pin->slot = slot;
    pin->version = atomic_load_explicit(&ring->slots[slot].version, memory_order_acquire);
    pin->weights = ring->slots[slot].weights;
}

pd_status pd_weight_ring_pin_version(pd_weight_ring *ring, uint64_t version, pd_weight_pin *pin)
{
    uint64_t newest;

    if (version != NO_VERSION) {
        for (int i = 0; i < ring->depth; i++) {
            ring_slot *s = &ring->slots[i];

            if (atomic_load_explicit(&s->version, memory_order_acquire) != version)
                continue;
            atomic_fetch_add(&s->pins, 1);
            if (atomic_load(&s->version) == version) {
                pin->slot = i;
                pin->version = version;
                pin->weights = s->weights;
                return PD_OK;
            }
            /* Retired under us: the writer is about to overwrite it. */
            atomic_fetch_sub_explicit(&s->pins, 1, memory_order_release);
            break;
        }
    }
    newest = pd_weight_ring_newest_version(ring);
    if (version > newest)
        return PD_ERROR(PD_ENOTFOUND, "weight version %" PRIu64 " is not yet published (newest %" PRIu64 ")", version,
                        newest);
    return PD_ERROR(PD_ENOTFOUND,
                    "weight version %" PRIu64 " is no longer held (newest %" PRIu64 ", ring of %d versions)", version,
                    newest, ring->depth);
}

void pd_weight_ring_unpin(pd_weight_ring *ring, const pd_weight_pin *pin)
{
    /* Release: this reader's reads of the weights happen before the
     * writer's reuse of the slot, which loads the count with acquire. */
    atomic_fetch_sub_explicit(&ring->slots[pin->slot].pins, 1, memory_order_release);
}

pd_status pd_weight_ring_acquire(pd_weight_ring *ring, pd_weight_pin *next, pd_weight_pin *newest)
{
    /* Only the writer changes the slot part of the word. */
    int newest_slot = (int)(atomic_load_explicit(&ring->newest, memory_order_relaxed) & SLOT_MASK);
    uint64_t newest_version = atomic_load_explicit(&ring->newest_version, memory_order_relaxed);

    if (ring->acquired >= 0)
        return PD_ERROR(PD_ESTATE, "weight ring: slot %d already acquired for version %" PRIu64 " and not published",
                        ring->acquired, newest_version + 1);
    for (int k = 0; k < ring->depth; k++) {
        int i = (ring->scan + k) % ring->depth;
        ring_slot *s = &ring->slots[i];
        uint64_t old;

        if (i == newest_slot || atomic_load(&s->pins) != 0)
            continue;
        old = atomic_load_explicit(&s->version, memory_order_relaxed);
        atomic_store(&s->version, NO_VERSION);
        if (atomic_load(&s->pins) != 0) {
            /* A pin of its version came in: leave the slot as it was. */
            atomic_store_explicit(&s->version, old, memory_order_release);
            continue;
        }
        ring->acquired = i;
        *next = (pd_weight_pin){.slot = i, .version = newest_version + 1, .weights = s->weights};
        if (newest)
            *newest = (pd_weight_pin){
                .slot = newest_slot, .version = newest_version, .weights = ring->slots[newest_slot].weights};
        return PD_OK;
    }
    return PD_ERROR(PD_ESTATE, "weight ring full: all %d slots pinned or newest (newest version %" PRIu64 ")",
                    ring->depth, newest_version);
}

pd_status pd_weight_ring_publish(pd_weight_ring *ring, const pd_weight_pin *next)
{
    uint64_t version = atomic_load_explicit(&ring->newest_version, memory_order_relaxed) + 1;
    uint64_t old;
    int slot;

    if (ring->acquired < 0 || next->slot != ring->acquired || next->version != version)
        return PD_ERROR(PD_EINVAL, "weight ring: publish of slot %d version %" PRIu64 " that was not acquired",
                        next->slot, next->version);
    slot = ring->acquired;
    /* Release: the weights written into the slot happen before any pin of
     * this version (pin_version reads the version with acquire). */
    atomic_store_explicit(&ring->slots[slot].version, version, memory_order_release);
    old = atomic_exchange_explicit(&ring->newest, (uint64_t)slot, memory_order_acq_rel);
    atomic_fetch_add(&ring->slots[old & SLOT_MASK].pins, (int64_t)(old >> SLOT_BITS));
    atomic_store_explicit(&ring->newest_version, version, memory_order_release);
    ring->acquired = -1;
    ring->scan = (slot + 1) % ring->depth;
    return PD_OK;
}
