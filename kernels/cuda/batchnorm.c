/* Batch normalisation on cuDNN (CUDNN_BATCHNORM_SPATIAL: per-channel
 * statistics over N and every trailing dimension; x [N,C,...] is described
 * to cuDNN as [N, C, H*W*..., 1]). cuDNN's conventions are the CPU's:
 * exponentialAverageFactor is PyTorch's momentum (running = (1-momentum) *
 * running + momentum * batch), the running variance takes the unbiased
 * batch variance, the saved inverse variance is 1/sqrt(biased var + eps),
 * which the backward pass reads back with the saved mean. cuDNN accepts any
 * eps >= CUDNN_BN_MIN_EPSILON (0 in cuDNN 9); the shared checks ask eps > 0.
 * cuDNN computes in f32 where the CPU sums in double, so results agree to
 * rounding, not bit for bit. Outputs are overwritten (blend factors 1, 0);
 * the backward pass's nullable outputs go to scratch memory, since cuDNN
 * writes all three. */
#include "config.h"

#include "kernels/cuda/pd_cuda_nn.h"
#include "kernels/pd_kernels_int.h"

#define BN_MODE CUDNN_BATCHNORM_SPATIAL

/* Scratch offsets are rounded up to this (cuDNN's vector loads). */
#define BN_SCRATCH_ALIGN 256

/* The x and per-channel parameter descriptors of one call. */
typedef struct bn_descs {
    cudnnTensorDescriptor_t x, param;
} bn_descs;

static void bn_descs_destroy(bn_descs *d)
{
    if (d->param)
        cudnnDestroyTensorDescriptor(d->param);
    if (d->x)
        cudnnDestroyTensorDescriptor(d->x);
}

/* Checks that the tensors (NULL ones skipped) are in device memory, enters
 * the device and describes x (count > 0 values); on failure nothing is left. */
static pd_status bn_enter(pd_device *dev, const char *what, const pd_batchnorm_dims *dims,
                          const pd_tensor *const *tensors, const char *const *names, int count, pd_cuda_state **st,
                          bn_descs *d)
{
    pd_status s = PD_OK;

    PD_CHECK(pd_cuda_expect_on_gpu(what, count, tensors, names));
    PD_CHECK(pd_cuda_enter(dev, st));
    d->x = d->param = NULL;
    PD_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&d->x), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&d->param), s, fail);
    PD_CHECK_GOTO(pd_cudnn_set_tensor(d->x, dims->n, dims->c, dims->spatial, 1, what), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnDeriveBNTensorDescriptor(d->param, d->x, BN_MODE), s, fail);
    return PD_OK;

fail:
    bn_descs_destroy(d);
    return s;
}

pd_status pd_cuda_batchnorm_forward_train(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                          const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                          pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                          pd_tensor *save_invstd)
{
    const float one = 1.0f, zero = 0.0f;
    pd_batchnorm_dims dims;
    pd_cuda_state *st;
    bn_descs d;
    pd_status s = PD_OK;

    PD_CHECK(pd_kernel_check_batchnorm_train(desc, x, gamma, beta, running_mean, running_var, y, save_mean,
                                             save_invstd, &dims));
    if (dims.c == 0)
        return PD_OK;
    const pd_tensor *tensors[] = {x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd};
    const char *const names[] = {"x", "gamma", "beta", "running_mean", "running_var", "y", "save_mean",
                                 "save_invstd"};
    PD_CHECK(bn_enter(dev, "batchnorm forward", &dims, tensors, names, 8, &st, &d));
    PD_CUDNN_CHECK_GOTO(cudnnBatchNormalizationForwardTraining(
                            st->cudnn, BN_MODE, &one, &zero, d.x, x->data, d.x, y->data, d.param, gamma->data,
                            beta->data, (double)desc->momentum, running_mean->data, running_var->data,
                            (double)desc->eps, save_mean->data, save_invstd->data),
                        s, done);
done:
    bn_descs_destroy(&d);
    return s;
}

