/* Channels: configuration, backend choice (first that connects wins), the
 * posted-send queue, in-place receive and release, waiting and failure. The
 * backends move bytes; everything they have in common lives here. */
#include "config.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream/log.h>

#include "transport/transport_int.h"

#define DEFAULT_TIMEOUT_MS 10000
#define WAIT_SLICE_MS 100

static const pd_tp_backend *const compiled[] = {
    &pd_tp_backend_shm,
#ifdef PD_TP_VERBS
    &pd_tp_backend_verbs,
#endif
#ifdef HAVE_MPI
    &pd_tp_backend_mpi,
#endif
    &pd_tp_backend_tcp,
};
static const char *const compiled_names[] = {
    "shm",
#ifdef PD_TP_VERBS
    "verbs",
#endif
#ifdef HAVE_MPI
    "mpi",
#endif
    "tcp",
};
#define COMPILED_COUNT ((int)(sizeof(compiled) / sizeof(compiled[0])))

/* Names a user may write, built or not. */
static const char *const known_names[] = {"verbs", "shm", "mpi", "tcp"};

int pd_transport_backends(const char *const **names)
{
    *names = compiled_names;
    return COMPILED_COUNT;
}

const pd_tp_backend *pd_tp_backend_find(const char *name)
{
    for (int i = 0; i < COMPILED_COUNT; i++)
        if (strcmp(compiled[i]->name, name) == 0)
            return compiled[i];
    return NULL;
}

int64_t pd_tp_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pd_status pd_tp_fail(pd_channel *ch, pd_status status)
{
    if (ch->failure == PD_OK) {
        ch->failure = status;
        snprintf(ch->failure_message, sizeof(ch->failure_message), "%s", pd_last_error());
        PD_LOG_DEBUGF("channel %u failed: %s", ch->config.channel_id, ch->failure_message);
    }
    return status;
}

pd_status pd_tp_refuse(pd_channel *ch, pd_status status)
{
    ch->refused = true;
    return status;
}

int pd_tp_setup_left_ms(const pd_channel *ch)
{
    int64_t left = (ch->setup_deadline_ns - pd_tp_now_ns()) / 1000000;

    return left < 1 ? 1 : left > INT_MAX ? INT_MAX : (int)left;
}

/* The stored failure, recorded again for the calling thread. */
static pd_status failed(const pd_channel *ch)
{
    return pd_error_at(__FILE__, __LINE__, ch->failure, "%s", ch->failure_message);
}

/* The preference list: config, $PD_TRANSPORT, or every compiled backend
 * (then *chosen, nullable, is false: nobody named the backends). */
static pd_status parse_preference(const pd_channel_config *config, const pd_tp_backend **out, int *count,
                                  bool *chosen)
{
    const char *list = config->backends ? config->backends : getenv("PD_TRANSPORT");
    char copy[256], *save = NULL;
    int n = 0;

    if (chosen)
        *chosen = list && *list;
    if (!list || !*list) {
        for (int i = 0; i < COMPILED_COUNT; i++)
            out[i] = compiled[i];
        *count = COMPILED_COUNT;
        return PD_OK;
    }
    if (strlen(list) >= sizeof(copy))
        return PD_ERROR(PD_EINVAL, "transport backends '%s': too long", list);
    strcpy(copy, list);
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        bool known = false;
        const pd_tp_backend *b = pd_tp_backend_find(name);

        for (size_t i = 0; i < sizeof(known_names) / sizeof(known_names[0]); i++)
            known |= strcmp(known_names[i], name) == 0;
        if (!known)
            return PD_ERROR(PD_EINVAL, "transport backends '%s': unknown backend '%s' (expected verbs, shm, mpi, tcp)",
                            list, name);
        if (!b) {
            PD_LOG_DEBUGF("transport backend '%s' is not built in; skipped", name);
            continue;
        }
        for (int i = 0; i < n; i++)
            if (out[i] == b)
                b = NULL;
        if (b && n < PD_TP_MAX_BACKENDS)
            out[n++] = b;
    }
    if (n == 0) {
        char built[64] = "";
        for (int i = 0; i < COMPILED_COUNT; i++)
            snprintf(built + strlen(built), sizeof(built) - strlen(built), "%s%s", i ? ", " : "", compiled_names[i]);
        return PD_ERROR(PD_ENOTSUP, "transport backends '%s': none of them is built in (built: %s)", list, built);
    }
    *count = n;
    return PD_OK;
}

