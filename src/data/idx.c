/* IDX files (the MNIST format): a big-endian magic 0x000008NN (unsigned
 * bytes, NN dimensions), NN big-endian u32 dimensions, then the elements in
 * row-major order and nothing else. Plain and gzip files both go through
 * zlib's gz* interface, which passes plain files through unchanged. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <pipedream/data.h>

#include "data/pd_data_int.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_MAX_PLANE (1 << 24)  /* H*W; a sanity bound far above any image set */
#define IDX_MAX_PATH 4096

/* An open IDX file, for error messages that name it. */
typedef struct idx_file {
    const char *path;
    gzFile gz;
} idx_file;

static pd_status idx_open(const char *path, idx_file *f)
{
    uint64_t size;

    PD_CHECK(pd_data_regular_file(path, &size));
    errno = 0;
    f->path = path;
    f->gz = gzopen(path, "rb");
    if (!f->gz) {
        if (errno == 0)
            return PD_ERROR(PD_ENOMEM, "%s: out of memory opening the file", path);
        return PD_ERROR(PD_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    gzbuffer(f->gz, 1 << 17);
    return PD_OK;
}

static void idx_close(idx_file *f)
{
    if (f->gz)
        gzclose_r(f->gz);
    f->gz = NULL;
}

/* Reads up to n bytes, stopping early only at the end of the data; *got
 * receives the count. A read error or a damaged (also: cut-off) gzip stream
 * is an error, so a short count means the plain data really ended. */
static pd_status idx_read(idx_file *f, void *buf, size_t n, size_t *got)
{
    size_t done = 0;
    int code;
    const char *msg;

    while (done < n) {
        size_t left = n - done;
        unsigned chunk = left > (1u << 30) ? 1u << 30 : (unsigned)left;
        int r = gzread(f->gz, (char *)buf + done, chunk);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    msg = gzerror(f->gz, &code);
    if (code == Z_ERRNO)
        return PD_ERROR(PD_EIO, "%s: read failed: %s", f->path, strerror(errno));
    if (code == Z_MEM_ERROR)
        return PD_ERROR(PD_ENOMEM, "%s: out of memory decompressing", f->path);
    if (code != Z_OK) {
        size_t n_path = strlen(f->path);
        if (strncmp(msg, f->path, n_path) == 0 && strncmp(msg + n_path, ": ", 2) == 0)
            msg += n_path + 2; /* zlib prefixes the path, which we name already */
        return PD_ERROR(PD_EFORMAT, "%s: corrupt or truncated gzip data (%s)", f->path, msg);
    }
    *got = done;
    return PD_OK;
}

/* Skips n bytes of element data; *got as idx_read. */
static pd_status idx_skip(idx_file *f, uint64_t n, uint64_t *got)
{
    unsigned char sink[1 << 15];
    uint64_t done = 0;

    while (done < n) {
        size_t want = n - done > sizeof(sink) ? sizeof(sink) : (size_t)(n - done), r;
        PD_CHECK(idx_read(f, sink, want, &r));
        done += r;
        if (r < want)
            break;
    }
    *got = done;
    return PD_OK;
}

/* Reads the magic and the `ndim` dimensions into dims[]. */
static pd_status idx_read_header(idx_file *f, uint32_t magic, const char *what, int ndim, uint32_t *dims)
{
    unsigned char head[4 * 4];
    size_t need = 4 * (size_t)(1 + ndim), got;

    PD_CHECK(idx_read(f, head, need, &got));
    if (got < 4)
        return PD_ERROR(PD_EFORMAT, "%s: too short for an IDX file (%zu bytes)", f->path, got);
    uint32_t found = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
    if (found != magic)
        return PD_ERROR(PD_EFORMAT, "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x)", f->path, what,
                        (unsigned)found, (unsigned)magic);
    if (got < need)
        return PD_ERROR(PD_EFORMAT, "%s: truncated IDX header (%zu of %zu bytes)", f->path, got, need);
    for (int d = 0; d < ndim; d++) {
        const unsigned char *p = head + 4 * (d + 1);
        dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    return PD_OK;
}

/* After the last element: anything left is an error. */
static pd_status idx_expect_end(idx_file *f, uint64_t data_bytes)
{
    unsigned char extra;
    size_t got;

    PD_CHECK(idx_read(f, &extra, 1, &got));
    if (got != 0)
        return PD_ERROR(PD_EFORMAT, "%s: trailing bytes after the %llu bytes of data the header announces",
                        f->path, (unsigned long long)data_bytes);
    return PD_OK;
}

static pd_status truncated(const idx_file *f, uint64_t want, uint64_t got)
{
    return PD_ERROR(PD_EFORMAT, "%s: truncated: the header announces %llu bytes of data, the file holds %llu",
                    f->path, (unsigned long long)want, (unsigned long long)got);
}

/* Reads an image file, keeping the first `keep` images (all when 0);
 * *in_file receives the count the file holds, *count the count kept. */
static pd_status read_images(const char *path, int64_t keep, uint8_t **pixels, int64_t *in_file, int64_t *count,
                             int *height, int *width)
{
    idx_file f = {0};
    uint32_t dims[3];
    uint8_t *buf = NULL;
    pd_status s;

    PD_CHECK(idx_open(path, &f));
    PD_CHECK_GOTO(idx_read_header(&f, IDX_IMAGES_MAGIC, "image", 3, dims), s, close_file);
    if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || (uint64_t)dims[1] * dims[2] > IDX_MAX_PLANE) {
        s = PD_ERROR(PD_EFORMAT, "%s: bad image dimensions %ux%ux%u", path, (unsigned)dims[0], (unsigned)dims[1],
                     (unsigned)dims[2]);
        goto close_file;
    }
    uint64_t plane = (uint64_t)dims[1] * dims[2];
    uint64_t total = dims[0] * plane;
    uint64_t kept = keep > 0 && (uint64_t)keep < dims[0] ? (uint64_t)keep : dims[0];
    size_t got;
    uint64_t skipped;

    if (kept * plane > SIZE_MAX || !(buf = malloc((size_t)(kept * plane)))) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of memory for %llu images of %ux%u", path, (unsigned long long)kept,
                     (unsigned)dims[1], (unsigned)dims[2]);
        goto close_file;
    }
    PD_CHECK_GOTO(idx_read(&f, buf, (size_t)(kept * plane), &got), s, free_buf);
    if (got < kept * plane) {
        s = truncated(&f, total, got);
        goto free_buf;
    }
    PD_CHECK_GOTO(idx_skip(&f, total - kept * plane, &skipped), s, free_buf);
    if (skipped < total - kept * plane) {
        s = truncated(&f, total, kept * plane + skipped);
        goto free_buf;
    }
    PD_CHECK_GOTO(idx_expect_end(&f, total), s, free_buf);
    idx_close(&f);
    *pixels = buf;
    *in_file = dims[0];
    *count = (int64_t)kept;
    *height = (int)dims[1];
    *width = (int)dims[2];
    return PD_OK;

free_buf:
    free(buf);
close_file:
    idx_close(&f);
    return s;
}

/* Reads a whole label file, checking every label against `classes`. */
static pd_status read_labels(const char *path, int classes, uint8_t **labels, int64_t *count)
{
    idx_file f = {0};
    uint32_t n;
    uint8_t *buf = NULL;
    size_t got;
    pd_status s;

    PD_CHECK(idx_open(path, &f));
    PD_CHECK_GOTO(idx_read_header(&f, IDX_LABELS_MAGIC, "label", 1, &n), s, close_file);
    if (n == 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: holds no labels", path);
        goto close_file;
    }
    if (!(buf = malloc(n))) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of memory for %u labels", path, (unsigned)n);
        goto close_file;
    }
    PD_CHECK_GOTO(idx_read(&f, buf, n, &got), s, free_buf);
    if (got < n) {
        s = truncated(&f, n, got);
        goto free_buf;
    }
    PD_CHECK_GOTO(idx_expect_end(&f, n), s, free_buf);
    for (uint32_t i = 0; i < n; i++)
        if (buf[i] >= classes) {
            s = PD_ERROR(PD_EFORMAT, "%s: label %u of sample %u is not below the %d classes", path,
                         (unsigned)buf[i], (unsigned)i, classes);
            goto free_buf;
        }
    idx_close(&f);
    *labels = buf;
    *count = n;
    return PD_OK;

free_buf:
    free(buf);
close_file:
    idx_close(&f);
    return s;
}

