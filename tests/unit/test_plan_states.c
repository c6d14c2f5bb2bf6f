/* The partitioner's planning graph and PipeDream's antichain states: small
 * DAGs worked out by hand (a chain, a diamond, two branches of different
 * lengths), branch collapsing, the dropped `__getitem__` sinks, and the
 * graphs of every shared PipeDream profile (state counts as the original
 * optimizer's graph.py finds them, every state's tables checked against
 * its prefix). */
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
#include <pipedream/profile.h>

#include "plan/plan_int.h"
#include "test_plans.h"

/* ---- building small profiles ---- */

/* A node of a hand-made profile: inputs by name, "" ends the list. */
typedef struct toy_node {
    const char *name, *type, *description;
    double fwd, bwd;
    int64_t act, par;
    const char *inputs[4];
} toy_node;

static pd_profile *toy_profile(const toy_node *nodes, int n)
{
    const pd_profile_info info = {.model = "toy", .dtype = PD_F32, .device = "cpu", .source = "test"};
    pd_profile *p;

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    for (int i = 0; i < n; i++) {
        int inputs[4], n_inputs = 0;
        for (; n_inputs < 4 && nodes[i].inputs[n_inputs]; n_inputs++)
            assert_true((inputs[n_inputs] = pd_profile_find(p, nodes[i].inputs[n_inputs])) >= 0);
        pd_profile_node node = {
            .name = nodes[i].name,
            .type = nodes[i].type ? nodes[i].type : "op",
            .description = nodes[i].description ? nodes[i].description : nodes[i].name,
            .fwd_ms = nodes[i].fwd,
            .bwd_ms = nodes[i].bwd,
            .activation_bytes = nodes[i].act,
            .weight_bytes = nodes[i].par,
            .flops = -1,
            .n_inputs = n_inputs,
            .inputs = inputs,
        };
        assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_OK);
    }
    return p;
}

static pd_plan_graph *graph_of(const pd_profile *p)
{
    pd_plan_graph *g = NULL;
    if (pd_plan_graph_from_profile(p, &g) != PD_OK)
        fail_msg("planning graph: %s", pd_last_error());
    return g;
}

static pd_plan_states *states_of(const pd_plan_graph *g)
{
    pd_plan_states *s = NULL;
    if (pd_plan_states_build(g, &s) != PD_OK)
        fail_msg("antichain states: %s", pd_last_error());
    return s;
}

static bool prefix_has(const pd_plan_states *s, int state, int v)
{
    return (s->prefix[state][v / 64] >> (v % 64)) & 1;
}

/* The profile node names of state j's antichain, space separated. */
static const char *antichain_names(const pd_profile *p, const pd_plan_graph *g, const pd_plan_states *s, int j)
{
    static char text[256];
    text[0] = '\0';
    for (int i = 0; i < s->n_antichain[j]; i++) {
        strcat(text, i ? " " : "");
        strcat(text, pd_profile_node_at(p, g->members[s->antichain[j][i]][0])->name);
    }
    return text;
}

static void assert_preds(const pd_plan_states *s, int j, const int *expected, int n)
{
    assert_int_equal(s->n_preds[j], n);
    for (int k = 0; k < n; k++)
        assert_int_equal(s->preds[j][k], expected[k]);
    for (int k = 0; k < s->n; k++) {
        bool want = false;
        for (int e = 0; e < n; e++)
            want |= expected[e] == k;
        assert_int_equal((s->is_pred[j][k / 64] >> (k % 64)) & 1, want);
    }
}

/* State j's sums: compute and activation and parameter bytes of its
 * prefix, the output of its augmented antichain, and the bytes crossing
 * its cut. */
static void assert_sums(const pd_plan_states *s, int j, double compute, double act, double par, double out, double cut)
{
    assert_true(s->compute_ms[j] == compute);
    assert_true(s->act_bytes[j] == act);
    assert_true(s->par_bytes[j] == par);
    assert_true(s->out_act_bytes[j] == out);
    assert_true(s->cut_bytes[j] == cut);
}

/* Frees a test's states, graph and profile. */
static void release(pd_plan_states *s, pd_plan_graph *g, pd_profile *p)
{
    pd_plan_states_destroy(s);
    pd_plan_graph_destroy(g);
    pd_profile_destroy(p);
}

