/* Convolutions on cuDNN: NCHW f32 cross-correlation with stride, padding,
 * dilation and groups, as PyTorch's Conv2d and the CPU entries.
 *
 * Each distinct shape (input and filter sizes, stride, padding, dilation,
 * groups, and whether TF32 is allowed) gets a plan, kept in the device's
 * list until it closes: its cuDNN descriptors, made once, and per direction
 * (forward, backward data, backward filter) the algorithm chosen at the first
 * call by cudnnFind*AlgorithmEx. Find times the candidates on the call's own
 * tensors (no allocation of stand-ins), which cudnnGet*_v7 (a heuristic,
 * often not the fastest) does not; it runs once per shape and direction.
 * Candidates must be deterministic (CUDNN_DETERMINISTIC: no atomics, so a
 * run is reproducible like the CPU's), fit the workspace limit and, unless
 * the device allows TF32, use plain FP32 arithmetic (CUDNN_FMA_MATH: no
 * tensor-core TF32 rounding, so results differ from the CPU's only by the
 * order of additions). With allow_tf32 the descriptor takes
 * CUDNN_DEFAULT_MATH, which lets cuDNN run FP32 data on TF32 tensor cores
 * (Ampere and later) but never converts it to FP16, as
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION could. The workspace is the device's
 * scratch buffer (pd_cuda_scratch), never an allocation per call.
 *
 * Like the CPU entries, every output is overwritten (beta = 0): y (then the
 * bias added by cudnnAddTensor), dx, dw and dbias (cuDNN's bias gradient,
 * the sum of dy over N, P, Q). */
#include "config.h"

#include <string.h>
#include <stdlib.h>

#include "kernels/cuda/pd_cuda_nn.h"
#include "kernels/pd_kernels_int.h"

typedef enum {
    CONV_FORWARD = 0,
    CONV_BACKWARD_DATA = 1,
    CONV_BACKWARD_FILTER = 2,
    CONV_DIRECTIONS = 3,
} conv_direction;

static const char *const direction_names[CONV_DIRECTIONS] = {"conv2d forward", "conv2d backward data",
                                                             "conv2d backward filter"};

/* Everything that makes two convolutions the same problem for cuDNN. All
 * ints, so no padding bytes: keys compare with memcmp. */
typedef struct conv_key {
    int n, c, h, w;
    int k, r, s;
    int stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
    int tf32;
} conv_key;

