/* Unit tests of the CPU sequence kernels: concat/split, embedding and the LSTM
 * cell, against naive plain-C references (double precision for the cell),
 * finite differences of the cell, and the error cases. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pipedream.h>

typedef struct fixture {
    pd_device *dev;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f || pd_device_open("cpu", &f->dev) != PD_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pd_device_close(f->dev);
    free(f);
    return 0;
}

/* A small deterministic generator, independent of the library's. */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2654435761u + 1; }
static double rng_uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static pd_tensor *make(pd_device *dev, pd_dtype dtype, int ndim, const int64_t *dims)
{
    pd_shape s = {.ndim = ndim};
    pd_tensor *t = NULL;
    for (int d = 0; d < ndim; d++)
        s.dim[d] = dims[d];
    assert_int_equal(pd_tensor_create(dev, dtype, &s, &t), PD_OK);
    return t;
}

static pd_tensor *make_random(pd_device *dev, int ndim, const int64_t *dims, double lo, double hi)
{
    pd_tensor *t = make(dev, PD_F32, ndim, dims);
    float *p = t->data;
    for (int64_t i = 0; i < pd_tensor_numel(t); i++)
        p[i] = (float)rng_uniform(lo, hi);
    return t;
}

static void fill_nan(pd_tensor *t)
{
    float *p = t->data;
    for (int64_t i = 0; i < pd_tensor_numel(t); i++)
        p[i] = NAN;
}

/* ---------------------------------------------------------------- concat */

/* Naive reference: y at multi-index (.., k, ..) along axis comes from the part
 * whose range holds k, at index k - start. */
static void concat_naive(int axis, int n, pd_tensor *const *xs, const pd_shape *ys, float *y)
{
    int64_t total = pd_shape_numel(ys);
    for (int64_t e = 0; e < total; e++) {
        int64_t idx[PD_MAX_DIMS] = {0}, rest = e;
        for (int d = ys->ndim - 1; d >= 0; d--) {
            idx[d] = rest % ys->dim[d];
            rest /= ys->dim[d];
        }
        int part = 0;
        int64_t k = idx[axis];
        while (k >= xs[part]->shape.dim[axis]) {
            k -= xs[part]->shape.dim[axis];
            part++;
        }
        idx[axis] = k;
        int64_t off = 0;
        for (int d = 0; d < ys->ndim; d++)
            off = off * xs[part]->shape.dim[d] + idx[d];
        y[e] = ((const float *)xs[part]->data)[off];
    }
}

static void check_concat_case(pd_device *dev, int ndim, const int64_t *base, int axis, int n, const int64_t *widths)
{
    pd_tensor *xs[4], *dxs[4];
    int64_t dims[PD_MAX_DIMS];
    pd_shape ys = {.ndim = ndim};

    assert_true(n <= 4);
    memcpy(dims, base, sizeof(int64_t) * (size_t)ndim);
    for (int d = 0; d < ndim; d++)
        ys.dim[d] = base[d];
    ys.dim[axis] = 0;
    for (int i = 0; i < n; i++) {
        dims[axis] = widths[i];
        xs[i] = make_random(dev, ndim, dims, -1, 1);
        dxs[i] = make(dev, PD_F32, ndim, dims);
        fill_nan(dxs[i]);
        ys.dim[axis] += widths[i];
    }
    pd_tensor *y = make(dev, PD_F32, ndim, ys.dim);
    fill_nan(y);
    float *want = malloc(sizeof(float) * (size_t)pd_shape_numel(&ys));
    assert_non_null(want);
    concat_naive(axis, n, xs, &ys, want);

    assert_int_equal(dev->ops->concat_forward(dev, axis, n, (const pd_tensor *const *)xs, y), PD_OK);
    assert_memory_equal(y->data, want, sizeof(float) * (size_t)pd_shape_numel(&ys));

    /* The split is the exact inverse. */
    assert_int_equal(dev->ops->concat_backward(dev, axis, n, y, dxs), PD_OK);
    for (int i = 0; i < n; i++)
        assert_memory_equal(dxs[i]->data, xs[i]->data, pd_tensor_nbytes(xs[i]));

    free(want);
    pd_tensor_destroy(y);
    for (int i = 0; i < n; i++) {
        pd_tensor_destroy(xs[i]);
        pd_tensor_destroy(dxs[i]);
    }
}

