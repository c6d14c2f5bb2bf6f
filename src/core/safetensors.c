/* Safetensors files: a writer that produces the reference implementation's
 * bytes, and a reader that maps a file and validates every part of it
 * before handing out a pointer into it. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pipedream/json.h>
#include <pipedream/safetensors.h>

#include "core/pd_atomic_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this writer and reader copy raw bytes and need a little-endian host"
#endif

/* The reference implementation's limit on the JSON header. */
#define MAX_HEADER_BYTES 100000000u
/* Device tensors reach the file through a host buffer of at most this. */
#define STAGING_BYTES ((size_t)16 << 20)
#define METADATA_KEY "__metadata__"

/* Every dtype of the format, in the reference's order of increasing
 * alignment (its writer puts the widest first). Size 0: sub-byte packed
 * types, valid in the format but not representable here. */
typedef struct st_dtype {
    const char *name;
    size_t size;
    int pd; /* the pd_dtype, or -1 */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"BOOL", 1, -1},    {"F4", 0, -1},      {"F6_E2M3", 0, -1},   {"F6_E3M2", 0, -1}, {"U8", 1, PD_U8},
    {"I8", 1, -1},      {"F8_E5M2", 1, -1}, {"F8_E4M3", 1, -1},   {"F8_E8M0", 1, -1}, {"I16", 2, -1},
    {"U16", 2, -1},     {"F16", 2, PD_F16}, {"BF16", 2, PD_BF16}, {"I32", 4, PD_I32}, {"U32", 4, -1},
    {"F32", 4, PD_F32}, {"C64", 8, -1},     {"F64", 8, -1},       {"I64", 8, -1},     {"U64", 8, -1},
};

#define ST_DTYPE_COUNT ((int)(sizeof(st_dtypes) / sizeof(st_dtypes[0])))

static int st_dtype_of_pd(pd_dtype dtype)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (st_dtypes[i].pd == (int)dtype)
            return i;
    return -1;
}

static int st_dtype_by_name(const char *name)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return i;
    return -1;
}

/* numel x element size, or -1 if it does not fit in int64_t. */
static int64_t shape_bytes(const pd_shape *shape, size_t element_size)
{
    int64_t n = (int64_t)element_size;

    for (int i = 0; i < shape->ndim; i++) {
        if (shape->dim[i] < 0 || (shape->dim[i] != 0 && n > INT64_MAX / shape->dim[i]))
            return -1;
        n *= shape->dim[i];
    }
    return n;
}

/* ---- writer ---- */

typedef struct planned_tensor {
    const char *name;
    int st; /* index into st_dtypes */
    pd_shape shape;
    const void *data;        /* host data, or the tensor's data on its device */
    const pd_tensor *tensor; /* non-NULL for data on a device */
    uint64_t nbytes;
} planned_tensor;

static int planned_order(const void *pa, const void *pb)
{
    const planned_tensor *a = pa, *b = pb;

    if (a->st != b->st)
        return a->st > b->st ? -1 : 1; /* widest first */
    return strcmp(a->name, b->name);   /* bytewise, as Rust orders strings */
}

static pd_status plan_entry(const char *path, const pd_st_entry *e, planned_tensor *p)
{
    pd_dtype dtype = e->tensor ? e->tensor->dtype : e->dtype;
    const pd_shape *shape = e->tensor ? &e->tensor->shape : &e->shape;
    int64_t bytes;

    if (!e->name)
        return PD_ERROR(PD_EINVAL, "safetensors '%s': a tensor has no name", path);
    if (strcmp(e->name, METADATA_KEY) == 0)
        return PD_ERROR(PD_EINVAL, "safetensors '%s': '%s' is reserved and cannot name a tensor", path, METADATA_KEY);
    if ((unsigned)dtype >= PD_DTYPE_COUNT || shape->ndim < 0 || shape->ndim > PD_MAX_DIMS)
        return PD_ERROR(PD_EINVAL, "safetensors '%s': tensor '%s' has invalid dtype %d or rank %d", path, e->name,
                        (int)dtype, shape->ndim);
    p->st = st_dtype_of_pd(dtype);
    bytes = shape_bytes(shape, pd_dtype_size(dtype));
    if (bytes < 0)
        return PD_ERROR(PD_EINVAL, "safetensors '%s': tensor '%s' has a negative or overflowing shape", path, e->name);
    p->name = e->name;
    p->shape = *shape;
    p->nbytes = (uint64_t)bytes;
    p->tensor = NULL;
    p->data = e->tensor ? e->tensor->data : e->data;
    if (e->tensor) {
        if (!pd_tensor_is_contiguous(e->tensor))
            return PD_ERROR(PD_EINVAL, "safetensors '%s': tensor '%s' is not contiguous", path, e->name);
        if (e->tensor->device->kind != PD_DEVICE_CPU)
            p->tensor = e->tensor;
    }
    if (!p->data && bytes > 0)
        return PD_ERROR(PD_EINVAL, "safetensors '%s': tensor '%s' has %" PRId64 " bytes but no data", path, e->name,
                        bytes);
    return PD_OK;
}

