/* Unit tests of the versioned weight ring: argument checks and the depth a
 * stage needs; versions and the writer's slots; a stashed version surviving
 * later updates until it is unpinned; a full ring and recovery; pins of
 * dropped and future versions named in the error; 1F1B with weight
 * stashing and with 2BW never running out of slots; and a stress test: one
 * writer publishing versions whose weights are a known function of the
 * version while readers pin the newest or a given version and check that
 * the weights they hold are whole and stay unchanged while pinned.
 * tests/integration/weight_ring_tsan.sh runs this program under
 * ThreadSanitizer. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream/status.h>
#include <pipedream/weight_ring.h>

/* ---- weights that are a function of their version -------------------------- */

#define WORDS 256

static uint64_t word_of(uint64_t version, int k)
{
    uint64_t x = version * UINT64_C(0x9e3779b97f4a7c15) + (uint64_t)k;

    x ^= x >> 31;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    return x ^ (x >> 29);
}

static void write_weights(void *weights, uint64_t version)
{
    uint64_t *w = weights;

    for (int k = 0; k < WORDS; k++)
        w[k] = word_of(version, k);
}

static bool weights_are(const void *weights, uint64_t version)
{
    const uint64_t *w = weights;

    for (int k = 0; k < WORDS; k++)
        if (w[k] != word_of(version, k))
            return false;
    return true;
}

typedef struct slots {
    int depth;
    uint64_t (*buf)[WORDS];
    void *ptr[PD_WEIGHT_RING_MAX_DEPTH];
} slots;

static void slots_init(slots *s, int depth)
{
    s->depth = depth;
    s->buf = calloc((size_t)depth, sizeof(*s->buf));
    assert_non_null(s->buf);
    for (int i = 0; i < depth; i++)
        s->ptr[i] = s->buf[i];
}

/* A ring over fresh slots with `first` written into slot 0. */
static pd_weight_ring *ring_new(slots *s, int depth, uint64_t first)
{
    pd_weight_ring *ring = NULL;

    slots_init(s, depth);
    write_weights(s->ptr[0], first);
    assert_int_equal(pd_weight_ring_create(depth, s->ptr, first, &ring), PD_OK);
    return ring;
}

/* One optimizer step: the next version written from scratch. */
static pd_status update(pd_weight_ring *ring, pd_weight_pin *next)
{
    pd_weight_pin newest;
    pd_status s = pd_weight_ring_acquire(ring, next, &newest);

    if (s != PD_OK)
        return s;
    assert_int_equal(next->version, newest.version + 1);
    assert_int_not_equal(next->slot, newest.slot);
    assert_true(weights_are(newest.weights, newest.version));
    write_weights(next->weights, next->version);
    return pd_weight_ring_publish(ring, next);
}

static void expect_error(pd_status got, pd_status want, const char *text)
{
    assert_int_equal(got, want);
    if (!strstr(pd_last_error(), text))
        fail_msg("error '%s' does not contain '%s'", pd_last_error(), text);
    pd_error_clear();
}

/* ---- single thread ---------------------------------------------------------- */

