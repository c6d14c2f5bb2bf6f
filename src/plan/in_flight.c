/* How many minibatches each stage of a 1F1B pipeline holds: the warm-up
 * forwards that the replica counts alone guarantee (the schedule raises
 * them further where stage costs ask for it, src/sched/warmup.c). Lives
 * here because the partitioner charges memory for them. */
#include "config.h"

#include <pipedream/plan.h>

void pd_plan_1f1b_in_flight(int n_stages, const int *replicas, int *in_flight)
{
    int downstream = 0; /* minibatches in flight at the next stage, all its replicas */

    for (int i = n_stages - 1; i >= 0; i--) {
        in_flight[i] = 1 + (downstream + replicas[i] - 1) / replicas[i];
        downstream = in_flight[i] * replicas[i];
    }
}
