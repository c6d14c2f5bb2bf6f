/* The default cost model: every predicted field of a small chain against
 * hand-computed values; the dynamic program against exhaustive search over
 * every plan of random chains and DAGs on flat clusters of 1 to 4 workers
 * and on two-level 2x2 and 3x2 clusters, with and without a memory limit
 * (memory with the 1F1B schedule's in-flight counts) and fewer workers;
 * three levels under memory limits; memory limits that force a pipeline
 * or rule out every plan; zero-compute layers; fewer workers over a slow
 * link; and solve times on PipeDream's published profiles. The random
 * profiles and the search live in test_plan_search.h. */
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
#include "test_plan_search.h"
#include "test_plans.h"

/* ---- helpers ---- */

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


/* Replicas 1-2-1 on 4 workers: the schedule warms up with 5, 2 and 1
 * minibatches (stage 0 covers the 2 x 2 the next stage holds, plus one);
 * NOAM would say 4 for stage 0. Stage 0's memory: weights 2000 x 6
 * versions, activations (1000 + input 400) x 5, optimizer 2000. */
static void test_in_flight_from_schedule(void **state)
{
    (void)state;
    pd_profile *p = build_profile(chain3, 4);
    pd_plan_cluster c = one_level(4, 1e6, 1e-4);
    pd_plan_options o = {.optimizer_state_factor = 1};
    int s0[] = {0, 1}, s1[] = {2}, s2[] = {3}, r0[] = {0}, r1[] = {1, 2}, r2[] = {3};
    const int *layers[] = {s0, s1, s2}, *ranks[] = {r0, r1, r2}, n_layers[] = {2, 1, 1}, replicas[] = {1, 2, 1};
    pd_plan *plan = evaluate(p, &c, &o, 3, layers, n_layers, ranks, replicas);

    assert_int_equal(plan->stages[0].in_flight, 5);
    assert_int_equal(plan->stages[1].in_flight, 2);
    assert_int_equal(plan->stages[2].in_flight, 1);
    assert_int_equal(plan->stages[0].weight_versions, 6);
    assert_close(plan->stages[0].memory_bytes, 2000 * 6 + 1400 * 5 + 2000, 1e-12);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Counts how the dynamic program fared, for the summary line: `noam_short`
 * counts the limits under which the plan NOAM's in-flight counts choose
 * does not fit with the schedule's. */
typedef struct tally {
    int solved, no_fit, plans, noam_short;
} tally;

/* The dynamic program against the search for one memory limit (the
 * search's memory: the schedule's in-flight counts). */
static void check_limit(search *se, double limit, tally *t)
{
    pd_plan_options o = *se->opts;
    pd_plan *plan = NULL;
    double want, dp_ms, noam_ms, by_level_ms;
    pd_status st;

    o.memory_bytes = limit;
    want = best_within(se, limit);
    assert_int_equal(pd_plan_default_dp_ms(se->profile, se->g, se->s, se->cluster, &o, PD_PLAN_DP_SOLVER, &dp_ms),
                     PD_OK);
    /* With NOAM's counts, the one-pass program and the tables by level
     * agree; they never exceed the schedule's, so never find slower. */
    assert_int_equal(pd_plan_default_dp_ms(se->profile, se->g, se->s, se->cluster, &o, PD_PLAN_DP_NOAM, &noam_ms),
                     PD_OK);
    assert_int_equal(
        pd_plan_default_dp_ms(se->profile, se->g, se->s, se->cluster, &o, PD_PLAN_DP_NOAM_BY_LEVEL, &by_level_ms),
        PD_OK);
    if (noam_ms == HUGE_VAL)
        assert_true(by_level_ms == HUGE_VAL);
    else
        assert_close(by_level_ms, noam_ms, 1e-9);
    if (!se->fewer || se->cluster->n_levels == 1)
        assert_true(noam_ms <= dp_ms * (1 + 1e-9));
    t->noam_short += dp_ms > noam_ms * (1 + 1e-9);
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
    assert_close(plan->time_ms, want, 1e-9);
    assert_close(dp_ms, plan->time_ms, 1e-9);
    for (int k = 0; k < plan->n_stages; k++) {
        assert_true(plan->stages[k].compute_ms > 0);
        if (limit > 0)
            assert_true(plan->stages[k].memory_bytes <= limit);
    }
    if (!se->fewer)
        assert_int_equal(plan->workers_used, plan->workers);
    /* The plan read back through the evaluator gives the same time. */
    assert_int_equal(pd_plan_evaluate(se->profile, &o, plan), PD_OK);
    assert_close(plan->time_ms, want, 1e-9);
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
        o.allow_fewer_workers = fewer;
        se.fewer = fewer;
        search_all(&se);
        t->plans += se.n;
        check_limit(&se, 0, t);
        sorted = malloc(sizeof(double) * (size_t)se.n);
        memcpy(sorted, se.memory, sizeof(double) * (size_t)se.n);
        qsort(sorted, (size_t)se.n, sizeof(double), cmp_double);
        check_limit(&se, sorted[pd_rng_next(rng) % (uint64_t)se.n], t);
        check_limit(&se, sorted[se.n / 4], t);
        check_limit(&se, sorted[0] * 0.999, t);
        free(sorted);
    }
    check_collapsed(p, c, &o, best_within(&se, 0));
    free(se.time);
    free(se.memory);
    pd_plan_states_destroy(se.s);
    pd_plan_graph_destroy(se.g);
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
    fprintf(stderr,
            "# flat: %d plans enumerated; %d solved equal to the best, %d found none fits; %d where NOAM's counts "
            "choose a plan that does not fit\n",
            t.plans, t.solved, t.no_fit, t.noam_short);
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
            "# 2x2 and 3x2: %d plans enumerated; %d solved equal to the best, %d found none fits; %d where NOAM's "
            "counts choose a plan that does not fit\n",
            t.plans, t.solved, t.no_fit, t.noam_short);
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

