/* The token handshake over a connected socket, shared by the socket
 * backends with their listener and the non-blocking socket helpers they
 * use, and the frame head the mpi backend's handshake shares. Nothing of the
 * receiver's slots is exposed before the sender has proven the token; the
 * sender writes nothing before the receiver has proven it too. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include "transport/transport_int.h"

#define HS_MAGIC 0x31484450u /* "PDH1" */
#define HS_PROTO 2 /* 2: READY's flags and the CUDA IPC frames */

enum { HS_HELLO = 1, HS_PROOF = 2, HS_READY = 3, HS_REJECT = 4, HS_IPC_LOW = 5, HS_IPC_HIGH = 6, HS_IPC_ANSWER = 7 };

#define HS_READY_IPC 1u /* READY's flags: the CUDA IPC frames follow */

/* After the head: the handshake's fields, or a CUDA IPC frame's value
 * (offset, stride; the answer: 1 mapped, 0 not) and 32 bytes (half the
 * handle; the answer's reason). */
typedef struct hs_frame {
    pd_tp_frame_head head;
    union {
        struct {
            uint64_t stride;
            uint8_t nonce[16];
            uint64_t mac;
            uint32_t flags;
            uint8_t reserved[4];
        };
        struct {
            uint64_t ipc_value;
            uint8_t ipc_bytes[32];
        };
    };
} hs_frame;
_Static_assert(sizeof(hs_frame) == 64, "handshake frames are 64 bytes");

void pd_tp_frame_head_fill(pd_tp_frame_head *head, const pd_channel *ch, uint32_t magic, uint16_t proto, int type,
                           pd_tp_role role)
{
    head->magic = magic;
    head->type = (uint8_t)type;
    head->role = (uint8_t)role;
    head->proto = proto;
    head->channel_id = ch->config.channel_id;
    head->depth = (uint32_t)ch->config.depth;
    head->slot_bytes = ch->config.slot_bytes;
}

pd_status pd_tp_frame_head_check(pd_channel *ch, const pd_tp_frame_head *head, uint16_t proto, const char *who)
{
    uint32_t id = ch->config.channel_id;

    if (head->proto != proto)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: %s: peer speaks protocol %u, this build %u", id, who,
                                         head->proto, proto));
    if (head->channel_id != id)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: %s: the peer opened channel %u", id, who,
                                         head->channel_id));
    return PD_OK;
}

pd_status pd_tp_frame_head_check_shape(pd_channel *ch, const pd_tp_frame_head *head)
{
    if (head->depth != (uint32_t)ch->config.depth || head->slot_bytes != ch->config.slot_bytes)
        return pd_tp_refuse(
            ch, PD_ERROR(PD_ECOMM,
                         "channel %u: handshake: the peer's channel has depth %u x %llu bytes, this one %d x %zu",
                         ch->config.channel_id, head->depth, (unsigned long long)head->slot_bytes, ch->config.depth,
                         ch->config.slot_bytes));
    return PD_OK;
}

pd_status pd_tp_set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
        return PD_ERROR(PD_ECOMM, "fcntl(O_NONBLOCK): %s", strerror(errno));
    return PD_OK;
}

pd_status pd_tp_read_some(pd_channel *ch, int fd, void *buf, size_t len, size_t *got)
{
    ssize_t n;

    *got = 0;
    if (len == 0)
        return PD_OK;
    do
        n = recv(fd, buf, len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        *got = (size_t)n;
        return PD_OK;
    }
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) {
        ch->peer_closed = true;
        return PD_OK;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return PD_OK;
    return PD_ERROR(PD_ECOMM, "channel %u: recv: %s", ch->config.channel_id, strerror(errno));
}

pd_status pd_tp_poll1(int fd, short events, int timeout_ms, short *revents)
{
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, timeout_ms);

    if (n < 0 && errno != EINTR)
        return PD_ERROR(PD_ECOMM, "poll: %s", strerror(errno));
    if (revents)
        *revents = n > 0 ? p.revents : 0;
    return PD_OK;
}

