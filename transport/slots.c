/* Channels whose memory is a device's (config.memory PD_TRANSPORT_DEVICE):
 * the choice of path (a pure function of the backend and the capabilities
 * found) and the path every backend can take, staging through pinned host
 * memory. Staging keeps the wire and the host ring as they are: the
 * sender copies a message from the device into its pinned buffer for the
 * slot before the backend sees it; the receiver copies an arrived payload
 * from the host ring into its device slot when it takes the message. The
 * copies run on the caller's thread through config.device's memory
 * entries; progress never touches the device. */
#include "config.h"

#include <string.h>

#include <pipedream/kernels.h>
#include <pipedream/log.h>

#include "transport/transport_int.h"

pd_slot_path pd_transport_slot_path(const char *backend, pd_transport_memory memory, unsigned caps)
{
    if (memory == PD_TRANSPORT_HOST)
        return PD_SLOT_PATH_HOST;
    if (backend && strcmp(backend, "shm") == 0 && (caps & PD_SLOT_CAN_CUDA_IPC))
        return PD_SLOT_PATH_CUDA_IPC;
    if (backend && strcmp(backend, "verbs") == 0) {
        if (caps & PD_SLOT_CAN_DMABUF)
            return PD_SLOT_PATH_DMABUF;
        if (caps & PD_SLOT_CAN_PEERMEM)
            return PD_SLOT_PATH_PEERMEM;
    }
    return PD_SLOT_PATH_STAGED;
}

const char *pd_slot_path_name(pd_slot_path path)
{
    switch (path) {
    case PD_SLOT_PATH_HOST: return "host";
    case PD_SLOT_PATH_STAGED: return "staged";
    case PD_SLOT_PATH_CUDA_IPC: return "cuda-ipc";
    case PD_SLOT_PATH_DMABUF: return "dmabuf";
    case PD_SLOT_PATH_PEERMEM: return "peermem";
    }
    return "?";
}

/* What this build offers beyond staging. The direct paths (CUDA IPC for
 * shm, dmabuf and peermem registration for verbs) are designed
 * (docs/transport.md) but not built yet, so none is offered and every
 * device channel stages. */
static unsigned slot_caps(const pd_channel *ch) { return 0; }

static bool on_device(const pd_channel *ch) { return ch->config.memory != PD_TRANSPORT_HOST; }

pd_status pd_tp_slots_check(const pd_channel_config *c)
{
    const pd_device *dev = c->device;

    if (c->memory != PD_TRANSPORT_HOST && c->memory != PD_TRANSPORT_DEVICE)
        return PD_ERROR(PD_EINVAL, "channel %u: memory %d is neither host (0) nor device (1)", c->channel_id,
                        (int)c->memory);
    if (c->memory == PD_TRANSPORT_HOST)
        return PD_OK;
    if (!dev)
        return PD_ERROR(PD_EINVAL, "channel %u: device memory needs config.device", c->channel_id);
    if (!dev->mem || !dev->mem->alloc || !dev->mem->free || !dev->mem->copy || !dev->ops || !dev->ops->host_alloc ||
        !dev->ops->host_free)
        return PD_ERROR(PD_EINVAL, "channel %u: device %s lacks the memory entries a channel needs", c->channel_id,
                        dev->name);
    return PD_OK;
}

pd_status pd_tp_slots_open(pd_channel *ch)
{
    pd_device *dev = ch->config.device;
    size_t bytes = (size_t)ch->config.depth * ch->config.slot_bytes;
    void *p = NULL;

    ch->slot_path = on_device(ch) ? PD_SLOT_PATH_STAGED : PD_SLOT_PATH_HOST;
    if (!on_device(ch))
        return PD_OK;
    if (ch->role == PD_TP_SENDER) {
        PD_CHECK(dev->ops->host_alloc(dev, bytes, &p));
        ch->staging = p;
        ch->regions[ch->nregions++] = (pd_tp_region){p, bytes};
    } else {
        PD_CHECK(dev->mem->alloc(dev, bytes, &p));
        ch->dev_slots = p;
    }
    return PD_OK;
}

void pd_tp_slots_close(pd_channel *ch)
{
    pd_device *dev = ch->config.device;

    if (ch->staging)
        dev->ops->host_free(dev, ch->staging);
    if (ch->dev_slots)
        dev->mem->free(dev, ch->dev_slots);
    ch->staging = ch->dev_slots = NULL;
}

void pd_tp_slots_choose(pd_channel *ch)
{
    if (ch->slot_path_chosen)
        return;
    ch->slot_path_chosen = true;
    ch->slot_path = pd_transport_slot_path(pd_channel_backend(ch), ch->config.memory, slot_caps(ch));
    if (on_device(ch))
        PD_LOG_INFOF("channel %u: %s over %s, %s memory of %s: path %s", ch->config.channel_id,
                     ch->role == PD_TP_SENDER ? "sending" : "receiving", pd_channel_backend(ch),
                     ch->role == PD_TP_SENDER ? "send buffers in" : "slots in", ch->config.device->name,
                     pd_slot_path_name(ch->slot_path));
}

pd_status pd_tp_slots_stage_send(pd_channel *ch, uint64_t seq, const void *data, size_t bytes, const void **out)
{
    pd_device *dev = ch->config.device;
    uint8_t *buf;

    *out = data;
    if (!on_device(ch) || bytes == 0)
        return PD_OK;
    buf = ch->staging + (seq % (uint64_t)ch->config.depth) * ch->config.slot_bytes;
    PD_CHECK(dev->mem->copy(dev, buf, data, bytes, PD_COPY_DEVICE_TO_HOST));
    *out = buf;
    return PD_OK;
}

pd_status pd_tp_slots_deliver(pd_channel *ch, uint64_t seq, void *payload, size_t bytes, void **out)
{
    pd_device *dev = ch->config.device;
    uint8_t *slot;

    *out = payload;
    if (!on_device(ch))
        return PD_OK;
    slot = ch->dev_slots + (seq % (uint64_t)ch->config.depth) * ch->config.slot_bytes;
    if (bytes)
        PD_CHECK(dev->mem->copy(dev, slot, payload, bytes, PD_COPY_HOST_TO_DEVICE));
    *out = slot;
    return PD_OK;
}
