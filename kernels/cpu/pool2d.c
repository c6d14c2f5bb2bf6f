/* CPU kernels: 2-D max and average pooling (NCHW) with PyTorch's semantics:
 * max pooling pads with -inf and routes the gradient to the first maximum of
 * each window (recomputed from x in the backward pass exactly as the forward
 * pass chose it); average pooling clips windows at input + padding (which
 * matters with ceil_mode) and divides by the padded window
 * (count_include_pad) or by the input elements it covers. One thread owns a
 * whole (n, c) plane, so the backward scatter has no races. Max pooling with
 * 2x2 windows at stride 2 and no padding (VGG's) takes a fast path for the
 * windows that lie inside the input: the same comparisons, unrolled. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/pd_cpu.h"

#define POOL_PARALLEL_MIN 32768

typedef struct pool_geom {
    int64_t planes, h, w; /* planes = N*C */
    int64_t p, q;
    const pd_pool2d_desc *d;
} pool_geom;

/* One output position's window, clipped to the input, and its average
 * pooling divisor. */
typedef struct pool_window {
    int64_t h0, h1, w0, w1;
    int64_t divisor;
} pool_window;

/* The geometry of a pooling whose arguments pd_kernel_check_pool2d_*
 * accepted. */
static pool_geom pool_geometry(const pd_pool2d_desc *d, const pd_pool2d_dims *dims)
{
    return (pool_geom){.planes = dims->n * dims->c, .h = dims->h, .w = dims->w, .p = dims->p, .q = dims->q, .d = d};
}

static pool_window window_at(const pool_geom *g, int64_t p, int64_t q)
{
    const pd_pool2d_desc *d = g->d;
    pool_window win;
    int64_t h0 = p * d->stride_h - d->pad_h, w0 = q * d->stride_w - d->pad_w;
    int64_t h1 = h0 + d->kernel_h, w1 = w0 + d->kernel_w;

    /* PyTorch's AvgPool2d: the padded window stops at input + padding. */
    if (h1 > g->h + d->pad_h)
        h1 = g->h + d->pad_h;
    if (w1 > g->w + d->pad_w)
        w1 = g->w + d->pad_w;
    int64_t padded = (h1 - h0) * (w1 - w0);

    win.h0 = h0 > 0 ? h0 : 0;
    win.w0 = w0 > 0 ? w0 : 0;
    win.h1 = h1 < g->h ? h1 : g->h;
    win.w1 = w1 < g->w ? w1 : g->w;
    win.divisor = d->count_include_pad ? padded : (win.h1 - win.h0) * (win.w1 - win.w0);
    return win;
}

/* Whether v replaces `best` as a window's maximum so far: it is larger, or
 * it is the window's first NaN (a NaN counts as the maximum). Written with
 * comparisons only (x != x: x is NaN), which the compiler vectorises. */
static inline bool max_takes(float v, float best) { return v > best || (v != v && best == best); }

/* Index in the plane of the window's first maximum, or -1 for a window that
 * covers no input. */
static int64_t window_argmax(const pool_geom *g, const float *plane, const pool_window *win)
{
    int64_t best = -1;
    float best_value = -INFINITY;

    for (int64_t ih = win->h0; ih < win->h1; ih++)
        for (int64_t iw = win->w0; iw < win->w1; iw++) {
            float v = plane[ih * g->w + iw];
            if (best < 0 || max_takes(v, best_value)) {
                best = ih * g->w + iw;
                best_value = v;
            }
        }
    return best;
}

/* The output rows and columns [0, *p_fast) x [0, *q_fast) whose windows take
 * the 2x2 stride-2 fast path: all of them inside the input (ceil_mode may
 * add a clipped last row or column, which the general code handles). */
static void fast_extent(const pool_geom *g, int64_t *p_fast, int64_t *q_fast)
{
    const pd_pool2d_desc *d = g->d;
    bool fast = d->mode == PD_POOL_MAX && d->kernel_h == 2 && d->kernel_w == 2 && d->stride_h == 2 &&
                d->stride_w == 2 && d->pad_h == 0 && d->pad_w == 0;

    *p_fast = fast ? (g->p < g->h / 2 ? g->p : g->h / 2) : 0;
    *q_fast = fast ? (g->q < g->w / 2 ? g->q : g->w / 2) : 0;
}

/* The maximum of the 2x2 window top[0..1], bottom[0..1], by window_argmax's
 * rule in its row-major order. */
static inline float max_2x2(const float *top, const float *bottom)
{
    float best = top[0];

    best = max_takes(top[1], best) ? top[1] : best;
    best = max_takes(bottom[0], best) ? bottom[0] : best;
    return max_takes(bottom[1], best) ? bottom[1] : best;
}

/* Adds a 2x2 window's gradient to its first maximum (max_2x2's choice) in
 * grad_top[0..1], grad_bottom[0..1] and 0 to the other three: the gradient
 * moves to each element that takes over; selects only, which vectorise. */
