/* Transport: one table of cases run over every backend with two real
 * processes (forked; for mpi the two ranks of `mpirun -np 2`, see
 * transport_peer.h): ordering and tags, wrap-around of the ring,
 * back-pressure when every slot is held, large messages, timeouts, bad
 * headers (each field), wrong token, channel shape mismatch, a peer killed
 * mid-transfer (both directions; not under MPI, where mpirun ends the job:
 * --peer-killed checks that), backend choice, and channel sets (one
 * receiver with three senders, a waiter woken by any of them and not
 * spinning, timeouts and wake-ups, a sender woken by credits), a stream's
 * waits spinning instead of sleeping (not over a pause), the spin state; the
 * fall-back from a backend that fails to the next one (run once, mixing
 * backends: verbs that cannot listen or connect, shm unreachable or hung
 * up mid-handshake, a stray connection, the token on the backend fallen
 * back to, every backend failing; over verbs, a real rdmacm reject); plus
 * the token helpers and the MAC's reference vector. A watchdog (alarm)
 * turns a hang into a failure; children report through their exit
 * status. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pipedream.h>

#include "tests/unit/transport_peer.h"
#include "transport/transport_int.h"
#ifdef PD_TP_VERBS
#include "transport/verbs_int.h"
#endif

#define WATCHDOG_S 30

static pd_transport_token job_token;
static const char *backend; /* the backend of the running group */

