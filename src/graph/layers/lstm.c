/* Layer: one LSTM layer over a batch-first sequence, x [N,T,I] -> h [N,T,H],
 * zero initial h and c, parameters as PyTorch's nn.LSTM (weight_ih [4H,I],
 * weight_hh [4H,H], bias_ih, bias_hh [4H], all U(-1/sqrt(H), 1/sqrt(H)),
 * gates in the order i, f, g, o).
 *
 * Every time step is gemms on row blocks of x and h (a step's rows are
 * strided by T in the batch-first layout, which gemm's leading dimensions
 * express without copies) plus the device's LSTM cell. The cell reads and
 * writes contiguous [N,H] blocks, so h_t moves between the cell's buffer and
 * the strided output through a product with the identity (the only strided
 * copy the device table offers). Saved per step: activated gates and cells;
 * the backward pass runs through time from t = T-1 down to 0. */
#include "config.h"

#include <assert.h>
#include <math.h>

#include "graph/pd_layer.h"

typedef struct lstm_hparams {
    int hidden;
} lstm_hparams;

static_assert(sizeof(lstm_hparams) <= PD_LAYER_HPARAMS_BYTES, "lstm hyper-parameters exceed the layer's room");

enum { SAVED_ACT, SAVED_CELLS, SAVED_WORK };
enum { W_IH, W_HH, B_IH, B_HH };

/* The sizes of one layer instance. */
typedef struct lstm_dims {
    int64_t n, t, in, hid;
} lstm_dims;

/* Views into the work buffer (saved buffer SAVED_WORK), in this order. */
typedef struct lstm_work {
    pd_tensor gates; /* [N,4H] pre-activations; dgates in the backward pass */
    pd_tensor h;     /* [N,H] the cell's h_t; dh in the backward pass */
    pd_tensor dc[2]; /* [N,H] the gradient into c, alternating between steps */
    pd_tensor zeros; /* [N,H] c_{-1} */
    pd_tensor bias;  /* [4H] b_ih + b_hh */
    pd_tensor ones;  /* [max(N,H)] */
    pd_tensor eye;   /* [H,H] identity */
} lstm_work;

static lstm_dims dims_of(const pd_layer *l)
{
    const lstm_hparams *hp = (const lstm_hparams *)l->hparams;
    lstm_dims d = {l->in_shape[0].dim[0], l->in_shape[0].dim[1], l->in_shape[0].dim[2], hp->hidden};
    return d;
}

static int64_t ones_len(const lstm_dims *d) { return d->n > d->hid ? d->n : d->hid; }

static int64_t work_elems(const lstm_dims *d)
{
    return 4 * d->n * d->hid + 4 * d->n * d->hid + 4 * d->hid + ones_len(d) + d->hid * d->hid;
}

/* Lays the views over the work buffer; `data` is the buffer (NULL in setup). */
static void work_views(const lstm_dims *d, pd_device *dev, float *data, lstm_work *w)
{
    pd_shape nh = pd_shape_make(2, d->n, d->hid);
    pd_shape n4h = pd_shape_make(2, d->n, 4 * d->hid);
    pd_shape h4 = pd_shape_make(1, 4 * d->hid);
    pd_shape ones = pd_shape_make(1, ones_len(d));
    pd_shape hh = pd_shape_make(2, d->hid, d->hid);
    float *p = data;

    pd_tensor_view(&w->gates, dev, PD_F32, &n4h, p);
    p += 4 * d->n * d->hid;
    pd_tensor_view(&w->h, dev, PD_F32, &nh, p);
    p += d->n * d->hid;
    for (int i = 0; i < 2; i++) {
        pd_tensor_view(&w->dc[i], dev, PD_F32, &nh, p);
        p += d->n * d->hid;
    }
    pd_tensor_view(&w->zeros, dev, PD_F32, &nh, p);
    p += d->n * d->hid;
    pd_tensor_view(&w->bias, dev, PD_F32, &h4, p);
    p += 4 * d->hid;
    pd_tensor_view(&w->ones, dev, PD_F32, &ones, p);
    p += ones_len(d);
    pd_tensor_view(&w->eye, dev, PD_F32, &hh, p);
}

/* The step-t [N,X] slice of a per-step buffer [T,N,X]. */
static void step_view(const pd_tensor *all, pd_device *dev, int64_t t, pd_tensor *out)
{
    pd_shape s = pd_shape_make(2, all->shape.dim[1], all->shape.dim[2]);
    pd_tensor_view(out, dev, PD_F32, &s, (float *)all->data + t * s.dim[0] * s.dim[1]);
}

