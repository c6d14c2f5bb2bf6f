/* The arena planner: no two live blocks overlap, reuse happens, bad input is refused. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>

#include "core/pd_rng.h"
#include "graph/pd_mem_plan.h"

static void assert_no_live_overlap(const pd_mem_block *b, int n, size_t arena)
{
    for (int i = 0; i < n; i++) {
        assert_true(b[i].offset + b[i].bytes <= arena);
        assert_int_equal(b[i].offset % 64, 0);
        for (int j = i + 1; j < n; j++) {
            bool live_together = b[i].first_step <= b[j].last_step && b[j].first_step <= b[i].last_step;
            bool share_bytes = b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes;
            if (live_together && b[i].bytes && b[j].bytes)
                assert_false(share_bytes);
        }
    }
}

static void test_chain_reuses_memory(void **state)
{
    /* A chain of 8 buffers each alive for two steps needs two at a time. */
    pd_mem_block b[8];
    size_t arena;

    for (int i = 0; i < 8; i++)
        b[i] = (pd_mem_block){1000, i, i + 1, 0};
    assert_int_equal(pd_mem_plan(b, 8, 64, &arena), PD_OK);
    assert_no_live_overlap(b, 8, arena);
    assert_int_equal(arena, 2 * 1024);
}

static void test_nested_lifetimes_cannot_share(void **state)
{
    pd_mem_block b[4] = {{100, 0, 7, 0}, {200, 1, 6, 0}, {300, 2, 5, 0}, {400, 3, 4, 0}};
    size_t arena;

    assert_int_equal(pd_mem_plan(b, 4, 64, &arena), PD_OK);
    assert_no_live_overlap(b, 4, arena);
    assert_int_equal(arena, 128 + 256 + 320 + 448);
}

static void test_random_lifetimes_never_overlap(void **state)
{
    pd_rng rng;
    pd_mem_block b[200];
    size_t arena, total = 0;

    pd_rng_init(&rng, 42);
    for (int i = 0; i < 200; i++) {
        int first = (int)(pd_rng_next(&rng) % 100);
        b[i] = (pd_mem_block){(size_t)(pd_rng_next(&rng) % 5000), first, first + (int)(pd_rng_next(&rng) % 20), 0};
        total += (b[i].bytes + 63) & ~(size_t)63;
    }
    assert_int_equal(pd_mem_plan(b, 200, 64, &arena), PD_OK);
    assert_no_live_overlap(b, 200, arena);
    assert_true(arena < total);
}

static void test_bad_input(void **state)
{
    pd_mem_block b[1] = {{10, 5, 4, 0}};
    size_t arena;

    assert_int_equal(pd_mem_plan(b, 1, 64, &arena), PD_EINVAL);
    b[0].last_step = 6;
    assert_int_equal(pd_mem_plan(b, 1, 48, &arena), PD_EINVAL);
    assert_int_equal(pd_mem_plan(b, 0, 64, &arena), PD_OK);
    assert_int_equal(arena, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_reuses_memory),
        cmocka_unit_test(test_nested_lifetimes_cannot_share),
        cmocka_unit_test(test_random_lifetimes_never_overlap),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
