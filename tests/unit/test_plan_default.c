/* The default cost model: every predicted field of a small chain against
 * hand-computed values; the dynamic program against exhaustive search over
 * every plan of random chains and DAGs on flat clusters of 1 to 4 workers
 * and on a two-level 2x2 cluster, with and without a memory limit and
 * fewer workers; memory limits that force a pipeline or rule out every
 * plan; zero-compute layers; fewer workers over a slow link; and solve
 * times on PipeDream's published profiles. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "core/pd_rng.h"
#include "plan/plan_int.h"
#include "test_plans.h"

/* ---- helpers ---- */

typedef struct node_spec {
    double fwd, bwd;
    int64_t act, weight;
    int n_in;
    int in[12];
    bool input;
} node_spec;

static pd_profile *build_profile(const node_spec *spec, int n)
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
static pd_plan_cluster make_cluster(int n_levels, const int *fanout, const double *bandwidth, const double *latency)
{
    pd_plan_cluster c = {.n_levels = n_levels};
    for (int l = 0; l < n_levels; l++)
        c.levels[l] =
            (pd_plan_level){.fanout = fanout[l], .bandwidth_bytes_per_s = bandwidth[l], .latency_s = latency[l]};
    return c;
}

/* One level of `workers` workers. */
static pd_plan_cluster one_level(int workers, double bandwidth, double latency)
{
    return make_cluster(1, &workers, &bandwidth, &latency);
}

static void assert_close(double got, double want, double rel)
{
    double tol = rel * fmax(fabs(want), 1e-300);
    if (!(fabs(got - want) <= tol)) {
        fprintf(stderr, "# got %.17g, want %.17g\n", got, want);
        fail();
    }
}

/* Prints text as TAP comments, one "# " per line. */
static void print_comment(const char *text)
{
    while (text && *text) {
        size_t len = strcspn(text, "\n");
        fprintf(stderr, "# %.*s\n", (int)len, text);
        text += len + (text[len] == '\n');
    }
}

/* A plan of the given stages, evaluated by pd_plan_evaluate. */
static pd_plan *evaluate(const pd_profile *p, const pd_plan_cluster *c, const pd_plan_options *o, int n_stages,
                         const int *const *layers, const int *n_layers, const int *const *ranks, const int *replicas)
{
    pd_plan *plan = calloc(1, sizeof(*plan));
    assert_non_null(plan);
    plan->cluster = *c;
    plan->n_stages = n_stages;
    plan->stages = calloc((size_t)n_stages, sizeof(*plan->stages));
    for (int k = 0; k < n_stages; k++) {
        pd_plan_stage *st = &plan->stages[k];
        st->n_layers = n_layers[k];
        st->layers = malloc(sizeof(int) * (size_t)n_layers[k]);
        memcpy(st->layers, layers[k], sizeof(int) * (size_t)n_layers[k]);
        st->replicas = replicas[k];
        st->ranks = malloc(sizeof(int) * (size_t)replicas[k]);
        memcpy(st->ranks, ranks[k], sizeof(int) * (size_t)replicas[k]);
    }
    assert_int_equal(pd_plan_evaluate(p, o, plan), PD_OK);
    return plan;
}

/* ---- hand-computed costs ---- */

/* input (data 2 ms, 400 B) -> a -> b -> c on 2 workers, 1 MB/s, 0.1 ms. */
static const node_spec chain3[] = {
    {.fwd = 2, .act = 400, .input = true},
    {.fwd = 3, .bwd = 6, .act = 1000, .weight = 2000, .n_in = 1, .in = {0}},
    {.fwd = 1, .bwd = 2, .act = 500, .weight = 8000, .n_in = 1, .in = {1}},
    {.fwd = 2, .bwd = 1, .act = 10, .weight = 1000, .n_in = 1, .in = {2}},
};