static void test_concat_axes(void **state)
{
    fixture *f = *state;
    const int64_t base4[4] = {2, 3, 4, 5};
    const int64_t w3[3] = {3, 1, 4};
    rng_seed(1);
    for (int axis = 0; axis < 4; axis++)
        check_concat_case(f->dev, 4, base4, axis, 3, w3);
    const int64_t base2[2] = {7, 6};
    const int64_t w2[2] = {5, 2};
    check_concat_case(f->dev, 2, base2, 0, 2, w2);
    check_concat_case(f->dev, 2, base2, 1, 2, w2);
    const int64_t base1[1] = {9};
    const int64_t w4[4] = {1, 2, 3, 4};
    check_concat_case(f->dev, 1, base1, 0, 4, w4);
    /* Large enough for the threaded path (> 1 MiB). */
    const int64_t big[3] = {128, 0, 1024};
    const int64_t wb[2] = {3, 2};
    check_concat_case(f->dev, 3, big, 1, 2, wb);
    /* One part is a copy. */
    const int64_t one[1] = {4};
    check_concat_case(f->dev, 3, base4, 2, 1, one);
}

static void test_concat_i32(void **state)
{
    fixture *f = *state;
    int64_t da[2] = {2, 2}, db[2] = {2, 1}, dy[2] = {2, 3};
    pd_tensor *a = make(f->dev, PD_I32, 2, da), *b = make(f->dev, PD_I32, 2, db), *y = make(f->dev, PD_I32, 2, dy);
    const int32_t av[4] = {1, 2, 3, 4}, bv[2] = {5, 6}, want[6] = {1, 2, 5, 3, 4, 6};
    memcpy(a->data, av, sizeof(av));
    memcpy(b->data, bv, sizeof(bv));
    const pd_tensor *xs[2] = {a, b};
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, xs, y), PD_OK);
    assert_memory_equal(y->data, want, sizeof(want));
    pd_tensor_destroy(a);
    pd_tensor_destroy(b);
    pd_tensor_destroy(y);
}

/* Parts without data are skipped in the split; their shapes place the rest,
 * wherever they stand. */
static void test_concat_backward_skips(void **state)
{
    fixture *f = *state;
    int64_t d1[2] = {3, 1}, d2[2] = {3, 2}, dy_dims[2] = {3, 6};
    rng_seed(2);
    pd_tensor *dy = make_random(f->dev, 2, dy_dims, -1, 1);
    pd_tensor *a = make(f->dev, PD_F32, 2, d1), *c = make(f->dev, PD_F32, 2, d2);
    pd_tensor skip1, skip2;
    pd_shape w1 = pd_shape_make(2, (int64_t)3, (int64_t)1), w2 = pd_shape_make(2, (int64_t)3, (int64_t)2);
    const float *g = dy->data;

    pd_tensor_view(&skip1, f->dev, PD_F32, &w1, NULL);
    pd_tensor_view(&skip2, f->dev, PD_F32, &w2, NULL);
    /* widths 1, 2 (skipped), 1 (skipped), 2 */
    pd_tensor *dxs[4] = {a, &skip2, &skip1, c};
    assert_int_equal(f->dev->ops->concat_backward(f->dev, 1, 4, dy, dxs), PD_OK);
    for (int r = 0; r < 3; r++) {
        assert_true(((float *)a->data)[r] == g[r * 6 + 0]);
        assert_true(((float *)c->data)[r * 2 + 0] == g[r * 6 + 4]);
        assert_true(((float *)c->data)[r * 2 + 1] == g[r * 6 + 5]);
    }
    /* Skipped parts on both sides of a wanted one: widths 2 (skipped), 1, 1 (skipped), 2. */
    pd_tensor *apart[4] = {&skip2, a, &skip1, c};
    assert_int_equal(f->dev->ops->concat_backward(f->dev, 1, 4, dy, apart), PD_OK);
    for (int r = 0; r < 3; r++) {
        assert_true(((float *)a->data)[r] == g[r * 6 + 2]);
        assert_true(((float *)c->data)[r * 2 + 1] == g[r * 6 + 5]);
    }
    /* A missing entry is an error, not a guess. */
    pd_tensor *missing[3] = {NULL, a, c};
    pd_error_clear();
    assert_int_equal(f->dev->ops->concat_backward(f->dev, 1, 3, dy, missing), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "dx[0] is missing"));
    pd_tensor_destroy(dy);
    pd_tensor_destroy(a);
    pd_tensor_destroy(c);
}

