/* The default backend table: every entry reports PD_ENOTSUP naming itself,
 * and pd_tp_ops_overlay() lays a backend over it, so callers never test
 * for NULL (but for the optional poll). */
#include "config.h"

#include "transport/transport_int.h"

#define UNSUPPORTED(entry, ch)                                                                                       \
    return PD_ERROR(PD_ENOTSUP, "transport %s is unsupported by backend %s", #entry, pd_channel_backend(ch))

static pd_status listen_(pd_channel *ch, void **listener, char *addr, size_t size) { UNSUPPORTED(listen, ch); }
static pd_status accept_(pd_channel *ch, void *listener) { UNSUPPORTED(accept, ch); }
static void unlisten(void *listener) {}
static pd_status connect_(pd_channel *ch, const char *addr) { UNSUPPORTED(connect, ch); }
static pd_status progress(pd_channel *ch) { UNSUPPORTED(progress, ch); }
static pd_status wait_(pd_channel *ch, int timeout_ms) { UNSUPPORTED(wait, ch); }
static pd_status give_credit(pd_channel *ch) { UNSUPPORTED(give_credit, ch); }
static void close_(pd_channel *ch) {}
static int fd(pd_channel *ch) { return -1; }
/* A backend that cannot say when it has work is polled every millisecond. */
static int wait_arm(pd_channel *ch, struct pollfd *fds, int *poll_ms)
{
    *poll_ms = 1;
    return 0;
}
static void wait_disarm(pd_channel *ch) {}

static const pd_tp_ops defaults = {
    .listen = listen_,
    .accept = accept_,
    .unlisten = unlisten,
    .connect = connect_,
    .progress = progress,
    .wait = wait_,
    .give_credit = give_credit,
    .close = close_,
    .fd = fd,
    .wait_arm = wait_arm,
    .wait_disarm = wait_disarm,
};

#define OVERLAY(entry) table->entry = backend && backend->entry ? backend->entry : defaults.entry

void pd_tp_ops_overlay(pd_tp_ops *table, const pd_tp_ops *backend)
{
    OVERLAY(listen);
    OVERLAY(accept);
    OVERLAY(unlisten);
    OVERLAY(connect);
    OVERLAY(progress);
    OVERLAY(wait);
    OVERLAY(give_credit);
    OVERLAY(close);
    OVERLAY(fd);
    OVERLAY(wait_arm);
    OVERLAY(wait_disarm);
    table->poll = backend ? backend->poll : NULL; /* optional: no spinning without it */
}