static void test_hand_computed_chain(void **state)
{
    (void)state;
    pd_profile *p = build_profile(chain3, 4);
    pd_plan_cluster c = one_level(2, 1e6, 1e-4);
    pd_plan_options o = {.optimizer_state_factor = 1};
    int s0[] = {0, 1}, s1[] = {2, 3}, all[] = {0, 1, 2, 3}, r0[] = {0}, r1[] = {1}, r01[] = {0, 1};
    const int *layers[] = {s0, s1}, *ranks[] = {r0, r1}, n_layers[] = {2, 2}, replicas[] = {1, 1};

    /* Two stages, one worker each. Stage 0: compute 9 ms, data 2 ms, send
     * 2 * 1000 B / 1e6 B/s + 2 * 0.1 ms = 2.2 ms; 2 in flight: weights
     * 2000 x 3 versions, activations (1000 + input 400) x 2, optimizer 2000.
     * Stage 1: compute 6, recv 2.2; 1 in flight: weights 9000 x 2,
     * activations (510 + cut 1000) x 1, optimizer 9000. */
    pd_plan *plan = evaluate(p, &c, &o, 2, layers, n_layers, ranks, replicas);
    const pd_plan_stage *a = &plan->stages[0], *b = &plan->stages[1];
    assert_close(a->compute_ms, 9, 1e-12);
    assert_close(a->sync_ms + 1, 1, 1e-12);
    assert_close(a->recv_ms + 1, 1, 1e-12);
    assert_close(a->send_ms, 2.2, 1e-12);
    assert_close(a->time_ms, 9, 1e-12);
    assert_int_equal(a->bottleneck, PD_PLAN_TERM_COMPUTE);
    assert_int_equal(a->in_flight, 2);
    assert_int_equal(a->weight_versions, 3);
    assert_close(a->weight_bytes, 6000, 1e-12);
    assert_close(a->activation_bytes, 2800, 1e-12);
    assert_close(a->optimizer_bytes, 2000, 1e-12);
    assert_close(a->memory_bytes, 10800, 1e-12);
    assert_close(b->compute_ms, 6, 1e-12);
    assert_close(b->recv_ms, 2.2, 1e-12);
    assert_close(b->send_ms + 1, 1, 1e-12);
    assert_close(b->time_ms, 6, 1e-12);
    assert_int_equal(b->bottleneck, PD_PLAN_TERM_COMPUTE);
    assert_int_equal(b->in_flight, 1);
    assert_int_equal(b->weight_versions, 2);
    assert_close(b->weight_bytes, 18000, 1e-12);
    assert_close(b->activation_bytes, 1510, 1e-12);
    assert_close(b->optimizer_bytes, 9000, 1e-12);
    assert_close(b->memory_bytes, 28510, 1e-12);
    assert_close(plan->time_ms, 9, 1e-12);
    assert_int_equal(plan->bottleneck_stage, 0);
    assert_int_equal(plan->workers, 2);
    assert_int_equal(plan->workers_used, 2);
    /* One worker: max(15 ms compute, 2 ms data). All workers: sync
     * 2 (1/2) 11000 B / 1e6 + 2 x 0.1 ms = 11.2 ms; (15 + 11.2) / 2. */
    assert_close(plan->single_worker_ms, 15, 1e-12);
    assert_close(plan->data_parallel_ms, 13.1, 1e-12);
    pd_plan_destroy(plan);

    /* The same cut over a link of 100 KB/s: 2 * 1000 / 1e5 s + 0.2 ms =
     * 20.2 ms each way; stage 0 is bound by its send, stage 1 by its recv. */
    c.levels[0].bandwidth_bytes_per_s = 1e5;
    plan = evaluate(p, &c, &o, 2, layers, n_layers, ranks, replicas);
    assert_close(plan->stages[0].time_ms, 20.2, 1e-12);
    assert_int_equal(plan->stages[0].bottleneck, PD_PLAN_TERM_SEND);
    assert_close(plan->stages[1].time_ms, 20.2, 1e-12);
    assert_int_equal(plan->stages[1].bottleneck, PD_PLAN_TERM_RECV);
    assert_close(plan->time_ms, 20.2, 1e-12);
    pd_plan_destroy(plan);

    /* One stage on both workers is data parallelism: sync over the link,
     * 1 in flight, every layer's weights twice, activations
     * 1000 + 500 + 10 + input 400. */
    c.levels[0].bandwidth_bytes_per_s = 1e6;
    const int *l1[] = {all}, *rk1[] = {r01}, nl1[] = {4}, rp1[] = {2};
    plan = evaluate(p, &c, &o, 1, l1, nl1, rk1, rp1);
    assert_close(plan->stages[0].sync_ms, 11.2, 1e-12);
    assert_close(plan->stages[0].time_ms, 13.1, 1e-12);
    assert_int_equal(plan->stages[0].bottleneck, PD_PLAN_TERM_COMPUTE);
    assert_int_equal(plan->stages[0].in_flight, 1);
    assert_close(plan->stages[0].memory_bytes, 11000 * 2 + 1910 + 11000, 1e-12);
    assert_close(plan->time_ms, plan->data_parallel_ms, 1e-12);
    pd_plan_destroy(plan);

    /* Data loading of 30 ms per minibatch bounds stage 0 (replicated
     * twice: 15 ms) once the loader is the slowest part. */
    node_spec slow[4];
    memcpy(slow, chain3, sizeof(slow));
    slow[0].fwd = 30;
    pd_profile *q = build_profile(slow, 4);
    plan = evaluate(q, &c, &o, 1, l1, nl1, rk1, rp1);
    assert_close(plan->stages[0].time_ms, 15, 1e-12);
    assert_int_equal(plan->stages[0].bottleneck, PD_PLAN_TERM_DATA);
    pd_plan_destroy(plan);
    pd_profile_destroy(q);

    /* The solver finds the 9 ms plan: [input, a] | [b, c]. */
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_close(plan->time_ms, 9, 1e-12);
    assert_int_equal(plan->n_stages, 2);
    assert_int_equal(plan->stages[0].n_layers, 2);
    assert_int_equal(plan->stages[0].layers[1], 1);
    assert_int_equal(plan->stages[0].ranks[0], 0);
    assert_int_equal(plan->stages[1].ranks[0], 1);
    assert_close(plan->stages[1].memory_bytes, 28510, 1e-12);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
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

static bool precedes(const pd_plan_states *s, int a, int b) { return a < 0 || (s->is_pred[b][a / 64] >> (a % 64) & 1); }

static void record(search *se, int n_spans)
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
static void flat_replicas(search *se, int k, int n_spans, int left, int next_rank)
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

static void flat_paths(search *se, int from, int k, int workers)
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
static void nested_top(search *se, int from, int groups_used, int k);

static void nested_inner(search *se, int from, int end, int g0, int rho, int offset, int k)
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

static void nested_top(search *se, int from, int groups_used, int k)
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

static void search_all(search *se)
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
static double best_within(const search *se, double limit)
{
    double best = HUGE_VAL;
    for (int i = 0; i < se->n; i++)
        if (!(limit > 0) || se->memory[i] <= limit)
            best = fmin(best, se->time[i]);
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Counts how the dynamic program fared, for the summary line. */
typedef struct tally {
    int solved, no_fit, plans, approximate, approximate_best;
} tally;

/* The dynamic program against the search for one memory limit. */
static void check_limit(search *se, double limit, bool exact, tally *t)
{
    pd_plan_options o = *se->opts;
    pd_plan *plan = NULL;
    double want, dp_ms;
    pd_status st;

    o.memory_bytes = limit;
    want = best_within(se, limit);
    assert_int_equal(pd_plan_default_dp_ms(se->profile, se->g, se->s, se->cluster, &o, false, &dp_ms), PD_OK);
    /* The one-pass program and the tables by level agree. */
    double by_level_ms;
    assert_int_equal(pd_plan_default_dp_ms(se->profile, se->g, se->s, se->cluster, &o, true, &by_level_ms), PD_OK);
    if (dp_ms == HUGE_VAL)
        assert_true(by_level_ms == HUGE_VAL);
    else
        assert_close(by_level_ms, dp_ms, 1e-9);
    st = pd_plan_solve(se->profile, se->cluster, &o, &plan);
    if (want == HUGE_VAL) {
        assert_int_equal(st, PD_ENOTFOUND);
        assert_non_null(strstr(pd_last_error(), "no plan fits in"));
        assert_non_null(strstr(pd_last_error(), "the smallest needs"));
        assert_true(dp_ms == HUGE_VAL);
        t->no_fit++;
        return;
    }
    if (st != PD_OK)
        fprintf(stderr, "# %s\n", pd_last_error());
    assert_int_equal(st, PD_OK);
    if (exact) {
        assert_close(plan->time_ms, want, 1e-9);
        assert_close(dp_ms, plan->time_ms, 1e-9);
    } else {
        /* Fewer workers under a memory limit on two levels: the dynamic
         * program may refuse plans that fit, never take one that does not. */
        assert_true(plan->time_ms >= want * (1 - 1e-9));
        assert_close(dp_ms, plan->time_ms, 1e-9);
        t->approximate++;
        t->approximate_best += plan->time_ms <= want * (1 + 1e-9);
    }
    for (int k = 0; k < plan->n_stages; k++) {
        assert_true(plan->stages[k].compute_ms > 0);
        if (limit > 0)
            assert_true(plan->stages[k].memory_bytes <= limit);
    }
    if (!se->fewer)
        assert_int_equal(plan->workers_used, plan->workers);
    /* The plan read back through the evaluator gives the same time. */
    assert_int_equal(pd_plan_evaluate(se->profile, &o, plan), PD_OK);
    assert_close(plan->time_ms, exact ? want : plan->time_ms, 1e-9);
    t->solved++;
    pd_plan_destroy(plan);
}

/* Solving on the branch-collapsed graph: fewer cut points, so no better
 * than `best`, and the plan evaluates from the profile to the same time
 * and memory the solver reported. */
static void check_collapsed(const pd_profile *p, const pd_plan_cluster *c, const pd_plan_options *opts, double best)
{
    pd_plan_options o = *opts;
    pd_plan *plan = NULL;
    double *memory;

    o.collapse_branches = true;
    assert_int_equal(pd_plan_solve(p, c, &o, &plan), PD_OK);
    assert_true(plan->time_ms >= best * (1 - 1e-9));
    memory = malloc(sizeof(double) * (size_t)plan->n_stages);
    for (int k = 0; k < plan->n_stages; k++)
        memory[k] = plan->stages[k].memory_bytes;
    double time = plan->time_ms;
    assert_int_equal(pd_plan_evaluate(p, &o, plan), PD_OK);
    assert_close(plan->time_ms, time, 1e-9);
    for (int k = 0; k < plan->n_stages; k++)
        assert_close(plan->stages[k].memory_bytes, memory[k], 1e-9);
    free(memory);
    pd_plan_destroy(plan);
}

/* Every limit class for one profile and cluster: none, one that some
 * plans fit and others not, and one below every plan. */
static void check_profile(const pd_profile *p, const pd_plan_cluster *c, pd_rng *rng, tally *t)
{
    pd_plan_options o = {.optimizer_state_factor = (double)(pd_rng_next(rng) % 3)};
    search se = {.profile = p, .cluster = c, .opts = &o};
    double *sorted;

    assert_int_equal(pd_plan_graph_from_profile(p, &se.g), PD_OK);
    assert_int_equal(pd_plan_states_build(se.g, &se.s), PD_OK);
    for (int fewer = 0; fewer < 2; fewer++) {
        bool exact_with_limit = c->n_levels == 1 || !fewer;
        o.allow_fewer_workers = fewer;
        se.fewer = fewer;
        search_all(&se);
        t->plans += se.n;
        check_limit(&se, 0, true, t);
        sorted = malloc(sizeof(double) * (size_t)se.n);
        memcpy(sorted, se.memory, sizeof(double) * (size_t)se.n);
        qsort(sorted, (size_t)se.n, sizeof(double), cmp_double);
        check_limit(&se, sorted[pd_rng_next(rng) % (uint64_t)se.n], exact_with_limit, t);
        check_limit(&se, sorted[se.n / 4], exact_with_limit, t);
        check_limit(&se, sorted[0] * 0.999, true, t);
        free(sorted);
    }
    check_collapsed(p, c, &o, best_within(&se, 0));
    free(se.time);
    free(se.memory);
    pd_plan_states_destroy(se.s);
    pd_plan_graph_destroy(se.g);
}

static double uniform(pd_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * (double)(pd_rng_next(rng) >> 11) / 9007199254740992.0;
}

/* A random node: sometimes no compute, sometimes no weights. */
static node_spec random_node(pd_rng *rng)
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
static void add_input(node_spec *to, int from)
{
    for (int e = 0; e < to->n_in; e++)
        if (to->in[e] == from)
            return;
    to->in[to->n_in++] = from;
}

/* An input node then `n` layers: a chain, or a DAG in which each layer
 * reads one or two earlier layers and the last one also reads every layer
 * nobody else reads (diamonds and branches). */
static pd_profile *random_profile(pd_rng *rng, int n, bool dag)
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

static void test_exhaustive_flat(void **state)
{
    (void)state;
    pd_rng rng;
    tally t = {0};

    pd_rng_init(&rng, 12345);
    for (int trial = 0; trial < 48; trial++) {
        bool dag = trial % 2;
        int layers = 5 + (int)(pd_rng_next(&rng) % 4), workers = 1 + trial / 2 % 4;
        double bw = pow(10, uniform(&rng, 6.5, 9.5)), lat = pd_rng_next(&rng) % 2 ? uniform(&rng, 0, 1e-3) : 0;
        pd_plan_cluster c = one_level(workers, bw, lat);
        pd_profile *p = random_profile(&rng, layers, dag);
        check_profile(p, &c, &rng, &t);
        pd_profile_destroy(p);
    }
    fprintf(stderr, "# flat: %d plans enumerated; %d solved equal to the best, %d found none fits\n", t.plans, t.solved,
            t.no_fit);
    assert_true(t.no_fit > 0 && t.solved > 0);
}

static void test_exhaustive_two_levels(void **state)
{
    (void)state;
    pd_rng rng;
    tally t = {0};

    pd_rng_init(&rng, 777);
    for (int trial = 0; trial < 32; trial++) {
        /* 2x2, and 3x2 where stages of different widths in copied
         * pipelines send some minibatches between groups */
        bool dag = trial % 2, wide = trial >= 24;
        int layers = 5 + (int)(pd_rng_next(&rng) % (wide ? 2 : 3));
        int fan[] = {wide ? 3 : 2, 2};
        double bw0 = pow(10, uniform(&rng, 7, 10)), bw[] = {bw0, bw0 / uniform(&rng, 1, 30)};
        double lat[] = {pd_rng_next(&rng) % 2 ? uniform(&rng, 0, 1e-4) : 0, uniform(&rng, 0, 1e-3)};
        pd_plan_cluster c = make_cluster(2, fan, bw, lat);
        pd_profile *p = random_profile(&rng, layers, dag);
        check_profile(p, &c, &rng, &t);
        pd_profile_destroy(p);
    }
    fprintf(stderr,
            "# 2x2 and 3x2: %d plans enumerated; %d solved, %d found none fits; with fewer workers and a memory "
            "limit, %d of %d the best\n",
            t.plans, t.solved, t.no_fit, t.approximate_best, t.approximate);
    assert_true(t.no_fit > 0 && t.solved > 0);
}

/* ---- memory, zero compute, fewer workers ---- */

/* Four layers with heavy weights on a fast link, the last one slow: on 4
 * workers data parallelism takes 120 / 4 = 30 ms plus a little sync, a
 * pipeline at least 99 / 3 = 33 ms for the stage of the last layer. Data
 * parallelism wins until the memory of all the weights on every worker
 * rules it out. */
static const node_spec heavy[] = {
    {.fwd = 1, .act = 1000, .input = true},
    {.fwd = 2, .bwd = 5, .act = 1000, .weight = 1000000000, .n_in = 1, .in = {0}},
    {.fwd = 2, .bwd = 5, .act = 1000, .weight = 1000000000, .n_in = 1, .in = {1}},
    {.fwd = 2, .bwd = 5, .act = 1000, .weight = 1000000000, .n_in = 1, .in = {2}},
    {.fwd = 33, .bwd = 66, .act = 1000, .weight = 1000000000, .n_in = 1, .in = {3}},
};

static void test_memory_forces_pipeline(void **state)
{
    (void)state;
    pd_profile *p = build_profile(heavy, 5);
    pd_plan_cluster c = one_level(4, 1e12, 0);
    pd_plan_options o = {.optimizer_state_factor = 1, .explain = true};
    pd_plan *plan = NULL;

    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->n_stages, 1);
    assert_int_equal(plan->stages[0].replicas, 4);
    /* 4 GB of weights x 2 versions + 4 GB of optimizer state: 12 GB. */
    assert_true(plan->stages[0].memory_bytes > 12e9);
    assert_non_null(plan->explanation);
    print_comment(plan->explanation);
    pd_plan_destroy(plan);

    o.memory_bytes = 8e9;
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_true(plan->n_stages > 1);
    for (int k = 0; k < plan->n_stages; k++)
        assert_true(plan->stages[k].memory_bytes <= 8e9);
    print_comment(plan->explanation);
    assert_non_null(strstr(plan->explanation, "data parallelism"));
    assert_non_null(strstr(plan->explanation, "does not fit"));
    pd_plan_destroy(plan);

    /* One layer's weights alone (1 GB x 2 versions + 1 GB) exceed 2.5 GB. */
    o.memory_bytes = 2.5e9;
    plan = NULL;
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_ENOTFOUND);
    assert_null(plan);
    fprintf(stderr, "# %s\n", pd_last_error());
    const char *needs = strstr(pd_last_error(), "no plan fits in 2.5 GB of device memory per worker: the smallest "
                                                "needs ");
    assert_non_null(needs);
    assert_true(atof(strstr(needs, "needs ") + 6) >= 3);
    pd_profile_destroy(p);
}

