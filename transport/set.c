/* Channel sets: one thread progresses all of a rank's channels and sleeps
 * until any of them has an event. Sleeping is one poll over what each
 * backend offers (shm: the eventfd its peer writes once it sees the sleep
 * announced, and the liveness socket; tcp: the socket) plus the set's own
 * eventfd, which pd_channel_set_wake() and sends posted by other threads
 * write. Events are edges against what the set saw last time. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/transport_int.h"

#define SLICE_MS 100 /* a sleep's bound: set-up deadlines are noticed in time */
#define SETUP_POLL_MS 2 /* a receiver nobody has connected to yet has no descriptor */

/* What the set last saw of a channel. */
typedef struct seen {
    bool ready, closed, failed;
    uint64_t arrived, done;
} seen;

struct pd_channel_set {
    int n;
    pd_channel **chs; /* NULL where a channel was closed */
    seen *seen;
    unsigned *events;
    bool *armed;
    struct pollfd *fds; /* the set's eventfd, then PD_TP_WAIT_FDS per channel */
    int efd;
    _Atomic int sleeping;
    _Atomic bool wake_requested;
};

pd_status pd_channel_set_create(pd_channel *const *chs, int n, pd_channel_set **out)
{
    pd_channel_set *set;
    pd_status s;

    if (!chs || n < 1)
        return PD_ERROR(PD_EINVAL, "channel set: needs at least one channel");
    for (int i = 0; i < n; i++) {
        if (!chs[i])
            return PD_ERROR(PD_EINVAL, "channel set: channel %d is NULL", i);
        for (int j = 0; j < i; j++)
            if (chs[j] == chs[i])
                return PD_ERROR(PD_EINVAL, "channel set: channel %u is given twice", chs[i]->config.channel_id);
        if (chs[i]->set)
            return PD_ERROR(PD_ESTATE, "channel set: channel %u already belongs to a set", chs[i]->config.channel_id);
    }
    set = calloc(1, sizeof(*set));
    if (!set)
        return PD_ERROR(PD_ENOMEM, "channel set: out of host memory");
    set->n = n;
    set->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    set->chs = calloc((size_t)n, sizeof(*set->chs));
    set->seen = calloc((size_t)n, sizeof(*set->seen));
    set->events = calloc((size_t)n, sizeof(*set->events));
    set->armed = calloc((size_t)n, sizeof(*set->armed));
    set->fds = calloc(1 + (size_t)n * PD_TP_WAIT_FDS, sizeof(*set->fds));
    if (set->efd < 0) {
        s = PD_ERROR(PD_ECOMM, "channel set: eventfd: %s", strerror(errno));
        goto fail;
    }
    if (!set->chs || !set->seen || !set->events || !set->armed || !set->fds) {
        s = PD_ERROR(PD_ENOMEM, "channel set: out of host memory for %d channels", n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&chs[i]->lock);
        chs[i]->set = set;
        set->chs[i] = chs[i];
        pthread_mutex_unlock(&chs[i]->lock);
    }
    *out = set;
    return PD_OK;
fail:
    pd_channel_set_destroy(set);
    return s;
}

void pd_channel_set_destroy(pd_channel_set *set)
{
    if (!set)
        return;
    for (int i = 0; set->chs && i < set->n; i++) {
        if (!set->chs[i])
            continue;
        pthread_mutex_lock(&set->chs[i]->lock);
        set->chs[i]->set = NULL;
        pthread_mutex_unlock(&set->chs[i]->lock);
    }
    if (set->efd >= 0)
        close(set->efd);
    free(set->chs);
    free(set->seen);
    free(set->events);
    free(set->armed);
    free(set->fds);
    free(set);
}

void pd_tp_set_forget(pd_channel_set *set, const pd_channel *ch)
{
    for (int i = 0; i < set->n; i++)
        if (set->chs[i] == ch)
            set->chs[i] = NULL;
}