/* A child's check: print and exit non-zero. */
#define CHILD_CHECK(cond)                                                                                            \
    do {                                                                                                             \
        if (!(cond)) {                                                                                               \
            fprintf(stderr, "child %s:%d: %s failed (%s)\n", __FILE__, __LINE__, #cond, pd_last_error());            \
            _exit(1);                                                                                                \
        }                                                                                                            \
    } while (0)

static pd_channel_config config(int depth, size_t slot_bytes)
{
    pd_channel_config c = {.channel_id = 7, .depth = depth, .slot_bytes = slot_bytes, .token = &job_token,
                           .backends = backend, .timeout_ms = 5000};

    /* verbs: the RDMA device's address (RDMA has no loopback) */
    c.host = strcmp(backend, "verbs") == 0 ? NULL : "127.0.0.1";
    return c;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* This process's CPU time, ms. Under an emulator, where every system call
 * costs many times more, $PD_TEST_CPU_SLOWDOWN (the verbs VM sets 3) scales
 * it back, so the tests' bounds still tell sleeping from spinning there. */
static double cpu_ms(void)
{
    struct rusage ru;
    const char *slowdown = getenv("PD_TEST_CPU_SLOWDOWN");
    double factor = slowdown && atof(slowdown) >= 1 ? atof(slowdown) : 1;

    getrusage(RUSAGE_SELF, &ru);
    return ((double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
            (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3) / factor;
}

static uint8_t pattern(uint64_t seq, size_t i) { return (uint8_t)(seq * 131 + i * 7 + (i >> 9)); }

/* Listens, forks: the child runs `child(address, arg)` and exits with its
 * result; the parent gets the receiving channel connected. */
typedef tp_child_fn child_fn;

static pid_t start(pd_channel_config *c, child_fn child, long arg, pd_channel **rx, bool expect_connect)
{
    pd_status s;
    pid_t pid;

    s = pd_channel_listen(c, rx);
    if (s != PD_OK)
        print_error("%s\n", pd_last_error());
    assert_int_equal(s, PD_OK);
    pid = tp_peer_start(child, pd_channel_address(*rx), arg, *rx);
    if (expect_connect) {
        s = pd_channel_wait_connected(rx, 1, -1);
        if (s != PD_OK)
            print_error("%s\n", pd_last_error());
        assert_int_equal(s, PD_OK);
        assert_string_equal(pd_channel_backend(*rx), backend);
    }
    return pid;
}

static void finish(pid_t pid) { tp_peer_finish(pid); }

/* One byte out of band, to hold a peer at a point of the case. */
static void parent_tell(pid_t pid) { tp_peer_send(pid, "x", 1); }
static void parent_hear(pid_t pid)
{
    char x;
    tp_peer_recv(pid, &x, 1);
}
static void child_tell(void) { tp_child_send("x", 1); }
static void child_hear(void)
{
    char x;
    tp_child_recv(&x, 1);
}

static pd_channel *child_connect(const char *address, pd_channel_config *c)
{
    pd_channel *tx = NULL;

    CHILD_CHECK(pd_channel_connect(c, address, &tx) == PD_OK);
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_OK);
    return tx;
}

/* ---- ordering, tags, wrap-around ---- */

static void ordering_child(const char *address, long count)
{
    pd_channel_config c = config(4, 4096);
    pd_channel *tx = child_connect(address, &c);
    static uint8_t bufs[4][4096];

    for (uint64_t i = 0; i < (uint64_t)count; i++) {
        uint8_t *b = bufs[i % 4];
        size_t bytes = (size_t)(i * 97 % 4097);
        pd_msg_tag tag = {.minibatch = 10 + i, .kind = i % 2 ? PD_MSG_GRADIENT : PD_MSG_ACTIVATION,
                          .version = (uint32_t)i / 3};
        uint64_t seq;

        if (i >= 4)
            CHILD_CHECK(pd_channel_send_wait(tx, i - 4, -1) == PD_OK); /* its buffer is reused now */
        for (size_t k = 0; k < bytes; k++)
            b[k] = pattern(i, k);
        CHILD_CHECK(pd_channel_send(tx, b, bytes, &tag, &seq) == PD_OK);
        CHILD_CHECK(seq == i);
    }
    CHILD_CHECK(pd_channel_send_wait(tx, (uint64_t)count - 1, -1) == PD_OK);
    pd_channel_close(tx);
}

static void test_ordering_and_wraparound(void **state)
{
    pd_channel_config c = config(4, 4096);
    pd_channel *rx;
    const long count = 300;
    pid_t pid = start(&c, ordering_child, count, &rx, true);
    void *slot_seen[4] = {0};

    for (uint64_t i = 0; i < (uint64_t)count; i++) {
        pd_channel_msg m;
        pd_status s = pd_channel_recv_wait(rx, &m, -1);
        if (s != PD_OK)
            print_error("%s\n", pd_last_error());
        assert_int_equal(s, PD_OK);
        assert_int_equal(m.seq, i);
        assert_int_equal(m.tag.minibatch, 10 + i);
        assert_int_equal(m.tag.kind, i % 2 ? PD_MSG_GRADIENT : PD_MSG_ACTIVATION);
        assert_int_equal(m.tag.version, i / 3);
        assert_int_equal(m.bytes, i * 97 % 4097);
        for (size_t k = 0; k < m.bytes; k++)
            if (((uint8_t *)m.data)[k] != pattern(i, k))
                fail_msg("message %llu byte %zu differs", (unsigned long long)i, k);
        /* Zero copy: message i sits in slot i mod depth, every lap. */
        if (i < 4)
            slot_seen[i] = m.data;
        else
            assert_ptr_equal(m.data, slot_seen[i % 4]);
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    finish(pid);
    pd_channel_close(rx);
}

/* ---- back-pressure: every slot held, the next send waits for a credit ---- */

static void backpressure_child(const char *address, long unused)
{
    pd_channel_config c = config(3, 64);
    pd_channel *tx = child_connect(address, &c);
    uint8_t b[4][64] = {{0}};
    uint64_t seq;
    bool done;

    for (int i = 0; i < 4; i++) {
        pd_msg_tag tag = {.minibatch = (uint64_t)i, .kind = PD_MSG_ACTIVATION};
        b[i][0] = (uint8_t)i;
        CHILD_CHECK(pd_channel_send(tx, b[i], 64, &tag, &seq) == PD_OK);
    }
    CHILD_CHECK(pd_channel_send_wait(tx, 2, -1) == PD_OK);
    /* The fourth has no credit while the receiver holds all three slots. */
    int64_t t0 = now_ms();
    CHILD_CHECK(pd_channel_send_wait(tx, 3, 200) == PD_ETIMEOUT);
    CHILD_CHECK(now_ms() - t0 >= 190);
    CHILD_CHECK(pd_channel_send_done(tx, 3, &done) == PD_OK && !done);
    /* Posting beyond depth outstanding is refused, not queued unbounded. */
    child_tell();
    CHILD_CHECK(pd_channel_send_wait(tx, 3, -1) == PD_OK);
    child_hear();
    pd_channel_close(tx);
}

static void test_backpressure(void **state)
{
    pd_channel_config c = config(3, 64);
    pd_channel *rx;
    pd_channel_msg m[4];

    pid_t pid = start(&c, backpressure_child, 0, &rx, true);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pd_channel_recv_wait(rx, &m[i], -1), PD_OK);
        assert_int_equal(((uint8_t *)m[i].data)[0], i);
    }
    /* The child saw its fourth send stall; now free one slot. */
    parent_hear(pid);
    bool ready;
    assert_int_equal(pd_channel_recv(rx, &m[3], &ready), PD_OK);
    assert_false(ready);
    assert_int_equal(pd_channel_release(rx, &m[1]), PD_ESTATE); /* out of order */
    assert_int_equal(pd_channel_release(rx, &m[0]), PD_OK);
    assert_int_equal(pd_channel_recv_wait(rx, &m[3], -1), PD_OK);
    assert_int_equal(((uint8_t *)m[3].data)[0], 3);
    parent_tell(pid);
    finish(pid);
    pd_channel_close(rx);
}

/* ---- large messages ---- */

#define LARGE (8u << 20)

static void large_child(const char *address, long count)
{
    pd_channel_config c = config(2, LARGE);
    pd_channel *tx = child_connect(address, &c);
    uint8_t *b = malloc(LARGE);
    uint64_t seq;

    CHILD_CHECK(b);
    for (long i = 0; i < count; i++) {
        pd_msg_tag tag = {.minibatch = (uint64_t)i, .kind = PD_MSG_ACTIVATION};
        for (size_t k = 0; k < LARGE; k++)
            b[k] = pattern((uint64_t)i, k);
        CHILD_CHECK(pd_channel_send(tx, b, LARGE, &tag, &seq) == PD_OK);
        CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    }
    free(b);
    pd_channel_close(tx);
}

static void test_large_messages(void **state)
{
    pd_channel_config c = config(2, LARGE);
    pd_channel *rx;
    pid_t pid = start(&c, large_child, 3, &rx, true);

    for (uint64_t i = 0; i < 3; i++) {
        pd_channel_msg m;
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        assert_int_equal(m.bytes, LARGE);
        for (size_t k = 0; k < LARGE; k++)
            if (((uint8_t *)m.data)[k] != pattern(i, k))
                fail_msg("message %llu byte %zu differs", (unsigned long long)i, k);
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    finish(pid);
    pd_channel_close(rx);
}

/* ---- timeouts ---- */

static void idle_child(const char *address, long unused)
{
    pd_channel_config c = config(2, 64);
    pd_channel *tx = child_connect(address, &c);

    child_hear(); /* stay silent until told */
    pd_channel_close(tx);
}

static void test_timeouts(void **state)
{
    pd_channel_config c = config(2, 64);
    pd_channel *rx;
    pd_channel_msg m;
    int64_t t0;

    /* Nobody sends: a receive times out after its timeout, not before. */
    pid_t pid = start(&c, idle_child, 0, &rx, true);
    t0 = now_ms();
    assert_int_equal(pd_channel_recv_wait(rx, &m, 150), PD_ETIMEOUT);
    assert_true(now_ms() - t0 >= 145);
    assert_true(now_ms() - t0 < 2000);
    assert_non_null(strstr(pd_last_error(), "no message within 150 ms"));
    parent_tell(pid);
    finish(pid);
    /* The sender closed cleanly: waiting for more is an error, not a hang. */
    assert_int_equal(pd_channel_recv_wait(rx, &m, 2000), PD_ECOMM);
    pd_channel_close(rx);

    /* Nobody connects: set-up fails at the channel's timeout, which runs
     * from the listen call (verbs needs a while to listen under qemu). */
    c.timeout_ms = 200;
    t0 = now_ms();
    assert_int_equal(pd_channel_listen(&c, &rx), PD_OK);
    assert_int_equal(pd_channel_wait_connected(&rx, 1, -1), PD_ETIMEOUT);
    assert_true(now_ms() - t0 >= 190);
    assert_non_null(strstr(pd_last_error(), "nobody connected"));
    /* The failure sticks. */
    assert_int_equal(pd_channel_progress(rx), PD_ETIMEOUT);
    pd_channel_close(rx);
}

/* ---- spin, then sleep ---- */

#define STREAM_N 200

/* Sends `count` messages about 300 us apart, each once the last one is
 * done, then one more after a pause of 300 ms. */
static void stream_child(const char *address, long count)
{
    pd_channel_config c = config(4, 64);
    pd_channel *tx = child_connect(address, &c);
    static uint8_t b[64];
    uint64_t seq;

    for (long i = 0; i <= count; i++) {
        pd_msg_tag tag = {.minibatch = (uint64_t)i, .kind = PD_MSG_ACTIVATION};

        usleep(i == count ? 300000 : 300);
        CHILD_CHECK(pd_channel_send(tx, b, sizeof(b), &tag, &seq) == PD_OK);
        CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    }
    pd_channel_close(tx);
}

static long sleeps(void)
{
    struct rusage ru;

    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nvcsw;
}

/* Receives stream_child's messages with a spin cap of spin_us: how often
 * the stream's waits slept (voluntary context switches); *idle_cpu: the
 * CPU milliseconds of the wait over the pause; *quiets: the seconds the
 * channel did not spin because its core was shared. */
static long receive_stream(int spin_us, double *idle_cpu, unsigned *quiets)
{
    pd_channel_config c = config(4, 64);
    pd_channel *rx;
    pd_channel_msg m;
    long slept;

    c.spin_us = spin_us;
    pid_t pid = start(&c, stream_child, STREAM_N, &rx, true);
    slept = sleeps();
    for (uint64_t i = 0; i < STREAM_N; i++) {
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        assert_int_equal(m.tag.minibatch, i);
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    slept = sleeps() - slept;
    double cpu0 = cpu_ms();
    int64_t t0 = now_ms();
    assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
    assert_int_equal(m.tag.minibatch, STREAM_N);
    *idle_cpu = cpu_ms() - cpu0;
    assert_true(now_ms() - t0 >= 200);
    assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    *quiets = rx->spin.quiets;
    finish(pid);
    pd_channel_close(rx);
    return slept;
}

/* While messages stream, a backend that can poll (shm, verbs) spins
 * through the gaps instead of sleeping per message; with spinning off, or
 * on a backend without a poll (tcp), each wait sleeps. A wait over a
 * pause spins at most twice the stream's interval, then sleeps. On a
 * machine so loaded that the spinner lost its core, it rightly sleeps
 * instead (said, and then the count is not checked). */
static void test_streaming_spins(void **state)
{
    double idle_on, idle_off;
    unsigned quiets, unused;
    bool polls;

    /* The cap is generous (20 ms) so that a slow machine's gaps stay
     * under it; the default is 2 ms. */
    long on = receive_stream(20000, &idle_on, &quiets);
    long off = receive_stream(-1, &idle_off, &unused);
    polls = strcmp(backend, "tcp") != 0;
    print_message("# %s: %ld sleeps with spinning (%u s without: a shared core), %ld without, over %d messages; CPU "
                  "over a 300 ms pause %.1f and %.1f ms\n", backend, on, quiets, off, STREAM_N, idle_on, idle_off);
    assert_true(off >= STREAM_N / 2);
    if (polls)
        assert_true(on < STREAM_N / 4 || quiets > 0);
    else
        assert_true(on >= STREAM_N / 2);
    assert_true(idle_on < 40);
    assert_true(idle_off < 25);
}

static void test_spin_state(void **state)
{
    pd_channel_config c = {.channel_id = 3};
    pd_tp_spin sp;
    int us;

    /* The cap: the config, else the environment, else 2 ms. */
    unsetenv("PD_TRANSPORT_SPIN_US");
    assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_OK);
    assert_int_equal(us, 2000);
    setenv("PD_TRANSPORT_SPIN_US", "-1", 1);
    assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_OK);
    assert_int_equal(us, -1);
    setenv("PD_TRANSPORT_SPIN_US", "500", 1);
    assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_OK);
    assert_int_equal(us, 500);
    c.spin_us = 70;
    assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_OK);
    assert_int_equal(us, 70);
    c.spin_us = 0;
    pd_channel *probe_unused;
    const char *bad[] = {"abc", "0", "12us", "2000000", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("PD_TRANSPORT_SPIN_US", bad[i], 1);
        if (!*bad[i]) {
            assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_OK); /* empty: unset */
            continue;
        }
        assert_int_equal(pd_tp_spin_cap_us(&c, &us), PD_EINVAL);
        assert_non_null(strstr(pd_last_error(), "PD_TRANSPORT_SPIN_US"));
    }
    setenv("PD_TRANSPORT_SPIN_US", "abc", 1);
    c = config(2, 64);
    assert_int_equal(pd_channel_listen(&c, &probe_unused), PD_EINVAL);
    unsetenv("PD_TRANSPORT_SPIN_US");
    c.spin_us = 1000001;
    assert_int_equal(pd_channel_listen(&c, &probe_unused), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "spin_us"));

    /* The deadline: none before two waits ended; then twice their
     * smoothed interval, at most the cap; none once it exceeds the cap. */
    const int64_t ms = 1000000;
    pd_tp_spin_init(&sp, 2000);
    assert_int_equal(pd_tp_spin_until(&sp, 0), 0);
    pd_tp_spin_note(&sp, 10 * ms);
    assert_int_equal(pd_tp_spin_until(&sp, 10 * ms), 0);
    pd_tp_spin_note(&sp, 10 * ms + ms / 2);
    assert_int_equal(pd_tp_spin_until(&sp, 11 * ms), 11 * ms + ms);
    pd_tp_spin_note(&sp, 12 * ms); /* interval (3 x 0.5 + 1.5) / 4 */
    assert_int_equal(pd_tp_spin_until(&sp, 12 * ms), 12 * ms + 3 * ms / 2);
    pd_tp_spin_note(&sp, 62 * ms); /* a pause of 50 ms */
    assert_int_equal(pd_tp_spin_until(&sp, 62 * ms), 0);
    for (int i = 1; i <= 40; i++)
        pd_tp_spin_note(&sp, 62 * ms + i * ms / 2);
    assert_true(pd_tp_spin_until(&sp, 100 * ms) > 100 * ms); /* quick waits bring it back */
    pd_tp_spin_init(&sp, 2000);
    pd_tp_spin_note(&sp, ms);
    pd_tp_spin_note(&sp, ms + 3 * ms / 2);
    assert_int_equal(pd_tp_spin_until(&sp, 3 * ms), 5 * ms); /* twice 1.5, capped at 2 */
    /* Preempted for over a quarter of a 100 ms window: no spinning for 1 s. */
    pd_tp_spin_init(&sp, 2000);
    pd_tp_spin_note(&sp, ms);
    pd_tp_spin_note(&sp, ms + ms / 2);
    int64_t t = 2 * ms;
    for (int i = 0; i < 10000; i++) /* 100 ms of quick looks */
        assert_true(pd_tp_spin_account(&sp, 10000, t += 10000));
    for (int i = 0; i < 8000; i++)
        assert_true(pd_tp_spin_account(&sp, 10000, t += 10000));
    assert_true(pd_tp_spin_account(&sp, 24 * ms, t += 24 * ms)); /* 24 of 104 ms: under a quarter */
    for (int i = 0; i < 7500; i++)
        assert_true(pd_tp_spin_account(&sp, 10000, t += 10000));
    assert_false(pd_tp_spin_account(&sp, 30 * ms, t += 30 * ms)); /* 30 of 105 ms */
    assert_int_equal(sp.quiets, 1);
    assert_int_equal(pd_tp_spin_until(&sp, t + 999 * ms), 0);
    assert_int_equal(pd_tp_spin_until(&sp, t + 1001 * ms), t + 1002 * ms);
    pd_tp_spin_init(&sp, -1);
    pd_tp_spin_note(&sp, 1);
    pd_tp_spin_note(&sp, 2);
    assert_int_equal(pd_tp_spin_until(&sp, 3), 0);
}

