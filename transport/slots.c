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
 * device buffers are written from in place; the receiver flushes the
 * adapter's writes before it hands a slot out. On shm's cuda-ipc path the
 * sender maps the receiver's device slots (a CUDA IPC handle) and its
 * progress copies each payload device to device into its slot. On mpi's
 * cuda-aware-mpi path (both ends agreeing in the handshake) the library
 * itself sends from and receives into device memory. */
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
    if (backend && strcmp(backend, "mpi") == 0 && (caps & PD_SLOT_CAN_CUDA_AWARE_MPI))
        return PD_SLOT_PATH_CUDA_AWARE_MPI;
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
    case PD_SLOT_PATH_CUDA_AWARE_MPI: return "cuda-aware-mpi";
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
        if (dev->ops && dev->ops->ipc_export && dev->ops->ipc_open && dev->ops->ipc_close)
            caps |= PD_SLOT_CAN_CUDA_IPC;
    } else if (force_peermem) {
        caps |= PD_SLOT_CAN_PEERMEM;
    }
    return caps;
}

pd_tp_mpi_direct pd_tp_mpi_direct_check(const pd_device *dev, pd_transport_memory memory, int cuda_aware,
                                        bool force)
{
    if (memory == PD_TRANSPORT_HOST || !dev)
        return PD_TP_MPI_HOST_MEMORY;
    if (dev->kind == PD_DEVICE_CPU)
        return force ? PD_TP_MPI_DIRECT_OK : PD_TP_MPI_CPU_DEVICE;
    if (cuda_aware < 0)
        return PD_TP_MPI_NOT_BUILT;
    return cuda_aware ? PD_TP_MPI_DIRECT_OK : PD_TP_MPI_NOT_AT_RUN_TIME;
}