static void test_arguments(void **state)
{
    slots s;
    pd_weight_ring *ring = NULL;
    int depth = 0;
    (void)state;

    slots_init(&s, 4);
    expect_error(pd_weight_ring_create(1, s.ptr, 0, &ring), PD_EINVAL, "depth 1");
    expect_error(pd_weight_ring_create(PD_WEIGHT_RING_MAX_DEPTH + 1, s.ptr, 0, &ring), PD_EINVAL, "depth");
    s.ptr[2] = NULL;
    expect_error(pd_weight_ring_create(4, s.ptr, 0, &ring), PD_EINVAL, "slot 2 is NULL");
    s.ptr[2] = s.buf[2];
    expect_error(pd_weight_ring_create(4, s.ptr, UINT64_MAX, &ring), PD_EINVAL, "reserved");
    assert_null(ring);
    pd_weight_ring_destroy(NULL);

    assert_int_equal(pd_weight_ring_depth_for(3, PD_WEIGHT_VERSIONS_STASH, 100, SIZE_MAX, &depth), PD_OK);
    assert_int_equal(depth, 4);
    assert_int_equal(pd_weight_ring_depth_for(7, PD_WEIGHT_VERSIONS_2BW, 100, SIZE_MAX, &depth), PD_OK);
    assert_int_equal(depth, 2);
    /* 2BW: 2 x the weights whatever is in flight. */
    assert_int_equal(pd_weight_ring_depth_for(7, PD_WEIGHT_VERSIONS_2BW, 100, 200, &depth), PD_OK);
    expect_error(pd_weight_ring_depth_for(7, PD_WEIGHT_VERSIONS_2BW, 100, 199, &depth), PD_ENOMEM,
                 "2 versions x 100 bytes");
    assert_int_equal(pd_weight_ring_depth_for(3, PD_WEIGHT_VERSIONS_STASH, 100, 400, &depth), PD_OK);
    expect_error(pd_weight_ring_depth_for(3, PD_WEIGHT_VERSIONS_STASH, 100, 399, &depth), PD_ENOMEM,
                 "4 versions x 100 bytes");
    expect_error(pd_weight_ring_depth_for(0, PD_WEIGHT_VERSIONS_STASH, 1, SIZE_MAX, &depth), PD_EINVAL,
                 "0 minibatches in flight");
    expect_error(pd_weight_ring_depth_for(3, 3, 1, SIZE_MAX, &depth), PD_EINVAL, "weight versions: 3");
    assert_int_equal(depth, 4);
    free(s.buf);
}

static void test_versions(void **state)
{
    slots s;
    pd_weight_ring *ring = ring_new(&s, 3, 41);
    pd_weight_pin pin, next, newest;
    (void)state;

    assert_int_equal(pd_weight_ring_depth(ring), 3);
    assert_int_equal(pd_weight_ring_newest_version(ring), 41);
    pd_weight_ring_pin_newest(ring, &pin);
    assert_int_equal(pin.slot, 0);
    assert_int_equal(pin.version, 41);
    assert_ptr_equal(pin.weights, s.ptr[0]);
    assert_int_equal(pd_weight_ring_pinned(ring), 1);
    pd_weight_ring_unpin(ring, &pin);
    assert_int_equal(pd_weight_ring_pinned(ring), 0);

    /* Each publish adds one; the writer reads the newest without a pin. */
    for (uint64_t v = 42; v < 50; v++) {
        assert_int_equal(pd_weight_ring_acquire(ring, &next, &newest), PD_OK);
        assert_int_equal(next.version, v);
        assert_int_equal(newest.version, v - 1);
        assert_true(weights_are(newest.weights, v - 1));
        assert_int_not_equal(next.slot, newest.slot);
        /* Until published, readers still get the previous version. */
        pd_weight_ring_pin_newest(ring, &pin);
        assert_int_equal(pin.version, v - 1);
        pd_weight_ring_unpin(ring, &pin);
        write_weights(next.weights, v);
        assert_int_equal(pd_weight_ring_publish(ring, &next), PD_OK);
        assert_int_equal(pd_weight_ring_newest_version(ring), v);
        pd_weight_ring_pin_newest(ring, &pin);
        assert_int_equal(pin.version, v);
        assert_int_equal(pin.slot, next.slot);
        assert_true(weights_are(pin.weights, v));
        pd_weight_ring_unpin(ring, &pin);
    }
    assert_int_equal(pd_weight_ring_pinned(ring), 0);
    pd_weight_ring_destroy(ring);
    free(s.buf);
}

/* Weight stashing: the version a forward pass pinned is the one its
 * backward pass sees, however many updates came in between. */
