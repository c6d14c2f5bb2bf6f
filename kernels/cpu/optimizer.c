/* CPU kernels: in-place optimizer updates, element for element the
 * arithmetic of torch.optim.SGD and torch.optim.Adam / AdamW (amsgrad off,
 * maximize off). */
#include "config.h"

#include <math.h>

#include "kernels/cpu/pd_cpu.h"

#define OPT_PARALLEL_MIN 65536

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

pd_status pd_cpu_adam_update(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g,
                             pd_tensor *m, pd_tensor *v)
{
    PD_CHECK(pd_kernel_check_adam(desc, w, g, m, v));

    float *wp = w->data, *mp = m->data, *vp = v->data;
    const float *gp = g->data;
    const int64_t n = pd_tensor_numel(w);
    const float b1 = desc->beta1, b2 = desc->beta2, eps = desc->eps;
    /* AdamW shrinks the weight; Adam adds the decay to the gradient. */
    const float shrink = desc->decoupled ? 1.0f - desc->lr * desc->weight_decay : 1.0f;
    const float l2 = desc->decoupled ? 0.0f : desc->weight_decay;
    const double bc1 = 1.0 - pow((double)b1, (double)desc->step);
    const double bc2 = 1.0 - pow((double)b2, (double)desc->step);
    const float step_size = (float)((double)desc->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);

#pragma omp parallel for simd schedule(static) if (n > OPT_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float grad = gp[i] + l2 * wp[i];
        const float wi = wp[i] * shrink;
        const float mi = mp[i] + (1.0f - b1) * (grad - mp[i]);
        const float vi = vp[i] * b2 + (1.0f - b2) * grad * grad;
        mp[i] = mi;
        vp[i] = vi;
        wp[i] = wi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    }
    return PD_OK;
}
