/* verbs backend: the data path. The sender writes header and payload with
 * one RDMA WRITE WITH IMMEDIATE into the receiver's slot (the header from
 * its registered staging slot, the payload in place from a registered
 * region or copied behind the header); the receiver's completion names slot
 * and sequence, the header is checked in place before the message counts
 * as arrived; released slots go back as credit writes. A step that finds
 * nothing to do leaves the completion queue armed, and the completion
 * channel and the cm's descriptor (one epoll set) wake a sleeper; a
 * blocking wait of a streaming channel polls first (pd_vb_poll), arming
 * nothing, so a stream's completions raise no events. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include <pipedream/log.h>

#include "transport/verbs_int.h"

static const char *wr_name(int kind)
{
    switch (kind) {
    case PD_VB_WR_CTL_RECV: return "receive of a control message";
    case PD_VB_WR_CTL_SEND: return "send of a control message";
    case PD_VB_WR_IMM_RECV: return "receive of an immediate";
    case PD_VB_WR_MSG_WRITE: return "message write";
    case PD_VB_WR_CREDIT_WRITE: return "credit write";
    case PD_VB_WR_PAYLOAD_WRITE: return "payload write into a device slot";
    default: return "unknown work request";
    }
}

static pd_status repost_imm(pd_channel *ch, pd_vb_conn *c)
{
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)PD_VB_WR_IMM_RECV << 32}, *bad;

    errno = ibv_post_recv(c->qp, &wr, &bad);
    return errno ? pd_vb_errno(ch, "ibv_post_recv") : PD_OK;
}

/* Sends are done in order: a copied one once it started, one written in
 * place once its write completed (the receiver has it). */
static void advance_done(pd_channel *ch, pd_vb_conn *c)
{
    uint64_t depth = (uint64_t)ch->config.depth;

    while (ch->done < ch->started && (!c->direct[ch->done % depth] || ch->done < c->acked))
        ch->done++;
}

/* Receiver: message ch->arrived was written into its slot. */
static pd_status on_message(pd_channel *ch, pd_vb_conn *c, const struct ibv_wc *wc)
{
    uint32_t imm = ntohl(wc->imm_data);
    uint64_t n = ch->arrived, slot = n % (uint64_t)ch->config.depth;
    pd_tp_header h;
    uint64_t expect;

    if ((imm & ((1u << PD_VB_SLOT_BITS) - 1)) != slot || imm >> PD_VB_SLOT_BITS != (n & PD_VB_SEQ_MASK))
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: the write's immediate names slot %u, sequence bits %u; expected slot %llu",
                        ch->config.channel_id, (unsigned long long)n, imm & ((1u << PD_VB_SLOT_BITS) - 1),
                        imm >> PD_VB_SLOT_BITS, (unsigned long long)slot);
    /* A private copy, checked before the slot is handed out. */
    memcpy(&h, ch->slots + slot * ch->stride, sizeof(h));
    PD_CHECK(pd_tp_header_check(ch, &h));
    /* Into device slots the payload came in a write of its own (its
     * region ends with the slot) and this one carried the header alone. */
    expect = sizeof(h) + (c->dev_mr ? 0 : h.bytes);
    if (wc->byte_len != expect)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: the write carried %u bytes, expected %llu (header: 64 + %llu)",
                        ch->config.channel_id, (unsigned long long)n, wc->byte_len, (unsigned long long)expect,
                        (unsigned long long)h.bytes);
    pd_tp_header_accept(ch, &h);
    return repost_imm(ch, c);
}

/* Sender: a credit write landed. Its immediate holds the low 32 bits of
 * the released count (read from the completion, so a later write still
 * landing in the credit word can never be seen half-written). */
static pd_status on_credit(pd_channel *ch, pd_vb_conn *c, const struct ibv_wc *wc)
{
    uint32_t low = ntohl(wc->imm_data);
    uint64_t released = ch->peer_released + (uint32_t)(low - (uint32_t)ch->peer_released);

    PD_CHECK(pd_tp_credit_update(ch, released));
    return repost_imm(ch, c);
}

static pd_status on_completion(pd_channel *ch, pd_vb_conn *c, const struct ibv_wc *wc)
{
    int kind = (int)(wc->wr_id >> 32);

    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status == IBV_WC_WR_FLUSH_ERR && c->disconnected)
            return PD_OK;
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: %s failed: %s (vendor error 0x%x)", ch->config.channel_id,
                        wr_name(kind), ibv_wc_status_str(wc->status), wc->vendor_err);
    }
    switch (kind) {
    case PD_VB_WR_CTL_RECV: return pd_vb_on_ctl(ch, c, wc->byte_len);
    case PD_VB_WR_IMM_RECV:
        if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !c->hs_done)
            return PD_ERROR(PD_ECOMM, "channel %u: verbs: unexpected %s from the peer", ch->config.channel_id,
                            wc->opcode == IBV_WC_RECV ? "message" : "write");
        return c->role == PD_TP_RECEIVER ? on_message(ch, c, wc) : on_credit(ch, c, wc);
    case PD_VB_WR_MSG_WRITE:
        c->acked++;
        advance_done(ch, c);
        break;
    case PD_VB_WR_CREDIT_WRITE: c->credit_done++; break;
    case PD_VB_WR_CTL_SEND:
    case PD_VB_WR_PAYLOAD_WRITE: break;
    default: return PD_ERROR(PD_ECOMM, "channel %u: verbs: a completion of unknown work", ch->config.channel_id);
    }
    c->sq_done++;
    return PD_OK;
}

