/* CPU kernels: softmax cross-entropy over logits [N,C] and i32 labels [N],
 * the loss being the mean negative log-likelihood. The log-sum-exp subtracts
 * the row maximum, so no logit overflows exp(). Threads split the rows. */
#include "config.h"

#include <math.h>

#include "kernels/cpu/pd_cpu.h"

#define SCE_PARALLEL_MIN 16384

/* The labels' range, on the host: PD_EINVAL naming the first one outside [0,C). */
static pd_status check_labels(const pd_tensor *labels, const pd_sce_dims *d, const char *what_labels)
{
    int64_t row = pd_kernel_first_outside(labels->data, d->n, d->classes);

    if (row < d->n)
        return pd_kernel_label_outside(what_labels, row, ((const int32_t *)labels->data)[row], d->classes);
    return PD_OK;
}

pd_status pd_cpu_softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                               pd_tensor *probs, pd_tensor *loss)
{
    pd_sce_dims d;

    PD_CHECK(pd_kernel_check_sce_forward(logits, labels, probs, loss, &d));
    PD_CHECK(check_labels(labels, &d, PD_SCE_FORWARD_LABELS));

    const float *x = logits->data;
    const int32_t *lab = labels->data;
    float *prob = probs->data;
    const int64_t n = d.n, c = d.classes;
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
    pd_sce_dims d;

    PD_CHECK(pd_kernel_check_sce_backward(probs, labels, dlogits, &d));
    PD_CHECK(check_labels(labels, &d, PD_SCE_BACKWARD_LABELS));

    const float *prob = probs->data;
    const int32_t *lab = labels->data;
    float *grad = dlogits->data;
    const int64_t n = d.n, c = d.classes;
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