pd_status pd_tp_hs_init(pd_tp_hs *hs, int fd, bool stream, pd_tp_role role)
{
    memset(hs, 0, sizeof(*hs));
    hs->fd = fd;
    hs->stream = stream;
    hs->role = role;
    if (getrandom(hs->nonce, sizeof(hs->nonce), 0) != (ssize_t)sizeof(hs->nonce))
        return PD_ERROR(PD_EIO, "handshake: getrandom: %s", strerror(errno));
    return PD_OK;
}

void pd_tp_hs_cleanup(pd_tp_hs *hs)
{
    for (int i = 0; i < hs->nfds_in; i++)
        if (hs->fds_in[i] >= 0)
            close(hs->fds_in[i]);
    hs->nfds_in = 0;
}

/* Bound to this connection by the nonces, useless elsewhere. */
uint64_t pd_tp_hs_proof(const pd_channel *ch, int prover_role, const uint8_t *verifier_nonce,
                        const uint8_t *prover_nonce)
{
    uint8_t msg[16 + 4 + 4 + 32];

    memcpy(msg, "pipedream-proof", 16);
    memcpy(msg + 16, &prover_role, 4);
    memcpy(msg + 20, &ch->config.channel_id, 4);
    memcpy(msg + 24, verifier_nonce, 16);
    memcpy(msg + 40, prover_nonce, 16);
    return pd_tp_siphash(ch->token.bytes, msg, sizeof(msg));
}

