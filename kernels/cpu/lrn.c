/* CPU kernels: cross-channel local response normalisation, exactly as
 * torch.nn.LocalResponseNorm: the window of channel c runs from
 * c - size/2 to c + (size-1)/2 (clipped; padding counts as zeros and the sum
 * is always divided by `size`), scale_c = k + alpha/size * sum x^2 and
 * y_c = x_c * scale_c^-beta. Threads split the (n, c) planes. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/pd_cpu.h"

#define LRN_PARALLEL_MIN 16384

/* scale^-beta; AlexNet's and GoogLeNet's beta 0.75 (and 0.5) through square
 * roots, which vectorise, instead of powf, which does not. */
static inline float lrn_pow_neg(float scale, float beta)
{
    if (beta == 0.75f) {
        float r = sqrtf(scale);
        return 1.0f / (r * sqrtf(r));
    }
    if (beta == 0.5f)
        return 1.0f / sqrtf(scale);
    return powf(scale, -beta);
}

/* Writes scale = k + alpha/size * sum_{window(c)} x^2 for plane (n, c) into dst. */
static void lrn_scale_plane(const pd_lrn_desc *desc, const pd_lrn_dims *d, const float *x_n, int64_t c, float *dst)
{
    const int64_t lo = c - desc->size / 2 < 0 ? 0 : c - desc->size / 2;
    const int64_t hi = c + (desc->size - 1) / 2 >= d->c ? d->c - 1 : c + (desc->size - 1) / 2;
    const float a = desc->alpha / (float)desc->size;

    memset(dst, 0, (size_t)d->spatial * sizeof(float));
    for (int64_t j = lo; j <= hi; j++) {
        const float *xj = x_n + j * d->spatial;
        for (int64_t s = 0; s < d->spatial; s++)
            dst[s] += xj[s] * xj[s];
    }
    for (int64_t s = 0; s < d->spatial; s++)
        dst[s] = desc->k + a * dst[s];
}

pd_status pd_cpu_lrn_forward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    pd_lrn_dims d;

    PD_CHECK(pd_kernel_check_lrn_forward(desc, x, y, &d));
    const float *in = x->data;
    float *out = y->data;
    const int64_t planes = d.n * d.c;

#pragma omp parallel for schedule(static) if (planes * d.spatial > LRN_PARALLEL_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const int64_t n = p / d.c, c = p % d.c;
        const float *xp = in + p * d.spatial;
        float *yp = out + p * d.spatial;
        lrn_scale_plane(desc, &d, in + n * d.c * d.spatial, c, yp);
        for (int64_t s = 0; s < d.spatial; s++)
            yp[s] = xp[s] * lrn_pow_neg(yp[s], desc->beta);
    }
    return PD_OK;
}

/* dx_j = dy_j scale_j^-beta
 *        - 2 alpha beta / size * x_j * sum_{c : j in window(c)} dy_c y_c / scale_c,
 * where j is in window(c) iff c runs from j - (size-1)/2 to j + size/2. */
pd_status pd_cpu_lrn_backward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                              const pd_tensor *dy, pd_tensor *dx)
{
    pd_lrn_dims d;
    float *ratio;

    PD_CHECK(pd_kernel_check_lrn_backward(desc, x, y, dy, dx, &d));
    PD_CHECK(pd_cpu_scratch(dev, (size_t)pd_tensor_numel(x) * sizeof(float), &ratio));

    const float *in = x->data, *out = y->data, *grad_out = dy->data;
    float *grad_in = dx->data;
    const int64_t planes = d.n * d.c;
    const float coef = 2.0f * desc->alpha * desc->beta / (float)desc->size;
    const int before = (desc->size - 1) / 2, after = desc->size / 2;

#pragma omp parallel if (planes * d.spatial > LRN_PARALLEL_MIN)
    {
        /* Pass 1: ratio = dy*y/scale, dx = dy*scale^-beta (scale parked in ratio). */
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            const int64_t n = p / d.c, c = p % d.c, off = p * d.spatial;
            float *rp = ratio + off;
            lrn_scale_plane(desc, &d, in + n * d.c * d.spatial, c, rp);
            for (int64_t s = 0; s < d.spatial; s++) {
                const float scale = rp[s];
                grad_in[off + s] = grad_out[off + s] * lrn_pow_neg(scale, desc->beta);
                rp[s] = grad_out[off + s] * out[off + s] / scale;
            }
        }
        /* Pass 2 reads the ratios of neighbouring planes: the implicit barrier above orders it. */
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            const int64_t n = p / d.c, j = p % d.c, off = p * d.spatial;
            const int64_t lo = j - before < 0 ? 0 : j - before;
            const int64_t hi = j + after >= d.c ? d.c - 1 : j + after;
            const float *ratio_n = ratio + n * d.c * d.spatial;
            for (int64_t c = lo; c <= hi; c++) {
                const float *rc = ratio_n + c * d.spatial;
                for (int64_t s = 0; s < d.spatial; s++)
                    grad_in[off + s] -= coef * in[off + s] * rc[s];
            }
        }
    }
    return PD_OK;
}
