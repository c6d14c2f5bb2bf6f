/* The default cost model's per-stage formulas, and the evaluation of a plan
 * whose stages, replicas and ranks are given. The dynamic program
 * (default_dp.c) minimises the very same formulas, so a plan it chooses
 * evaluates to the time it predicted.
 *
 * Per stage s with replicas r (times per minibatch, ms; bandwidths of the
 * cluster's levels in bytes/s):
 *   compute = sum of fwd + bwd over the stage's layers
 *   sync    = 2 (r-1)/r * weights / B + 2 (r-1) * latency (ring all-reduce
 *             over the outermost level the stage's ranks span; 0 if r = 1)
 *   work    = (compute + sync) / r
 *   data    = data loading / r (stage 0 only; the loader prefetches)
 *   recv, send = 2 * cut bytes / (B * min(r, r')) + 2 * latency across the
 *             cut to the neighbouring stage with r' replicas, B that of the
 *             outermost level separating two ranks that exchange minibatches
 *             under round-robin routing (minibatch b: replica b mod r)
 *   time    = max(work, data, recv, send): the runtime overlaps
 *             communication and data loading with compute.
 * Memory per replica with n minibatches in flight: weights x (n + 1)
 * versions (the weight ring), stashed activations (the stage's outputs and
 * its input) x n, and optimizer state (factor x weights). A plan's n per
 * stage is the 1F1B schedule's warm-up, n_s = 1 + ceil(n_{s+1} r_{s+1} /
 * r_s) (pd_plan_1f1b_in_flight, what the runtime runs); the dynamic
 * program prices stages with PipeDream's NOAM, ceil(workers of s and later
 * stages / r_s), never more than that (default_dp.c). */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include <pipedream/sched.h>

#include "plan/plan_int.h"

double pd_plan_default_transfer_ms(double cut_bytes, int replicas, double bandwidth, double latency_s)
{
    return 1e3 * (2.0 * cut_bytes / (bandwidth * replicas) + 2.0 * latency_s);
}

int pd_plan_default_in_flight(int workers_from_stage, int replicas)
{
    return (workers_from_stage + replicas - 1) / replicas;
}

int pd_plan_default_in_flight_bound(int workers_from_stage, int replicas)
{
    int later = workers_from_stage - replicas;
    return later <= 0 ? 1 : 1 + (2 * later - 1 + replicas - 1) / replicas;
}

double pd_plan_default_memory_bytes(const pd_plan_default_load *load, int in_flight, const pd_plan_options *opts)
{
    return load->weight_bytes * (in_flight + 1) + load->activation_bytes * in_flight +
           opts->optimizer_state_factor * load->weight_bytes;
}

int pd_plan_default_max_in_flight(const pd_plan_default_load *load, const pd_plan_options *opts)
{
    double limit = opts->memory_bytes, per = load->weight_bytes + load->activation_bytes;
    double guess;
    int n;

    if (!(limit > 0))
        return INT_MAX;
    if (pd_plan_default_memory_bytes(load, 1, opts) > limit)
        return 0;
    if (per <= 0)
        return INT_MAX;
    /* Solve the affine formula, then settle on exactly what
     * pd_plan_default_memory_bytes says, rounding included. */
    guess = floor((limit - pd_plan_default_memory_bytes(load, 0, opts)) / per);
    n = guess >= INT_MAX / 2 ? INT_MAX / 2 : guess < 1 ? 1 : (int)guess;
    while (n > 1 && pd_plan_default_memory_bytes(load, n, opts) > limit)
        n--;
    while (n < INT_MAX / 2 && pd_plan_default_memory_bytes(load, n + 1, opts) <= limit)
        n++;
    return n;
}

void pd_plan_default_stage_cost(const pd_plan_default_load *load, int in_flight, const pd_plan_options *opts,
                                pd_plan_stage *out)
{
    int r = load->replicas;
    double sync = 0, work, data, best;

    if (r > 1)
        sync = 1e3 *
               (2.0 * (r - 1) / r * load->weight_bytes / load->sync_bandwidth + 2.0 * (r - 1) * load->sync_latency_s);
    work = (load->compute_ms + sync) / r;
    data = load->data_ms / r;
    out->compute_ms = load->compute_ms;
    out->sync_ms = sync;
    out->recv_ms = load->recv_ms;
    out->send_ms = load->send_ms;
    best = work;
    out->bottleneck = load->compute_ms >= sync ? PD_PLAN_TERM_COMPUTE : PD_PLAN_TERM_SYNC;
    if (data > best) {
        best = data;
        out->bottleneck = PD_PLAN_TERM_DATA;
    }
    if (load->recv_ms > best) {
        best = load->recv_ms;
        out->bottleneck = PD_PLAN_TERM_RECV;
    }
    if (load->send_ms > best) {
        best = load->send_ms;
        out->bottleneck = PD_PLAN_TERM_SEND;
    }
    out->time_ms = best;
    out->in_flight = in_flight;
    out->weight_versions = in_flight + 1;
    out->weight_bytes = load->weight_bytes * out->weight_versions;
    out->activation_bytes = load->activation_bytes * in_flight;
    out->optimizer_bytes = opts->optimizer_state_factor * load->weight_bytes;
    out->memory_bytes = pd_plan_default_memory_bytes(load, in_flight, opts);
}