/* Sends frame f with descriptors. */
static pd_status frame_send(pd_channel *ch, pd_tp_hs *hs, hs_frame *f, const int *fds, int nfds)
{
    struct iovec iov = {f, sizeof(*f)};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * PD_TP_HS_MAX_FDS)];
    } control;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (nfds > 0) {
        memset(&control, 0, sizeof(control));
        m.msg_control = control.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    do
        n = sendmsg(hs->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    /* A fresh socket's buffer holds these few frames; anything else is a
     * broken peer. */
    if (n != (ssize_t)sizeof(*f))
        return PD_ERROR(PD_ECOMM, "channel %u: handshake: cannot send to the peer: %s", ch->config.channel_id,
                        n < 0 ? strerror(errno) : "short write");
    return PD_OK;
}

static pd_status send_frame(pd_channel *ch, pd_tp_hs *hs, int type, const int *fds, int nfds)
{
    hs_frame f;

    memset(&f, 0, sizeof(f));
    pd_tp_frame_head_fill(&f.head, ch, HS_MAGIC, HS_PROTO, type, hs->role);
    f.stride = ch->stride;
    memcpy(f.nonce, hs->nonce, sizeof(f.nonce));
    if (type == HS_PROOF)
        f.mac = pd_tp_hs_proof(ch, (int)hs->role, hs->peer_nonce, hs->nonce);
    if (type == HS_READY && hs->ipc_offer)
        f.flags = HS_READY_IPC;
    return frame_send(ch, hs, &f, fds, nfds);
}

/* A CUDA IPC frame: `value` and 32 bytes of `bytes`. */
static pd_status send_ipc_frame(pd_channel *ch, pd_tp_hs *hs, int type, uint64_t value, const void *bytes)
{
    hs_frame f;

    memset(&f, 0, sizeof(f));
    pd_tp_frame_head_fill(&f.head, ch, HS_MAGIC, HS_PROTO, type, hs->role);
    f.ipc_value = value;
    memcpy(f.ipc_bytes, bytes, sizeof(f.ipc_bytes));
    return frame_send(ch, hs, &f, NULL, 0);
}

pd_status pd_tp_hs_ipc_answer(pd_channel *ch, pd_tp_hs *hs, bool mapped, const char *reason)
{
    char text[32] = "";

    snprintf(text, sizeof(text), "%s", reason ? reason : "");
    return send_ipc_frame(ch, hs, HS_IPC_ANSWER, mapped ? 1 : 0, text);
}

/* Receiver, the sender proven: READY with the descriptors, then the CUDA
 * IPC offer if there is one (the handshake then waits for the answer). */
static pd_status send_ready(pd_channel *ch, pd_tp_hs *hs)
{
    const size_t half = sizeof(hs->ipc_handle) / 2;

    PD_CHECK(send_frame(ch, hs, HS_READY, hs->fds_out, hs->nfds_out));
    hs->sent_ready = true;
    if (hs->ipc_offer) {
        PD_CHECK(send_ipc_frame(ch, hs, HS_IPC_LOW, hs->ipc_offset, hs->ipc_handle));
        PD_CHECK(send_ipc_frame(ch, hs, HS_IPC_HIGH, hs->ipc_stride, hs->ipc_handle + half));
        hs->ipc_answer = -1;
    }
    hs->done = !hs->ipc_offer;
    return PD_OK;
}

/* The CUDA IPC frames: the offer's halves (sender, after an offering
 * READY, in order) and the answer (receiver, after its offer). */
static pd_status on_ipc_frame(pd_channel *ch, pd_tp_hs *hs, const hs_frame *f)
{
    const size_t half = sizeof(hs->ipc_handle) / 2;
    uint32_t id = ch->config.channel_id;

    PD_CHECK(pd_tp_frame_head_check(ch, &f->head, HS_PROTO, "handshake"));
    if (f->head.type == HS_IPC_ANSWER) {
        if (hs->role != PD_TP_RECEIVER || !hs->ipc_offer || hs->ipc_answer != -1)
            return PD_ERROR(PD_ECOMM, "channel %u: handshake: unexpected CUDA IPC answer", id);
        hs->ipc_answer = f->ipc_value == 1;
        memcpy(hs->ipc_reason, f->ipc_bytes, sizeof(hs->ipc_reason) - 1);
        hs->ipc_reason[sizeof(hs->ipc_reason) - 1] = '\0';
        hs->done = true;
        return PD_OK;
    }
    if (hs->role != PD_TP_SENDER || !hs->ipc_offered || hs->ipc_parts != (f->head.type == HS_IPC_LOW ? 0 : 1))
        return PD_ERROR(PD_ECOMM, "channel %u: handshake: unexpected CUDA IPC offer", id);
    if (f->head.type == HS_IPC_LOW) {
        hs->ipc_offset = f->ipc_value;
        memcpy(hs->ipc_handle, f->ipc_bytes, half);
    } else {
        hs->ipc_stride = f->ipc_value;
        memcpy(hs->ipc_handle + half, f->ipc_bytes, half);
    }
    hs->done = ++hs->ipc_parts == 2;
    return PD_OK;
}

/* Reads one whole frame if there is one (*have), collecting descriptors. */
static pd_status recv_frame(pd_channel *ch, pd_tp_hs *hs, hs_frame *f, bool *have)
{
    *have = false;
    if (hs->stream) {
        size_t got;
        PD_CHECK(pd_tp_read_some(ch, hs->fd, hs->in + hs->in_len, sizeof(hs->in) - hs->in_len, &got));
        hs->in_len += got;
    } else {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * PD_TP_HS_MAX_FDS)];
        } control;
        struct iovec iov = {hs->in, sizeof(hs->in)};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                           .msg_controllen = sizeof(control.buf)};
        ssize_t n;

        do
            n = recvmsg(hs->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return PD_OK;
        if (n <= 0) {
            ch->peer_closed = true;
            return PD_OK;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            int nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int fds[PD_TP_HS_MAX_FDS * 4];
            memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)(nfd < PD_TP_HS_MAX_FDS * 4 ? nfd : PD_TP_HS_MAX_FDS * 4));
            for (int i = 0; i < nfd && i < PD_TP_HS_MAX_FDS * 4; i++) {
                if (hs->nfds_in < PD_TP_HS_MAX_FDS)
                    hs->fds_in[hs->nfds_in++] = fds[i];
                else
                    close(fds[i]);
            }
        }
        if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC) || n != (ssize_t)sizeof(hs->in))
            return PD_ERROR(PD_ECOMM, "channel %u: handshake: malformed frame from the peer", ch->config.channel_id);
        hs->in_len = (size_t)n;
    }
    if (hs->in_len < sizeof(*f))
        return PD_OK;
    memcpy(f, hs->in, sizeof(*f));
    hs->in_len = 0;
    *have = true;
    return PD_OK;
}

