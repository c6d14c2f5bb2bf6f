/* The partitioner's entry points: checks of the options, the cluster and a
 * plan; the solve and evaluate dispatchers over the two cost models; the
 * inputs' hashes. The dynamic programs themselves live in pipedream_dp.c and
 * default_dp.c. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

const char *pd_plan_term_name(pd_plan_term term)
{
    switch (term) {
    case PD_PLAN_TERM_COMPUTE: return "compute";
    case PD_PLAN_TERM_SYNC: return "sync";
    case PD_PLAN_TERM_RECV: return "recv";
    case PD_PLAN_TERM_SEND: return "send";
    case PD_PLAN_TERM_DATA: return "data";
    case PD_PLAN_TERM_MEMORY: return "memory";
    }
    return "unknown";
}

bool pd_plan_is_input(const pd_profile *profile, int index)
{
    const pd_profile_node *n = pd_profile_node_at(profile, index);
    return n && strcmp(n->type, PD_PROFILE_INPUT_TYPE) == 0;
}

/* ---- hashes ---- */

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t size)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Integers and doubles go in as 8 bytes, least significant first, so the
 * hash does not depend on the host's byte order. */
static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fnv_bytes(h, b, sizeof(b));
}

static uint64_t fnv_double(uint64_t h, double x)
{
    uint64_t bits;
    if (x == 0)
        x = 0; /* -0 and 0 are the same time */
    memcpy(&bits, &x, sizeof(bits));
    return fnv_u64(h, bits);
}

/* Strings with their terminator, so "ab","c" and "a","bc" differ. */
static uint64_t fnv_string(uint64_t h, const char *s) { return fnv_bytes(h, s, strlen(s) + 1); }

static void hex16(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }

void pd_plan_hash_profile(const pd_profile *profile, char out[17])
{
    uint64_t h = FNV_OFFSET;
    int n = pd_profile_size(profile);

    h = fnv_u64(h, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        const pd_profile_node *node = pd_profile_node_at(profile, i);
        h = fnv_string(h, node->name);
        h = fnv_string(h, node->type);
        h = fnv_double(h, node->fwd_ms);
        h = fnv_double(h, node->bwd_ms);
        h = fnv_u64(h, (uint64_t)node->activation_bytes);
        h = fnv_u64(h, (uint64_t)node->weight_bytes);
        h = fnv_u64(h, (uint64_t)node->n_inputs);
        for (int k = 0; k < node->n_inputs; k++)
            h = fnv_u64(h, (uint64_t)node->inputs[k]);
    }
    hex16(h, out);
}

void pd_plan_hash_cluster(const pd_plan_cluster *cluster, char out[17])
{
    uint64_t h = FNV_OFFSET;

    h = fnv_u64(h, (uint64_t)cluster->n_levels);
    for (int i = 0; i < cluster->n_levels && i < PD_PLAN_MAX_LEVELS; i++) {
        h = fnv_u64(h, (uint64_t)cluster->levels[i].fanout);
        h = fnv_double(h, cluster->levels[i].bandwidth_bytes_per_s);
        h = fnv_double(h, cluster->levels[i].latency_s);
    }
    hex16(h, out);
}

/* ---- checks ---- */

