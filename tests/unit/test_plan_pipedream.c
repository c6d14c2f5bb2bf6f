/* The original PipeDream optimizer's model (pd_plan_solve_pipedream): the
 * worked example of its README on VGG16 to the digit, plans for every
 * shared profile on one- and two-level clusters (every layer in exactly
 * one stage, ranks laid out by the hierarchy, the slowest stage's time
 * the plan's), the flags, and the dynamic program against a brute force
 * over every partition and replication of small random chains. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "plan/plan_int.h"
#include "test_plans.h"

/* ---- helpers ---- */

static pd_plan_cluster cluster_of(int n, const int *fanout, const double *bandwidth)
{
    pd_plan_cluster c = {.n_levels = n};
    for (int l = 0; l < n; l++) {
        snprintf(c.levels[l].name, sizeof(c.levels[l].name), "level%d", l);
        c.levels[l].fanout = fanout[l];
        c.levels[l].bandwidth_bytes_per_s = bandwidth[l];
    }
    return c;
}

static int workers_of(const pd_plan_cluster *c)
{
    int n = 1;
    for (int l = 0; l < c->n_levels; l++)
        n *= c->levels[l].fanout;
    return n;
}

/* Solves with the pipedream model; the status is returned, the plan (on
 * success) in *out. */
static pd_status solve(const pd_profile *p, bool collapse, const pd_plan_cluster *c, const pd_plan_options *o,
                       pd_plan **out)
{
    pd_plan_graph *g = NULL, *cg = NULL;
    pd_plan_states *s = NULL;
    pd_plan *plan = calloc(1, sizeof(*plan));

    assert_non_null(plan);
    assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_OK);
    if (collapse) {
        assert_int_equal(pd_plan_graph_collapse_branches(g, &cg), PD_OK);
        pd_plan_graph_destroy(g);
        g = cg;
    }
    if (pd_plan_states_build(g, &s) != PD_OK)
        fail_msg("states: %s", pd_last_error());
    pd_status st = pd_plan_solve_pipedream(p, g, s, c, o, plan);
    pd_plan_states_destroy(s);
    pd_plan_graph_destroy(g);
    if (st != PD_OK) {
        pd_plan_destroy(plan);
        plan = NULL;
    }
    *out = plan;
    return st;
}

static void assert_close(double got, double want, double rel)
{
    if (!(fabs(got - want) <= rel * fabs(want)))
        fail_msg("%.17g is not %.17g (relative tolerance %g)", got, want, rel);
}

/* Every profile layer in exactly one stage, layers increasing, no edge
 * from a later stage back to an earlier one. */
static void assert_covers(const pd_profile *p, const pd_plan *plan)
{
    int n = pd_profile_size(p);
    int *stage = malloc(sizeof(int) * (size_t)n);

    assert_non_null(stage);
    for (int v = 0; v < n; v++)
        stage[v] = -1;
    for (int q = 0; q < plan->n_stages; q++) {
        const pd_plan_stage *st = &plan->stages[q];
        assert_true(st->n_layers >= 1);
        for (int e = 0; e < st->n_layers; e++) {
            int v = st->layers[e];
            assert_true(v >= 0 && v < n);
            assert_true(e == 0 || st->layers[e - 1] < v);
            if (stage[v] >= 0)
                fail_msg("layer %s is in stages %d and %d", pd_profile_node_at(p, v)->name, stage[v], q);
            stage[v] = q;
        }
    }
    for (int v = 0; v < n; v++) {
        const pd_profile_node *node = pd_profile_node_at(p, v);
        if (stage[v] < 0)
            fail_msg("layer %s is in no stage", node->name);
        for (int e = 0; e < node->n_inputs; e++)
            assert_true(stage[node->inputs[e]] <= stage[v]);
    }
    free(stage);
}

/* Ranks distinct workers of the cluster; on a hierarchy, a stage's ranks
 * are whole consecutive groups of each level times consecutive workers
 * inside them: the rank digits (one per level, innermost first) of a
 * stage's ranks form a product of ranges. */
