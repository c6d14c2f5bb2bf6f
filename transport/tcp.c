/* tcp backend: one stream per channel for machines without RDMA. Each
 * message is its 64-byte header followed by the payload, read straight
 * into the slot the header names once the header checked; credits flow
 * back as 16-byte frames carrying the receiver's released count. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/transport_int.h"

#define CREDIT_MAGIC 0x31434450u /* "PDC1" */

typedef struct credit_frame {
    uint32_t magic;
    uint32_t reserved;
    uint64_t released;
} credit_frame;

typedef struct tcp_state {
    pd_tp_sock conn; /* first: the socket and its handshake */
    /* sender */
    size_t out_off; /* bytes of the current message written */
    uint8_t cin[sizeof(credit_frame)];
    size_t cin_len;
    _Atomic bool want_out;
    /* receiver */
    pd_tp_header hin;
    size_t in_off; /* bytes of the current message read */
    uint8_t cout[sizeof(credit_frame)];
    size_t cout_off, cout_len;
    uint64_t credit_sent;
} tcp_state;

static void state_free(pd_tp_sock *conn)
{
    if (!conn)
        return;
    pd_tp_sock_conn_close(conn);
    free(conn);
}

static pd_status state_new(pd_channel *ch, int sock, pd_tp_role role, pd_tp_sock **out)
{
    int one = 1;

    (void)setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return pd_tp_sock_conn_new(ch, sock, true, role, sizeof(tcp_state), out);
}

static const pd_tp_sock_ops tcp_sock_ops = {
    .name = "tcp",
    .conn_new = state_new,
    .conn_free = state_free,
};

/* This host's first non-loopback IPv4 address, else the loopback. */
static void default_host(char *buf, size_t size)
{
    struct ifaddrs *list, *i;

    snprintf(buf, size, "127.0.0.1");
    if (getifaddrs(&list) != 0)
        return;
    for (i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
            !(i->ifa_flags & IFF_UP))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, buf, (socklen_t)size);
        break;
    }
    freeifaddrs(list);
}

static pd_status tcp_listen(pd_channel *ch, void **listener, char *addr, size_t addr_size)
{
    char host[INET_ADDRSTRLEN];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    pd_tp_sock_listener *l;
    int fd, one = 1;

    if (ch->config.host) {
        if (inet_pton(AF_INET, ch->config.host, &sa.sin_addr) != 1)
            return PD_ERROR(PD_EINVAL, "tcp: host '%s' is not an IPv4 address", ch->config.host);
        snprintf(host, sizeof(host), "%s", ch->config.host);
    } else {
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        default_host(host, sizeof(host));
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return PD_ERROR(PD_ECOMM, "tcp: socket: %s", strerror(errno));
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        pd_status s = PD_ERROR(PD_ECOMM, "tcp: cannot listen on %s: %s", host, strerror(errno));
        close(fd);
        return s;
    }
    PD_CHECK(pd_tp_sock_listen(&tcp_sock_ops, fd, &l));
    snprintf(addr, addr_size, "tcp:%s:%u", host, ntohs(sa.sin_port));
    *listener = l;
    return PD_OK;
}

/* Connects within the set-up deadline; PD_ENOTFOUND if nobody answers. */
static pd_status tcp_connect(pd_channel *ch, const char *addr)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    pd_tp_sock *conn;
    int fd, err = 0;
    socklen_t elen = sizeof(err);
    short rev;
    pd_status s;

    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return PD_ERROR(PD_EINVAL, "tcp: bad address '%s' (expected host:port)", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return PD_ERROR(PD_ENOTFOUND, "tcp: cannot resolve '%s'", addr);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return PD_ERROR(PD_ECOMM, "tcp: socket: %s", strerror(errno));
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS)
        err = errno;
    freeaddrinfo(ai);
    if (!err) {
        PD_CHECK_GOTO(pd_tp_poll1(fd, POLLOUT, pd_tp_setup_left_ms(ch), &rev), s, fail);
        if (!rev)
            err = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
            err = errno;
    }
    if (err) {
        s = PD_ERROR(PD_ENOTFOUND, "tcp: cannot connect to %s: %s", addr, strerror(err));
        goto fail;
    }
    PD_CHECK(state_new(ch, fd, PD_TP_SENDER, &conn));
    ch->be = conn;
    return PD_OK;