static pd_status reject(pd_channel *ch, pd_tp_hs *hs, pd_status status)
{
    char message[512];

    snprintf(message, sizeof(message), "%s", pd_last_error());
    (void)send_frame(ch, hs, HS_REJECT, NULL, 0); /* best effort: tell the peer why it is cut off */
    return pd_error_at(__FILE__, __LINE__, status, "%s", message);
}

static pd_status on_hello(pd_channel *ch, pd_tp_hs *hs, const hs_frame *f)
{
    uint32_t id = ch->config.channel_id;

    if (hs->got_hello || f->head.role == (uint8_t)hs->role)
        return PD_ERROR(PD_ECOMM, "channel %u: handshake: unexpected HELLO", id);
    PD_CHECK(pd_tp_frame_head_check(ch, &f->head, HS_PROTO, "handshake"));
    PD_CHECK(pd_tp_frame_head_check_shape(ch, &f->head));
    if (f->stride != ch->stride)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM,
                                         "channel %u: handshake: the peer's slots are %llu bytes apart, this one's %zu",
                                         id, (unsigned long long)f->stride, ch->stride));
    memcpy(hs->peer_nonce, f->nonce, sizeof(hs->peer_nonce));
    hs->got_hello = true;
    PD_CHECK(send_frame(ch, hs, HS_PROOF, hs->fds_out, hs->role == PD_TP_SENDER ? hs->nfds_out : 0));
    hs->sent_proof = true;
    return PD_OK;
}

static pd_status on_frame(pd_channel *ch, pd_tp_hs *hs, const hs_frame *f)
{
    uint32_t id = ch->config.channel_id;

    if (f->head.magic != HS_MAGIC)
        return PD_ERROR(PD_ECOMM, "channel %u: handshake: the peer is not a pipedream channel (magic 0x%08x)", id,
                        f->head.magic);
    switch (f->head.type) {
    case HS_HELLO: return on_hello(ch, hs, f);
    case HS_PROOF:
        if (!hs->got_hello || hs->peer_proven)
            return PD_ERROR(PD_ECOMM, "channel %u: handshake: unexpected PROOF", id);
        if (f->mac != pd_tp_hs_proof(ch, f->head.role, hs->nonce, hs->peer_nonce))
            return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer failed to prove the job token", id));
        hs->peer_proven = true;
        if (hs->role == PD_TP_RECEIVER)
            PD_CHECK(send_ready(ch, hs));
        return PD_OK;
    case HS_READY:
        if (hs->role != PD_TP_SENDER || !hs->peer_proven || hs->ipc_offered)
            return PD_ERROR(PD_ECOMM, "channel %u: handshake: %s", id,
                            hs->ipc_offered ? "a second READY" : "READY before the receiver's proof");
        hs->ipc_offered = (f->flags & HS_READY_IPC) != 0;
        hs->done = !hs->ipc_offered;
        return PD_OK;
    case HS_IPC_LOW:
    case HS_IPC_HIGH:
    case HS_IPC_ANSWER: return on_ipc_frame(ch, hs, f);
    case HS_REJECT:
        return pd_tp_refuse(
            ch, PD_ERROR(PD_ECOMM, "channel %u: the peer rejected this end (wrong job token or channel shape)", id));
    default:
        return PD_ERROR(PD_ECOMM, "channel %u: handshake: unknown frame type %u", id, f->head.type);
    }
}