static json_t *tensor_header(const planned_tensor *p, uint64_t begin)
{
    json_t *info = json_object(), *shape = json_array(), *offsets = json_array();
    int bad = !info || !shape || !offsets;

    for (int i = 0; i < p->shape.ndim && !bad; i++)
        bad |= json_array_append_new(shape, json_integer(p->shape.dim[i]));
    if (!bad)
        bad |= json_array_append_new(offsets, json_integer((json_int_t)begin)) |
               json_array_append_new(offsets, json_integer((json_int_t)(begin + p->nbytes)));
    if (!bad)
        bad |= json_object_set_new(info, "dtype", json_string(st_dtypes[p->st].name)) |
               json_object_set(info, "shape", shape) | json_object_set(info, "data_offsets", offsets);
    json_decref(shape);
    json_decref(offsets);
    if (bad) {
        json_decref(info);
        return NULL;
    }
    return info;
}

/* The padded JSON header; *out is malloc'd. */
static pd_status build_header(const char *path, const planned_tensor *plan, int n, const char *const *metadata,
                              int n_metadata, char **out, size_t *out_len)
{
    json_t *root = json_object(), *meta = NULL;
    pd_status s = PD_OK;
    uint64_t offset = 0;
    char *text = NULL;
    size_t len, padded;

    if (!root)
        return PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
    if (n_metadata > 0) {
        meta = json_object();
        if (!meta || json_object_set_new(root, METADATA_KEY, meta) != 0) {
            s = PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
            goto out_root;
        }
    }
    for (int i = 0; i < n_metadata; i++) {
        const char *key = metadata[2 * i], *value = metadata[2 * i + 1];
        /* json_object_set_new takes the value even when it fails */
        if (!key || !value || json_object_get(meta, key) || json_object_set_new(meta, key, json_string(value)) != 0) {
            s = PD_ERROR(PD_EINVAL, "safetensors '%s': metadata pair %d ('%s') is missing, repeated or not UTF-8", path,
                         i, key ? key : "(null)");
            goto out_root;
        }
    }
    for (int i = 0; i < n; i++) {
        json_t *info;
        if (json_object_get(root, plan[i].name)) {
            s = PD_ERROR(PD_EINVAL, "safetensors '%s': tensor name '%s' is repeated", path, plan[i].name);
            goto out_root;
        }
        info = tensor_header(&plan[i], offset);
        if (!info) {
            s = PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
            goto out_root;
        }
        if (json_object_set_new(root, plan[i].name, info) != 0) { /* takes info even when it fails */
            s = PD_ERROR(PD_EINVAL, "safetensors '%s': tensor name '%s' is not valid UTF-8", path, plan[i].name);
            goto out_root;
        }
        offset += plan[i].nbytes;
    }
    text = json_dumps(root, JSON_COMPACT);
    if (!text) {
        s = PD_ERROR(PD_ENOMEM, "safetensors '%s': JSON encoding failed", path);
        goto out_root;
    }
    len = strlen(text);
    padded = (len + 7) / 8 * 8;
    if (padded > MAX_HEADER_BYTES) {
        free(text);
        s = PD_ERROR(PD_EINVAL, "safetensors '%s': the header would take %zu bytes, over the format's limit", path,
                     padded);
        goto out_root;
    }
    if (padded > len) {
        char *grown = realloc(text, padded + 1);
        if (!grown) {
            free(text);
            s = PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
            goto out_root;
        }
        text = grown;
        memset(text + len, ' ', padded - len);
        text[padded] = '\0';
    }
    *out = text;
    *out_len = padded;
out_root:
    json_decref(root);
    return s;
}