static void assert_ranks(const pd_plan *plan, const pd_plan_cluster *c)
{
    int workers = workers_of(c), used = 0;
    char *seen = calloc((size_t)workers, 1);

    assert_non_null(seen);
    for (int q = 0; q < plan->n_stages; q++) {
        const pd_plan_stage *st = &plan->stages[q];
        int lo[PD_PLAN_MAX_LEVELS], hi[PD_PLAN_MAX_LEVELS], product = 1;
        assert_true(st->replicas >= 1);
        used += st->replicas;
        for (int l = 0; l < c->n_levels; l++) {
            lo[l] = INT_MAX;
            hi[l] = -1;
        }
        for (int e = 0; e < st->replicas; e++) {
            int r = st->ranks[e];
            assert_true(r >= 0 && r < workers && !seen[r]);
            assert_true(e == 0 || st->ranks[e - 1] < r);
            seen[r] = 1;
            for (int l = 0; l < c->n_levels; l++) {
                int digit = r % c->levels[l].fanout;
                r /= c->levels[l].fanout;
                lo[l] = digit < lo[l] ? digit : lo[l];
                hi[l] = digit > hi[l] ? digit : hi[l];
            }
        }
        for (int l = 0; l < c->n_levels; l++)
            product *= hi[l] - lo[l] + 1;
        assert_int_equal(product, st->replicas);
    }
    assert_int_equal(used, plan->workers_used);
    assert_true(used <= workers);
    free(seen);
}

/* The plan's numbers hang together: the slowest stage is the plan's time,
 * each stage's time at least its compute term, single-worker time the
 * profile's compute. */
static void assert_times(const pd_profile *p, const pd_plan *plan)
{
    double slowest = 0;
    for (int q = 0; q < plan->n_stages; q++) {
        const pd_plan_stage *st = &plan->stages[q];
        slowest = st->time_ms > slowest ? st->time_ms : slowest;
        assert_true(st->time_ms * (1 + 1e-12) >= (st->compute_ms + st->sync_ms) / st->replicas);
        assert_true(st->compute_ms >= 0 && st->sync_ms >= 0 && st->recv_ms >= 0 && st->send_ms >= 0);
        assert_true(st->in_flight >= 1);
    }
    assert_close(slowest, plan->time_ms, 1e-9);
    assert_close(plan->stages[plan->bottleneck_stage].time_ms, plan->time_ms, 1e-9);
    assert_close(plan->single_worker_ms, pd_profile_compute_ms(p), 1e-9);
    assert_true(plan->time_ms > 0 && plan->data_parallel_ms > 0);
}

/* ---- the worked example ---- */

/* VGG16 on 4 workers at 1e9 B/s, --activation_compression_ratio 1: cut
 * after state 16 (the max-pool after conv3_3), stages [0,17) x 3 and
 * [17,40) x 1, 0.205520896 s per minibatch, 0.672535 s on one worker
 * (3.27 times faster), data parallelism 1.153 times faster than one. */
static void test_vgg16_worked_example(void **state)
{
    (void)state;
    pd_profile *p = test_pipedream_profile("vgg16/graph.txt", "m", 0);
    pd_plan_cluster c = cluster_of(1, (const int[]){4}, (const double[]){1e9});
    pd_plan_options o = {.cost_model = PD_PLAN_COST_PIPEDREAM, .activation_compression_ratio = 1};
    pd_plan *plan;

    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->n_stages, 2);
    assert_int_equal(plan->stages[0].replicas, 3);
    assert_int_equal(plan->stages[1].replicas, 1);
    assert_int_equal(plan->stages[0].n_layers, 1 + 17); /* the input joins stage 0 */
    assert_int_equal(plan->stages[1].n_layers, 23);
    const pd_plan_stage *s0 = &plan->stages[0], *s1 = &plan->stages[1];
    assert_string_equal(pd_profile_node_at(p, s0->layers[0])->type, PD_PROFILE_INPUT_TYPE);
    assert_non_null(strstr(pd_profile_node_at(p, s0->layers[17])->description, "MaxPool2d"));
    assert_non_null(strstr(pd_profile_node_at(p, s1->layers[0])->description, "Conv2d(256, 512"));
    assert_int_equal(s0->ranks[0], 0);
    assert_int_equal(s0->ranks[2], 2);
    assert_int_equal(s1->ranks[0], 3);
    assert_close(plan->time_ms, 205.520896, 1e-9);
    assert_close(plan->single_worker_ms, 672.535, 1e-9);
    assert_int_equal((int)lround(100 * plan->single_worker_ms / plan->time_ms), 327);
    assert_int_equal((int)lround(1000 * plan->single_worker_ms / plan->data_parallel_ms), 1153);
    /* The last stage waits for its input: twice the max-pool's output
     * (102760448 bytes) at 1e9 B/s, on one replica, compression ratio 1. */
    assert_int_equal(plan->bottleneck_stage, 1);
    assert_int_equal(s1->bottleneck, PD_PLAN_TERM_RECV);
    assert_close(s1->recv_ms, 205.520896, 1e-12);
    assert_int_equal(s0->in_flight, 2); /* ceil(4 / 3) */
    assert_int_equal(s1->in_flight, 1);
    assert_int_equal(plan->workers, 4);
    assert_int_equal(plan->workers_used, 4);
    assert_covers(p, plan);
    assert_ranks(plan, &c);
    assert_times(p, plan);
    pd_plan_destroy(plan);

    /* Without the ratio the transfers do not count: a faster plan. */
    o.activation_compression_ratio = 0;
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    assert_true(plan->time_ms < 205.520896);
    for (int q = 0; q < plan->n_stages; q++)
        assert_true(plan->stages[q].recv_ms == 0 && plan->stages[q].send_ms == 0);
    assert_times(p, plan);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}

