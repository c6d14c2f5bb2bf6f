/* Unit tests of the CPU optimizer kernels: three steps of SGD (plain,
 * momentum, dampening, Nesterov, weight decay) and Adam / AdamW against
 * double-precision references unrolled from the torch.optim documentation,
 * plus hand-computed single steps and argument checks; then the optimizer
 * objects stepping a small graph. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <pipedream.h>

#include "core/pd_rng.h"

#define STEPS 3

static pd_device *dev;

static int open_cpu(void **state)
{
    return pd_device_open("cpu", &dev) == PD_OK ? 0 : -1;
}

static int close_cpu(void **state)
{
    pd_device_close(dev);
    return 0;
}

static pd_tensor *vec(int64_t n)
{
    pd_tensor *t = NULL;
    pd_shape s = pd_shape_make(1, n);
    assert_int_equal(pd_tensor_create(dev, PD_F32, &s, &t), PD_OK);
    return t;
}

static void fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    pd_rng r;
    pd_rng_init(&r, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = pd_rng_range(&r, lo, hi);
}

static void expect_close(const float *got, const double *want, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)got[i] - want[i]) > tol * fmax(1.0, fabs(want[i])))
            fail_msg("%s[%lld]: got %.9g, want %.9g", what, (long long)i, (double)got[i], want[i]);
}

/* torch.optim.SGD, one parameter, in double:
 *   d = g + wd*w
 *   if momentum: buf = d (first step) else momentum*buf + (1-dampening)*d
 *                d = nesterov ? d + momentum*buf : buf
 *   w = w - lr*d */
static void ref_sgd(const pd_sgd_desc *o, double *w, double *buf, bool *have_buf, const float *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] + (double)o->weight_decay * w[i];
        if (o->momentum != 0.0f) {
            if (!*have_buf)
                buf[i] = d;
            else
                buf[i] = o->momentum * buf[i] + (1.0 - o->dampening) * d;
            d = o->nesterov ? d + o->momentum * buf[i] : buf[i];
        }
        w[i] -= o->lr * d;
    }
    *have_buf = true;
}

static void run_sgd(pd_sgd_desc o, int64_t n)
{
    pd_tensor *w = vec(n), *g = vec(n), *buf = vec(n);
    double *wr = malloc((size_t)n * sizeof(double)), *br = malloc((size_t)n * sizeof(double));
    bool have_buf = false;

    fill_uniform(w->data, n, 1, -1, 1);
    for (int64_t i = 0; i < n; i++) {
        wr[i] = ((float *)w->data)[i];
        ((float *)buf->data)[i] = NAN; /* never read on the first step */
    }
    for (int step = 0; step < STEPS; step++) {
        fill_uniform(g->data, n, 100 + (uint64_t)step, -2, 2);
        o.first_step = step == 0;
        assert_int_equal(dev->ops->sgd_update(dev, &o, w, g, buf), PD_OK);
        ref_sgd(&o, wr, br, &have_buf, g->data, n);
        expect_close(w->data, wr, n, 1e-6, "sgd w");
        if (o.momentum != 0.0f)
            expect_close(buf->data, br, n, 1e-6, "sgd momentum buffer");
    }
    free(wr);
    free(br);
    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(buf);
}

static void test_sgd_hand(void **state)
{
    /* w = 1, g = 0.5, lr 0.1, momentum 0.9: w = 0.95 (buf 0.5), then with g = 0.5
     * again buf = 0.95, w = 0.855; with weight decay 0.1 the first step uses g = 0.6. */
    pd_tensor *w = vec(1), *g = vec(1), *buf = vec(1);
    pd_sgd_desc o = {.lr = 0.1f, .momentum = 0.9f, .first_step = true};
    *(float *)w->data = 1.0f;
    *(float *)g->data = 0.5f;
    assert_int_equal(dev->ops->sgd_update(dev, &o, w, g, buf), PD_OK);
    assert_float_equal(*(float *)w->data, 0.95f, 1e-7f);
    assert_float_equal(*(float *)buf->data, 0.5f, 1e-7f);
    o.first_step = false;
    assert_int_equal(dev->ops->sgd_update(dev, &o, w, g, buf), PD_OK);
    assert_float_equal(*(float *)buf->data, 0.95f, 1e-7f);
    assert_float_equal(*(float *)w->data, 0.855f, 1e-7f);

    pd_sgd_desc wd = {.lr = 0.1f, .weight_decay = 0.1f};
    *(float *)w->data = 1.0f;
    assert_int_equal(dev->ops->sgd_update(dev, &wd, w, g, NULL), PD_OK); /* no buffer without momentum */
    assert_float_equal(*(float *)w->data, 0.94f, 1e-7f);

    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(buf);
}