static pd_status poll_cq(pd_channel *ch, pd_vb_conn *c, int *found)
{
    struct ibv_wc wc[16];
    int n;

    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        *found += n;
        for (int i = 0; i < n; i++)
            PD_CHECK(on_completion(ch, c, &wc[i]));
    }
    if (n < 0)
        return PD_ERROR(PD_ECOMM, "channel %u: verbs: ibv_poll_cq failed", ch->config.channel_id);
    return PD_OK;
}

/* Sender: registers the regions declared since the last look (once
 * each); one that cannot be registered is simply not used. Device memory
 * goes through the direct paths (a region of the device's sends from
 * its place; one none works for stays staged). */
static void register_regions(pd_channel *ch, pd_vb_conn *c)
{
    for (; c->region_mrs < ch->nregions; c->region_mrs++) {
        const pd_tp_region *r = &ch->regions[c->region_mrs];

        if (r->path != PD_SLOT_PATH_HOST) {
            pd_tp_slots_region_path(ch, c->region_mrs,
                                    pd_vb_reg_device(ch, c, (void *)r->data, 1, r->bytes, r->bytes, 0,
                                                     &c->region_mr[c->region_mrs]));
            continue;
        }
        c->region_mr[c->region_mrs] = ibv_reg_mr(c->pd, (void *)r->data, r->bytes, 0);
        if (!c->region_mr[c->region_mrs])
            PD_LOG_DEBUGF("channel %u: verbs: region of %zu bytes not registered (%s); its sends are copied",
                          ch->config.channel_id, r->bytes, strerror(errno));
    }
}

/* The registered region holding the whole payload, or NULL. */
static const struct ibv_mr *region_of(const pd_vb_conn *c, const pd_tp_send *q)
{
    for (int i = 0; i < c->region_mrs; i++) {
        const struct ibv_mr *mr = c->region_mr[i];
        if (mr && pd_tp_span_within(q->data, q->bytes, mr->addr, mr->length))
            return mr;
    }
    return NULL;
}

/* Sender: every posted send with a credit and a free staging slot (its
 * previous write completed: a write may be retransmitted from it until
 * then) is written: the header from the staging slot, the payload in place
 * from a registered region or else copied behind the header. When the
 * receiver's slots are on its device the payload goes first, in a write
 * of its own into the device slot, and the header's write (with the
 * immediate) follows: the receiver's completion of the later write on the
 * same queue pair says that the earlier one was placed. */
static pd_status start_sends(pd_channel *ch, pd_vb_conn *c)
{
    uint64_t depth = (uint64_t)ch->config.depth;
    pd_tp_send *q;

    register_regions(ch, c);
    while (!c->disconnected && ch->started - c->acked < depth && (q = pd_tp_next_send(ch))) {
        uint64_t n = ch->started, slot = n % depth;
        uint8_t *stage = c->staging + slot * ch->stride;
        const struct ibv_mr *mr = q->bytes ? region_of(c, q) : NULL;
        bool to_device = c->dev_slot_addr && q->bytes;
        struct ibv_sge sge[2] = {{.addr = (uintptr_t)stage, .length = (uint32_t)sizeof(q->header),
                                  .lkey = c->staging_mr->lkey},
                                 {.addr = (uintptr_t)q->data, .length = (uint32_t)q->bytes, .lkey = mr ? mr->lkey : 0}};
        struct ibv_send_wr wr = {.wr_id = (uint64_t)PD_VB_WR_MSG_WRITE << 32 | slot, .sg_list = sge,
                                 .num_sge = mr && !to_device ? 2 : 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                 .send_flags = IBV_SEND_SIGNALED},
                           payload = {.wr_id = (uint64_t)PD_VB_WR_PAYLOAD_WRITE << 32 | slot, .sg_list = &sge[1],
                                      .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                                      .next = &wr},
                           *bad;

        memcpy(stage, &q->header, sizeof(q->header));
        if (!mr && q->bytes) {
            memcpy(stage + sizeof(q->header), q->data, q->bytes);
            if (to_device)
                sge[1] = (struct ibv_sge){.addr = (uintptr_t)(stage + sizeof(q->header)),
                                          .length = (uint32_t)q->bytes, .lkey = c->staging_mr->lkey};
            else
                sge[0].length += (uint32_t)q->bytes;
        }
        c->direct[slot] = mr != NULL;
        /* The slot is the sender's own count, never what a header says. */
        wr.imm_data = htonl((uint32_t)(n & PD_VB_SEQ_MASK) << PD_VB_SLOT_BITS | (uint32_t)slot);
        wr.wr.rdma.remote_addr = c->slot_addr + slot * ch->stride;
        wr.wr.rdma.rkey = c->slot_rkey[slot];
        payload.wr.rdma.remote_addr = c->dev_slot_addr + slot * c->dev_slot_stride;
        payload.wr.rdma.rkey = c->slot_rkey[depth + slot];
        errno = ibv_post_send(c->qp, to_device ? &payload : &wr, &bad);
        if (errno)
            return pd_vb_errno(ch, "ibv_post_send");
        c->sq_posted += to_device ? 2 : 1;
        ch->started++;
    }
    advance_done(ch, c);
    return PD_OK;
}