const char *pd_tp_mpi_direct_why(pd_tp_mpi_direct reason)
{
    switch (reason) {
    case PD_TP_MPI_DIRECT_OK: return "it may";
    case PD_TP_MPI_HOST_MEMORY: return "its memory is host memory";
    case PD_TP_MPI_CPU_DEVICE: return "the cpu device stages";
    case PD_TP_MPI_NOT_BUILT: return "this build's MPI has no CUDA-aware support (mpi-ext.h, MPIX_CUDA_AWARE_SUPPORT)";
    case PD_TP_MPI_NOT_AT_RUN_TIME: return "the MPI library is not CUDA-aware at run time (MPIX_Query_cuda_support)";
    }
    return "an unknown reason";
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

/* What this build and the device offer beyond staging: CUDA IPC for shm
 * where the device has the ipc entries; the verbs paths where verbs is
 * built (dmabuf where ibv_reg_dmabuf_mr is), for a device with memory of
 * its own (or the cpu device with $PD_TRANSPORT_FORCE_PEERMEM=1, for
 * tests). */
static unsigned slot_caps(const pd_channel *ch)
{
    unsigned built = PD_SLOT_CAN_CUDA_IPC;
    bool dmabuf = false, force = false;
#ifdef PD_TP_VERBS
    const char *forced = getenv("PD_TRANSPORT_FORCE_PEERMEM");

    built |= PD_SLOT_CAN_VERBS;
    force = forced && strcmp(forced, "1") == 0;
#ifdef HAVE_IBV_REG_DMABUF_MR
    dmabuf = true;
#endif
#endif
    return pd_tp_slot_caps(ch->config.device, dmabuf, force) & built;
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

/* The host page size. */
static size_t host_page(void)
{
    long sys_page = sysconf(_SC_PAGESIZE);

    return sys_page > 0 ? (size_t)sys_page : PD_TP_PAGE;
}

pd_status pd_channel_device_alloc(struct pd_device *dev, size_t bytes, void **alloc, void **data)
{
    const size_t page = host_page();

    PD_CHECK(dev->mem->alloc(dev, page_round(bytes, page) + 2 * page, alloc));
    *data = (uint8_t *)page_round((uintptr_t)*alloc, page) + page;
    return PD_OK;
}

pd_status pd_tp_slots_open(pd_channel *ch)
{
    pd_device *dev = ch->config.device;
    size_t depth = (size_t)ch->config.depth, bytes = depth * ch->config.slot_bytes;
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
     * page boundaries, in memory a dmabuf export can take. */
    ch->dev_stride = page_round(ch->config.slot_bytes, host_page());
    PD_CHECK(pd_channel_device_alloc(dev, depth * ch->dev_stride, &ch->dev_alloc, &p));
    ch->dev_slots = p;
    return PD_OK;
}

void pd_tp_slots_close(pd_channel *ch)
{
    pd_device *dev = ch->config.device;

    if (ch->staging)
        dev->ops->host_free(dev, ch->staging);
    /* Slots a sender may still map stay allocated (never reused): the
     * device frees them when it closes. */
    if (ch->dev_alloc && !ch->dev_slots_kept)
        dev->mem->free(dev, ch->dev_alloc);
    ch->staging = NULL;
    ch->dev_slots = NULL;
    ch->dev_alloc = NULL;
}

bool pd_tp_slots_direct(const pd_channel *ch)
{
    return ch->slot_path == PD_SLOT_PATH_DMABUF || ch->slot_path == PD_SLOT_PATH_PEERMEM;
}

/* Appends "<what>" to ch->slot_why ("; " between reasons). */
static void add_why(pd_channel *ch, const char *what)
{
    size_t used = strnlen(ch->slot_why, sizeof(ch->slot_why) - 1);

    snprintf(ch->slot_why + used, sizeof(ch->slot_why) - used, "%s%s", used ? "; " : "", what);
}

static pd_status try_export(void *ctx, pd_slot_path path)
{
    pd_channel *ch = ctx;
    pd_device *dev = ch->config.device;

    return dev->ops->ipc_export(dev, ch->dev_alloc, ch->ipc_handle);
}

bool pd_tp_slots_ipc_export(pd_channel *ch)
{
    if (!on_device(ch) || !ch->dev_alloc || !(ch->slot_caps & PD_SLOT_CAN_CUDA_IPC))
        return false;
    if (!ch->ipc_exported)
        ch->ipc_exported = pd_tp_slot_walk(ch->config.channel_id, "shm", &ch->slot_caps, try_export, ch,
                                           ch->slot_why, sizeof(ch->slot_why)) == PD_SLOT_PATH_CUDA_IPC;
    return ch->ipc_exported;
}

/* One attempt at mapping the receiver's slots (the chain's try). */
typedef struct ipc_offer {
    pd_channel *ch;
    const uint8_t *handle;
    uint64_t offset, stride;
} ipc_offer;

static pd_status try_open(void *ctx, pd_slot_path path)
{
    ipc_offer *o = ctx;
    pd_channel *ch = o->ch;
    pd_device *dev = ch->config.device;
    void *p = NULL;

    PD_CHECK(dev->ops->ipc_open(dev, o->handle, &p));
    ch->ipc_peer = p;
    ch->ipc_slots = (uint8_t *)p + o->offset;
    ch->ipc_stride = (size_t)o->stride;
    return PD_OK;
}

pd_status pd_tp_slots_ipc_open(pd_channel *ch, const uint8_t *handle, uint64_t offset, uint64_t stride, bool *mapped,
                               char *reason, size_t reason_size)
{
    ipc_offer o = {ch, handle, offset, stride};
    uint64_t depth = (uint64_t)ch->config.depth;

    *mapped = false;
    /* The receiver is proven; an impossible layout is a broken peer. */
    if (stride < ch->config.slot_bytes || stride > PD_TP_MAX_SLOT_BYTES + 2 * PD_TP_PAGE ||
        offset > PD_TP_MAX_SLOT_BYTES || offset + depth * stride < offset)
        return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM,
                                         "channel %u: shm: the receiver offers device slots %llu bytes apart at "
                                         "offset %llu, for slots of %zu bytes",
                                         ch->config.channel_id, (unsigned long long)stride,
                                         (unsigned long long)offset, ch->config.slot_bytes));
    if (!on_device(ch)) {
        snprintf(reason, reason_size, "its memory is host memory");
        return PD_OK;
    }
    if (!(ch->slot_caps & PD_SLOT_CAN_CUDA_IPC)) {
        snprintf(reason, reason_size, "its device has no CUDA IPC");
        add_why(ch, "cuda-ipc: the device has no CUDA IPC entries");
        return PD_OK;
    }
    *mapped = pd_tp_slot_walk(ch->config.channel_id, "shm", &ch->slot_caps, try_open, &o, ch->slot_why,
                              sizeof(ch->slot_why)) == PD_SLOT_PATH_CUDA_IPC;
    if (*mapped)
        ch->slot_path = PD_SLOT_PATH_CUDA_IPC;
    else
        snprintf(reason, reason_size, "it cannot open the handle");
    return PD_OK;
}