pd_status pd_cuda_batchnorm_forward_eval(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta,
                                         const pd_tensor *running_mean, const pd_tensor *running_var, pd_tensor *y)
{
    const float one = 1.0f, zero = 0.0f;
    pd_batchnorm_dims dims;
    pd_cuda_state *st;
    bn_descs d;
    pd_status s = PD_OK;

    PD_CHECK(pd_kernel_check_batchnorm_eval(desc, x, gamma, beta, running_mean, running_var, y, &dims));
    if (pd_tensor_numel(x) == 0)
        return PD_OK;
    const pd_tensor *tensors[] = {x, gamma, beta, running_mean, running_var, y};
    const char *const names[] = {"x", "gamma", "beta", "running_mean", "running_var", "y"};
    PD_CHECK(bn_enter(dev, "batchnorm eval", &dims, tensors, names, 6, &st, &d));
    PD_CUDNN_CHECK_GOTO(cudnnBatchNormalizationForwardInference(st->cudnn, BN_MODE, &one, &zero, d.x, x->data, d.x,
                                                                y->data, d.param, gamma->data, beta->data,
                                                                running_mean->data, running_var->data,
                                                                (double)desc->eps),
                        s, done);
done:
    bn_descs_destroy(&d);
    return s;
}

static size_t align_up(size_t bytes) { return (bytes + BN_SCRATCH_ALIGN - 1) / BN_SCRATCH_ALIGN * BN_SCRATCH_ALIGN; }

/* Where the backward pass writes dx, dgamma and dbeta: the tensors given,
 * or slices of the device's scratch buffer for the NULL ones. */
static pd_status backward_outputs(pd_device *dev, const pd_batchnorm_dims *dims, pd_tensor *dx, pd_tensor *dgamma,
                                  pd_tensor *dbeta, void **out)
{
    const size_t x_bytes = align_up((size_t)(dims->n * dims->c * dims->spatial) * sizeof(float));
    const size_t c_bytes = align_up((size_t)dims->c * sizeof(float));
    pd_tensor *given[3] = {dx, dgamma, dbeta};
    const size_t need[3] = {x_bytes, c_bytes, c_bytes};
    size_t total = 0;
    char *scratch = NULL;

    for (int i = 0; i < 3; i++)
        total += given[i] ? 0 : need[i];
    if (total > 0)
        PD_CHECK(pd_cuda_scratch(dev, total, (void **)&scratch));
    for (int i = 0; i < 3; i++) {
        out[i] = given[i] ? given[i]->data : scratch;
        scratch += given[i] ? 0 : need[i];
    }
    return PD_OK;
}

pd_status pd_cuda_batchnorm_backward(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                     const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                     const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma,
                                     pd_tensor *dbeta)
{
    const float one = 1.0f, zero = 0.0f;
    pd_batchnorm_dims dims;
    pd_cuda_state *st;
    bn_descs d;
    void *out[3]; /* dx, dgamma, dbeta */
    pd_status s = PD_OK;

    PD_CHECK(pd_kernel_check_batchnorm_backward(desc, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                                                &dims));
    const pd_tensor *tensors[] = {x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta};
    const char *const names[] = {"x", "dy", "gamma", "save_mean", "save_invstd", "dx", "dgamma", "dbeta"};
    if (pd_tensor_numel(x) == 0) {
        /* No values: the parameter gradients are empty sums, as on the CPU. */
        PD_CHECK(pd_cuda_expect_on_gpu("batchnorm backward", 8, tensors, names));
        PD_CHECK(pd_cuda_enter(dev, &st));
        if (dgamma)
            PD_CUDA_CHECK(cudaMemsetAsync(dgamma->data, 0, pd_tensor_nbytes(dgamma), st->launch.stream));
        if (dbeta)
            PD_CUDA_CHECK(cudaMemsetAsync(dbeta->data, 0, pd_tensor_nbytes(dbeta), st->launch.stream));
        return PD_OK;
    }
    PD_CHECK(bn_enter(dev, "batchnorm backward", &dims, tensors, names, 8, &st, &d));
    PD_CHECK_GOTO(backward_outputs(dev, &dims, dx, dgamma, dbeta, out), s, done);
    PD_CUDNN_CHECK_GOTO(cudnnBatchNormalizationBackward(st->cudnn, BN_MODE, &one, &zero, &one, &zero, d.x, x->data,
                                                        d.x, dy->data, d.x, out[0], d.param, gamma->data, out[1],
                                                        out[2], (double)desc->eps, save_mean->data,
                                                        save_invstd->data),
                        s, done);
done:
    bn_descs_destroy(&d);
    return s;
}
