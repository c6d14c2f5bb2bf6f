/* shm backend: ranks of one node share the receiver's slot memory (a
 * memfd passed over a unix seqpacket socket after the token handshake).
 * The sender copies a message into its slot, then publishes a counter; the
 * receiver returns credits through another. Sleepers are woken through
 * eventfds, and only when they announced that they sleep, so neither side
 * spins when idle nor pays a system call per message when busy. The socket
 * stays open as the liveness signal: a peer that dies closes it. Device
 * slots take the cuda-ipc path where both ends agree in the handshake: the
 * receiver offers a CUDA IPC handle of its slots, the sender maps them,
 * copies each payload there device to device and waits for the copies
 * before it publishes `posted`; headers stay in the ring. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <pipedream/log.h>

#include "transport/transport_int.h"

typedef struct shm_state {
    pd_tp_sock conn;       /* first: the socket and its handshake */
    int own_efd;           /* this end sleeps on it */
    int peer_efd;          /* wakes the peer; -1 before the handshake */
    _Atomic uint64_t seen; /* receiver: messages seen; sender: credits seen */
    bool set_armed;        /* a set announced its sleep (arm and disarm pair up) */
} shm_state;

static void state_free(pd_tp_sock *conn)
{
    shm_state *st = (shm_state *)conn;

    if (!st)
        return;
    pd_tp_sock_conn_close(&st->conn);
    if (st->own_efd >= 0)
        close(st->own_efd);
    if (st->peer_efd >= 0)
        close(st->peer_efd);
    free(st);
}

static pd_status state_new(pd_channel *ch, int sock, pd_tp_role role, pd_tp_sock **out)
{
    pd_tp_sock *conn;
    shm_state *st;
    pd_status s;

    PD_CHECK(pd_tp_sock_conn_new(ch, sock, false, role, sizeof(*st), &conn));
    st = (shm_state *)conn;
    st->peer_efd = -1;
    st->own_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (st->own_efd < 0) {
        s = PD_ERROR(PD_ECOMM, "channel %u: eventfd: %s", ch->config.channel_id, strerror(errno));
        state_free(conn);
        return s;
    }
    /* The sender's wake-up travels with its proof; the receiver's slots
     * and wake-up with READY, after the sender's proof checked. */
    if (role == PD_TP_RECEIVER) {
        conn->hs.fds_out[0] = ch->ring_fd;
        conn->hs.fds_out[1] = st->own_efd;
        conn->hs.nfds_out = 2;
        /* Sent after READY, so only to a proven sender. */
        conn->hs.ipc_offer = pd_tp_slots_ipc_export(ch);
        memcpy(conn->hs.ipc_handle, ch->ipc_handle, sizeof(ch->ipc_handle));
        conn->hs.ipc_offset = (uint64_t)(ch->dev_slots - (uint8_t *)ch->dev_alloc);
        conn->hs.ipc_stride = ch->dev_stride;
    } else {
        conn->hs.fds_out[0] = st->own_efd;
        conn->hs.nfds_out = 1;
    }
    *out = conn;
    return PD_OK;
}

/* The handshake completed: the receiver takes the sender's wake-up (and
 * its answer to a CUDA IPC offer); the sender maps the receiver's slots,
 * takes its wake-up and answers an offer. */
static pd_status state_proven(pd_channel *ch, pd_tp_sock *conn)
{
    shm_state *st = (shm_state *)conn;
    char reason[32] = "";
    bool mapped;

    if (ch->role == PD_TP_RECEIVER) {
        if (conn->hs.nfds_in != 1)
            return PD_ERROR(PD_ECOMM, "channel %u: shm: the sender sent %d descriptors, expected its wake-up",
                            ch->config.channel_id, conn->hs.nfds_in);
        st->peer_efd = conn->hs.fds_in[0];
        conn->hs.nfds_in = 0;
        if (conn->hs.ipc_offer && conn->hs.ipc_answer != 1)
            pd_tp_slots_ipc_refused(ch, conn->hs.ipc_reason);
        return PD_OK;
    }
    if (conn->hs.nfds_in != 2)
        return PD_ERROR(PD_ECOMM, "channel %u: shm: the receiver sent %d descriptors, expected 2",
                        ch->config.channel_id, conn->hs.nfds_in);
    PD_CHECK(pd_tp_ring_map(ch, conn->hs.fds_in[0]));
    st->peer_efd = conn->hs.fds_in[1];
    conn->hs.nfds_in = 0;
    ch->peer_released = atomic_load_explicit(&ch->ctl->released, memory_order_acquire);
    if (ch->peer_released != 0)
        return PD_ERROR(PD_ECOMM, "channel %u: shm: the receiver's ring is not fresh", ch->config.channel_id);
    if (!conn->hs.ipc_offered)
        return PD_OK;
    PD_CHECK(pd_tp_slots_ipc_open(ch, conn->hs.ipc_handle, conn->hs.ipc_offset, conn->hs.ipc_stride, &mapped, reason,
                                  sizeof(reason)));
    return pd_tp_hs_ipc_answer(ch, &conn->hs, mapped, reason);
}

