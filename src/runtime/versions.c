/* Weight stashing for a stage: the versions of the stage's parameters live
 * in the slots of a weight ring (host buffers, one f32 array of the stage's
 * parameters each). The graph computes with its own parameter tensors, so
 * a pass first copies the version it pinned into them, unless they hold it
 * already (the steady state of the last stage, and of every stage with one
 * minibatch in flight, copies nothing). The optimizer step loads the
 * newest version, applies the gradients with the rank's optimizer (whose
 * momentum or moments are one state, as in PipeDream), and copies the
 * result into a free slot that it then publishes.
 *
 * With two weight versions (PipeDream-2BW) the ring has two slots: the
 * schedule (1f1b-2bw) pins each minibatch's batch version, which is the
 * newest or the one before, and steps once per batch, when the version
 * before the newest is no longer used, so the step always finds that
 * slot free. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <pipedream/optim.h>

#include "runtime/pd_runtime_int.h"

pd_status pd_versions_check_options(const pd_pipeline_options *o)
{
    const bool two = o->weight_versions == PD_WEIGHT_VERSIONS_2BW || o->schedule == PD_SCHED_1F1B_2BW;

    if (o->weight_versions != PD_WEIGHT_VERSIONS_STASH && o->weight_versions != PD_WEIGHT_VERSIONS_2BW)
        return PD_ERROR(PD_EINVAL, "pipeline: %d weight versions: %d is PipeDream-2BW's double buffering, %d "
                                   "(the default) one version per minibatch in flight (weight stashing)",
                        o->weight_versions, PD_WEIGHT_VERSIONS_2BW, PD_WEIGHT_VERSIONS_STASH);
    if (o->accumulate < 0 || (o->accumulate > 0 && !two))
        return PD_ERROR(PD_EINVAL, "pipeline: accumulating %d minibatches per update is for 2 weight versions "
                                   "(2BW)", o->accumulate);
    if (!two)
        return PD_OK;
    if (o->schedule != PD_SCHED_1F1B && o->schedule != PD_SCHED_1F1B_2BW)
        return PD_ERROR(PD_EINVAL, "pipeline: 2 weight versions (2BW) run the 1f1b schedule, not %s",
                        pd_sched_type_name(o->schedule) ? pd_sched_type_name(o->schedule) : "an unknown one");
    if (o->vertical_sync)
        return PD_ERROR(PD_EINVAL, "pipeline: vertical sync is for weight stashing: 2 weight versions (2BW) run "
                                   "every stage of a minibatch on one version already");
    if (o->overlap_allreduce)
        return PD_ERROR(PD_EINVAL, "pipeline: overlapping the all-reduce is for weight stashing: 2 weight "
                                   "versions (2BW) overlap it with the forwards of the batch already");
    if (o->microbatches)
        return PD_ERROR(PD_EINVAL, "pipeline: microbatches are gpipe's flush; 2 weight versions (2BW) take the "
                                   "minibatches per update as accumulate");
    return PD_OK;
}

pd_status pd_versions_depth(const pd_pipeline_options *o, int in_flight, size_t weight_bytes, int *depth)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t memory = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX; /* host slots */

    if (o->schedule == PD_SCHED_1F1B_2BW)
        return pd_weight_ring_depth_for(in_flight, PD_WEIGHT_VERSIONS_2BW, weight_bytes, memory, depth);
    /* A version per minibatch in flight (twice as many with vertical
     * sync, whose versions lag the stage's own), the newest, and the slot
     * the step writes while they are all held. */
    return pd_weight_ring_depth_for((o->vertical_sync ? 2 * in_flight : in_flight) + 1, PD_WEIGHT_VERSIONS_STASH,
                                    weight_bytes, memory, depth);
}

pd_status pd_versions_init(pd_stage_versions *v, pd_stage *st, int depth)
{
    pd_status s;

    *v = (pd_stage_versions){.depth = depth, .loaded = 0};
    if (!(v->slots = calloc((size_t)depth, sizeof(*v->slots))))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int i = 0; i < depth; i++) {
        if (!(v->slots[i] = malloc(sizeof(float) * (st->n_weights ? st->n_weights : 1)))) {
            s = PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for %d weight versions of %zu floats", depth,
                         st->n_weights);
            goto fail;
        }
    }
    /* Version 0: the initial weights, which the graph holds now. */
    PD_CHECK_GOTO(pd_stage_params_get(st, false, v->slots[0]), s, fail);
    PD_CHECK_GOTO(pd_weight_ring_create(depth, (void *const *)v->slots, 0, &v->ring), s, fail);
    return PD_OK;
fail:
    pd_versions_destroy(v);
    return s;
}

void pd_versions_destroy(pd_stage_versions *v)
{
    pd_weight_ring_destroy(v->ring);
    if (v->slots)
        for (int i = 0; i < v->depth; i++)
            free(v->slots[i]);
    free(v->slots);
    *v = (pd_stage_versions){0};
}

pd_status pd_versions_load(pd_stage_versions *v, pd_stage *st, const pd_weight_pin *pin)
{
    if (pin->version == v->loaded)
        return PD_OK;
    PD_CHECK(pd_stage_params_set(st, false, pin->weights));
    v->loaded = pin->version;
    return PD_OK;
}

pd_status pd_versions_step(pd_stage_versions *v, pd_stage *st, pd_optimizer *opt, float lr, uint64_t *published)
{
    pd_weight_pin next, newest;

    PD_CHECK(pd_weight_ring_acquire(v->ring, &next, &newest));
    PD_CHECK(pd_versions_load(v, st, &newest));
    pd_optimizer_set_lr(opt, lr);
    PD_CHECK(pd_optimizer_step(opt));
    PD_CHECK(pd_stage_params_get(st, false, next.weights));
    PD_CHECK(pd_weight_ring_publish(v->ring, &next));
    v->loaded = next.version;
    *published = next.version;
    return PD_OK;
}
