/* verbs backend: device memory registered for the adapter itself
 * (GPUDirect RDMA), so that nothing is staged through host memory. The
 * chain (slots.c: pd_tp_slot_walk over the channel's slot_caps) tries, in
 * order, a dmabuf region (the device exports a dma_buf of the range,
 * ibv_reg_dmabuf_mr registers it) and ibv_reg_mr on the device pointer
 * (which works where nvidia-peermem is loaded); a path that fails is said
 * at debug and left out from then on, and when none works the caller
 * stages. The access flags are the caller's: local and remote write for
 * the receiver's slots, none (local read) for a sender's buffers; never a
 * remote read. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream/kernels.h>

#include "transport/verbs_int.h"

/* What one attempt registers: `count` ranges of `bytes`, `stride` apart
 * from `base`, one region each (so that no write crosses a range's end). */
typedef struct vb_dev_reg {
    pd_channel *ch;
    pd_vb_conn *c;
    uint8_t *base;
    size_t count, stride, bytes;
    int access;
    struct ibv_mr **mrs;
} vb_dev_reg;

static void dereg_all(vb_dev_reg *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ibv_dereg_mr(r->mrs[i]);
        r->mrs[i] = NULL;
    }
}

/* One dma_buf for the whole span, a region per range at its offset in it;
 * the descriptor is closed after (each region holds the buffer). */
static pd_status reg_dmabuf(vb_dev_reg *r)
{
#ifdef HAVE_IBV_REG_DMABUF_MR
    pd_device *dev = r->ch->config.device;
    size_t span = (r->count - 1) * r->stride + r->bytes, i;
    uint64_t offset = 0;
    int fd = -1;
    pd_status s = PD_OK;

    if (!dev->ops->export_dmabuf)
        return PD_ERROR(PD_ENOTSUP, "channel %u: %s exports no dma_buf", r->ch->config.channel_id, dev->name);
    PD_CHECK(dev->ops->export_dmabuf(dev, r->base, span, &fd, &offset));
    for (i = 0; i < r->count; i++) {
        r->mrs[i] = ibv_reg_dmabuf_mr(r->c->pd, offset + i * r->stride, r->bytes,
                                      (uint64_t)(uintptr_t)(r->base + i * r->stride), fd, r->access);
        if (!r->mrs[i]) {
            s = PD_ERROR(PD_ECOMM, "channel %u: ibv_reg_dmabuf_mr of %zu bytes of %s: %s", r->ch->config.channel_id,
                         r->bytes, dev->name, strerror(errno));
            dereg_all(r, i);
            break;
        }
    }
    close(fd);
    return s;
#else
    return PD_ERROR(PD_ENOTSUP, "channel %u: this build's libibverbs has no ibv_reg_dmabuf_mr",
                    r->ch->config.channel_id);
#endif
}

/* ibv_reg_mr on the device pointers: the adapter's driver pins them
 * through nvidia-peermem where it is loaded, else it fails (EFAULT). */
static pd_status reg_peermem(vb_dev_reg *r)
{
    for (size_t i = 0; i < r->count; i++) {
        r->mrs[i] = ibv_reg_mr(r->c->pd, r->base + i * r->stride, r->bytes, r->access);
        if (!r->mrs[i]) {
            pd_status s = PD_ERROR(PD_ECOMM, "channel %u: ibv_reg_mr of %zu bytes of %s: %s",
                                   r->ch->config.channel_id, r->bytes, r->ch->config.device->name, strerror(errno));
            dereg_all(r, i);
            return s;
        }
    }
    return PD_OK;
}

static pd_status try_path(void *ctx, pd_slot_path path)
{
    vb_dev_reg *r = ctx;

    switch (path) {
    case PD_SLOT_PATH_DMABUF: return reg_dmabuf(r);
    case PD_SLOT_PATH_PEERMEM: return reg_peermem(r);
    default:
        return PD_ERROR(PD_ENOTSUP, "channel %u: verbs has no path %s", r->ch->config.channel_id,
                        pd_slot_path_name(path));
    }
}

pd_slot_path pd_vb_reg_device(pd_channel *ch, pd_vb_conn *c, void *base, size_t count, size_t stride, size_t bytes,
                              int access, struct ibv_mr **mrs)
{
    vb_dev_reg r = {ch, c, base, count, stride, bytes, access, mrs};

    if (!count || !bytes)
        return PD_SLOT_PATH_STAGED;
    return pd_tp_slot_walk(ch->config.channel_id, "verbs", &ch->slot_caps, try_path, &r, ch->slot_why,
                           sizeof(ch->slot_why));
}
