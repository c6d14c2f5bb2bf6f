/* Coarsening the planning graph (src/plan/plan_coarsen.c): the quotient is
 * acyclic, holds every layer once, keeps times, weights and the bytes that
 * cross each cut, and forms a chain within the budget; on random DAGs small
 * enough to enumerate, the default model's dynamic program on the coarsened
 * graph finds the best plan over its cuts, which is a valid plan of the
 * profile and evaluates (as `pipedream plan --override` does) to the time
 * and memory the solver reported; a graph under the state limit is never
 * coarsened; NASNet plans on 4 workers under both cost models, and its plan
 * file says it was coarsened. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "core/pd_rng.h"
#include "plan/plan_int.h"
#include "test_plan_search.h"
#include "test_plans.h"

/* ---- the quotient's invariants ---- */

/* node_of[p]: the node of g holding profile node p, -1 for none. */
static int *node_of_profile(const pd_plan_graph *g, int profile_size)
{
    int *node_of = malloc(sizeof(int) * (size_t)profile_size);
    assert_non_null(node_of);
    for (int p = 0; p < profile_size; p++)
        node_of[p] = -1;
    for (int v = 0; v < g->n; v++)
        for (int m = 0; m < g->n_members[v]; m++) {
            int p = g->members[v][m];
            assert_true(p >= 0 && p < profile_size);
            assert_int_equal(node_of[p], -1); /* every layer once */
            node_of[p] = v;
            assert_true(m == 0 || g->members[v][m - 1] < p);
        }
    return node_of;
}

/* The bytes crossing the cut after coarse state j, counted on the fine
 * graph: outputs of fine nodes inside the prefix read by one outside. */
static double fine_cut_bytes(const pd_plan_graph *fine, const int *coarse_of_fine, const pd_plan_states *s, int j)
{
    double bytes = 0;
    for (int u = 0; u < fine->n; u++) {
        int cu = coarse_of_fine[u];
        if (!(s->prefix[j][cu / 64] >> (cu % 64) & 1))
            continue;
        for (int e = 0; e < fine->n_out[u]; e++) {
            int cw = coarse_of_fine[fine->out[u][e]];
            if (!(s->prefix[j][cw / 64] >> (cw % 64) & 1)) {
                bytes += fine->act_bytes[u];
                break;
            }
        }
    }
    return bytes;
}

/* Checks coarse against the fine graph it came from (fine: not itself
 * coarsened) and returns its states. */