static void test_stash(void **state)
{
    slots s;
    pd_weight_ring *ring = ring_new(&s, 3, 0);
    pd_weight_pin fwd, again, next;
    (void)state;

    pd_weight_ring_pin_newest(ring, &fwd);
    assert_int_equal(fwd.version, 0);
    for (int i = 1; i <= 6; i++) {
        assert_int_equal(update(ring, &next), PD_OK);
        assert_int_not_equal(next.slot, fwd.slot);
    }
    assert_int_equal(pd_weight_ring_newest_version(ring), 6);
    assert_true(weights_are(fwd.weights, 0));

    /* A second pin of the stashed version (vertical sync) finds it. */
    assert_int_equal(pd_weight_ring_pin_version(ring, 0, &again), PD_OK);
    assert_int_equal(again.slot, fwd.slot);
    assert_int_equal(pd_weight_ring_pinned(ring), 2);
    pd_weight_ring_unpin(ring, &again);
    pd_weight_ring_unpin(ring, &fwd);

    /* Unpinned, it is still held until the writer needs its slot. */
    assert_int_equal(pd_weight_ring_pin_version(ring, 0, &again), PD_OK);
    pd_weight_ring_unpin(ring, &again);
    /* Two more updates reuse every slot but the newest. */
    assert_int_equal(update(ring, &next), PD_OK);
    assert_int_equal(update(ring, &next), PD_OK);
    expect_error(pd_weight_ring_pin_version(ring, 0, &again), PD_ENOTFOUND, "weight version 0 is no longer held");
    assert_int_equal(pd_weight_ring_pin_version(ring, 7, &again), PD_OK);
    assert_true(weights_are(again.weights, 7));
    pd_weight_ring_unpin(ring, &again);
    assert_int_equal(pd_weight_ring_pinned(ring), 0);
    pd_weight_ring_destroy(ring);
    free(s.buf);
}

static void test_full(void **state)
{
    slots s;
    pd_weight_ring *ring = ring_new(&s, 3, 0);
    pd_weight_pin p0, p1, next, again;
    (void)state;

    pd_weight_ring_pin_newest(ring, &p0);
    assert_int_equal(update(ring, &next), PD_OK);
    pd_weight_ring_pin_newest(ring, &p1);
    assert_int_equal(update(ring, &next), PD_OK);
    /* Versions 0 and 1 pinned, 2 newest: no slot for version 3. */
    expect_error(pd_weight_ring_acquire(ring, &next, NULL), PD_ESTATE,
                 "weight ring full: all 3 slots pinned or newest");
    expect_error(pd_weight_ring_acquire(ring, &next, NULL), PD_ESTATE, "full");
    assert_true(weights_are(p0.weights, 0));
    assert_true(weights_are(p1.weights, 1));

    /* Pins of the newest do not free anything either. */
    pd_weight_ring_pin_newest(ring, &again);
    assert_int_equal(again.version, 2);
    pd_weight_ring_unpin(ring, &again);
    expect_error(pd_weight_ring_acquire(ring, &next, NULL), PD_ESTATE, "full");

    /* Releasing version 1 frees exactly its slot. */
    pd_weight_ring_unpin(ring, &p1);
    assert_int_equal(pd_weight_ring_acquire(ring, &next, NULL), PD_OK);
    assert_int_equal(next.slot, p1.slot);
    assert_int_equal(next.version, 3);
    /* Acquired and not published: a second acquire is refused. */
    expect_error(pd_weight_ring_acquire(ring, &again, NULL), PD_ESTATE, "already acquired");
    write_weights(next.weights, 3);
    assert_int_equal(pd_weight_ring_publish(ring, &next), PD_OK);
    assert_true(weights_are(p0.weights, 0));
    pd_weight_ring_unpin(ring, &p0);
    assert_int_equal(pd_weight_ring_pinned(ring), 0);
    pd_weight_ring_destroy(ring);
    free(s.buf);
}

static void test_bad_pins(void **state)
{
    slots s;
    pd_weight_ring *ring = ring_new(&s, 2, 10);
    pd_weight_pin pin, next, bogus;
    (void)state;

    expect_error(pd_weight_ring_pin_version(ring, 11, &pin), PD_ENOTFOUND, "weight version 11 is not yet published");
    expect_error(pd_weight_ring_pin_version(ring, 9, &pin), PD_ENOTFOUND, "weight version 9 is no longer held");
    expect_error(pd_weight_ring_pin_version(ring, UINT64_MAX, &pin), PD_ENOTFOUND, "not yet published");
    assert_int_equal(update(ring, &next), PD_OK);
    assert_int_equal(update(ring, &next), PD_OK); /* version 10 dropped */
    expect_error(pd_weight_ring_pin_version(ring, 10, &pin), PD_ENOTFOUND,
                 "weight version 10 is no longer held (newest 12, ring of 2 versions)");
    assert_int_equal(pd_weight_ring_pinned(ring), 0);

    /* The writer's mistakes. */
    bogus = (pd_weight_pin){.slot = 0, .version = 13, .weights = s.ptr[0]};
    expect_error(pd_weight_ring_publish(ring, &bogus), PD_EINVAL, "not acquired");
    assert_int_equal(pd_weight_ring_acquire(ring, &next, NULL), PD_OK);
    bogus = next;
    bogus.version++;
    expect_error(pd_weight_ring_publish(ring, &bogus), PD_EINVAL, "not acquired");
    write_weights(next.weights, next.version);
    assert_int_equal(pd_weight_ring_publish(ring, &next), PD_OK);
    expect_error(pd_weight_ring_publish(ring, &next), PD_EINVAL, "not acquired");
    assert_int_equal(pd_weight_ring_newest_version(ring), 13);
    pd_weight_ring_destroy(ring);
    free(s.buf);
}