/* ---- hand-made graphs ---- */

/* input -> a -> b -> c: the input leaves the graph as data loading; one
 * state per layer, each the predecessor of all later ones. */
static void test_chain(void **state)
{
    (void)state;
    const toy_node nodes[] = {
        {"in", PD_PROFILE_INPUT_TYPE, "Input0", 5, 0, 100, 0, {NULL}},
        {"a", NULL, NULL, 1, 2, 10, 1000, {"in"}},
        {"b", NULL, NULL, 3, 4, 20, 2000, {"a"}},
        {"c", NULL, NULL, 5, 6, 30, 3000, {"b"}},
    };
    pd_profile *p = toy_profile(nodes, 4);
    pd_plan_graph *g = graph_of(p);
    pd_plan_states *s = states_of(g);

    assert_int_equal(g->n, 3);
    assert_int_equal(g->n_inputs, 1);
    assert_int_equal(g->inputs[0], 0);
    assert_true(g->data_loading_ms == 5);
    assert_int_equal(g->n_in[0], 0); /* the input edge is gone */
    assert_int_equal(g->members[2][0], 3);
    assert_int_equal(s->n, 3);
    const double compute[] = {3, 10, 21}, act[] = {10, 30, 60}, par[] = {1000, 3000, 6000};
    const double out[] = {10, 20, 30}, cut[] = {10, 20, 0};
    for (int j = 0; j < 3; j++) {
        assert_int_equal(s->n_antichain[j], 1);
        assert_int_equal(s->antichain[j][0], j);
        assert_sums(s, j, compute[j], act[j], par[j], out[j], cut[j]);
    }
    assert_preds(s, 0, NULL, 0);
    assert_preds(s, 1, (const int[]){0}, 1);
    assert_preds(s, 2, (const int[]){0, 1}, 2);
    release(s, g, p);
}

/* a -> b, a -> c, b -> d, c -> d. By hand: {a} has successors {b} (a is
 * still live for c, so {b} augments to {a, b}) and {c}; {b} leads to
 * {b, c} and {d}; {c} to {b, c} and {d}; {b, c} to {d}. Discovery order
 * {a} {b} {c} {b,c} {d}; the depth-first walk from {a} takes {b}, {b,c},
 * {d} first, so its reverse post-order is {a} {c} {b} {b,c} {d}. */
static void test_diamond(void **state)
{
    (void)state;
    const toy_node nodes[] = {
        {"a", NULL, NULL, 1, 2, 1, 16, {NULL}},
        {"b", NULL, NULL, 4, 6, 2, 32, {"a"}},
        {"c", NULL, NULL, 40, 60, 4, 64, {"a"}},
        {"d", NULL, NULL, 400, 600, 8, 128, {"b", "c"}},
    };
    pd_profile *p = toy_profile(nodes, 4);
    pd_plan_graph *g = graph_of(p);
    pd_plan_states *s = states_of(g);

    assert_int_equal(g->n_out[0], 2);
    assert_int_equal(g->out[0][0], 1);
    assert_int_equal(g->out[0][1], 2);
    assert_int_equal(s->n, 5);
    const char *names[] = {"a", "c", "b", "b c", "d"};
    const double compute[] = {3, 103, 13, 113, 1113}, act[] = {1, 5, 3, 7, 15}, par[] = {16, 80, 48, 112, 240};
    /* Augmented: {a}, {a,c}, {a,b}, {a,b,c}, {d}; really crossing the cut:
     * a's output until both b and c are in, then b's and c's. */
    const double out[] = {1, 5, 3, 7, 8}, cut[] = {1, 5, 3, 6, 0};
    for (int j = 0; j < 5; j++) {
        assert_string_equal(antichain_names(p, g, s, j), names[j]);
        assert_sums(s, j, compute[j], act[j], par[j], out[j], cut[j]);
    }
    assert_preds(s, 0, NULL, 0);
    assert_preds(s, 1, (const int[]){0}, 1);
    assert_preds(s, 2, (const int[]){0}, 1);
    assert_preds(s, 3, (const int[]){0, 1, 2}, 3);
    assert_preds(s, 4, (const int[]){0, 1, 2, 3}, 4);
    release(s, g, p);
}

