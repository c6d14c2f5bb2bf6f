/* One minibatch loader over every image classification data set: MNIST and
 * Fashion-MNIST (IDX files), CIFAR-10 (binary batches), ImageNet (a folder
 * tree of JPEGs decoded by a pool of threads) and synthetic images.
 *
 * Every loader yields the same thing: minibatches of f32 images [B,C,H,W],
 * normalised per channel as (x/255 - mean[c]) / std[c], with i32 labels [B].
 *
 * Determinism: for fixed options (seed included) the sequence of minibatches
 * is a pure function of (epoch, minibatch index): the sample order of epoch e
 * is a Fisher-Yates permutation drawn from (seed, e), and every random choice
 * of augmentation is drawn from (seed, e, sample index). Thread counts and
 * timing never change a byte, and pd_loader_seek() reproduces any point of an
 * uninterrupted run exactly. */
#ifndef PIPEDREAM_LOADER_H
#define PIPEDREAM_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Standard per-channel statistics (of x/255 over the training sets); the
 * three-channel ones are initialisers for a float[3]. */
#define PD_MNIST_MEAN 0.1307f
#define PD_MNIST_STD 0.3081f
/* Fashion-MNIST: PD_FASHION_MNIST_MEAN / PD_FASHION_MNIST_STD in data.h. */
#define PD_CIFAR10_MEAN {0.4914f, 0.4822f, 0.4465f}
#define PD_CIFAR10_STD {0.2470f, 0.2435f, 0.2616f}
#define PD_IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define PD_IMAGENET_STD {0.229f, 0.224f, 0.225f}

typedef struct pd_loader pd_loader;

/* What to load and how. Zero-initialise, then set what you need: every 0
 * means "the data set's default". */
typedef struct pd_loader_options {
    /* "mnist" or "fashion-mnist": an MNIST-layout IDX directory (the two
     * differ only in their default normalisation); "cifar10": the binary
     * version; "imagenet": <path>/<train|val>/<wnid>/<image>.JPEG (JPEG files
     * only: .JPEG/.jpeg/.jpg, any case); "synthetic": random images, no I/O. */
    const char *kind;
    const char *path;  /* the data directory (unused by synthetic) */
    /* "train" or "test". mnist: train-* / t10k-* files ("t10k" also
     * accepted); cifar10: data_batch_1..5.bin / test_batch.bin; imagenet:
     * train/ / val/ ("val" also accepted); synthetic (random labels, and
     * images that are windows at random offsets of one array of uniformly
     * random pixel bytes, all from (seed, split, sample index): the same in
     * every epoch, each costs one copy): selects the random stream. NULL
     * means "train". */
    const char *split;
    int batch; /* B samples per minibatch, > 0 */
    /* true (training): a new sample order every epoch, data augmentation
     * (imagenet: random-resized-crop, scale [0.08, 1], aspect ratio
     * [3/4, 4/3], then horizontal flip with p = 1/2; cifar10: zero-pad 4
     * pixels, random crop, flip; mnist, synthetic: none), and drop_last: an
     * epoch is floor(N/B) full minibatches.
     * false (evaluation): the file order, the evaluation transform
     * (imagenet: resize the shorter side to size*256/224, center crop), and
     * ceil(N/B) minibatches, the last one possibly partial. */
    bool train;
    uint64_t seed;
    /* Data-parallel sharding (0 and 0, or 0 and 1: everything). Shard s of
     * n yields minibatches s, s+n, s+2n, ... of the unsharded loader with the
     * same options, so the shards are disjoint and together cover exactly
     * what one loader would yield. In training every shard yields
     * floor(K/n) minibatches per epoch (K = the unsharded count), so all
     * replicas take the same number of steps and the shards' j-th
     * minibatches together are the j-th minibatch of one loader with batch
     * n*B; the K mod n minibatches left over are skipped. In evaluation
     * shard s yields ceil((K-s)/n), covering every sample once. */
    int shard, num_shards;
    /* Output geometry; 0 = the data set's (mnist 1x28x28, cifar10 3x32x32,
     * imagenet 3x224x224, synthetic 3x224x224). Channels are 1 or 3; one
     * channel images are replicated into 3. mnist and cifar10 images smaller
     * than the output are padded and centred (28x28 -> 32x32 puts the image
     * at rows and columns 2..29) with pixel value 0 (black, the background
     * of MNIST), normalised like any pixel; smaller outputs are errors.
     * imagenet resamples to any size. */
    int channels, height, width;
    /* Normalisation per output channel. All std 0: the data set's standard
     * values (the PD_*_MEAN/STD above; synthetic: ImageNet's), mean
     * ignored. Otherwise every std[c] of the output channels must be > 0
     * and mean[c] is taken as given. */
    float mean[3], std[3];
    int64_t limit; /* use only the first N samples of the split (0 = all) */
    int threads;   /* imagenet decoding threads (0 = min(4, online cores)) */
    /* imagenet: minibatch buffers the threads fill ahead of the consumer
     * (0 = 3; each holds B*C*H*W floats). The threads share the samples of
     * the oldest unfinished minibatch first, so 2 already keeps them all
     * busy. */
    int prefetch;
    int classes;   /* synthetic: number of classes (0 = 1000) */
    int64_t samples; /* synthetic: samples per epoch (0 = 50 * batch) */
} pd_loader_options;