static pd_status lstm_setup(pd_layer *l)
{
    const lstm_hparams *hp = (const lstm_hparams *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32)
        return PD_LAYER_SHAPE_ERROR(l, "input must be f32, got %s", pd_dtype_name(l->in_dtype[0]));
    if (in->ndim != 3 || in->dim[0] <= 0 || in->dim[1] <= 0 || in->dim[2] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "input must be a non-empty batch-first sequence [N,T,I], got %s",
                                    pd_shape_format(in, buf, sizeof(buf)));
    if (hp->hidden <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "hidden size %d must be positive", hp->hidden);

    lstm_dims d = dims_of(l);
    float bound = (float)(1.0 / sqrt((double)d.hid));
    pd_shape w_ih = pd_shape_make(2, 4 * d.hid, d.in);
    pd_shape w_hh = pd_shape_make(2, 4 * d.hid, d.hid);
    pd_shape b = pd_shape_make(1, 4 * d.hid);
    PD_CHECK(pd_layer_declare_param(l, "weight_ih", &w_ih, true, PD_INIT_UNIFORM, bound, NULL));
    PD_CHECK(pd_layer_declare_param(l, "weight_hh", &w_hh, true, PD_INIT_UNIFORM, bound, NULL));
    PD_CHECK(pd_layer_declare_param(l, "bias_ih", &b, true, PD_INIT_UNIFORM, bound, NULL));
    PD_CHECK(pd_layer_declare_param(l, "bias_hh", &b, true, PD_INIT_UNIFORM, bound, NULL));

    pd_shape act = pd_shape_make(3, d.t, d.n, 4 * d.hid);
    pd_shape cells = pd_shape_make(3, d.t, d.n, d.hid);
    pd_shape work = pd_shape_make(1, work_elems(&d));
    int index;
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, &act, &index));
    assert(index == SAVED_ACT);
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, &cells, &index));
    assert(index == SAVED_CELLS);
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, &work, &index));
    assert(index == SAVED_WORK);

    l->out_shape = pd_shape_make(3, d.n, d.t, d.hid);
    l->out_dtype = PD_F32;
    return PD_OK;
}

/* Fills the constant views: ones, zeros, and the identity, whose diagonal is
 * a rank-1 product written with leading dimension H+1. */
static pd_status prepare_constants(pd_device *dev, const lstm_dims *d, lstm_work *w)
{
    const float *ones = w->ones.data;

    PD_CHECK(dev->ops->fill(dev, &w->ones, 1.0f));
    PD_CHECK(dev->ops->fill(dev, &w->zeros, 0.0f));
    PD_CHECK(dev->ops->fill(dev, &w->eye, 0.0f));
    return dev->ops->gemm(dev, false, false, d->hid, 1, 1, 1.0f, ones, 1, ones, 1, 0.0f, w->eye.data, d->hid + 1);
}

static pd_status lstm_forward(pd_layer *l, pd_device *dev, bool training)
{
    lstm_dims d = dims_of(l);
    lstm_work w;
    const int64_t n = d.n, steps = d.t, in = d.in, hid = d.hid, g4 = 4 * hid;
    const float *x = l->in[0]->data, *w_ih = l->params[W_IH]->value.data, *w_hh = l->params[W_HH]->value.data;
    float *y = l->out->data;

    work_views(&d, dev, l->saved[SAVED_WORK].data, &w);
    PD_CHECK(prepare_constants(dev, &d, &w));
    PD_CHECK(dev->ops->add(dev, &l->params[B_IH]->value, &l->params[B_HH]->value, &w.bias));
    const float *ones = w.ones.data, *bias = w.bias.data, *eye = w.eye.data;
    float *gates = w.gates.data, *h = w.h.data;

    for (int64_t t = 0; t < steps; t++) {
        pd_tensor act, cell, cell_prev;
        step_view(&l->saved[SAVED_ACT], dev, t, &act);
        step_view(&l->saved[SAVED_CELLS], dev, t, &cell);
        if (t > 0)
            step_view(&l->saved[SAVED_CELLS], dev, t - 1, &cell_prev);

        /* gates = 1 b^T + x_t W_ih^T + h_{t-1} W_hh^T */
        PD_CHECK(dev->ops->gemm(dev, false, false, n, g4, 1, 1.0f, ones, 1, bias, g4, 0.0f, gates, g4));
        PD_CHECK(dev->ops->gemm(dev, false, true, n, g4, in, 1.0f, x + t * in, steps * in, w_ih, in, 1.0f, gates,
                                g4));
        if (t > 0)
            PD_CHECK(dev->ops->gemm(dev, false, true, n, g4, hid, 1.0f, h, hid, w_hh, hid, 1.0f, gates, g4));
        PD_CHECK(dev->ops->lstm_cell_forward(dev, &w.gates, t > 0 ? &cell_prev : &w.zeros, &act, &cell, &w.h));
        /* y[:, t, :] = h_t */
        PD_CHECK(dev->ops->gemm(dev, false, false, n, hid, hid, 1.0f, h, hid, eye, hid, 0.0f, y + t * hid,
                                steps * hid));
    }
    return PD_OK;
}