/* a -> b1 -> b2 -> d and a -> c1 -> d. The states are the seven
 * down-closed sets holding a; from {c1} the one step to d takes b1 and b2
 * in with it. Discovery: {a} {b1} {c1} {b1,c1} {b2} {d} {b2,c1}; the walk
 * from {a} goes {b1} {b1,c1} {d}, {b2,c1}, then {b2}, then {c1}. */
static void test_two_branches(void **state)
{
    (void)state;
    const toy_node nodes[] = {
        {"a", NULL, NULL, 1, 2, 1, 0, {NULL}},      {"b1", NULL, NULL, 2, 4, 2, 0, {"a"}},
        {"b2", NULL, NULL, 4, 8, 4, 0, {"b1"}},     {"c1", NULL, NULL, 8, 16, 8, 0, {"a"}},
        {"d", NULL, NULL, 16, 32, 16, 0, {"b2", "c1"}},
    };
    pd_profile *p = toy_profile(nodes, 5);
    pd_plan_graph *g = graph_of(p);
    pd_plan_states *s = states_of(g);

    assert_int_equal(s->n, 7);
    const char *names[] = {"a", "c1", "b1", "b2", "b1 c1", "b2 c1", "d"};
    const double compute[] = {3, 27, 9, 21, 33, 45, 93};
    for (int j = 0; j < 7; j++) {
        assert_string_equal(antichain_names(p, g, s, j), names[j]);
        assert_true(s->compute_ms[j] == compute[j]);
    }
    assert_preds(s, 1, (const int[]){0}, 1);
    assert_preds(s, 3, (const int[]){0, 2}, 2); /* {c1} and {b2} are not ordered */
    assert_preds(s, 4, (const int[]){0, 1, 2}, 3);
    assert_preds(s, 5, (const int[]){0, 1, 2, 3, 4}, 5);
    assert_preds(s, 6, (const int[]){0, 1, 2, 3, 4, 5}, 6);
    /* {b1} augments to {a, b1}: a still feeds c1. */
    assert_true(s->out_act_bytes[2] == 1 + 2);
    assert_true(s->cut_bytes[2] == 1 + 2);
    release(s, g, p);
}

/* The original removes `__getitem__` sinks; they are kept aside with the
 * nodes that feed them. A one-node graph has one state. */
static void test_dropped_sinks(void **state)
{
    (void)state;
    const toy_node nodes[] = {
        {"in", PD_PROFILE_INPUT_TYPE, "Input0", 1, 0, 0, 0, {NULL}},
        {"a", NULL, "LSTM", 1, 1, 8, 8, {"in"}},
        {"g", NULL, "__getitem__(0)", 0.5, 0, 4, 0, {"a"}},
        {"b", NULL, "__getitem__(1)", 1, 1, 4, 0, {"a"}},
        {"c", NULL, "Linear", 1, 1, 4, 4, {"b"}},
    };
    pd_profile *p = toy_profile(nodes, 5);
    pd_plan_graph *g = graph_of(p);

    /* b is a __getitem__ too but feeds c: it stays. */
    assert_int_equal(g->n, 3);
    assert_int_equal(g->n_dropped, 1);
    assert_int_equal(g->dropped[0], 2);
    assert_int_equal(g->n_dropped_in[0], 1);
    assert_int_equal(g->dropped_in[0][0], 0);
    assert_int_equal(g->members[1][0], 3);
    pd_plan_states *s = states_of(g);
    assert_int_equal(s->n, 3);
    release(s, g, p);

    const toy_node one[] = {{"x", NULL, NULL, 1, 1, 1, 1, {NULL}}};
    p = toy_profile(one, 1);
    g = graph_of(p);
    s = states_of(g);
    assert_int_equal(s->n, 1);
    assert_int_equal(s->n_preds[0], 0);
    assert_true(s->compute_ms[0] == 2);
    release(s, g, p);

    const toy_node inputs_only[] = {{"in", PD_PROFILE_INPUT_TYPE, "Input0", 1, 0, 0, 0, {NULL}}};
    p = toy_profile(inputs_only, 1);
    assert_int_equal(pd_plan_graph_from_profile(p, &g), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "no compute nodes"));
    pd_profile_destroy(p);

    /* Two pieces: the antichains grow from the first source only. */
    const toy_node pieces[] = {{"x", NULL, NULL, 1, 1, 1, 1, {NULL}}, {"y", NULL, NULL, 1, 1, 1, 1, {NULL}}};
    p = toy_profile(pieces, 2);
    g = graph_of(p);
    assert_int_equal(pd_plan_states_build(g, &s), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "in pieces"));
    pd_plan_graph_destroy(g);
    pd_profile_destroy(p);
}