/* Three levels go by level with NOAM's in-flight counts; under a memory
 * limit the plan is held to the schedule's counts all the same: it fits,
 * or the solve says none does; where NOAM's plan did not fit, the plan
 * found with more in flight says that it may not be the fastest. */
static void test_three_levels_memory(void **state)
{
    (void)state;
    pd_rng rng;
    int solved = 0, no_fit = 0, refit = 0;

    pd_rng_init(&rng, 2718);
    for (int trial = 0; trial < 24; trial++) {
        pd_profile *p = random_profile(&rng, 5 + (int)(pd_rng_next(&rng) % 4), trial % 2);
        int fans[][3] = {{2, 2, 2}, {3, 2, 2}, {3, 3, 2}}, *fan = fans[trial % 3];
        double ba = pow(10, uniform(&rng, 7, 10)), bw[] = {ba, ba / 4, ba / 40}, lat[] = {1e-5, 1e-4, 1e-3};
        pd_plan_cluster c = make_cluster(3, fan, bw, lat);
        pd_plan_options o = {.optimizer_state_factor = 1, .allow_fewer_workers = trial % 3 == 0};
        pd_plan *plan = NULL;
        double most = 0;

        /* limits between a fifth and all of the unlimited plan's */
        assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
        for (int k = 0; k < plan->n_stages; k++)
            most = fmax(most, plan->stages[k].memory_bytes);
        pd_plan_destroy(plan);
        for (int step = 0; step < 9; step++) {
            pd_status st;
            plan = NULL;
            o.memory_bytes = most * (0.2 + 0.1 * step);
            st = pd_plan_solve(p, &c, &o, &plan);
            if (st == PD_ENOTFOUND) {
                assert_non_null(strstr(pd_last_error(), "no plan fits in"));
                no_fit++;
                continue;
            }
            assert_int_equal(st, PD_OK);
            for (int k = 0; k < plan->n_stages; k++)
                assert_true(plan->stages[k].memory_bytes <= o.memory_bytes);
            if (plan->explanation) {
                assert_non_null(strstr(plan->explanation, "may not be the fastest"));
                refit++;
            }
            solved++;
            pd_plan_destroy(plan);
        }
        pd_profile_destroy(p);
    }
    fprintf(stderr,
            "# 2x2x2, 3x2x2, 3x3x2 under memory limits: %d plans fit (%d found with more in flight), %d found none "
            "fits\n",
            solved, refit, no_fit);
    assert_true(solved > 0 && no_fit > 0 && refit > 0);
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
            assert_int_equal(pd_plan_default_dp_ms(p, g, states, &c, &o, PD_PLAN_DP_SOLVER, &dp_ms), PD_OK);
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
        cmocka_unit_test(test_hand_computed_chain),        cmocka_unit_test(test_in_flight_from_schedule),
        cmocka_unit_test(test_exhaustive_flat),
        cmocka_unit_test(test_exhaustive_two_levels),      cmocka_unit_test(test_memory_forces_pipeline),
        cmocka_unit_test(test_zero_compute_never_a_stage), cmocka_unit_test(test_fewer_workers_over_slow_link),
        cmocka_unit_test(test_three_levels_as_two),        cmocka_unit_test(test_three_levels_memory),
        cmocka_unit_test(test_pipedream_profiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