/* ---- bad headers: a tampered header fails the channel ---- */

enum { BAD_MAGIC, BAD_BYTES, BAD_SLOT, BAD_SEQ, BAD_CHANNEL, BAD_ORDER, BAD_CASES };

static void bad_header_child(const char *address, long which)
{
    pd_channel_config c = config(1, 256);
    pd_channel *tx = child_connect(address, &c);
    static uint8_t b[256];
    pd_msg_tag tag = {.minibatch = 5, .kind = PD_MSG_ACTIVATION};
    uint64_t seq;

    CHILD_CHECK(pd_channel_send(tx, b, 256, &tag, &seq) == PD_OK);
    CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    /* The only slot is held: this one queues without a credit, so its
     * header can be tampered with before it leaves. */
    tag.minibatch = which == BAD_ORDER ? 4 : 6;
    CHILD_CHECK(pd_channel_send(tx, b, 100, &tag, &seq) == PD_OK);
    CHILD_CHECK(tx->started == 1);
    pd_tp_header *h = &tx->sendq[1 % 1].header;
    switch (which) {
    case BAD_MAGIC: h->magic ^= 1; break;
    case BAD_BYTES: h->bytes = 257; break; /* the payload sent stays 100 bytes */
    case BAD_SLOT: h->slot = 1; break;
    case BAD_SEQ: h->seq = 5; break;
    case BAD_CHANNEL: h->channel_id = 8; break;
    default: break;
    }
    child_tell(); /* tampered */
    (void)pd_channel_send_wait(tx, seq, 3000); /* the receiver may fail before or after */
    pd_channel_close(tx);
}

static void test_bad_headers(void **state)
{
    static const char *const expect[BAD_CASES] = {"bad magic", "exceed the slot", "slot 1", "sequence 5",
                                                  "names channel 8", "minibatch 4 after 5"};

    for (long which = 0; which < BAD_CASES; which++) {
        pd_channel_config c = config(1, 256);
        pd_channel *rx;
        pd_channel_msg m;

        pid_t pid = start(&c, bad_header_child, which, &rx, true);
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        parent_hear(pid);
        uint8_t *slot_end = (uint8_t *)m.data + 256;
        uint8_t guard = slot_end[0];
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
        pd_status s = pd_channel_recv_wait(rx, &m, 3000);
        if (s != PD_ECOMM || !strstr(pd_last_error(), expect[which]))
            fail_msg("case %ld: status %d, message '%s', expected '%s'", which, s, pd_last_error(), expect[which]);
        /* Nothing landed beyond the slot. */
        assert_int_equal(slot_end[0], guard);
        /* The channel stays failed. */
        assert_int_equal(pd_channel_progress(rx), PD_ECOMM);
        pd_channel_close(rx);
        finish(pid);
    }
}

/* ---- wrong token, wrong shape ---- */

static void wrong_token_child(const char *address, long unused)
{
    pd_transport_token other = job_token;
    pd_channel_config c = config(2, 64);
    pd_channel *tx;

    other.bytes[3] ^= 0x40;
    c.token = &other;
    CHILD_CHECK(pd_channel_connect(&c, address, &tx) == PD_OK);
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_ECOMM);
    CHILD_CHECK(strstr(pd_last_error(), "job token") != NULL);
    /* No slot memory was handed over. */
    CHILD_CHECK(tx->slots == NULL && tx->ring_fd < 0);
    pd_channel_close(tx);
}

static void test_wrong_token(void **state)
{
    pd_channel_config c = config(2, 64);
    pd_channel *rx;
    pid_t pid = start(&c, wrong_token_child, 0, &rx, false);

    assert_int_equal(pd_channel_wait_connected(&rx, 1, -1), PD_ECOMM);
    assert_non_null(strstr(pd_last_error(), "failed to prove the job token"));
    assert_false(pd_channel_connected(rx));
    finish(pid);
    pd_channel_close(rx);
}

static void wrong_shape_child(const char *address, long unused)
{
    pd_channel_config c = config(3, 64);
    pd_channel *tx;

    CHILD_CHECK(pd_channel_connect(&c, address, &tx) == PD_OK);
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_ECOMM);
    pd_channel_close(tx);
}

static void test_wrong_shape(void **state)
{
    pd_channel_config c = config(2, 64);
    pd_channel *rx;
    pid_t pid = start(&c, wrong_shape_child, 0, &rx, false);

    assert_int_equal(pd_channel_wait_connected(&rx, 1, -1), PD_ECOMM);
    assert_non_null(strstr(pd_last_error(), "depth"));
    finish(pid);
    pd_channel_close(rx);
}

/* ---- a peer killed mid-transfer ---- */

static void flood_child(const char *address, long unused)
{
    pd_channel_config c = config(2, 1 << 20);
    pd_channel *tx = child_connect(address, &c);
    uint8_t *b = calloc(1, 1 << 20);

    for (uint64_t i = 0;; i++) {
        pd_msg_tag tag = {.minibatch = i, .kind = PD_MSG_ACTIVATION};
        uint64_t seq;
        CHILD_CHECK(pd_channel_send(tx, b, 1 << 20, &tag, &seq) == PD_OK);
        CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    }
}

