/* verbs backend: RC queue pairs set up through librdmacm (RoCE or
 * InfiniBand: the cm picks the port and GID for the address), the token
 * handshake in the cm's private data and the first two messages, and the
 * backend table. The data path is in verbs_data.c, the resources in
 * verbs_conn.c; verbs_int.h has the protocol. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <pipedream/log.h>

#include "transport/verbs_int.h"

enum { REJECT_SHAPE = 1, REJECT_BUSY = 2 };

typedef struct vb_listener {
    pid_t owner;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    pd_vb_conn *pending; /* a sender in its handshake */
} vb_listener;

static pd_status set_nonblocking(pd_channel *ch, int fd)
{
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        return pd_vb_errno(ch, "fcntl(O_NONBLOCK)");
    return PD_OK;
}

static void vb_unlisten(void *listener)
{
    vb_listener *l = listener;

    if (!l)
        return;
    pd_vb_conn_destroy(l->pending);
    /* A forked child must not destroy its parent's listening id. */
    if (l->id && l->owner == getpid())
        rdma_destroy_id(l->id);
    if (l->ec)
        rdma_destroy_event_channel(l->ec);
    free(l);
}

static pd_status vb_listen(pd_channel *ch, void **listener, char *addr, size_t addr_size)
{
    char ip[INET_ADDRSTRLEN];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    vb_listener *l;
    pd_status s;

    PD_CHECK(pd_vb_find_address(ch->config.host, ip, sizeof(ip)));
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return PD_ERROR(PD_EINVAL, "verbs: host '%s' is not an IPv4 address", ip);
    l = calloc(1, sizeof(*l));
    if (!l)
        return PD_ERROR(PD_ENOMEM, "verbs: out of host memory");
    l->owner = getpid();
    l->ec = rdma_create_event_channel();
    if (!l->ec) {
        s = PD_ERROR(PD_ENOTSUP, "verbs: no RDMA connection manager here: %s", strerror(errno));
        goto fail;
    }
    PD_CHECK_GOTO(set_nonblocking(ch, l->ec->fd), s, fail);
    if (rdma_create_id(l->ec, &l->id, NULL, RDMA_PS_TCP) != 0) {
        s = pd_vb_errno(ch, "rdma_create_id");
        goto fail;
    }
    if (rdma_bind_addr(l->id, (struct sockaddr *)&sa) != 0) {
        s = PD_ERROR(PD_ECOMM, "verbs: cannot bind %s: %s", ip, strerror(errno));
        goto fail;
    }
    if (!l->id->verbs) {
        s = PD_ERROR(PD_ENOTFOUND, "verbs: %s is not the address of an RDMA device", ip);
        goto fail;
    }
    if (rdma_listen(l->id, 4) != 0) {
        s = PD_ERROR(PD_ECOMM, "verbs: cannot listen on %s: %s", ip, strerror(errno));
        goto fail;
    }
    snprintf(addr, addr_size, "verbs:%s:%u", ip, ntohs(rdma_get_src_port(l->id)));
    PD_LOG_DEBUGF("channel %u: verbs listens on %s:%u (%s)", ch->config.channel_id, ip,
                  ntohs(rdma_get_src_port(l->id)), ibv_get_device_name(l->id->verbs->device));
    *listener = l;
    return PD_OK;
fail:
    vb_unlisten(l);
    return s;
}

static void reject(struct rdma_cm_id *id, int reason)
{
    pd_vb_reply r = {.magic = PD_VB_MAGIC, .type = PD_VB_REJECT, .reason = (uint8_t)reason, .proto = PD_VB_PROTO};

    (void)rdma_reject(id, &r, sizeof(r));
    rdma_destroy_id(id);
}

/* The same checks as the socket handshake's HELLO: a pipedream sender of
 * another protocol, channel or shape is refused (pd_tp_refuse); a request
 * that is no pipedream sender's is only dropped. */
static pd_status check_hello(pd_channel *ch, const pd_vb_hello *h, size_t len)
{
    uint32_t id = ch->config.channel_id;

    if (len < sizeof(*h) || h->magic != PD_VB_MAGIC || h->type != PD_VB_HELLO || h->role != PD_TP_SENDER)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: a connection request that is not a pipedream sender's", id);
    if (h->proto != PD_VB_PROTO)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: handshake: peer speaks protocol %u, this build %u", id,
                                         h->proto, PD_VB_PROTO));
    if (h->channel_id != id)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: handshake: the peer opened channel %u", id,
                                         h->channel_id));
    if (h->depth != (uint32_t)ch->config.depth || h->slot_bytes != ch->config.slot_bytes || h->stride != ch->stride)
        return pd_tp_refuse(
            ch, PD_ERROR(PD_ECOMM,
                         "channel %u: handshake: the peer's channel has depth %u x %llu bytes, this one %d x %zu", id,
                         h->depth, (unsigned long long)h->slot_bytes, ch->config.depth, ch->config.slot_bytes));
    return PD_OK;
}

