/* CPU kernels: fully connected layer y = x w^T + bias (PyTorch's w [M,K]
 * layout) and its gradients, each one sgemm. */
#include "config.h"

#include "kernels/cpu/pd_cpu.h"

#define LINEAR_PARALLEL_MIN 65536

/* Checks x [N,K] and w [M,K] and returns N, K, M. */
static pd_status linear_dims(const char *op, const pd_tensor *x, const pd_tensor *w, int64_t *n, int64_t *k,
                             int64_t *m)
{
    char buf[96];

    if (!x || !w)
        return PD_ERROR(PD_EINVAL, "%s: missing x or w", op);
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "linear x"));
    PD_CHECK(pd_kernel_expect_f32(w, &w->shape, "linear w"));
    if (x->shape.ndim != 2)
        return PD_ERROR(PD_ESHAPE, "%s: x must be 2-D [N,K], got %s", op, pd_shape_format(&x->shape, buf, sizeof(buf)));
    if (w->shape.ndim != 2 || w->shape.dim[1] != x->shape.dim[1])
        return PD_ERROR(PD_ESHAPE, "%s: w must be [M,%lld] to match x's features, got %s", op,
                        (long long)x->shape.dim[1], pd_shape_format(&w->shape, buf, sizeof(buf)));
    *n = x->shape.dim[0];
    *k = x->shape.dim[1];
    *m = w->shape.dim[0];
    return PD_OK;
}

pd_status pd_cpu_linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                pd_tensor *y)
{
    int64_t n, k, m;

    PD_CHECK(linear_dims("linear forward", x, w, &n, &k, &m));
    pd_shape want_y = pd_shape_make(2, n, m), want_bias = pd_shape_make(1, m);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "linear forward y"));
    if (bias) {
        PD_CHECK(pd_kernel_expect_f32(bias, &want_bias, "linear forward bias"));
        const float *b = bias->data;
        float *out = y->data;

#pragma omp parallel for schedule(static) if (n * m > LINEAR_PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                out[i * m + j] = b[j];
    }
    return pd_cpu_gemm(dev, false, true, n, m, k, 1.0f, x->data, k, w->data, k, bias ? 1.0f : 0.0f, y->data, m);
}

pd_status pd_cpu_linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                 pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias)
{
    int64_t n, k, m;

    PD_CHECK(linear_dims("linear backward", x, w, &n, &k, &m));
    pd_shape want_dy = pd_shape_make(2, n, m), want_bias = pd_shape_make(1, m);
    PD_CHECK(pd_kernel_expect_f32(dy, &want_dy, "linear backward dy"));
    PD_CHECK(pd_kernel_expect_f32(dw, &w->shape, "linear backward dw"));
    if (dx)
        PD_CHECK(pd_kernel_expect_f32(dx, &x->shape, "linear backward dx"));
    if (dbias)
        PD_CHECK(pd_kernel_expect_f32(dbias, &want_bias, "linear backward dbias"));

    if (dx) /* dx [N,K] = dy [N,M] w [M,K] */
        PD_CHECK(pd_cpu_gemm(dev, false, false, n, k, m, 1.0f, dy->data, m, w->data, k, 0.0f, dx->data, k));
    /* dw [M,K] = dy^T [M,N] x [N,K] */
    PD_CHECK(pd_cpu_gemm(dev, true, false, m, k, n, 1.0f, dy->data, m, x->data, k, 0.0f, dw->data, k));
    if (dbias) {
        const float *grad_out = dy->data;
        float *grad_b = dbias->data;

#pragma omp parallel for schedule(static) if (n * m > LINEAR_PARALLEL_MIN)
        for (int64_t j = 0; j < m; j++) {
            double total = 0.0;
            for (int64_t i = 0; i < n; i++)
                total += grad_out[i * m + j];
            grad_b[j] = (float)total;
        }
    }
    return PD_OK;
}
