/* JPEG decoding for the image loaders through libjpeg-turbo's TurboJPEG API:
 * file in memory, header, decode at a reduced DCT scale when the image is
 * much larger than needed (1/2 .. 1/8 costs a fraction of a full decode),
 * then the box resampled into the output. Each thread owns one decoder;
 * its buffers only grow. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pipedream/log.h>

#include "data/pd_data_int.h"

#ifdef HAVE_TURBOJPEG
#include <turbojpeg.h>

#define JPEG_MAX_FILE_BYTES ((size_t)1 << 30)
#define JPEG_MAX_PIXELS ((size_t)1 << 28)
#define JPEG_PATH_BYTES 4096

struct pd_jpeg {
    tjhandle handle;
    const tjscalingfactor *factors;
    int n_factors;
    char path[JPEG_PATH_BYTES]; /* of the open file, for messages */
    unsigned char *file;        /* its bytes */
    size_t file_size, file_cap;
    int width, height, colorspace;
    unsigned char *pixels;      /* the decoded image */
    size_t pixels_cap;
    pd_resample_scratch scratch;
};

pd_status pd_jpeg_create(pd_jpeg **out)
{
    pd_jpeg *j = calloc(1, sizeof(*j));

    if (!j)
        return PD_ERROR(PD_ENOMEM, "jpeg: out of host memory for a decoder");
    if (!(j->handle = tjInitDecompress())) {
        free(j);
        return PD_ERROR(PD_ENOMEM, "jpeg: cannot create a TurboJPEG decompressor: %s", tjGetErrorStr2(NULL));
    }
    j->factors = tjGetScalingFactors(&j->n_factors);
    if (!j->factors)
        j->n_factors = 0;
    *out = j;
    return PD_OK;
}

void pd_jpeg_destroy(pd_jpeg *j)
{
    if (!j)
        return;
    tjDestroy(j->handle);
    free(j->file);
    free(j->pixels);
    pd_resample_scratch_free(&j->scratch);
    free(j);
}

static pd_status read_file(pd_jpeg *j, const char *path)
{
    FILE *f;
    struct stat st;
    size_t got;

    snprintf(j->path, sizeof(j->path), "%s", path);
    if (!(f = fopen(path, "rb")))
        return PD_ERROR(PD_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return PD_ERROR(PD_EIO, "%s: not a regular file", path);
    }
    if (st.st_size == 0 || (uint64_t)st.st_size > JPEG_MAX_FILE_BYTES) {
        fclose(f);
        return PD_ERROR(PD_EFORMAT, "%s: %lld bytes is not the size of a JPEG image", path, (long long)st.st_size);
    }
    if ((size_t)st.st_size > j->file_cap) {
        unsigned char *p = realloc(j->file, (size_t)st.st_size);
        if (!p) {
            fclose(f);
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory for %lld bytes", path, (long long)st.st_size);
        }
        j->file = p;
        j->file_cap = (size_t)st.st_size;
    }
    got = fread(j->file, 1, (size_t)st.st_size, f);
    fclose(f);
    if (got != (size_t)st.st_size)
        return PD_ERROR(PD_EIO, "%s: read %zu of %lld bytes", path, got, (long long)st.st_size);
    j->file_size = got;
    return PD_OK;
}

pd_status pd_jpeg_open(pd_jpeg *j, const char *path, int *width, int *height)
{
    int subsampling;

    PD_CHECK(read_file(j, path));
    if (tjDecompressHeader3(j->handle, j->file, (unsigned long)j->file_size, &j->width, &j->height, &subsampling,
                            &j->colorspace) != 0)
        return PD_ERROR(PD_EFORMAT, "%s: not a readable JPEG image (%s)", path, tjGetErrorStr2(j->handle));
    if (j->width <= 0 || j->height <= 0)
        return PD_ERROR(PD_EFORMAT, "%s: not a readable JPEG image (no frame header: cut short?)", path);
    if ((size_t)j->width * (size_t)j->height > JPEG_MAX_PIXELS)
        return PD_ERROR(PD_EFORMAT, "%s: unsupported JPEG size %dx%d", path, j->width, j->height);
    *width = j->width;
    *height = j->height;
    return PD_OK;
}

/* The smallest scale (<= 1) at which the box still covers the output. */
static tjscalingfactor pick_scale(const pd_jpeg *j, double bw, double bh, int out_w, int out_h)
{
    tjscalingfactor best = {1, 1};
    int best_w = j->width;

    for (int i = 0; i < j->n_factors; i++) {
        tjscalingfactor f = j->factors[i];
        int sw = TJSCALED(j->width, f), sh = TJSCALED(j->height, f);
        if (f.num > f.denom || sw >= best_w)
            continue;
        if (bw * sw / j->width >= out_w && bh * sh / j->height >= out_h) {
            best = f;
            best_w = sw;
        }
    }
    return best;
}