static pd_status check_config(const pd_channel_config *c)
{
    if (!c || !c->token)
        return PD_ERROR(PD_EINVAL, "channel: a job token is required");
    if (c->depth < 1 || c->depth > PD_TP_MAX_DEPTH)
        return PD_ERROR(PD_EINVAL, "channel %u: depth %d is out of range [1, %d]", c->channel_id, c->depth,
                        PD_TP_MAX_DEPTH);
    if (c->slot_bytes < 1 || c->slot_bytes > PD_TP_MAX_SLOT_BYTES)
        return PD_ERROR(PD_EINVAL, "channel %u: slot_bytes %zu is out of range [1, 4 GiB]", c->channel_id,
                        c->slot_bytes);
    return pd_tp_slots_check(c);
}

static pd_status channel_new(const pd_channel_config *config, pd_tp_role role, pd_channel **out)
{
    pd_channel *ch;
    pd_status s;
    size_t need = sizeof(pd_tp_header) + config->slot_bytes;
    int spin_us;

    PD_CHECK(check_config(config));
    PD_CHECK(pd_tp_spin_cap_us(config, &spin_us)); /* checks it too */
    ch = calloc(1, sizeof(*ch));
    if (!ch)
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", config->channel_id);
    pthread_mutex_init(&ch->lock, NULL);
    ch->role = role;
    ch->config = *config;
    ch->token = *config->token;
    ch->config.token = &ch->token;
    ch->config.backends = NULL; /* not kept: the caller's string */
    ch->config.host = NULL;
    if (ch->config.timeout_ms <= 0)
        ch->config.timeout_ms = DEFAULT_TIMEOUT_MS;
    ch->setup_deadline_ns = pd_tp_now_ns() + (int64_t)ch->config.timeout_ms * 1000000;
    ch->config.spin_us = spin_us;
    pd_tp_spin_init(&ch->spin, spin_us);
    ch->ring_fd = -1;
    /* Big slots start on a page (fast copies, DMA); small ones on a line. */
    ch->stride = need >= PD_TP_PAGE ? (need + PD_TP_PAGE - 1) / PD_TP_PAGE * PD_TP_PAGE : (need + 63) / 64 * 64;
    pd_tp_ops_overlay(&ch->ops, NULL);
    if (role == PD_TP_SENDER)
        ch->sendq = calloc((size_t)config->depth, sizeof(*ch->sendq));
    else
        ch->arrived_headers = calloc((size_t)config->depth, sizeof(*ch->arrived_headers));
    if (!ch->sendq && !ch->arrived_headers) {
        free(ch);
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", config->channel_id);
    }
    s = pd_tp_slots_open(ch);
    if (s != PD_OK) {
        pd_channel_close(ch);
        return s;
    }
    *out = ch;
    return PD_OK;
}

static void use_backend(pd_channel *ch, const pd_tp_backend *b)
{
    ch->backend = b;
    pd_tp_ops_overlay(&ch->ops, b->ops);
}

/* Appends "<backend>: <why>" to ch->attempts and puts `why` in why[size]:
 * the failure's message without what the summary repeats (its "channel
 * N: " and "<backend>: " prefixes and its source locations). */
static void note_attempt(pd_channel *ch, const char *backend, const char *message, char *why, size_t size)
{
    char prefix[32];
    size_t len, used = strlen(ch->attempts), blen = strlen(backend);

    snprintf(prefix, sizeof(prefix), "channel %u: ", ch->config.channel_id);
    if (strncmp(message, prefix, strlen(prefix)) == 0)
        message += strlen(prefix);
    if (strncmp(message, backend, blen) == 0 && message[blen] == ':' && message[blen + 1] == ' ')
        message += blen + 2;
    len = strlen(message);
    for (;;) { /* " (file.c:123)", perhaps several */
        const char *open = len ? memchr(message, '(', len) : NULL, *last = NULL;
        for (; open; open = memchr(open + 1, '(', len - (size_t)(open + 1 - message)))
            last = open;
        if (!last || last == message || last[-1] != ' ' || message[len - 1] != ')' ||
            !memmem(last, len - (size_t)(last - message), ".c:", 3))
            break;
        len = (size_t)(last - 1 - message);
    }
    snprintf(why, size, "%.*s", (int)len, message);
    if (used < sizeof(ch->attempts))
        snprintf(ch->attempts + used, sizeof(ch->attempts) - used, "%s%s: %s", used ? "; " : "", backend, why);
}

