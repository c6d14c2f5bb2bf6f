/* Inside src/data: the per-epoch sample order shared by pd_batches and
 * pd_loader, and the contract between the loader (order, minibatches,
 * sharding, threads, replacement of unreadable samples) and the data sources
 * it reads from (one per kind). */
#ifndef PD_DATA_INT_H
#define PD_DATA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pipedream/loader.h>
#include <pipedream/status.h>

/* Writes the order of epoch `epoch` over n samples into order[n]: the
 * identity, or (shuffle) a Fisher-Yates permutation drawn from (seed, epoch)
 * alone, so any epoch's order is recomputed without replaying the ones
 * before it. */
void pd_data_epoch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

/* The seed of every random choice made for one sample in one epoch
 * (augmentation, synthetic pixels): a function of these three only. */
uint64_t pd_data_sample_seed(uint64_t seed, int64_t epoch, int64_t index);

/* Checks that `path` is an existing regular file and sets *size to its
 * length: PD_ENOTFOUND ("<path>: no such file"), PD_EIO otherwise. */
pd_status pd_data_regular_file(const char *path, uint64_t *size);

/* What a source must produce for each sample, resolved by the loader from
 * the options and the source's native geometry. */
typedef struct pd_sample_geometry {
    int channels, height, width; /* of the output image */
    bool train;                  /* augment */
    float mean[3], std[3];       /* per output channel */
    float table[3][256];         /* (v/255 - mean[c]) / std[c] */
} pd_sample_geometry;

/* A data source: `count` samples addressed by index in [0, count). Each
 * loader thread that calls `load` owns one worker context. Every entry is
 * set (sources without per-worker state use pd_source_no_worker*). */
typedef struct pd_source_ops {
    /* Called once with the resolved output geometry, before any load. */
    pd_status (*prepare)(void *state, const pd_sample_geometry *g);
    /* Makes one thread's private state (decoder, scratch buffers). */
    pd_status (*worker_create)(void *state, void **worker);
    void (*worker_destroy)(void *worker);
    /* Writes sample `index` as [C,H,W] into `image` and its label, taking
     * every random choice from `rng_seed`. PD_EFORMAT or PD_EIO mean "this
     * sample cannot be read" (the loader skips it, its message names the
     * file); any other failure stops the loader. Called concurrently from
     * several threads with distinct workers. */
    pd_status (*load)(void *state, void *worker, const pd_sample_geometry *g, int64_t index, uint64_t rng_seed,
                      float *image, int32_t *label);
    void (*destroy)(void *state);
} pd_source_ops;

/* An opened source, as the kind's open function describes it. */
typedef struct pd_source {
    const pd_source_ops *ops;
    void *state;
    int64_t count;               /* samples (after the limit) */
    int classes;
    int channels, height, width; /* native geometry (or the only one) */
    bool resamples;              /* any output size is fine (else: pad only) */
    bool threaded;               /* worth a pool of loader threads */
    float mean[3], std[3];       /* standard normalisation per native channel */
    const char *const *class_names; /* [classes] owned by the state, or NULL: numbers */
} pd_source;

/* The openers, one per kind. `o` has been checked for the common options
 * (kind, split normalised to "train" or "test", batch, limit >= 0). */
pd_status pd_source_open_mnist(const pd_loader_options *o, bool fashion, pd_source *out);
pd_status pd_source_open_cifar10(const pd_loader_options *o, pd_source *out);
pd_status pd_source_open_imagenet(const pd_loader_options *o, pd_source *out);
pd_status pd_source_open_synthetic(const pd_loader_options *o, pd_source *out);

/* For sources without preparation or per-worker state. */
pd_status pd_source_no_prepare(void *state, const pd_sample_geometry *g);
pd_status pd_source_no_worker(void *state, void **worker);
void pd_source_no_worker_destroy(void *worker);

/* Writes a planar u8 image (`channels` planes of h x w) into the output
 * geometry: centred, with pixel value 0 around it, one channel replicated
 * into all output channels, shifted by (dy, dx) (the content moves down and
 * right by that much; what moves out is lost, what moves in is 0) and then
 * mirrored left-right when `flip`, normalised through g->table. */
void pd_source_put_planar_u8(const uint8_t *pixels, int channels, int h, int w, const pd_sample_geometry *g,
                             int dy, int dx, bool flip, float *image);

/* Grow-only scratch memory of pd_resample_box (one per thread). */
typedef struct pd_resample_scratch {
    float *rows;     /* horizontally resampled source rows */
    size_t rows_cap;
    int *spans;      /* per output column, then row: first tap, tap count */
    float *weights;  /* taps per output column, then row */
    size_t spans_cap, weights_cap;
} pd_resample_scratch;

/* Resamples the box [x0, x0+bw) x [y0, y0+bh) (pixel coordinates, may be
 * fractional) of an interleaved u8 image (h rows of w pixels of g->channels
 * bytes) to g's height and width: a separable triangle filter whose radius
 * grows with the downscale factor (antialiased bilinear, as PIL and
 * torchvision's Resize), taps clipped to the image and renormalised. The
 * result is mirrored left-right when `flip` and normalised into
 * image [C,H,W]. PD_ENOMEM if scratch cannot grow. */
pd_status pd_resample_box(pd_resample_scratch *s, const uint8_t *pixels, int h, int w, double x0, double y0,
                          double bw, double bh, bool flip, const pd_sample_geometry *g, float *image);

/* Frees the scratch memory (the struct itself is the caller's). */
void pd_resample_scratch_free(pd_resample_scratch *s);

/* A JPEG decoder for one thread (TurboJPEG; in builds without it,
 * pd_jpeg_create fails with PD_ENOTSUP): reads a file, reports its size,
 * then decodes any box of it into a minibatch row. */
typedef struct pd_jpeg pd_jpeg;

pd_status pd_jpeg_create(pd_jpeg **out);
void pd_jpeg_destroy(pd_jpeg *j);

/* Reads the file at `path` and parses its header. PD_EIO (unreadable) or
 * PD_EFORMAT (not a JPEG the library can decode), naming the file. */
pd_status pd_jpeg_open(pd_jpeg *j, const char *path, int *width, int *height);

/* Decodes the image pd_jpeg_open read and writes the box [x0, x0+bw) x
 * [y0, y0+bh) of it, resampled to g's size (pd_resample_box), mirrored when
 * `flip`. Decodes at the smallest DCT scale that leaves the box at least as
 * large as the output. One channel output is the JPEG's luminance; grey
 * JPEGs give three equal channels; CMYK (Adobe, inverted) is converted to
 * RGB. A decoding error, or data cut short, is PD_EFORMAT naming the file;
 * other libjpeg warnings are logged at debug level and the image kept. */
pd_status pd_jpeg_decode_box(pd_jpeg *j, double x0, double y0, double bw, double bh, bool flip,
                             const pd_sample_geometry *g, float *image);

#endif
