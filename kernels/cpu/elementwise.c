/* Element-wise CPU kernels: fill, axpby, add, dtype conversion, sum, ReLU. */
#include "config.h"

#include "kernels/cpu/pd_cpu.h"

pd_status pd_cpu_fill(pd_device *dev, pd_tensor *y, float value)
{
    PD_CHECK(pd_kernel_expect_f32(y, &y->shape, "fill y"));
    float *out = y->data;
    int64_t n = pd_tensor_numel(y);

#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        out[i] = value;
    return PD_OK;
}

pd_status pd_cpu_axpby(pd_device *dev, float alpha, const pd_tensor *x, float beta, pd_tensor *y)
{
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "axpby x"));
    PD_CHECK(pd_kernel_expect_f32(y, &x->shape, "axpby y"));
    const float *in = x->data;
    float *out = y->data;
    int64_t n = pd_tensor_numel(x);

    if (beta == 0.0f) { /* y may hold NaN garbage; 0 * NaN must not leak */
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            out[i] = alpha * in[i];
    } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            out[i] = alpha * in[i] + beta * out[i];
    }
    return PD_OK;
}

pd_status pd_cpu_add(pd_device *dev, const pd_tensor *a, const pd_tensor *b, pd_tensor *y)
{
    PD_CHECK(pd_kernel_expect_f32(a, &a->shape, "add a"));
    PD_CHECK(pd_kernel_expect_f32(b, &a->shape, "add b"));
    PD_CHECK(pd_kernel_expect_f32(y, &a->shape, "add y"));
    const float *pa = a->data, *pb = b->data;
    float *out = y->data;
    int64_t n = pd_tensor_numel(a);

#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        out[i] = pa[i] + pb[i];
    return PD_OK;
}

pd_status pd_cpu_convert(pd_device *dev, const pd_tensor *x, pd_tensor *y)
{
    if (pd_tensor_numel(x) != pd_tensor_numel(y))
        return PD_ERROR(PD_ESHAPE, "convert: %lld elements into %lld", (long long)pd_tensor_numel(x),
                        (long long)pd_tensor_numel(y));
    return pd_dtype_convert(y->dtype, y->data, x->dtype, x->data, (size_t)pd_tensor_numel(x));
}

pd_status pd_cpu_sum(pd_device *dev, const pd_tensor *x, pd_tensor *out)
{
    pd_shape one = pd_shape_make(1, (int64_t)1);
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "sum x"));
    PD_CHECK(pd_kernel_expect_f32(out, &one, "sum out"));
    const float *in = x->data;
    int64_t n = pd_tensor_numel(x);
    double total = 0.0; /* double: sums of millions of floats stay exact enough */

#pragma omp parallel for reduction(+ : total) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        total += in[i];
    *(float *)out->data = (float)total;
    return PD_OK;
}

pd_status pd_cpu_relu_forward(pd_device *dev, const pd_tensor *x, pd_tensor *y)
{
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "relu x"));
    PD_CHECK(pd_kernel_expect_f32(y, &x->shape, "relu y"));
    const float *in = x->data;
    float *out = y->data;
    int64_t n = pd_tensor_numel(x);

#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return PD_OK;
}

pd_status pd_cpu_relu_backward(pd_device *dev, const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx)
{
    PD_CHECK(pd_kernel_expect_f32(y, &y->shape, "relu backward y"));
    PD_CHECK(pd_kernel_expect_f32(dy, &y->shape, "relu backward dy"));
    PD_CHECK(pd_kernel_expect_f32(dx, &y->shape, "relu backward dx"));
    const float *out = y->data, *grad_out = dy->data;
    float *grad_in = dx->data;
    int64_t n = pd_tensor_numel(y);

    /* Both operands loaded unconditionally: a select, which vectorises,
     * instead of a branch per element. */
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float grad = grad_out[i];
        grad_in[i] = out[i] > 0.0f ? grad : 0.0f;
    }
    return PD_OK;
}