/* ---- every profile ---- */

static void test_all_profiles(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        bool collapse;
    } profiles[] = {
        {"vgg16/graph.txt", false},        {"alexnet/graph.txt", false},          {"resnet18/graph.txt", false},
        {"squeezenet1_0/graph.txt", false}, {"gnmt/graph.txt", false},            {"gnmt_large/graph.txt", false},
        {"resnet50/graph.txt", false},     {"resnext50/graph.txt", false},        {"resnet101/graph.txt", false},
        {"resnext101/graph.txt", false},   {"densenet121/graph.txt", false},
        {"inception_v3/graph_compressed.txt", false},
        {"inception_v3/graph.txt", true},
    };
    static const struct {
        int n;
        int fanout[2];
        double bandwidth[2];
        double ratio;
    } clusters[] = {
        {1, {4}, {1e9}, 0},
        {1, {16}, {1e9}, 1},
        {2, {4, 4}, {12e9, 1.25e9}, 0},
        {2, {4, 8}, {12e9, 1.25e9}, 1},
    };

    for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
        pd_profile *p = test_pipedream_profile(profiles[i].file, "m", 0);
        for (size_t k = 0; k < sizeof(clusters) / sizeof(clusters[0]); k++) {
            pd_plan_cluster c = cluster_of(clusters[k].n, clusters[k].fanout, clusters[k].bandwidth);
            pd_plan_options o = {.cost_model = PD_PLAN_COST_PIPEDREAM,
                                 .activation_compression_ratio = clusters[k].ratio};
            pd_plan *plan;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            if (solve(p, profiles[i].collapse, &c, &o, &plan) != PD_OK)
                fail_msg("%s on %zu: %s", profiles[i].file, k, pd_last_error());
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            print_message("# %-34s %s%-5s %2d stages, %6.2f ms (1 worker %7.2f), %.2f s\n", profiles[i].file,
                          profiles[i].collapse ? "collapsed " : "",
                          k == 0 ? "4" : k == 1 ? "16" : k == 2 ? "4x4" : "8x4", plan->n_stages, plan->time_ms,
                          plan->single_worker_ms, s);
            assert_covers(p, plan);
            assert_ranks(plan, &c);
            assert_times(p, plan);
            assert_true(plan->time_ms <= plan->single_worker_ms);
            assert_int_equal(plan->workers, workers_of(&c));
            pd_plan_destroy(plan);
        }
        pd_profile_destroy(p);
    }
}

/* ---- flags ---- */