static void test_sender_killed(void **state)
{
    pd_channel_config c = config(2, 1 << 20);
    pd_channel *rx;
    pd_channel_msg m;
    int status;
    pid_t pid = start(&c, flood_child, 0, &rx, true);
    pd_status s;

    for (int i = 0; i < 5; i++) {
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    int64_t t0 = now_ms();
    /* Whatever had fully arrived is still delivered; then the error. */
    while ((s = pd_channel_recv_wait(rx, &m, -1)) == PD_OK)
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    assert_int_equal(s, PD_ECOMM);
    assert_true(now_ms() - t0 < 1000); /* well within the 5 s timeout */
    pd_channel_close(rx);
}

static void test_receiver_killed(void **state)
{
    /* Here the parent sends: the receiver is the child, and listens there
     * (an RDMA listener belongs to the process that made it). Small
     * slots, so that what the child never reads fits in the socket
     * buffers. */
    pd_channel_config c = config(2, 65536);
    pd_channel *rx, *tx = NULL;
    pid_t pid;
    int status, fds[2];
    uint8_t *b = calloc(1, 65536);
    uint64_t seq = 0;
    pd_status s = PD_OK;
    char address[PD_TP_ADDRESS_BYTES];
    size_t got = 0;

    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(WATCHDOG_S);
        close(fds[0]);
        CHILD_CHECK(pd_channel_listen(&c, &rx) == PD_OK);
        CHILD_CHECK(write(fds[1], pd_channel_address(rx), strlen(pd_channel_address(rx)) + 1) > 0);
        CHILD_CHECK(pd_channel_wait_connected(&rx, 1, -1) == PD_OK);
        pause(); /* takes nothing: the sender runs out of credits */
        _exit(0);
    }
    close(fds[1]);
    while (got < sizeof(address) && read(fds[0], address + got, 1) == 1 && address[got] != '\0')
        got++;
    close(fds[0]);
    assert_true(got > 0 && got < sizeof(address));
    address[got] = '\0';
    assert_int_equal(pd_channel_connect(&c, address, &tx), PD_OK);
    assert_int_equal(pd_channel_wait_connected(&tx, 1, -1), PD_OK);
    for (uint64_t i = 0; i < 2; i++) {
        pd_msg_tag tag = {.minibatch = i, .kind = PD_MSG_ACTIVATION};
        assert_int_equal(pd_channel_send(tx, b, 65536, &tag, &seq), PD_OK);
    }
    assert_int_equal(pd_channel_send_wait(tx, 1, -1), PD_OK);
    pd_msg_tag tag = {.minibatch = 2, .kind = PD_MSG_ACTIVATION};
    assert_int_equal(pd_channel_send(tx, b, 65536, &tag, &seq), PD_OK);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    int64_t t0 = now_ms();
    s = pd_channel_send_wait(tx, seq, -1);
    assert_int_equal(s, PD_ECOMM);
    assert_true(now_ms() - t0 < 1000);
    pd_channel_close(tx);
    free(b);
}

/* ---- backend choice: the receiver offers all, the sender's order wins ---- */

static void choice_child(const char *address, long unused)
{
    pd_channel_config c = config(2, 64);
    char mine[32];
    pd_channel *tx;

    snprintf(mine, sizeof(mine), "%s:", backend);
    CHILD_CHECK(strstr(address, "shm:") && strstr(address, "tcp:") && strstr(address, mine));
    CHILD_CHECK(pd_channel_connect(&c, address, &tx) == PD_OK);
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_OK);
    CHILD_CHECK(strcmp(pd_channel_backend(tx), backend) == 0);
    pd_channel_close(tx);
}

static void test_backend_choice(void **state)
{
    /* The receiver listens on every backend built, `backend` last (those
     * that cannot listen here are left out); the child prefers `backend`. */
    pd_channel_config c = config(2, 64);
    const char *const *names;
    int n = pd_transport_backends(&names);
    char all[128] = "";
    pd_channel *rx;

    for (int i = 0; i < n; i++)
        if (strcmp(names[i], backend) != 0)
            snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s,", names[i]);
    snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s", backend);
    c.backends = all;
    pid_t pid = start(&c, choice_child, 0, &rx, true); /* checks that `backend` won */
    finish(pid);
    pd_channel_close(rx);
}

/* ---- channel sets: one thread serves several channels and sleeps ---- */

#define SENDERS 3
#define SET_SENDS (1 << 8) /* set_member_child: send one message when told */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static pd_channel_config member_config(int k, int depth)
{
    pd_channel_config c = config(depth, 256);

    c.channel_id = 7 + (uint32_t)k;
    return c;
}

static pd_channel_set *make_set(pd_channel **chs)
{
    pd_channel_set *set;
    pd_status s = pd_channel_set_create(chs, SENDERS, &set);

    if (s != PD_OK)
        print_error("%s\n", pd_last_error());
    assert_int_equal(s, PD_OK);
    /* What the set sees first is the channels connected. */
    assert_int_equal(pd_channel_set_progress(set, NULL), PD_OK);
    for (int k = 0; k < SENDERS; k++)
        assert_true(pd_channel_set_events(set, k) & PD_CHANNEL_EV_CONNECTED);
    return set;
}

/* Sender k of three: `count` messages of its own pattern, k + 1 ms apart,
 * so that the three streams interleave. */
static void stream_member_child(const char *address, long arg)
{
    int k = (int)(arg & 0xff), count = (int)(arg >> 8);
    pd_channel_config c = member_config(k, 4);
    pd_channel *tx = child_connect(address, &c);
    uint8_t b[4][256];
    uint64_t seq = 0;

    for (int i = 0; i < count; i++) {
        uint8_t *p = b[i % 4];
        size_t bytes = 1 + (size_t)(i * 37 % 255);
        pd_msg_tag tag = {.minibatch = (uint64_t)i, .kind = PD_MSG_ACTIVATION};

        if (i >= 4)
            CHILD_CHECK(pd_channel_send_wait(tx, (uint64_t)i - 4, -1) == PD_OK);
        p[0] = (uint8_t)k;
        for (size_t j = 1; j < bytes; j++)
            p[j] = pattern((uint64_t)i, j);
        CHILD_CHECK(pd_channel_send(tx, p, bytes, &tag, &seq) == PD_OK);
        sleep_ms(k + 1);
    }
    CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    pd_channel_close(tx);
}

static void test_set_three_senders(void **state)
{
    const int count = 40;
    pd_channel *rx[SENDERS];
    pid_t pid[SENDERS];
    uint64_t next[SENDERS] = {0};
    int total = 0, closed = 0, waits = 0;

    for (int k = 0; k < SENDERS; k++) {
        pd_channel_config c = member_config(k, 4);
        pid[k] = start(&c, stream_member_child, k | count << 8, &rx[k], true);
    }
    pd_channel_set *set;
    assert_int_equal(pd_channel_set_create(rx, SENDERS, &set), PD_OK);
    int64_t t0 = now_ms();
    double cpu0 = cpu_ms();
    while (total < SENDERS * count || closed < SENDERS) {
        int active = 0;
        pd_status s = pd_channel_set_wait(set, 5000, &active);

        if (s != PD_OK)
            fail_msg("after %d messages: %s", total, pd_last_error());
        assert_true(active > 0);
        waits++;
        for (int k = 0; k < SENDERS; k++) {
            unsigned ev = pd_channel_set_events(set, k);
            pd_channel_msg m;
            bool ready;

            closed += (ev & PD_CHANNEL_EV_CLOSED) != 0;
            /* Messages may have come before the set first looked. */
            if (!(ev & (PD_CHANNEL_EV_MESSAGE | PD_CHANNEL_EV_CONNECTED)))
                continue;
            while (pd_channel_recv(rx[k], &m, &ready) == PD_OK && ready) {
                const uint8_t *p = m.data;
                assert_int_equal(m.tag.minibatch, next[k]);
                assert_int_equal(m.bytes, 1 + next[k] * 37 % 255);
                assert_int_equal(p[0], k);
                for (size_t j = 1; j < m.bytes; j++)
                    if (p[j] != pattern(next[k], j))
                        fail_msg("channel %d message %llu byte %zu differs", k, (unsigned long long)next[k], j);
                assert_int_equal(pd_channel_release(rx[k], &m), PD_OK);
                next[k]++;
                total++;
            }
        }
    }
    int64_t wall = now_ms() - t0;
    double cpu = cpu_ms() - cpu0;
    print_message("# %s: %d messages from %d senders in %lld ms, %d waits, %.1f ms CPU\n", backend, total, SENDERS,
                  (long long)wall, waits, cpu);
    /* Asleep between messages: a spinning waiter burns the whole wall time. */
    assert_true(cpu < (double)wall / 4 + 20);
    for (int k = 0; k < SENDERS; k++) {
        finish(pid[k]);
        pd_channel_close(rx[k]);
    }
    pd_channel_set_destroy(set);
}

/* Member k of a set: connected; with SET_SENDS, sends one message 105 ms
 * after it is told (just into the second of the set's 100 ms sleeps, so
 * that a set woken only by their end is seen 95 ms late, well past the
 * 70 ms the test allows a loaded machine), carrying the time it was sent;
 * closes when told. */
static void set_member_child(const char *address, long arg)
{
    int k = (int)(arg & 0xff);
    pd_channel_config c = member_config(k, 2);
    pd_channel *tx = child_connect(address, &c);
    uint8_t b[256] = {0};
    pd_msg_tag tag = {.minibatch = (uint64_t)k, .kind = PD_MSG_ACTIVATION};
    uint64_t seq;

    if (arg & SET_SENDS) {
        child_hear();
        sleep_ms(105);
        b[0] = (uint8_t)k;
        int64_t sent = now_ns();
        memcpy(b + 8, &sent, sizeof(sent));
        CHILD_CHECK(pd_channel_send(tx, b, sizeof(b), &tag, &seq) == PD_OK);
        CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    }
    child_hear();
    pd_channel_close(tx);
}

static pd_channel_set *start_members(long flags, pd_channel **rx, pid_t *pid)
{
    for (int k = 0; k < SENDERS; k++) {
        pd_channel_config c = member_config(k, 2);
        pid[k] = start(&c, set_member_child, k | flags, &rx[k], true);
    }
    return make_set(rx);
}

