/* CPU kernels: in-place optimizer updates, element for element the
 * arithmetic of torch.optim.SGD and torch.optim.Adam / AdamW (amsgrad off,
 * maximize off). Adam's update runs four elements at a time with SSE where
 * the compiler targets it: sqrtf may set errno, so the compiler cannot
 * vectorise the loop itself; the vector code does the scalar code's
 * operations in its order, so both give the same bits. */
#include "config.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kernels/cpu/pd_cpu.h"

#define OPT_PARALLEL_MIN 65536
/* Adam's update costs more per element: worth threads from this size. */
#define ADAM_PARALLEL_MIN 16384

pd_status pd_cpu_sgd_update(pd_device *dev, const pd_sgd_desc *desc, pd_tensor *w, const pd_tensor *g,
                            pd_tensor *momentum_buf)
{
    PD_CHECK(pd_kernel_check_sgd(desc, w, g, momentum_buf));

    float *wp = w->data;
    const float *gp = g->data;
    const int64_t n = pd_tensor_numel(w);
    const float lr = desc->lr, mom = desc->momentum, wd = desc->weight_decay;

    if (mom == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > OPT_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++)
            wp[i] -= lr * (gp[i] + wd * wp[i]);
        return PD_OK;
    }

    float *buf = momentum_buf->data;
    const float keep = desc->first_step ? 0.0f : mom;
    const float take = desc->first_step ? 1.0f : 1.0f - desc->dampening;
    const bool nesterov = desc->nesterov;

#pragma omp parallel for simd schedule(static) if (n > OPT_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float d = gp[i] + wd * wp[i];
        /* On the first step the buffer may be garbage: never read it then. */
        const float b = desc->first_step ? d : keep * buf[i] + take * d;
        buf[i] = b;
        wp[i] -= lr * (nesterov ? d + mom * b : b);
    }
    return PD_OK;
}

/* The constants of one Adam step (see pd_cpu_adam_update). */
typedef struct adam_step {
    float b1, b2, eps, shrink, l2, step_size, bc2_sqrt;
} adam_step;

/* Elements [lo, hi) of one Adam step, one at a time. */
static void adam_scalar(const adam_step *c, float *w, const float *g, float *m, float *v, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) {
        const float grad = g[i] + c->l2 * w[i];
        const float wi = w[i] * c->shrink;
        const float mi = m[i] + (1.0f - c->b1) * (grad - m[i]);
        const float vi = v[i] * c->b2 + (1.0f - c->b2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - c->step_size * mi / (sqrtf(vi) / c->bc2_sqrt + c->eps);
    }
}

/* Elements [lo, hi) of one Adam step: adam_scalar's operations on four
 * elements at a time, then adam_scalar for the rest. */
static void adam_span(const adam_step *c, float *w, const float *g, float *m, float *v, int64_t lo, int64_t hi)
{
#ifdef __SSE2__
    const __m128 l2 = _mm_set1_ps(c->l2), shrink = _mm_set1_ps(c->shrink), keep1 = _mm_set1_ps(1.0f - c->b1);
    const __m128 b2 = _mm_set1_ps(c->b2), keep2 = _mm_set1_ps(1.0f - c->b2), eps = _mm_set1_ps(c->eps);
    const __m128 step_size = _mm_set1_ps(c->step_size), bc2_sqrt = _mm_set1_ps(c->bc2_sqrt);

    for (; lo + 4 <= hi; lo += 4) {
        const __m128 wv = _mm_loadu_ps(w + lo), mv = _mm_loadu_ps(m + lo), vv = _mm_loadu_ps(v + lo);
        const __m128 grad = _mm_add_ps(_mm_loadu_ps(g + lo), _mm_mul_ps(l2, wv));
        const __m128 wi = _mm_mul_ps(wv, shrink);
        const __m128 mi = _mm_add_ps(mv, _mm_mul_ps(keep1, _mm_sub_ps(grad, mv)));
        const __m128 vi = _mm_add_ps(_mm_mul_ps(vv, b2), _mm_mul_ps(_mm_mul_ps(keep2, grad), grad));
        const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2_sqrt), eps);
        _mm_storeu_ps(m + lo, mi);
        _mm_storeu_ps(v + lo, vi);
        _mm_storeu_ps(w + lo, _mm_sub_ps(wi, _mm_div_ps(_mm_mul_ps(step_size, mi), denom)));
    }
#endif
    adam_scalar(c, w, g, m, v, lo, hi);
}

pd_status pd_cpu_adam_update(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g,
                             pd_tensor *m, pd_tensor *v)
{
    PD_CHECK(pd_kernel_check_adam(desc, w, g, m, v));

    float *wp = w->data, *mp = m->data, *vp = v->data;
    const float *gp = g->data;
    const int64_t n = pd_tensor_numel(w);
    const double bc1 = 1.0 - pow((double)desc->beta1, (double)desc->step);
    const double bc2 = 1.0 - pow((double)desc->beta2, (double)desc->step);
    const adam_step c = {
        .b1 = desc->beta1,
        .b2 = desc->beta2,
        .eps = desc->eps,
        /* AdamW shrinks the weight; Adam adds the decay to the gradient. */
        .shrink = desc->decoupled ? 1.0f - desc->lr * desc->weight_decay : 1.0f,
        .l2 = desc->decoupled ? 0.0f : desc->weight_decay,
        .step_size = (float)((double)desc->lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
    };

    if (n <= ADAM_PARALLEL_MIN) {
        adam_span(&c, wp, gp, mp, vp, 0, n);
        return PD_OK;
    }
#pragma omp parallel
    {
        int64_t lo = 0, hi = n;
#ifdef _OPENMP
        /* shares in whole vectors of four */
        const int64_t quads = (n + 3) / 4, threads = omp_get_num_threads(), t = omp_get_thread_num();
        lo = 4 * (quads * t / threads);
        hi = t == threads - 1 ? n : 4 * (quads * (t + 1) / threads);
#endif
        adam_span(&c, wp, gp, mp, vp, lo, hi);
    }
    return PD_OK;
}