static void test_concat_errors(void **state)
{
    fixture *f = *state;
    int64_t da[3] = {2, 3, 4}, db[3] = {2, 3, 5}, dbad[3] = {2, 2, 4}, dy[3] = {2, 6, 4};
    pd_tensor *a = make(f->dev, PD_F32, 3, da), *b = make(f->dev, PD_F32, 3, da);
    pd_tensor *bad = make(f->dev, PD_F32, 3, db), *small = make(f->dev, PD_F32, 3, dbad);
    pd_tensor *y = make(f->dev, PD_F32, 3, dy), *yi = make(f->dev, PD_I32, 3, dy);
    const pd_tensor *ok[2] = {a, b}, *misfit[2] = {a, bad}, *sum_wrong[2] = {a, small};

    pd_error_clear();
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, misfit, y), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "x[1]"));
    assert_non_null(strstr(pd_last_error(), "dimension 2"));

    pd_error_clear();
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, sum_wrong, y), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "span 5"));

    pd_error_clear();
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, ok, yi), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "x[0]"));

    assert_int_equal(f->dev->ops->concat_forward(f->dev, 3, 2, ok, y), PD_EINVAL);
    assert_int_equal(f->dev->ops->concat_forward(f->dev, -1, 2, ok, y), PD_EINVAL);
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 0, ok, y), PD_EINVAL);
    const pd_tensor *missing[2] = {a, NULL};
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, missing, y), PD_EINVAL);
    assert_int_equal(f->dev->ops->concat_forward(f->dev, 1, 2, ok, y), PD_OK);

    /* The split checks the same way. */
    pd_tensor *dxs[2] = {a, bad};
    pd_error_clear();
    assert_int_equal(f->dev->ops->concat_backward(f->dev, 1, 2, y, dxs), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "dx[1]"));

    pd_tensor_destroy(a);
    pd_tensor_destroy(b);
    pd_tensor_destroy(bad);
    pd_tensor_destroy(small);
    pd_tensor_destroy(y);
    pd_tensor_destroy(yi);
}

/* ------------------------------------------------------------- embedding */

static void test_embedding_forward_backward(void **state)
{
    fixture *f = *state;
    /* Small, and large enough for the threaded paths (n * D > 65536). */
    const int64_t cases[][4] = {{2, 3, 7, 5}, {20, 16, 11, 260}};
    rng_seed(3);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t n = cases[c][0], t = cases[c][1], vocab = cases[c][2], dim = cases[c][3];
        int64_t id_dims[2] = {n, t}, table_dims[2] = {vocab, dim}, y_dims[3] = {n, t, dim};
        pd_tensor *ids = make(f->dev, PD_I32, 2, id_dims);
        pd_tensor *table = make_random(f->dev, 2, table_dims, -1, 1);
        pd_tensor *y = make(f->dev, PD_F32, 3, y_dims);
        pd_tensor *dy = make_random(f->dev, 3, y_dims, -1, 1);
        pd_tensor *dtable = make(f->dev, PD_F32, 2, table_dims), *again = make(f->dev, PD_F32, 2, table_dims);
        int32_t *id = ids->data;
        const float *tab = table->data, *g = dy->data;

        /* Many repeats (vocab < positions), id 0 and V-1 present, one row unused. */
        for (int64_t p = 0; p < n * t; p++)
            id[p] = (int32_t)((p * 5 + p / 3) % (vocab - 1));
        id[n * t - 1] = (int32_t)(vocab - 1);
        fill_nan(y);
        fill_nan(dtable);

        assert_int_equal(f->dev->ops->embedding_forward(f->dev, ids, table, y), PD_OK);
        for (int64_t p = 0; p < n * t; p++)
            assert_memory_equal((float *)y->data + p * dim, tab + id[p] * dim, sizeof(float) * (size_t)dim);

        assert_int_equal(f->dev->ops->embedding_backward(f->dev, ids, dy, dtable), PD_OK);
        double *want = calloc((size_t)(vocab * dim), sizeof(double));
        assert_non_null(want);
        for (int64_t p = 0; p < n * t; p++)
            for (int64_t j = 0; j < dim; j++)
                want[id[p] * dim + j] += g[p * dim + j];
        for (int64_t e = 0; e < vocab * dim; e++)
            assert_true(fabs(((float *)dtable->data)[e] - want[e]) <= 1e-5 * (1.0 + fabs(want[e])));
        /* Rows no position names stay zero. */
        for (int64_t v = 0; v < vocab; v++) {
            int used = 0;
            for (int64_t p = 0; p < n * t; p++)
                used |= id[p] == v;
            if (!used)
                for (int64_t j = 0; j < dim; j++)
                    assert_true(((float *)dtable->data)[v * dim + j] == 0.0f);
        }
        /* Deterministic: the same bits on a second run. */
        fill_nan(again);
        assert_int_equal(f->dev->ops->embedding_backward(f->dev, ids, dy, again), PD_OK);
        assert_memory_equal(again->data, dtable->data, pd_tensor_nbytes(dtable));

        free(want);
        pd_tensor_destroy(ids);
        pd_tensor_destroy(table);
        pd_tensor_destroy(y);
        pd_tensor_destroy(dy);
        pd_tensor_destroy(dtable);
        pd_tensor_destroy(again);
    }
}