static pd_plan_states *check_quotient(const pd_profile *p, const pd_plan_graph *fine, const pd_plan_graph *coarse,
                                      long long max_pairs)
{
    int size = pd_profile_size(p);
    int *fine_of = node_of_profile(fine, size), *coarse_of = node_of_profile(coarse, size);
    int *coarse_of_fine = malloc(sizeof(int) * (size_t)fine->n);
    double fwd = 0, bwd = 0, par = 0, act = 0;
    pd_plan_states *s = NULL;
    long long pairs = 0;

    assert_non_null(coarse_of_fine);
    assert_true(coarse->n >= 1 && coarse->n <= fine->n);
    /* The same layers, each merged whole into one coarse node. */
    for (int q = 0; q < size; q++)
        assert_true((fine_of[q] < 0) == (coarse_of[q] < 0));
    for (int u = 0; u < fine->n; u++) {
        coarse_of_fine[u] = coarse_of[fine->members[u][0]];
        for (int m = 0; m < fine->n_members[u]; m++)
            assert_int_equal(coarse_of[fine->members[u][m]], coarse_of_fine[u]);
        fwd += fine->fwd_ms[u];
        bwd += fine->bwd_ms[u];
        par += fine->par_bytes[u];
        act += fine->act_bytes[u];
    }
    /* Acyclic: numbered along a topological order; every fine edge
     * between two coarse nodes is one of theirs. */
    for (int v = 0; v < coarse->n; v++) {
        for (int e = 0; e < coarse->n_in[v]; e++)
            assert_true(coarse->in[v][e] < v);
        fwd -= coarse->fwd_ms[v];
        bwd -= coarse->bwd_ms[v];
        par -= coarse->par_bytes[v];
        act -= coarse->act_bytes[v];
    }
    for (int u = 0; u < fine->n; u++)
        for (int e = 0; e < fine->n_out[u]; e++) {
            int a = coarse_of_fine[u], b = coarse_of_fine[fine->out[u][e]];
            bool found = a == b;
            assert_true(a <= b);
            for (int k = 0; k < coarse->n_out[a] && !found; k++)
                found = coarse->out[a][k] == b;
            assert_true(found);
        }
    assert_true(fabs(fwd) < 1e-6 && fabs(bwd) < 1e-6 && fabs(par) < 1 && fabs(act) < 1);
    assert_true(coarse->data_loading_ms == fine->data_loading_ms);
    assert_int_equal(coarse->n_inputs, fine->n_inputs);
    assert_int_equal(coarse->n_dropped, fine->n_dropped);
    /* A chain of ranges within the budget: one state per node. */
    assert_int_equal(pd_plan_states_build(coarse, &s), PD_OK);
    assert_int_equal(s->n, coarse->n);
    for (int j = 0; j < s->n; j++)
        pairs += s->n_preds[j] + 1;
    assert_true(pairs <= max_pairs);
    /* Every cut carries the fine graph's bytes. */
    for (int j = 0; j < s->n; j++) {
        double want = fine_cut_bytes(fine, coarse_of_fine, s, j);
        assert_true(fabs(s->cut_bytes[j] - want) <= 1e-9 * (want + 1));
        assert_true(s->out_act_bytes[j] == s->cut_bytes[j]);
    }
    free(fine_of);
    free(coarse_of);
    free(coarse_of_fine);
    return s;
}

static void test_random_quotients(void **state)
{
    (void)state;
    pd_rng rng;
    int coarsened = 0;

    pd_rng_init(&rng, 4242);
    for (int trial = 0; trial < 60; trial++) {
        pd_profile *p = random_profile(&rng, 4 + (int)(pd_rng_next(&rng) % 8), trial % 3 != 0);
        pd_plan_graph *g = NULL, *c = NULL;
        long long ranges = 1 + (long long)(pd_rng_next(&rng) % 6), max_pairs = ranges * (ranges + 1) / 2;
        assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_OK);
        assert_int_equal(pd_plan_graph_coarsen(g, PD_PLAN_MAX_STATES, max_pairs, &c), PD_OK);
        assert_true(c->n <= ranges);
        coarsened += c->n < g->n;
        pd_plan_states_destroy(check_quotient(p, g, c, max_pairs));
        pd_plan_graph_destroy(c);
        pd_plan_graph_destroy(g);
        pd_profile_destroy(p);
    }
    assert_true(coarsened > 30);
}

static void test_nasnet_quotient(void **state)
{
    (void)state;
    const char *files[] = {"nasnetamobile/graph.txt", "nasnetalarge/graph.txt"};

    for (int i = 0; i < 2; i++) {
        pd_profile *p = test_pipedream_profile(files[i], "nasnet", 0);
        pd_plan_graph *g = NULL, *c = NULL;
        int count = 0;
        assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_OK);
        assert_int_equal(pd_plan_states_count(g, PD_PLAN_MAX_STATES, &count), PD_OK);
        assert_true(count > PD_PLAN_MAX_STATES);
        assert_int_equal(pd_plan_graph_coarsen(g, PD_PLAN_MAX_STATES, PD_PLAN_COARSEN_PAIRS, &c), PD_OK);
        print_message("# %s: %d nodes coarsened to %d\n", files[i], g->n, c->n);
        assert_true(c->n > 100 && c->n < g->n);
        pd_plan_states_destroy(check_quotient(p, g, c, PD_PLAN_COARSEN_PAIRS));
        pd_plan_graph_destroy(c);
        pd_plan_graph_destroy(g);
        pd_profile_destroy(p);
    }
}

/* ---- plans of coarsened graphs ---- */

