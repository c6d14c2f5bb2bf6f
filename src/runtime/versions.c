/* Weight stashing for a stage: the versions of the stage's parameters live
 * in the slots of a weight ring (host buffers, one f32 array of the stage's
 * parameters each). The graph computes with its own parameter tensors, so
 * a pass first copies the version it pinned into them, unless they hold it
 * already (the steady state of the last stage, and of every stage with one
 * minibatch in flight, copies nothing). The optimizer step loads the
 * newest version, applies the gradients with the rank's optimizer (whose
 * momentum or moments are one state, as in PipeDream), and copies the
 * result into a free slot that it then publishes. */
#include "config.h"

#include <stdlib.h>

#include <pipedream/optim.h>

#include "runtime/pd_runtime_int.h"

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
