/* verbs backend: the resources of one connection (device context,
 * protection domain, completion queue and channel, RC queue pair, memory
 * regions) and the few verbs calls around them. No region and no queue
 * pair is ever remote-readable: the receiver's slots and the sender's
 * credit word allow remote writes, everything else is local. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "transport/verbs_int.h"

#define REMOTE_WRITE_ONLY (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

pd_status pd_vb_errno(const pd_channel *ch, const char *what)
{
    return PD_ERROR(PD_ECOMM, "channel %u: verbs: %s: %s", ch->config.channel_id, what, strerror(errno));
}

static pd_status reg(pd_channel *ch, pd_vb_conn *c, void *addr, size_t bytes, int access, struct ibv_mr **out)
{
    *out = ibv_reg_mr(c->pd, addr, bytes, access);
    if (!*out)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: cannot register %zu bytes: %s", ch->config.channel_id, bytes,
                        strerror(errno));
    return PD_OK;
}

/* Queue sizes (a message write has two pieces: the staged header and the
 * payload, staged or in place; into device slots it is two writes, the
 * payload's and the header's): the sender's send queue holds its message
 * writes and the proof, its receive queue READY and one receive per credit; the
 * receiver's send queue holds READY and the credit writes, its receive
 * queue the proof and one receive per slot. */
static void queue_sizes(const pd_channel *ch, pd_tp_role role, uint32_t *send, uint32_t *recv)
{
    uint32_t depth = (uint32_t)ch->config.depth;

    *send = role == PD_TP_SENDER ? 2 * depth + 1 : PD_VB_CREDIT_SLOTS + 1;
    *recv = role == PD_TP_SENDER ? depth + 2 : depth + 1;
}

static pd_status role_memory(pd_channel *ch, pd_vb_conn *c)
{
    size_t depth = (size_t)ch->config.depth;

    if (c->role == PD_TP_RECEIVER) {
        c->slot_mr = calloc(depth, sizeof(*c->slot_mr));
        if (posix_memalign((void **)&c->credit_src, 64, PD_VB_CREDIT_SLOTS * sizeof(uint64_t)) != 0)
            c->credit_src = NULL;
        if (!c->slot_mr || !c->credit_src)
            return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
        memset(c->credit_src, 0, PD_VB_CREDIT_SLOTS * sizeof(uint64_t));
        return reg(ch, c, c->credit_src, PD_VB_CREDIT_SLOTS * sizeof(uint64_t), 0, &c->credit_src_mr);
    }
    c->slot_rkey = calloc(2 * depth, sizeof(*c->slot_rkey));
    c->direct = calloc(depth, 1);
    /* The credit word alone on its page: the only thing a receiver may write. */
    if (posix_memalign((void **)&c->credit_word, PD_TP_PAGE, PD_TP_PAGE) != 0)
        c->credit_word = NULL;
    c->staging_bytes = depth * ch->stride;
    c->staging = mmap(NULL, c->staging_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->staging == MAP_FAILED)
        c->staging = NULL;
    if (!c->slot_rkey || !c->direct || !c->credit_word || !c->staging)
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory for %zu bytes of staging", ch->config.channel_id,
                        c->staging_bytes);
    *c->credit_word = 0;
    PD_CHECK(reg(ch, c, c->credit_word, sizeof(uint64_t), REMOTE_WRITE_ONLY, &c->credit_mr));
    return reg(ch, c, c->staging, c->staging_bytes, 0, &c->staging_mr);
}

static pd_status epoll_add(pd_channel *ch, int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return pd_vb_errno(ch, "epoll_ctl");
    return PD_OK;
}