/* One stage running 1F1B with `in_flight` minibatches in flight: forwards
 * pin the newest version, backwards check and release it; the update
 * follows every `accumulate`-th backward. The ring of the depth
 * pd_weight_ring_depth_for gives never runs out of slots. Returns the most
 * distinct versions pinned at once. */
static int run_1f1b(int in_flight, int weight_versions, int accumulate)
{
    enum { MINIBATCHES = 40 };
    slots s;
    pd_weight_ring *ring;
    pd_weight_pin pins[MINIBATCHES], next;
    int depth = 0, most = 0;

    assert_int_equal(pd_weight_ring_depth_for(in_flight, weight_versions, sizeof(uint64_t[WORDS]), SIZE_MAX, &depth),
                     PD_OK);
    ring = ring_new(&s, depth, 0);
    for (int b = 0; b < in_flight; b++)
        pd_weight_ring_pin_newest(ring, &pins[b]);
    for (int b = 0; b < MINIBATCHES; b++) {
        int distinct = 0;

        for (int k = b; k < b + in_flight && k < MINIBATCHES; k++)
            if (k == b || pins[k].version != pins[k - 1].version)
                distinct++;
        most = distinct > most ? distinct : most;
        /* backward of b on the version its forward used */
        assert_true(weights_are(pins[b].weights, pins[b].version));
        pd_weight_ring_unpin(ring, &pins[b]);
        if ((b + 1) % accumulate == 0 && update(ring, &next) != PD_OK)
            fail_msg("1F1B, %d in flight, ring of %d: update after minibatch %d: %s", in_flight, depth, b,
                     pd_last_error());
        if (b + in_flight < MINIBATCHES)
            pd_weight_ring_pin_newest(ring, &pins[b + in_flight]);
    }
    assert_int_equal(pd_weight_ring_pinned(ring), 0);
    pd_weight_ring_destroy(ring);
    free(s.buf);
    return most;
}

static void test_1f1b(void **state)
{
    (void)state;
    for (int n = 1; n <= 6; n++) {
        /* Stashing: every minibatch in flight on its own version. */
        assert_int_equal(run_1f1b(n, PD_WEIGHT_VERSIONS_STASH, 1), n);
        /* 2BW: updates every n minibatches, two versions are enough. */
        assert_true(run_1f1b(n, PD_WEIGHT_VERSIONS_2BW, n) <= 2);
    }
}

/* ---- threads ------------------------------------------------------------------ */

#define STRESS_DEPTH 3
#define STRESS_READERS 4

typedef struct stress {
    pd_weight_ring *ring;
    atomic_bool stop;
    atomic_long published, full, pins, version_pins, dropped;
    atomic_long torn, backwards, errors;
} stress;