pd_status pd_channel_listen(const pd_channel_config *config, pd_channel **out)
{
    const pd_tp_backend *pref[PD_TP_MAX_BACKENDS];
    int npref;
    bool chosen;
    pd_channel *ch;
    pd_status s;
    size_t used = 0;

    PD_CHECK(check_config(config));
    PD_CHECK(parse_preference(config, pref, &npref, &chosen));
    PD_CHECK(channel_new(config, PD_TP_RECEIVER, &ch));
    PD_CHECK_GOTO(pd_tp_ring_create(ch), s, fail);
    for (int i = 0; i < npref; i++) {
        char part[PD_TP_ADDRESS_BYTES], why[PD_TP_REASON_BYTES];
        pd_tp_ops ops;
        void *listener = NULL;

        pd_tp_ops_overlay(&ops, pref[i]->ops);
        /* The caller's host is needed by tcp's listen; keep it for the call. */
        ch->config.host = config->host;
        s = ops.listen(ch, &listener, part, sizeof(part));
        ch->config.host = NULL;
        if (s == PD_OK && used + strlen(part) + 2 > sizeof(ch->address)) {
            ops.unlisten(listener);
            s = PD_ERROR(PD_ENOTSUP, "%s: its address does not fit beside the others", pref[i]->name);
        }
        if (s != PD_OK) {
            note_attempt(ch, pref[i]->name, pd_last_error(), why, sizeof(why));
            /* A backend the user named and cannot have is worth a line. */
            if (chosen)
                PD_LOG_INFOF("channel %u: %s skipped, it cannot listen here: %s", config->channel_id,
                             pref[i]->name, why);
            else
                PD_LOG_DEBUGF("channel %u: %s cannot listen here: %s", config->channel_id, pref[i]->name, why);
            continue;
        }
        used += (size_t)snprintf(ch->address + used, sizeof(ch->address) - used, "%s%s", used ? "," : "", part);
        ch->listener_backend[ch->listener_count] = pref[i];
        ch->listener[ch->listener_count++] = listener;
    }
    if (ch->listener_count == 0) {
        s = PD_ERROR(PD_ECOMM, "channel %u: no transport backend can listen here (%s)", config->channel_id,
                     ch->attempts);
        goto fail;
    }
    ch->attempts[0] = '\0'; /* from here on: senders' attempts */
    *out = ch;
    return PD_OK;
fail:
    pd_channel_close(ch);
    return s;
}

const char *pd_channel_address(const pd_channel *ch) { return ch->address; }

const char *pd_channel_backend(const pd_channel *ch) { return ch->backend ? ch->backend->name : "none"; }

int pd_channel_spin_us(pd_channel *ch)
{
    int us;

    pthread_mutex_lock(&ch->lock);
    us = ch->ops.poll && ch->config.spin_us > 0 ? ch->config.spin_us : 0; /* no poll before a backend */
    pthread_mutex_unlock(&ch->lock);
    return us;
}

pd_slot_path pd_channel_slot_path(pd_channel *ch)
{
    pd_slot_path path;

    pthread_mutex_lock(&ch->lock);
    path = ch->slot_path;
    pthread_mutex_unlock(&ch->lock);
    return path;
}