/* Two layers that compute between zero-compute ones, on 4 workers that
 * must all be used: no stage is made of the zero-compute layers alone. */
static void test_zero_compute_never_a_stage(void **state)
{
    (void)state;
    static const node_spec spec[] = {
        {.act = 10, .input = true},
        {.act = 1000000, .n_in = 1, .in = {0}},
        {.fwd = 5, .bwd = 5, .act = 10, .weight = 100, .n_in = 1, .in = {1}},
        {.act = 10, .n_in = 1, .in = {2}},
        {.act = 10, .n_in = 1, .in = {3}},
        {.fwd = 5, .bwd = 5, .act = 10, .weight = 100, .n_in = 1, .in = {4}},
        {.act = 10, .n_in = 1, .in = {5}},
    };
    pd_profile *p = build_profile(spec, 7);
    pd_plan_cluster c = one_level(4, 1e10, 0);
    pd_plan_options o = {0};
    pd_plan *plan = NULL;

    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->workers_used, 4);
    for (int k = 0; k < plan->n_stages; k++)
        assert_true(plan->stages[k].compute_ms > 0);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}

/* Over a link of 1 KB/s any split or replica costs seconds: one worker
 * alone is faster, and taken when allowed. */
static void test_fewer_workers_over_slow_link(void **state)
{
    (void)state;
    pd_profile *p = build_profile(chain3, 4);
    pd_plan_cluster c = one_level(4, 1e3, 0);
    pd_plan_options o = {.allow_fewer_workers = true, .explain = true};
    pd_plan *plan = NULL;

    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->workers_used, 1);
    assert_int_equal(plan->n_stages, 1);
    assert_close(plan->time_ms, 15, 1e-12);
    assert_close(plan->time_ms, plan->single_worker_ms, 1e-12);
    print_comment(plan->explanation);
    pd_plan_destroy(plan);

    o.allow_fewer_workers = false;
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->workers_used, 4);
    assert_true(plan->time_ms > 100);
    pd_plan_destroy(plan);

    /* On a fast link every worker helps, and all are used. */
    c.levels[0].bandwidth_bytes_per_s = 1e12;
    o.allow_fewer_workers = true;
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->workers_used, 4);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}

