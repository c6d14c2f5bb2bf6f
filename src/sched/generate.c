/* pd_sched_generate: checks the options against the plan and runs the
 * schedule's generator. */
#include "config.h"

#include "sched/sched_int.h"

static pd_status check_plan(const pd_plan *plan)
{
    if (!plan || plan->n_stages < 1 || !plan->stages)
        return PD_ERROR(PD_EINVAL, "schedule: the plan has no stages");
    if (plan->workers < 1)
        return PD_ERROR(PD_EINVAL, "schedule: the plan has %d workers", plan->workers);
    for (int i = 0; i < plan->n_stages; i++)
        if (plan->stages[i].replicas < 1 || !plan->stages[i].ranks)
            return PD_ERROR(PD_EINVAL, "schedule: stage %d has %d replicas", i, plan->stages[i].replicas);
    return PD_OK;
}

static pd_status check_options(const pd_plan *plan, const pd_sched_costs *costs, const pd_sched_options *o)
{
    const char *name = pd_sched_type_name(o->type);

    if (!name)
        return PD_ERROR(PD_EINVAL, "schedule: unknown schedule type %d", (int)o->type);
    if (o->minibatches < 1 || o->eval_minibatches < 0)
        return PD_ERROR(PD_EINVAL, "schedule: %d minibatches and %d evaluation minibatches: need >= 1 and >= 0",
                        o->minibatches, o->eval_minibatches);
    if (o->depth < 1)
        return PD_ERROR(PD_EINVAL, "schedule: channel depth %d: need >= 1", o->depth);
    if (costs && costs->n_stages != plan->n_stages)
        return PD_ERROR(PD_EINVAL, "schedule: costs for %d stages, the plan has %d", costs->n_stages,
                        plan->n_stages);
    if (o->type == PD_SCHED_DP && plan->n_stages != 1)
        return PD_ERROR(PD_EINVAL, "schedule: dp needs a one-stage plan, this one has %d stages", plan->n_stages);
    if (o->type == PD_SCHED_1F1B_2BW && o->microbatches < 0)
        return PD_ERROR(PD_EINVAL, "schedule: 1f1b-2bw: %d minibatches per weight version", o->microbatches);
    if (o->type == PD_SCHED_GPIPE) {
        if (o->microbatches < 1 || o->minibatches % o->microbatches)
            return PD_ERROR(PD_EINVAL, "schedule: gpipe: %d minibatches are not a whole number of flushes of %d",
                            o->minibatches, o->microbatches);
    }
    for (int i = 0; i < plan->n_stages; i++) {
        int r = plan->stages[i].replicas;
        if (o->type == PD_SCHED_STRAIGHT && r != 1)
            return PD_ERROR(PD_EINVAL, "schedule: straight runs one replica per stage; stage %d has %d", i, r);
        if (o->minibatches % r)
            return PD_ERROR(PD_EINVAL, "schedule: %s: %d minibatches are not a multiple of stage %d's %d replicas",
                            name, o->minibatches, i, r);
        if (o->type == PD_SCHED_GPIPE && o->microbatches % r)
            return PD_ERROR(PD_EINVAL, "schedule: gpipe: %d microbatches per flush are not a multiple of stage %d's %d "
                            "replicas", o->microbatches, i, r);
    }
    return PD_OK;
}

pd_status pd_sched_generate(const pd_plan *plan, const pd_sched_costs *costs, const pd_sched_options *opts,
                            pd_sched **out)
{
    pd_sched_builder b;
    pd_status status;

    if (!opts || !out)
        return PD_ERROR(PD_EINVAL, "schedule: NULL options or output");
    PD_CHECK(check_plan(plan));
    PD_CHECK(check_options(plan, costs, opts));
    PD_CHECK(pd_sched_builder_init(&b, plan, costs, opts));
    switch (opts->type) {
    case PD_SCHED_1F1B: status = pd_sched_gen_1f1b(&b, false, opts->defer_step, opts->warmup_from_costs); break;
    case PD_SCHED_1F1B_VSYNC: status = pd_sched_gen_1f1b(&b, true, opts->defer_step, opts->warmup_from_costs); break;
    case PD_SCHED_1F1B_2BW: status = pd_sched_gen_2bw(&b, opts->microbatches, opts->warmup_from_costs); break;
    case PD_SCHED_GPIPE: status = pd_sched_gen_gpipe(&b, opts->microbatches); break;
    case PD_SCHED_STRAIGHT:
        b.s->microbatches = 1;
        status = pd_sched_gen_gpipe(&b, 1);
        break;
    default: status = pd_sched_gen_dp(&b); break;
    }
    return pd_sched_builder_finish(&b, status, out);
}
