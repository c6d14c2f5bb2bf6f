/* Offline memory planning: blocks with lifetimes (in schedule steps) get
 * offsets in one arena such that blocks alive at the same step never
 * overlap. Used once per graph, whole or a pipeline stage's part. */
#ifndef PD_MEM_PLAN_H
#define PD_MEM_PLAN_H

#include <stddef.h>

#include <pipedream/status.h>

typedef struct pd_mem_block {
    size_t bytes;
    int first_step; /* inclusive */
    int last_step;  /* inclusive */
    size_t offset;  /* set by pd_mem_plan */
} pd_mem_block;

/* Assigns every block an offset (a multiple of `alignment`, a power of two)
 * and sets *arena_bytes to the size needed. Greedy best-fit: largest blocks
 * first, each at the lowest offset free of every placed block whose lifetime
 * overlaps its own. PD_EINVAL for a bad alignment or a negative lifetime. */
pd_status pd_mem_plan(pd_mem_block *blocks, int n, size_t alignment, size_t *arena_bytes);

#endif