static void test_flags(void **state)
{
    (void)state;
    pd_profile *p = test_pipedream_profile("resnet50/graph.txt", "m", 0);
    pd_plan_cluster c = cluster_of(1, (const int[]){8}, (const double[]){1e9});
    pd_plan_options o = {.cost_model = PD_PLAN_COST_PIPEDREAM, .straight_pipeline = true};
    pd_plan *plan, *free_plan;

    /* A straight pipeline: one worker per stage, as many stages as workers. */
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->n_stages, 8);
    for (int q = 0; q < 8; q++)
        assert_int_equal(plan->stages[q].replicas, 1);
    assert_covers(p, plan);
    assert_times(p, plan);
    o.straight_pipeline = false;
    assert_int_equal(solve(p, false, &c, &o, &free_plan), PD_OK);
    assert_true(free_plan->time_ms <= plan->time_ms);
    pd_plan_destroy(plan);

    /* Fewer machines can only help, and may leave some idle. */
    c = cluster_of(1, (const int[]){8}, (const double[]){1e8});
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    o.use_fewer_machines = true;
    pd_plan *fewer;
    assert_int_equal(solve(p, false, &c, &o, &fewer), PD_OK);
    assert_true(fewer->time_ms <= plan->time_ms);
    assert_true(fewer->workers_used <= 8);
    assert_covers(p, fewer);
    assert_ranks(fewer, &c);
    assert_times(p, fewer);
    pd_plan_destroy(fewer);
    pd_plan_destroy(plan);
    pd_plan_destroy(free_plan);
    o.use_fewer_machines = false;

    /* The memory check: every stage's stash within the limit, or no plan. */
    c = cluster_of(1, (const int[]){4}, (const double[]){1e9});
    o.use_memory_constraint = true;
    o.memory_bytes = 6e9;
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    for (int q = 0; q < plan->n_stages; q++)
        assert_true(plan->stages[q].memory_bytes <= 6e9);
    pd_plan_destroy(plan);
    o.memory_bytes = 1e6; /* data parallelism stashes nothing: it fits */
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->n_stages, 1);
    pd_plan_destroy(plan);
    o.straight_pipeline = true;
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "memory"));
    o.use_memory_constraint = false;
    o.straight_pipeline = false;

    /* Bad requests. */
    o.activation_compression_ratio = -1;
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_EINVAL);
    o.activation_compression_ratio = 0;
    c.levels[0].bandwidth_bytes_per_s = 0;
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "bandwidth"));
    c = cluster_of(1, (const int[]){0}, (const double[]){1e9});
    assert_int_equal(solve(p, false, &c, &o, &plan), PD_EINVAL);
    pd_profile_destroy(p);
}

/* ---- brute force on chains ---- */

/* A small random chain: layers 0..n-1 after an optional input node. */
typedef struct chain {
    int n;
    bool input;
    double comp[8], act[8], par[8]; /* seconds, bytes */
} chain;

static uint64_t rng_state = 0x853c49e6748fea9bu;

static double uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static pd_profile *chain_profile(chain *ch)
{
    const pd_profile_info info = {.model = "chain", .dtype = PD_F32, .device = "cpu", .source = "test"};
    pd_profile *p;
    int prev = -1;

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    if (ch->input) {
        pd_profile_node in = {.name = "in", .type = PD_PROFILE_INPUT_TYPE, .description = "Input0",
                              .fwd_ms = 3, .activation_bytes = 1000, .flops = -1};
        assert_int_equal(pd_profile_add_node(p, &in, &prev), PD_OK);
    }
    for (int i = 0; i < ch->n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "l%d", i);
        double fwd = round(uniform(0.1, 20) * 1000) / 1000, bwd = round(uniform(0.1, 40) * 1000) / 1000;
        int64_t act = (int64_t)uniform(1e5, 5e8), par = uniform(0, 1) < 0.3 ? 0 : (int64_t)uniform(1e3, 4e8);
        pd_profile_node node = {.name = name, .type = "op", .description = name, .fwd_ms = fwd, .bwd_ms = bwd,
                                .activation_bytes = act, .weight_bytes = par, .flops = -1,
                                .n_inputs = prev >= 0, .inputs = &prev};
        assert_int_equal(pd_profile_add_node(p, &node, &prev), PD_OK);
        ch->comp[i] = (fwd + bwd) / 1000;
        ch->act[i] = (double)act;
        ch->par[i] = (double)par;
    }
    return p;
}

typedef struct brute {
    const chain *ch;
    int M;
    double B, R, mem;
    bool straight, memc, fewer;
    int n_stages, end[8], r[8]; /* the configuration being built */
    double best;
} brute;

/* The original's time of the configuration in b (spec formulas), or
 * infinity when its memory check refuses a stage. */
static double brute_time(const brute *b)
{
    double worst = 0;
    int start = 0, cum = 0;
    for (int q = 0; q < b->n_stages; q++) {
        double C = 0, A = 0, P = 0;
        for (int i = start; i <= b->end[q]; i++) {
            C += b->ch->comp[i];
            A += b->ch->act[i];
            P += b->ch->par[i];
        }
        int r = b->r[q];
        cum += r;
        double stash = (A + P) * ((b->M - cum + r - 1) / r);
        if (b->memc && stash > b->mem)
            return INFINITY;
        double t = (C + 4.0 * (r - 1) * P / (b->B * r)) / r;
        if (q > 0 && b->R > 0) {
            t = fmax(t, 2.0 * b->ch->act[start - 1] / (b->B * r) / b->R);
            if (b->end[q] < b->ch->n - 1)
                t = fmax(t, 2.0 * b->ch->act[b->end[q]] / (b->B * r) / b->R);
        }
        worst = fmax(worst, t);
        start = b->end[q] + 1;
    }
    return worst;
}

