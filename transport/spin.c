/* Spin, then sleep: how long a blocking wait of a channel polls before it
 * sleeps. A wait that sleeps costs a wake-up when its event comes (a
 * completion event and an interrupt for verbs, an eventfd write for shm),
 * on the critical path of every message of a stream. So while the
 * channel's blocking waits end less than the cap apart (a stream), a wait
 * first polls for up to twice their smoothed interval, at most the cap;
 * a channel whose waits come further apart (idle, or compute between
 * messages) sleeps at once, as before. Spinning pays only on a core of
 * its own: a spinner that loses over a quarter of its time to preemption
 * shares its core, slows whoever it shares it with (the peer, or in a VM
 * the host's other work), and stops spinning for a second. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "transport/transport_int.h"

#define DEFAULT_US 2000
#define MAX_US 1000000
#define PREEMPTED_NS 50000        /* a look this long after the last one: the thread did not run */
#define WINDOW_NS 100000000       /* spinning judged per 100 ms spun */
#define QUIET_NS 1000000000       /* after a shared core: sleep at once for 1 s */

pd_status pd_tp_spin_cap_us(const pd_channel_config *c, int *us)
{
    const char *env = getenv("PD_TRANSPORT_SPIN_US");
    long v = c->spin_us;

    if (v == 0 && env && *env) {
        char *end;

        errno = 0;
        v = strtol(env, &end, 10);
        if (errno || *end || v == 0 || v > MAX_US)
            return PD_ERROR(PD_EINVAL, "PD_TRANSPORT_SPIN_US=%s: expected microseconds in [1, %d], or negative for "
                                       "never", env, MAX_US);
    }
    if (v == 0)
        v = DEFAULT_US;
    if (v > MAX_US)
        return PD_ERROR(PD_EINVAL, "channel %u: spin_us %ld is over %d", c->channel_id, v, MAX_US);
    *us = v < 0 ? -1 : (int)v;
    return PD_OK;
}

void pd_tp_spin_init(pd_tp_spin *sp, int cap_us)
{
    sp->cap_ns = cap_us > 0 ? (int64_t)cap_us * 1000 : 0;
    sp->last_ns = 0;
    sp->gap_ns = -1;
    sp->spun_ns = sp->lost_ns = 0;
    sp->quiet_until = 0;
    sp->quiets = 0;
    sp->spins = sp->hits = 0;
}

int64_t pd_tp_spin_until(const pd_tp_spin *sp, int64_t now)
{
    if (!sp->cap_ns || sp->gap_ns < 0 || sp->gap_ns > sp->cap_ns || now < sp->quiet_until)
        return 0;
    return now + (2 * sp->gap_ns < sp->cap_ns ? 2 * sp->gap_ns : sp->cap_ns);
}

void pd_tp_spin_note(pd_tp_spin *sp, int64_t now)
{
    if (sp->last_ns) {
        int64_t gap = now - sp->last_ns;

        /* A quarter of each new interval: one long pause stops the
         * spinning at once, a few quick waits bring it back. */
        sp->gap_ns = sp->gap_ns < 0 ? gap : (3 * sp->gap_ns + gap) / 4;
    }
    sp->last_ns = now;
}

bool pd_tp_spin_account(pd_tp_spin *sp, int64_t dt_ns, int64_t now)
{
    bool shared;

    sp->spun_ns += dt_ns;
    if (dt_ns > PREEMPTED_NS)
        sp->lost_ns += dt_ns;
    if (sp->spun_ns < WINDOW_NS)
        return true;
    shared = sp->lost_ns * 4 > sp->spun_ns;
    sp->spun_ns = sp->lost_ns = 0;
    if (shared) {
        sp->quiet_until = now + QUIET_NS;
        sp->quiets++;
    }
    return !shared;
}