/* a forks to b1 and c1; b1 -> b2 -> f, where f forks again to g1 and g2,
 * which join in j; j and c1 join in k. Collapsing merges b1, b2 and f (a
 * chain that ends in a fork takes the fork in) and leaves the one-node
 * branches g1, g2 and c1 as they are. */
static void test_collapse(void **state)
{
    (void)state;
    const toy_node nodes[] = {
        {"in", PD_PROFILE_INPUT_TYPE, "Input0", 1, 0, 9, 0, {NULL}},
        {"a", NULL, NULL, 1, 1, 1, 1, {"in"}},
        {"b1", NULL, NULL, 1, 2, 2, 10, {"a"}},
        {"b2", NULL, NULL, 3, 4, 3, 20, {"b1"}},
        {"f", NULL, NULL, 5, 6, 4, 30, {"b2"}},
        {"g1", NULL, NULL, 1, 1, 5, 0, {"f"}},
        {"g2", NULL, NULL, 1, 1, 6, 0, {"f"}},
        {"j", NULL, NULL, 1, 1, 7, 0, {"g1", "g2"}},
        {"c1", NULL, NULL, 1, 1, 8, 0, {"a"}},
        {"k", NULL, NULL, 1, 1, 9, 0, {"j", "c1"}},
    };
    pd_profile *p = toy_profile(nodes, 10);
    pd_plan_graph *g = graph_of(p), *c = NULL;

    assert_int_equal(pd_plan_graph_collapse_branches(g, &c), PD_OK);
    assert_int_equal(c->n, 7);
    /* New nodes in the order of their first members. */
    const int members1[] = {2, 3, 4};
    assert_int_equal(c->n_members[1], 3);
    assert_memory_equal(c->members[1], members1, sizeof(members1));
    assert_true(c->fwd_ms[1] == 9 && c->bwd_ms[1] == 12 && c->par_bytes[1] == 60);
    assert_true(c->act_bytes[1] == 4); /* f's */
    const int first[] = {1, 2, 5, 6, 7, 8, 9};
    for (int w = 0; w < 7; w++)
        assert_int_equal(c->members[w][0], first[w]);
    assert_int_equal(c->n_in[1], 1);
    assert_int_equal(c->in[1][0], 0);
    assert_int_equal(c->n_out[1], 2);
    assert_int_equal(c->n_in[6], 2); /* k <- j, c1 */
    assert_int_equal(c->in[6][0], 4);
    assert_int_equal(c->in[6][1], 5);
    assert_int_equal(c->n_inputs, 1);
    assert_true(c->data_loading_ms == 1);
    pd_plan_states *sg = states_of(g), *sc = states_of(c);
    assert_true(sc->n < sg->n);
    assert_true(sc->compute_ms[sc->n - 1] == sg->compute_ms[sg->n - 1]);
    pd_plan_states_destroy(sg);
    pd_plan_states_destroy(sc);
    pd_plan_graph_destroy(c);
    pd_plan_graph_destroy(g);
    pd_profile_destroy(p);

    /* A branch that runs into a sink keeps the sink (the original would
     * lose it): a -> s1 -> s2, a -> t. */
    const toy_node sink[] = {
        {"a", NULL, NULL, 1, 1, 1, 1, {NULL}},
        {"s1", NULL, NULL, 1, 1, 2, 1, {"a"}},
        {"s2", NULL, NULL, 1, 1, 3, 1, {"s1"}},
        {"t", NULL, NULL, 1, 1, 4, 1, {"a"}},
    };
    p = toy_profile(sink, 4);
    g = graph_of(p);
    assert_int_equal(pd_plan_graph_collapse_branches(g, &c), PD_OK);
    assert_int_equal(c->n, 3);
    assert_int_equal(c->n_members[1], 2);
    assert_true(c->act_bytes[1] == 3);
    pd_plan_graph_destroy(c);
    pd_plan_graph_destroy(g);
    pd_profile_destroy(p);
}

