/* Channels whose memory is a device's (config.memory PD_TRANSPORT_DEVICE):
 * the choice of path (a pure function of the backend and the capabilities
 * found, and the chain that tries the direct ones in order) and the path
 * every backend can take, staging through pinned host memory. Staging
 * keeps the wire and the host ring as they are: the sender copies a
 * message from the device into its pinned buffer for the slot before the
 * backend sees it; the receiver copies an arrived payload from the host
 * ring into its device slot when it takes the message. The copies run on
 * the caller's thread through config.device's memory entries; progress
 * never touches the device. On a direct path (verbs: dmabuf, peermem) the
 * backend registers the device memory itself and nothing is copied: the
 * receiver's payloads land in its device slots, a sender's registered
 * device buffers are written from in place. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

unsigned pd_tp_slot_caps(const pd_device *dev, bool have_dmabuf_mr, bool force_peermem)
{
    unsigned caps = 0;

    if (!dev)
        return 0;
    if (dev->kind != PD_DEVICE_CPU) {
        if (have_dmabuf_mr && dev->ops && dev->ops->export_dmabuf)
            caps |= PD_SLOT_CAN_DMABUF;
        caps |= PD_SLOT_CAN_PEERMEM;
    } else if (force_peermem) {
        caps |= PD_SLOT_CAN_PEERMEM;
    }
    return caps;
}

static unsigned cap_of(pd_slot_path path)
{
    switch (path) {
    case PD_SLOT_PATH_DMABUF: return PD_SLOT_CAN_DMABUF;
    case PD_SLOT_PATH_PEERMEM: return PD_SLOT_CAN_PEERMEM;
    case PD_SLOT_PATH_CUDA_IPC: return PD_SLOT_CAN_CUDA_IPC;
    default: return 0;
    }
}

pd_slot_path pd_tp_slot_walk(uint32_t id, const char *backend, unsigned *caps, pd_tp_slot_try try_path, void *ctx,
                             char *why, size_t why_size)
{
    for (;;) {
        pd_slot_path path = pd_transport_slot_path(backend, PD_TRANSPORT_DEVICE, *caps);
        size_t used;

        if (!cap_of(path) || try_path(ctx, path) == PD_OK)
            return path;
        *caps &= ~cap_of(path);
        PD_LOG_DEBUGF("channel %u: %s: path %s failed: %s", id, backend ? backend : "none", pd_slot_path_name(path),
                      pd_last_error());
        if (why && why_size) {
            used = strnlen(why, why_size - 1);
            snprintf(why + used, why_size - used, "%s%s: %.*s", used ? "; " : "", pd_slot_path_name(path),
                     PD_TP_REASON_BYTES - 20, pd_last_error());
        }
    }
}

/* What this build and the device offer beyond staging: the verbs paths
 * where verbs is built (dmabuf where ibv_reg_dmabuf_mr is), for a device
 * with memory of its own (or the cpu device with
 * $PD_TRANSPORT_FORCE_PEERMEM=1, for tests). CUDA IPC for shm is designed
 * (docs/transport.md) but not built, so it is never offered. */
static unsigned slot_caps(const pd_channel *ch)
{
#ifdef PD_TP_VERBS
    const char *force = getenv("PD_TRANSPORT_FORCE_PEERMEM");
#ifdef HAVE_IBV_REG_DMABUF_MR
    bool dmabuf = true;
#else
    bool dmabuf = false;
#endif
    return pd_tp_slot_caps(ch->config.device, dmabuf, force && strcmp(force, "1") == 0);
#else
    return 0;
#endif
}

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

/* Bytes rounded up to the host page (what dmabuf and MR ranges need). */
static size_t page_round(size_t bytes, size_t page) { return (bytes + page - 1) / page * page; }

pd_status pd_tp_slots_open(pd_channel *ch)
{
    pd_device *dev = ch->config.device;
    size_t depth = (size_t)ch->config.depth, bytes = depth * ch->config.slot_bytes, page;
    long sys_page = sysconf(_SC_PAGESIZE);
    void *p = NULL;

    ch->slot_path = on_device(ch) ? PD_SLOT_PATH_STAGED : PD_SLOT_PATH_HOST;
    if (!on_device(ch))
        return PD_OK;
    ch->slot_caps = slot_caps(ch);
    if (ch->role == PD_TP_SENDER) {
        PD_CHECK(dev->ops->host_alloc(dev, bytes, &p));
        ch->staging = p;
        ch->regions[ch->nregions++] = (pd_tp_region){p, bytes, PD_SLOT_PATH_HOST};
        return PD_OK;
    }
    ch->dev_stride = ch->config.slot_bytes;
    if (!(ch->slot_caps & PD_SLOT_CAN_VERBS)) {
        PD_CHECK(dev->mem->alloc(dev, bytes, &p));
        ch->dev_alloc = ch->dev_slots = p;
        return PD_OK;
    }
    /* A direct path registers each slot as a region of its own: slots on
     * page boundaries, the range padded by a page so that a dmabuf export
     * (rounded out to pages) stays inside the allocation. */
    page = sys_page > 0 ? (size_t)sys_page : PD_TP_PAGE;
    ch->dev_stride = page_round(ch->config.slot_bytes, page);
    PD_CHECK(dev->mem->alloc(dev, depth * ch->dev_stride + 2 * page, &p));
    ch->dev_alloc = p;
    ch->dev_slots = (uint8_t *)page_round((uintptr_t)p, page) + page;
    return PD_OK;
}

