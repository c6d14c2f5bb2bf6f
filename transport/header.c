/* What every backend shares about messages: the header checks on arrival,
 * the credits and the order in which posted sends may start. */
#include "config.h"

#include "transport/transport_int.h"

pd_status pd_tp_header_check(const pd_channel *ch, const pd_tp_header *h)
{
    uint32_t id = ch->config.channel_id;
    unsigned long long expect = (unsigned long long)ch->arrived;
    uint64_t depth = (uint64_t)ch->config.depth;

    if (h->magic != PD_TP_MSG_MAGIC)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: bad magic 0x%08x", id, expect, h->magic);
    if (h->channel_id != id)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: header names channel %u", id, expect, h->channel_id);
    if (h->seq != ch->arrived)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: header has sequence %llu", id, expect,
                        (unsigned long long)h->seq);
    if (h->slot != h->seq % depth)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: slot %u, expected %llu of %llu", id, expect, h->slot,
                        (unsigned long long)(h->seq % depth), (unsigned long long)depth);
    if (ch->arrived >= ch->released + depth)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu arrived without a credit (%llu slots held)", id, expect,
                        (unsigned long long)(ch->arrived - ch->released));
    if (h->bytes > ch->config.slot_bytes)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: %llu bytes exceed the slot's %zu", id, expect,
                        (unsigned long long)h->bytes, ch->config.slot_bytes);
    if (h->kind < PD_MSG_ACTIVATION || h->kind > PD_MSG_CONTROL)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: unknown kind %u", id, expect, h->kind);
    if (ch->seen_kind[h->kind] && h->minibatch <= ch->last_minibatch[h->kind])
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: minibatch %llu after %llu (tags must increase)", id,
                        expect, (unsigned long long)h->minibatch, (unsigned long long)ch->last_minibatch[h->kind]);
    return PD_OK;
}

void pd_tp_header_accept(pd_channel *ch, const pd_tp_header *h)
{
    ch->arrived_headers[h->slot] = *h;
    ch->seen_kind[h->kind] = true;
    ch->last_minibatch[h->kind] = h->minibatch;
    ch->arrived++;
}

pd_status pd_tp_credit_update(pd_channel *ch, uint64_t released)
{
    if (released < ch->peer_released || released > ch->started)
        return PD_ERROR(PD_ECOMM, "channel %u: the receiver reports %llu slots released, but %llu were written and %llu released before",
                        ch->config.channel_id, (unsigned long long)released, (unsigned long long)ch->started,
                        (unsigned long long)ch->peer_released);
    ch->peer_released = released;
    return PD_OK;
}

pd_tp_send *pd_tp_next_send(pd_channel *ch)
{
    if (!ch->ready || ch->started >= ch->posted || ch->started >= ch->peer_released + (uint64_t)ch->config.depth)
        return NULL;
    return &ch->sendq[ch->started % (uint64_t)ch->config.depth];
}