static void end_members(pd_channel_set *set, pd_channel **rx, pid_t *pid)
{
    for (int k = 0; k < SENDERS; k++) {
        finish(pid[k]);
        pd_channel_close(rx[k]);
    }
    pd_channel_set_destroy(set);
}

static void test_set_wakes_on_any(void **state)
{
    static const int order[SENDERS] = {1, 0, 2};
    pd_channel *rx[SENDERS];
    pid_t pid[SENDERS];
    pd_channel_set *set = start_members(SET_SENDS, rx, pid);

    for (int j = 0; j < SENDERS; j++) {
        int k = order[j], active = 0;
        pd_channel_msg m;
        bool ready;

        parent_tell(pid[k]);
        int64_t t0 = now_ms();
        double cpu0 = cpu_ms();
        pd_status s = pd_channel_set_wait(set, 5000, &active);
        int64_t woken = now_ns(), waited = now_ms() - t0, sent;
        double cpu = cpu_ms() - cpu0;
        if (s != PD_OK)
            fail_msg("waiting for sender %d: %s", k, pd_last_error());
        /* Woken by sender k alone, when it sent, not having spun. */
        assert_int_equal(active, 1);
        for (int i = 0; i < SENDERS; i++)
            assert_int_equal(pd_channel_set_events(set, i), i == k ? PD_CHANNEL_EV_MESSAGE : 0);
        assert_int_equal(pd_channel_recv(rx[k], &m, &ready), PD_OK);
        assert_true(ready);
        memcpy(&sent, (uint8_t *)m.data + 8, sizeof(sent));
        if (waited < 100 || (woken - sent) / 1000000 > 70 || cpu > 25)
            fail_msg("sender %d: woken after %lld ms, %.1f ms after it sent (at 105 ms), %.1f ms CPU", k,
                     (long long)waited, (double)(woken - sent) / 1e6, cpu);
        assert_int_equal(m.tag.minibatch, k);
        assert_int_equal(((uint8_t *)m.data)[0], k);
        assert_int_equal(pd_channel_release(rx[k], &m), PD_OK);
    }
    for (int k = 0; k < SENDERS; k++)
        parent_tell(pid[k]);
    end_members(set, rx, pid);
}

static void *wake_later(void *set)
{
    sleep_ms(100);
    pd_channel_set_wake(set);
    return NULL;
}

static void test_set_timeouts(void **state)
{
    pd_channel *rx[SENDERS];
    pid_t pid[SENDERS];
    pd_channel_set *set = start_members(0, rx, pid);
    pthread_t waker;
    int active = -1, closed = 0;
    int64_t t0;
    double cpu0;

    /* Nothing happens: the wait ends at its timeout, asleep meanwhile. */
    t0 = now_ms();
    cpu0 = cpu_ms();
    assert_int_equal(pd_channel_set_wait(set, 150, &active), PD_ETIMEOUT);
    assert_non_null(strstr(pd_last_error(), "no event within 150 ms"));
    assert_in_range(now_ms() - t0, 145, 2000);
    assert_true(cpu_ms() - cpu0 < 25);
    /* Another thread wakes it early. */
    assert_int_equal(pthread_create(&waker, NULL, wake_later, set), 0);
    t0 = now_ms();
    assert_int_equal(pd_channel_set_wait(set, 5000, &active), PD_OK);
    assert_int_equal(active, 0);
    assert_in_range(now_ms() - t0, 80, 2000);
    assert_int_equal(pthread_join(waker, NULL), 0);
    /* A wake-up before the wait is not lost. */
    pd_channel_set_wake(set);
    t0 = now_ms();
    assert_int_equal(pd_channel_set_wait(set, 5000, &active), PD_OK);
    assert_true(now_ms() - t0 < 50);
    /* The senders close: each is seen closed once... */
    for (int k = 0; k < SENDERS; k++)
        parent_tell(pid[k]);
    while (closed < SENDERS) {
        pd_status s = pd_channel_set_wait(set, 5000, &active);
        if (s != PD_OK)
            fail_msg("%d of %d closed: %s", closed, SENDERS, pd_last_error());
        for (int k = 0; k < SENDERS; k++) {
            unsigned ev = pd_channel_set_events(set, k);
            assert_int_equal(ev & ~(unsigned)PD_CHANNEL_EV_CLOSED, 0);
            closed += ev != 0;
        }
    }
    /* ...and then gives nothing more to wake up for (no spinning on it). */
    t0 = now_ms();
    cpu0 = cpu_ms();
    assert_int_equal(pd_channel_set_wait(set, 150, &active), PD_ETIMEOUT);
    assert_in_range(now_ms() - t0, 145, 2000);
    assert_true(cpu_ms() - cpu0 < 25);
    end_members(set, rx, pid);
}

/* Receiver k of a set of senders: one slot; frees it 105 ms after it is
 * told (as set_member_child sends) and says when, takes the second
 * message, closes when told. */
static void credit_member_child(const char *unused, long k)
{
    pd_channel_config c = member_config((int)k, 1);
    char address[PD_TP_ADDRESS_BYTES];
    pd_channel *rx;
    pd_channel_msg m;

    CHILD_CHECK(pd_channel_listen(&c, &rx) == PD_OK);
    snprintf(address, sizeof(address), "%s", pd_channel_address(rx));
    tp_child_send(address, sizeof(address));
    CHILD_CHECK(pd_channel_wait_connected(&rx, 1, -1) == PD_OK);
    child_hear();
    sleep_ms(105);
    for (uint64_t i = 0; i < 2; i++) {
        CHILD_CHECK(pd_channel_recv_wait(rx, &m, -1) == PD_OK);
        CHILD_CHECK(m.tag.minibatch == i);
        CHILD_CHECK(pd_channel_release(rx, &m) == PD_OK);
        if (i == 0) {
            int64_t released = now_ns();
            tp_child_send(&released, sizeof(released));
        }
    }
    child_hear();
    pd_channel_close(rx);
}

static void test_set_sender_credits(void **state)
{
    static const int order[SENDERS] = {2, 0, 1};
    pd_channel *tx[SENDERS];
    pid_t pid[SENDERS];
    uint8_t b[2][256] = {{0}};
    uint64_t seq;

    /* Here the children receive, listening themselves. */
    for (int k = 0; k < SENDERS; k++) {
        pd_channel_config c = member_config(k, 1);
        char address[PD_TP_ADDRESS_BYTES];

        pid[k] = tp_peer_start(credit_member_child, NULL, k, NULL);
        tp_peer_recv(pid[k], address, sizeof(address));
        assert_int_equal(pd_channel_connect(&c, address, &tx[k]), PD_OK);
    }
    assert_int_equal(pd_channel_wait_connected(tx, SENDERS, -1), PD_OK);
    for (int k = 0; k < SENDERS; k++) {
        /* The first takes the only slot; the second waits for its credit. */
        for (uint64_t i = 0; i < 2; i++) {
            pd_msg_tag tag = {.minibatch = i, .kind = PD_MSG_ACTIVATION};
            assert_int_equal(pd_channel_send(tx[k], b[i], sizeof(b[i]), &tag, &seq), PD_OK);
            if (i == 0)
                assert_int_equal(pd_channel_send_wait(tx[k], 0, -1), PD_OK);
        }
    }
    pd_channel_set *set = make_set(tx); /* which also sees the first sends done */
    for (int j = 0; j < SENDERS; j++) {
        int k = order[j], active = 0;
        bool done;

        assert_int_equal(pd_channel_send_done(tx[k], 1, &done), PD_OK);
        assert_false(done);
        parent_tell(pid[k]);
        int64_t t0 = now_ms();
        double cpu0 = cpu_ms();
        pd_status s = pd_channel_set_wait(set, 5000, &active);
        int64_t woken = now_ns(), waited = now_ms() - t0, released;
        double cpu = cpu_ms() - cpu0;
        if (s != PD_OK)
            fail_msg("waiting for receiver %d's credit: %s", k, pd_last_error());
        assert_int_equal(active, 1);
        for (int i = 0; i < SENDERS; i++)
            assert_int_equal(pd_channel_set_events(set, i), i == k ? PD_CHANNEL_EV_SENT : 0);
        tp_peer_recv(pid[k], &released, sizeof(released));
        if (waited < 100 || (woken - released) / 1000000 > 70 || cpu > 25)
            fail_msg("receiver %d: woken after %lld ms, %.1f ms after its credit (at 105 ms), %.1f ms CPU", k,
                     (long long)waited, (double)(woken - released) / 1e6, cpu);
        assert_int_equal(pd_channel_send_done(tx[k], 1, &done), PD_OK);
        assert_true(done);
    }
    for (int k = 0; k < SENDERS; k++) {
        parent_tell(pid[k]);
        finish(pid[k]);
        pd_channel_close(tx[k]);
    }
    pd_channel_set_destroy(set);
}