double pd_plan_default_node_activation(const pd_profile *profile, const pd_plan_graph *g, int v)
{
    double bytes = 0;
    for (int k = 0; k < g->n_members[v]; k++)
        bytes += (double)pd_profile_node_at(profile, g->members[v][k])->activation_bytes;
    return bytes;
}

double pd_plan_default_input_bytes(const pd_profile *profile, const pd_plan_graph *g)
{
    double bytes = 0;
    for (int k = 0; k < g->n_inputs; k++)
        bytes += (double)pd_profile_node_at(profile, g->inputs[k])->activation_bytes;
    return bytes;
}

/* ---- where ranks sit in the hierarchy ---- */

/* The level at which ranks a and b meet: the innermost level one of whose
 * groups holds both (their traffic crosses that level's links); -1 when
 * a == b. */
static int meeting_level(const pd_plan_cluster *c, int a, int b)
{
    long long group = 1;
    if (a == b)
        return -1;
    for (int l = 0; l < c->n_levels; l++) {
        group *= c->levels[l].fanout;
        if (a / group == b / group)
            return l;
    }
    return c->n_levels - 1;
}

/* The outermost level a set of ranks spans (-1 for a single rank). */
static int span_level(const pd_plan_cluster *c, const int *ranks, int n)
{
    int level = -1;
    for (int i = 1; i < n; i++) {
        int l = meeting_level(c, ranks[0], ranks[i]);
        level = l > level ? l : level;
    }
    return level;
}