/* ---- the shared profiles ---- */

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every state against its prefix: the antichain is in it and is its set
 * of maximal nodes, the sums are the prefix's, a predecessor's prefix is
 * a strict subset, and the last state holds every node. */
static void assert_states_consistent(const pd_plan_graph *g, const pd_plan_states *s)
{
    assert_true(s->n >= 1);
    for (int v = 0; v < g->n; v++)
        assert_true(prefix_has(s, s->n - 1, v));
    for (int j = 0; j < s->n; j++) {
        double compute = 0, act = 0, par = 0;
        int size = 0;
        for (int v = 0; v < g->n; v++) {
            if (!prefix_has(s, j, v))
                continue;
            size++;
            compute += g->fwd_ms[v] + g->bwd_ms[v];
            act += g->act_bytes[v];
            par += g->par_bytes[v];
            for (int e = 0; e < g->n_in[v]; e++)
                assert_true(prefix_has(s, j, g->in[v][e])); /* closed under inputs */
        }
        assert_true(fabs(s->compute_ms[j] - compute) <= 1e-9 * (1 + compute));
        assert_true(fabs(s->act_bytes[j] - act) <= 1e-9 * (1 + act));
        assert_true(fabs(s->par_bytes[j] - par) <= 1e-9 * (1 + par));
        assert_true(s->n_antichain[j] >= 1);
        for (int i = 0; i < s->n_antichain[j]; i++) {
            int a = s->antichain[j][i];
            assert_true(prefix_has(s, j, a));
            for (int e = 0; e < g->n_out[a]; e++)
                assert_false(prefix_has(s, j, g->out[a][e])); /* maximal */
        }
        for (int e = 0; e < s->n_preds[j]; e++) {
            int k = s->preds[j][e], smaller = 0;
            assert_true(k < j && (e == 0 || s->preds[j][e - 1] < k));
            for (int v = 0; v < g->n; v++) {
                if (prefix_has(s, k, v))
                    assert_true(prefix_has(s, j, v));
                smaller += prefix_has(s, k, v);
            }
            assert_true(smaller < size);
        }
    }
}

/* State counts of the original's graph.py (antichain_dag, run on the
 * same files), and build times. */
static void test_shared_profiles(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        int states;
    } known[] = {
        {"vgg16/graph.txt", 40},           {"alexnet/graph.txt", 22},       {"resnet18/graph.txt", 100},
        {"squeezenet1_0/graph.txt", 99},   {"gnmt/graph.txt", 99},          {"gnmt_large/graph.txt", 1495},
        {"resnet50/graph.txt", 240},       {"resnext50/graph.txt", 240},    {"resnet101/graph.txt", 410},
        {"resnext101/graph.txt", 410},     {"densenet121/graph.txt", 430},  {"inception_v3/graph_compressed.txt", 1646},
    };

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        pd_profile *p = test_pipedream_profile(known[i].file, "m", 0);
        pd_plan_graph *g = graph_of(p);
        double t0 = seconds();
        pd_plan_states *s = states_of(g);
        double t = seconds() - t0;
        print_message("# %-36s %4d nodes %5d states %.3f s\n", known[i].file, g->n, s->n, t);
        assert_int_equal(s->n, known[i].states);
        assert_true(t < 10); /* well under a second on an idle machine */
        assert_states_consistent(g, s);
        release(s, g, p);
    }

    /* VGG16 is a chain: one state per layer, in order. */
    pd_profile *p = test_pipedream_profile("vgg16/graph.txt", "m", 0);
    pd_plan_graph *g = graph_of(p);
    pd_plan_states *s = states_of(g);
    for (int j = 0; j < s->n; j++) {
        assert_int_equal(s->n_antichain[j], 1);
        assert_int_equal(s->antichain[j][0], j);
        assert_int_equal(s->n_preds[j], j);
    }
    assert_true(fabs(s->compute_ms[39] - 672.535) < 1e-9);
    release(s, g, p);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double *sorted_copy(const double *values, int n)
{
    double *copy = malloc(sizeof(double) * (size_t)n);
    assert_non_null(copy);
    memcpy(copy, values, sizeof(double) * (size_t)n);
    qsort(copy, (size_t)n, sizeof(double), cmp_double);
    return copy;
}