/* Writes one tensor's bytes; device data goes through `staging`. */
static pd_status write_tensor_data(pd_atomic_file *f, const planned_tensor *p, void *staging)
{
    pd_device *dev;

    if (!p->tensor)
        return pd_atomic_file_write(f, p->data, (size_t)p->nbytes);
    dev = p->tensor->device;
    for (uint64_t done = 0; done < p->nbytes;) {
        size_t chunk = p->nbytes - done < STAGING_BYTES ? (size_t)(p->nbytes - done) : STAGING_BYTES;
        PD_CHECK(dev->mem->copy(dev, staging, (const char *)p->data + done, chunk, PD_COPY_DEVICE_TO_HOST));
        PD_CHECK(pd_atomic_file_write(f, staging, chunk));
        done += chunk;
    }
    return PD_OK;
}

pd_status pd_safetensors_write(const char *path, const pd_st_entry *entries, int n_entries, const char *const *metadata,
                               int n_metadata)
{
    planned_tensor *plan = NULL;
    unsigned char length[8];
    size_t header_len = 0, staging_bytes = 0;
    char *header = NULL;
    void *staging = NULL;
    pd_atomic_file f;
    pd_status s;

    if (n_entries < 0 || n_metadata < 0 || (n_entries > 0 && !entries) || (n_metadata > 0 && !metadata))
        return PD_ERROR(PD_EINVAL, "safetensors '%s': bad entry (%d) or metadata (%d) list", path, n_entries,
                        n_metadata);
    plan = calloc((size_t)n_entries + 1, sizeof(*plan));
    if (!plan)
        return PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
    for (int i = 0; i < n_entries; i++) {
        PD_CHECK_GOTO(plan_entry(path, &entries[i], &plan[i]), s, out_plan);
        if (plan[i].tensor && plan[i].nbytes > staging_bytes)
            staging_bytes = plan[i].nbytes < STAGING_BYTES ? (size_t)plan[i].nbytes : STAGING_BYTES;
    }
    qsort(plan, (size_t)n_entries, sizeof(*plan), planned_order);
    PD_CHECK_GOTO(build_header(path, plan, n_entries, metadata, n_metadata, &header, &header_len), s, out_plan);
    if (staging_bytes > 0 && !(staging = malloc(staging_bytes))) {
        s = PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", path);
        goto out_header;
    }
    for (int i = 0; i < 8; i++)
        length[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    PD_CHECK_GOTO(pd_atomic_file_begin(path, &f), s, out_staging);
    PD_CHECK_GOTO(pd_atomic_file_write(&f, length, sizeof(length)), s, out_abort);
    PD_CHECK_GOTO(pd_atomic_file_write(&f, header, header_len), s, out_abort);
    for (int i = 0; i < n_entries; i++)
        PD_CHECK_GOTO(write_tensor_data(&f, &plan[i], staging), s, out_abort);
    s = pd_atomic_file_commit(&f);
    goto out_staging;
out_abort:
    pd_atomic_file_abort(&f);
out_staging:
    free(staging);
out_header:
    free(header);
out_plan:
    free(plan);
    return s;
}

/* ---- reader ---- */

typedef struct st_tensor {
    const char *name; /* borrowed from the header document */
    int st;
    pd_shape shape;
    uint64_t begin, end;
} st_tensor;

struct pd_safetensors {
    char *path;
    void *map; /* NULL for a borrowed buffer */
    size_t map_size;
    const unsigned char *data; /* the tensor bytes, after the header */
    uint64_t data_size;
    json_t *header;
    int count;
    st_tensor *tensors;        /* in file order */
    const st_tensor **by_name; /* the same, sorted by name */
    int n_metadata;
    const char **metadata; /* key, value, key, value, ... */
};

/* "<file>: '<tensor>'" for messages and getter locations. */
static const char *tensor_where(const pd_safetensors *f, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s: '%s'", f->path, name);
    return buf;
}

static pd_status parse_tensor(pd_safetensors *f, const char *name, const json_t *value, st_tensor *t)
{
    static const char *const fields[] = {"dtype", "shape", "data_offsets", NULL};
    char where[512], elem[600];
    const char *dtype_name;
    json_t *shape, *offsets;
    int64_t dim, begin, end, bytes;
    size_t ndim, n_offsets;

    tensor_where(f, name, where, sizeof(where));
    PD_CHECK(pd_json_check_keys(value, where, fields));
    PD_CHECK(pd_json_get_string(value, "dtype", where, &dtype_name));
    t->st = st_dtype_by_name(dtype_name);
    if (t->st < 0)
        return PD_ERROR(PD_EFORMAT, "%s: unknown dtype '%s'", where, dtype_name);
    if (st_dtypes[t->st].size == 0)
        return PD_ERROR(PD_ENOTSUP, "%s: sub-byte dtype %s is not supported", where, dtype_name);
    PD_CHECK(pd_json_get_array(value, "shape", where, &shape, &ndim));
    if (ndim > PD_MAX_DIMS)
        return PD_ERROR(PD_ENOTSUP, "%s: rank %zu is more than the %d dimensions pipedream supports", where, ndim,
                        PD_MAX_DIMS);
    t->name = name;
    t->shape.ndim = (int)ndim;
    for (size_t i = 0; i < ndim; i++) {
        pd_json_where(elem, sizeof(elem), where, "shape", (long)i);
        PD_CHECK(pd_json_as_int64(json_array_get(shape, i), elem, 0, INT64_MAX, &dim));
        t->shape.dim[i] = dim;
    }
    bytes = shape_bytes(&t->shape, st_dtypes[t->st].size);
    if (bytes < 0)
        return PD_ERROR(PD_EFORMAT, "%s: the byte count of shape x %s overflows", where, dtype_name);
    PD_CHECK(pd_json_get_array(value, "data_offsets", where, &offsets, &n_offsets));
    if (n_offsets != 2)
        return PD_ERROR(PD_EFORMAT, "%s.data_offsets: expected [begin, end], got %zu numbers", where, n_offsets);
    pd_json_where(elem, sizeof(elem), where, "data_offsets", 0);
    PD_CHECK(pd_json_as_int64(json_array_get(offsets, 0), elem, 0, INT64_MAX, &begin));
    pd_json_where(elem, sizeof(elem), where, "data_offsets", 1);
    PD_CHECK(pd_json_as_int64(json_array_get(offsets, 1), elem, begin, INT64_MAX, &end));
    if ((uint64_t)end > f->data_size)
        return PD_ERROR(PD_EFORMAT,
                        "%s: data_offsets [%" PRId64 ", %" PRId64 "] run past the %" PRIu64 " bytes of data", where,
                        begin, end, f->data_size);
    if (end - begin != bytes) {
        char dims[160];
        return PD_ERROR(
            PD_EFORMAT, "%s: data_offsets [%" PRId64 ", %" PRId64 "] hold %" PRId64 " bytes but %s %s needs %" PRId64,
            where, begin, end, end - begin, dtype_name, pd_shape_format(&t->shape, dims, sizeof(dims)), bytes);
    }
    t->begin = (uint64_t)begin;
    t->end = (uint64_t)end;
    return PD_OK;
}

static pd_status parse_metadata(pd_safetensors *f, const json_t *meta)
{
    char where[512], elem[600];
    const char *key;
    json_t *value;
    int i = 0;

    snprintf(where, sizeof(where), "%s: %s", f->path, METADATA_KEY);
    PD_CHECK(pd_json_expect_object(meta, where));
    f->metadata = calloc(2 * json_object_size(meta) + 1, sizeof(*f->metadata));
    if (!f->metadata)
        return PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", f->path);
    json_object_foreach ((json_t *)meta, key, value) {
        f->metadata[2 * i] = key;
        PD_CHECK(pd_json_as_string(value, pd_json_where(elem, sizeof(elem), where, key, -1), &f->metadata[2 * i + 1]));
        i++;
    }
    f->n_metadata = i;
    return PD_OK;
}

static int tensor_offset_order(const void *pa, const void *pb)
{
    const st_tensor *a = pa, *b = pb;

    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    return a->end < b->end ? -1 : a->end > b->end;
}

static int tensor_name_order(const void *pa, const void *pb)
{
    const st_tensor *const *a = pa, *const *b = pb;
    return strcmp((*a)->name, (*b)->name);
}

/* The tensors must tile [0, data_size): sorted by offset, each begins where
 * the previous one ends (zero-byte tensors sit anywhere on a boundary). */
static pd_status check_coverage(const pd_safetensors *f)
{
    uint64_t at = 0;
    const char *prev = NULL;
    char where[512];

    for (int i = 0; i < f->count; i++) {
        const st_tensor *t = &f->tensors[i];
        if (t->begin < at)
            return PD_ERROR(PD_EFORMAT,
                            "%s: data_offsets [%" PRIu64 ", %" PRIu64 "] overlap '%s', which ends at %" PRIu64,
                            tensor_where(f, t->name, where, sizeof(where)), t->begin, t->end, prev, at);
        if (t->begin > at)
            return PD_ERROR(PD_EFORMAT, "%s: data bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor (before '%s')",
                            f->path, at, t->begin, t->name);
        at = t->end;
        prev = t->name;
    }
    if (at != f->data_size)
        return PD_ERROR(PD_EFORMAT, "%s: data bytes [%" PRIu64 ", %" PRIu64 ") at the end belong to no tensor", f->path,
                        at, f->data_size);
    return PD_OK;
}

static pd_status parse(pd_safetensors *f, const unsigned char *bytes, size_t size)
{
    char name[512];
    const char *key;
    json_t *value;
    uint64_t header_len = 0;
    int i = 0;

    if (size < 8)
        return PD_ERROR(PD_EFORMAT, "%s: %zu bytes is too short for a safetensors file (no header length)", f->path,
                        size);
    for (int b = 7; b >= 0; b--)
        header_len = header_len << 8 | bytes[b];
    if (header_len > MAX_HEADER_BYTES)
        return PD_ERROR(PD_EFORMAT, "%s: header length %" PRIu64 " is over the format's limit of %u bytes", f->path,
                        header_len, MAX_HEADER_BYTES);
    if (header_len > size - 8)
        return PD_ERROR(PD_EFORMAT, "%s: header length %" PRIu64 " runs past the end of the %zu-byte file", f->path,
                        header_len, size);
    f->data = bytes + 8 + header_len;
    f->data_size = size - 8 - header_len;
    snprintf(name, sizeof(name), "%s: JSON header", f->path);
    PD_CHECK(pd_json_load_buffer(bytes + 8, (size_t)header_len, name, &f->header));
    PD_CHECK(pd_json_expect_object(f->header, name));
    f->tensors = calloc(json_object_size(f->header) + 1, sizeof(*f->tensors));
    f->by_name = calloc(json_object_size(f->header) + 1, sizeof(*f->by_name));
    if (!f->tensors || !f->by_name)
        return PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", f->path);
    json_object_foreach (f->header, key, value) {
        if (strcmp(key, METADATA_KEY) == 0) {
            PD_CHECK(parse_metadata(f, value));
            continue;
        }
        PD_CHECK(parse_tensor(f, key, value, &f->tensors[i]));
        i++;
    }
    f->count = i;
    qsort(f->tensors, (size_t)f->count, sizeof(*f->tensors), tensor_offset_order);
    PD_CHECK(check_coverage(f));
    for (i = 0; i < f->count; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, (size_t)f->count, sizeof(*f->by_name), tensor_name_order);
    return PD_OK;
}

static pd_status file_new(const char *name, pd_safetensors **out)
{
    pd_safetensors *f = calloc(1, sizeof(*f));

    if (f)
        f->path = strdup(name);
    if (!f || !f->path) {
        free(f);
        return PD_ERROR(PD_ENOMEM, "safetensors '%s': out of host memory", name);
    }
    *out = f;
    return PD_OK;
}

pd_status pd_safetensors_open_buffer(const void *data, size_t size, const char *name, pd_safetensors **out)
{
    pd_safetensors *f;
    pd_status s;

    PD_CHECK(file_new(name, &f));
    s = parse(f, data, size);
    if (s != PD_OK) {
        pd_safetensors_close(f);
        return s;
    }
    *out = f;
    return PD_OK;
}

pd_status pd_safetensors_open(const char *path, pd_safetensors **out)
{
    pd_safetensors *f;
    struct stat st;
    pd_status s;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PD_ERROR(PD_EIO, "cannot open '%s': %s", path, strerror(errno));
    errno = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = PD_ERROR(PD_EIO, "cannot read '%s': %s", path, errno ? strerror(errno) : "not a regular file");
        close(fd);
        return s;
    }
    s = file_new(path, &f);
    if (s != PD_OK) {
        close(fd);
        return s;
    }
    if (st.st_size > 0) {
        f->map_size = (size_t)st.st_size;
        f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            s = PD_ERROR(PD_EIO, "cannot map '%s': %s", path, strerror(errno));
        }
    }
    close(fd);
    if (s == PD_OK)
        s = parse(f, f->map, f->map_size);
    if (s != PD_OK) {
        pd_safetensors_close(f);
        return s;
    }
    *out = f;
    return PD_OK;
}