static long long gcd_ll(long long a, long long b)
{
    while (b) {
        long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The outermost level separating two ranks that exchange minibatches
 * between consecutive stages a and b: minibatch m goes from replica
 * m mod r_a to replica m mod r_b, a pattern that repeats every
 * lcm(r_a, r_b) minibatches. Level 0 when the stages share a rank (not a
 * valid plan; it keeps the evaluation defined). */
static int cut_level(const pd_plan_cluster *c, const pd_plan_stage *a, const pd_plan_stage *b)
{
    long long period = (long long)a->replicas / gcd_ll(a->replicas, b->replicas) * b->replicas;
    int level = 0;
    for (long long m = 0; m < period; m++) {
        int l = meeting_level(c, a->ranks[m % a->replicas], b->ranks[m % b->replicas]);
        level = l > level ? l : level;
    }
    return level;
}

/* ---- evaluation ---- */

/* The load of one stage of all layers on `replicas` workers spanning up
 * to `level`, for the single-worker and data-parallel references. */
static double whole_model_ms(const pd_plan_graph *g, double activation_bytes, const pd_plan_cluster *c, int replicas,
                             const pd_plan_options *opts)
{
    pd_plan_default_load load = {
        .replicas = replicas, .data_ms = g->data_loading_ms, .activation_bytes = activation_bytes};
    pd_plan_stage st = {0};
    int last = replicas - 1, level = meeting_level(c, 0, last);

    for (int v = 0; v < g->n; v++) {
        load.compute_ms += g->fwd_ms[v] + g->bwd_ms[v];
        load.weight_bytes += g->par_bytes[v];
    }
    if (level >= 0) {
        load.sync_bandwidth = c->levels[level].bandwidth_bytes_per_s;
        load.sync_latency_s = c->levels[level].latency_s;
    }
    pd_plan_default_stage_cost(&load, 1, opts, &st);
    return st.time_ms;
}

pd_status pd_plan_default_fill(const pd_profile *profile, const pd_plan_graph *g, const int *node_stage,
                               const pd_plan_options *opts, pd_plan *plan)
{
    int n_st = plan->n_stages, workers = pd_plan_cluster_workers(&plan->cluster);
    pd_plan_default_load *load = calloc((size_t)n_st, sizeof(*load));
    double *cut = calloc((size_t)n_st + 1, sizeof(*cut)), all_act = 0;
    int *replicas = calloc((size_t)n_st + 1, sizeof(int)), *in_flight = calloc((size_t)n_st + 1, sizeof(int));
    pd_status s = PD_OK;

    if (n_st < 1) {
        s = PD_ERROR(PD_EINVAL, "the plan has no stages");
        goto out_free;
    }
    if (!load || !cut || !replicas || !in_flight) {
        s = PD_ERROR(PD_ENOMEM, "out of host memory evaluating a plan");
        goto out_free;
    }
    for (int v = 0; v < g->n; v++) {
        int k = node_stage[v], n_exits;
        double act = pd_plan_default_node_activation(profile, g, v);
        pd_plan_exit one;
        const pd_plan_exit *exits;
        all_act += act;
        if (k < 0 || k >= n_st) {
            s = PD_ERROR(PD_EINVAL, "layer '%s' is in no stage of the plan",
                         pd_profile_node_at(profile, g->members[v][0])->name);
            goto out_free;
        }
        load[k].compute_ms += g->fwd_ms[v] + g->bwd_ms[v];
        load[k].weight_bytes += g->par_bytes[v];
        load[k].activation_bytes += act;
        /* Each output crosses every cut up to its last reader's stage
         * (stages in between forward it). */
        n_exits = pd_plan_graph_exits(g, v, &one, &exits);
        for (int x = 0; x < n_exits; x++) {
            int last = k;
            for (int e = 0; e < exits[x].n_to; e++)
                last = node_stage[exits[x].to[e]] > last ? node_stage[exits[x].to[e]] : last;
            for (int c = k + 1; c <= last; c++)
                cut[c] += exits[x].bytes;
        }
    }
    load[0].data_ms = g->data_loading_ms;
    load[0].activation_bytes += pd_plan_default_input_bytes(profile, g);
    for (int k = 1; k < n_st; k++) {
        const pd_plan_stage *a = &plan->stages[k - 1], *b = &plan->stages[k];
        const pd_plan_level *lv = &plan->cluster.levels[cut_level(&plan->cluster, a, b)];
        int r = a->replicas < b->replicas ? a->replicas : b->replicas;
        load[k].activation_bytes += cut[k];
        load[k].recv_ms = load[k - 1].send_ms =
            pd_plan_default_transfer_ms(cut[k], r, lv->bandwidth_bytes_per_s, lv->latency_s);
    }
    plan->workers = workers;
    plan->workers_used = 0;
    plan->time_ms = 0;
    plan->bottleneck_stage = 0;
    /* Memory for the minibatches the runtime's schedule really holds. */
    for (int k = 0; k < n_st; k++)
        replicas[k] = plan->stages[k].replicas;
    pd_plan_1f1b_in_flight(n_st, replicas, in_flight);
    for (int k = n_st - 1; k >= 0; k--) {
        pd_plan_stage *st = &plan->stages[k];
        int level = span_level(&plan->cluster, st->ranks, st->replicas);
        load[k].replicas = st->replicas;
        if (level >= 0) {
            load[k].sync_bandwidth = plan->cluster.levels[level].bandwidth_bytes_per_s;
            load[k].sync_latency_s = plan->cluster.levels[level].latency_s;
        }
        plan->workers_used += st->replicas;
        pd_plan_default_stage_cost(&load[k], in_flight[k], opts, st);
    }
    for (int k = 0; k < n_st; k++)
        if (plan->stages[k].time_ms > plan->time_ms) {
            plan->time_ms = plan->stages[k].time_ms;
            plan->bottleneck_stage = k;
        }
    all_act += pd_plan_default_input_bytes(profile, g);
    plan->single_worker_ms = whole_model_ms(g, all_act, &plan->cluster, 1, opts);
    plan->data_parallel_ms = whole_model_ms(g, all_act, &plan->cluster, workers, opts);
out_free:
    free(load);
    free(cut);
    free(replicas);
    free(in_flight);
    return s;
}

pd_status pd_plan_evaluate_default(const pd_profile *profile, const pd_plan_options *opts, pd_plan *plan)
{
    int size = pd_profile_size(profile);
    int *stage_of = malloc(sizeof(int) * (size_t)(size > 0 ? size : 1)), *node_stage = NULL;
    pd_plan_graph *g = NULL;
    pd_status s;

    if (!stage_of)
        return PD_ERROR(PD_ENOMEM, "out of host memory evaluating a plan");
    for (int p = 0; p < size; p++)
        stage_of[p] = -1;
    for (int k = 0; k < plan->n_stages; k++)
        for (int l = 0; l < plan->stages[k].n_layers; l++)
            stage_of[plan->stages[k].layers[l]] = k;
    PD_CHECK_GOTO(pd_plan_graph_from_profile(profile, &g), s, out_free);
    node_stage = malloc(sizeof(int) * (size_t)g->n);
    if (!node_stage) {
        s = PD_ERROR(PD_ENOMEM, "out of host memory evaluating a plan");
        goto out_free;
    }
    for (int v = 0; v < g->n; v++)
        node_stage[v] = stage_of[g->members[v][0]];
    s = pd_plan_default_fill(profile, g, node_stage, opts, plan);
out_free:
    pd_plan_graph_destroy(g);
    free(node_stage);
    free(stage_of);
    return s;
}