struct pd_cudnn_conv_plan {
    struct pd_cudnn_conv_plan *next;
    conv_key key;
    cudnnTensorDescriptor_t x, y, bias; /* bias [1,K,1,1] */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    bool chosen[CONV_DIRECTIONS];
    int algo[CONV_DIRECTIONS]; /* a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math[CONV_DIRECTIONS];
    size_t workspace[CONV_DIRECTIONS];
};

typedef struct pd_cudnn_conv_plan conv_plan;

/* The device pointers of one call; a direction reads two and writes one:
 * forward x, w -> y; backward data dy, w -> dx; backward filter x, dy -> dw. */
typedef struct conv_operands {
    const void *x, *w, *dy;
    void *y, *dx, *dw;
} conv_operands;

/* One measured algorithm, whatever the direction's perf struct. */
typedef struct conv_perf {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} conv_perf;

/* More than any direction's CUDNN_CONVOLUTION_*_ALGO_COUNT. */
#define CONV_MAX_ALGOS 16

static void plan_destroy(conv_plan *pl)
{
    if (pl->conv)
        cudnnDestroyConvolutionDescriptor(pl->conv);
    if (pl->w)
        cudnnDestroyFilterDescriptor(pl->w);
    if (pl->bias)
        cudnnDestroyTensorDescriptor(pl->bias);
    if (pl->y)
        cudnnDestroyTensorDescriptor(pl->y);
    if (pl->x)
        cudnnDestroyTensorDescriptor(pl->x);
    free(pl);
}

void pd_cudnn_conv_plans_free(struct pd_cudnn_conv_plan *plans)
{
    while (plans) {
        conv_plan *next = plans->next;
        plan_destroy(plans);
        plans = next;
    }
}

static conv_key key_of(const pd_conv2d_desc *d, const pd_conv2d_dims *dims, bool tf32)
{
    conv_key key;

    memset(&key, 0, sizeof(key));
    /* plan_get checked that the sizes fit cuDNN's int dimensions. */
    key.n = (int)dims->n;
    key.c = (int)dims->c;
    key.h = (int)dims->h;
    key.w = (int)dims->w;
    key.k = (int)dims->k;
    key.r = d->kernel_h;
    key.s = d->kernel_w;
    key.stride_h = d->stride_h;
    key.stride_w = d->stride_w;
    key.pad_h = d->pad_h;
    key.pad_w = d->pad_w;
    key.dilation_h = d->dilation_h;
    key.dilation_w = d->dilation_w;
    key.groups = d->groups;
    key.tf32 = tf32;
    return key;
}

/* Makes the descriptors of a new plan and checks that cuDNN derives the
 * output size the CPU does. */
static pd_status plan_create(const pd_conv2d_desc *d, const pd_conv2d_dims *dims, bool tf32, conv_plan **out)
{
    conv_plan *pl = calloc(1, sizeof(*pl));
    pd_status s = PD_OK;
    int n, k, p, q;

    if (!pl)
        return PD_ERROR(PD_ENOMEM, "conv2d: out of host memory for a cuDNN plan");
    pl->key = key_of(d, dims, tf32);
    PD_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&pl->x), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&pl->y), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&pl->bias), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnCreateFilterDescriptor(&pl->w), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnCreateConvolutionDescriptor(&pl->conv), s, fail);
    PD_CHECK_GOTO(pd_cudnn_set_tensor(pl->x, dims->n, dims->c, dims->h, dims->w, "conv2d x"), s, fail);
    PD_CHECK_GOTO(pd_cudnn_set_tensor(pl->y, dims->n, dims->k, dims->p, dims->q, "conv2d y"), s, fail);
    PD_CHECK_GOTO(pd_cudnn_set_tensor(pl->bias, 1, dims->k, 1, 1, "conv2d bias"), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnSetFilter4dDescriptor(pl->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)dims->k,
                                                   (int)(dims->c / d->groups), d->kernel_h, d->kernel_w),
                        s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnSetConvolution2dDescriptor(pl->conv, d->pad_h, d->pad_w, d->stride_h, d->stride_w,
                                                        d->dilation_h, d->dilation_w, CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT),
                        s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnSetConvolutionGroupCount(pl->conv, d->groups), s, fail);
    PD_CUDNN_CHECK_GOTO(cudnnGetConvolution2dForwardOutputDim(pl->conv, pl->x, pl->w, &n, &k, &p, &q), s, fail);
    if (n != dims->n || k != dims->k || p != dims->p || q != dims->q) {
        s = PD_ERROR(PD_EDEVICE, "conv2d: cuDNN derives output [%d,%d,%d,%d], the CPU [%lld,%lld,%lld,%lld]", n, k,
                     p, q, (long long)dims->n, (long long)dims->k, (long long)dims->p, (long long)dims->q);
        goto fail;
    }
    *out = pl;
    return PD_OK;

fail:
    plan_destroy(pl);
    return s;
}

/* The device's plan for this shape, made on first use. */
static pd_status plan_get(pd_cuda_state *st, const pd_conv2d_desc *d, const pd_conv2d_dims *dims, conv_plan **out)
{
    conv_key key;
    conv_plan *pl;

    /* Sizes beyond int would alias a smaller shape's key: refuse first. */
    PD_CHECK(pd_cudnn_check_tensor(dims->n, dims->c, dims->h, dims->w, "conv2d x"));
    PD_CHECK(pd_cudnn_check_tensor(dims->n, dims->k, dims->p, dims->q, "conv2d y"));
    key = key_of(d, dims, st->allow_tf32);
    for (pl = st->conv_plans; pl; pl = pl->next)
        if (memcmp(&pl->key, &key, sizeof(key)) == 0) {
            *out = pl;
            return PD_OK;
        }
    PD_CHECK(plan_create(d, dims, st->allow_tf32, &pl));
    pl->next = st->conv_plans;
    st->conv_plans = pl;
    *out = pl;
    return PD_OK;
}

static int algo_count(conv_direction dir)
{
    switch (dir) {
    case CONV_FORWARD: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case CONV_BACKWARD_DATA: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    default: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    }
}