static void test_set_misuse(void **state)
{
    pd_channel_config c = config(2, 64);
    pd_channel *ch[2];
    pd_channel_set *set, *other;

    assert_int_equal(pd_channel_listen(&c, &ch[0]), PD_OK);
    c.channel_id = 8;
    assert_int_equal(pd_channel_listen(&c, &ch[1]), PD_OK);
    assert_int_equal(pd_channel_set_create(ch, 0, &set), PD_EINVAL);
    assert_int_equal(pd_channel_set_create((pd_channel *[]){ch[0], ch[0]}, 2, &set), PD_EINVAL);
    assert_int_equal(pd_channel_set_create(ch, 2, &set), PD_OK);
    assert_int_equal(pd_channel_set_create(ch + 1, 1, &other), PD_ESTATE); /* already in a set */
    /* A channel closed leaves its set, which goes on with the others. */
    pd_channel_close(ch[0]);
    assert_int_equal(pd_channel_set_progress(set, NULL), PD_OK);
    assert_int_equal(pd_channel_set_events(set, 0), 0);
    pd_channel_set_destroy(set);
    /* Out of the destroyed set, the channel can join another. */
    assert_int_equal(pd_channel_set_create(ch + 1, 1, &other), PD_OK);
    pd_channel_set_destroy(other);
    pd_channel_close(ch[1]);
}

/* ---- fall-back: a backend that fails gives way to the next one ---- */

/* What a fall-back child does to the receiver's address before it connects
 * with the preference "verbs,shm,tcp" (flags of its argument). */
enum {
    FB_FOREIGN_VERBS = 1, /* a verbs part first that this end cannot use */
    FB_VERBS_REJECT = 2,  /* the verbs part's port: one nobody listens on (rdmacm rejects) */
    FB_SHM_NOBODY = 4,    /* the shm part: a socket nobody listens on (connect fails) */
    FB_SHM_HANGUP = 8,    /* the shm part: a listener that closes under the handshake */
    FB_WRONG_TOKEN = 16,  /* another job's token (refused, on whichever backend) */
    FB_STRAY_FIRST = 32,  /* first a stray non-pipedream connection to the receiver's shm */
};

/* `address` with the part of backend `name` replaced by "name:rest". */
static void replace_part(const char *address, const char *name, const char *rest, char *out, size_t size)
{
    size_t nlen = strlen(name), used = 0;

    out[0] = '\0';
    for (const char *p = address; *p;) {
        size_t len = strcspn(p, ",");
        bool mine = len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == ':';

        if (mine)
            used += (size_t)snprintf(out + used, size - used, "%s%s:%s", used ? "," : "", name, rest);
        else
            used += (size_t)snprintf(out + used, size - used, "%s%.*s", used ? "," : "", (int)len, p);
        CHILD_CHECK(used < size);
        p += len + (p[len] == ',');
    }
}

/* The value of backend `name`'s part of `address` ("shm:a:b" -> "a:b"). */
static void address_of(const char *address, const char *name, char *out, size_t size)
{
    const char *p = strstr(address, name);

    CHILD_CHECK(p && p[strlen(name)] == ':');
    p += strlen(name) + 1;
    snprintf(out, size, "%.*s", (int)strcspn(p, ","), p);
}

/* This node's boot id, the first field of an shm address part. */
static void boot_id(char *out, size_t size)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    CHILD_CHECK(f && fgets(out, (int)size, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* Listeners that never answer: connecting to one succeeds (the kernel's
 * backlog), and closing it resets those connections. */
static int fake_unix_listener(const char *name)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

    memcpy(sa.sun_path + 1, name, len); /* abstract, as shm's */
    CHILD_CHECK(fd >= 0);
    CHILD_CHECK(bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) == 0);
    CHILD_CHECK(listen(fd, 4) == 0);
    return fd;
}

static int fake_tcp_listener(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    CHILD_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 4) == 0);
    CHILD_CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A stray connection (a port scanner, another program) to the receiver's
 * shm or tcp part: 64 bytes of no pipedream protocol, then whatever the
 * receiver answers until it hangs up. */
static void stray(const char *address, const char *name)
{
    char part[256];
    uint8_t junk[64];
    int fd;

    address_of(address, name, part, sizeof(part));
    if (strcmp(name, "shm") == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *sock = strchr(part, ':') + 1;
        memcpy(sa.sun_path + 1, sock, strlen(sock));
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHILD_CHECK(connect(fd, (struct sockaddr *)&sa,
                            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sock))) == 0);
    } else {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        char *colon = strrchr(part, ':');
        *colon = '\0';
        sa.sin_port = htons((uint16_t)atoi(colon + 1));
        CHILD_CHECK(inet_pton(AF_INET, part, &sa.sin_addr) == 1);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHILD_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    }
    memset(junk, 0x5a, sizeof(junk));
    CHILD_CHECK(send(fd, junk, sizeof(junk), MSG_NOSIGNAL) == (ssize_t)sizeof(junk));
    while (recv(fd, junk, sizeof(junk), 0) > 0)
        ;
    close(fd);
}

/* A verbs part this end cannot use: where RDMA works here, this machine's
 * RDMA address on a port nobody listens on (rdmacm rejects at once); else
 * a documentation address (and this end has no RDMA device to reach it). */
static void foreign_verbs(char *part, size_t size)
{
#ifdef PD_TP_VERBS
    char ip[64];
    if (pd_vb_find_address(NULL, ip, sizeof(ip)) == PD_OK) {
        snprintf(part, size, "%s:1", ip);
        return;
    }
#endif
    snprintf(part, size, "192.0.2.1:4791");
}

static void fallback_child(const char *address, long flags)
{
    pd_channel_config c = config(2, 4096);
    pd_transport_token other = job_token;
    char addr[PD_TP_ADDRESS_BYTES], tmp[PD_TP_ADDRESS_BYTES], part[256], used[8] = "";
    int fake = -1;
    pd_channel *tx;
    uint8_t b[3][100];

    c.backends = "verbs,shm,tcp";
    snprintf(addr, sizeof(addr), "%s", address);
    if (flags & FB_FOREIGN_VERBS) {
        foreign_verbs(part, sizeof(part));
        CHILD_CHECK(snprintf(tmp, sizeof(tmp), "verbs:%s,", part) < 64);
        CHILD_CHECK(strlen(tmp) + strlen(addr) < sizeof(tmp));
        memcpy(tmp + strlen(tmp), addr, strlen(addr) + 1);
        memcpy(addr, tmp, strlen(tmp) + 1);
    }
    if (flags & FB_VERBS_REJECT) {
        address_of(addr, "verbs", part, sizeof(part));
        snprintf(strrchr(part, ':'), 3, ":1");
        replace_part(addr, "verbs", part, tmp, sizeof(tmp));
        snprintf(addr, sizeof(addr), "%s", tmp);
    }
    if (flags & (FB_SHM_NOBODY | FB_SHM_HANGUP)) {
        char boot[64], name[64];
        boot_id(boot, sizeof(boot));
        snprintf(name, sizeof(name), "pd-test-%d-%s", (int)getpid(), flags & FB_SHM_NOBODY ? "nobody" : "fake");
        if (flags & FB_SHM_HANGUP)
            fake = fake_unix_listener(name);
        snprintf(part, sizeof(part), "%s:%s", boot, name);
        replace_part(addr, "shm", part, tmp, sizeof(tmp));
        snprintf(addr, sizeof(addr), "%s", tmp);
    }
    if (flags & FB_STRAY_FIRST)
        stray(address, "shm");
    if (flags & FB_WRONG_TOKEN) {
        other.bytes[5] ^= 1;
        c.token = &other;
    }
    CHILD_CHECK(pd_channel_connect(&c, addr, &tx) == PD_OK);
    if (fake >= 0) {
        /* shm connected to the fake and waits for its HELLO: the
         * fall-back happens under progress, once the fake is gone. */
        CHILD_CHECK(strcmp(pd_channel_backend(tx), "shm") == 0);
        close(fake);
    }
    if (flags & FB_WRONG_TOKEN) {
        /* Refused on the backend it reached; no other one is tried. */
        CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_ECOMM);
        CHILD_CHECK(strstr(pd_last_error(), "job token") != NULL);
        CHILD_CHECK(strcmp(pd_channel_backend(tx), flags & FB_SHM_NOBODY ? "tcp" : "shm") == 0);
        CHILD_CHECK(tx->slots == NULL && tx->ring_fd < 0);
        pd_channel_close(tx);
        return;
    }
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_OK);
    snprintf(used, sizeof(used), "%s", pd_channel_backend(tx));
    tp_child_send(used, sizeof(used));
    for (uint64_t i = 0; i < 3; i++) {
        pd_msg_tag tag = {.minibatch = i, .kind = PD_MSG_ACTIVATION};
        uint64_t seq;
        for (size_t k = 0; k < sizeof(b[i]); k++)
            b[i][k] = pattern(i, k);
        CHILD_CHECK(pd_channel_send(tx, b[i], sizeof(b[i]), &tag, &seq) == PD_OK);
    }
    CHILD_CHECK(pd_channel_send_wait(tx, 2, -1) == PD_OK);
    pd_channel_close(tx);
}