/* Receiver: a sender asks to connect. Its shape is checked, a queue pair
 * made and moved to RTS, and the accept carries this end's nonce and
 * proof; nothing of the slots is exposed yet. */
static pd_status on_request(pd_channel *ch, vb_listener *l, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    pd_vb_hello h = {0};
    size_t len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    pd_vb_reply reply = {.magic = PD_VB_MAGIC, .type = PD_VB_ACCEPT, .proto = PD_VB_PROTO};
    struct rdma_conn_param param = {.private_data = &reply, .private_data_len = sizeof(reply), .rnr_retry_count = 7};
    pd_vb_conn *c;
    pd_status s;

    if (len)
        memcpy(&h, ev->param.conn.private_data, len < sizeof(h) ? len : sizeof(h));
    rdma_ack_cm_event(ev);
    if (l->pending) { /* one sender per channel: the first one's handshake goes on */
        reject(id, REJECT_BUSY);
        return PD_OK;
    }
    s = check_hello(ch, &h, len);
    if (s != PD_OK) {
        reject(id, REJECT_SHAPE);
        return s;
    }
    PD_CHECK(pd_vb_conn_create(ch, PD_TP_RECEIVER, NULL, id, &c));
    memcpy(c->peer_nonce, h.nonce, sizeof(c->peer_nonce));
    PD_CHECK_GOTO(pd_vb_qp_modify(ch, c, IBV_QPS_INIT), s, fail); /* receives need INIT */
    PD_CHECK_GOTO(pd_vb_post_recvs(ch, c, ch->config.depth), s, fail);
    PD_CHECK_GOTO(pd_vb_qp_modify(ch, c, IBV_QPS_RTR), s, fail);
    PD_CHECK_GOTO(pd_vb_qp_modify(ch, c, IBV_QPS_RTS), s, fail);
    memcpy(reply.nonce, c->nonce, sizeof(reply.nonce));
    reply.mac = pd_tp_hs_proof(ch, PD_TP_RECEIVER, c->peer_nonce, c->nonce);
    param.qp_num = c->qp->qp_num;
    if (rdma_accept(c->id, &param) != 0) {
        s = pd_vb_errno(ch, "rdma_accept");
        goto fail;
    }
    l->pending = c;
    return PD_OK;
fail:
    pd_vb_conn_destroy(c);
    return s;
}

