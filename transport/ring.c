/* The receiver's slots: one shared-memory file (memfd) holding a control
 * page and `depth` slots. The shm backend hands the file to a proven
 * sender; the other backends keep it private. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/transport_int.h"

static size_t ring_size(const pd_channel *ch) { return PD_TP_PAGE + (size_t)ch->config.depth * ch->stride; }

static pd_status map(pd_channel *ch, int fd)
{
    void *p = mmap(NULL, ring_size(ch), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (p == MAP_FAILED)
        return PD_ERROR(PD_ENOMEM, "channel %u: cannot map %zu bytes of slots: %s", ch->config.channel_id,
                        ring_size(ch), strerror(errno));
    ch->ring_fd = fd;
    ch->ring_bytes = ring_size(ch);
    ch->ctl = p;
    ch->slots = (uint8_t *)p + PD_TP_PAGE;
    return PD_OK;
}

pd_status pd_tp_ring_create(pd_channel *ch)
{
    int fd = memfd_create("pipedream-slots", MFD_CLOEXEC);
    pd_status s;

    if (fd < 0)
        return PD_ERROR(PD_ENOMEM, "channel %u: memfd_create: %s", ch->config.channel_id, strerror(errno));
    if (ftruncate(fd, (off_t)ring_size(ch)) != 0) {
        s = PD_ERROR(PD_ENOMEM, "channel %u: cannot size %zu bytes of slots: %s", ch->config.channel_id,
                     ring_size(ch), strerror(errno));
        close(fd);
        return s;
    }
    s = map(ch, fd);
    if (s != PD_OK)
        close(fd);
    return s;
}

pd_status pd_tp_ring_map(pd_channel *ch, int fd)
{
    struct stat st;

    /* A short file would fault (SIGBUS) on the first write past its end. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != ring_size(ch))
        return PD_ERROR(PD_ECOMM, "channel %u: the receiver's slot memory is not %zu bytes", ch->config.channel_id,
                        ring_size(ch));
    return map(ch, fd);
}

void pd_tp_ring_destroy(pd_channel *ch)
{
    if (ch->ctl)
        munmap(ch->ctl, ch->ring_bytes);
    if (ch->ring_fd >= 0)
        close(ch->ring_fd);
    ch->ctl = NULL;
    ch->slots = NULL;
    ch->ring_fd = -1;
}
