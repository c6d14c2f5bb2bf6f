/* CPU kernels: softmax cross-entropy over logits [N,C] and i32 labels [N],
 * the loss being the mean negative log-likelihood. The log-sum-exp subtracts
 * the row maximum, so no logit overflows exp(). Threads split the rows. */
#include "config.h"

#include <math.h>

#include "kernels/cpu/pd_cpu.h"

#define SCE_PARALLEL_MIN 16384

/* Checks logits-like [N,C] f32 and labels [N] i32 with every label in [0,C). */
static pd_status sce_check(const pd_tensor *scores, const pd_tensor *labels, const char *what_scores,
                           const char *what_labels)
{
    PD_CHECK(pd_kernel_expect_f32(scores, scores ? &scores->shape : NULL, what_scores));
    if (scores->shape.ndim != 2)
        return PD_ERROR(PD_ESHAPE, "%s: expected [N,C], got rank %d", what_scores, scores->shape.ndim);
    if (!labels)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what_labels);
    pd_shape ls = pd_shape_make(1, scores->shape.dim[0]);
    PD_CHECK(pd_tensor_expect(labels, PD_I32, &ls, what_labels));

    const int32_t *lab = labels->data;
    const int64_t n = scores->shape.dim[0], c = scores->shape.dim[1];
    for (int64_t i = 0; i < n; i++)
        if (lab[i] < 0 || lab[i] >= c)
            return PD_ERROR(PD_EINVAL, "%s: label of row %lld is %d, outside [0,%lld)", what_labels, (long long)i,
                            (int)lab[i], (long long)c);
    return PD_OK;
}

pd_status pd_cpu_softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                               pd_tensor *probs, pd_tensor *loss)
{
    pd_shape one = pd_shape_make(1, (int64_t)1);

    PD_CHECK(sce_check(logits, labels, "softmax_cross_entropy forward logits", "softmax_cross_entropy forward labels"));
    PD_CHECK(pd_kernel_expect_f32(probs, &logits->shape, "softmax_cross_entropy forward probs"));
    PD_CHECK(pd_kernel_expect_f32(loss, &one, "softmax_cross_entropy forward loss"));

    const float *x = logits->data;
    const int32_t *lab = labels->data;
    float *prob = probs->data;
    const int64_t n = logits->shape.dim[0], c = logits->shape.dim[1];
    double total = 0.0;

#pragma omp parallel for reduction(+ : total) schedule(static) if (n * c > SCE_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * c;
        float *pi = prob + i * c;
        float max = xi[0];
        for (int64_t j = 1; j < c; j++)
            max = xi[j] > max ? xi[j] : max;
        double sum = 0.0;
        for (int64_t j = 0; j < c; j++) {
            pi[j] = expf(xi[j] - max);
            sum += pi[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < c; j++)
            pi[j] *= inv;
        /* -log softmax = log(sum) - (x_label - max), without log(tiny prob). */
        total += log(sum) - ((double)xi[lab[i]] - (double)max);
    }
    *(float *)loss->data = n > 0 ? (float)(total / (double)n) : 0.0f;
    return PD_OK;
}

pd_status pd_cpu_softmax_cross_entropy_backward(pd_device *dev, const pd_tensor *probs, const pd_tensor *labels,
                                                float dloss, pd_tensor *dlogits)
{
    PD_CHECK(sce_check(probs, labels, "softmax_cross_entropy backward probs",
                       "softmax_cross_entropy backward labels"));
    PD_CHECK(pd_kernel_expect_f32(dlogits, &probs->shape, "softmax_cross_entropy backward dlogits"));

    const float *prob = probs->data;
    const int32_t *lab = labels->data;
    float *grad = dlogits->data;
    const int64_t n = probs->shape.dim[0], c = probs->shape.dim[1];
    if (n == 0)
        return PD_OK;
    const float k = dloss / (float)n;

#pragma omp parallel for schedule(static) if (n * c > SCE_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float *pi = prob + i * c;
        float *gi = grad + i * c;
        for (int64_t j = 0; j < c; j++)
            gi[j] = k * pi[j];
        gi[lab[i]] = k * (pi[lab[i]] - 1.0f);
    }
    return PD_OK;
}