static pd_status check_options(const pd_plan_options *o)
{
    if (o->cost_model != PD_PLAN_COST_DEFAULT && o->cost_model != PD_PLAN_COST_PIPEDREAM)
        return PD_ERROR(PD_EINVAL, "plan options: unknown cost model %d", (int)o->cost_model);
    if (o->coarsen != PD_PLAN_COARSEN_AUTO && o->coarsen != PD_PLAN_COARSEN_NONE)
        return PD_ERROR(PD_EINVAL, "plan options: unknown coarsening %d", (int)o->coarsen);
    if (!isfinite(o->memory_bytes) || o->memory_bytes < 0)
        return PD_ERROR(PD_EINVAL, "plan options: memory_bytes %g is not a finite number >= 0", o->memory_bytes);
    if (!isfinite(o->optimizer_state_factor) || o->optimizer_state_factor < 0)
        return PD_ERROR(PD_EINVAL, "plan options: optimizer_state_factor %g is not a finite number >= 0",
                        o->optimizer_state_factor);
    if (!isfinite(o->activation_compression_ratio) || o->activation_compression_ratio < 0)
        return PD_ERROR(PD_EINVAL, "plan options: activation_compression_ratio %g is not a finite number > 0 (0: "
                        "not given)", o->activation_compression_ratio);
    if (o->cost_model == PD_PLAN_COST_DEFAULT) {
        const char *flag = o->straight_pipeline              ? "straight_pipeline"
                           : o->use_memory_constraint        ? "use_memory_constraint"
                           : o->use_fewer_machines           ? "use_fewer_machines"
                           : o->activation_compression_ratio ? "activation_compression_ratio"
                                                             : NULL;
        if (flag)
            return PD_ERROR(PD_EINVAL, "plan options: %s belongs to the pipedream cost model only", flag);
    }
    return PD_OK;
}

pd_status pd_plan_validate(const pd_profile *profile, const pd_plan *plan)
{
    int n = pd_profile_size(profile), workers, used = 0;
    int *stage_of = NULL, *rank_stage = NULL;
    pd_status s = PD_OK;

    if (!plan || plan->n_stages < 1 || !plan->stages)
        return PD_ERROR(PD_EINVAL, "the plan has no stages");
    PD_CHECK(pd_plan_cluster_check(&plan->cluster));
    workers = pd_plan_cluster_workers(&plan->cluster);
    for (int k = 0; k < plan->n_stages; k++)
        used += plan->stages[k].replicas > 0 ? plan->stages[k].replicas : 0;
    if (used > workers)
        return PD_ERROR(PD_EINVAL, "the stages use %d workers; the cluster has %d", used, workers);
    stage_of = malloc((size_t)n * sizeof(*stage_of));
    rank_stage = malloc((size_t)workers * sizeof(*rank_stage));
    if (!stage_of || !rank_stage) {
        s = PD_ERROR(PD_ENOMEM, "out of host memory validating a plan");
        goto free_maps;
    }
    for (int i = 0; i < n; i++)
        stage_of[i] = -1;
    for (int r = 0; r < workers; r++)
        rank_stage[r] = -1;
    for (int k = 0; k < plan->n_stages; k++) {
        const pd_plan_stage *st = &plan->stages[k];
        int computes = 0;
        if (st->n_layers < 1 || !st->layers) {
            s = PD_ERROR(PD_EINVAL, "stage %d has no layers", k);
            goto free_maps;
        }
        for (int l = 0; l < st->n_layers; l++) {
            int i = st->layers[l];
            if (i < 0 || i >= n) {
                s = PD_ERROR(PD_EINVAL, "stage %d: layer index %d is not a node of the profile (0..%d)", k, i, n - 1);
                goto free_maps;
            }
            const char *name = pd_profile_node_at(profile, i)->name;
            if (stage_of[i] >= 0) {
                s = PD_ERROR(PD_EINVAL, "layer '%s' is in stages %d and %d", name, stage_of[i], k);
                goto free_maps;
            }
            if (l > 0 && i < st->layers[l - 1]) {
                s = PD_ERROR(PD_EINVAL, "stage %d: layer '%s' comes after '%s' (layers must be in the profile's "
                             "order)", k, name, pd_profile_node_at(profile, st->layers[l - 1])->name);
                goto free_maps;
            }
            if (pd_plan_is_input(profile, i) && k != 0) {
                s = PD_ERROR(PD_EINVAL, "input '%s' is in stage %d; inputs belong to stage 0 (the data loader's)",
                             name, k);
                goto free_maps;
            }
            computes += !pd_plan_is_input(profile, i);
            stage_of[i] = k;
        }
        if (computes == 0) {
            s = PD_ERROR(PD_EINVAL, "stage %d holds only inputs; a stage needs a layer that computes", k);
            goto free_maps;
        }
        if (st->replicas < 1 || !st->ranks) {
            s = PD_ERROR(PD_EINVAL, "stage %d: %d replicas; at least 1, each with a rank", k, st->replicas);
            goto free_maps;
        }
        for (int r = 0; r < st->replicas; r++) {
            int rank = st->ranks[r];
            if (rank < 0 || rank >= workers) {
                s = PD_ERROR(PD_EINVAL, "stage %d: rank %d is not a worker of the cluster (0..%d)", k, rank,
                             workers - 1);
                goto free_maps;
            }
            if (rank_stage[rank] >= 0) {
                s = rank_stage[rank] == k
                        ? PD_ERROR(PD_EINVAL, "stage %d: rank %d is given twice", k, rank)
                        : PD_ERROR(PD_EINVAL, "rank %d is in stages %d and %d", rank, rank_stage[rank], k);
                goto free_maps;
            }
            if (r > 0 && rank < st->ranks[r - 1]) {
                s = PD_ERROR(PD_EINVAL, "stage %d: ranks must be increasing (%d after %d)", k, rank, st->ranks[r - 1]);
                goto free_maps;
            }
            rank_stage[rank] = k;
        }
    }
    for (int i = 0; i < n; i++) {
        const pd_profile_node *node = pd_profile_node_at(profile, i);
        if (stage_of[i] < 0 && !pd_plan_is_input(profile, i)) {
            s = PD_ERROR(PD_EINVAL, "layer '%s' is in no stage", node->name);
            goto free_maps;
        }
        /* An input no stage lists is read by stage 0. */
        int to = stage_of[i] < 0 ? 0 : stage_of[i];
        for (int e = 0; e < node->n_inputs; e++) {
            int j = node->inputs[e], from = stage_of[j] < 0 ? 0 : stage_of[j];
            if (from > to) {
                s = PD_ERROR(PD_EINVAL, "edge '%s' -> '%s' runs backwards, from stage %d to stage %d",
                             pd_profile_node_at(profile, j)->name, node->name, from, to);
                goto free_maps;
            }
        }
    }
free_maps:
    free(rank_stage);
    free(stage_of);
    return s;
}

