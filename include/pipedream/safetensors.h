/* Safetensors files (Hugging Face's format, read by PyTorch's and NumPy's
 * `safetensors` packages): the checkpoint format, one file per pipeline stage.
 *
 * Layout: 8 bytes N (little-endian u64); N bytes of UTF-8 JSON, an object
 * mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
 * plus an optional "__metadata__" object of string values; then the data:
 * each tensor row-major and little-endian at [begin, end) of the bytes after
 * the header, the tensors covering those bytes without gaps or overlaps. */
#ifndef PIPEDREAM_SAFETENSORS_H
#define PIPEDREAM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>

#include <pipedream/status.h>
#include <pipedream/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor to write: either `tensor` (on any device, contiguous; its dtype,
 * shape and data are used and the other fields ignored), or `dtype`, `shape`
 * and `data` in host memory (NULL allowed when it holds no elements). */
typedef struct pd_st_entry {
    const char *name;
    const pd_tensor *tensor;
    pd_dtype dtype;
    pd_shape shape;
    const void *data;
} pd_st_entry;

/* Writes the `n_entries` tensors and the `n_metadata` string pairs
 * metadata[2i] -> metadata[2i+1] as one safetensors file, byte for byte as
 * the reference writer does: metadata first, tensors ordered by dtype
 * (widest first, which keeps every tensor aligned to its element size) then
 * name, the header padded with spaces to a multiple of 8. Tensors on a
 * device are copied to the host through a bounded staging buffer. The file
 * is replaced atomically (temporary file, fsync, rename). PD_EINVAL for a
 * bad entry (duplicate or reserved name, invalid UTF-8, negative
 * dimension), PD_EIO if the file cannot be written. */
pd_status pd_safetensors_write(const char *path, const pd_st_entry *entries, int n_entries, const char *const *metadata,
                               int n_metadata);

/* An open, fully validated safetensors file. */
typedef struct pd_safetensors pd_safetensors;

/* What the file says about one tensor. All pointers are borrowed from the
 * open file and die with pd_safetensors_close. */
typedef struct pd_st_info {
    const char *name;
    const char *dtype_name; /* as spelled in the file: "F32", "I64", ... */
    bool supported;         /* the dtype is one of pd_dtype's (else only raw bytes) */
    pd_dtype dtype;         /* meaningful when supported */
    size_t element_size;
    pd_shape shape;
    const void *data; /* in the file; aligned to element_size when our writer (or
                       * the reference one) wrote it, possibly not otherwise */
    size_t nbytes;
} pd_st_info;

/* Maps the file at `path` read-only and validates all of it before returning
 * it: the header length against the file size (and the reference limit of
 * 100 MB), the JSON (well-formed, an object, no duplicate names), each
 * tensor (known dtype, non-negative shape whose byte count does not
 * overflow, data_offsets inside the data and exactly numel x element size
 * apart, no unknown fields), the metadata (string values only), and that
 * the tensors cover the data exactly. Any violation is PD_EFORMAT naming
 * the file and the tensor; PD_ENOTSUP for valid files pipedream cannot
 * represent (sub-byte dtypes, rank > PD_MAX_DIMS); PD_EIO if unreadable.
 * Tensors of other byte-sized dtypes (I64, F64, BOOL, ...) are listed with
 * supported = false. The handle is read-only once open, so several threads
 * may query it at once. Close with pd_safetensors_close. The file must not
 * be truncated by another process while it is open (the mapping would fault). */
pd_status pd_safetensors_open(const char *path, pd_safetensors **out);

/* Like pd_safetensors_open for a whole file held in memory; `name` stands for
 * the path in messages. The buffer is borrowed and must outlive the handle. */
pd_status pd_safetensors_open_buffer(const void *data, size_t size, const char *name, pd_safetensors **out);

/* Unmaps and frees the file; NULL is ignored. */
void pd_safetensors_close(pd_safetensors *file);

/* Number of tensors. */
int pd_safetensors_count(const pd_safetensors *file);

/* The tensor at `index` in file order (by data offset); PD_EINVAL if out of
 * range. */
pd_status pd_safetensors_entry(const pd_safetensors *file, int index, pd_st_info *out);

/* The tensor called `name`; PD_ENOTFOUND naming the file if there is none. */
pd_status pd_safetensors_find(const pd_safetensors *file, const char *name, pd_st_info *out);

/* The metadata value for `key`, or NULL if the file has none. Borrowed. */
const char *pd_safetensors_metadata(const pd_safetensors *file, const char *key);

/* Number of metadata pairs, and the pair at `index` (file order; borrowed);
 * PD_EINVAL if out of range. */
int pd_safetensors_metadata_count(const pd_safetensors *file);
pd_status pd_safetensors_metadata_entry(const pd_safetensors *file, int index, const char **key, const char **value);

/* Copies tensor `name` into `t` (any device, contiguous). PD_ENOTFOUND if
 * absent, PD_ENOTSUP for a dtype pipedream has no type for, PD_ESHAPE
 * naming both sides unless t has the file's dtype and shape. */
pd_status pd_safetensors_read_into(const pd_safetensors *file, const char *name, pd_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
