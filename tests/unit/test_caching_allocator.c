/* The caching allocator's bookkeeping over host malloc callbacks: reuse of
 * freed blocks (same size, best fit within the waste bound, not beyond),
 * statistics, the empty-and-retry path when the raw allocator runs out
 * (synchronised before anything is freed), the cache limit, closing with
 * blocks in use, and the CPU device's statistics through the ops table. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

#include "kernels/pd_caching_alloc.h"

/* A raw allocator of host memory with a budget, counting what it does. */
typedef struct fake_device {
    size_t budget, used;     /* bytes it may hand out, bytes out */
    pd_status failure;       /* returned when over budget */
    int allocs, frees, syncs;
    int frees_at_last_sync;  /* raw frees done when synchronize last ran */
    pd_status sync_status;
} fake_device;

static pd_status fake_alloc(void *ctx, size_t bytes, void **out)
{
    fake_device *d = ctx;
    size_t *p;

    d->allocs++;
    if (bytes > d->budget - d->used)
        return PD_ERROR(d->failure, "fake: %zu bytes over the budget", bytes);
    p = malloc(bytes + sizeof(size_t));
    if (!p)
        return PD_ERROR(PD_ENOMEM, "fake: host malloc failed");
    p[0] = bytes;
    memset(p + 1, 0xab, bytes); /* the block is writable in full */
    d->used += bytes;
    *out = p + 1;
    return PD_OK;
}

static void fake_free(void *ctx, void *ptr)
{
    fake_device *d = ctx;
    size_t *p = (size_t *)ptr - 1;

    d->frees++;
    d->used -= p[0];
    free(p);
}

static pd_status fake_synchronize(void *ctx)
{
    fake_device *d = ctx;

    d->syncs++;
    d->frees_at_last_sync = d->frees;
    return d->sync_status;
}

static const pd_caching_alloc_ops fake_ops = {.alloc = fake_alloc, .free = fake_free, .synchronize = fake_synchronize};

static pd_caching_alloc *make_cache(fake_device *d, size_t budget, size_t max_cached)
{
    pd_caching_alloc *a = NULL;

    *d = (fake_device){.budget = budget, .failure = PD_ENOMEM};
    assert_int_equal(pd_caching_alloc_create("fake:0", &fake_ops, d, max_cached, &a), PD_OK);
    return a;
}

/* A cache whose raw allocator is full, holding one freed block of all of it. */
static pd_caching_alloc *make_full_cache(fake_device *d, size_t budget)
{
    pd_caching_alloc *a = make_cache(d, budget, SIZE_MAX);
    void *p;

    assert_int_equal(pd_caching_alloc_get(a, budget, &p), PD_OK);
    pd_caching_alloc_put(a, p);
    return a;
}

static pd_device_memory_stats stats_of(pd_caching_alloc *a)
{
    pd_device_memory_stats s;

    pd_caching_alloc_stats(a, &s);
    return s;
}

static void test_same_size_is_reused(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    void *first, *p;

    assert_int_equal(pd_caching_alloc_get(a, 1000, &first), PD_OK);
    pd_caching_alloc_put(a, first);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(pd_caching_alloc_get(a, 1000, &p), PD_OK);
        assert_ptr_equal(p, first);
        pd_caching_alloc_put(a, p);
    }
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(d.allocs, 1);
    assert_int_equal(s.raw_allocs, 1);
    assert_int_equal(s.allocs, 11);
    assert_int_equal(s.frees, 11);
    assert_int_equal(s.cache_hits, 10);
    assert_int_equal(s.bytes_in_use, 0);
    assert_int_equal(s.bytes_cached, 1024); /* rounded to the granule */
    assert_int_equal(s.peak_bytes_in_use, 1024);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.frees, 1);
    assert_int_equal(d.used, 0);
}

