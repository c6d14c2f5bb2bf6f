/* The blocks every schedule is made of: a forward with its input and
 * output transfers, a backward with its gradient transfers, the replicas'
 * all-reduce and the optimizer step, evaluation forwards. */
#include "config.h"

#include <stdlib.h>

#include "sched/sched_int.h"

static pd_status push(pd_sched_builder *b, int rank, pd_sched_action a)
{
    pd_sched *s = b->s;

    if (s->n_actions[rank] == b->capacity[rank]) {
        int cap = b->capacity[rank] ? 2 * b->capacity[rank] : 64;
        pd_sched_action *grown = realloc(s->actions[rank], sizeof(*grown) * cap);
        if (!grown)
            return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
        s->actions[rank] = grown;
        b->capacity[rank] = cap;
    }
    a.stage = s->rank_stage[rank];
    s->actions[rank][s->n_actions[rank]++] = a;
    return PD_OK;
}

static pd_sched_action action(pd_sched_op op, int mb)
{
    return (pd_sched_action){.op = op, .minibatch = mb, .peer = -1, .weight_version = -1, .round = -1};
}

/* Bytes crossing the cut after `stage`. */
static int64_t cut_bytes(const pd_sched_builder *b, int stage)
{
    return b->costs && stage >= 0 && stage < b->costs->n_stages ? b->costs->stages[stage].send_bytes : 0;
}

static pd_status transfer(pd_sched_builder *b, int rank, pd_sched_op op, int mb, int peer, int64_t bytes)
{
    pd_sched_action a = action(op, mb);

    a.peer = peer;
    a.bytes = bytes;
    return push(b, rank, a);
}

pd_status pd_sched_emit_forward(pd_sched_builder *b, int rank, int mb, int version, bool eval)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank];
    pd_sched_action a = action(eval ? PD_SCHED_EVAL : PD_SCHED_FORWARD, mb);

    if (stage == 0)
        PD_CHECK(push(b, rank, action(PD_SCHED_LOAD, mb)));
    else
        PD_CHECK(transfer(b, rank, PD_SCHED_RECV_ACT, mb, pd_sched_route(s, stage - 1, mb), cut_bytes(b, stage - 1)));
    a.weight_version = version;
    b->fwd_version[stage][mb] = version;
    PD_CHECK(push(b, rank, a));
    if (stage + 1 < s->n_stages)
        PD_CHECK(transfer(b, rank, PD_SCHED_SEND_ACT, mb, pd_sched_route(s, stage + 1, mb), cut_bytes(b, stage)));
    return PD_OK;
}

pd_status pd_sched_emit_backward(pd_sched_builder *b, int rank, int mb)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank];
    pd_sched_action a = action(PD_SCHED_BACKWARD, mb);

    if (stage + 1 < s->n_stages)
        PD_CHECK(transfer(b, rank, PD_SCHED_RECV_GRAD, mb, pd_sched_route(s, stage + 1, mb), cut_bytes(b, stage)));
    a.weight_version = b->fwd_version[stage][mb];
    PD_CHECK(push(b, rank, a));
    if (stage > 0)
        PD_CHECK(transfer(b, rank, PD_SCHED_SEND_GRAD, mb, pd_sched_route(s, stage - 1, mb), cut_bytes(b, stage - 1)));
    return PD_OK;
}

pd_status pd_sched_emit_allreduce(pd_sched_builder *b, int rank)
{
    int stage = b->s->rank_stage[rank];
    pd_sched_action a = action(PD_SCHED_ALLREDUCE, -1);

    if (b->s->stage_replicas[stage] < 2)
        return PD_OK;
    a.round = b->posted[rank]++;
    a.bytes = b->costs && stage < b->costs->n_stages ? b->costs->stages[stage].weight_bytes : 0;
    return push(b, rank, a);
}

pd_status pd_sched_emit_step(pd_sched_builder *b, int rank)
{
    return pd_sched_emit_step_to(b, rank, b->version[rank] + b->s->stage_replicas[b->s->rank_stage[rank]]);
}

pd_status pd_sched_emit_step_to(pd_sched_builder *b, int rank, int version)
{
    pd_sched_action a = action(PD_SCHED_STEP, -1);

    a.round = b->steps[rank]++;
    b->version[rank] = version;
    a.weight_version = version;
    return push(b, rank, a);
}

pd_status pd_sched_emit_eval(pd_sched_builder *b, int rank)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank];
    int first = s->minibatches, last = s->minibatches + s->eval_minibatches;

    for (int mb = first; mb < last; mb++)
        if (pd_sched_route(s, stage, mb) == rank)
            PD_CHECK(pd_sched_emit_forward(b, rank, mb, b->version[rank], true));
    return PD_OK;
}
