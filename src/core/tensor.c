/* Shapes and tensors: metadata, allocation through the device's memory
 * table, host copies. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/tensor.h>

pd_shape pd_shape_make(int ndim, ...)
{
    pd_shape s = {0};
    va_list ap;

    s.ndim = ndim < 0 ? 0 : ndim > PD_MAX_DIMS ? PD_MAX_DIMS : ndim;
    va_start(ap, ndim);
    for (int i = 0; i < s.ndim; i++)
        s.dim[i] = va_arg(ap, int64_t);
    va_end(ap);
    return s;
}

int64_t pd_shape_numel(const pd_shape *shape)
{
    int64_t n = 1;

    for (int i = 0; i < shape->ndim; i++)
        n *= shape->dim[i];
    return n;
}

bool pd_shape_equal(const pd_shape *a, const pd_shape *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    return true;
}

char *pd_shape_format(const pd_shape *shape, char *buf, size_t size)
{
    size_t used = 0;

    if (size == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < shape->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape->dim[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

void pd_tensor_set_contiguous_strides(pd_tensor *t)
{
    int64_t stride = 1;

    for (int i = t->shape.ndim - 1; i >= 0; i--) {
        t->stride[i] = stride;
        stride *= t->shape.dim[i];
    }
}

bool pd_tensor_is_contiguous(const pd_tensor *t)
{
    int64_t stride = 1;

    for (int i = t->shape.ndim - 1; i >= 0; i--) {
        if (t->shape.dim[i] != 1 && t->stride[i] != stride)
            return false;
        stride *= t->shape.dim[i];
    }
    return true;
}

void pd_tensor_view(pd_tensor *t, pd_device *dev, pd_dtype dtype, const pd_shape *shape, void *data)
{
    memset(t, 0, sizeof(*t));
    t->device = dev;
    t->dtype = dtype;
    t->shape = *shape;
    t->data = data;
    t->owns_data = false;
    pd_tensor_set_contiguous_strides(t);
}

int64_t pd_tensor_numel(const pd_tensor *t) { return pd_shape_numel(&t->shape); }

size_t pd_tensor_nbytes(const pd_tensor *t) { return (size_t)pd_tensor_numel(t) * pd_dtype_size(t->dtype); }

static pd_status tensor_create(pd_device *dev, pd_dtype dtype, const pd_shape *shape, bool zero, pd_tensor **out)
{
    pd_tensor *t;
    void *data = NULL;
    size_t bytes;
    pd_status s;

    if ((unsigned)dtype >= PD_DTYPE_COUNT || shape->ndim < 0 || shape->ndim > PD_MAX_DIMS)
        return PD_ERROR(PD_EINVAL, "tensor: invalid dtype %d or rank %d", (int)dtype, shape->ndim);
    for (int i = 0; i < shape->ndim; i++)
        if (shape->dim[i] < 0)
            return PD_ERROR(PD_EINVAL, "tensor: negative dimension %lld", (long long)shape->dim[i]);
    t = calloc(1, sizeof(*t));
    if (!t)
        return PD_ERROR(PD_ENOMEM, "tensor: out of host memory");
    pd_tensor_view(t, dev, dtype, shape, NULL);
    bytes = pd_tensor_nbytes(t);
    if (bytes > 0) {
        s = dev->mem->alloc(dev, bytes, &data);
        if (s == PD_OK && zero)
            s = dev->mem->zero(dev, data, bytes);
        if (s != PD_OK) {
            if (data)
                dev->mem->free(dev, data);
            free(t);
            return s;
        }
    }
    t->data = data;
    t->owns_data = true;
    *out = t;
    return PD_OK;
}

pd_status pd_tensor_create(pd_device *dev, pd_dtype dtype, const pd_shape *shape, pd_tensor **out)
{
    return tensor_create(dev, dtype, shape, false, out);
}

pd_status pd_tensor_create_zero(pd_device *dev, pd_dtype dtype, const pd_shape *shape, pd_tensor **out)
{
    return tensor_create(dev, dtype, shape, true, out);
}

void pd_tensor_destroy(pd_tensor *t)
{
    if (!t)
        return;
    if (t->owns_data && t->data)
        t->device->mem->free(t->device, t->data);
    free(t);
}

static pd_status expect_bytes(const pd_tensor *t, size_t bytes, const char *what)
{
    if (bytes != pd_tensor_nbytes(t))
        return PD_ERROR(PD_ESHAPE, "%s: %zu bytes given for a tensor of %zu bytes", what, bytes,
                        pd_tensor_nbytes(t));
    return PD_OK;
}

pd_status pd_tensor_copy_from_host(pd_tensor *t, const void *src, size_t bytes)
{
    PD_CHECK(expect_bytes(t, bytes, "copy from host"));
    return bytes ? t->device->mem->copy(t->device, t->data, src, bytes, PD_COPY_HOST_TO_DEVICE) : PD_OK;
}

pd_status pd_tensor_copy_to_host(const pd_tensor *t, void *dst, size_t bytes)
{
    PD_CHECK(expect_bytes(t, bytes, "copy to host"));
    return bytes ? t->device->mem->copy(t->device, dst, t->data, bytes, PD_COPY_DEVICE_TO_HOST) : PD_OK;
}

pd_status pd_tensor_copy(pd_tensor *dst, const pd_tensor *src)
{
    if (dst->dtype != src->dtype || pd_tensor_numel(dst) != pd_tensor_numel(src))
        return PD_ERROR(PD_ESHAPE, "tensor copy: %s x %lld into %s x %lld", pd_dtype_name(src->dtype),
                        (long long)pd_tensor_numel(src), pd_dtype_name(dst->dtype),
                        (long long)pd_tensor_numel(dst));
    if (pd_tensor_nbytes(dst) == 0 || dst->data == src->data)
        return PD_OK;
    return dst->device->mem->copy(dst->device, dst->data, src->data, pd_tensor_nbytes(dst),
                                  PD_COPY_DEVICE_TO_DEVICE);
}

pd_status pd_tensor_zero(pd_tensor *t)
{
    return pd_tensor_nbytes(t) ? t->device->mem->zero(t->device, t->data, pd_tensor_nbytes(t)) : PD_OK;
}

pd_status pd_tensor_expect(const pd_tensor *t, pd_dtype dtype, const pd_shape *shape, const char *what)
{
    char want[96], got[96];

    if (t->dtype != dtype || !pd_shape_equal(&t->shape, shape))
        return PD_ERROR(PD_ESHAPE, "%s: expected %s %s, got %s %s", what, pd_dtype_name(dtype),
                        pd_shape_format(shape, want, sizeof(want)), pd_dtype_name(t->dtype),
                        pd_shape_format(&t->shape, got, sizeof(got)));
    return PD_OK;
}