/* A steady state: a "step" of mixed sizes, repeated, allocates only once. */
static void test_steady_state_makes_no_raw_allocations(void **state)
{
    const size_t sizes[] = {4, 512, 513, 70000, 1 << 20, 3 << 20, 100, 70000};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    void *p[N];
    uint64_t after_warmup = 0;

    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < N; i++)
            assert_int_equal(pd_caching_alloc_get(a, sizes[i], &p[i]), PD_OK);
        for (int i = 0; i < N; i++) /* distinct blocks */
            for (int j = i + 1; j < N; j++)
                assert_ptr_not_equal(p[i], p[j]);
        for (int i = N - 1; i >= 0; i--)
            pd_caching_alloc_put(a, p[i]);
        if (step == 0)
            after_warmup = stats_of(a).raw_allocs;
    }
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(after_warmup, N);
    assert_int_equal(s.raw_allocs, N);
    assert_int_equal(s.cache_hits, 4 * N);
    assert_int_equal(s.bytes_in_use, 0);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* Best fit: the smallest cached block that fits, and none that would waste
 * more than a fifth of itself. */
static void test_best_fit_within_bound(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    void *b4096, *b2048, *b1536, *b1024, *p;

    assert_int_equal(pd_caching_alloc_get(a, 4096, &b4096), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 2048, &b2048), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 1536, &b1536), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 1024, &b1024), PD_OK);
    pd_caching_alloc_put(a, b4096);
    pd_caching_alloc_put(a, b2048);
    pd_caching_alloc_put(a, b1536);
    pd_caching_alloc_put(a, b1024);
    assert_int_equal(d.allocs, 4);

    /* 1300 rounds to 1536: the 1536 block, not the larger ones. */
    assert_int_equal(pd_caching_alloc_get(a, 1300, &p), PD_OK);
    assert_ptr_equal(p, b1536);
    /* 1800 rounds to 2048: exactly the 2048 block. */
    void *q;
    assert_int_equal(pd_caching_alloc_get(a, 1800, &q), PD_OK);
    assert_ptr_equal(q, b2048);
    /* 3500 (3584) may take the 4096 block: waste 512 <= 3584/4. */
    void *r;
    assert_int_equal(pd_caching_alloc_get(a, 3500, &r), PD_OK);
    assert_ptr_equal(r, b4096);
    assert_int_equal(d.allocs, 4);
    pd_caching_alloc_put(a, r);
    /* 2560 would waste 1536 of the 4096 block: a new raw allocation. */
    void *t;
    assert_int_equal(pd_caching_alloc_get(a, 2560, &t), PD_OK);
    assert_ptr_not_equal(t, b4096);
    assert_int_equal(d.allocs, 5);
    /* 5000 fits no cached block. */
    void *u;
    assert_int_equal(pd_caching_alloc_get(a, 5000, &u), PD_OK);
    assert_int_equal(d.allocs, 6);

    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(s.bytes_in_use, 1536 + 2048 + 2560 + 5120);
    assert_int_equal(s.bytes_cached, 4096 + 1024);
    assert_int_equal(s.cache_hits, 3);
    pd_caching_alloc_put(a, p);
    pd_caching_alloc_put(a, q);
    pd_caching_alloc_put(a, t);
    pd_caching_alloc_put(a, u);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
    assert_int_equal(d.frees, 6);
}

static void test_zero_bytes_get_distinct_blocks(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    void *p, *q;

    assert_int_equal(pd_caching_alloc_get(a, 0, &p), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 0, &q), PD_OK);
    assert_non_null(p);
    assert_ptr_not_equal(p, q);
    assert_int_equal(stats_of(a).bytes_in_use, 2 * PD_CACHING_ALLOC_GRANULE);
    pd_caching_alloc_put(a, p);
    pd_caching_alloc_put(a, q);
    pd_caching_alloc_put(a, NULL); /* ignored */
    assert_int_equal(stats_of(a).frees, 2);
    pd_caching_alloc_destroy(a);
}