/* Listens on `listen_backends`; the child (fallback_child with `flags`)
 * must connect over `expect`, both ends agreeing, and messages flow. */
static void run_fallback(const char *listen_backends, long flags, const char *expect)
{
    pd_channel_config c = config(2, 4096);
    pd_channel *rx;
    char theirs[8];
    pid_t pid;
    pd_status s;

    c.backends = listen_backends;
    pid = start(&c, fallback_child, flags, &rx, false);
    s = pd_channel_wait_connected(&rx, 1, -1);
    if (s != PD_OK)
        print_error("%s\n", pd_last_error());
    assert_int_equal(s, PD_OK);
    assert_string_equal(pd_channel_backend(rx), expect);
    tp_peer_recv(pid, theirs, sizeof(theirs));
    assert_string_equal(theirs, expect);
    for (uint64_t i = 0; i < 3; i++) {
        pd_channel_msg m;
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        assert_int_equal(m.seq, i);
        assert_int_equal(m.bytes, 100);
        for (size_t k = 0; k < m.bytes; k++)
            assert_int_equal(((uint8_t *)m.data)[k], pattern(i, k));
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    finish(pid);
    pd_channel_close(rx);
}

/* Whether a verbs channel can listen on this machine. */
static bool verbs_here(void)
{
#ifdef PD_TP_VERBS
    char ip[64];
    return pd_vb_find_address(NULL, ip, sizeof(ip)) == PD_OK;
#else
    return false;
#endif
}

/* (a) "verbs,tcp" where verbs cannot listen: the address offers tcp only. */
static void test_fallback_verbs_cannot_listen(void **state)
{
    run_fallback("verbs,tcp", 0, verbs_here() ? "verbs" : "tcp");
}

/* (b) The receiver offers verbs that this end cannot use (no device here,
 * or rdmacm rejects): shm, next in its preference, carries the channel. */
static void test_fallback_foreign_verbs(void **state)
{
    run_fallback("shm,tcp", FB_FOREIGN_VERBS, "shm");
}

/* (b) shm's address cannot be reached (connect fails): tcp. */
static void test_fallback_unreachable(void **state)
{
    run_fallback("shm,tcp", FB_SHM_NOBODY, "tcp");
}

/* (b) shm connects, then its peer hangs up in the handshake: the sender
 * falls back under progress and tcp carries the channel. */
static void test_fallback_in_handshake(void **state)
{
    run_fallback("shm,tcp", FB_SHM_HANGUP, "tcp");
}

/* A stray connection that fails on the receiver's shm listener is dropped;
 * the listener goes on and the real sender still gets shm. */
static void test_fallback_receiver_keeps_listening(void **state)
{
    run_fallback("shm,tcp", FB_STRAY_FIRST, "shm");
}

/* (d) The token is checked on the backend fallen back to, and a refusal
 * ends the set-up on the first backend: both ends fail naming the token. */
static void test_fallback_wrong_token(void **state)
{
    const long cases[] = {FB_WRONG_TOKEN | FB_SHM_NOBODY, FB_WRONG_TOKEN};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pd_channel_config c = config(2, 4096);
        pd_channel *rx;
        pid_t pid;

        c.backends = "shm,tcp";
        pid = start(&c, fallback_child, cases[i], &rx, false);
        assert_int_equal(pd_channel_wait_connected(&rx, 1, -1), PD_ECOMM);
        assert_non_null(strstr(pd_last_error(), "failed to prove the job token"));
        finish(pid);
        pd_channel_close(rx);
    }
}

/* A real rdmacm reject (a port nobody listens on) falls back to tcp; the
 * verbs table runs it where RDMA works (the soft-RoCE VM). */
static void test_verbs_reject_falls_back(void **state)
{
    run_fallback("verbs,tcp", FB_VERBS_REJECT, "tcp");
}

/* (c) Every backend fails: one error naming each one's reason, at once
 * when they fail at once, and within the time their failures take. */
static void all_fail_child(const char *unused, long unused_arg)
{
    pd_channel_config c = config(2, 4096);
    char boot[64], verbs[128], addr[PD_TP_ADDRESS_BYTES], name[64];
    pd_channel *tx = NULL;
    int shm_fake, tcp_fake, port;
    int64_t t0;

    c.backends = "verbs,shm,tcp";
    boot_id(boot, sizeof(boot));
    foreign_verbs(verbs, sizeof(verbs));
    /* Each fails in connect. */
    snprintf(addr, sizeof(addr), "verbs:%s,shm:%s:pd-test-%d-nobody,tcp:127.0.0.1:1", verbs, boot, (int)getpid());
    t0 = now_ms();
    CHILD_CHECK(pd_channel_connect(&c, addr, &tx) == PD_ECOMM && tx == NULL);
    CHILD_CHECK(now_ms() - t0 < c.timeout_ms);
    fprintf(stderr, "# all fail in connect: %s\n", pd_last_error());
    CHILD_CHECK(strstr(pd_last_error(), "verbs: ") && strstr(pd_last_error(), "; shm: cannot connect") &&
                strstr(pd_last_error(), "; tcp: cannot connect"));
    /* shm fails in its handshake, under progress, and then tcp. */
    snprintf(name, sizeof(name), "pd-test-%d-fake", (int)getpid());
    shm_fake = fake_unix_listener(name);
    tcp_fake = fake_tcp_listener(&port);
    snprintf(addr, sizeof(addr), "shm:%s:%s,tcp:127.0.0.1:%d", boot, name, port);
    CHILD_CHECK(pd_channel_connect(&c, addr, &tx) == PD_OK);
    close(shm_fake);
    close(tcp_fake);
    t0 = now_ms();
    CHILD_CHECK(pd_channel_wait_connected(&tx, 1, -1) == PD_ECOMM);
    CHILD_CHECK(now_ms() - t0 < 1000);
    fprintf(stderr, "# all fail, shm in its handshake: %s\n", pd_last_error());
    CHILD_CHECK(strstr(pd_last_error(), "(shm: ") && strstr(pd_last_error(), "; tcp: cannot connect"));
    CHILD_CHECK(pd_channel_progress(tx) == PD_ECOMM); /* and it stays failed */
    pd_channel_close(tx);
}

static void stray_child(const char *address, long unused)
{
    stray(address, "shm");
    stray(address, "tcp");
}

static void test_fallback_all_fail(void **state)
{
    /* The sender's side, in a child (it makes listeners of its own). */
    finish(tp_peer_start(all_fail_child, "", 0, NULL));
    /* The receiver's side: every attempt (strays on shm and tcp) failed;
     * the set-up ends at its timeout, naming them. */
    pd_channel_config c = config(2, 4096);
    pd_channel *rx;
    int64_t t0 = now_ms();

    c.backends = "shm,tcp";
    c.timeout_ms = 1500;
    pid_t pid = start(&c, stray_child, 0, &rx, false);
    assert_int_equal(pd_channel_wait_connected(&rx, 1, -1), PD_ETIMEOUT);
    assert_true(now_ms() - t0 < 1500 + 1000);
    print_message("# receiver: %s\n", pd_last_error());
    assert_non_null(strstr(pd_last_error(), "nobody connected; failed: shm: "));
    assert_non_null(strstr(pd_last_error(), "; tcp: "));
    finish(pid);
    pd_channel_close(rx);
}

/* ---- helpers independent of backends ---- */

static void test_token_and_mac(void **state)
{
    pd_transport_token t;
    char hex[33];
    uint8_t key[16], msg[15];

    assert_int_equal(pd_transport_token_parse("00112233445566778899aabbccddeeff", &t), PD_OK);
    assert_int_equal(t.bytes[15], 0xff);
    pd_transport_token_format(&t, hex);
    assert_string_equal(hex, "00112233445566778899aabbccddeeff");
    assert_int_equal(pd_transport_token_parse("0011", &t), PD_EINVAL);
    assert_int_equal(pd_transport_token_parse("00112233445566778899aabbccddeefg", &t), PD_EINVAL);
    /* SipHash-2-4 reference vectors (key 00..0f, messages 00..n-1). */
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        msg[i] = (uint8_t)i;
    assert_true(pd_tp_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(pd_tp_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL);
}

static void test_bad_config(void **state)
{
    pd_channel_config c = config(0, 64);
    pd_channel *ch;

    assert_int_equal(pd_channel_listen(&c, &ch), PD_EINVAL);
    c = config(2, 64);
    c.token = NULL;
    assert_int_equal(pd_channel_listen(&c, &ch), PD_EINVAL);
    c = config(2, 64);
    c.backends = "carrier-pigeon";
    assert_int_equal(pd_channel_listen(&c, &ch), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "carrier-pigeon"));
    c = config(2, 64);
    c.memory = PD_TRANSPORT_DEVICE; /* without config.device */
    assert_int_equal(pd_channel_listen(&c, &ch), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "config.device"));
    c = config(2, 64);
    assert_int_equal(pd_channel_connect(&c, "tcp:127.0.0.1:1", &ch), PD_ECOMM); /* nobody listens */
}