static cudnnStatus_t workspace_size(cudnnHandle_t h, const conv_plan *pl, conv_direction dir, int algo,
                                    size_t *bytes)
{
    switch (dir) {
    case CONV_FORWARD:
        return cudnnGetConvolutionForwardWorkspaceSize(h, pl->x, pl->w, pl->conv, pl->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    case CONV_BACKWARD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl->w, pl->y, pl->conv, pl->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, pl->x, pl->y, pl->conv, pl->w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

/* The largest workspace an algorithm of the direction asks for within
 * `limit` (algorithms the shape does not support report an error: skipped). */
static size_t search_workspace(cudnnHandle_t h, const conv_plan *pl, conv_direction dir, size_t limit)
{
    size_t most = 0, bytes;

    for (int algo = 0; algo < algo_count(dir); algo++)
        if (workspace_size(h, pl, dir, algo, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= limit && bytes > most)
            most = bytes;
    return most;
}

/* Copies `count` perf structs of any direction into conv_perf. */
#define COPY_PERF(src, count, dst)                                                                         \
    for (int i_ = 0; i_ < (count); i_++)                                                                   \
    (dst)[i_] = (conv_perf){(int)(src)[i_].algo, (src)[i_].status, (src)[i_].memory, (src)[i_].determinism, \
                            (src)[i_].mathType}

/* Runs cudnnFind*AlgorithmEx for the direction: every algorithm that fits
 * the workspace, timed on the call's tensors (the output is overwritten),
 * fastest first. */
static cudnnStatus_t find_algorithms(cudnnHandle_t h, const conv_plan *pl, conv_direction dir,
                                     const conv_operands *o, void *workspace, size_t bytes, int *count,
                                     conv_perf *perf)
{
    cudnnStatus_t s;

    *count = 0;
    switch (dir) {
    case CONV_FORWARD: {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        s = cudnnFindConvolutionForwardAlgorithmEx(h, pl->x, o->x, pl->w, o->w, pl->conv, pl->y, o->y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, count, r, workspace, bytes);
        COPY_PERF(r, s == CUDNN_STATUS_SUCCESS ? *count : 0, perf);
        return s;
    }
    case CONV_BACKWARD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, pl->w, o->w, pl->y, o->dy, pl->conv, pl->x, o->dx,
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, count, r, workspace,
                                                        bytes);
        COPY_PERF(r, s == CUDNN_STATUS_SUCCESS ? *count : 0, perf);
        return s;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, pl->x, o->x, pl->y, o->dy, pl->conv, pl->w, o->dw,
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, count, r,
                                                          workspace, bytes);
        COPY_PERF(r, s == CUDNN_STATUS_SUCCESS ? *count : 0, perf);
        return s;
    }
    }
}

/* Chooses the direction's algorithm for the plan: the fastest that is
 * deterministic, fits the workspace limit and has an allowed math type. */
static pd_status choose_algorithm(pd_device *dev, pd_cuda_state *st, conv_plan *pl, conv_direction dir,
                                  const conv_operands *o)
{
    const size_t limit = st->cudnn_workspace_limit;
    conv_perf perf[CONV_MAX_ALGOS];
    size_t bytes;
    void *workspace;
    int count;

    PD_CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv, pl->key.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    bytes = search_workspace(st->cudnn, pl, dir, limit);
    PD_CHECK(pd_cuda_scratch(dev, bytes, &workspace));
    PD_CUDNN_CHECK(find_algorithms(st->cudnn, pl, dir, o, workspace, bytes, &count, perf));
    for (int i = 0; i < count; i++) {
        const conv_perf *p = &perf[i];
        if (p->status != CUDNN_STATUS_SUCCESS || p->determinism != CUDNN_DETERMINISTIC || p->memory > bytes ||
            (!pl->key.tf32 && p->math != CUDNN_FMA_MATH))
            continue;
        pl->algo[dir] = p->algo;
        pl->math[dir] = p->math;
        pl->workspace[dir] = p->memory;
        pl->chosen[dir] = true;
        return PD_OK;
    }
    return PD_ERROR(PD_ENOTSUP, "%s: cuDNN found no deterministic %s algorithm for x [%d,%d,%d,%d], w [%d,%d,%d,%d] "
                    "(stride %dx%d pad %dx%d dilation %dx%d groups %d) within a workspace of %zu bytes (limit "
                    "%zu: PD_CUDNN_WORKSPACE, MiB)", dev->name, pl->key.tf32 ? "TF32" : "FP32",
                    pl->key.n, pl->key.c, pl->key.h, pl->key.w, pl->key.k, pl->key.c / pl->key.groups, pl->key.r,
                    pl->key.s, pl->key.stride_h, pl->key.stride_w, pl->key.pad_h, pl->key.pad_w, pl->key.dilation_h,
                    pl->key.dilation_w, pl->key.groups, bytes, limit);
}

/* Runs one direction of the plan with its chosen algorithm (choosing it on
 * the first call), overwriting the direction's output. */
static pd_status conv_run(pd_device *dev, pd_cuda_state *st, conv_plan *pl, conv_direction dir,
                          const conv_operands *o)
{
    const float one = 1.0f, zero = 0.0f;
    void *workspace;

    if (!pl->chosen[dir])
        PD_CHECK(choose_algorithm(dev, st, pl, dir, o));
    PD_CHECK(pd_cuda_scratch(dev, pl->workspace[dir], &workspace));
    PD_CUDNN_CHECK(cudnnSetConvolutionMathType(pl->conv, pl->math[dir]));
    switch (dir) {
    case CONV_FORWARD:
        PD_CUDNN_CHECK(cudnnConvolutionForward(st->cudnn, &one, pl->x, o->x, pl->w, o->w, pl->conv,
                                               (cudnnConvolutionFwdAlgo_t)pl->algo[dir], workspace,
                                               pl->workspace[dir], &zero, pl->y, o->y));
        break;
    case CONV_BACKWARD_DATA:
        PD_CUDNN_CHECK(cudnnConvolutionBackwardData(st->cudnn, &one, pl->w, o->w, pl->y, o->dy, pl->conv,
                                                    (cudnnConvolutionBwdDataAlgo_t)pl->algo[dir], workspace,
                                                    pl->workspace[dir], &zero, pl->x, o->dx));
        break;
    default:
        PD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(st->cudnn, &one, pl->x, o->x, pl->y, o->dy, pl->conv,
                                                      (cudnnConvolutionBwdFilterAlgo_t)pl->algo[dir], workspace,
                                                      pl->workspace[dir], &zero, pl->w, o->dw));
        break;
    }
    return PD_OK;
}