/* Solves p on the coarsened graph c (states s) with the default model and
 * holds the plan to the profile: valid, and evaluated from the profile to
 * the same time and memory. Returns its time. */
static double solve_coarse(const pd_profile *p, const pd_plan_graph *c, const pd_plan_states *s,
                           const pd_plan_cluster *cluster, const pd_plan_options *o)
{
    pd_plan *plan = calloc(1, sizeof(*plan));
    double time_ms, *memory;

    assert_non_null(plan);
    assert_int_equal(pd_plan_solve_default(p, c, s, cluster, o, plan), PD_OK);
    assert_int_equal(pd_plan_validate(p, plan), PD_OK);
    time_ms = plan->time_ms;
    memory = malloc(sizeof(double) * (size_t)plan->n_stages);
    for (int k = 0; k < plan->n_stages; k++)
        memory[k] = plan->stages[k].memory_bytes;
    assert_int_equal(pd_plan_evaluate(p, o, plan), PD_OK);
    assert_close(plan->time_ms, time_ms, 1e-9);
    for (int k = 0; k < plan->n_stages; k++)
        assert_close(plan->stages[k].memory_bytes, memory[k], 1e-9);
    free(memory);
    pd_plan_destroy(plan);
    return time_ms;
}

/* The best plan over the cuts of graph g (states s): exhaustive search. */
static double search_best(const pd_profile *p, pd_plan_graph *g, pd_plan_states *s, const pd_plan_cluster *cluster,
                          const pd_plan_options *o)
{
    search se = {.profile = p, .cluster = cluster, .opts = o, .g = g, .s = s, .fewer = o->allow_fewer_workers};
    double best;

    search_all(&se);
    best = best_within(&se, 0);
    free(se.time);
    free(se.memory);
    return best;
}

static void test_random_plans(void **state)
{
    (void)state;
    pd_rng rng;
    int coarsened = 0;

    pd_rng_init(&rng, 99);
    for (int trial = 0; trial < 24; trial++) {
        int fan[] = {1 + trial % 4, 2};
        double bw0 = pow(10, uniform(&rng, 6.5, 9.5)), bw[] = {bw0, bw0 / uniform(&rng, 1, 30)}, lat[] = {0, 1e-4};
        pd_plan_cluster cluster = make_cluster(trial < 16 ? 1 : 2, fan, bw, lat);
        pd_plan_options o = {.optimizer_state_factor = 1, .allow_fewer_workers = trial % 2};
        pd_profile *p = random_profile(&rng, 5 + (int)(pd_rng_next(&rng) % 3), true);
        pd_plan_graph *g = NULL, *c = NULL;
        pd_plan_states *s = NULL, *cs = NULL;
        long long ranges = 2 + trial % 3, max_pairs = ranges * (ranges + 1) / 2;
        double fine_best, coarse_best, dp_ms;

        assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_OK);
        assert_int_equal(pd_plan_states_build(g, &s), PD_OK);
        assert_int_equal(pd_plan_graph_coarsen(g, PD_PLAN_MAX_STATES, max_pairs, &c), PD_OK);
        coarsened += c->n < g->n;
        cs = check_quotient(p, g, c, max_pairs);
        fine_best = search_best(p, g, s, &cluster, &o);
        coarse_best = search_best(p, c, cs, &cluster, &o);
        /* Fewer cuts: never better; the program finds the best of them. */
        assert_true(coarse_best >= fine_best * (1 - 1e-9));
        assert_int_equal(pd_plan_default_dp_ms(p, c, cs, &cluster, &o, PD_PLAN_DP_SOLVER, &dp_ms), PD_OK);
        assert_close(dp_ms, coarse_best, 1e-9);
        assert_close(solve_coarse(p, c, cs, &cluster, &o), coarse_best, 1e-9);
        pd_plan_states_destroy(cs);
        pd_plan_states_destroy(s);
        pd_plan_graph_destroy(c);
        pd_plan_graph_destroy(g);
        pd_profile_destroy(p);
    }
    assert_true(coarsened > 12);
}

/* ---- through pd_plan_solve ---- */