/* Out of raw memory with blocks cached: synchronise, give them back, retry. */
static void test_retry_after_emptying_the_cache(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, 8192, SIZE_MAX);
    void *p, *q, *big;

    assert_int_equal(pd_caching_alloc_get(a, 4096, &p), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 2048, &q), PD_OK);
    pd_caching_alloc_put(a, p);
    pd_caching_alloc_put(a, q);
    assert_int_equal(d.syncs, 0); /* freeing into the cache waits for nothing */
    assert_int_equal(pd_caching_alloc_get(a, 7000, &big), PD_OK);
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(d.syncs, 1);
    assert_int_equal(d.frees_at_last_sync, 0); /* synchronised before freeing */
    assert_int_equal(d.frees, 2);
    assert_int_equal(d.allocs, 4); /* 2, the failed one, the retry */
    assert_int_equal(s.raw_allocs, 4);
    assert_int_equal(s.raw_frees, 2);
    assert_int_equal(s.cache_flushes, 1);
    assert_int_equal(s.bytes_cached, 0);
    assert_int_equal(s.bytes_in_use, 7168);

    /* Nothing cached: the failure comes back at once, unretried. */
    void *more = NULL;
    assert_int_equal(pd_caching_alloc_get(a, 2048, &more), PD_ENOMEM);
    assert_null(more);
    assert_non_null(strstr(pd_last_error(), "over the budget"));
    assert_int_equal(d.allocs, 5);
    assert_int_equal(stats_of(a).cache_flushes, 1);
    assert_int_equal(stats_of(a).allocs, 3);
    pd_caching_alloc_put(a, big);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* A failure other than "out of memory" is not retried. */
static void test_other_failures_are_not_retried(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_full_cache(&d, 4096);
    void *p;

    d.failure = PD_EDEVICE;
    assert_int_equal(pd_caching_alloc_get(a, 8192, &p), PD_EDEVICE);
    assert_int_equal(d.allocs, 2);
    assert_int_equal(d.syncs, 0);
    assert_int_equal(stats_of(a).bytes_cached, 4096);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* A failed synchronisation stops the flush: nothing is freed under running work. */
static void test_failed_synchronize_frees_nothing(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_full_cache(&d, 4096);
    void *p;

    d.sync_status = PD_EDEVICE;
    assert_int_equal(pd_caching_alloc_get(a, 8192, &p), PD_EDEVICE);
    assert_int_equal(d.frees, 0);
    assert_int_equal(stats_of(a).bytes_cached, 4096);
    assert_int_equal(pd_caching_alloc_release_cached(a), PD_EDEVICE);
    d.sync_status = PD_OK;
    assert_int_equal(pd_caching_alloc_release_cached(a), PD_OK);
    assert_int_equal(d.frees, 1);
    assert_int_equal(stats_of(a).bytes_cached, 0);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* Beyond max_cached_bytes a freed block goes back to the raw allocator. */
static void test_cache_limit(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, 3000);
    void *p, *q;

    assert_int_equal(pd_caching_alloc_get(a, 2048, &p), PD_OK);
    assert_int_equal(pd_caching_alloc_get(a, 2048, &q), PD_OK);
    pd_caching_alloc_put(a, p);
    pd_caching_alloc_put(a, q);
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(s.bytes_cached, 2048);
    assert_int_equal(s.raw_frees, 1);
    assert_int_equal(d.syncs, 1); /* before giving the block back */
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* Many blocks at once (the address table grows), freed in another order;
 * closing gives back the blocks still in use too. */
static void test_many_blocks_and_close(void **state)
{
    enum { N = 3000 };
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    void **p = malloc(N * sizeof(*p));
    size_t expect = 0;

    assert_non_null(p);
    for (int i = 0; i < N; i++) {
        assert_int_equal(pd_caching_alloc_get(a, (size_t)(i % 7 + 1) * 100, &p[i]), PD_OK);
        expect += (size_t)PD_CACHING_ALLOC_GRANULE * (((size_t)(i % 7 + 1) * 100 + 511) / 512);
    }
    assert_int_equal(stats_of(a).bytes_in_use, expect);
    for (int i = 0; i < N; i += 2) /* every other block: half stay in use */
        pd_caching_alloc_put(a, p[(i * 7) % N]);
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(s.frees, N / 2);
    assert_int_equal(s.bytes_in_use + s.bytes_cached, expect);
    assert_int_equal(s.peak_bytes_in_use, expect);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.frees, N);
    assert_int_equal(d.used, 0);
    free(p);
}

/* A pointer the cache never handed out is left alone. */
static void test_unknown_pointer_is_ignored(void **state)
{
    fake_device d;
    pd_caching_alloc *a = make_cache(&d, SIZE_MAX, SIZE_MAX);
    int local;
    void *p;

    assert_int_equal(pd_caching_alloc_get(a, 64, &p), PD_OK);
    pd_caching_alloc_put(a, &local);
    pd_device_memory_stats s = stats_of(a);
    assert_int_equal(s.frees, 0);
    assert_int_equal(s.bytes_in_use, PD_CACHING_ALLOC_GRANULE);
    pd_caching_alloc_put(a, p);
    pd_caching_alloc_put(a, p); /* a double free is caught the same way */
    assert_int_equal(stats_of(a).frees, 1);
    pd_caching_alloc_destroy(a);
    assert_int_equal(d.used, 0);
}

/* The CPU device keeps the statistics too, through the ops table. */
static void test_cpu_device_statistics(void **state)
{
    pd_device *dev;
    pd_shape shape = pd_shape_make(2, (int64_t)100, (int64_t)1000);
    pd_device_memory_stats before, after;
    pd_tensor *t;

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_tensor_create(dev, PD_F32, &shape, &t), PD_OK);
    pd_tensor_destroy(t);
    assert_int_equal(dev->ops->memory_stats(dev, &before), PD_OK);
    assert_int_equal(before.bytes_in_use, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(pd_tensor_create(dev, PD_F32, &shape, &t), PD_OK);
        assert_int_equal(dev->ops->memory_stats(dev, &after), PD_OK);
        assert_true(after.bytes_in_use >= 400000);
        pd_tensor_destroy(t);
    }
    assert_int_equal(dev->ops->memory_stats(dev, &after), PD_OK);
    assert_int_equal(after.raw_allocs, before.raw_allocs);
    assert_int_equal(after.cache_hits, before.cache_hits + 5);
    assert_int_equal(after.bytes_in_use, 0);
    assert_true(after.peak_bytes_in_use >= 400000);
    pd_device_close(dev);
}