static void test_sgd_plain(void **state) { run_sgd((pd_sgd_desc){.lr = 0.05f}, 7); }

static void test_sgd_momentum(void **state) { run_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f}, 7); }

static void test_sgd_dampening(void **state)
{
    run_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.8f, .dampening = 0.5f}, 7);
}

static void test_sgd_nesterov(void **state)
{
    run_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f, .nesterov = true}, 7);
}

static void test_sgd_weight_decay(void **state)
{
    run_sgd((pd_sgd_desc){.lr = 0.05f, .weight_decay = 1e-2f}, 7);
    run_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-2f, .nesterov = true}, 7);
}

static void test_sgd_threaded(void **state)
{
    run_sgd((pd_sgd_desc){.lr = 0.01f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-3f}, 70001);
}

static void test_sgd_errors(void **state)
{
    pd_tensor *w = vec(3), *g = vec(3), *buf = vec(3), *g4 = vec(4);
    pd_sgd_desc damp_nesterov = {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .nesterov = true};
    pd_sgd_desc no_mom_nesterov = {.lr = 0.1f, .nesterov = true};
    pd_sgd_desc neg_lr = {.lr = -0.1f};
    pd_sgd_desc mom = {.lr = 0.1f, .momentum = 0.9f};
    fill_uniform(w->data, 3, 1, -1, 1);
    fill_uniform(g->data, 3, 2, -1, 1);

    assert_int_equal(dev->ops->sgd_update(dev, &damp_nesterov, w, g, buf), PD_EINVAL);
    assert_int_equal(dev->ops->sgd_update(dev, &no_mom_nesterov, w, g, buf), PD_EINVAL);
    assert_int_equal(dev->ops->sgd_update(dev, &neg_lr, w, g, buf), PD_EINVAL);
    assert_int_equal(dev->ops->sgd_update(dev, &mom, w, g, NULL), PD_EINVAL); /* momentum needs its buffer */
    assert_int_equal(dev->ops->sgd_update(dev, &mom, w, g4, buf), PD_ESHAPE);

    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(buf);
    pd_tensor_destroy(g4);
}

/* torch.optim.Adam / AdamW, one parameter, in double, step t from 1:
 *   AdamW: w *= 1 - lr*wd        Adam: g += wd*w
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
 *   w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps) */
static void ref_adam(const pd_adam_desc *o, double *w, double *m, double *v, const float *g, int64_t n)
{
    const double b1 = o->beta1, b2 = o->beta2, t = (double)o->step;
    for (int64_t i = 0; i < n; i++) {
        double grad = g[i];
        if (o->decoupled)
            w[i] *= 1.0 - (double)o->lr * o->weight_decay;
        else
            grad += (double)o->weight_decay * w[i];
        m[i] = b1 * m[i] + (1 - b1) * grad;
        v[i] = b2 * v[i] + (1 - b2) * grad * grad;
        double m_hat = m[i] / (1 - pow(b1, t));
        double v_hat = v[i] / (1 - pow(b2, t));
        w[i] -= o->lr * m_hat / (sqrt(v_hat) + o->eps);
    }
}

static void run_adam(pd_adam_desc o, int64_t n)
{
    pd_tensor *w = vec(n), *g = vec(n), *m = vec(n), *v = vec(n);
    double *wr = malloc((size_t)n * sizeof(double)), *mr = calloc((size_t)n, sizeof(double));
    double *vr = calloc((size_t)n, sizeof(double));

    fill_uniform(w->data, n, 3, -1, 1);
    for (int64_t i = 0; i < n; i++)
        wr[i] = ((float *)w->data)[i];
    assert_int_equal(pd_tensor_zero(m), PD_OK);
    assert_int_equal(pd_tensor_zero(v), PD_OK);
    for (int step = 1; step <= STEPS; step++) {
        fill_uniform(g->data, n, 200 + (uint64_t)step, -2, 2);
        o.step = step;
        assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_OK);
        ref_adam(&o, wr, mr, vr, g->data, n);
        expect_close(w->data, wr, n, 2e-6, "adam w");
        expect_close(m->data, mr, n, 1e-6, "adam m");
        expect_close(v->data, vr, n, 1e-6, "adam v");
    }
    free(wr);
    free(mr);
    free(vr);
    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(m);
    pd_tensor_destroy(v);
}