static const pd_tp_sock_ops shm_sock_ops = {
    .name = "shm",
    .conn_new = state_new,
    .conn_proven = state_proven,
    .conn_free = state_free,
};

static pd_status boot_id(char *buf, size_t size)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    bool ok = f && fgets(buf, (int)size, f);

    if (f)
        fclose(f);
    if (!ok)
        return PD_ERROR(PD_ENOTSUP, "shm: cannot read this node's boot id");
    buf[strcspn(buf, "\n")] = '\0';
    return PD_OK;
}

/* An abstract unix address: no file to clean up, private to this node. */
static socklen_t unix_address(const char *name, struct sockaddr_un *sa)
{
    size_t len = strlen(name);

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (len > sizeof(sa->sun_path) - 1)
        len = sizeof(sa->sun_path) - 1;
    memcpy(sa->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

static pd_status shm_listen(pd_channel *ch, void **listener, char *addr, size_t addr_size)
{
    char boot[64], name[96];
    uint8_t rnd[8];
    struct sockaddr_un sa;
    socklen_t len;
    pd_tp_sock_listener *l;
    int fd;

    PD_CHECK(boot_id(boot, sizeof(boot)));
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return PD_ERROR(PD_EIO, "shm: getrandom: %s", strerror(errno));
    snprintf(name, sizeof(name), "pipedream-%d-%u-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(),
             ch->config.channel_id, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    len = unix_address(name, &sa);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return PD_ERROR(PD_ECOMM, "shm: socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 4) != 0) {
        pd_status s = PD_ERROR(PD_ECOMM, "shm: cannot listen on @%s: %s", name, strerror(errno));
        close(fd);
        return s;
    }
    PD_CHECK(pd_tp_sock_listen(&shm_sock_ops, fd, &l));
    snprintf(addr, addr_size, "shm:%s:%s", boot, name);
    *listener = l;
    return PD_OK;
}

static pd_status shm_connect(pd_channel *ch, const char *addr)
{
    char boot[64];
    const char *colon = strchr(addr, ':');
    struct sockaddr_un sa;
    socklen_t len;
    pd_tp_sock *conn;
    int fd;

    PD_CHECK(boot_id(boot, sizeof(boot)));
    if (!colon || (size_t)(colon - addr) != strlen(boot) || strncmp(addr, boot, strlen(boot)) != 0)
        return PD_ERROR(PD_ENOTSUP, "shm: the receiver is on another node");
    len = unix_address(colon + 1, &sa);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return PD_ERROR(PD_ECOMM, "shm: socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
        pd_status s = PD_ERROR(PD_ENOTFOUND, "shm: cannot connect to @%s: %s", colon + 1, strerror(errno));
        close(fd);
        return s;
    }
    PD_CHECK(state_new(ch, fd, PD_TP_SENDER, &conn));
    ch->be = conn;
    return PD_OK;
}

/* Receiver on the cuda-ipc path: its device slots may be freed (and
 * reused) only once the sender unmapped them, which its closing socket
 * says; waits for that up to the channel's timeout, else keeps the slots
 * allocated (pd_tp_slots_close). */
static void wait_unmapped(pd_channel *ch, shm_state *st)
{
    int64_t deadline = pd_tp_now_ns() + (int64_t)ch->config.timeout_ms * 1000000;

    while (!ch->peer_closed) {
        int64_t left = (deadline - pd_tp_now_ns()) / 1000000;
        uint8_t junk[64];
        size_t got;

        if (left <= 0 || pd_tp_poll1(st->conn.sock, POLLIN, (int)left, NULL) != PD_OK ||
            pd_tp_read_some(ch, st->conn.sock, junk, sizeof(junk), &got) != PD_OK)
            break;
    }
    if (!ch->peer_closed) {
        ch->dev_slots_kept = true;
        PD_LOG_WARNF("channel %u: shm: the sender still maps the device slots after %d ms; they stay allocated "
                     "until the device closes", ch->config.channel_id, ch->config.timeout_ms);
    }
}

/* The sender unmaps the receiver's slots before its socket closes. */
static void shm_close(pd_channel *ch)
{
    shm_state *st = ch->be;

    if (ch->role == PD_TP_SENDER)
        pd_tp_slots_ipc_close(ch);
    else if (st && ch->ready && ch->slot_path == PD_SLOT_PATH_CUDA_IPC)
        wait_unmapped(ch, st);
    state_free(ch->be);
}

static void wake(int efd)
{
    uint64_t one = 1;
    ssize_t n = write(efd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero, the peer wakes anyway */
}

/* Any byte on the socket after the handshake is a violation; EOF means the
 * peer closed or died. */
static pd_status check_socket(pd_channel *ch, shm_state *st)
{
    uint8_t junk[64];
    size_t got;

    PD_CHECK(pd_tp_read_some(ch, st->conn.sock, junk, sizeof(junk), &got));
    if (got)
        return PD_ERROR(PD_ECOMM, "channel %u: shm: unexpected bytes from the peer", ch->config.channel_id);
    return PD_OK;
}

/* Makes the messages written so far visible to the receiver. */
static void publish(pd_channel *ch, shm_state *st)
{
    ch->done = ch->started;
    atomic_store_explicit(&ch->ctl->posted, ch->started, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ch->ctl->recv_sleeping, memory_order_relaxed))
        wake(st->peer_efd);
}

/* Sender: takes credits, writes what they allow; *moved if either. */
static pd_status sender_move(pd_channel *ch, shm_state *st, bool *moved)
{
    uint64_t released = atomic_load_explicit(&ch->ctl->released, memory_order_acquire);
    uint64_t first = ch->started;
    pd_tp_send *q;
    bool ipc = ch->ipc_slots != NULL;

    *moved = released != ch->peer_released;

    PD_CHECK(pd_tp_credit_update(ch, released));
    atomic_store_explicit(&st->seen, released, memory_order_relaxed);
    while ((q = pd_tp_next_send(ch))) {
        /* The slot is the sender's own count, never what a header says. */
        uint8_t *slot = ch->slots + (size_t)(ch->started % (uint64_t)ch->config.depth) * ch->stride;

        if (ipc)
            PD_CHECK(pd_tp_slots_ipc_write(ch, ch->started, q->data, q->bytes));
        else
            memcpy(slot + sizeof(pd_tp_header), q->data, q->bytes);
        memcpy(slot, &q->header, sizeof(q->header));
        ch->started++;
        if (!ipc)
            publish(ch, st);
        *moved = true;
    }
    /* The receiver must not read a device slot before its copy completed:
     * one wait for all the copies of this step, then they are published. */
    if (ipc && ch->started != first) {
        PD_CHECK(pd_tp_slots_ipc_sync(ch));
        publish(ch, st);
    }
    return PD_OK;
}

/* Receiver: checks and accepts what was published; *moved if anything. */
static pd_status receiver_move(pd_channel *ch, shm_state *st, bool *moved)
{
    uint64_t posted = atomic_load_explicit(&ch->ctl->posted, memory_order_acquire);
    uint64_t depth = (uint64_t)ch->config.depth;

    if (posted < ch->arrived || posted > ch->released + depth)
        return PD_ERROR(PD_ECOMM, "channel %u: shm: the sender claims %llu messages; %llu arrived, %llu slots free",
                        ch->config.channel_id, (unsigned long long)posted, (unsigned long long)ch->arrived,
                        (unsigned long long)(ch->released + depth - ch->arrived));
    *moved = posted != ch->arrived;
    while (ch->arrived < posted) {
        pd_tp_header h;

        /* A private copy: the sender can still write the shared one. */
        memcpy(&h, ch->slots + (size_t)(ch->arrived % depth) * ch->stride, sizeof(h));
        PD_CHECK(pd_tp_header_check(ch, &h));
        pd_tp_header_accept(ch, &h);
    }
    atomic_store_explicit(&st->seen, ch->arrived, memory_order_relaxed);
    return PD_OK;
}

static pd_status move(pd_channel *ch, shm_state *st, bool *moved)
{
    return ch->role == PD_TP_SENDER ? sender_move(ch, st, moved) : receiver_move(ch, st, moved);
}

/* A step that moved nothing looks at the socket (the peer may be gone). */
static pd_status shm_progress(pd_channel *ch)
{
    shm_state *st = ch->be;
    bool moved;

    PD_CHECK(pd_tp_sock_handshake(ch, &shm_sock_ops));
    if (!ch->ready)
        return PD_OK;
    PD_CHECK(move(ch, st, &moved));
    return moved ? PD_OK : check_socket(ch, st);
}

/* A spinning wait's look: the ring's counters only (no system call). */
static pd_status shm_poll(pd_channel *ch)
{
    bool moved;

    return move(ch, ch->be, &moved);
}

static pd_status shm_give_credit(pd_channel *ch)
{
    shm_state *st = ch->be;

    atomic_store_explicit(&ch->ctl->released, ch->released, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ch->ctl->send_sleeping, memory_order_relaxed))
        wake(st->peer_efd);
    return PD_OK;
}

/* Announces a sleeper (a count: a channel's own wait and its set's may
 * sleep at once) and looks once more, since the peer may have acted before
 * it could see the announcement: true if it did. */
static bool announce_sleep(pd_channel *ch, shm_state *st)
{
    _Atomic uint32_t *sleepers = ch->role == PD_TP_SENDER ? &ch->ctl->send_sleeping : &ch->ctl->recv_sleeping;
    _Atomic uint64_t *counter = ch->role == PD_TP_SENDER ? &ch->ctl->released : &ch->ctl->posted;

    atomic_fetch_add(sleepers, 1);
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load(counter) != atomic_load_explicit(&st->seen, memory_order_relaxed);
}

static void withdraw_sleep(pd_channel *ch, shm_state *st)
{
    uint64_t drained;
    ssize_t n;

    atomic_fetch_sub(ch->role == PD_TP_SENDER ? &ch->ctl->send_sleeping : &ch->ctl->recv_sleeping, 1);
    n = read(st->own_efd, &drained, sizeof(drained));
    (void)n;
}

/* Sleeps on the eventfd and the socket once the sleep is announced. */
static pd_status shm_wait(pd_channel *ch, int timeout_ms)
{
    shm_state *st = ch->be;
    struct pollfd p[2] = {{.fd = st->own_efd, .events = POLLIN}, {.fd = st->conn.sock, .events = POLLIN}};
    int n;

    if (!ch->ready || !ch->ctl) {
        n = poll(p + 1, 1, timeout_ms);
        return PD_OK;
    }
    if (!announce_sleep(ch, st))
        n = poll(p, 2, timeout_ms);
    withdraw_sleep(ch, st);
    (void)n;
    return PD_OK;
}

/* A set sleeps on the same descriptors; a peer that closed leaves nothing
 * to wait for (its socket would stay readable). */
static int shm_wait_arm(pd_channel *ch, struct pollfd *fds, int *poll_ms)
{
    shm_state *st = ch->be;

    *poll_ms = -1;
    if (ch->peer_closed)
        return 0;
    fds[0] = (struct pollfd){.fd = st->conn.sock, .events = POLLIN};
    if (!ch->ready || !ch->ctl)
        return 1;
    st->set_armed = true;
    if (announce_sleep(ch, st))
        *poll_ms = 0;
    fds[1] = (struct pollfd){.fd = st->own_efd, .events = POLLIN};
    return 2;
}

static void shm_wait_disarm(pd_channel *ch)
{
    shm_state *st = ch->be;

    if (st->set_armed)
        withdraw_sleep(ch, st);
    st->set_armed = false;
}

static int shm_fd(pd_channel *ch) { return -1; }

static const pd_tp_ops shm_ops = {
    .listen = shm_listen,
    .accept = pd_tp_sock_accept,
    .unlisten = pd_tp_sock_unlisten,
    .connect = shm_connect,
    .progress = shm_progress,
    .wait = shm_wait,
    .give_credit = shm_give_credit,
    .close = shm_close,
    .fd = shm_fd,
    .wait_arm = shm_wait_arm,
    .wait_disarm = shm_wait_disarm,
    .poll = shm_poll,
};

const pd_tp_backend pd_tp_backend_shm = {"shm", &shm_ops};