static void test_embedding_errors(void **state)
{
    fixture *f = *state;
    int64_t id_dims[2] = {2, 3}, table_dims[2] = {4, 2}, y_dims[3] = {2, 3, 2}, y_bad[3] = {2, 3, 3};
    pd_tensor *ids = make(f->dev, PD_I32, 2, id_dims), *fids = make(f->dev, PD_F32, 2, id_dims);
    pd_tensor *table = make_random(f->dev, 2, table_dims, -1, 1);
    pd_tensor *y = make(f->dev, PD_F32, 3, y_dims), *ybad = make(f->dev, PD_F32, 3, y_bad);
    int32_t *id = ids->data;

    for (int p = 0; p < 6; p++)
        id[p] = p % 4;
    id[5] = 4; /* position [1,2], one past the vocabulary */
    pd_error_clear();
    assert_int_equal(f->dev->ops->embedding_forward(f->dev, ids, table, y), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "ids[1,2] = 4"));
    id[5] = 0;
    id[1] = -1;
    pd_error_clear();
    assert_int_equal(f->dev->ops->embedding_backward(f->dev, ids, y, table), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "ids[0,1] = -1"));
    id[1] = 1;

    assert_int_equal(f->dev->ops->embedding_forward(f->dev, ids, table, ybad), PD_ESHAPE);
    assert_int_equal(f->dev->ops->embedding_forward(f->dev, fids, table, y), PD_ESHAPE);
    assert_int_equal(f->dev->ops->embedding_backward(f->dev, ids, ybad, table), PD_ESHAPE);
    assert_int_equal(f->dev->ops->embedding_forward(f->dev, ids, table, y), PD_OK);

    pd_tensor_destroy(ids);
    pd_tensor_destroy(fids);
    pd_tensor_destroy(table);
    pd_tensor_destroy(y);
    pd_tensor_destroy(ybad);
}

/* ------------------------------------------------------------- LSTM cell */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

typedef struct cell_data {
    int64_t n, hid;
    pd_tensor *gates, *c_prev, *act, *c, *h, *dh, *dc, *dgates, *dc_prev;
} cell_data;