static pd_status lstm_backward(pd_layer *l, pd_device *dev)
{
    lstm_dims d = dims_of(l);
    lstm_work w;
    const int64_t n = d.n, steps = d.t, in = d.in, hid = d.hid, g4 = 4 * hid;
    const float *x = l->in[0]->data, *y = l->out->data, *dy = l->d_out->data;
    const float *w_ih = l->params[W_IH]->value.data, *w_hh = l->params[W_HH]->value.data;
    float *dx = l->d_in[0] ? l->d_in[0]->data : NULL;
    float *dw_ih = l->params[W_IH]->grad.data, *dw_hh = l->params[W_HH]->grad.data;
    float *db = l->params[B_IH]->grad.data;

    work_views(&d, dev, l->saved[SAVED_WORK].data, &w);
    PD_CHECK(prepare_constants(dev, &d, &w));
    PD_CHECK(dev->ops->fill(dev, &l->params[W_IH]->grad, 0.0f));
    PD_CHECK(dev->ops->fill(dev, &l->params[W_HH]->grad, 0.0f));
    PD_CHECK(dev->ops->fill(dev, &l->params[B_IH]->grad, 0.0f));
    const float *ones = w.ones.data, *eye = w.eye.data;
    float *dgates = w.gates.data, *dh = w.h.data;

    for (int64_t t = steps - 1; t >= 0; t--) {
        pd_tensor act, cell, cell_prev;
        step_view(&l->saved[SAVED_ACT], dev, t, &act);
        step_view(&l->saved[SAVED_CELLS], dev, t, &cell);
        if (t > 0)
            step_view(&l->saved[SAVED_CELLS], dev, t - 1, &cell_prev);
        pd_tensor *dc_in = t < steps - 1 ? &w.dc[t % 2] : NULL;
        pd_tensor *dc_out = &w.dc[(t + 1) % 2];

        /* dh_t = dy[:, t, :] (+ dgates_{t+1} W_hh, already in dh for t < T-1) */
        PD_CHECK(dev->ops->gemm(dev, false, false, n, hid, hid, 1.0f, dy + t * hid, steps * hid, eye, hid,
                                t < steps - 1 ? 1.0f : 0.0f, dh, hid));
        PD_CHECK(dev->ops->lstm_cell_backward(dev, &act, t > 0 ? &cell_prev : &w.zeros, &cell, &w.h, dc_in,
                                              &w.gates, dc_out));
        /* dW_ih += dgates^T x_t; dW_hh += dgates^T h_{t-1}; db += 1^T dgates */
        PD_CHECK(dev->ops->gemm(dev, true, false, g4, in, n, 1.0f, dgates, g4, x + t * in, steps * in, 1.0f, dw_ih,
                                in));
        if (t > 0)
            PD_CHECK(dev->ops->gemm(dev, true, false, g4, hid, n, 1.0f, dgates, g4, y + (t - 1) * hid, steps * hid,
                                    1.0f, dw_hh, hid));
        PD_CHECK(dev->ops->gemm(dev, false, false, 1, g4, n, 1.0f, ones, n, dgates, g4, 1.0f, db, g4));
        /* dx_t = dgates W_ih; dh_{t-1} = dgates W_hh */
        if (dx)
            PD_CHECK(dev->ops->gemm(dev, false, false, n, in, g4, 1.0f, dgates, g4, w_ih, in, 0.0f, dx + t * in,
                                    steps * in));
        if (t > 0)
            PD_CHECK(dev->ops->gemm(dev, false, false, n, hid, g4, 1.0f, dgates, g4, w_hh, hid, 0.0f, dh, hid));
    }
    /* Both biases enter the gates as one sum: equal gradients. */
    return dev->ops->axpby(dev, 1.0f, &l->params[B_IH]->grad, 0.0f, &l->params[B_HH]->grad);
}

/* Per sample and step: the gate products, 2 x 4H x I, and 2 x 4H x H for
 * the hidden state (none at t = 0, where h is zero); 4H for the bias; 9H in
 * the cell (three sigmoids, two tanh, c = f*c + i*g, h = o*tanh(c)). The
 * implementation's copies through the identity are not model arithmetic. */
static int64_t lstm_flops(const pd_layer *l)
{
    lstm_dims d = dims_of(l);
    int64_t per_sample = d.t * (8 * d.hid * d.in + 13 * d.hid) + (d.t - 1) * 8 * d.hid * d.hid;

    return d.n * per_sample;
}

static const pd_layer_class lstm_class = {
    .type = "lstm",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = lstm_setup,
    .forward = lstm_forward,
    .backward = lstm_backward,
    .flops = lstm_flops,
};

pd_status pd_graph_lstm(pd_graph *g, const char *name, int x, int hidden, int *out)
{
    lstm_hparams hp = {0};

    hp.hidden = hidden;
    return pd_graph_add_layer(g, &lstm_class, name, &hp, sizeof(hp), 1, &x, out);
}
