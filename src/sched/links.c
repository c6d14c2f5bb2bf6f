/* Link speeds between ranks from the cluster's levels, and the ring
 * all-reduce cost. */
#include "config.h"

#include <math.h>

#include "sched/sched_int.h"

void pd_sched_link(const pd_plan_cluster *cluster, int a, int b, double *bandwidth, double *latency)
{
    long group = 1;

    *bandwidth = INFINITY;
    *latency = 0;
    if (a == b || !cluster || cluster->n_levels < 1)
        return;
    for (int l = 0; l < cluster->n_levels; l++) {
        group *= cluster->levels[l].fanout > 0 ? cluster->levels[l].fanout : 1;
        if (a / group == b / group || l == cluster->n_levels - 1) {
            *bandwidth = cluster->levels[l].bandwidth_bytes_per_s;
            *latency = cluster->levels[l].latency_s;
            return;
        }
    }
}

double pd_sched_allreduce_ms(int n, int64_t bytes, double bandwidth, double latency)
{
    if (n < 2)
        return 0;
    return 1000.0 * (2.0 * (n - 1) / n * (double)bytes / bandwidth + 2.0 * (n - 1) * latency);
}