/* A whole training step of LeNet on the CPU (forward, backward, SGD) asks
 * the allocator for nothing once the first step has run: the graph's arena,
 * parameters and optimizer state are allocated once and scratch has grown. */
static void test_training_steps_allocate_nothing(void **state)
{
    const pd_model_options mo = {.batch = 4, .channels = 1, .height = 28, .width = 28, .classes = 10,
                                 .width_multiplier = 1.0f};
    const pd_sgd_desc sgd = {.lr = 0.01f, .momentum = 0.9f};
    pd_device_memory_stats warm, after;
    pd_optimizer *opt;
    pd_device *dev;
    pd_model_io io;
    pd_graph *g;

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_graph_create(dev, 1, &g), PD_OK);
    assert_int_equal(pd_model_build("lenet", g, &mo, &io), PD_OK);
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    assert_int_equal(pd_optimizer_create_sgd(g, &sgd, &opt), PD_OK);
    assert_int_equal(pd_tensor_zero(pd_graph_output(g, io.images)), PD_OK);
    assert_int_equal(pd_tensor_zero(pd_graph_output(g, io.labels)), PD_OK);
    for (int step = 0; step < 4; step++) {
        assert_int_equal(pd_graph_forward(g, step, true), PD_OK);
        assert_int_equal(pd_graph_backward(g, step, io.loss, NULL), PD_OK);
        assert_int_equal(pd_optimizer_step(opt), PD_OK);
        if (step == 0)
            assert_int_equal(dev->ops->memory_stats(dev, &warm), PD_OK);
    }
    assert_int_equal(dev->ops->memory_stats(dev, &after), PD_OK);
    assert_true(warm.raw_allocs > 0);
    assert_int_equal(after.raw_allocs, warm.raw_allocs);
    assert_int_equal(after.allocs, warm.allocs);
    assert_int_equal(after.bytes_in_use, warm.bytes_in_use);
    pd_optimizer_destroy(opt);
    pd_graph_destroy(g);
    pd_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_size_is_reused),
        cmocka_unit_test(test_steady_state_makes_no_raw_allocations),
        cmocka_unit_test(test_best_fit_within_bound),
        cmocka_unit_test(test_zero_bytes_get_distinct_blocks),
        cmocka_unit_test(test_retry_after_emptying_the_cache),
        cmocka_unit_test(test_other_failures_are_not_retried),
        cmocka_unit_test(test_failed_synchronize_frees_nothing),
        cmocka_unit_test(test_cache_limit),
        cmocka_unit_test(test_many_blocks_and_close),
        cmocka_unit_test(test_unknown_pointer_is_ignored),
        cmocka_unit_test(test_cpu_device_statistics),
        cmocka_unit_test(test_training_steps_allocate_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
