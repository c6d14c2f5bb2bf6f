/* Random profiles and exhaustive search over plans for the planner's
 * tests (include after <cmocka.h>): small profiles built from node specs,
 * random chains and DAGs, every plan of a profile over a planning graph's
 * antichain states (flat or two-level clusters), each evaluated from the
 * profile by pd_plan_evaluate. Every failure is a test failure. */
#ifndef TEST_PLAN_SEARCH_H
#define TEST_PLAN_SEARCH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "core/pd_rng.h"
#include "plan/plan_int.h"

/* ---- profiles ---- */

typedef struct node_spec {
    double fwd, bwd;
    int64_t act, weight;
    int n_in;
    int in[12];
    bool input;
} node_spec;

static inline pd_profile *build_profile(const node_spec *spec, int n)
{
    pd_profile_info info = {.model = "t", .batch = 1, .dtype = PD_F32, .device = "test", .source = "test"};
    pd_profile *p = NULL;

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "n%d", i);
        pd_profile_node node = {
            .name = name,
            .type = spec[i].input ? PD_PROFILE_INPUT_TYPE : "linear",
            .description = spec[i].input ? "Input0" : "layer",
            .fwd_ms = spec[i].fwd,
            .bwd_ms = spec[i].bwd,
            .activation_bytes = spec[i].act,
            .weight_bytes = spec[i].weight,
            .flops = -1,
            .n_inputs = spec[i].n_in,
            .inputs = spec[i].in,
        };
        assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_OK);
    }
    return p;
}

/* Levels given innermost first as (fanout, bandwidth, latency) triples. */
static inline pd_plan_cluster make_cluster(int n_levels, const int *fanout, const double *bandwidth,
                                           const double *latency)
{
    pd_plan_cluster c = {.n_levels = n_levels};
    for (int l = 0; l < n_levels; l++)
        c.levels[l] =
            (pd_plan_level){.fanout = fanout[l], .bandwidth_bytes_per_s = bandwidth[l], .latency_s = latency[l]};
    return c;
}

/* One level of `workers` workers. */
static inline pd_plan_cluster one_level(int workers, double bandwidth, double latency)
{
    return make_cluster(1, &workers, &bandwidth, &latency);
}

static inline void assert_close(double got, double want, double rel)
{
    double tol = rel * fmax(fabs(want), 1e-300);
    if (!(fabs(got - want) <= tol)) {
        fprintf(stderr, "# got %.17g, want %.17g\n", got, want);
        fail();
    }
}

static inline double uniform(pd_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * (double)(pd_rng_next(rng) >> 11) / 9007199254740992.0;
}

/* A random node: sometimes no compute, sometimes no weights. */
static inline node_spec random_node(pd_rng *rng)
{
    node_spec n = {0};
    if (pd_rng_next(rng) % 5 != 0) {
        n.fwd = uniform(rng, 0.1, 10);
        n.bwd = uniform(rng, 0.1, 20);
    }
    n.act = (int64_t)uniform(rng, 0, 2e6);
    if (pd_rng_next(rng) % 3 != 0)
        n.weight = (int64_t)uniform(rng, 0, 8e6);
    return n;
}

/* Adds input `from` to node `to` unless it is there already. */
static inline void add_input(node_spec *to, int from)
{
    for (int e = 0; e < to->n_in; e++)
        if (to->in[e] == from)
            return;
    to->in[to->n_in++] = from;
}

/* An input node then `n` layers: a chain, or a DAG in which each layer
 * reads one or two earlier layers and the last one also reads every layer
 * nobody else reads (diamonds and branches). */
static inline pd_profile *random_profile(pd_rng *rng, int n, bool dag)
{
    node_spec spec[12] = {{0}};
    bool read[12] = {false};

    /* Data loading: now and then slow enough to bound the first stage. */
    spec[0] = (node_spec){.fwd = pd_rng_next(rng) % 3 ? uniform(rng, 0, 5) : uniform(rng, 10, 60),
                          .act = (int64_t)uniform(rng, 0, 1e6),
                          .input = true};
    for (int i = 1; i <= n; i++) {
        spec[i] = random_node(rng);
        if (!dag || i == 1 || pd_rng_next(rng) % 2)
            add_input(&spec[i], i - 1);
        else
            add_input(&spec[i], 1 + (int)(pd_rng_next(rng) % (uint64_t)(i - 1)));
        if (dag && i > 2 && pd_rng_next(rng) % 2)
            add_input(&spec[i], 1 + (int)(pd_rng_next(rng) % (uint64_t)(i - 1)));
        for (int e = 0; e < spec[i].n_in; e++)
            read[spec[i].in[e]] = true;
    }
    for (int j = 1; j < n; j++)
        if (!read[j])
            add_input(&spec[n], j);
    return build_profile(spec, n + 1);
}

/* ---- exhaustive search ---- */

#define MAX_SPANS 16

/* Every plan of one profile on one cluster: stage paths through the
 * antichain DAG x replicas (x, on two levels, PipeDream's nesting). */