/* What a loader yields, for sizing buffers and models. */
typedef struct pd_loader_info {
    int channels, height, width; /* of every image */
    int classes;                 /* labels are in [0, classes) */
    int batch;                   /* rows of every minibatch buffer */
    int64_t samples;             /* this shard yields per epoch (after limit,
                                    drop_last and sharding) */
    int64_t batches_per_epoch;   /* of this shard */
    int64_t skipped;             /* unreadable images met so far (imagenet) */
    float mean[3], std[3];       /* the normalisation in effect */
    int64_t split_samples;       /* in the split, after limit (all shards) */
} pd_loader_info;

/* Opens a data set. Reads and validates what it can up front (IDX files
 * entirely; every CIFAR-10 file's size, and the records used; the ImageNet
 * directory listing; JPEGs are only read when decoded), so bad input
 * fails here with a message naming the file or option: PD_EINVAL (bad
 * options, unknown kind), PD_ENOTFOUND (missing file or directory),
 * PD_EFORMAT (malformed file, empty class directory), PD_EIO, PD_ENOMEM,
 * PD_ENOTSUP (imagenet in a build without turbojpeg). The loader starts at
 * epoch 0, minibatch 0; imagenet starts decoding at once. Free with
 * pd_loader_destroy. */
pd_status pd_loader_open(const pd_loader_options *opts, pd_loader **out);

/* Fills *out (info.skipped grows as unreadable images are met). */
void pd_loader_get_info(const pd_loader *l, pd_loader_info *out);

/* The name of class `c` (imagenet: its wnid directory; cifar10: "airplane"
 * ... "truck"; others: the decimal number), owned by the loader; NULL when
 * c is out of range. */
const char *pd_loader_class_name(const pd_loader *l, int c);

/* Writes the next minibatch into caller-owned buffers: `images` [B,C,H,W]
 * f32 and `labels` [B] i32 with B = info.batch. *valid receives how many
 * leading rows are samples (B except for the last minibatch of an
 * evaluation epoch); the rows after them are zeros with label 0. After the
 * last minibatch of an epoch the next call starts the next epoch; epochs
 * follow each other without end. An unreadable JPEG is not an error: it is
 * logged once (a warning naming the file), counted in info.skipped and
 * replaced by the next readable sample of the split (wrapping around), the
 * same one in every run. Errors (PD_ENOMEM, or PD_EFORMAT when no image of
 * the split can be read) leave the position unchanged. */
pd_status pd_loader_next(pd_loader *l, float *images, int32_t *labels, int *valid);

/* The epoch of the next minibatch (0-based). */
int64_t pd_loader_epoch(const pd_loader *l);

/* The index of the next minibatch within its epoch (0-based). */
int64_t pd_loader_position(const pd_loader *l);

/* Moves to minibatch `batch` of epoch `epoch` (batch in
 * [0, batches_per_epoch]; batches_per_epoch means the start of epoch+1), so
 * that the minibatches that follow are exactly those an uninterrupted run
 * yields from there. Work prefetched for the old position is discarded.
 * PD_EINVAL for a negative epoch or a batch out of range. */
pd_status pd_loader_seek(pd_loader *l, int64_t epoch, int64_t batch);

/* Stops and joins the decoding threads and frees everything. NULL is
 * ignored. */
void pd_loader_destroy(pd_loader *l);

#ifdef __cplusplus
}
#endif
#endif