/* The part of `address` for backend `name` ("tcp:h:p" -> "h:p"), or NULL. */
static const char *address_part(const char *address, const char *name, char *buf, size_t size)
{
    size_t nlen = strlen(name);

    for (const char *p = address; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        size_t len = strcspn(p, ",");
        if (len > nlen && strncmp(p, name, nlen) == 0 && p[nlen] == ':' && len - nlen - 1 < size) {
            memcpy(buf, p + nlen + 1, len - nlen - 1);
            buf[len - nlen - 1] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* Sender: backend b failed to connect with status s (its message
 * recorded): noted for the final error, and, when another backend is
 * tried next, said in one line (quietly when b does not apply to this
 * peer, e.g. shm to another node). */
static void connect_failed(pd_channel *ch, const pd_tp_backend *b, pd_status s)
{
    char why[PD_TP_REASON_BYTES];

    note_attempt(ch, b->name, pd_last_error(), why, sizeof(why));
    ch->setup_status = s == PD_EINVAL && ch->setup_status != PD_ECOMM ? PD_EINVAL : PD_ECOMM;
    if (ch->refused || ch->next_candidate >= ch->candidates)
        return;
    if (s == PD_ENOTSUP)
        PD_LOG_DEBUGF("channel %u: %s does not apply: %s", ch->config.channel_id, b->name, why);
    else
        PD_LOG_WARNF("channel %u: %s failed, trying %s: %s", ch->config.channel_id, b->name,
                     ch->candidate[ch->next_candidate]->name, why);
}

/* Sender: connects through the next candidate that can; when none is
 * left, one failure naming every backend's reason: PD_ECOMM (PD_EINVAL
 * when every part of the address was malformed, PD_ETIMEOUT once the
 * set-up deadline passed). */
static pd_status connect_next(pd_channel *ch)
{
    while (ch->next_candidate < ch->candidates && pd_tp_now_ns() < ch->setup_deadline_ns) {
        const pd_tp_backend *b = ch->candidate[ch->next_candidate++];
        char part[PD_TP_ADDRESS_BYTES];
        pd_tp_ops ops;
        pd_status s;

        address_part(ch->peer_address, b->name, part, sizeof(part));
        pd_tp_ops_overlay(&ops, b->ops);
        s = ops.connect(ch, part);
        if (s == PD_OK) {
            use_backend(ch, b);
            return PD_OK;
        }
        connect_failed(ch, b, s);
    }
    if (pd_tp_now_ns() >= ch->setup_deadline_ns)
        return PD_ERROR(PD_ETIMEOUT, "channel %u: no backend connected within %d ms (%s)", ch->config.channel_id,
                        ch->config.timeout_ms, *ch->attempts ? ch->attempts : "no time left to try one");
    return PD_ERROR(ch->setup_status, "channel %u: no backend connects to the peer (%s)", ch->config.channel_id,
                    ch->attempts);
}

/* Sender: the backend in use failed before the handshake completed (not
 * a refusal): it is closed, with anything of it the channel held, and the
 * next candidate is tried. */
static pd_status fall_back(pd_channel *ch, pd_status s)
{
    connect_failed(ch, ch->backend, s);
    ch->ops.close(ch);
    ch->backend = NULL;
    ch->be = NULL;
    pd_tp_ops_overlay(&ch->ops, NULL);
    pd_tp_ring_destroy(ch); /* an shm attempt's mapping of the receiver's ring */
    ch->peer_closed = false;
    return connect_next(ch);
}

pd_status pd_channel_connect(const pd_channel_config *config, const char *address, pd_channel **out)
{
    const pd_tp_backend *pref[PD_TP_MAX_BACKENDS];
    int npref;
    pd_channel *ch;
    pd_status s;

    PD_CHECK(check_config(config));
    if (!address || !*address)
        return PD_ERROR(PD_EINVAL, "channel %u: no peer address", config->channel_id);
    if (strlen(address) >= PD_TP_ADDRESS_BYTES)
        return PD_ERROR(PD_EINVAL, "channel %u: a peer address of %zu bytes (at most %d)", config->channel_id,
                        strlen(address), PD_TP_ADDRESS_BYTES - 1);
    PD_CHECK(parse_preference(config, pref, &npref, NULL));
    PD_CHECK(channel_new(config, PD_TP_SENDER, &ch));
    strcpy(ch->peer_address, address);
    for (int i = 0; i < npref; i++) {
        char part[PD_TP_ADDRESS_BYTES];

        if (address_part(address, pref[i]->name, part, sizeof(part)))
            ch->candidate[ch->candidates++] = pref[i];
        else
            PD_LOG_DEBUGF("channel %u: the receiver offers no %s", config->channel_id, pref[i]->name);
    }
    if (ch->candidates == 0) {
        s = PD_ERROR(PD_ECOMM, "channel %u: address '%s' offers none of the backends allowed here",
                     config->channel_id, address);
        goto fail;
    }
    PD_CHECK_GOTO(connect_next(ch), s, fail);
    *out = ch;
    return PD_OK;
fail:
    pd_channel_close(ch);
    return s;
}

void pd_channel_close(pd_channel *ch)
{
    if (!ch)
        return;
    if (ch->set)
        pd_tp_set_forget(ch->set, ch);
    if (ch->spin.spins)
        PD_LOG_DEBUGF("channel %u: %llu blocking waits spun, %llu of them until done; %u seconds without "
                      "spinning (a shared core)", ch->config.channel_id, (unsigned long long)ch->spin.spins,
                      (unsigned long long)ch->spin.hits, ch->spin.quiets);
    if (ch->backend)
        ch->ops.close(ch);
    for (int i = 0; i < ch->listener_count; i++) {
        pd_tp_ops ops;
        pd_tp_ops_overlay(&ops, ch->listener_backend[i]->ops);
        ops.unlisten(ch->listener[i]);
    }
    pd_tp_ring_destroy(ch);
    pd_tp_slots_close(ch);
    free(ch->sendq);
    free(ch->arrived_headers);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

/* Receiver: a sender's attempt through listener i failed, not with a
 * refusal (it went away mid-handshake, e.g. to try its next backend, or
 * was no pipedream sender): the attempt is dropped, the listener goes on.
 * The first failure of a listener is noted and said in one line. */
static void attempt_failed(pd_channel *ch, int i)
{
    const char *name = ch->listener_backend[i]->name;
    char why[PD_TP_REASON_BYTES];

    ch->peer_closed = false; /* that sender's, not the channel's */
    if (ch->listener_failures[i]++ > 0) {
        PD_LOG_DEBUGF("channel %u: a sender's %s attempt failed: %s", ch->config.channel_id, name, pd_last_error());
        return;
    }
    note_attempt(ch, name, pd_last_error(), why, sizeof(why));
    PD_LOG_INFOF("channel %u: a sender's %s attempt failed, still listening: %s", ch->config.channel_id, name, why);
}

/* Receiver: once a listener has proven a peer, it becomes the backend and
 * the other listeners close (nothing was exposed through them). */
static pd_status accept_locked(pd_channel *ch)
{
    for (int i = 0; i < ch->listener_count && !ch->backend; i++) {
        pd_tp_ops ops;
        pd_status s;

        pd_tp_ops_overlay(&ops, ch->listener_backend[i]->ops);
        s = ops.accept(ch, ch->listener[i]);
        if (s != PD_OK && ch->refused)
            return s;
        if (s != PD_OK)
            attempt_failed(ch, i);
        else if (ch->be)
            use_backend(ch, ch->listener_backend[i]);
    }
    if (ch->backend) {
        for (int i = 0; i < ch->listener_count; i++) {
            pd_tp_ops ops;
            pd_tp_ops_overlay(&ops, ch->listener_backend[i]->ops);
            ops.unlisten(ch->listener[i]);
        }
        ch->listener_count = 0;
    }
    return PD_OK;
}

static pd_status progress_locked(pd_channel *ch)
{
    pd_status s;

    if (ch->failure != PD_OK)
        return failed(ch);
    if (!ch->backend) {
        s = accept_locked(ch);
        if (s != PD_OK)
            return pd_tp_fail(ch, s);
    }
    if (ch->backend) {
        s = ch->ops.progress(ch);
        /* A sender not connected yet tries its next backend. */
        if (s != PD_OK && ch->role == PD_TP_SENDER && !ch->ready && !ch->refused)
            s = fall_back(ch, s);
        if (s != PD_OK)
            return pd_tp_fail(ch, s);
        if (ch->ready)
            pd_tp_slots_choose(ch);
    }
    if (!ch->ready && pd_tp_now_ns() > ch->setup_deadline_ns)
        return pd_tp_fail(ch, PD_ERROR(PD_ETIMEOUT, "channel %u: no authenticated peer within %d ms (%s%s%s%s)",
                                       ch->config.channel_id, ch->config.timeout_ms,
                                       ch->backend ? "handshake unfinished over " : "nobody connected",
                                       ch->backend ? ch->backend->name : "", *ch->attempts ? "; failed: " : "",
                                       ch->attempts));
    if (ch->peer_closed && ch->role == PD_TP_SENDER && ch->done < ch->posted)
        return pd_tp_fail(ch, PD_ERROR(PD_ECOMM, "channel %u: the receiver went away with %llu sends outstanding",
                                       ch->config.channel_id, (unsigned long long)(ch->posted - ch->done)));
    return PD_OK;
}

pd_status pd_channel_progress(pd_channel *ch)
{
    pd_status s;

    pthread_mutex_lock(&ch->lock);
    s = progress_locked(ch);
    pthread_mutex_unlock(&ch->lock);
    return s;
}

bool pd_channel_connected(pd_channel *ch)
{
    bool ready;

    pthread_mutex_lock(&ch->lock);
    ready = ch->ready && ch->failure == PD_OK;
    pthread_mutex_unlock(&ch->lock);
    return ready;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Sleeps (lock released) until the backend may have work, at most ms.
 * Until the handshake completes the backend may still change (a sender's
 * fall-back, under another thread's progress), so its state is not
 * touched without the lock: set-up polls. */
static void wait_unlocked(pd_channel *ch, int ms)
{
    if (!ch->backend || !ch->ready) {
        pthread_mutex_unlock(&ch->lock);
        sleep_ms(ms < 2 ? ms : 2);
        pthread_mutex_lock(&ch->lock);
        return;
    }
    pthread_mutex_unlock(&ch->lock);
    (void)ch->ops.wait(ch, ms);
    pthread_mutex_lock(&ch->lock);
}

pd_status pd_channel_wait_connected(pd_channel *const *chs, int n, int timeout_ms)
{
    int64_t deadline = timeout_ms >= 0 ? pd_tp_now_ns() + (int64_t)timeout_ms * 1000000 : INT64_MAX;

    for (;;) {
        int pending = -1;

        for (int i = 0; i < n; i++) {
            PD_CHECK(pd_channel_progress(chs[i]));
            if (!pd_channel_connected(chs[i]))
                pending = i;
        }
        if (pending < 0)
            return PD_OK;
        if (pd_tp_now_ns() > deadline)
            return PD_ERROR(PD_ETIMEOUT, "channel %u: not connected within %d ms", chs[pending]->config.channel_id,
                            timeout_ms);
        if (n == 1) {
            pthread_mutex_lock(&chs[0]->lock);
            wait_unlocked(chs[0], 10);
            pthread_mutex_unlock(&chs[0]->lock);
        } else {
            sleep_ms(1);
        }
    }
}

/* Polls the backend from `start` (lock released between looks, a yield
 * each, so that a peer on the same core runs) until done(ch, arg), the
 * peer left, `until`, or the spin state finds this thread's core shared.
 * Nothing is armed for a sleep: a stream's messages raise no wake-ups
 * while this end keeps up. */
static pd_status spin(pd_channel *ch, bool (*done)(pd_channel *, uint64_t), uint64_t arg, int64_t start,
                      int64_t until)
{
    int64_t last = start;

    if (!ch->ops.poll || !ch->ready || ch->failure != PD_OK)
        return PD_OK;
    for (;;) {
        pd_status s = ch->ops.poll(ch);
        int64_t now;

        if (s != PD_OK)
            return pd_tp_fail(ch, s);
        if (done(ch, arg) || ch->peer_closed || (now = pd_tp_now_ns()) >= until)
            return PD_OK;
        /* The time since the last look: a poll and a yield, or a preemption. */
        if (!pd_tp_spin_account(&ch->spin, now - last, now))
            return PD_OK; /* the core is shared: sleep instead */
        last = now;
        pthread_mutex_unlock(&ch->lock);
        sched_yield();
        pthread_mutex_lock(&ch->lock);
        if (ch->failure != PD_OK)
            return failed(ch);
    }
}

/* Progresses and sleeps until done(ch, arg) holds; PD_ETIMEOUT after
 * timeout_ms, PD_ECOMM if the peer went away while waiting. While the
 * channel streams, spins first (spin.c). */
static pd_status wait_for(pd_channel *ch, bool (*done)(pd_channel *, uint64_t), uint64_t arg, int timeout_ms,
                          const char *what)
{
    int64_t start = pd_tp_now_ns(), deadline, until = pd_tp_spin_until(&ch->spin, start);

    if (timeout_ms < 0)
        timeout_ms = ch->config.timeout_ms;
    deadline = start + (int64_t)timeout_ms * 1000000;
    if (until > deadline)
        until = deadline;
    if (until) {
        ch->spin.spins++;
        PD_CHECK(spin(ch, done, arg, start, until));
        if (done(ch, arg)) {
            ch->spin.hits++;
            return PD_OK;
        }
    }
    for (;;) {
        int64_t left;

        PD_CHECK(progress_locked(ch));
        if (done(ch, arg))
            return PD_OK;
        if (ch->peer_closed)
            return pd_tp_fail(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer went away while waiting for %s",
                                           ch->config.channel_id, what));
        left = (deadline - pd_tp_now_ns()) / 1000000;
        if (left <= 0)
            return PD_ERROR(PD_ETIMEOUT, "channel %u (%s): no %s within %d ms", ch->config.channel_id,
                            pd_channel_backend(ch), what, timeout_ms);
        wait_unlocked(ch, left < WAIT_SLICE_MS ? (int)left + 1 : WAIT_SLICE_MS);
    }
}

pd_status pd_channel_send(pd_channel *ch, const void *data, size_t bytes, const pd_msg_tag *tag, uint64_t *seq)
{
    pd_status s = PD_OK;
    pd_tp_send *q;

    pthread_mutex_lock(&ch->lock);
    if (ch->role != PD_TP_SENDER) {
        s = PD_ERROR(PD_ESTATE, "channel %u: send on the receiving end", ch->config.channel_id);
        goto out;
    }
    if (ch->failure != PD_OK) {
        s = failed(ch);
        goto out;
    }
    if (bytes > ch->config.slot_bytes || (bytes && !data) || !tag || tag->kind < 1 || tag->kind > 3) {
        s = PD_ERROR(PD_EINVAL, "channel %u: bad send (%zu bytes for slots of %zu, kind %u)", ch->config.channel_id,
                     bytes, ch->config.slot_bytes, tag ? tag->kind : 0);
        goto out;
    }
    if (ch->posted - ch->done >= (uint64_t)ch->config.depth) {
        s = PD_ERROR(PD_ESTATE, "channel %u: %d sends already posted and not done", ch->config.channel_id,
                     ch->config.depth);
        goto out;
    }
    q = &ch->sendq[ch->posted % (uint64_t)ch->config.depth];
    s = pd_tp_slots_stage_send(ch, ch->posted, data, bytes, &data);
    if (s != PD_OK)
        goto out;
    q->data = data;
    q->bytes = bytes;
    memset(&q->header, 0, sizeof(q->header));
    q->header.magic = PD_TP_MSG_MAGIC;
    q->header.channel_id = ch->config.channel_id;
    q->header.seq = ch->posted;
    q->header.slot = (uint32_t)(ch->posted % (uint64_t)ch->config.depth);
    q->header.bytes = bytes;
    q->header.minibatch = tag->minibatch;
    q->header.kind = tag->kind;
    q->header.version = tag->version;
    *seq = ch->posted++;
    s = progress_locked(ch);
    if (ch->set)
        pd_tp_set_notify(ch->set);
out:
    pthread_mutex_unlock(&ch->lock);
    return s;
}

static bool send_is_done(pd_channel *ch, uint64_t seq) { return ch->done > seq; }

pd_status pd_channel_send_done(pd_channel *ch, uint64_t seq, bool *done)
{
    pd_status s;

    pthread_mutex_lock(&ch->lock);
    s = progress_locked(ch);
    *done = send_is_done(ch, seq);
    pthread_mutex_unlock(&ch->lock);
    return s;
}

pd_status pd_channel_send_wait(pd_channel *ch, uint64_t seq, int timeout_ms)
{
    pd_status s;

    pthread_mutex_lock(&ch->lock);
    if (seq >= ch->posted)
        s = PD_ERROR(PD_EINVAL, "channel %u: send %llu was never posted", ch->config.channel_id,
                     (unsigned long long)seq);
    else
        s = wait_for(ch, send_is_done, seq, timeout_ms, "credit for a posted send");
    if (s == PD_OK)
        pd_tp_spin_note(&ch->spin, pd_tp_now_ns());
    pthread_mutex_unlock(&ch->lock);
    return s;
}

pd_status pd_channel_register(pd_channel *ch, const void *data, size_t bytes)
{
    pd_status s = PD_OK;

    bool device = ch->config.memory != PD_TRANSPORT_HOST;

    pthread_mutex_lock(&ch->lock);
    if (ch->role == PD_TP_SENDER && device && !(ch->slot_caps & PD_SLOT_CAN_VERBS))
        s = PD_ERROR(PD_ENOTSUP, "channel %u: send buffers in device memory are staged, not registered (no direct "
                     "path to try)", ch->config.channel_id);
    else if (ch->role != PD_TP_SENDER || ch->nregions == PD_TP_MAX_REGIONS)
        s = PD_ERROR(PD_ESTATE, "channel %u: cannot register a send region (%s)", ch->config.channel_id,
                     ch->role != PD_TP_SENDER ? "receiving end" : "8 already");
    else if (!data || !bytes)
        s = PD_ERROR(PD_EINVAL, "channel %u: an empty send region", ch->config.channel_id);
    else {
        /* Device memory is staged until the backend registers it directly
         * (verbs, in its next step: now, when connected). */
        ch->regions[ch->nregions++] = (pd_tp_region){data, bytes, device ? PD_SLOT_PATH_STAGED : PD_SLOT_PATH_HOST};
        if (device && ch->ready)
            s = progress_locked(ch);
    }
    pthread_mutex_unlock(&ch->lock);
    return s;
}

static bool message_waiting(pd_channel *ch, uint64_t unused) { return ch->taken < ch->arrived; }

/* Hands out the next arrived message (there is one), in the slot memory
 * (a failed copy to a device leaves it untaken). */
static pd_status take(pd_channel *ch, pd_channel_msg *msg)
{
    uint64_t slot = ch->taken % (uint64_t)ch->config.depth;
    const pd_tp_header *h = &ch->arrived_headers[slot];

    PD_CHECK(pd_tp_slots_deliver(ch, ch->taken, ch->slots + slot * ch->stride + sizeof(pd_tp_header),
                                 (size_t)h->bytes, &msg->data));
    msg->bytes = (size_t)h->bytes;
    msg->tag.minibatch = h->minibatch;
    msg->tag.kind = h->kind;
    msg->tag.version = h->version;
    msg->seq = ch->taken++;
    return PD_OK;
}

pd_status pd_channel_recv(pd_channel *ch, pd_channel_msg *msg, bool *ready)
{
    pd_status s;

    *ready = false;
    pthread_mutex_lock(&ch->lock);
    if (ch->role != PD_TP_RECEIVER) {
        s = PD_ERROR(PD_ESTATE, "channel %u: receive on the sending end", ch->config.channel_id);
    } else {
        s = progress_locked(ch);
        if (s == PD_OK && message_waiting(ch, 0)) {
            s = take(ch, msg);
            *ready = s == PD_OK;
        }
    }
    pthread_mutex_unlock(&ch->lock);
    return s;
}

pd_status pd_channel_recv_wait(pd_channel *ch, pd_channel_msg *msg, int timeout_ms)
{
    pd_status s;

    pthread_mutex_lock(&ch->lock);
    if (ch->role != PD_TP_RECEIVER) {
        s = PD_ERROR(PD_ESTATE, "channel %u: receive on the sending end", ch->config.channel_id);
    } else {
        s = message_waiting(ch, 0) ? PD_OK : wait_for(ch, message_waiting, 0, timeout_ms, "message");
        if (s == PD_OK) {
            pd_tp_spin_note(&ch->spin, pd_tp_now_ns());
            s = take(ch, msg);
        }
    }
    pthread_mutex_unlock(&ch->lock);
    return s;
}

pd_status pd_channel_release(pd_channel *ch, const pd_channel_msg *msg)
{
    pd_status s = PD_OK;

    pthread_mutex_lock(&ch->lock);
    if (ch->role != PD_TP_RECEIVER || msg->seq != ch->released || ch->released >= ch->taken) {
        s = PD_ERROR(PD_ESTATE, "channel %u: release of message %llu, expected %llu (release in receive order)",
                     ch->config.channel_id, (unsigned long long)msg->seq, (unsigned long long)ch->released);
    } else if (ch->failure != PD_OK) {
        s = failed(ch);
    } else if (ch->peer_closed) {
        ch->released++; /* nobody to credit; the slot is free again */
    } else {
        ch->released++;
        s = ch->ops.give_credit(ch);
        if (s != PD_OK)
            pd_tp_fail(ch, s);
        if (ch->set)
            pd_tp_set_notify(ch->set);
    }
    pthread_mutex_unlock(&ch->lock);
    return s;
}

int pd_channel_fd(pd_channel *ch)
{
    int fd;

    pthread_mutex_lock(&ch->lock);
    fd = ch->backend ? ch->ops.fd(ch) : -1;
    pthread_mutex_unlock(&ch->lock);
    return fd;
}
