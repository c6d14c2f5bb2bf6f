/* Unit tests of the pipeline run's segments (src/runtime/segments.c):
 * boundaries at epoch ends, at every eval_every and checkpoint_every
 * minibatches (rounded up to the unit) and at the end; which segments are
 * evaluated and checkpointed; a resumed run's first segment; counts that
 * are not multiples of the unit refused. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "runtime/pd_runtime_int.h"

/* first, count, eval, checkpoint of each expected segment */
typedef struct expected {
    int64_t first, count;
    bool eval, checkpoint;
} expected;

static void check_plan(const pd_segment_options *o, const expected *want, int n_want)
{
    pd_segment *seg = NULL;
    int n = -1;

    assert_int_equal(pd_segments_plan(o, &seg, &n), PD_OK);
    assert_int_equal(n, n_want);
    for (int i = 0; i < n; i++) {
        assert_int_equal(seg[i].first, want[i].first);
        assert_int_equal(seg[i].count, want[i].count);
        assert_int_equal(seg[i].eval, want[i].eval);
        assert_int_equal(seg[i].checkpoint, want[i].checkpoint);
    }
    free(seg);
}

static void test_epochs(void **state)
{
    (void)state;
    const pd_segment_options o = {.total = 30, .per_epoch = 10, .unit = 2, .eval = true};
    const expected want[] = {{0, 10, true, false}, {10, 10, true, false}, {20, 10, true, false}};
    check_plan(&o, want, 3);
}

static void test_eval_every_rounded_up(void **state)
{
    (void)state;
    /* every 7 with a unit of 2 is every 8; the last segment is evaluated */
    const pd_segment_options o = {.total = 20, .unit = 2, .eval_every = 7, .eval = true};
    const expected want[] = {{0, 8, true, false}, {8, 8, true, false}, {16, 4, true, false}};
    check_plan(&o, want, 3);
}

static void test_no_eval_data(void **state)
{
    (void)state;
    const pd_segment_options o = {.total = 20, .unit = 1, .eval_every = 10};
    const expected want[] = {{0, 10, false, false}, {10, 10, false, false}};
    check_plan(&o, want, 2);
}

static void test_checkpoints_resumed(void **state)
{
    (void)state;
    /* resumed at 10 of 3 epochs of 10, checkpoints every 4 */
    const pd_segment_options o = {.start = 12, .total = 30, .per_epoch = 10, .unit = 2, .checkpoint_every = 4,
                                  .eval = true, .checkpoint = true};
    const expected want[] = {{12, 4, false, true}, {16, 4, true, true},  {20, 4, false, true},
                             {24, 4, false, true}, {28, 2, true, true}};
    check_plan(&o, want, 5);
}

static void test_one_segment(void **state)
{
    (void)state;
    const pd_segment_options o = {.total = 6, .unit = 3};
    const expected want[] = {{0, 6, false, false}};
    check_plan(&o, want, 1);
}

static void test_refused(void **state)
{
    (void)state;
    pd_segment *seg = (pd_segment *)&seg;
    int n = 7;
    const pd_segment_options bad[] = {
        {.total = 21, .unit = 2},                  /* total */
        {.start = 3, .total = 20, .unit = 2},      /* start */
        {.total = 20, .per_epoch = 5, .unit = 2},  /* epoch */
        {.start = 22, .total = 20, .unit = 2},     /* start past the end */
        {.total = 0, .unit = 1},                   /* nothing */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(pd_segments_plan(&bad[i], &seg, &n), PD_EINVAL);
        assert_null(seg);
        assert_int_equal(n, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_eval_every_rounded_up),
        cmocka_unit_test(test_no_eval_data),
        cmocka_unit_test(test_checkpoints_resumed),
        cmocka_unit_test(test_one_segment),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