/* ---- solve and evaluate ---- */

/* What a plan says about its inputs: the profile's model and batch, the
 * cluster and the hashes of both. */
static pd_status set_inputs(pd_plan *plan, const pd_profile *profile, const pd_plan_cluster *cluster,
                            pd_plan_cost_model cost_model)
{
    const pd_profile_info *info = pd_profile_get_info(profile);
    char *model = strdup(info->model);

    if (!model)
        return PD_ERROR(PD_ENOMEM, "out of host memory for a plan");
    free(plan->model);
    plan->model = model;
    plan->batch = info->batch;
    plan->cost_model = cost_model;
    if (cluster != &plan->cluster)
        plan->cluster = *cluster;
    plan->workers = pd_plan_cluster_workers(cluster);
    pd_plan_hash_profile(profile, plan->profile_hash);
    pd_plan_hash_cluster(cluster, plan->cluster_hash);
    return PD_OK;
}

/* Replaces *g by its coarsened form when its antichain DAG has more states
 * than the planner holds and opts allow it, and says so in the plan. */
static pd_status coarsen_if_needed(pd_plan_graph **g, const pd_plan_options *opts, pd_plan *plan)
{
    pd_plan_graph *coarse;
    int count;

    if (opts->coarsen == PD_PLAN_COARSEN_NONE)
        return PD_OK; /* pd_plan_states_build refuses a graph that is too big */
    PD_CHECK(pd_plan_states_count(*g, PD_PLAN_MAX_STATES, &count));
    if (count <= PD_PLAN_MAX_STATES)
        return PD_OK;
    PD_CHECK(pd_plan_graph_coarsen(*g, PD_PLAN_MAX_STATES, PD_PLAN_COARSEN_PAIRS, &coarse));
    plan->coarsened_from = (*g)->n;
    plan->coarsened_to = coarse->n;
    pd_plan_graph_destroy(*g);
    *g = coarse;
    return PD_OK;
}