static void test_adam_first_step_is_sign(void **state)
{
    /* Bias correction makes the first step lr * g / (|g| + eps): -lr*sign(g). */
    pd_tensor *w = vec(2), *g = vec(2), *m = vec(2), *v = vec(2);
    pd_adam_desc o = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1};
    ((float *)w->data)[0] = 1.0f;
    ((float *)w->data)[1] = 1.0f;
    ((float *)g->data)[0] = 3.0f;
    ((float *)g->data)[1] = -0.02f;
    pd_tensor_zero(m);
    pd_tensor_zero(v);
    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_OK);
    assert_float_equal(((float *)w->data)[0], 0.99f, 1e-6f);
    assert_float_equal(((float *)w->data)[1], 1.01f, 1e-6f);
    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(m);
    pd_tensor_destroy(v);
}

static void test_adam(void **state)
{
    run_adam((pd_adam_desc){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}, 9);
}

static void test_adam_weight_decay(void **state)
{
    run_adam((pd_adam_desc){.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f}, 9);
}

static void test_adamw(void **state)
{
    run_adam((pd_adam_desc){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .decoupled = true},
             9);
}

static void test_adam_threaded(void **state)
{
    run_adam((pd_adam_desc){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f,
                            .decoupled = true},
             70001);
}

static void test_adam_errors(void **state)
{
    pd_tensor *w = vec(3), *g = vec(3), *m = vec(3), *v = vec(3), *v4 = vec(4);
    pd_adam_desc o = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0};
    pd_tensor_zero(w);
    pd_tensor_zero(g);
    pd_tensor_zero(m);
    pd_tensor_zero(v);

    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_EINVAL); /* step counts from 1 */
    o.step = 1;
    o.beta1 = 1.0f;
    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_EINVAL);
    o.beta1 = 0.9f;
    o.eps = -1.0f;
    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_EINVAL);
    o.eps = 1e-8f;
    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v4), PD_ESHAPE);
    assert_int_equal(dev->ops->adam_update(dev, &o, w, g, m, v), PD_OK);

    pd_tensor_destroy(w);
    pd_tensor_destroy(g);
    pd_tensor_destroy(m);
    pd_tensor_destroy(v);
    pd_tensor_destroy(v4);
}

/* ---- the optimizer objects on a graph --------------------------------------- */

/* x [8,4] -> batchnorm -> softmax cross-entropy against fixed labels: the
 * trainable parameters are bn.weight and bn.bias; the running statistics are
 * buffers the optimizer must leave alone. */
typedef struct tiny_net {
    pd_graph *g;
    int x, labels, loss;
} tiny_net;

static void tiny_net_build(tiny_net *t, bool allocate)
{
    pd_shape xs = pd_shape_make(2, (int64_t)8, (int64_t)4), ls = pd_shape_make(1, (int64_t)8);
    const pd_batchnorm_desc bn = {.eps = 1e-5f, .momentum = 0.1f};
    float xv[32];
    int32_t lv[8];
    int y;

    assert_int_equal(pd_graph_create(dev, 9, &t->g), PD_OK);
    assert_int_equal(pd_graph_input(t->g, "x", PD_F32, &xs, false, &t->x), PD_OK);
    assert_int_equal(pd_graph_input(t->g, "labels", PD_I32, &ls, false, &t->labels), PD_OK);
    assert_int_equal(pd_graph_batchnorm(t->g, "bn", t->x, &bn, &y), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(t->g, "loss", y, t->labels, &t->loss), PD_OK);
    if (!allocate)
        return;
    assert_int_equal(pd_graph_allocate(t->g), PD_OK);
    fill_uniform(xv, 32, 77, -1, 1);
    for (int i = 0; i < 8; i++)
        lv[i] = i % 4;
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(t->g, t->x), xv, sizeof(xv)), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(t->g, t->labels), lv, sizeof(lv)), PD_OK);
}

static float tiny_net_loss(tiny_net *t, int64_t minibatch)
{
    assert_int_equal(pd_graph_forward(t->g, minibatch, true), PD_OK);
    assert_int_equal(pd_graph_backward(t->g, minibatch, t->loss, NULL), PD_OK);
    return *(float *)pd_graph_output(t->g, t->loss)->data;
}