/* Every split of layers from..n-1 into stages and of the workers left. */
static void brute_walk(brute *b, int from, int workers_left)
{
    if (from == b->ch->n) {
        if (workers_left == 0 || b->fewer)
            b->best = fmin(b->best, brute_time(b));
        return;
    }
    for (int end = from; end < b->ch->n; end++)
        for (int r = 1; r <= (b->straight ? 1 : workers_left); r++) {
            if (r > workers_left)
                break;
            b->end[b->n_stages] = end;
            b->r[b->n_stages++] = r;
            brute_walk(b, end + 1, workers_left - r);
            b->n_stages--;
        }
}

/* The layer ranges and replicas of a plan of a chain, as a configuration. */
static void brute_of_plan(brute *b, const pd_plan *plan)
{
    b->n_stages = plan->n_stages;
    for (int q = 0; q < plan->n_stages; q++) {
        const pd_plan_stage *st = &plan->stages[q];
        b->end[q] = st->layers[st->n_layers - 1] - (b->ch->input ? 1 : 0);
        b->r[q] = st->replicas;
    }
}

static void test_brute_force_chains(void **state)
{
    (void)state;
    int compared = 0, infeasible = 0;

    for (int trial = 0; trial < 400; trial++) {
        chain ch = {.n = 1 + (int)uniform(0, 7), .input = uniform(0, 1) < 0.5};
        pd_profile *p = chain_profile(&ch);
        brute b = {.ch = &ch, .M = 1 + (int)uniform(0, 5), .B = uniform(0, 1) < 0.5 ? 1e9 : 1.25e10};
        double pick = uniform(0, 1);
        b.R = uniform(0, 1) < 0.5 ? 0 : uniform(0, 1) < 0.5 ? 1 : 3.5;
        b.straight = pick < 0.2;
        b.memc = pick >= 0.2 && pick < 0.5; /* the memory check goes alone: see below */
        b.fewer = pick >= 0.5 && pick < 0.7;
        b.mem = uniform(5e8, 4e9);
        if (b.straight && uniform(0, 1) < 0.5)
            b.fewer = true;
        b.best = INFINITY;
        /* The original visits entries of one state only to start them, so
         * fewer machines never apply to a one-layer model. */
        bool fewer = b.fewer;
        b.fewer = fewer && ch.n > 1;
        brute_walk(&b, 0, b.M);
        b.fewer = fewer;

        pd_plan_cluster c = cluster_of(1, &b.M, &b.B);
        pd_plan_options o = {.cost_model = PD_PLAN_COST_PIPEDREAM, .straight_pipeline = b.straight,
                             .use_memory_constraint = b.memc, .use_fewer_machines = b.fewer,
                             .memory_bytes = b.mem, .activation_compression_ratio = b.R};
        pd_plan *plan;
        pd_status st = solve(p, false, &c, &o, &plan);
        if (b.best == INFINITY) {
            /* With fewer machines and the memory check together, the
             * original checks a stage against the workers it was
             * offered, not those used; they are not mixed here. */
            assert_int_equal(st, PD_ENOTFOUND);
            infeasible++;
        } else {
            if (st != PD_OK)
                fail_msg("trial %d: %s", trial, pd_last_error());
            assert_close(plan->time_ms, 1e3 * b.best, 1e-9);
            brute b2 = b;
            brute_of_plan(&b2, plan);
            assert_close(1e3 * brute_time(&b2), plan->time_ms, 1e-9);
            assert_covers(p, plan);
            assert_ranks(plan, &c);
            assert_times(p, plan);
            if (!b.fewer)
                assert_int_equal(plan->workers_used, b.M);
            pd_plan_destroy(plan);
            compared++;
        }
        pd_profile_destroy(p);
    }
    print_message("# %d chains matched the brute force, %d had no plan either way\n", compared, infeasible);
    assert_true(compared > 300 && infeasible > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vgg16_worked_example),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_brute_force_chains),
        cmocka_unit_test(test_all_profiles),
    };
    return cmocka_run_group_tests_name("plan_pipedream", tests, NULL, NULL);
}
