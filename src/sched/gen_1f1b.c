/* PipeDream's 1F1B: each rank runs its minibatches (those with mb mod r =
 * its replica) as `in_flight` warm-up forwards, then strictly one backward,
 * one forward. Replicated stages post the round's all-reduce after each
 * backward and step after the next forward, which overlaps the reduction
 * (with defer_step: after the next backward, which overlaps it too).
 * Forwards run on the newest version; with vertical sync every stage runs a
 * minibatch on the version stage 0 ran it on (the newest of its own
 * versions not newer than that one). */
#include "config.h"

#include <stdlib.h>

#include "sched/sched_int.h"

static int forward_version(const pd_sched_builder *b, int rank, int mb, bool vertical_sync)
{
    int stage = b->s->rank_stage[rank], replicas = b->s->stage_replicas[stage];
    int newest = b->version[rank];

    if (!vertical_sync || stage == 0)
        return newest;
    int at_stage0 = b->fwd_version[0][mb] / replicas * replicas;
    return at_stage0 < newest ? at_stage0 : newest;
}

/* Both step placements give every forward the same version: the step of
 * round i comes before the forward that follows backward i + 1 either way.
 * Deferred, a replica never waits for the round while the slowest replica
 * still runs its backward; the price is a second gradient buffer. */
static pd_status rank_1f1b(pd_sched_builder *b, int rank, bool vertical_sync, bool defer_step, int *mbs)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank], replicas = s->stage_replicas[stage];
    int n = pd_sched_local_minibatches(s, stage, s->rank_replica[rank], 0, s->minibatches, mbs);
    int warm = s->in_flight[stage] < n ? s->in_flight[stage] : n;
    bool deferred = defer_step && replicas > 1;

    for (int k = 0; k < warm; k++)
        PD_CHECK(pd_sched_emit_forward(b, rank, mbs[k], forward_version(b, rank, mbs[k], vertical_sync), false));
    for (int i = 0; i < n; i++) {
        PD_CHECK(pd_sched_emit_backward(b, rank, mbs[i]));
        PD_CHECK(pd_sched_emit_allreduce(b, rank));
        if (replicas == 1 || (deferred && i > 0))
            PD_CHECK(pd_sched_emit_step(b, rank));
        if (warm + i < n) {
            int mb = mbs[warm + i];
            PD_CHECK(pd_sched_emit_forward(b, rank, mb, forward_version(b, rank, mb, vertical_sync), false));
        }
        if (replicas > 1 && !deferred)
            PD_CHECK(pd_sched_emit_step(b, rank));
    }
    if (deferred && n > 0)
        PD_CHECK(pd_sched_emit_step(b, rank));
    return pd_sched_emit_eval(b, rank);
}

pd_status pd_sched_gen_1f1b(pd_sched_builder *b, bool vertical_sync, bool defer_step, bool warmup_from_costs)
{
    pd_sched *s = b->s;
    int *mbs = malloc(sizeof(int) * (s->minibatches > 0 ? s->minibatches : 1));
    pd_status status = PD_OK;

    if (!mbs)
        return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
    pd_sched_1f1b_warmup(b, warmup_from_costs);
    /* Stage order: vertical sync reads stage 0's versions. */
    for (int i = 0; i < s->n_stages && status == PD_OK; i++)
        for (int j = 0; j < s->stage_replicas[i] && status == PD_OK; j++)
            status = rank_1f1b(b, s->stage_ranks[i][j], vertical_sync, defer_step, mbs);
    free(mbs);
    return status;
}