/* ---- three levels ---- */

/* Three levels whose outermost or innermost fanout is 1 are two levels in
 * disguise: the tables by level (used from three levels on) must find
 * plans as fast as the two-level program's (ties may be broken apart). */
static void test_three_levels_as_two(void **state)
{
    (void)state;
    pd_rng rng;

    pd_rng_init(&rng, 4242);
    for (int trial = 0; trial < 16; trial++) {
        pd_profile *p = random_profile(&rng, 5 + (int)(pd_rng_next(&rng) % 4), trial % 2);
        double ba = pow(10, uniform(&rng, 7, 10)), bb = ba / uniform(&rng, 1, 30);
        int fan2[] = {2, 2}, top1[] = {2, 2, 1}, inner1[] = {1, 2, 2};
        double bw2[] = {ba, bb}, lat2[] = {1e-5, 1e-4};
        double bwt[] = {ba, bb, 1e6}, latt[] = {1e-5, 1e-4, 1e-2};
        double bwi[] = {1e6, ba, bb}, lati[] = {1e-2, 1e-5, 1e-4};
        pd_plan_cluster two = make_cluster(2, fan2, bw2, lat2);
        pd_plan_cluster three[] = {make_cluster(3, top1, bwt, latt), make_cluster(3, inner1, bwi, lati)};
        for (int variant = 0; variant < 4; variant++) {
            pd_plan_options o = {.optimizer_state_factor = 1, .allow_fewer_workers = variant & 1};
            pd_plan *want = NULL;
            pd_status st;
            if (variant & 2) {
                /* a limit that binds: below the data-parallel plan's memory */
                assert_int_equal(pd_plan_solve(p, &two, &o, &want), PD_OK);
                o.memory_bytes = 0;
                for (int k = 0; k < want->n_stages; k++)
                    o.memory_bytes = fmax(o.memory_bytes, want->stages[k].memory_bytes);
                o.memory_bytes *= uniform(&rng, 0.5, 1);
                pd_plan_destroy(want);
                want = NULL;
            }
            st = pd_plan_solve(p, &two, &o, &want);
            for (int k = 0; k < 2; k++) {
                pd_plan *got = NULL;
                assert_int_equal(pd_plan_solve(p, &three[k], &o, &got), st);
                if (st != PD_OK)
                    continue;
                assert_close(got->time_ms, want->time_ms, 1e-9);
                pd_plan_destroy(got);
            }
            pd_plan_destroy(want);
        }
        pd_profile_destroy(p);
    }
}