static pd_status vb_accept(pd_channel *ch, void *listener)
{
    vb_listener *l = listener;
    struct rdma_cm_event *ev;
    pd_status s;

    while (rdma_get_cm_event(l->ec, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            PD_CHECK(on_request(ch, l, ev));
        } else {
            PD_LOG_DEBUGF("channel %u: verbs listener: %s", ch->config.channel_id, rdma_event_str(ev->event));
            rdma_ack_cm_event(ev);
        }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return pd_vb_errno(ch, "rdma_get_cm_event");
    if (!l->pending)
        return PD_OK;
    PD_CHECK_GOTO(pd_vb_step(ch, l->pending), s, fail);
    if (l->pending->hs_done) {
        ch->be = l->pending;
        ch->ready = true;
        l->pending = NULL;
    }
    return PD_OK;
fail:
    pd_vb_conn_destroy(l->pending);
    l->pending = NULL;
    return s;
}

/* Waits for the cm event `want` during the sender's address and route
 * resolution, until the set-up deadline; any other outcome means RDMA
 * does not reach the peer. */
static pd_status resolve_wait(pd_channel *ch, struct rdma_event_channel *ec, enum rdma_cm_event_type want,
                              const char *addr)
{
    int64_t deadline = ch->setup_deadline_ns;
    struct rdma_cm_event *ev;

    for (;;) {
        if (rdma_get_cm_event(ec, &ev) == 0) {
            enum rdma_cm_event_type got = ev->event;
            int status = ev->status;

            rdma_ack_cm_event(ev);
            if (got == want)
                return PD_OK;
            return PD_ERROR(PD_ENOTFOUND, "verbs: cannot reach %s: %s (%s)", addr, rdma_event_str(got),
                            strerror(status < 0 ? -status : status));
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return pd_vb_errno(ch, "rdma_get_cm_event");
        if (pd_tp_now_ns() > deadline)
            return PD_ERROR(PD_ETIMEOUT, "verbs: cannot reach %s: no answer within the set-up timeout (%d ms)",
                            addr, ch->config.timeout_ms);
        (void)pd_tp_poll1(ec->fd, POLLIN, 10, NULL);
    }
}

/* Sender: resolves the address and route (a peer RDMA cannot reach is
 * PD_ENOTFOUND), makes the queue pair and sends the connect request; the
 * rest completes under progress. Resolution waits at most until the
 * set-up deadline. */
static pd_status vb_connect(pd_channel *ch, const char *addr)
{
    char host[INET_ADDRSTRLEN + 8];
    const char *colon = strrchr(addr, ':');
    struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *ai;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id = NULL;
    pd_vb_hello hello = {.magic = PD_VB_MAGIC, .proto = PD_VB_PROTO, .type = PD_VB_HELLO, .role = PD_TP_SENDER};
    struct rdma_conn_param param = {.private_data = &hello, .private_data_len = sizeof(hello), .retry_count = 7,
                                    .rnr_retry_count = 7};
    pd_vb_conn *c;
    pd_status s;

    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return PD_ERROR(PD_EINVAL, "verbs: bad address '%s' (expected host:port)", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return PD_ERROR(PD_EINVAL, "verbs: bad address '%s' (expected IPv4:port)", addr);
    ec = rdma_create_event_channel();
    if (!ec) {
        freeaddrinfo(ai);
        return PD_ERROR(PD_ENOTFOUND, "verbs: no RDMA connection manager here: %s", strerror(errno));
    }
    s = set_nonblocking(ch, ec->fd);
    if (s == PD_OK && rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) != 0)
        s = pd_vb_errno(ch, "rdma_create_id");
    if (s == PD_OK && rdma_resolve_addr(id, NULL, ai->ai_addr, pd_tp_setup_left_ms(ch)) != 0)
        s = PD_ERROR(PD_ENOTFOUND, "verbs: cannot reach %s: %s", addr, strerror(errno));
    freeaddrinfo(ai);
    if (s == PD_OK)
        s = resolve_wait(ch, ec, RDMA_CM_EVENT_ADDR_RESOLVED, addr);
    if (s == PD_OK && rdma_resolve_route(id, pd_tp_setup_left_ms(ch)) != 0)
        s = PD_ERROR(PD_ENOTFOUND, "verbs: no route to %s: %s", addr, strerror(errno));
    if (s == PD_OK)
        s = resolve_wait(ch, ec, RDMA_CM_EVENT_ROUTE_RESOLVED, addr);
    if (s != PD_OK) {
        if (id)
            rdma_destroy_id(id);
        rdma_destroy_event_channel(ec);
        return s;
    }
    PD_CHECK(pd_vb_conn_create(ch, PD_TP_SENDER, ec, id, &c));
    PD_CHECK_GOTO(pd_vb_qp_modify(ch, c, IBV_QPS_INIT), s, fail);
    /* READY, then one receive per credit write that can be in flight. */
    PD_CHECK_GOTO(pd_vb_post_recvs(ch, c, ch->config.depth + 1), s, fail);
    hello.channel_id = ch->config.channel_id;
    hello.depth = (uint32_t)ch->config.depth;
    hello.slot_bytes = ch->config.slot_bytes;
    hello.stride = ch->stride;
    memcpy(hello.nonce, c->nonce, sizeof(hello.nonce));
    param.qp_num = c->qp->qp_num;
    if (rdma_connect(c->id, &param) != 0) {
        s = PD_ERROR(PD_ENOTFOUND, "verbs: cannot connect to %s: %s", addr, strerror(errno));
        goto fail;
    }
    PD_LOG_DEBUGF("channel %u: verbs connects to %s over %s", ch->config.channel_id, addr,
                  ibv_get_device_name(c->ctx->device));
    ch->be = c;
    return PD_OK;
fail:
    pd_vb_conn_destroy(c);
    return s;
}

/* Sender: the receiver accepted with its nonce and proof. The queue pair
 * goes to RTS and the sender's proof goes out, with the credit word only
 * if the receiver proved the token; if it did not, the proof still goes
 * out (the receiver then fails too, naming the token) and this end fails. */
static pd_status on_connect_response(pd_channel *ch, pd_vb_conn *c, const struct rdma_cm_event *ev)
{
    pd_vb_reply r = {0};
    size_t len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    pd_vb_ctl *out = &c->ctl[1];

    if (len)
        memcpy(&r, ev->param.conn.private_data, len < sizeof(r) ? len : sizeof(r));
    if (len < sizeof(r) || r.magic != PD_VB_MAGIC || r.type != PD_VB_ACCEPT)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: the peer's accept is not a pipedream receiver's",
                        ch->config.channel_id);
    memcpy(c->peer_nonce, r.nonce, sizeof(c->peer_nonce));
    c->peer_proven = r.mac == pd_tp_hs_proof(ch, PD_TP_RECEIVER, c->nonce, c->peer_nonce);
    PD_CHECK(pd_vb_qp_modify(ch, c, IBV_QPS_RTR));
    PD_CHECK(pd_vb_qp_modify(ch, c, IBV_QPS_RTS));
    if (rdma_establish(c->id) != 0)
        return pd_vb_errno(ch, "rdma_establish");
    c->established = true;
    memset(out, 0, PD_VB_CTL_HEAD);
    out->magic = PD_VB_MAGIC;
    out->type = PD_VB_PROOF;
    out->mac = pd_tp_hs_proof(ch, PD_TP_SENDER, c->peer_nonce, c->nonce);
    if (c->peer_proven) {
        out->addr = (uintptr_t)c->credit_word;
        out->rkey = c->credit_mr->rkey;
    }
    PD_CHECK(pd_vb_post_ctl(ch, c, PD_VB_CTL_HEAD));
    if (!c->peer_proven)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer failed to prove the job token",
                                         ch->config.channel_id));
    return PD_OK;
}

