/* Data types, shapes, devices (memory side) and tensors. */
#ifndef PIPEDREAM_TENSOR_H
#define PIPEDREAM_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PD_F32 = 0,
    PD_BF16 = 1,
    PD_F16 = 2,
    PD_I32 = 3,
    PD_U8 = 4,
} pd_dtype;

#define PD_DTYPE_COUNT 5

/* Bytes per element. */
size_t pd_dtype_size(pd_dtype dtype);

/* "f32", "bf16", "f16", "i32", "u8". */
const char *pd_dtype_name(pd_dtype dtype);

/* Parses a name of pd_dtype_name() (or the safetensors spelling "F32", "BF16",
 * "F16", "I32", "U8"); PD_ENOTFOUND if unknown. */
pd_status pd_dtype_parse(const char *name, pd_dtype *out);

/* Converts n elements between dtypes on the host (f32 <-> bf16/f16 rounds to
 * nearest even; i32/u8 <-> f32 by value). Same dtype copies. */
pd_status pd_dtype_convert(pd_dtype dst_dtype, void *dst, pd_dtype src_dtype, const void *src, size_t n);

#define PD_MAX_DIMS 8

/* A shape of rank 0..PD_MAX_DIMS; batch-first (N, C, H, W) for images. */
typedef struct pd_shape {
    int ndim;
    int64_t dim[PD_MAX_DIMS];
} pd_shape;

/* Builds a shape from `ndim` dimensions given as int64_t varargs. */
pd_shape pd_shape_make(int ndim, ...);

/* Number of elements (1 for rank 0). */
int64_t pd_shape_numel(const pd_shape *shape);

/* True if both shapes have the same rank and dimensions. */
bool pd_shape_equal(const pd_shape *a, const pd_shape *b);

/* Writes "[2,3,4]" into buf (always terminated) and returns buf. */
char *pd_shape_format(const pd_shape *shape, char *buf, size_t size);

typedef struct pd_device pd_device;
struct pd_device_ops;

typedef enum {
    PD_DEVICE_CPU = 0,
    PD_DEVICE_CUDA = 1,
} pd_device_kind;

typedef enum {
    PD_COPY_HOST_TO_DEVICE,
    PD_COPY_DEVICE_TO_HOST,
    PD_COPY_DEVICE_TO_DEVICE,
} pd_copy_kind;

/* Memory operations of a device; every backend fills all of them. */
typedef struct pd_mem_ops {
    pd_status (*alloc)(pd_device *dev, size_t bytes, void **out);
    void (*free)(pd_device *dev, void *ptr);
    pd_status (*copy)(pd_device *dev, void *dst, const void *src, size_t bytes, pd_copy_kind kind);
    pd_status (*zero)(pd_device *dev, void *ptr, size_t bytes);
    pd_status (*synchronize)(pd_device *dev);
} pd_mem_ops;

/* A device handle: opened with pd_device_open() (kernels.h); one handle is
 * used by one thread at a time. */
struct pd_device {
    pd_device_kind kind;
    int ordinal;
    char name[64];
    const pd_mem_ops *mem;
    const struct pd_device_ops *ops;
    void *backend; /* the backend's own state */
};

/* A dense, contiguous (row-major) tensor. A tensor either owns its data
 * (pd_tensor_create) or views memory owned elsewhere (pd_tensor_view). */
typedef struct pd_tensor {
    pd_device *device;
    pd_dtype dtype;
    pd_shape shape;
    int64_t stride[PD_MAX_DIMS]; /* in elements */
    void *data;
    bool owns_data;
} pd_tensor;

/* Allocates an uninitialised tensor on `dev`; free with pd_tensor_destroy. */
pd_status pd_tensor_create(pd_device *dev, pd_dtype dtype, const pd_shape *shape, pd_tensor **out);

/* Like pd_tensor_create, with the memory zeroed. */
pd_status pd_tensor_create_zero(pd_device *dev, pd_dtype dtype, const pd_shape *shape, pd_tensor **out);

/* Frees a tensor made by pd_tensor_create and its data if it owns it. NULL is ignored. */
void pd_tensor_destroy(pd_tensor *t);

/* Fills `t` in place as a non-owning view of `data` on `dev`. */
void pd_tensor_view(pd_tensor *t, pd_device *dev, pd_dtype dtype, const pd_shape *shape, void *data);

/* Number of elements. */
int64_t pd_tensor_numel(const pd_tensor *t);

/* Size of the data in bytes. */
size_t pd_tensor_nbytes(const pd_tensor *t);

/* Sets contiguous row-major strides for `t->shape`. */
void pd_tensor_set_contiguous_strides(pd_tensor *t);

/* True if the strides are the contiguous row-major ones. */
bool pd_tensor_is_contiguous(const pd_tensor *t);

/* Copies bytes between host memory and the tensor; sizes must match exactly. */
pd_status pd_tensor_copy_from_host(pd_tensor *t, const void *src, size_t bytes);
pd_status pd_tensor_copy_to_host(const pd_tensor *t, void *dst, size_t bytes);

/* Copies src into dst (same dtype and element count) on dst's device. */
pd_status pd_tensor_copy(pd_tensor *dst, const pd_tensor *src);

/* Zeroes the tensor's data. */
pd_status pd_tensor_zero(pd_tensor *t);

/* PD_ESHAPE with a message naming `what` unless t has `dtype` and `shape`. */
pd_status pd_tensor_expect(const pd_tensor *t, pd_dtype dtype, const pd_shape *shape, const char *what);

#ifdef __cplusplus
}
#endif
#endif
