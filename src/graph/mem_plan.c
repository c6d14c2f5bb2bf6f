/* Greedy interval-aware arena planning (as TFLite's and ggml-alloc's
 * planners): O(n^2 log n), run once. */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>

#include "graph/pd_mem_plan.h"

typedef struct placed {
    size_t begin, end; /* [begin, end) in bytes */
} placed;

static size_t align_up(size_t x, size_t alignment) { return (x + alignment - 1) & ~(alignment - 1); }

static int by_size_desc(const void *a, const void *b, void *blocks_v)
{
    const pd_mem_block *blocks = blocks_v;
    int ia = *(const int *)a, ib = *(const int *)b;

    if (blocks[ia].bytes != blocks[ib].bytes)
        return blocks[ia].bytes < blocks[ib].bytes ? 1 : -1;
    if (blocks[ia].first_step != blocks[ib].first_step)
        return blocks[ia].first_step < blocks[ib].first_step ? -1 : 1;
    return ia - ib;
}

static int by_begin(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static bool lifetimes_overlap(const pd_mem_block *a, const pd_mem_block *b)
{
    return a->first_step <= b->last_step && b->first_step <= a->last_step;
}

pd_status pd_mem_plan(pd_mem_block *blocks, int n, size_t alignment, size_t *arena_bytes)
{
    int *order = NULL;
    placed *busy = NULL;
    size_t total = 0;

    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return PD_ERROR(PD_EINVAL, "memory plan: alignment %zu is not a power of two", alignment);
    for (int i = 0; i < n; i++)
        if (blocks[i].first_step > blocks[i].last_step)
            return PD_ERROR(PD_EINVAL, "memory plan: block %d lives from step %d to %d", i, blocks[i].first_step,
                            blocks[i].last_step);
    if (n <= 0) {
        if (n < 0)
            return PD_ERROR(PD_EINVAL, "memory plan: %d blocks", n);
        *arena_bytes = 0;
        return PD_OK;
    }
    order = malloc((size_t)n * sizeof(*order));
    busy = malloc((size_t)n * sizeof(*busy));
    if (!order || !busy) {
        free(order);
        free(busy);
        return PD_ERROR(PD_ENOMEM, "memory plan: out of host memory for %d blocks", n);
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, (size_t)n, sizeof(*order), by_size_desc, blocks);

    for (int placed_count = 0; placed_count < n; placed_count++) {
        pd_mem_block *b = &blocks[order[placed_count]];
        size_t size = align_up(b->bytes, alignment);
        size_t offset = 0;
        int n_busy = 0;

        /* The placed blocks alive at the same time, by address. */
        for (int j = 0; j < placed_count; j++) {
            const pd_mem_block *other = &blocks[order[j]];
            if (lifetimes_overlap(b, other))
                busy[n_busy++] = (placed){other->offset, other->offset + align_up(other->bytes, alignment)};
        }
        qsort(busy, (size_t)n_busy, sizeof(*busy), by_begin);
        /* Best fit: the smallest gap that holds the block, else the end. */
        size_t best = (size_t)-1, best_gap = (size_t)-1, cursor = 0;
        for (int j = 0; j < n_busy; j++) {
            if (busy[j].begin > cursor && busy[j].begin - cursor >= size && busy[j].begin - cursor < best_gap) {
                best = cursor;
                best_gap = busy[j].begin - cursor;
            }
            if (busy[j].end > cursor)
                cursor = busy[j].end;
        }
        offset = best != (size_t)-1 ? best : cursor;
        b->offset = offset;
        if (offset + size > total)
            total = offset + size;
    }
    free(order);
    free(busy);
    *arena_bytes = total;
    return PD_OK;
}