/* Checks that the call's tensors (NULL ones skipped) are in device memory
 * and makes the device current. */
static pd_status conv_enter(pd_device *dev, conv_direction dir, const pd_tensor *const *tensors,
                            const char *const *names, int count, pd_cuda_state **st)
{
    PD_CHECK(pd_cuda_expect_on_gpu(direction_names[dir], count, tensors, names));
    return pd_cuda_enter(dev, st);
}

pd_status pd_cuda_conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                 const pd_tensor *bias, pd_tensor *y)
{
    const float one = 1.0f;
    pd_conv2d_dims dims;
    pd_cuda_state *st;
    conv_plan *pl;

    PD_CHECK(pd_kernel_check_conv2d_forward(desc, x, w, bias, y, &dims));
    if (dims.n == 0)
        return PD_OK;
    const pd_tensor *tensors[] = {x, w, bias, y};
    const char *const names[] = {"x", "w", "bias", "y"};
    PD_CHECK(conv_enter(dev, CONV_FORWARD, tensors, names, 4, &st));
    PD_CHECK(plan_get(st, desc, &dims, &pl));
    const conv_operands o = {.x = x->data, .w = w->data, .y = y->data};
    PD_CHECK(conv_run(dev, st, pl, CONV_FORWARD, &o));
    if (bias) /* y += bias broadcast over N, P, Q */
        PD_CUDNN_CHECK(cudnnAddTensor(st->cudnn, &one, pl->bias, bias->data, &one, pl->y, y->data));
    return PD_OK;
}

pd_status pd_cuda_conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                       const pd_tensor *w, pd_tensor *dx)
{
    pd_conv2d_dims dims;
    pd_cuda_state *st;
    conv_plan *pl;

    PD_CHECK(pd_kernel_check_conv2d_backward_data(desc, dy, w, dx, &dims));
    if (dims.n == 0)
        return PD_OK;
    const pd_tensor *tensors[] = {dy, w, dx};
    const char *const names[] = {"dy", "w", "dx"};
    PD_CHECK(conv_enter(dev, CONV_BACKWARD_DATA, tensors, names, 3, &st));
    PD_CHECK(plan_get(st, desc, &dims, &pl));
    const conv_operands o = {.w = w->data, .dy = dy->data, .dx = dx->data};
    return conv_run(dev, st, pl, CONV_BACKWARD_DATA, &o);
}

pd_status pd_cuda_conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                         const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias)
{
    const float one = 1.0f, zero = 0.0f;
    pd_conv2d_dims dims;
    pd_cuda_state *st;
    conv_plan *pl;

    PD_CHECK(pd_kernel_check_conv2d_backward_filter(desc, x, dy, dw, dbias, &dims));
    const pd_tensor *tensors[] = {x, dy, dw, dbias};
    const char *const names[] = {"x", "dy", "dw", "dbias"};
    PD_CHECK(conv_enter(dev, CONV_BACKWARD_FILTER, tensors, names, 4, &st));
    if (dims.n == 0) { /* no images: the gradients are zero, as on the CPU */
        PD_CUDA_CHECK(cudaMemsetAsync(dw->data, 0, pd_tensor_nbytes(dw), st->launch.stream));
        if (dbias)
            PD_CUDA_CHECK(cudaMemsetAsync(dbias->data, 0, pd_tensor_nbytes(dbias), st->launch.stream));
        return PD_OK;
    }
    PD_CHECK(plan_get(st, desc, &dims, &pl));
    const conv_operands o = {.x = x->data, .dy = dy->data, .dw = dw->data};
    PD_CHECK(conv_run(dev, st, pl, CONV_BACKWARD_FILTER, &o));
    if (dbias)
        PD_CUDNN_CHECK(cudnnConvolutionBackwardBias(st->cudnn, &one, pl->y, dy->data, &zero, pl->bias, dbias->data));
    return PD_OK;
}
