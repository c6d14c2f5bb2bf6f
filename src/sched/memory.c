/* Peak memory of a rank from its list: the most minibatches in flight
 * (forwarded, not yet backwarded: their activations are stashed) and the
 * most weight versions alive at once (those in-flight minibatches ran on,
 * plus the newest). */
#include "config.h"

#include <stdlib.h>

#include "sched/sched_int.h"

pd_status pd_sched_rank_memory(const pd_sched *s, int rank, int *max_in_flight, int *max_versions)
{
    const pd_sched_action *list = s->actions[rank];
    int n = s->n_actions[rank], top = 0, newest = 0, alive = 1, in_flight = 0;
    int *users;

    *max_in_flight = 0;
    *max_versions = s->n_actions[rank] ? 1 : 0;
    for (int i = 0; i < n; i++)
        if (list[i].weight_version > top)
            top = list[i].weight_version;
    users = calloc((size_t)top + 1, sizeof(int)); /* per version: in-flight minibatches on it */
    if (!users)
        return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
    for (int i = 0; i < n; i++) {
        const pd_sched_action *a = &list[i];
        int v = a->weight_version;

        if (v < 0)
            continue;
        if (a->op == PD_SCHED_FORWARD) {
            if (users[v]++ == 0 && v != newest)
                alive++;
            in_flight++;
        } else if (a->op == PD_SCHED_BACKWARD) {
            if (--users[v] == 0 && v != newest)
                alive--;
            in_flight--;
        } else if (a->op == PD_SCHED_STEP) {
            /* The old newest stays alive while minibatches use it. */
            if (users[newest] == 0)
                alive--;
            newest = v;
            if (users[newest] == 0)
                alive++;
        }
        if (in_flight > *max_in_flight)
            *max_in_flight = in_flight;
        if (alive > *max_versions)
            *max_versions = alive;
    }
    free(users);
    return PD_OK;
}