void pd_channel_set_wake(pd_channel_set *set)
{
    uint64_t one = 1;
    ssize_t n;

    atomic_store(&set->wake_requested, true);
    n = write(set->efd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero, the set wakes anyway */
}

void pd_tp_set_notify(pd_channel_set *set)
{
    uint64_t one = 1;
    ssize_t n;

    if (atomic_load(&set->sleeping)) {
        n = write(set->efd, &one, sizeof(one));
        (void)n;
    }
}

/* Compares the channel with what the set saw last and remembers it. */
static unsigned look(pd_channel *ch, seen *last)
{
    unsigned ev = 0;

    pthread_mutex_lock(&ch->lock);
    if (ch->ready && !last->ready)
        ev |= PD_CHANNEL_EV_CONNECTED;
    if (ch->role == PD_TP_RECEIVER && ch->arrived > last->arrived && ch->taken < ch->arrived)
        ev |= PD_CHANNEL_EV_MESSAGE;
    if (ch->role == PD_TP_SENDER && ch->done > last->done)
        ev |= PD_CHANNEL_EV_SENT;
    if (ch->peer_closed && !last->closed)
        ev |= PD_CHANNEL_EV_CLOSED;
    if (ch->failure != PD_OK && !last->failed)
        ev |= PD_CHANNEL_EV_FAILED;
    *last = (seen){.ready = ch->ready, .closed = ch->peer_closed, .failed = ch->failure != PD_OK,
                   .arrived = ch->arrived, .done = ch->done};
    pthread_mutex_unlock(&ch->lock);
    return ev;
}

pd_status pd_channel_set_progress(pd_channel_set *set, int *active)
{
    pd_status first = PD_OK;
    char message[512] = "";
    int count = 0;

    for (int i = 0; i < set->n; i++) {
        pd_channel *ch = set->chs[i];
        pd_status s;

        set->events[i] = 0;
        if (!ch)
            continue;
        s = pd_channel_progress(ch);
        set->events[i] = look(ch, &set->seen[i]);
        count += set->events[i] != 0;
        if (s != PD_OK && first == PD_OK) {
            first = s;
            snprintf(message, sizeof(message), "%s", pd_last_error());
        }
    }
    if (active)
        *active = count;
    return first == PD_OK ? PD_OK : pd_error_at(__FILE__, __LINE__, first, "%s", message);
}

/* One sleep of at most ms: every live channel announces it and names its
 * descriptors; a channel that already has work (or none to sleep on) cuts
 * the sleep short. */
static void sleep_once(pd_channel_set *set, int ms)
{
    int nfds = 1, poll_ms = ms < SLICE_MS ? ms : SLICE_MS;
    uint64_t drained;
    ssize_t r;

    set->fds[0] = (struct pollfd){.fd = set->efd, .events = POLLIN};
    atomic_store(&set->sleeping, 1);
    for (int i = 0; i < set->n; i++) {
        pd_channel *ch = set->chs[i];
        int ch_ms = -1;

        set->armed[i] = false;
        if (!ch)
            continue;
        pthread_mutex_lock(&ch->lock);
        if (ch->failure != PD_OK) {
            /* nothing more will happen on it */
        } else if (!ch->backend) {
            ch_ms = SETUP_POLL_MS;
        } else {
            nfds += ch->ops.wait_arm(ch, set->fds + nfds, &ch_ms);
            set->armed[i] = true;
        }
        pthread_mutex_unlock(&ch->lock);
        if (ch_ms >= 0 && ch_ms < poll_ms)
            poll_ms = ch_ms;
    }
    if (poll_ms > 0 && !atomic_load(&set->wake_requested))
        (void)poll(set->fds, (nfds_t)nfds, poll_ms);
    atomic_store(&set->sleeping, 0);
    r = read(set->efd, &drained, sizeof(drained));
    (void)r;
    for (int i = 0; i < set->n; i++) {
        if (!set->armed[i] || !set->chs[i])
            continue;
        pthread_mutex_lock(&set->chs[i]->lock);
        set->chs[i]->ops.wait_disarm(set->chs[i]);
        pthread_mutex_unlock(&set->chs[i]->lock);
    }
}

pd_status pd_channel_set_wait(pd_channel_set *set, int timeout_ms, int *active)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : pd_tp_now_ns() + (int64_t)timeout_ms * 1000000;
    int count = 0;

    for (;;) {
        int64_t now, left_ms;

        PD_CHECK(pd_channel_set_progress(set, &count));
        if (count > 0 || atomic_exchange(&set->wake_requested, false)) {
            if (active)
                *active = count;
            return PD_OK;
        }
        now = pd_tp_now_ns();
        if (now >= deadline)
            return PD_ERROR(PD_ETIMEOUT, "channel set of %d: no event within %d ms", set->n, timeout_ms);
        left_ms = deadline == INT64_MAX ? SLICE_MS : (deadline - now + 999999) / 1000000;
        sleep_once(set, (int)(left_ms < SLICE_MS ? left_ms : SLICE_MS));
    }
}

unsigned pd_channel_set_events(const pd_channel_set *set, int i)
{
    return i >= 0 && i < set->n ? set->events[i] : 0;
}
