/* The plans PipeDream is compared with: data parallelism (one stage on
 * every worker) and straight model parallelism (one stage per worker, the
 * layers split into runs of balanced compute). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

static bool is_input(const pd_profile *p, int v)
{
    return strcmp(pd_profile_node_at(p, v)->type, PD_PROFILE_INPUT_TYPE) == 0;
}

static pd_status plan_alloc(const pd_profile *profile, const pd_plan_cluster *cluster, int n_stages, pd_plan **out)
{
    pd_plan *p = calloc(1, sizeof(*p));

    if (!p || !(p->stages = calloc(n_stages, sizeof(*p->stages))) ||
        !(p->model = strdup(pd_profile_get_info(profile)->model))) {
        pd_plan_destroy(p);
        return PD_ERROR(PD_ENOMEM, "baseline plan: out of host memory");
    }
    p->n_stages = n_stages;
    p->batch = pd_profile_get_info(profile)->batch;
    p->cluster = *cluster;
    p->workers = pd_plan_cluster_workers(cluster);
    *out = p;
    return PD_OK;
}

pd_status pd_sched_plan_data_parallel(const pd_profile *profile, const pd_plan_cluster *cluster, pd_plan **out)
{
    pd_plan *p;
    pd_plan_stage *st;
    int n = pd_profile_size(profile);

    PD_CHECK(plan_alloc(profile, cluster, 1, &p));
    st = &p->stages[0];
    st->replicas = p->workers_used = p->workers;
    st->layers = malloc(sizeof(int) * (n ? n : 1));
    st->ranks = malloc(sizeof(int) * p->workers);
    if (!st->layers || !st->ranks) {
        pd_plan_destroy(p);
        return PD_ERROR(PD_ENOMEM, "baseline plan: out of host memory");
    }
    for (int v = 0; v < n; v++)
        if (!is_input(profile, v))
            st->layers[st->n_layers++] = v;
    for (int r = 0; r < p->workers; r++)
        st->ranks[r] = r;
    st->in_flight = 1;
    *out = p;
    return PD_OK;
}

pd_status pd_sched_plan_straight(const pd_profile *profile, const pd_plan_cluster *cluster, pd_plan **out)
{
    int n = pd_profile_size(profile), layers = 0, workers = pd_plan_cluster_workers(cluster), stage = 0;
    double total = 0, done = 0;
    pd_plan *p;

    for (int v = 0; v < n; v++)
        if (!is_input(profile, v)) {
            layers++;
            total += pd_profile_node_at(profile, v)->fwd_ms + pd_profile_node_at(profile, v)->bwd_ms;
        }
    if (layers < 1)
        return PD_ERROR(PD_EINVAL, "baseline plan: the profile has no layers");
    int n_stages = workers < layers ? workers : layers;
    PD_CHECK(plan_alloc(profile, cluster, n_stages, &p));
    for (int i = 0; i < n_stages; i++) {
        p->stages[i].replicas = 1;
        p->stages[i].in_flight = 1;
        p->stages[i].ranks = malloc(sizeof(int));
        p->stages[i].layers = malloc(sizeof(int) * layers);
        if (!p->stages[i].ranks || !p->stages[i].layers) {
            pd_plan_destroy(p);
            return PD_ERROR(PD_ENOMEM, "baseline plan: out of host memory");
        }
        p->stages[i].ranks[0] = i;
    }
    p->workers_used = n_stages;
    /* Layers in order; a stage closes when its share of the compute is
     * reached, leaving at least one layer for each stage after it. */
    for (int v = 0, left = layers; v < n; v++) {
        if (is_input(profile, v))
            continue;
        pd_plan_stage *st = &p->stages[stage];
        double t = pd_profile_node_at(profile, v)->fwd_ms + pd_profile_node_at(profile, v)->bwd_ms;
        st->layers[st->n_layers++] = v;
        done += t;
        left--;
        if (stage + 1 < n_stages &&
            (done >= total * (stage + 1) / n_stages || left == n_stages - stage - 1))
            stage++;
    }
    *out = p;
    return PD_OK;
}
