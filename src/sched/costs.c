/* Per-stage costs of a plan: from its profile (per-layer sums and the bytes
 * crossing each cut), or from the plan's own predicted numbers. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

void pd_sched_costs_destroy(pd_sched_costs *costs)
{
    if (!costs)
        return;
    free(costs->stages);
    costs->stages = NULL;
    costs->n_stages = 0;
}

static pd_status costs_alloc(const pd_plan *plan, pd_sched_costs *out)
{
    if (!plan || plan->n_stages < 1 || !plan->stages)
        return PD_ERROR(PD_EINVAL, "schedule costs: the plan has no stages");
    out->n_stages = plan->n_stages;
    out->stages = calloc(plan->n_stages, sizeof(*out->stages));
    if (!out->stages)
        return PD_ERROR(PD_ENOMEM, "schedule costs: out of host memory");
    return PD_OK;
}

pd_status pd_sched_costs_from_plan(const pd_plan *plan, pd_sched_costs *out)
{
    pd_sched_costs c = {0};

    PD_CHECK(costs_alloc(plan, &c));
    for (int i = 0; i < plan->n_stages; i++) {
        const pd_plan_stage *st = &plan->stages[i];
        pd_sched_stage_cost *sc = &c.stages[i];
        sc->fwd_ms = st->compute_ms / 3.0;
        sc->bwd_ms = st->compute_ms - sc->fwd_ms;
        sc->weight_bytes = (int64_t)st->weight_bytes;
        sc->stash_bytes = (int64_t)(st->in_flight > 0 ? st->activation_bytes / st->in_flight : st->activation_bytes);
        if (st->weight_bytes > 0)
            c.optimizer_state_factor = st->optimizer_bytes / st->weight_bytes;
    }
    *out = c;
    return PD_OK;
}

/* stage_of[node]: the stage running the node; input nodes go to stage 0
 * (its loader). */
static pd_status map_layers(const pd_plan *plan, const pd_profile *profile, int *stage_of)
{
    int n = pd_profile_size(profile);

    for (int v = 0; v < n; v++)
        stage_of[v] = -1;
    for (int i = 0; i < plan->n_stages; i++)
        for (int k = 0; k < plan->stages[i].n_layers; k++) {
            int v = plan->stages[i].layers[k];
            if (v < 0 || v >= n)
                return PD_ERROR(PD_EINVAL, "schedule costs: stage %d: layer index %d is not in the profile (%d nodes)",
                                i, v, n);
            stage_of[v] = i;
        }
    for (int v = 0; v < n; v++) {
        const pd_profile_node *node = pd_profile_node_at(profile, v);
        if (stage_of[v] >= 0)
            continue;
        if (strcmp(node->type, PD_PROFILE_INPUT_TYPE) != 0)
            return PD_ERROR(PD_EINVAL, "schedule costs: layer '%s' is in no stage of the plan", node->name);
        stage_of[v] = 0;
    }
    return PD_OK;
}

pd_status pd_sched_costs_from_profile(const pd_plan *plan, const pd_profile *profile, double optimizer_state_factor,
                                      pd_sched_costs *out)
{
    pd_sched_costs c = {.optimizer_state_factor = optimizer_state_factor};
    int n;
    int *stage_of = NULL, *last_use = NULL;
    pd_status status;

    if (!profile)
        return PD_ERROR(PD_EINVAL, "schedule costs: no profile");
    n = pd_profile_size(profile);
    PD_CHECK(costs_alloc(plan, &c));
    stage_of = malloc(sizeof(int) * (n ? n : 1));
    last_use = malloc(sizeof(int) * (n ? n : 1));
    if (!stage_of || !last_use) {
        status = PD_ERROR(PD_ENOMEM, "schedule costs: out of host memory");
        goto fail;
    }
    PD_CHECK_GOTO(map_layers(plan, profile, stage_of), status, fail);
    for (int v = 0; v < n; v++)
        last_use[v] = stage_of[v];
    for (int v = 0; v < n; v++) {
        const pd_profile_node *node = pd_profile_node_at(profile, v);
        pd_sched_stage_cost *sc = &c.stages[stage_of[v]];
        bool input = strcmp(node->type, PD_PROFILE_INPUT_TYPE) == 0;

        if (input)
            sc->load_ms += node->fwd_ms;
        else {
            sc->fwd_ms += node->fwd_ms;
            sc->bwd_ms += node->bwd_ms;
        }
        sc->weight_bytes += node->weight_bytes;
        sc->stash_bytes += node->activation_bytes;
        for (int k = 0; k < node->n_inputs; k++)
            if (stage_of[v] > last_use[node->inputs[k]])
                last_use[node->inputs[k]] = stage_of[v];
    }
    /* An output used further on crosses every cut up to its last user, and
     * is stashed by the stages it passes through as their input. */
    for (int v = 0; v < n; v++) {
        int64_t bytes = pd_profile_node_at(profile, v)->activation_bytes;
        for (int s = stage_of[v]; s < last_use[v]; s++) {
            c.stages[s].send_bytes += bytes;
            c.stages[s + 1].stash_bytes += bytes;
        }
    }
    free(last_use);
    free(stage_of);
    *out = c;
    return PD_OK;
fail:
    free(last_use);
    free(stage_of);
    pd_sched_costs_destroy(&c);
    return status;
}