typedef struct search {
    const pd_profile *profile;
    const pd_plan_cluster *cluster;
    const pd_plan_options *opts;
    pd_plan_graph *g;
    pd_plan_states *s;
    bool fewer;
    pd_plan_span spans[MAX_SPANS];
    int ranks[MAX_SPANS][16];
    /* each plan's time and largest stage memory; eligible: no stage
     * without compute */
    double *time, *memory;
    int n, cap;
} search;

static inline bool precedes(const pd_plan_states *s, int a, int b)
{
    return a < 0 || (s->is_pred[b][a / 64] >> (a % 64) & 1);
}

static inline void record(search *se, int n_spans)
{
    pd_plan *plan = calloc(1, sizeof(*plan));
    double worst = 0;
    bool eligible = true;

    assert_non_null(plan);
    plan->cluster = *se->cluster;
    assert_int_equal(pd_plan_set_stages(plan, se->g, se->s, n_spans, se->spans), PD_OK);
    assert_int_equal(pd_plan_evaluate(se->profile, se->opts, plan), PD_OK);
    for (int k = 0; k < plan->n_stages; k++) {
        worst = fmax(worst, plan->stages[k].memory_bytes);
        eligible = eligible && plan->stages[k].compute_ms > 0;
    }
    if (eligible) {
        if (se->n == se->cap) {
            se->cap = se->cap ? 2 * se->cap : 256;
            se->time = realloc(se->time, sizeof(double) * (size_t)se->cap);
            se->memory = realloc(se->memory, sizeof(double) * (size_t)se->cap);
            assert_true(se->time && se->memory);
        }
        se->time[se->n] = plan->time_ms;
        se->memory[se->n++] = worst;
    }
    pd_plan_destroy(plan);
}

/* Flat cluster: replicas for stages [k, n_spans) with `left` workers. */
static inline void flat_replicas(search *se, int k, int n_spans, int left, int next_rank)
{
    if (k == n_spans) {
        if (left == 0 || se->fewer)
            record(se, n_spans);
        return;
    }
    for (int r = 1; r <= left - (n_spans - k - 1); r++) {
        for (int q = 0; q < r; q++)
            se->ranks[k][q] = next_rank + q;
        se->spans[k].n_ranks = r;
        se->spans[k].ranks = se->ranks[k];
        flat_replicas(se, k + 1, n_spans, left - r, next_rank + r);
    }
}

static inline void flat_paths(search *se, int from, int k, int workers)
{
    for (int to = from + 1; to < se->s->n && k < workers; to++) {
        if (!precedes(se->s, from, to))
            continue;
        se->spans[k].from_state = from;
        se->spans[k].to_state = to;
        if (to == se->s->n - 1)
            flat_replicas(se, 0, k + 1, workers, 0);
        else
            flat_paths(se, to, k + 1, workers);
    }
}

/* Two levels (f0 workers per group, f1 groups): a top stage over rho whole
 * groups from group g0 holds a pipeline of stages, each r consecutive
 * workers from `offset` in every one of its groups. */
static inline void nested_top(search *se, int from, int groups_used, int k);

static inline void nested_inner(search *se, int from, int end, int g0, int rho, int offset, int k)
{
    int f0 = se->cluster->levels[0].fanout;
    for (int to = from + 1; to <= end && k < MAX_SPANS; to++) {
        if (!precedes(se->s, from, to) || (to != end && !precedes(se->s, to, end)))
            continue;
        for (int r = 1; offset + r <= f0; r++) {
            se->spans[k] =
                (pd_plan_span){.from_state = from, .to_state = to, .n_ranks = rho * r, .ranks = se->ranks[k]};
            for (int gi = 0; gi < rho; gi++)
                for (int q = 0; q < r; q++)
                    se->ranks[k][gi * r + q] = (g0 + gi) * f0 + offset + q;
            if (to < end)
                nested_inner(se, to, end, g0, rho, offset + r, k + 1);
            else if (offset + r == f0 || se->fewer)
                nested_top(se, to, g0 + rho, k + 1);
        }
    }
}

static inline void nested_top(search *se, int from, int groups_used, int k)
{
    int f1 = se->cluster->levels[1].fanout;
    if (from == se->s->n - 1) {
        if (groups_used == f1 || se->fewer)
            record(se, k);
        return;
    }
    for (int end = from + 1; end < se->s->n; end++) {
        if (!precedes(se->s, from, end))
            continue;
        for (int rho = 1; groups_used + rho <= f1; rho++)
            nested_inner(se, from, end, groups_used, rho, 0, k);
    }
}

static inline void search_all(search *se)
{
    se->n = 0;
    if (se->cluster->n_levels == 1)
        flat_paths(se, -1, 0, se->cluster->levels[0].fanout);
    else
        nested_top(se, -1, 0, 0);
    assert_true(se->n > 0);
}

/* The best time among the plans that fit in `limit` bytes (0: any);
 * HUGE_VAL when none does. */
static inline double best_within(const search *se, double limit)
{
    double best = HUGE_VAL;
    for (int i = 0; i < se->n; i++)
        if (!(limit > 0) || se->memory[i] <= limit)
            best = fmin(best, se->time[i]);
    return best;
}

#endif