pd_status pd_dataset_load_idx(const char *images_path, const char *labels_path, int classes, int64_t limit,
                              pd_dataset **out)
{
    pd_dataset *ds;
    uint8_t *labels = NULL;
    int64_t n_labels = 0, n_images = 0;
    pd_status s;

    if (!images_path || !labels_path || !out)
        return PD_ERROR(PD_EINVAL, "data set: NULL path or output");
    if (classes < 1 || classes > 256)
        return PD_ERROR(PD_EINVAL, "data set: %d classes is outside [1, 256] (IDX labels are bytes)", classes);
    if (limit < 0)
        return PD_ERROR(PD_EINVAL, "data set: negative sample limit %lld", (long long)limit);
    if (!(ds = calloc(1, sizeof(*ds))))
        return PD_ERROR(PD_ENOMEM, "data set: out of host memory");
    ds->classes = classes;
    PD_CHECK_GOTO(read_labels(labels_path, classes, &labels, &n_labels), s, fail);
    PD_CHECK_GOTO(read_images(images_path, limit, &ds->images, &n_images, &ds->count, &ds->height, &ds->width),
                  s, fail);
    /* Both files must describe the same samples, even when only a prefix is kept. */
    if (n_images != n_labels) {
        s = PD_ERROR(PD_EFORMAT, "%s holds %lld images but %s holds %lld labels", images_path,
                     (long long)n_images, labels_path, (long long)n_labels);
        goto fail;
    }
    if (!(ds->labels = malloc((size_t)ds->count * sizeof(*ds->labels)))) {
        s = PD_ERROR(PD_ENOMEM, "data set: out of host memory for %lld labels", (long long)ds->count);
        goto fail;
    }
    for (int64_t i = 0; i < ds->count; i++)
        ds->labels[i] = labels[i];
    free(labels);
    *out = ds;
    return PD_OK;

fail:
    free(labels);
    pd_dataset_destroy(ds);
    return s;
}