static void test_fitting_graph_not_coarsened(void **state)
{
    (void)state;
    pd_profile *p = test_pipedream_profile("resnet50/graph.txt", "resnet50", 0);
    pd_plan_cluster c;
    pd_plan *plan = NULL, *exact = NULL;
    pd_plan_options o = {.optimizer_state_factor = 1, .allow_fewer_workers = true};

    assert_int_equal(pd_plan_cluster_parse_levels("4x12GB/s,4x10Gb/s", &c), PD_OK);
    assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
    assert_int_equal(plan->coarsened_from, 0);
    assert_int_equal(plan->coarsened_to, 0);
    o.coarsen = PD_PLAN_COARSEN_NONE;
    assert_int_equal(pd_plan_solve(p, &c, &o, &exact), PD_OK);
    assert_true(plan->time_ms == exact->time_ms);
    assert_int_equal(plan->n_stages, exact->n_stages);
    for (int k = 0; k < plan->n_stages; k++)
        assert_int_equal(plan->stages[k].n_layers, exact->stages[k].n_layers);
    pd_plan_destroy(plan);
    pd_plan_destroy(exact);
    pd_profile_destroy(p);
}

static void test_nasnet_plans(void **state)
{
    (void)state;
    pd_profile *p = test_pipedream_profile("nasnetamobile/graph.txt", "nasnetamobile", 32);
    pd_plan_cluster c;
    char path[] = "/tmp/pd-test-coarsen-XXXXXX";
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(pd_plan_cluster_parse_levels("4x12GB/s", &c), PD_OK);
    for (int model = 0; model < 2; model++) {
        pd_plan_options o = {.cost_model = model ? PD_PLAN_COST_PIPEDREAM : PD_PLAN_COST_DEFAULT,
                             .optimizer_state_factor = model ? 0 : 1,
                             .allow_fewer_workers = !model};
        pd_plan *plan = NULL, *back = NULL;
        assert_int_equal(pd_plan_solve(p, &c, &o, &plan), PD_OK);
        print_message("# nasnetamobile, %s model, 4 workers: %d stages, %.3f ms (one worker %.3f), graph %d -> %d\n",
                      model ? "pipedream" : "default", plan->n_stages, plan->time_ms, plan->single_worker_ms,
                      plan->coarsened_from, plan->coarsened_to);
        assert_int_equal(plan->coarsened_from, 920);
        assert_true(plan->coarsened_to > 100 && plan->coarsened_to < 920);
        assert_int_equal(pd_plan_validate(p, plan), PD_OK);
        assert_true(plan->time_ms < plan->single_worker_ms);
        /* The file says so, and reads back. */
        assert_int_equal(pd_plan_write_json(plan, p, path), PD_OK);
        assert_int_equal(pd_plan_read_json(path, p, &back), PD_OK);
        assert_int_equal(back->coarsened_from, plan->coarsened_from);
        assert_int_equal(back->coarsened_to, plan->coarsened_to);
        if (!model) {
            /* Its evaluation from the profile is what the solver said. */
            assert_int_equal(pd_plan_evaluate(p, &o, back), PD_OK);
            assert_close(back->time_ms, plan->time_ms, 1e-9);
            for (int k = 0; k < plan->n_stages; k++)
                assert_close(back->stages[k].memory_bytes, plan->stages[k].memory_bytes, 1e-9);
            assert_int_equal(back->coarsened_from, 0);
        }
        pd_plan_destroy(back);
        pd_plan_destroy(plan);
    }
    /* Refused when coarsening is off, with the number of states. */
    pd_plan_options none = {.coarsen = PD_PLAN_COARSEN_NONE};
    pd_plan *plan = NULL;
    assert_int_equal(pd_plan_solve(p, &c, &none, &plan), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "more than the 16384 the planner can hold"));
    unlink(path);
    pd_profile_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_quotients),
        cmocka_unit_test(test_nasnet_quotient),
        cmocka_unit_test(test_random_plans),
        cmocka_unit_test(test_fitting_graph_not_coarsened),
        cmocka_unit_test(test_nasnet_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
