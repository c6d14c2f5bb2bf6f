/* cuDNN plumbing of the CUDA backend: the per-device handle (bound to the
 * device's stream), the workspace limit, status conversion and tensor
 * descriptors. Only the legacy (v7-style) cuDNN API is used: cuDNN 9 marks
 * it deprecated but still ships it, and it gives exactly the operations the
 * ops table needs (the deprecation warnings are off unless
 * CUDNN_WARN_DEPRECATED is defined). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include <pipedream/log.h>

#include "kernels/cuda/pd_cuda_nn.h"

/* The largest PD_CUDNN_WORKSPACE accepted: 1 TiB in MiB. */
#define WORKSPACE_MAX_MIB (1ull << 20)

pd_status pd_cudnn_error_at(const char *file, int line, const char *call, cudnnStatus_t st)
{
    char detail[256] = "";
    pd_status code = PD_EDEVICE;

    if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = PD_ENOMEM;
    else if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED)
        code = PD_ENOTSUP;
    /* cuDNN 9 keeps a longer explanation of the last failure per thread. */
    cudnnGetLastErrorString(detail, sizeof(detail));
    (void)cudaGetLastError();
    return pd_error_at(file, line, code, "%s failed: %s (%d)%s%s", call, cudnnGetErrorString(st), (int)st,
                       detail[0] ? ": " : "", detail);
}

pd_status pd_cudnn_check_tensor(int64_t n, int64_t c, int64_t h, int64_t w, const char *what)
{
    if (n < 1 || c < 1 || h < 1 || w < 1 || n > INT_MAX || c > INT_MAX || h > INT_MAX || w > INT_MAX ||
        n * c > INT_MAX || n * c * h > INT_MAX || n * c * h * w > INT_MAX)
        return PD_ERROR(PD_ENOTSUP, "%s: [%lld,%lld,%lld,%lld] is beyond cuDNN's tensors (positive int sizes, "
                        "fewer than 2^31 elements)", what, (long long)n, (long long)c, (long long)h, (long long)w);
    return PD_OK;
}

pd_status pd_cudnn_set_tensor(cudnnTensorDescriptor_t desc, int64_t n, int64_t c, int64_t h, int64_t w,
                              const char *what)
{
    PD_CHECK(pd_cudnn_check_tensor(n, c, h, w, what));
    PD_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)n, (int)c, (int)h,
                                              (int)w));
    return PD_OK;
}

/* The workspace limit in bytes: PD_CUDNN_WORKSPACE (MiB) or the default. */
static pd_status workspace_limit(const char *device_name, size_t *out)
{
    const char *text = getenv("PD_CUDNN_WORKSPACE");
    unsigned long long mib = PD_CUDNN_WORKSPACE_DEFAULT_MIB;
    char *end;

    if (text && *text) {
        errno = 0;
        mib = strtoull(text, &end, 10);
        if (*text == '-' || *end != '\0' || errno != 0 || mib > WORKSPACE_MAX_MIB)
            return PD_ERROR(PD_EINVAL, "%s: PD_CUDNN_WORKSPACE: expected a convolution workspace limit in MiB "
                            "(an integer from 0 to %llu), got '%s'", device_name, WORKSPACE_MAX_MIB, text);
    }
    *out = (size_t)(mib << 20);
    return PD_OK;
}

pd_status pd_cudnn_open(const char *device_name, pd_cuda_state *st)
{
    pd_status s;

    PD_CHECK(workspace_limit(device_name, &st->cudnn_workspace_limit));
    st->conv_plans = NULL;
    PD_CUDNN_CHECK(cudnnCreate(&st->cudnn));
    PD_CUDNN_CHECK_GOTO(cudnnSetStream(st->cudnn, st->launch.stream), s, destroy_handle);
    PD_LOG_DEBUGF("%s: cuDNN %zu, convolution workspace limit %zu MiB", device_name, cudnnGetVersion(),
                  st->cudnn_workspace_limit >> 20);
    return PD_OK;

destroy_handle:
    cudnnDestroy(st->cudnn);
    st->cudnn = NULL;
    return s;
}

void pd_cudnn_close(pd_cuda_state *st)
{
    pd_cudnn_conv_plans_free(st->conv_plans);
    st->conv_plans = NULL;
    if (st->cudnn)
        cudnnDestroy(st->cudnn);
    st->cudnn = NULL;
}
