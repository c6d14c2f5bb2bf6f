/* Backend-ops cases: concat, embedding and LSTM. */
#include "bo.h"

#define MAX_PARTS 4

typedef struct concat_arg {
    int n, ndim, axis;
    int64_t dims[MAX_PARTS][4];
    unsigned no_grad_mask; /* bit i: input i is created without requires_grad */
} concat_arg;

static pd_status build_concat(pd_graph *g, const void *arg, int *out)
{
    const concat_arg *a = arg;
    static const char *const names[MAX_PARTS] = {"x0", "x1", "x2", "x3"};
    int xs[MAX_PARTS];

    for (int i = 0; i < a->n; i++) {
        pd_shape s = {.ndim = a->ndim};
        for (int d = 0; d < a->ndim; d++)
            s.dim[d] = a->dims[i][d];
        PD_CHECK(pd_graph_input(g, names[i], PD_F32, &s, !(a->no_grad_mask & (1u << i)), &xs[i]));
    }
    return pd_graph_concat(g, "concat", a->n, xs, a->axis, out);
}

static const concat_arg concat_axis1 = {3, 4, 1, {{2, 3, 4, 5}, {2, 2, 4, 5}, {2, 1, 4, 5}}, 0};
static const concat_arg concat_axis0 = {2, 2, 0, {{2, 3}, {3, 3}}, 0};
static const concat_arg concat_last = {3, 3, -1, {{2, 3, 4}, {2, 3, 1}, {2, 3, 2}}, 0};
/* Axes 2 and 3 of 4-D: runs of 5 floats and of 1-3 floats per outer index. */
static const concat_arg concat_axis2 = {2, 4, 2, {{2, 3, 4, 5}, {2, 3, 1, 5}}, 0};
static const concat_arg concat_axis3 = {3, 4, 3, {{2, 3, 4, 1}, {2, 3, 4, 3}, {2, 3, 4, 2}}, 0};
/* Inputs without gradient on both sides of one with: the split must skip them in place. */
static const concat_arg concat_skips = {4, 4, 1, {{2, 2, 3, 3}, {2, 1, 3, 3}, {2, 3, 3, 3}, {2, 2, 3, 3}}, 0x5u};

typedef struct embedding_arg {
    int64_t n, t;
    int vocab, dim;
} embedding_arg;

static pd_status build_embedding(pd_graph *g, const void *arg, int *out)
{
    const embedding_arg *a = arg;
    pd_shape s = pd_shape_make(2, a->n, a->t);
    int ids;

    PD_CHECK(pd_graph_input(g, "ids", PD_I32, &s, false, &ids));
    return pd_graph_embedding(g, "embedding", ids, a->vocab, a->dim, out);
}

/* 12 ids over 5 rows: every row is drawn more than once on average. */
static const embedding_arg embedding_small = {3, 4, 5, 6};
/* 320 ids over 7 rows (runs of ~45 repeats), dim 37; and 15 ids over 50
 * rows (most rows get no gradient), dim 8. */
static const embedding_arg embedding_repeats = {8, 40, 7, 37};
static const embedding_arg embedding_sparse = {5, 3, 50, 8};

typedef struct lstm_arg {
    int64_t n, t, in;
    int hidden;
} lstm_arg;

static pd_status build_lstm(pd_graph *g, const void *arg, int *out)
{
    const lstm_arg *a = arg;
    pd_shape s = pd_shape_make(3, a->n, a->t, a->in);
    int x;

    PD_CHECK(pd_graph_input(g, "x", PD_F32, &s, true, &x));
    return pd_graph_lstm(g, "lstm", x, a->hidden, out);
}

static const lstm_arg lstm_n2_t3 = {2, 3, 4, 5};
static const lstm_arg lstm_n2_t1 = {2, 1, 4, 5};
static const lstm_arg lstm_n3_t6_wide = {3, 6, 7, 2};
static const lstm_arg lstm_n5_t4_h37 = {5, 4, 3, 37};

const bo_case bo_cases_sequence[] = {
    {"concat", "axis 1 of 4-D, 3 inputs", build_concat, &concat_axis1, BO_FILL_UNIFORM, 0, 0, 0},
    {"concat", "axis 1, inputs 0 and 2 without gradient", build_concat, &concat_skips, BO_FILL_UNIFORM, 0, 0, 0},
    {"concat", "axis 0, 2 inputs", build_concat, &concat_axis0, BO_FILL_UNIFORM, 0, 0, 0},
    {"concat", "last axis (-1) of 3-D, 3 inputs", build_concat, &concat_last, BO_FILL_UNIFORM, 0, 0, 0},
    {"concat", "axis 2 of 4-D, 2 inputs", build_concat, &concat_axis2, BO_FILL_UNIFORM, 0, 0, 0},
    {"concat", "axis 3 of 4-D, 3 inputs", build_concat, &concat_axis3, BO_FILL_UNIFORM, 0, 0, 0},
    {"embedding", "ids [3,4], vocab 5, dim 6", build_embedding, &embedding_small, BO_FILL_UNIFORM, 5, 0, 0},
    {"embedding", "ids [8,40], vocab 7, dim 37", build_embedding, &embedding_repeats, BO_FILL_UNIFORM, 7, 0, 0},
    {"embedding", "ids [5,3], vocab 50, dim 8", build_embedding, &embedding_sparse, BO_FILL_UNIFORM, 50, 0, 0},
    {"lstm", "N=2 T=3 I=4 H=5", build_lstm, &lstm_n2_t3, BO_FILL_UNIFORM, 0, 0, 0},
    {"lstm", "N=2 T=1 I=4 H=5", build_lstm, &lstm_n2_t1, BO_FILL_UNIFORM, 0, 0, 0},
    {"lstm", "N=3 T=6 I=7 H=2", build_lstm, &lstm_n3_t6_wide, BO_FILL_UNIFORM, 0, 0, 0},
    {"lstm", "N=5 T=4 I=3 H=37", build_lstm, &lstm_n5_t4_h37, BO_FILL_UNIFORM, 0, 0, 0},
};
const size_t bo_cases_sequence_count = sizeof(bo_cases_sequence) / sizeof(bo_cases_sequence[0]);