pd_status pd_vb_flush_credit(pd_channel *ch, pd_vb_conn *c)
{
    uint64_t i = c->credit_posted % PD_VB_CREDIT_SLOTS;
    struct ibv_sge sge = {.addr = (uintptr_t)&c->credit_src[i], .length = sizeof(uint64_t),
                          .lkey = c->credit_src_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)PD_VB_WR_CREDIT_WRITE << 32 | i, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED},
                       *bad;

    uint64_t half = (uint64_t)(ch->config.depth + 1) / 2;

    /* All writes busy: the count goes out with a later one. The sender may
     * still write credit_sent + depth - arrived messages (fewer if some are
     * on the way): while that is half the ring it is not held up, and the
     * count waits, since every arrival and every release looks again; a
     * credit write per message costs both ends a wake-up and the link a
     * round trip. While messages wait to be taken the receiver comes back
     * soon: credits gather up to half the ring. */
    if (!c->hs_done || c->disconnected || c->credit_sent == ch->released ||
        c->credit_posted - c->credit_done >= PD_VB_CREDIT_SLOTS ||
        c->credit_sent + (uint64_t)ch->config.depth - ch->arrived >= half ||
        (ch->taken < ch->arrived && ch->released - c->credit_sent < half))
        return PD_OK;
    c->credit_src[i] = ch->released;
    wr.imm_data = htonl((uint32_t)ch->released);
    wr.wr.rdma.remote_addr = c->credit_addr;
    wr.wr.rdma.rkey = c->credit_rkey;
    errno = ibv_post_send(c->qp, &wr, &bad);
    if (errno)
        return pd_vb_errno(ch, "ibv_post_send");
    c->credit_posted++;
    c->sq_posted++;
    c->credit_sent = ch->released;
    return PD_OK;
}

/* Completions, then what they allow; *found counts the completions and
 * the message writes posted. */
static pd_status work(pd_channel *ch, pd_vb_conn *c, int *found)
{
    uint64_t started = ch->started;

    PD_CHECK(poll_cq(ch, c, found));
    if (!c->hs_done || c->disconnected)
        return PD_OK;
    if (c->role == PD_TP_RECEIVER)
        return pd_vb_flush_credit(ch, c);
    PD_CHECK(start_sends(ch, c));
    *found += (int)(ch->started - started);
    return PD_OK;
}

pd_status pd_vb_poll(pd_channel *ch, pd_vb_conn *c)
{
    int found = 0;

    return work(ch, c, &found);
}

pd_status pd_vb_step(pd_channel *ch, pd_vb_conn *c)
{
    struct epoll_event ev[2];
    bool comp_ready = false, cm_ready = false;
    int found = 0, n;

    /* Busy (completions came or writes went out): the descriptors can
     * wait until a step finds nothing to do. An event raised meanwhile
     * stays readable, so no sleep misses it, and a sender that streams
     * spends no system call per message beyond its post. */
    PD_CHECK(work(ch, c, &found));
    if (found)
        return PD_OK;
    n = epoll_wait(c->epfd, ev, 2, 0);
    for (int i = 0; i < n; i++) {
        comp_ready |= ev[i].data.fd == c->comp->fd;
        cm_ready |= ev[i].data.fd == c->ec->fd;
    }
    if (comp_ready) {
        struct ibv_cq *cq;
        void *unused;

        while (ibv_get_cq_event(c->comp, &cq, &unused) == 0) {
            ibv_ack_cq_events(cq, 1);
            c->armed = false;
        }
    }
    if (cm_ready && !c->disconnected) {
        PD_CHECK(pd_vb_cm_events(ch, c));
        if (c->disconnected) {
            /* What completed before the peer left still counts. */
            PD_CHECK(poll_cq(ch, c, &found));
            ch->peer_closed = true;
            if (!c->hs_done)
                return PD_ERROR(PD_ECOMM, "channel %u: the peer closed the connection during the handshake",
                                ch->config.channel_id);
        }
        PD_CHECK(work(ch, c, &found));
    }
    if (c->armed || c->disconnected)
        return PD_OK;
    /* Arm, then look once more: a completion that came before the arming
     * raises no event. */
    errno = ibv_req_notify_cq(c->cq, 0);
    if (errno)
        return pd_vb_errno(ch, "ibv_req_notify_cq");
    c->armed = true;
    return work(ch, c, &found);
}