fail:
    close(fd);
    return s;
}

/* A sender's close lets its last messages reach the receiver first:
 * closing with unread credits in the socket would reset the connection and
 * drop whatever the kernel had not delivered yet. */
static void tcp_close(pd_channel *ch)
{
    tcp_state *st = ch->be;
    int64_t deadline = pd_tp_now_ns() + (int64_t)ch->config.timeout_ms * 1000000;

    if (ch->role == PD_TP_SENDER && ch->ready && !ch->peer_closed) {
        int unacked = 0;
        uint8_t junk[256];

        shutdown(st->conn.sock, SHUT_WR);
        for (;;) {
            while (recv(st->conn.sock, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                ;
            if (ioctl(st->conn.sock, SIOCOUTQ, &unacked) != 0 || unacked == 0 || pd_tp_now_ns() >= deadline)
                break;
            (void)pd_tp_poll1(st->conn.sock, POLLIN, 1, NULL);
        }
    }
    state_free(&st->conn);
}

static pd_status read_credits(pd_channel *ch, tcp_state *st)
{
    for (;;) {
        size_t got;
        credit_frame f;

        PD_CHECK(pd_tp_read_some(ch, st->conn.sock, st->cin + st->cin_len, sizeof(st->cin) - st->cin_len, &got));
        if (!got)
            return PD_OK;
        st->cin_len += got;
        if (st->cin_len < sizeof(st->cin))
            continue;
        memcpy(&f, st->cin, sizeof(f));
        st->cin_len = 0;
        if (f.magic != CREDIT_MAGIC)
            return PD_ERROR(PD_ECOMM, "channel %u: tcp: bad credit frame (magic 0x%08x)", ch->config.channel_id,
                            f.magic);
        PD_CHECK(pd_tp_credit_update(ch, f.released));
    }
}

static pd_status sender_progress(pd_channel *ch, tcp_state *st)
{
    pd_tp_send *q;

    PD_CHECK(read_credits(ch, st));
    while (!ch->peer_closed && (q = pd_tp_next_send(ch))) {
        size_t hdr = sizeof(q->header), total = hdr + q->bytes;
        struct iovec iov[2];
        struct msghdr m = {.msg_iov = iov};
        ssize_t n;

        if (st->out_off < hdr) {
            iov[0] = (struct iovec){(uint8_t *)&q->header + st->out_off, hdr - st->out_off};
            iov[1] = (struct iovec){(void *)q->data, q->bytes};
            m.msg_iovlen = q->bytes ? 2 : 1;
        } else {
            iov[0] = (struct iovec){(uint8_t *)q->data + (st->out_off - hdr), total - st->out_off};
            m.msg_iovlen = 1;
        }
        do
            n = sendmsg(st->conn.sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EPIPE || errno == ECONNRESET) {
                ch->peer_closed = true;
                break;
            }
            return PD_ERROR(PD_ECOMM, "channel %u: tcp: send: %s", ch->config.channel_id, strerror(errno));
        }
        st->out_off += (size_t)n;
        if (st->out_off == total) {
            st->out_off = 0;
            ch->started++;
            ch->done++;
        }
    }
    atomic_store(&st->want_out, pd_tp_next_send(ch) != NULL && !ch->peer_closed);
    return PD_OK;
}

static pd_status flush_credit(pd_channel *ch, tcp_state *st)
{
    if (st->cout_len == 0 && st->credit_sent < ch->released) {
        credit_frame f = {.magic = CREDIT_MAGIC, .released = ch->released};
        memcpy(st->cout, &f, sizeof(f));
        st->cout_len = sizeof(f);
        st->cout_off = 0;
        st->credit_sent = ch->released;
    }
    while (st->cout_off < st->cout_len) {
        ssize_t n = send(st->conn.sock, st->cout + st->cout_off, st->cout_len - st->cout_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return PD_OK;
            /* A sender that closed needs no credits; what it sent before
             * is still to be read, so this is not the end yet. */
            if (errno == EPIPE || errno == ECONNRESET) {
                st->cout_len = 0;
                return PD_OK;
            }
            return PD_ERROR(PD_ECOMM, "channel %u: tcp: send: %s", ch->config.channel_id, strerror(errno));
        }
        st->cout_off += (size_t)n;
    }
    st->cout_len = 0;
    return PD_OK;
}

static pd_status receiver_progress(pd_channel *ch, tcp_state *st)
{
    const size_t hdr = sizeof(pd_tp_header);

    PD_CHECK(flush_credit(ch, st));
    while (!ch->peer_closed) {
        size_t got;

        if (st->in_off < hdr) {
            PD_CHECK(pd_tp_read_some(ch, st->conn.sock, (uint8_t *)&st->hin + st->in_off, hdr - st->in_off, &got));
            st->in_off += got;
            if (st->in_off < hdr)
                break;
            /* Checked before a byte of payload lands in a slot. */
            PD_CHECK(pd_tp_header_check(ch, &st->hin));
        } else {
            uint8_t *payload = ch->slots + (size_t)st->hin.slot * ch->stride + hdr;
            size_t off = st->in_off - hdr;
            PD_CHECK(pd_tp_read_some(ch, st->conn.sock, payload + off, (size_t)st->hin.bytes - off, &got));
            st->in_off += got;
        }
        if (st->in_off == hdr + st->hin.bytes) {
            memcpy(ch->slots + (size_t)st->hin.slot * ch->stride, &st->hin, hdr);
            pd_tp_header_accept(ch, &st->hin);
            st->in_off = 0;
        } else if (!got) {
            break;
        }
    }
    return PD_OK;
}

static pd_status tcp_progress(pd_channel *ch)
{
    tcp_state *st = ch->be;

    PD_CHECK(pd_tp_sock_handshake(ch, &tcp_sock_ops));
    if (!ch->ready)
        return PD_OK;
    return ch->role == PD_TP_SENDER ? sender_progress(ch, st) : receiver_progress(ch, st);
}

static pd_status tcp_give_credit(pd_channel *ch) { return flush_credit(ch, ch->be); }

static pd_status tcp_wait(pd_channel *ch, int timeout_ms)
{
    tcp_state *st = ch->be;
    short events = POLLIN | (atomic_load(&st->want_out) ? POLLOUT : 0);

    return pd_tp_poll1(st->conn.sock, events, timeout_ms, NULL);
}

static int tcp_fd(pd_channel *ch) { return ((pd_tp_sock *)ch->be)->sock; }

/* A set sleeps on the socket: readable, or writable while a message or a
 * credit waits for room; nothing once the peer closed (EOF stays readable). */
static int tcp_wait_arm(pd_channel *ch, struct pollfd *fds, int *poll_ms)
{
    tcp_state *st = ch->be;
    bool out = atomic_load(&st->want_out) || st->cout_off < st->cout_len;

    *poll_ms = -1;
    if (ch->peer_closed)
        return 0;
    fds[0] = (struct pollfd){.fd = st->conn.sock, .events = (short)(POLLIN | (out ? POLLOUT : 0))};
    return 1;
}

static const pd_tp_ops tcp_ops = {
    .listen = tcp_listen,
    .accept = pd_tp_sock_accept,
    .unlisten = pd_tp_sock_unlisten,
    .connect = tcp_connect,
    .progress = tcp_progress,
    .wait = tcp_wait,
    .give_credit = tcp_give_credit,
    .close = tcp_close,
    .fd = tcp_fd,
    .wait_arm = tcp_wait_arm,
};

const pd_tp_backend pd_tp_backend_tcp = {"tcp", &tcp_ops};