pd_status pd_tp_hs_step(pd_channel *ch, pd_tp_hs *hs, bool *done)
{
    pd_status s;

    if (!hs->sent_hello) {
        PD_CHECK(send_frame(ch, hs, HS_HELLO, NULL, 0));
        hs->sent_hello = true;
    }
    while (!hs->done) {
        hs_frame f;
        bool have;

        PD_CHECK(recv_frame(ch, hs, &f, &have));
        if (!have)
            break;
        s = on_frame(ch, hs, &f);
        if (s != PD_OK)
            return f.head.type == HS_REJECT ? s : reject(ch, hs, s);
    }
    if (!hs->done && ch->peer_closed)
        return PD_ERROR(PD_ECOMM, "channel %u: the peer closed the connection during the handshake",
                        ch->config.channel_id);
    *done = hs->done;
    return PD_OK;
}

pd_status pd_tp_sock_conn_new(pd_channel *ch, int sock, bool stream, pd_tp_role role, size_t bytes,
                              pd_tp_sock **out)
{
    pd_tp_sock *conn = calloc(1, bytes);
    pd_status s;

    if (!conn) {
        close(sock);
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
    }
    conn->sock = sock;
    PD_CHECK_GOTO(pd_tp_set_nonblocking(sock), s, fail);
    PD_CHECK_GOTO(pd_tp_hs_init(&conn->hs, sock, stream, role), s, fail);
    *out = conn;
    return PD_OK;
fail:
    close(sock);
    free(conn);
    return s;
}

void pd_tp_sock_conn_close(pd_tp_sock *conn)
{
    pd_tp_hs_cleanup(&conn->hs);
    if (conn->sock >= 0)
        close(conn->sock);
}

pd_status pd_tp_sock_listen(const pd_tp_sock_ops *ops, int fd, pd_tp_sock_listener **out)
{
    pd_tp_sock_listener *l = calloc(1, sizeof(*l));

    if (!l) {
        close(fd);
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", ops->name);
    }
    l->ops = ops;
    l->fd = fd;
    *out = l;
    return PD_OK;
}

void pd_tp_sock_unlisten(void *listener)
{
    pd_tp_sock_listener *l = listener;

    if (!l)
        return;
    if (l->pending)
        l->ops->conn_free(l->pending);
    close(l->fd);
    free(l);
}

/* One handshake step on conn; *done once it completed and the backend
 * took what came with it. */
static pd_status sock_step(pd_channel *ch, const pd_tp_sock_ops *ops, pd_tp_sock *conn, bool *done)
{
    PD_CHECK(pd_tp_hs_step(ch, &conn->hs, done));
    if (*done && ops->conn_proven)
        PD_CHECK(ops->conn_proven(ch, conn));
    return PD_OK;
}

pd_status pd_tp_sock_accept(pd_channel *ch, void *listener)
{
    pd_tp_sock_listener *l = listener;
    bool done;
    pd_status s;

    if (!l->pending) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED
                       ? PD_OK
                       : PD_ERROR(PD_ECOMM, "%s: accept: %s", l->ops->name, strerror(errno));
        PD_CHECK(l->ops->conn_new(ch, fd, PD_TP_RECEIVER, &l->pending));
    }
    PD_CHECK_GOTO(sock_step(ch, l->ops, l->pending, &done), s, fail);
    if (done) {
        ch->be = l->pending;
        ch->ready = true;
        l->pending = NULL;
    }
    return PD_OK;
fail:
    l->ops->conn_free(l->pending);
    l->pending = NULL;
    return s;
}

pd_status pd_tp_sock_handshake(pd_channel *ch, const pd_tp_sock_ops *ops)
{
    bool done;

    if (ch->ready)
        return PD_OK;
    PD_CHECK(sock_step(ch, ops, ch->be, &done));
    ch->ready = done;
    return PD_OK;
}