pd_status pd_vb_conn_create(pd_channel *ch, pd_tp_role role, struct rdma_event_channel *ec, struct rdma_cm_id *id,
                            pd_vb_conn **out)
{
    pd_vb_conn *c = calloc(1, sizeof(*c));
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
    uint32_t send, recv;
    pd_status s;

    if (!c) {
        rdma_destroy_id(id);
        if (ec) /* NULL: the id is still on its listener's channel */
            rdma_destroy_event_channel(ec);
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
    }
    c->owner = getpid();
    c->role = role;
    c->epfd = -1;
    c->id = id;
    c->ec = ec;
    if (!c->ec) {
        c->ec = rdma_create_event_channel();
        if (!c->ec) {
            s = pd_vb_errno(ch, "rdma_create_event_channel");
            rdma_destroy_id(id);
            c->id = NULL;
            goto fail;
        }
        if (rdma_migrate_id(id, c->ec) != 0) {
            s = pd_vb_errno(ch, "rdma_migrate_id");
            goto fail;
        }
    }
    if (fcntl(c->ec->fd, F_SETFL, fcntl(c->ec->fd, F_GETFL) | O_NONBLOCK) != 0) {
        s = pd_vb_errno(ch, "fcntl");
        goto fail;
    }
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != (ssize_t)sizeof(c->nonce)) {
        s = PD_ERROR(PD_EIO, "channel %u: verbs: getrandom: %s", ch->config.channel_id, strerror(errno));
        goto fail;
    }
    /* Our own context on the cm id's device: librdmacm's is process-wide
     * and survives fork, ours is this connection's. */
    c->ctx = ibv_open_device(id->verbs->device);
    if (!c->ctx) {
        s = pd_vb_errno(ch, "ibv_open_device");
        goto fail;
    }
    c->pd = ibv_alloc_pd(c->ctx);
    c->comp = c->pd ? ibv_create_comp_channel(c->ctx) : NULL;
    if (!c->pd || !c->comp) {
        s = pd_vb_errno(ch, c->pd ? "ibv_create_comp_channel" : "ibv_alloc_pd");
        goto fail;
    }
    if (fcntl(c->comp->fd, F_SETFL, fcntl(c->comp->fd, F_GETFL) | O_NONBLOCK) != 0) {
        s = pd_vb_errno(ch, "fcntl");
        goto fail;
    }
    queue_sizes(ch, role, &send, &recv);
    c->cq = ibv_create_cq(c->ctx, (int)(send + recv), NULL, c->comp, 0);
    if (!c->cq) {
        s = pd_vb_errno(ch, "ibv_create_cq");
        goto fail;
    }
    qa.send_cq = c->cq;
    qa.recv_cq = c->cq;
    qa.cap = (struct ibv_qp_cap){.max_send_wr = send, .max_recv_wr = recv, .max_send_sge = 2, .max_recv_sge = 1};
    c->qp = ibv_create_qp(c->pd, &qa);
    if (!c->qp) {
        s = pd_vb_errno(ch, "ibv_create_qp");
        goto fail;
    }
    if (posix_memalign((void **)&c->ctl, PD_TP_PAGE, 2 * sizeof(pd_vb_ctl)) != 0) {
        c->ctl = NULL;
        s = PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
        goto fail;
    }
    memset(c->ctl, 0, 2 * sizeof(pd_vb_ctl));
    PD_CHECK_GOTO(reg(ch, c, c->ctl, 2 * sizeof(pd_vb_ctl), IBV_ACCESS_LOCAL_WRITE, &c->ctl_mr), s, fail);
    PD_CHECK_GOTO(role_memory(ch, c), s, fail);
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0) {
        s = pd_vb_errno(ch, "epoll_create1");
        goto fail;
    }
    PD_CHECK_GOTO(epoll_add(ch, c->epfd, c->comp->fd), s, fail);
    PD_CHECK_GOTO(epoll_add(ch, c->epfd, c->ec->fd), s, fail);
    *out = c;
    return PD_OK;
fail:
    pd_vb_conn_destroy(c);
    return s;
}

static void dereg(struct ibv_mr *mr)
{
    if (mr)
        ibv_dereg_mr(mr);
}

void pd_vb_conn_destroy(pd_vb_conn *c)
{
    if (!c)
        return;
    /* A forked child shares its parent's device file: destroying through
     * it would destroy the parent's objects. The child only lets go. */
    if (c->owner == getpid()) {
        if (c->qp)
            ibv_destroy_qp(c->qp);
        if (c->id)
            rdma_destroy_id(c->id);
        for (int i = 0; i < c->slot_mrs; i++)
            dereg(c->slot_mr[i]);
        for (int i = 0; c->dev_mr && i < c->slot_mrs; i++)
            dereg(c->dev_mr[i]);
        dereg(c->ctl_mr);
        dereg(c->staging_mr);
        dereg(c->credit_mr);
        dereg(c->credit_src_mr);
        for (int i = 0; i < c->region_mrs; i++)
            dereg(c->region_mr[i]);
        if (c->cq)
            ibv_destroy_cq(c->cq);
        if (c->comp)
            ibv_destroy_comp_channel(c->comp);
        if (c->pd)
            ibv_dealloc_pd(c->pd);
        if (c->ctx)
            ibv_close_device(c->ctx);
        if (c->ec)
            rdma_destroy_event_channel(c->ec);
    } else {
        if (c->comp)
            close(c->comp->fd);
        if (c->ec)
            close(c->ec->fd);
    }
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->staging)
        munmap(c->staging, c->staging_bytes);
    free(c->ctl);
    free(c->slot_mr);
    free(c->dev_mr);
    free(c->slot_rkey);
    free(c->direct);
    free(c->credit_word);
    free(c->credit_src);
    free(c);
}

