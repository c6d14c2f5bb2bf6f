/* Data parallelism, the paper's baseline: one stage, every rank a replica;
 * each rank loads, runs forward and backward on its minibatches (mb mod
 * workers) and all-reduces every step before stepping (BSP). */
#include "config.h"

#include "sched/sched_int.h"

pd_status pd_sched_gen_dp(pd_sched_builder *b)
{
    pd_sched *s = b->s;

    s->in_flight[0] = 1;
    for (int j = 0; j < s->stage_replicas[0]; j++) {
        int rank = s->stage_ranks[0][j];

        for (int mb = j; mb < s->minibatches; mb += s->stage_replicas[0]) {
            PD_CHECK(pd_sched_emit_forward(b, rank, mb, b->version[rank], false));
            PD_CHECK(pd_sched_emit_backward(b, rank, mb));
            PD_CHECK(pd_sched_emit_allreduce(b, rank));
            PD_CHECK(pd_sched_emit_step(b, rank));
        }
        PD_CHECK(pd_sched_emit_eval(b, rank));
    }
    return PD_OK;
}