/* Writes <dir>/<name> (or with ".gz" when only that exists) into path. */
static pd_status mnist_path(const char *dir, const char *name, char *path, size_t size)
{
    struct stat st;
    int n = snprintf(path, size, "%s/%s", dir, name);

    if (n < 0 || (size_t)n + 3 >= size)
        return PD_ERROR(PD_EINVAL, "data directory path '%s' is too long", dir);
    if (stat(path, &st) == 0)
        return PD_OK;
    strcat(path, ".gz");
    if (stat(path, &st) == 0)
        return PD_OK;
    path[n] = '\0';
    return PD_ERROR(PD_ENOTFOUND, "%s: no such file (nor %s.gz)", path, path);
}

pd_status pd_dataset_load_mnist(const char *dir, const char *split, int64_t limit, pd_dataset **out)
{
    char name[128], images[IDX_MAX_PATH], labels[IDX_MAX_PATH];

    if (!dir || !split || !out)
        return PD_ERROR(PD_EINVAL, "data set: NULL directory, split or output");
    if (snprintf(name, sizeof(name), "%s-images-idx3-ubyte", split) >= (int)sizeof(name))
        return PD_ERROR(PD_EINVAL, "data set split name '%s' is too long", split);
    PD_CHECK(mnist_path(dir, name, images, sizeof(images)));
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", split);
    PD_CHECK(mnist_path(dir, name, labels, sizeof(labels)));
    return pd_dataset_load_idx(images, labels, 10, limit, out);
}

void pd_dataset_destroy(pd_dataset *ds)
{
    if (!ds)
        return;
    free(ds->images);
    free(ds->labels);
    free(ds);
}
