/* CPU kernels: batch normalisation (training with batch statistics, eval with
 * running statistics, backward from the saved statistics), PyTorch semantics.
 * x is [N, C, ...]: statistics are per channel over N and the trailing
 * (spatial) dimensions; sums run in double; threads split the channels. */
#include "config.h"

#include <math.h>

#include "kernels/cpu/pd_cpu.h"

/* Work below this many elements is not worth waking the thread team for. */
#define BN_PARALLEL_MIN 32768

pd_status pd_cpu_batchnorm_forward_train(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                         pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                         pd_tensor *save_invstd)
{
    pd_batchnorm_dims d;

    PD_CHECK(pd_kernel_check_batchnorm_train(desc, x, gamma, beta, running_mean, running_var, y, save_mean,
                                             save_invstd, &d));
    const int64_t count = d.n * d.spatial; /* values per channel */

    const float *in = x->data, *g = gamma->data, *b = beta->data;
    float *out = y->data, *rm = running_mean->data, *rv = running_var->data;
    float *sm = save_mean->data, *si = save_invstd->data;
    const int64_t plane = d.c * d.spatial;
    const double mom = desc->momentum;

#pragma omp parallel for schedule(static) if (d.c > 1 && d.n * plane > BN_PARALLEL_MIN)
    for (int64_t c = 0; c < d.c; c++) {
        double sum = 0.0, sq = 0.0;
        for (int64_t n = 0; n < d.n; n++) {
            const float *xc = in + n * plane + c * d.spatial;
            for (int64_t s = 0; s < d.spatial; s++)
                sum += xc[s];
        }
        const double mean = sum / (double)count;
        /* Two passes: the centred sum of squares does not cancel. */
        for (int64_t n = 0; n < d.n; n++) {
            const float *xc = in + n * plane + c * d.spatial;
            for (int64_t s = 0; s < d.spatial; s++) {
                double t = xc[s] - mean;
                sq += t * t;
            }
        }
        const double var = sq / (double)count;
        const double invstd = 1.0 / sqrt(var + (double)desc->eps);
        const float scale = (float)(invstd * g[c]);
        const float shift = (float)(b[c] - mean * invstd * g[c]);
        for (int64_t n = 0; n < d.n; n++) {
            const float *xc = in + n * plane + c * d.spatial;
            float *yc = out + n * plane + c * d.spatial;
            for (int64_t s = 0; s < d.spatial; s++)
                yc[s] = xc[s] * scale + shift;
        }
        sm[c] = (float)mean;
        si[c] = (float)invstd;
        rm[c] = (float)((1.0 - mom) * rm[c] + mom * mean);
        rv[c] = (float)((1.0 - mom) * rv[c] + mom * var * (double)count / (double)(count - 1));
    }
    return PD_OK;
}

pd_status pd_cpu_batchnorm_forward_eval(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                        const pd_tensor *gamma, const pd_tensor *beta,
                                        const pd_tensor *running_mean, const pd_tensor *running_var, pd_tensor *y)
{
    pd_batchnorm_dims d;

    PD_CHECK(pd_kernel_check_batchnorm_eval(desc, x, gamma, beta, running_mean, running_var, y, &d));

    const float *in = x->data, *g = gamma->data, *b = beta->data;
    const float *rm = running_mean->data, *rv = running_var->data;
    float *out = y->data;
    const int64_t rows = d.n * d.c; /* one row = one (n, c) plane */

#pragma omp parallel for schedule(static) if (rows * d.spatial > BN_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t c = r % d.c;
        const double invstd = 1.0 / sqrt((double)rv[c] + (double)desc->eps);
        const float scale = (float)(invstd * g[c]);
        const float shift = (float)(b[c] - rm[c] * invstd * g[c]);
        const float *xr = in + r * d.spatial;
        float *yr = out + r * d.spatial;
        for (int64_t s = 0; s < d.spatial; s++)
            yr[s] = xr[s] * scale + shift;
    }
    return PD_OK;
}

pd_status pd_cpu_batchnorm_backward(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                    const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                    const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma,
                                    pd_tensor *dbeta)
{
    pd_batchnorm_dims d;

    PD_CHECK(pd_kernel_check_batchnorm_backward(desc, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, &d));

    const float *in = x->data, *grad_out = dy->data, *g = gamma->data;
    const float *sm = save_mean->data, *si = save_invstd->data;
    float *grad_in = dx ? dx->data : NULL;
    float *dg = dgamma ? dgamma->data : NULL, *db = dbeta ? dbeta->data : NULL;
    const int64_t plane = d.c * d.spatial;
    const double count = (double)(d.n * d.spatial);

#pragma omp parallel for schedule(static) if (d.c > 1 && d.n * plane > BN_PARALLEL_MIN)
    for (int64_t c = 0; c < d.c; c++) {
        const double mean = sm[c], invstd = si[c];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int64_t n = 0; n < d.n; n++) {
            const float *xc = in + n * plane + c * d.spatial;
            const float *dyc = grad_out + n * plane + c * d.spatial;
            for (int64_t s = 0; s < d.spatial; s++) {
                sum_dy += dyc[s];
                sum_dy_xhat += dyc[s] * ((xc[s] - mean) * invstd);
            }
        }
        if (dg)
            dg[c] = (float)sum_dy_xhat;
        if (db)
            db[c] = (float)sum_dy;
        if (!grad_in)
            continue;
        /* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)) */
        const double k = g[c] * invstd;
        const double mean_dy = sum_dy / count, mean_dy_xhat = sum_dy_xhat / count;
        for (int64_t n = 0; n < d.n; n++) {
            const float *xc = in + n * plane + c * d.spatial;
            const float *dyc = grad_out + n * plane + c * d.spatial;
            float *dxc = grad_in + n * plane + c * d.spatial;
            for (int64_t s = 0; s < d.spatial; s++) {
                double xhat = (xc[s] - mean) * invstd;
                dxc[s] = (float)(k * (dyc[s] - mean_dy - xhat * mean_dy_xhat));
            }
        }
    }
    return PD_OK;
}
