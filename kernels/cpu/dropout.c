/* CPU kernels: inverted dropout. Element i survives iff
 * pd_rng_uniform(seed, i) >= p, so the backward pass (and every other
 * backend) recomputes the same mask from the seed instead of storing it. */
#include "config.h"

#include <string.h>

#include "core/pd_rng.h"
#include "kernels/cpu/pd_cpu.h"

#define DROPOUT_PARALLEL_MIN 16384

/* out = in * mask / (1-p); shared by both passes so their masks cannot differ. */
static pd_status dropout_apply(float p, uint64_t seed, const pd_tensor *x, pd_tensor *y, const char *what_x,
                               const char *what_y)
{
    PD_CHECK(pd_kernel_expect_f32(x, x ? &x->shape : NULL, what_x));
    PD_CHECK(pd_kernel_expect_f32(y, &x->shape, what_y));
    if (!(p >= 0.0f && p < 1.0f))
        return PD_ERROR(PD_EINVAL, "%s: dropout probability must be in [0,1), got %g", what_x, (double)p);

    const float *in = x->data;
    float *out = y->data;
    const int64_t n = pd_tensor_numel(x);

    if (p == 0.0f) {
        if (out != in)
            memcpy(out, in, (size_t)n * sizeof(float));
        return PD_OK;
    }
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n > DROPOUT_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        out[i] = pd_rng_uniform(seed, (uint64_t)i) >= p ? in[i] * scale : 0.0f;
    return PD_OK;
}

pd_status pd_cpu_dropout_forward(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y)
{
    return dropout_apply(p, seed, x, y, "dropout forward x", "dropout forward y");
}

pd_status pd_cpu_dropout_backward(pd_device *dev, float p, uint64_t seed, const pd_tensor *dy, pd_tensor *dx)
{
    return dropout_apply(p, seed, dy, dx, "dropout backward dy", "dropout backward dx");
}