static void cell_make(pd_device *dev, cell_data *d, int64_t n, int64_t hid)
{
    int64_t g[2] = {n, 4 * hid}, s[2] = {n, hid};
    d->n = n;
    d->hid = hid;
    d->gates = make_random(dev, 2, g, -2, 2);
    d->c_prev = make_random(dev, 2, s, -1.5, 1.5);
    d->act = make(dev, PD_F32, 2, g);
    d->c = make(dev, PD_F32, 2, s);
    d->h = make(dev, PD_F32, 2, s);
    d->dh = make_random(dev, 2, s, -1, 1);
    d->dc = make_random(dev, 2, s, -1, 1);
    d->dgates = make(dev, PD_F32, 2, g);
    d->dc_prev = make(dev, PD_F32, 2, s);
    fill_nan(d->act);
    fill_nan(d->c);
    fill_nan(d->h);
    fill_nan(d->dgates);
    fill_nan(d->dc_prev);
}

static void cell_free(cell_data *d)
{
    pd_tensor *all[] = {d->gates, d->c_prev, d->act, d->c, d->h, d->dh, d->dc, d->dgates, d->dc_prev};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pd_tensor_destroy(all[i]);
}

#define AT(t, i) (((const float *)(t)->data)[i])

static void test_lstm_cell_reference(void **state)
{
    fixture *f = *state;
    const int64_t shapes[][2] = {{3, 5}, {1, 1}, {64, 600}}; /* the last runs threaded */
    rng_seed(4);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        cell_data d;
        cell_make(f->dev, &d, shapes[s][0], shapes[s][1]);
        int64_t n = d.n, hid = d.hid;
        assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, d.gates, d.c_prev, d.act, d.c, d.h), PD_OK);
        assert_int_equal(
            f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, d.dc, d.dgates, d.dc_prev), PD_OK);
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < hid; j++) {
                int64_t e = r * hid + j, gb = r * 4 * hid;
                double i = sigm(AT(d.gates, gb + j)), fg = sigm(AT(d.gates, gb + hid + j));
                double g = tanh(AT(d.gates, gb + 2 * hid + j)), o = sigm(AT(d.gates, gb + 3 * hid + j));
                double cp = AT(d.c_prev, e), c = fg * cp + i * g, h = o * tanh(c);
                assert_true(fabs(AT(d.act, gb + j) - i) < 1e-6);
                assert_true(fabs(AT(d.act, gb + hid + j) - fg) < 1e-6);
                assert_true(fabs(AT(d.act, gb + 2 * hid + j) - g) < 1e-6);
                assert_true(fabs(AT(d.act, gb + 3 * hid + j) - o) < 1e-6);
                assert_true(fabs(AT(d.c, e) - c) < 1e-5);
                assert_true(fabs(AT(d.h, e) - h) < 1e-5);

                double dh = AT(d.dh, e), dct = dh * o * (1 - tanh(c) * tanh(c)) + AT(d.dc, e);
                double want[4] = {dct * g * i * (1 - i), dct * cp * fg * (1 - fg), dct * i * (1 - g * g),
                                  dh * tanh(c) * o * (1 - o)};
                for (int q = 0; q < 4; q++)
                    assert_true(fabs(AT(d.dgates, gb + q * hid + j) - want[q]) < 1e-5);
                assert_true(fabs(AT(d.dc_prev, e) - dct * fg) < 1e-5);
            }
        cell_free(&d);
    }
}

/* dc = NULL means no gradient arrives from step t+1: the same as zeros. */
static void test_lstm_cell_null_dc(void **state)
{
    fixture *f = *state;
    cell_data d;
    rng_seed(5);
    cell_make(f->dev, &d, 4, 3);
    assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, d.gates, d.c_prev, d.act, d.c, d.h), PD_OK);
    assert_int_equal(
        f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, NULL, d.dgates, d.dc_prev), PD_OK);
    int64_t g[2] = {4, 12}, s[2] = {4, 3};
    pd_tensor *dg0 = make(f->dev, PD_F32, 2, g), *dcp0 = make(f->dev, PD_F32, 2, s);
    memset(d.dc->data, 0, pd_tensor_nbytes(d.dc));
    assert_int_equal(f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, d.dc, dg0, dcp0), PD_OK);
    assert_memory_equal(dg0->data, d.dgates->data, pd_tensor_nbytes(dg0));
    assert_memory_equal(dcp0->data, d.dc_prev->data, pd_tensor_nbytes(dcp0));
    pd_tensor_destroy(dg0);
    pd_tensor_destroy(dcp0);
    cell_free(&d);
}