pd_status pd_vb_qp_modify(pd_channel *ch, pd_vb_conn *c, enum ibv_qp_state state)
{
    struct ibv_qp_attr attr = {.qp_state = state};
    int mask = 0;

    if (rdma_init_qp_attr(c->id, &attr, &mask) != 0)
        return pd_vb_errno(ch, "rdma_init_qp_attr");
    if (state == IBV_QPS_INIT || (mask & IBV_QP_ACCESS_FLAGS)) {
        attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    /* Neither end reads remotely nor serves reads. */
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        attr.max_dest_rd_atomic = 0;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
        attr.max_rd_atomic = 0;
    errno = ibv_modify_qp(c->qp, &attr, mask);
    if (errno != 0)
        return pd_vb_errno(ch, state == IBV_QPS_INIT ? "modify QP to INIT"
                              : state == IBV_QPS_RTR ? "modify QP to RTR" : "modify QP to RTS");
    return PD_OK;
}

pd_status pd_vb_post_recvs(pd_channel *ch, pd_vb_conn *c, int count)
{
    struct ibv_sge sge = {.addr = (uintptr_t)&c->ctl[0], .length = sizeof(pd_vb_ctl), .lkey = c->ctl_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)PD_VB_WR_CTL_RECV << 32, .sg_list = &sge, .num_sge = 1}, *bad;

    errno = ibv_post_recv(c->qp, &wr, &bad);
    if (errno != 0)
        return pd_vb_errno(ch, "ibv_post_recv");
    /* Immediates need no buffer: the data went to the slot (or the word). */
    wr = (struct ibv_recv_wr){.wr_id = (uint64_t)PD_VB_WR_IMM_RECV << 32};
    for (int i = 0; i < count; i++) {
        errno = ibv_post_recv(c->qp, &wr, &bad);
        if (errno != 0)
            return pd_vb_errno(ch, "ibv_post_recv");
    }
    return PD_OK;
}

pd_status pd_vb_post_ctl(pd_channel *ch, pd_vb_conn *c, size_t bytes)
{
    struct ibv_sge sge = {.addr = (uintptr_t)&c->ctl[1], .length = (uint32_t)bytes, .lkey = c->ctl_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)PD_VB_WR_CTL_SEND << 32, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                       *bad;

    errno = ibv_post_send(c->qp, &wr, &bad);
    if (errno != 0)
        return pd_vb_errno(ch, "ibv_post_send");
    c->sq_posted++;
    return PD_OK;
}

pd_status pd_vb_register_slots(pd_channel *ch, pd_vb_conn *c)
{
    size_t depth = (size_t)ch->config.depth;

    for (; c->slot_mrs < ch->config.depth; c->slot_mrs++)
        PD_CHECK(reg(ch, c, ch->slots + (size_t)c->slot_mrs * ch->stride, ch->stride, REMOTE_WRITE_ONLY,
                     &c->slot_mr[c->slot_mrs]));
    /* Device slots: a region each, directly where a path works (the
     * payloads then land there); else the slots stay the host ring's and
     * taking a message copies (staged). */
    if (!ch->dev_slots || !(ch->slot_caps & PD_SLOT_CAN_VERBS) || c->dev_mr)
        return PD_OK;
    c->dev_mr = calloc(depth, sizeof(*c->dev_mr));
    if (!c->dev_mr)
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
    if (pd_vb_reg_device(ch, c, ch->dev_slots, depth, ch->dev_stride, ch->dev_stride, REMOTE_WRITE_ONLY,
                         c->dev_mr) == PD_SLOT_PATH_STAGED) {
        free(c->dev_mr);
        c->dev_mr = NULL;
    }
    return PD_OK;
}
