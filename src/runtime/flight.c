/* The flight recorder: the last PD_FLIGHT_ACTIONS actions of this rank
 * (which action of which segment, its minibatch and peer, when it began
 * and ended), kept in a ring the executor writes, and dumped on stderr
 * when the rank times out, fails, finds a dead peer or gets SIGUSR1. The
 * dump from SIGUSR1 reads the ring while the executor writes it (from the
 * watchdog thread): the newest entry may be half written there. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runtime/pd_runtime_int.h"

void pd_flight_begin(pd_flight *f, int segment, int index, const pd_sched_action *a, double now)
{
    const uint64_t n = atomic_load_explicit(&f->count, memory_order_relaxed);
    pd_flight_entry *e = &f->ring[n % PD_FLIGHT_ACTIONS];

    *e = (pd_flight_entry){.segment = segment, .index = index, .action = *a, .start = now, .end = -1};
    atomic_store_explicit(&f->count, n + 1, memory_order_release);
}

void pd_flight_end(pd_flight *f, double now)
{
    const uint64_t n = atomic_load_explicit(&f->count, memory_order_acquire);

    if (n)
        f->ring[(n - 1) % PD_FLIGHT_ACTIONS].end = now;
}

void pd_flight_dump(const pd_pipeline *p, const char *why, double now)
{
    const pd_flight *f = &p->flight;
    const uint64_t n = atomic_load_explicit(&f->count, memory_order_acquire);
    const uint64_t first = n > PD_FLIGHT_ACTIONS ? n - PD_FLIGHT_ACTIONS : 0;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    if (!out)
        return;
    fprintf(out, "pipedream: rank %d (stage %d, replica %d) flight recorder (%s): the last %llu of %llu actions, "
                 "times in s since the run began:\n",
            p->boot.rank, p->stage, p->replica, why, (unsigned long long)(n - first), (unsigned long long)n);
    for (uint64_t k = first; k < n; k++) {
        const pd_flight_entry *e = &f->ring[k % PD_FLIGHT_ACTIONS];
        char action[160];
        pd_sched_action_format(&e->action, action, sizeof(action));
        fprintf(out, "  segment %d action %d: %s: %.3f", e->segment, e->index, action, e->start - p->run_start);
        if (e->end >= 0)
            fprintf(out, " .. %.3f\n", e->end - p->run_start);
        else
            fprintf(out, " .. still running after %.3f s\n", now - e->start);
    }
    if (fclose(out) == 0) {
        fputs(text, stderr);
        fflush(stderr);
    }
    free(text);
}