void pd_tp_slots_close(pd_channel *ch)
{
    pd_device *dev = ch->config.device;

    if (ch->staging)
        dev->ops->host_free(dev, ch->staging);
    if (ch->dev_alloc)
        dev->mem->free(dev, ch->dev_alloc);
    ch->staging = NULL;
    ch->dev_slots = NULL;
    ch->dev_alloc = NULL;
}

bool pd_tp_slots_direct(const pd_channel *ch)
{
    return ch->slot_path == PD_SLOT_PATH_DMABUF || ch->slot_path == PD_SLOT_PATH_PEERMEM;
}

/* The device and the path in one info line; why direct paths failed, if
 * any did, so that a fallback to staging is never silent. */
static void say_path(const pd_channel *ch, const char *what, pd_slot_path path)
{
    PD_LOG_INFOF("channel %u: %s over %s, %s memory of %s: path %s%s%s%s", ch->config.channel_id,
                 ch->role == PD_TP_SENDER ? "sending" : "receiving", pd_channel_backend(ch), what,
                 ch->config.device->name, pd_slot_path_name(path), *ch->slot_why ? " (failed: " : "", ch->slot_why,
                 *ch->slot_why ? ")" : "");
}

void pd_tp_slots_choose(pd_channel *ch)
{
    if (ch->slot_path_chosen)
        return;
    ch->slot_path_chosen = true;
    /* The receiver's backend tried its direct paths before the handshake
     * completed (clearing what failed from slot_caps); a sender's go per
     * registered buffer (pd_tp_slots_region_path, which may have run in
     * this very step), the rest is staged: its path stays as it is. */
    if (ch->role == PD_TP_RECEIVER)
        ch->slot_path = pd_transport_slot_path(pd_channel_backend(ch), ch->config.memory, ch->slot_caps);
    if (on_device(ch))
        say_path(ch, ch->role == PD_TP_SENDER ? "send buffers in" : "slots in", ch->slot_path);
}

void pd_tp_slots_region_path(pd_channel *ch, int i, pd_slot_path path)
{
    char what[64];

    ch->regions[i].path = path;
    if (path != PD_SLOT_PATH_STAGED)
        ch->slot_path = path;
    snprintf(what, sizeof(what), "a registered buffer of %zu bytes in", ch->regions[i].bytes);
    say_path(ch, what, path);
}

/* The direct region holding all of [data, data + bytes), if any. */
static bool in_direct_region(const pd_channel *ch, const void *data, size_t bytes)
{
    uintptr_t a = (uintptr_t)data;

    for (int i = 0; i < ch->nregions; i++) {
        const pd_tp_region *r = &ch->regions[i];
        if ((r->path == PD_SLOT_PATH_DMABUF || r->path == PD_SLOT_PATH_PEERMEM) && a >= (uintptr_t)r->data &&
            bytes <= r->bytes && a - (uintptr_t)r->data <= r->bytes - bytes)
            return true;
    }
    return false;
}

pd_status pd_tp_slots_stage_send(pd_channel *ch, uint64_t seq, const void *data, size_t bytes, const void **out)
{
    pd_device *dev = ch->config.device;
    uint8_t *buf;

    *out = data;
    if (!on_device(ch) || bytes == 0 || in_direct_region(ch, data, bytes))
        return PD_OK;
    buf = ch->staging + (seq % (uint64_t)ch->config.depth) * ch->config.slot_bytes;
    PD_CHECK(dev->mem->copy(dev, buf, data, bytes, PD_COPY_DEVICE_TO_HOST));
    ch->staged_copies++;
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
    slot = ch->dev_slots + (seq % (uint64_t)ch->config.depth) * ch->dev_stride;
    if (bytes && !pd_tp_slots_direct(ch)) {
        PD_CHECK(dev->mem->copy(dev, slot, payload, bytes, PD_COPY_HOST_TO_DEVICE));
        ch->staged_copies++;
    }
    *out = slot;
    return PD_OK;
}