static uint64_t next_random(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void write_half(void *weights, uint64_t version, int half)
{
    uint64_t *w = weights;

    for (int k = half * WORDS / 2; k < (half + 1) * WORDS / 2; k++)
        w[k] = word_of(version, k);
}

static void *stress_writer(void *arg)
{
    stress *st = arg;
    pd_weight_pin next, newest;

    while (!atomic_load(&st->stop)) {
        pd_status s = pd_weight_ring_acquire(st->ring, &next, &newest);

        if (s == PD_ESTATE) {
            atomic_fetch_add(&st->full, 1);
            sched_yield();
            continue;
        }
        if (s != PD_OK || next.version != newest.version + 1 || !weights_are(newest.weights, newest.version)) {
            atomic_fetch_add(&st->errors, 1);
            break;
        }
        /* Half, sometimes a yield, then the rest: a reader that wrongly
         * holds this slot would see a mix of two versions. */
        write_half(next.weights, next.version, 0);
        if (atomic_load(&st->published) % 8 == 0)
            sched_yield();
        write_half(next.weights, next.version, 1);
        if (pd_weight_ring_publish(st->ring, &next) != PD_OK) {
            atomic_fetch_add(&st->errors, 1);
            break;
        }
        atomic_fetch_add(&st->published, 1);
    }
    return NULL;
}

/* Readers 0 and 1 pin the newest version (versions never go back), 2 and
 * 3 a recent version; each checks the weights, yields while holding the
 * pin, and checks them again. */
typedef struct reader {
    stress *st;
    int id;
} reader;

static void *stress_reader(void *arg)
{
    reader *r = arg;
    stress *st = r->st;
    uint64_t rnd = UINT64_C(0x2545f4914f6cdd1d) * (uint64_t)(r->id + 1), last = 0;

    while (!atomic_load(&st->stop)) {
        pd_weight_pin pin;

        if (r->id < 2) {
            pd_weight_ring_pin_newest(st->ring, &pin);
            if (pin.version < last)
                atomic_fetch_add(&st->backwards, 1);
            last = pin.version;
            atomic_fetch_add(&st->pins, 1);
        } else {
            uint64_t newest = pd_weight_ring_newest_version(st->ring);
            uint64_t back = next_random(&rnd) % (STRESS_DEPTH + 2);
            pd_status s = pd_weight_ring_pin_version(st->ring, newest - (back < newest ? back : newest), &pin);

            if (s == PD_ENOTFOUND) {
                atomic_fetch_add(&st->dropped, 1);
                continue;
            }
            if (s != PD_OK) {
                atomic_fetch_add(&st->errors, 1);
                break;
            }
            atomic_fetch_add(&st->version_pins, 1);
        }
        if (!weights_are(pin.weights, pin.version))
            atomic_fetch_add(&st->torn, 1);
        if (next_random(&rnd) % 4 == 0)
            sched_yield();
        if (!weights_are(pin.weights, pin.version))
            atomic_fetch_add(&st->torn, 1);
        pd_weight_ring_unpin(st->ring, &pin);
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_stress(void **state)
{
    const char *ms = getenv("PD_RING_STRESS_MS");
    double seconds = (ms ? atof(ms) : 1500.0) / 1000.0, t0;
    slots s;
    stress st = {0};
    reader readers[STRESS_READERS];
    pthread_t writer, threads[STRESS_READERS];
    (void)state;

    st.ring = ring_new(&s, STRESS_DEPTH, 0);
    assert_int_equal(pthread_create(&writer, NULL, stress_writer, &st), 0);
    for (int i = 0; i < STRESS_READERS; i++) {
        readers[i] = (reader){.st = &st, .id = i};
        assert_int_equal(pthread_create(&threads[i], NULL, stress_reader, &readers[i]), 0);
    }
    t0 = now_s();
    while (now_s() - t0 < seconds) {
        struct timespec tick = {0, 10 * 1000 * 1000};

        nanosleep(&tick, NULL);
    }
    atomic_store(&st.stop, true);
    pthread_join(writer, NULL);
    for (int i = 0; i < STRESS_READERS; i++)
        pthread_join(threads[i], NULL);

    print_message("stress %.1f s: %ld versions published (%ld times full), %ld pins of the newest, "
                  "%ld pins of a version (%ld dropped)\n",
                  seconds, atomic_load(&st.published), atomic_load(&st.full), atomic_load(&st.pins),
                  atomic_load(&st.version_pins), atomic_load(&st.dropped));
    assert_int_equal(atomic_load(&st.errors), 0);
    assert_int_equal(atomic_load(&st.torn), 0);
    assert_int_equal(atomic_load(&st.backwards), 0);
    assert_true(atomic_load(&st.published) >= 100);
    assert_true(atomic_load(&st.pins) >= 100);
    assert_true(atomic_load(&st.version_pins) >= 100);
    assert_int_equal(pd_weight_ring_pinned(st.ring), 0);
    assert_int_equal(pd_weight_ring_newest_version(st.ring), (uint64_t)atomic_load(&st.published));
    pd_weight_ring_destroy(st.ring);
    free(s.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_stash),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_bad_pins),
        cmocka_unit_test(test_1f1b),
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