/* Whether the last bytes hold the end-of-image marker FF D9 (encoders may
 * pad after it). */
static bool ends_with_eoi(const unsigned char *data, size_t size)
{
    size_t from = size > 64 ? size - 64 : 0;

    for (size_t i = size; i-- > from + 1;)
        if (data[i - 1] == 0xff && data[i] == 0xd9)
            return true;
    return false;
}

/* Adobe CMYK JPEGs store inverted ink values: R = C*K/255 and so on.
 * Converts n pixels in place from 4 bytes to `channels` (3, or 1: luma). */
static void cmyk_to_rgb(unsigned char *p, size_t n, int channels)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *q = p + 4 * i;
        unsigned k = q[3];
        unsigned r = (q[0] * k + 127) / 255, g = (q[1] * k + 127) / 255, b = (q[2] * k + 127) / 255;
        if (channels == 1) {
            p[i] = (unsigned char)((299 * r + 587 * g + 114 * b + 500) / 1000);
        } else {
            p[3 * i] = (unsigned char)r;
            p[3 * i + 1] = (unsigned char)g;
            p[3 * i + 2] = (unsigned char)b;
        }
    }
}

pd_status pd_jpeg_decode_box(pd_jpeg *j, double x0, double y0, double bw, double bh, bool flip,
                             const pd_sample_geometry *g, float *image)
{
    const bool cmyk = j->colorspace == TJCS_CMYK || j->colorspace == TJCS_YCCK;
    const int format = cmyk ? TJPF_CMYK : g->channels == 1 ? TJPF_GRAY : TJPF_RGB;
    const tjscalingfactor f = pick_scale(j, bw, bh, g->width, g->height);
    const int sw = TJSCALED(j->width, f), sh = TJSCALED(j->height, f);
    const size_t bytes = (size_t)sw * sh * (size_t)tjPixelSize[format];

    if (bytes > j->pixels_cap) {
        unsigned char *p = realloc(j->pixels, bytes);
        if (!p)
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory for %dx%d pixels", j->path, sw, sh);
        j->pixels = p;
        j->pixels_cap = bytes;
    }
    if (tjDecompress2(j->handle, j->file, (unsigned long)j->file_size, j->pixels, sw, 0, sh, format, 0) != 0) {
        if (tjGetErrorCode(j->handle) != TJERR_WARNING)
            return PD_ERROR(PD_EFORMAT, "%s: cannot decode the JPEG image (%s)", j->path,
                            tjGetErrorStr2(j->handle));
        /* libjpeg completes a file cut short with grey and calls that a
         * warning: such an image is unreadable (as PIL has it). Other
         * warnings (stray bytes between markers, ...) leave a whole image.
         * The handle's message may be stale after a warning, so the test is
         * on the data: a complete JPEG ends with the EOI marker. */
        if (!ends_with_eoi(j->file, j->file_size))
            return PD_ERROR(PD_EFORMAT, "%s: cannot decode the JPEG image (the data is cut short)", j->path);
        PD_LOG_DEBUGF("%s: libjpeg warning, image kept", j->path);
    }
    if (cmyk)
        cmyk_to_rgb(j->pixels, (size_t)sw * sh, g->channels);
    double sx = (double)sw / j->width, sy = (double)sh / j->height;
    return pd_resample_box(&j->scratch, j->pixels, sh, sw, x0 * sx, y0 * sy, bw * sx, bh * sy, flip, g, image);
}

#else /* !HAVE_TURBOJPEG */

pd_status pd_jpeg_create(pd_jpeg **out)
{
    (void)out;
    return PD_ERROR(PD_ENOTSUP, "jpeg: this build has no JPEG decoder (configure found no libjpeg-turbo TurboJPEG)");
}

void pd_jpeg_destroy(pd_jpeg *j) { (void)j; }

pd_status pd_jpeg_open(pd_jpeg *j, const char *path, int *width, int *height)
{
    (void)j;
    (void)width;
    (void)height;
    return PD_ERROR(PD_ENOTSUP, "%s: this build has no JPEG decoder", path);
}

pd_status pd_jpeg_decode_box(pd_jpeg *j, double x0, double y0, double bw, double bh, bool flip,
                             const pd_sample_geometry *g, float *image)
{
    (void)j;
    (void)x0;
    (void)y0;
    (void)bw;
    (void)bh;
    (void)flip;
    (void)g;
    (void)image;
    return PD_ERROR(PD_ENOTSUP, "jpeg: this build has no JPEG decoder");
}
#endif