/* Inception-v3 uncollapsed has 221564 states (as graph.py finds, in 70 s
 * there): counted, refused by the build; our collapse gives the shipped
 * graph_compressed.txt's graph. The NASNets stay out of reach even
 * collapsed (millions of states). */
static void test_branchy_profiles(void **state)
{
    (void)state;
    pd_profile *p = test_pipedream_profile("inception_v3/graph.txt", "m", 0);
    pd_plan_graph *g = graph_of(p), *c = NULL;
    pd_plan_states *s = NULL;
    int count = 0;

    double t0 = seconds();
    assert_int_equal(pd_plan_states_count(g, 300000, &count), PD_OK);
    print_message("# inception_v3/graph.txt: %d states counted in %.2f s\n", count, seconds() - t0);
    assert_int_equal(count, 221564);
    assert_int_equal(pd_plan_states_build(g, &s), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "221564"));
    assert_non_null(strstr(pd_last_error(), "collapse"));

    assert_int_equal(pd_plan_graph_collapse_branches(g, &c), PD_OK);
    pd_profile *q = test_pipedream_profile("inception_v3/graph_compressed.txt", "m", 0);
    pd_plan_graph *gq = graph_of(q);
    assert_int_equal(c->n, gq->n);
    s = states_of(c);
    pd_plan_states *sq = states_of(gq);
    assert_int_equal(s->n, 1646);
    assert_int_equal(s->n, sq->n);
    assert_states_consistent(c, s);
    assert_true(fabs(s->compute_ms[s->n - 1] - sq->compute_ms[sq->n - 1]) < 1e-6);
    /* The same states, numbered alike up to the order of parallel edges:
     * compare the sorted tables. */
    double *a = sorted_copy(s->compute_ms, s->n), *b = sorted_copy(sq->compute_ms, sq->n);
    for (int j = 0; j < s->n; j++)
        assert_true(fabs(a[j] - b[j]) < 1e-6);
    free(a);
    free(b);
    a = sorted_copy(s->par_bytes, s->n);
    b = sorted_copy(sq->par_bytes, sq->n);
    for (int j = 0; j < s->n; j++)
        assert_true(fabs(a[j] - b[j]) < 1e-3);
    free(a);
    free(b);
    pd_plan_states_destroy(s);
    pd_plan_states_destroy(sq);
    pd_plan_graph_destroy(gq);
    pd_profile_destroy(q);
    pd_plan_graph_destroy(c);
    pd_plan_graph_destroy(g);
    pd_profile_destroy(p);

    const char *nasnets[] = {"nasnetamobile/graph.txt", "nasnetalarge/graph.txt"};
    for (int i = 0; i < 2; i++) {
        p = test_pipedream_profile(nasnets[i], "m", 0);
        g = graph_of(p);
        assert_int_equal(pd_plan_graph_collapse_branches(g, &c), PD_OK);
        assert_int_equal(pd_plan_states_count(g, 50000, &count), PD_OK);
        assert_int_equal(count, 50001);
        assert_int_equal(pd_plan_states_count(c, 50000, &count), PD_OK);
        assert_int_equal(count, 50001);
        print_message("# %s: %d nodes (%d collapsed), more than 50000 states either way\n", nasnets[i], g->n, c->n);
        assert_int_equal(pd_plan_states_build(c, &s), PD_EINVAL);
        assert_non_null(strstr(pd_last_error(), "more than"));
        pd_plan_graph_destroy(c);
        pd_plan_graph_destroy(g);
        pd_profile_destroy(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_diamond),
        cmocka_unit_test(test_two_branches),
        cmocka_unit_test(test_dropped_sinks),
        cmocka_unit_test(test_collapse),
        cmocka_unit_test(test_shared_profiles),
        cmocka_unit_test(test_branchy_profiles),
    };
    return cmocka_run_group_tests_name("plan_states", tests, NULL, NULL);
}