/* ---- PipeDream's profiles ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* VGG16 and ResNet-50 on 8 servers of 4 workers, with a memory limit:
 * a valid plan that beats data parallelism, within a few seconds even on
 * a loaded machine (well under one on an idle one). */
static void test_pipedream_profiles(void **state)
{
    (void)state;
    static const struct {
        const char *model, *file;
    } models[] = {{"vgg16", "vgg16/graph.txt"}, {"resnet50", "resnet50/graph.txt"}};
    pd_plan_cluster c;
    assert_int_equal(pd_plan_cluster_parse_levels("4x12GB/s,8x1.25GB/s", &c), PD_OK);

    for (int i = 0; i < 2; i++) {
        pd_profile *p = test_pipedream_profile(models[i].file, models[i].model, 0);
        for (int limit = 0; limit < 2; limit++) {
            pd_plan_options o = {.optimizer_state_factor = 1,
                                 .allow_fewer_workers = true,
                                 .explain = true,
                                 .memory_bytes = limit ? 16e9 : 0};
            pd_plan *plan = NULL;
            double t0 = now_s(), dt;
            assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
            dt = now_s() - t0;
            fprintf(stderr,
                    "# %s on 4x8%s: %d stages, %.4g ms (data parallel %.4g, one worker %.4g), solved in "
                    "%.3f s\n",
                    models[i].model, limit ? ", 16 GB" : "", plan->n_stages, plan->time_ms, plan->data_parallel_ms,
                    plan->single_worker_ms, dt);
            if (!limit)
                assert_true(plan->time_ms <= plan->data_parallel_ms * (1 + 1e-12));
            assert_true(plan->time_ms < plan->single_worker_ms);
            for (int k = 0; k < plan->n_stages; k++)
                assert_true(!limit || plan->stages[k].memory_bytes <= 16e9);
            assert_true(dt < 10);
            /* The dynamic program's own value is the plan's evaluation. */
            pd_plan_graph *g = NULL;
            pd_plan_states *states = NULL;
            double dp_ms;
            assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_OK);
            assert_int_equal(pd_plan_states_build(g, &states), PD_OK);
            assert_int_equal(pd_plan_default_dp_ms(p, g, states, &c, &o, false, &dp_ms), PD_OK);
            assert_close(dp_ms, plan->time_ms, 1e-9);
            if (i == 0)
                print_comment(plan->explanation);
            pd_plan_states_destroy(states);
            pd_plan_graph_destroy(g);
            pd_plan_destroy(plan);
        }
        pd_profile_destroy(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed_chain),        cmocka_unit_test(test_exhaustive_flat),
        cmocka_unit_test(test_exhaustive_two_levels),      cmocka_unit_test(test_memory_forces_pipeline),
        cmocka_unit_test(test_zero_compute_never_a_stage), cmocka_unit_test(test_fewer_workers_over_slow_link),
        cmocka_unit_test(test_three_levels_as_two),        cmocka_unit_test(test_pipedream_profiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