pd_status pd_plan_solve(const pd_profile *profile, const pd_plan_cluster *cluster, const pd_plan_options *opts,
                        pd_plan **out)
{
    static const pd_plan_options defaults = {0};
    pd_plan_graph *g = NULL, *collapsed = NULL;
    pd_plan_states *states = NULL;
    pd_plan *plan;
    pd_status s;

    if (!profile || !cluster || !out)
        return PD_ERROR(PD_EINVAL, "pd_plan_solve: profile, cluster and out are required");
    if (!opts)
        opts = &defaults;
    PD_CHECK(check_options(opts));
    PD_CHECK(pd_plan_cluster_check(cluster));
    plan = calloc(1, sizeof(*plan));
    if (!plan)
        return PD_ERROR(PD_ENOMEM, "out of host memory for a plan");
    PD_CHECK_GOTO(set_inputs(plan, profile, cluster, opts->cost_model), s, fail);
    PD_CHECK_GOTO(pd_plan_graph_from_profile(profile, &g), s, fail);
    if (opts->collapse_branches) {
        PD_CHECK_GOTO(pd_plan_graph_collapse_branches(g, &collapsed), s, fail);
        pd_plan_graph_destroy(g);
        g = collapsed;
    }
    PD_CHECK_GOTO(coarsen_if_needed(&g, opts, plan), s, fail);
    PD_CHECK_GOTO(pd_plan_states_build(g, &states), s, fail);
    if (opts->cost_model == PD_PLAN_COST_PIPEDREAM)
        s = pd_plan_solve_pipedream(profile, g, states, cluster, opts, plan);
    else
        s = pd_plan_solve_default(profile, g, states, cluster, opts, plan);
    if (s != PD_OK)
        goto fail;
    /* The solvers build stages from states; a plan that would not pass
     * the checks a hand-written one does is a bug, said as such. */
    if (pd_plan_validate(profile, plan) != PD_OK) {
        char reason[1024];
        snprintf(reason, sizeof(reason), "%s", pd_last_error());
        s = PD_ERROR(PD_ESTATE, "internal error: the %s solver made an invalid plan: %s",
                     opts->cost_model == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default", reason);
        goto fail;
    }
    pd_plan_states_destroy(states);
    pd_plan_graph_destroy(g);
    *out = plan;
    return PD_OK;
fail:
    pd_plan_states_destroy(states);
    pd_plan_graph_destroy(g);
    pd_plan_destroy(plan);
    return s;
}

pd_status pd_plan_evaluate(const pd_profile *profile, const pd_plan_options *opts, pd_plan *plan)
{
    static const pd_plan_options defaults = {0};

    if (!profile || !plan)
        return PD_ERROR(PD_EINVAL, "pd_plan_evaluate: profile and plan are required");
    if (!opts)
        opts = &defaults;
    PD_CHECK(check_options(opts));
    PD_CHECK(pd_plan_validate(profile, plan));
    if (opts->cost_model == PD_PLAN_COST_PIPEDREAM)
        return PD_ERROR(PD_ENOTSUP, "evaluating a given plan is only supported with the default cost model");
    PD_CHECK(set_inputs(plan, profile, &plan->cluster, opts->cost_model));
    /* An explanation read from a file spoke of the solve that made it, and
     * so does its coarsening. */
    free(plan->explanation);
    plan->explanation = NULL;
    plan->coarsened_from = plan->coarsened_to = 0;
    return pd_plan_evaluate_default(profile, opts, plan);
}

void pd_plan_destroy(pd_plan *plan)
{
    if (!plan)
        return;
    for (int k = 0; plan->stages && k < plan->n_stages; k++) {
        free(plan->stages[k].layers);
        free(plan->stages[k].ranks);
    }
    free(plan->stages);
    free(plan->explanation);
    free(plan->model);
    free(plan);
}
