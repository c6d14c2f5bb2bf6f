/* GPipe: fill and drain. Each flush of `microbatches` minibatches runs all
 * of a rank's forwards, then all its backwards, then one all-reduce and one
 * step: every minibatch of a flush runs on the same weights (synchronous
 * semantics). Straight model parallelism is the case of one minibatch per
 * flush on unreplicated stages: one minibatch in flight. */
#include "config.h"

#include <stdlib.h>

#include "sched/sched_int.h"

static pd_status rank_gpipe(pd_sched_builder *b, int rank, int microbatches, int *mbs)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank], replica = s->rank_replica[rank];

    for (int first = 0; first < s->minibatches; first += microbatches) {
        int n = pd_sched_local_minibatches(s, stage, replica, first, first + microbatches, mbs);
        int version = b->version[rank];

        for (int k = 0; k < n; k++)
            PD_CHECK(pd_sched_emit_forward(b, rank, mbs[k], version, false));
        for (int k = 0; k < n; k++)
            PD_CHECK(pd_sched_emit_backward(b, rank, mbs[k]));
        PD_CHECK(pd_sched_emit_allreduce(b, rank));
        /* A flush applies every minibatch of it, whatever the replicas. */
        PD_CHECK(pd_sched_emit_step_to(b, rank, first + microbatches));
    }
    return pd_sched_emit_eval(b, rank);
}

pd_status pd_sched_gen_gpipe(pd_sched_builder *b, int microbatches)
{
    pd_sched *s = b->s;
    int *mbs = malloc(sizeof(int) * microbatches);
    pd_status status = PD_OK;

    if (!mbs)
        return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
    for (int i = 0; i < s->n_stages; i++)
        s->in_flight[i] = microbatches / s->stage_replicas[i];
    for (int i = 0; i < s->n_stages && status == PD_OK; i++)
        for (int j = 0; j < s->stage_replicas[i] && status == PD_OK; j++)
            status = rank_gpipe(b, s->stage_ranks[i][j], microbatches, mbs);
    free(mbs);
    return status;
}