static inline void route_2x2(const float *top, const float *bottom, float grad, float *grad_top, float *grad_bottom)
{
    float best = top[0], g0 = grad, g1, g2, g3;
    bool take = max_takes(top[1], best);

    best = take ? top[1] : best;
    g1 = take ? grad : 0.0f;
    g0 = take ? 0.0f : g0;
    take = max_takes(bottom[0], best);
    best = take ? bottom[0] : best;
    g2 = take ? grad : 0.0f;
    g0 = take ? 0.0f : g0;
    g1 = take ? 0.0f : g1;
    take = max_takes(bottom[1], best);
    g3 = take ? grad : 0.0f;
    g0 = take ? 0.0f : g0;
    g1 = take ? 0.0f : g1;
    g2 = take ? 0.0f : g2;
    grad_top[0] += g0;
    grad_top[1] += g1;
    grad_bottom[0] += g2;
    grad_bottom[1] += g3;
}

static void pool_plane_forward(const pool_geom *g, const float *plane, float *out)
{
    int64_t p_fast, q_fast;

    fast_extent(g, &p_fast, &q_fast);
    for (int64_t p = 0; p < g->p; p++) {
        int64_t q = 0;

        if (p < p_fast) {
            const float *top = plane + 2 * p * g->w, *bottom = top + g->w;
            float *row = out + p * g->q;
#pragma omp simd
            for (int64_t j = 0; j < q_fast; j++)
                row[j] = max_2x2(top + 2 * j, bottom + 2 * j);
            q = q_fast;
        }
        for (; q < g->q; q++) {
            pool_window win = window_at(g, p, q);
            float value;

            if (g->d->mode == PD_POOL_MAX) {
                int64_t at = window_argmax(g, plane, &win);
                value = at < 0 ? -INFINITY : plane[at];
            } else {
                double total = 0.0;
                for (int64_t ih = win.h0; ih < win.h1; ih++)
                    for (int64_t iw = win.w0; iw < win.w1; iw++)
                        total += plane[ih * g->w + iw];
                value = win.divisor > 0 ? (float)(total / (double)win.divisor) : 0.0f;
            }
            out[p * g->q + q] = value;
        }
    }
}

static void pool_plane_backward(const pool_geom *g, const float *plane, const float *grad_out, float *grad_in)
{
    int64_t p_fast, q_fast;

    fast_extent(g, &p_fast, &q_fast);
    memset(grad_in, 0, (size_t)(g->h * g->w) * sizeof(float));
    for (int64_t p = 0; p < g->p; p++) {
        int64_t q = 0;

        if (p < p_fast) {
            const float *top = plane + 2 * p * g->w, *bottom = top + g->w, *grad = grad_out + p * g->q;
            float *grad_top = grad_in + 2 * p * g->w, *grad_bottom = grad_top + g->w;
#pragma omp simd
            for (int64_t j = 0; j < q_fast; j++)
                route_2x2(top + 2 * j, bottom + 2 * j, grad[j], grad_top + 2 * j, grad_bottom + 2 * j);
            q = q_fast;
        }
        for (; q < g->q; q++) {
            pool_window win = window_at(g, p, q);
            float grad = grad_out[p * g->q + q];

            if (g->d->mode == PD_POOL_MAX) {
                int64_t at = window_argmax(g, plane, &win);
                if (at >= 0)
                    grad_in[at] += grad;
            } else if (win.divisor > 0) {
                float share = grad / (float)win.divisor;
                for (int64_t ih = win.h0; ih < win.h1; ih++)
                    for (int64_t iw = win.w0; iw < win.w1; iw++)
                        grad_in[ih * g->w + iw] += share;
            }
        }
    }
}

pd_status pd_cpu_pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    pd_pool2d_dims dims;

    PD_CHECK(pd_kernel_check_pool2d_forward(desc, x, y, &dims));
    const pool_geom g = pool_geometry(desc, &dims);

    const float *in = x->data;
    float *out = y->data;
#pragma omp parallel for schedule(static) if (g.planes * g.h * g.w > POOL_PARALLEL_MIN)
    for (int64_t i = 0; i < g.planes; i++)
        pool_plane_forward(&g, in + i * g.h * g.w, out + i * g.p * g.q);
    return PD_OK;
}

pd_status pd_cpu_pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                 const pd_tensor *dy, pd_tensor *dx)
{
    pd_pool2d_dims dims;

    PD_CHECK(pd_kernel_check_pool2d_backward(desc, x, y, dy, dx, &dims));
    const pool_geom g = pool_geometry(desc, &dims);

    const float *in = x->data, *grad_out = dy->data;
    float *grad_in = dx->data;
#pragma omp parallel for schedule(static) if (g.planes * g.h * g.w > POOL_PARALLEL_MIN)
    for (int64_t i = 0; i < g.planes; i++)
        pool_plane_backward(&g, in + i * g.h * g.w, grad_out + i * g.p * g.q, grad_in + i * g.h * g.w);
    return PD_OK;
}