void pd_safetensors_close(pd_safetensors *file)
{
    if (!file)
        return;
    if (file->map)
        munmap(file->map, file->map_size);
    json_decref(file->header);
    free(file->tensors);
    free(file->by_name);
    free(file->metadata);
    free(file->path);
    free(file);
}

int pd_safetensors_count(const pd_safetensors *file) { return file->count; }

static void fill_info(const pd_safetensors *f, const st_tensor *t, pd_st_info *out)
{
    const st_dtype *d = &st_dtypes[t->st];

    out->name = t->name;
    out->dtype_name = d->name;
    out->supported = d->pd >= 0;
    out->dtype = d->pd >= 0 ? (pd_dtype)d->pd : PD_U8;
    out->element_size = d->size;
    out->shape = t->shape;
    out->data = f->data + t->begin;
    out->nbytes = (size_t)(t->end - t->begin);
}

pd_status pd_safetensors_entry(const pd_safetensors *file, int index, pd_st_info *out)
{
    if (index < 0 || index >= file->count)
        return PD_ERROR(PD_EINVAL, "%s: tensor index %d out of range [0, %d)", file->path, index, file->count);
    fill_info(file, &file->tensors[index], out);
    return PD_OK;
}

pd_status pd_safetensors_find(const pd_safetensors *file, const char *name, pd_st_info *out)
{
    int lo = 0, hi = file->count;

    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const st_tensor *t = file->by_name[mid];
        int c = strcmp(name, t->name);
        if (c == 0) {
            fill_info(file, t, out);
            return PD_OK;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return PD_ERROR(PD_ENOTFOUND, "%s: no tensor named '%s'", file->path, name);
}

const char *pd_safetensors_metadata(const pd_safetensors *file, const char *key)
{
    for (int i = 0; i < file->n_metadata; i++)
        if (strcmp(file->metadata[2 * i], key) == 0)
            return file->metadata[2 * i + 1];
    return NULL;
}

int pd_safetensors_metadata_count(const pd_safetensors *file) { return file->n_metadata; }

pd_status pd_safetensors_metadata_entry(const pd_safetensors *file, int index, const char **key, const char **value)
{
    if (index < 0 || index >= file->n_metadata)
        return PD_ERROR(PD_EINVAL, "%s: metadata index %d out of range [0, %d)", file->path, index, file->n_metadata);
    *key = file->metadata[2 * index];
    *value = file->metadata[2 * index + 1];
    return PD_OK;
}

pd_status pd_safetensors_read_into(const pd_safetensors *file, const char *name, pd_tensor *t)
{
    char what[600];
    pd_st_info info;

    PD_CHECK(pd_safetensors_find(file, name, &info));
    tensor_where(file, name, what, sizeof(what));
    if (!info.supported)
        return PD_ERROR(PD_ENOTSUP, "%s: dtype %s has no pipedream type", what, info.dtype_name);
    if (!pd_tensor_is_contiguous(t))
        return PD_ERROR(PD_EINVAL, "%s: the destination tensor is not contiguous", what);
    PD_CHECK(pd_tensor_expect(t, info.dtype, &info.shape, what));
    return pd_tensor_copy_from_host(t, info.data, info.nbytes);
}