/* Each case of the table runs once per backend, named after it; the setup
 * picks the backend and arms the watchdog. */
static int use_shm(void **state)
{
    backend = "shm";
    alarm(WATCHDOG_S * 2);
    return 0;
}

static int use_tcp(void **state)
{
    backend = "tcp";
    alarm(WATCHDOG_S * 2);
    return 0;
}

static int use_verbs(void **state)
{
    backend = "verbs";
    alarm(WATCHDOG_S * 2);
    return 0;
}

/* The fall-back cases mix backends; they name theirs. */
static int use_fallback(void **state)
{
    backend = "tcp";
    alarm(WATCHDOG_S * 2);
    return 0;
}

static int use_mpi(void **state)
{
    backend = "mpi";
    alarm(WATCHDOG_S * 2);
    return 0;
}

#define CASE(b, fn) {#b ": " #fn, fn, use_##b, NULL, NULL}
/* The cases every backend runs; a peer killed ends an MPI job instead. */
#define TABLE_SHARED(b)                                                                                              \
    CASE(b, test_ordering_and_wraparound), CASE(b, test_backpressure), CASE(b, test_large_messages),                \
        CASE(b, test_timeouts), CASE(b, test_bad_headers), CASE(b, test_wrong_token), CASE(b, test_wrong_shape),    \
        CASE(b, test_backend_choice), CASE(b, test_set_three_senders), CASE(b, test_set_wakes_on_any),              \
        CASE(b, test_set_timeouts), CASE(b, test_set_sender_credits)
#define TABLE(b)                                                                                                     \
    TABLE_SHARED(b), CASE(b, test_sender_killed), CASE(b, test_receiver_killed), CASE(b, test_streaming_spins)
#define FALLBACK_TABLE                                                                                               \
    CASE(fallback, test_fallback_verbs_cannot_listen), CASE(fallback, test_fallback_foreign_verbs),                 \
        CASE(fallback, test_fallback_unreachable), CASE(fallback, test_fallback_in_handshake),                      \
        CASE(fallback, test_fallback_receiver_keeps_listening), CASE(fallback, test_fallback_wrong_token),          \
        CASE(fallback, test_fallback_all_fail)

/* ---- under mpirun: the mpi table, rank 1 running the children ---- */

static void killed_child(const char *address, long unused)
{
    pd_channel_config c = config(2, 4096);
    pd_channel *tx = child_connect(address, &c);
    uint8_t b[4096] = {0};
    uint64_t seq;

    for (uint64_t i = 0; i < 5; i++) {
        pd_msg_tag tag = {.minibatch = i, .kind = PD_MSG_ACTIVATION};
        CHILD_CHECK(pd_channel_send(tx, b, sizeof(b), &tag, &seq) == PD_OK);
        CHILD_CHECK(pd_channel_send_wait(tx, seq, -1) == PD_OK);
    }
    fprintf(stderr, "# rank 1: sent 5 messages, dies now\n");
    raise(SIGKILL);
}

/* The receiver of a peer that dies: mpirun must end the job (the script
 * checks that it exits non-zero, in time); reaching the end is a failure. */
static void test_peer_killed(void **state)
{
    pd_channel_config c = config(2, 4096);
    pd_channel *rx;
    pd_channel_msg m;
    pid_t pid = start(&c, killed_child, 0, &rx, true);

    for (int i = 0; i < 5; i++) {
        assert_int_equal(pd_channel_recv_wait(rx, &m, -1), PD_OK);
        assert_int_equal(pd_channel_release(rx, &m), PD_OK);
    }
    print_message("# rank 0: received 5 messages, waits for the sixth\n");
    pd_status s = pd_channel_recv_wait(rx, &m, 20000);
    fail_msg("rank 0 still runs 20 s after its peer died (status %d: %s)", s, pd_last_error());
    (void)pid;
}

static const tp_child_fn children[] = {
    ordering_child, backpressure_child, large_child,         idle_child,          bad_header_child,
    wrong_token_child, wrong_shape_child, flood_child,       choice_child,        stream_member_child,
    set_member_child,  credit_member_child, killed_child,      fallback_child,      all_fail_child,
    stray_child,
};

#ifdef HAVE_MPI
/* Rank 0 runs the mpi table (or, with --peer-killed, the case of a dying
 * peer); rank 1 runs the children it starts. */
static int mpi_main(int argc, char **argv)
{
    static const struct CMUnitTest mpi[] = {CASE(mpi, test_set_misuse), TABLE_SHARED(mpi)};
    static const struct CMUnitTest killed[] = {CASE(mpi, test_peer_killed)};
    bool peer_killed = argc > 1 && strcmp(argv[1], "--peer-killed") == 0;
    int failed;

    backend = "mpi";
    if (!tp_peer_mpi_begin(&job_token))
        return 0; /* rank 1, done */
    if (peer_killed)
        failed = cmocka_run_group_tests_name("transport over mpi, peer killed", killed, NULL, NULL);
    else
        failed = cmocka_run_group_tests_name("transport over mpi", mpi, NULL, NULL);
    tp_peer_mpi_end();
    return failed;
}
#endif

/* Whether the table of backend `name` runs: it is built, $PD_TRANSPORT
 * (if set) lists it, and (verbs) this machine has an active RDMA port;
 * otherwise a '#' line says why it is left out. The fall-back cases name
 * their backends and run only when $PD_TRANSPORT picks none. */
static bool wanted(const char *name)
{
    const char *only = getenv("PD_TRANSPORT");
    char list[256], *save = NULL;
    bool listed = !only || !*only;

    if (strcmp(name, "fallback") == 0) {
        if (!listed)
            printf("# fallback: its cases mix backends; left out under PD_TRANSPORT=%s\n", only);
        return listed;
    }
    snprintf(list, sizeof(list), "%s", only ? only : "");
    for (char *t = strtok_r(list, ",", &save); t && !listed; t = strtok_r(NULL, ",", &save))
        listed = strcmp(t, name) == 0;
    if (!listed) {
        printf("# %s: not in PD_TRANSPORT=%s, its cases are left out\n", name, only);
        return false;
    }
    if (strcmp(name, "mpi") == 0) {
        printf("# mpi: its cases run under mpirun -np 2 (tests/integration/transport_mpi.sh)\n");
        return false;
    }
    if (strcmp(name, "verbs") == 0) {
#ifdef PD_TP_VERBS
        char ip[64];
        if (pd_vb_find_address(NULL, ip, sizeof(ip)) != PD_OK) {
            printf("# %s: the verbs cases are left out (tests/integration/verbs_vm.sh runs them)\n",
                   pd_last_error());
            return false;
        }
        printf("# verbs: RDMA device address %s\n", ip);
#else
        printf("# verbs: not built (no libibverbs/librdmacm); its cases are left out\n");
        return false;
#endif
    }
    return true;
}

int main(int argc, char **argv)
{
    static const struct CMUnitTest common[] = {
        {"test_token_and_mac", test_token_and_mac, use_tcp, NULL, NULL},
        {"test_bad_config", test_bad_config, use_tcp, NULL, NULL},
        {"test_set_misuse", test_set_misuse, use_tcp, NULL, NULL},
        {"test_spin_state", test_spin_state, use_tcp, NULL, NULL},
    };
    static const struct CMUnitTest shm[] = {TABLE(shm)}, tcp[] = {TABLE(tcp)};
    static const struct CMUnitTest verbs[] = {TABLE(verbs), CASE(verbs, test_verbs_reject_falls_back)};
    static const struct CMUnitTest mpi[] = {TABLE(mpi)}, fallback[] = {FALLBACK_TABLE};
    static const struct {
        const char *name;
        const struct CMUnitTest *cases;
        size_t n;
#define GROUP(name, cases) {name, cases, sizeof(cases) / sizeof(cases[0])}
    } groups[] = {GROUP("", common),       GROUP("shm", shm), GROUP("tcp", tcp),
                  GROUP("verbs", verbs),   GROUP("mpi", mpi), GROUP("fallback", fallback)};
#define COUNT(cases) (sizeof(cases) / sizeof(cases[0]))
    struct CMUnitTest
        tests[COUNT(common) + COUNT(shm) + COUNT(tcp) + COUNT(verbs) + COUNT(mpi) + COUNT(fallback)];
    size_t n = 0;

    signal(SIGPIPE, SIG_IGN);
    if (pd_transport_token_generate(&job_token) != PD_OK)
        return 1;
    tp_peer_init(children, (int)(sizeof(children) / sizeof(children[0])));
#ifdef HAVE_MPI
    if (tp_peer_under_mpirun())
        return mpi_main(argc, argv);
#endif
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
        if (*groups[g].name && !wanted(groups[g].name))
            continue;
        memcpy(tests + n, groups[g].cases, groups[g].n * sizeof(tests[0]));
        n += groups[g].n;
    }
    fflush(stdout);
    return _cmocka_run_group_tests("transport", tests, n, NULL, NULL);
}