/* Why the receiver rejected the connect request; a refusal when it is a
 * pipedream receiver of another shape or id. */
static pd_status rejected(pd_channel *ch, const struct rdma_cm_event *ev)
{
    const pd_vb_reply *r = ev->param.conn.private_data;
    uint32_t id = ch->config.channel_id;

    if (!r || ev->param.conn.private_data_len < sizeof(*r) || r->magic != PD_VB_MAGIC || r->type != PD_VB_REJECT)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: rejected (no pipedream receiver there)", id);
    if (r->reason == REJECT_BUSY)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: rejected (another sender holds the channel)", id);
    return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer rejected this end (channel shape or id differ)",
                                     id));
}

pd_status pd_vb_cm_events(pd_channel *ch, pd_vb_conn *c)
{
    struct rdma_cm_event *ev;
    uint32_t id = ch->config.channel_id;

    while (rdma_get_cm_event(c->ec, &ev) == 0) {
        pd_status s = PD_OK;

        switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            s = c->role == PD_TP_SENDER && !c->established
                    ? on_connect_response(ch, c, ev)
                    : PD_ERROR(PD_ECOMM, "channel %u: verbs: unexpected connect response", id);
            break;
        case RDMA_CM_EVENT_ESTABLISHED: c->established = true; break;
        case RDMA_CM_EVENT_REJECTED: s = rejected(ch, ev); break;
        case RDMA_CM_EVENT_DISCONNECTED:
            /* The peer closed or died. Complete the disconnect (no error
             * in the peer's teardown), after counting what has arrived. */
            c->disconnected = true;
            (void)rdma_disconnect(c->id);
            break;
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
        case RDMA_CM_EVENT_ADDR_CHANGE:
            s = PD_ERROR(PD_ECOMM, "channel %u: verbs: %s (%s)", id, rdma_event_str(ev->event),
                         strerror(ev->status < 0 ? -ev->status : ev->status));
            break;
        default: /* TIMEWAIT_EXIT and the like */ break;
        }
        rdma_ack_cm_event(ev);
        PD_CHECK(s);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return pd_vb_errno(ch, "rdma_get_cm_event");
    return PD_OK;
}