void pd_tp_slots_mpi_decide(pd_channel *ch, pd_tp_mpi_direct mine, pd_tp_mpi_direct peers)
{
    char what[PD_TP_REASON_BYTES];

    if (!on_device(ch))
        return;
    if (mine == PD_TP_MPI_DIRECT_OK && peers == PD_TP_MPI_DIRECT_OK) {
        ch->slot_caps |= PD_SLOT_CAN_CUDA_AWARE_MPI;
        /* The receiver's path follows from its caps when it is chosen. */
        if (ch->role == PD_TP_SENDER)
            ch->slot_path = PD_SLOT_PATH_CUDA_AWARE_MPI;
        return;
    }
    ch->slot_caps &= ~(unsigned)PD_SLOT_CAN_CUDA_AWARE_MPI;
    if (mine != PD_TP_MPI_DIRECT_OK)
        snprintf(what, sizeof(what), "cuda-aware-mpi: %s", pd_tp_mpi_direct_why(mine));
    else
        snprintf(what, sizeof(what), "cuda-aware-mpi: the %s: %s", ch->role == PD_TP_SENDER ? "receiver" : "sender",
                 pd_tp_mpi_direct_why(peers));
    add_why(ch, what);
}

void pd_tp_slots_ipc_refused(pd_channel *ch, const char *reason)
{
    char what[96];

    ch->slot_caps &= ~(unsigned)PD_SLOT_CAN_CUDA_IPC;
    snprintf(what, sizeof(what), "cuda-ipc: the sender did not map the slots: %s", reason);
    add_why(ch, what);
}

/* Whether p lies in the sender's staging buffers (a send staged before
 * the channel knew its path). */
static bool in_staging(const pd_channel *ch, const void *p)
{
    return ch->staging && pd_tp_span_within(p, 1, ch->staging, (size_t)ch->config.depth * ch->config.slot_bytes);
}

pd_status pd_tp_slots_ipc_write(pd_channel *ch, uint64_t seq, const void *data, size_t bytes)
{
    pd_device *dev = ch->config.device;
    uint8_t *slot = ch->ipc_slots + (seq % (uint64_t)ch->config.depth) * ch->ipc_stride;

    if (bytes == 0)
        return PD_OK;
    return dev->mem->copy(dev, slot, data, bytes,
                          in_staging(ch, data) ? PD_COPY_HOST_TO_DEVICE : PD_COPY_DEVICE_TO_DEVICE);
}

pd_status pd_tp_slots_ipc_sync(pd_channel *ch)
{
    pd_device *dev = ch->config.device;

    return dev->mem->synchronize ? dev->mem->synchronize(dev) : PD_OK;
}

void pd_tp_slots_ipc_close(pd_channel *ch)
{
    pd_device *dev = ch->config.device;

    if (ch->ipc_peer)
        dev->ops->ipc_close(dev, ch->ipc_peer);
    ch->ipc_peer = NULL;
    ch->ipc_slots = NULL;
    /* A sender falling back to another backend stages again. */
    if (ch->slot_path == PD_SLOT_PATH_CUDA_IPC)
        ch->slot_path = PD_SLOT_PATH_STAGED;
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
    for (int i = 0; i < ch->nregions; i++) {
        const pd_tp_region *r = &ch->regions[i];
        if ((r->path == PD_SLOT_PATH_DMABUF || r->path == PD_SLOT_PATH_PEERMEM) &&
            pd_tp_span_within(data, bytes, r->data, r->bytes))
            return true;
    }
    return false;
}

pd_status pd_tp_slots_stage_send(pd_channel *ch, uint64_t seq, const void *data, size_t bytes, const void **out)
{
    pd_device *dev = ch->config.device;
    uint8_t *buf;

    *out = data;
    /* On the cuda-ipc path progress copies from the device buffer itself. */
    if (!on_device(ch) || bytes == 0 || in_direct_region(ch, data, bytes) || ch->slot_path == PD_SLOT_PATH_CUDA_IPC)
        return PD_OK;
    /* On cuda-aware-mpi the MPI library reads the buffer with copies of its
     * own, which do not wait for the work queued on the device's stream:
     * that work (what writes the buffer) must be done first. */
    if (ch->slot_path == PD_SLOT_PATH_CUDA_AWARE_MPI)
        return dev->mem->synchronize ? dev->mem->synchronize(dev) : PD_OK;
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
    /* The adapter's writes into the slot completed with the header's;
     * the device may still have to be told to see them. */
    if (bytes && pd_tp_slots_direct(ch) && dev->ops->flush_rdma_writes)
        PD_CHECK(dev->ops->flush_rdma_writes(dev));
    /* On the cuda-ipc path the sender copied and synchronised before it
     * published the message; on cuda-aware-mpi the payload's MPI_Irecv
     * into the slot completed (the library's copies with it). */
    if (bytes && !pd_tp_slots_direct(ch) && ch->slot_path != PD_SLOT_PATH_CUDA_IPC &&
        ch->slot_path != PD_SLOT_PATH_CUDA_AWARE_MPI) {
        PD_CHECK(dev->mem->copy(dev, slot, payload, bytes, PD_COPY_HOST_TO_DEVICE));
        ch->staged_copies++;
    }
    *out = slot;
    return PD_OK;
}
