/* Backend-ops cases: ReLU, add, flatten, and a small graph that exercises
 * fan-out (one activation read by two layers, so gradients are summed). */
#include "bo.h"

static pd_status build_relu(pd_graph *g, const void *arg, int *out)
{
    const pd_shape *shape = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, shape, true, &x));
    return pd_graph_relu(g, "relu", x, out);
}

static pd_status build_add(pd_graph *g, const void *arg, int *out)
{
    const pd_shape *shape = arg;
    int a, b;

    PD_CHECK(pd_graph_input(g, "a", PD_F32, shape, true, &a));
    PD_CHECK(pd_graph_input(g, "b", PD_F32, shape, true, &b));
    return pd_graph_add(g, "add", a, b, out);
}

static pd_status build_flatten(pd_graph *g, const void *arg, int *out)
{
    const pd_shape *shape = arg;
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, shape, true, &x));
    return pd_graph_flatten(g, "flatten", x, out);
}

/* x -> relu -> (add with x) -> flatten: x's gradient has two contributions. */
static pd_status build_fan_out(pd_graph *g, const void *arg, int *out)
{
    const pd_shape *shape = arg;
    int x, r, a;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, shape, true, &x));
    PD_CHECK(pd_graph_relu(g, "relu", x, &r));
    PD_CHECK(pd_graph_add(g, "shortcut", r, x, &a));
    return pd_graph_flatten(g, "flatten", a, out);
}

static const pd_shape shape_2d = {2, {3, 5}};
static const pd_shape shape_4d = {4, {2, 3, 4, 5}};

const bo_case bo_cases_basic[] = {
    {"relu", "[3,5]", build_relu, &shape_2d, BO_FILL_AWAY_FROM_ZERO, 0, 0, 0},
    {"relu", "[2,3,4,5]", build_relu, &shape_4d, BO_FILL_AWAY_FROM_ZERO, 0, 0, 0},
    {"add", "[2,3,4,5]", build_add, &shape_4d, BO_FILL_UNIFORM, 0, 0, 0},
    {"flatten", "[2,3,4,5]", build_flatten, &shape_4d, BO_FILL_UNIFORM, 0, 0, 0},
    {"add", "fan-out x -> relu -> add(relu, x)", build_fan_out, &shape_4d, BO_FILL_AWAY_FROM_ZERO, 0, 0, 0},
};
const size_t bo_cases_basic_count = sizeof(bo_cases_basic) / sizeof(bo_cases_basic[0]);