/* Both: a control message arrived in ctl[0]. */
pd_status pd_vb_on_ctl(pd_channel *ch, pd_vb_conn *c, size_t bytes)
{
    const pd_vb_ctl *in = &c->ctl[0];
    pd_vb_ctl *out = &c->ctl[1];
    uint32_t id = ch->config.channel_id;
    size_t depth = (size_t)ch->config.depth;

    if (bytes < PD_VB_CTL_HEAD || in->magic != PD_VB_MAGIC)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: a malformed control message from the peer", id);
    if (c->role == PD_TP_RECEIVER) {
        if (in->type != PD_VB_PROOF || c->hs_done)
            return PD_ERROR(PD_ECOMM, "channel %u: verbs: unexpected control message %u", id, in->type);
        if (in->mac != pd_tp_hs_proof(ch, PD_TP_SENDER, c->nonce, c->peer_nonce))
            return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer failed to prove the job token", id));
        /* Proven: now, and only now, the slots are registered and shown. */
        c->credit_addr = in->addr;
        c->credit_rkey = in->rkey;
        PD_CHECK(pd_vb_register_slots(ch, c));
        memset(out, 0, sizeof(*out));
        out->magic = PD_VB_MAGIC;
        out->type = PD_VB_READY;
        out->addr = (uintptr_t)ch->slots;
        out->stride = ch->stride;
        out->depth = (uint32_t)depth;
        for (size_t i = 0; i < depth; i++)
            out->slot_rkey[i] = c->slot_mr[i]->rkey;
        if (c->dev_mr) { /* payloads straight into the device slots */
            out->dev_addr = (uintptr_t)ch->dev_slots;
            out->dev_stride = ch->dev_stride;
            for (size_t i = 0; i < depth; i++)
                out->slot_rkey[depth + i] = c->dev_mr[i]->rkey;
        }
        PD_CHECK(pd_vb_post_ctl(ch, c, PD_VB_CTL_HEAD + (c->dev_mr ? 2 : 1) * depth * sizeof(uint32_t)));
        c->hs_done = true;
        return PD_OK;
    }
    if (in->type != PD_VB_READY || !c->peer_proven || ch->ready)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: unexpected control message %u", id, in->type);
    if (bytes < PD_VB_CTL_HEAD + (in->dev_addr ? 2 : 1) * depth * sizeof(uint32_t) || in->depth != depth ||
        in->stride != ch->stride || !in->addr || (in->dev_addr && in->dev_stride < ch->config.slot_bytes))
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: the receiver's slots (%u x %llu, device stride %llu) do not fit "
                        "this channel", id, in->depth, (unsigned long long)in->stride,
                        (unsigned long long)in->dev_stride);
    c->slot_addr = in->addr;
    c->dev_slot_addr = in->dev_addr;
    c->dev_slot_stride = in->dev_stride;
    memcpy(c->slot_rkey, in->slot_rkey, (in->dev_addr ? 2 : 1) * depth * sizeof(uint32_t));
    c->hs_done = true;
    ch->ready = true;
    return PD_OK;
}

static pd_status vb_progress(pd_channel *ch) { return pd_vb_step(ch, ch->be); }

static pd_status vb_poll(pd_channel *ch) { return pd_vb_poll(ch, ch->be); }

static pd_status vb_give_credit(pd_channel *ch) { return pd_vb_flush_credit(ch, ch->be); }

static pd_status vb_wait(pd_channel *ch, int timeout_ms)
{
    pd_vb_conn *c = ch->be;
    struct epoll_event ev[2];

    if (epoll_wait(c->epfd, ev, 2, timeout_ms) < 0 && errno != EINTR)
        return pd_vb_errno(ch, "epoll_wait");
    return PD_OK;
}

/* Progress leaves the completion queue armed, so the one descriptor is
 * enough to sleep on. */
static int vb_wait_arm(pd_channel *ch, struct pollfd *fds, int *poll_ms)
{
    pd_vb_conn *c = ch->be;

    *poll_ms = -1;
    fds[0] = (struct pollfd){.fd = c->epfd, .events = POLLIN};
    return 1;
}

static int vb_fd(pd_channel *ch) { return ((pd_vb_conn *)ch->be)->epfd; }

/* A sender's close lets its last writes complete first (bounded by the
 * timeout): a completion means the receiver has the message. */
static void vb_close(pd_channel *ch)
{
    pd_vb_conn *c = ch->be;
    int64_t deadline = pd_tp_now_ns() + (int64_t)ch->config.timeout_ms * 1000000;

    if (c->owner == getpid() && c->established && !c->disconnected) {
        while (c->sq_done < c->sq_posted && !c->disconnected && pd_tp_now_ns() < deadline) {
            if (pd_vb_step(ch, c) != PD_OK)
                break;
            if (c->sq_done < c->sq_posted)
                (void)vb_wait(ch, 10);
        }
        (void)rdma_disconnect(c->id);
    }
    pd_vb_conn_destroy(c);
}

static const pd_tp_ops verbs_ops = {
    .listen = vb_listen,
    .accept = vb_accept,
    .unlisten = vb_unlisten,
    .connect = vb_connect,
    .progress = vb_progress,
    .wait = vb_wait,
    .give_credit = vb_give_credit,
    .close = vb_close,
    .fd = vb_fd,
    .wait_arm = vb_wait_arm,
    .poll = vb_poll,
};

const pd_tp_backend pd_tp_backend_verbs = {"verbs", &verbs_ops};
