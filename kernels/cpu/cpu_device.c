/* The CPU backend: host memory, the scratch buffer and the entry table. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/pd_cpu.h"

#define CPU_ALIGNMENT 64

typedef struct cpu_state {
    void *scratch;
    size_t scratch_bytes;
} cpu_state;

static pd_status cpu_alloc(pd_device *dev, size_t bytes, void **out)
{
    void *p = NULL;

    if (posix_memalign(&p, CPU_ALIGNMENT, bytes ? bytes : CPU_ALIGNMENT) != 0)
        return PD_ERROR(PD_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    *out = p;
    return PD_OK;
}

static void cpu_free(pd_device *dev, void *ptr) { free(ptr); }

static pd_status cpu_copy(pd_device *dev, void *dst, const void *src, size_t bytes, pd_copy_kind kind)
{
    memmove(dst, src, bytes);
    return PD_OK;
}

static pd_status cpu_zero(pd_device *dev, void *ptr, size_t bytes)
{
    memset(ptr, 0, bytes);
    return PD_OK;
}

static pd_status cpu_synchronize(pd_device *dev) { return PD_OK; }

static const pd_mem_ops cpu_mem_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
};

pd_status pd_cpu_scratch(pd_device *dev, size_t bytes, float **out)
{
    cpu_state *st = dev->backend;

    if (bytes > st->scratch_bytes) {
        void *p = NULL;
        if (posix_memalign(&p, CPU_ALIGNMENT, bytes) != 0)
            return PD_ERROR(PD_ENOMEM, "cpu: cannot allocate %zu bytes of scratch", bytes);
        free(st->scratch);
        st->scratch = p;
        st->scratch_bytes = bytes;
    }
    *out = st->scratch;
    return PD_OK;
}

static pd_status cpu_open(int ordinal, pd_device *dev)
{
    cpu_state *st;

    if (ordinal != 0)
        return PD_ERROR(PD_ENOTFOUND, "cpu:%d: there is one CPU device, cpu:0", ordinal);
    st = calloc(1, sizeof(*st));
    if (!st)
        return PD_ERROR(PD_ENOMEM, "cpu: out of host memory");
    dev->kind = PD_DEVICE_CPU;
    dev->ordinal = 0;
    snprintf(dev->name, sizeof(dev->name), "cpu");
    dev->mem = &cpu_mem_ops;
    dev->backend = st;
    return PD_OK;
}

static void cpu_close(pd_device *dev)
{
    cpu_state *st = dev->backend;

    free(st->scratch);
    free(st);
}

static const pd_device_ops cpu_ops = {
    .fill = pd_cpu_fill,
    .axpby = pd_cpu_axpby,
    .add = pd_cpu_add,
    .convert = pd_cpu_convert,
    .sum = pd_cpu_sum,
    .relu_forward = pd_cpu_relu_forward,
    .relu_backward = pd_cpu_relu_backward,
    /* gemm.c, conv2d.c, linear.c, pool2d.c */
    .gemm = pd_cpu_gemm,
    .conv2d_forward = pd_cpu_conv2d_forward,
    .conv2d_backward_data = pd_cpu_conv2d_backward_data,
    .conv2d_backward_filter = pd_cpu_conv2d_backward_filter,
    .linear_forward = pd_cpu_linear_forward,
    .linear_backward = pd_cpu_linear_backward,
    .pool2d_forward = pd_cpu_pool2d_forward,
    .pool2d_backward = pd_cpu_pool2d_backward,
    /* batchnorm.c, lrn.c, dropout.c, softmax_cross_entropy.c, optimizer.c */
    .batchnorm_forward_train = pd_cpu_batchnorm_forward_train,
    .batchnorm_forward_eval = pd_cpu_batchnorm_forward_eval,
    .batchnorm_backward = pd_cpu_batchnorm_backward,
    .lrn_forward = pd_cpu_lrn_forward,
    .lrn_backward = pd_cpu_lrn_backward,
    .dropout_forward = pd_cpu_dropout_forward,
    .dropout_backward = pd_cpu_dropout_backward,
    .softmax_cross_entropy_forward = pd_cpu_softmax_cross_entropy_forward,
    .softmax_cross_entropy_backward = pd_cpu_softmax_cross_entropy_backward,
    .sgd_update = pd_cpu_sgd_update,
    .adam_update = pd_cpu_adam_update,
    /* concat.c, embedding.c, lstm_cell.c */
    .concat_forward = pd_cpu_concat_forward,
    .concat_backward = pd_cpu_concat_backward,
    .embedding_forward = pd_cpu_embedding_forward,
    .embedding_backward = pd_cpu_embedding_backward,
    .lstm_cell_forward = pd_cpu_lstm_cell_forward,
    .lstm_cell_backward = pd_cpu_lstm_cell_backward,
};

const pd_backend pd_backend_cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .ops = &cpu_ops,
};