/* L = sum(h * dh) + sum(c * dc): its gradient with respect to the gates and
 * c_prev is what the backward pass computes; compare with central differences
 * of the kernel's own forward pass. */
static double cell_loss(pd_device *dev, cell_data *d)
{
    double l = 0;
    assert_int_equal(dev->ops->lstm_cell_forward(dev, d->gates, d->c_prev, d->act, d->c, d->h), PD_OK);
    for (int64_t e = 0; e < d->n * d->hid; e++)
        l += (double)AT(d->h, e) * AT(d->dh, e) + (double)AT(d->c, e) * AT(d->dc, e);
    return l;
}

static void check_fd(pd_device *dev, cell_data *d, pd_tensor *x, const pd_tensor *analytic)
{
    const float eps = 1e-2f;
    float *p = x->data;
    double max_err = 0;
    for (int64_t e = 0; e < pd_tensor_numel(x); e++) {
        float keep = p[e];
        p[e] = keep + eps;
        double up = cell_loss(dev, d);
        p[e] = keep - eps;
        double down = cell_loss(dev, d);
        p[e] = keep;
        double num = (up - down) / (2.0 * ((double)(keep + eps) - (double)keep));
        double err = fabs(num - AT(analytic, e)) / (1.0 + fabs(num));
        max_err = err > max_err ? err : max_err;
    }
    assert_true(max_err < 2e-3);
}

static void test_lstm_cell_finite_difference(void **state)
{
    fixture *f = *state;
    cell_data d;
    rng_seed(6);
    cell_make(f->dev, &d, 3, 4);
    cell_loss(f->dev, &d);
    assert_int_equal(
        f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, d.dc, d.dgates, d.dc_prev), PD_OK);
    int64_t g[2] = {3, 16}, s[2] = {3, 4};
    pd_tensor *dg = make(f->dev, PD_F32, 2, g), *dcp = make(f->dev, PD_F32, 2, s);
    memcpy(dg->data, d.dgates->data, pd_tensor_nbytes(dg));
    memcpy(dcp->data, d.dc_prev->data, pd_tensor_nbytes(dcp));
    check_fd(f->dev, &d, d.gates, dg);
    check_fd(f->dev, &d, d.c_prev, dcp);
    pd_tensor_destroy(dg);
    pd_tensor_destroy(dcp);
    cell_free(&d);
}

static void test_lstm_cell_errors(void **state)
{
    fixture *f = *state;
    cell_data d;
    rng_seed(7);
    cell_make(f->dev, &d, 2, 3);
    int64_t wrong[2] = {2, 9}, wrong_c[2] = {2, 4};
    pd_tensor *g_bad = make(f->dev, PD_F32, 2, wrong), *c_bad = make(f->dev, PD_F32, 2, wrong_c);

    pd_error_clear();
    assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, g_bad, d.c_prev, d.act, d.c, d.h), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "gates"));
    assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, d.gates, d.c_prev, d.act, c_bad, d.h), PD_ESHAPE);
    assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, d.gates, d.c_prev, d.act, d.c, NULL), PD_EINVAL);
    assert_int_equal(f->dev->ops->lstm_cell_forward(f->dev, d.gates, d.c_prev, d.act, d.c, d.h), PD_OK);
    pd_error_clear();
    assert_int_equal(
        f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, c_bad, d.dgates, d.dc_prev), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "dc"));
    assert_int_equal(
        f->dev->ops->lstm_cell_backward(f->dev, d.act, d.c_prev, d.c, d.dh, d.dc, g_bad, d.dc_prev), PD_ESHAPE);
    pd_tensor_destroy(g_bad);
    pd_tensor_destroy(c_bad);
    cell_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concat_axes),
        cmocka_unit_test(test_concat_i32),
        cmocka_unit_test(test_concat_backward_skips),
        cmocka_unit_test(test_concat_errors),
        cmocka_unit_test(test_embedding_forward_backward),
        cmocka_unit_test(test_embedding_errors),
        cmocka_unit_test(test_lstm_cell_reference),
        cmocka_unit_test(test_lstm_cell_null_dc),
        cmocka_unit_test(test_lstm_cell_finite_difference),
        cmocka_unit_test(test_lstm_cell_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
