/* The CPU backend: host memory through the caching allocator, the scratch
 * buffer, clock-based events and the entry table. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/pd_cpu.h"
#include "kernels/pd_caching_alloc.h"

#define CPU_ALIGNMENT 64

/* Freed tensors kept for reuse: enough for the temporaries of a step on a
 * CPU, while a pattern of ever new sizes cannot hoard host memory (beyond
 * it, blocks go straight back to the C library). */
#define CPU_MAX_CACHED_BYTES ((size_t)256 << 20)

typedef struct cpu_state {
    pd_caching_alloc *memory;
    void *scratch;
    size_t scratch_bytes;
} cpu_state;

/* A CPU event: the monotonic clock when recorded (work is synchronous). */
struct pd_device_event {
    struct timespec when;
    bool recorded;
};

static pd_status host_memalign(size_t bytes, void **out)
{
    void *p = NULL;

    if (posix_memalign(&p, CPU_ALIGNMENT, bytes ? bytes : CPU_ALIGNMENT) != 0)
        return PD_ERROR(PD_ENOMEM, "cpu: cannot allocate %zu bytes", bytes);
    *out = p;
    return PD_OK;
}

static pd_status raw_alloc(void *ctx, size_t bytes, void **out) { return host_memalign(bytes, out); }

static void raw_free(void *ctx, void *ptr) { free(ptr); }

static const pd_caching_alloc_ops cpu_raw_ops = {.alloc = raw_alloc, .free = raw_free};

static pd_status cpu_alloc(pd_device *dev, size_t bytes, void **out)
{
    cpu_state *st = dev->backend;

    return pd_caching_alloc_get(st->memory, bytes, out);
}

static void cpu_free(pd_device *dev, void *ptr)
{
    cpu_state *st = dev->backend;

    pd_caching_alloc_put(st->memory, ptr);
}

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
        /* The old contents are not kept: its block may serve this request,
         * or be given back if memory runs short. */
        pd_caching_alloc_put(st->memory, st->scratch);
        st->scratch = NULL;
        st->scratch_bytes = 0;
        PD_CHECK(pd_caching_alloc_get(st->memory, bytes, &st->scratch));
        st->scratch_bytes = bytes;
    }
    *out = st->scratch;
    return PD_OK;
}

static pd_status cpu_memory_stats(pd_device *dev, pd_device_memory_stats *out)
{
    cpu_state *st = dev->backend;

    pd_caching_alloc_stats(st->memory, out);
    return PD_OK;
}

static pd_status cpu_host_alloc(pd_device *dev, size_t bytes, void **out) { return host_memalign(bytes, out); }

static void cpu_host_free(pd_device *dev, void *ptr) { free(ptr); }

static pd_status cpu_event_create(pd_device *dev, pd_device_event **out)
{
    pd_device_event *ev = calloc(1, sizeof(*ev));

    if (!ev)
        return PD_ERROR(PD_ENOMEM, "cpu: out of host memory for an event");
    *out = ev;
    return PD_OK;
}

static pd_status cpu_event_record(pd_device *dev, pd_device_event *event)
{
    clock_gettime(CLOCK_MONOTONIC, &event->when);
    event->recorded = true;
    return PD_OK;
}

static pd_status cpu_event_elapsed_ms(pd_device *dev, pd_device_event *start, pd_device_event *stop, double *ms)
{
    if (!start->recorded || !stop->recorded)
        return PD_ERROR(PD_ESTATE, "cpu: elapsed time asked of an event never recorded");
    *ms = 1e3 * (double)(stop->when.tv_sec - start->when.tv_sec) +
          1e-6 * (double)(stop->when.tv_nsec - start->when.tv_nsec);
    return PD_OK;
}

static void cpu_event_destroy(pd_device *dev, pd_device_event *event) { free(event); }

static pd_status cpu_set_precision(pd_device *dev, pd_precision precision)
{
    switch (precision) {
    case PD_PRECISION_F32: return PD_OK;
    case PD_PRECISION_TF32: return PD_ERROR(PD_ENOTSUP, "cpu: tf32 math needs a CUDA device");
    case PD_PRECISION_BF16: return PD_OK; /* f32 kernels; the graph stores bf16 (pd_graph_set_precision) */
    }
    return PD_ERROR(PD_EINVAL, "cpu: unknown precision %d", (int)precision);
}

static pd_status cpu_open(int ordinal, pd_device *dev)
{
    cpu_state *st;
    pd_status s;

    if (ordinal != 0)
        return PD_ERROR(PD_ENOTFOUND, "cpu:%d: there is one CPU device, cpu:0", ordinal);
    st = calloc(1, sizeof(*st));
    if (!st)
        return PD_ERROR(PD_ENOMEM, "cpu: out of host memory");
    s = pd_caching_alloc_create("cpu", &cpu_raw_ops, NULL, CPU_MAX_CACHED_BYTES, &st->memory);
    if (s != PD_OK) {
        free(st);
        return s;
    }
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

    pd_caching_alloc_put(st->memory, st->scratch);
    pd_caching_alloc_destroy(st->memory);
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
    /* memory statistics, host memory, events, precision (above) */
    .memory_stats = cpu_memory_stats,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .event_create = cpu_event_create,
    .event_record = cpu_event_record,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .event_destroy = cpu_event_destroy,
    .set_precision = cpu_set_precision,
};

const pd_backend pd_backend_cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .ops = &cpu_ops,
};