static void test_optimizer_sgd_on_graph(void **state)
{
    const pd_sgd_desc desc = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-2f, .first_step = false};
    tiny_net t;
    pd_optimizer *opt;
    pd_param **params;
    double w[2][4], buf[2][4];
    bool have_buf[2] = {false, false};

    tiny_net_build(&t, true);
    int n = pd_graph_params(t.g, &params);
    assert_int_equal(n, 4);
    /* first_step in the descriptor is managed by the optimizer */
    assert_int_equal(pd_optimizer_create_sgd(t.g, &desc, &opt), PD_OK);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 4; i++)
            w[p][i] = ((float *)params[p]->value.data)[i];
    for (int step = 0; step < 3; step++) {
        tiny_net_loss(&t, step);
        float running[2][4];
        memcpy(running[0], params[2]->value.data, sizeof(running[0]));
        memcpy(running[1], params[3]->value.data, sizeof(running[1]));
        for (int p = 0; p < 2; p++)
            ref_sgd(&desc, w[p], buf[p], &have_buf[p], params[p]->grad.data, 4);
        assert_int_equal(pd_optimizer_step(opt), PD_OK);
        for (int p = 0; p < 2; p++)
            expect_close(params[p]->value.data, w[p], 4, 1e-6, params[p]->name);
        assert_memory_equal(running[0], params[2]->value.data, sizeof(running[0]));
        assert_memory_equal(running[1], params[3]->value.data, sizeof(running[1]));
    }
    /* lr 0 freezes the weights */
    pd_optimizer_set_lr(opt, 0.0f);
    float before[4];
    memcpy(before, params[0]->value.data, sizeof(before));
    assert_int_equal(pd_optimizer_step(opt), PD_OK);
    assert_memory_equal(before, params[0]->value.data, sizeof(before));
    pd_optimizer_destroy(opt);
    pd_graph_destroy(t.g);
}

static void test_optimizer_adam_trains(void **state)
{
    const pd_adam_desc desc = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f,
                               .decoupled = true, .step = 42};
    tiny_net t;
    pd_optimizer *opt;
    pd_param **params;
    double w[4], m[4] = {0}, v[4] = {0};

    tiny_net_build(&t, true);
    pd_graph_params(t.g, &params);
    for (int i = 0; i < 4; i++)
        w[i] = ((float *)params[0]->value.data)[i];
    assert_int_equal(pd_optimizer_create_adam(t.g, &desc, &opt), PD_OK);
    float first = tiny_net_loss(&t, 0), loss = first;
    for (int step = 1; step <= 40; step++) {
        if (step <= STEPS) { /* the step count starts at 1 whatever the descriptor said */
            pd_adam_desc o = desc;
            o.step = step;
            ref_adam(&o, w, m, v, params[0]->grad.data, 4);
        }
        assert_int_equal(pd_optimizer_step(opt), PD_OK);
        if (step <= STEPS)
            expect_close(params[0]->value.data, w, 4, 2e-6, "bn.weight");
        loss = tiny_net_loss(&t, step);
    }
    /* gamma and beta alone can fit these labels only partly, but the loss must fall */
    if (!(loss < 0.8f * first))
        fail_msg("loss went from %g to %g in 40 Adam steps", (double)first, (double)loss);
    pd_optimizer_destroy(opt);
    pd_graph_destroy(t.g);
}

static void test_optimizer_errors(void **state)
{
    tiny_net t;
    pd_optimizer *opt = NULL;
    const pd_sgd_desc sgd = {.lr = 0.1f};
    const pd_adam_desc bad = {.lr = 0.1f, .beta1 = 1.0f, .beta2 = 0.999f};

    tiny_net_build(&t, false);
    assert_int_equal(pd_optimizer_create_sgd(t.g, &sgd, &opt), PD_ESTATE); /* before allocation */
    assert_null(opt);
    assert_int_equal(pd_graph_allocate(t.g), PD_OK);
    assert_int_equal(pd_optimizer_create_adam(t.g, &bad, &opt), PD_EINVAL);
    assert_int_equal(pd_optimizer_create_sgd(t.g, &(pd_sgd_desc){.lr = 0.1f, .nesterov = true}, &opt), PD_EINVAL);
    assert_null(opt);
    pd_optimizer_destroy(NULL);
    pd_graph_destroy(t.g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_hand),
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_dampening),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_weight_decay),
        cmocka_unit_test(test_sgd_threaded),
        cmocka_unit_test(test_sgd_errors),
        cmocka_unit_test(test_adam_first_step_is_sign),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_weight_decay),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adam_threaded),
        cmocka_unit_test(test_adam_errors),
        cmocka_unit_test(test_optimizer_sgd_on_graph),
        cmocka_unit_test(test_optimizer_adam_trains),
        cmocka_unit_test(test_optimizer_errors),
    };
    return cmocka_run_group_tests(tests, open_cpu, close_cpu);
}
