/* Data sets held in host memory and the minibatch iterator that feeds a
 * model's input nodes. Images are u8 [N,H,W] (one channel) as in the IDX
 * files of MNIST and Fashion-MNIST; labels are class indices. */
#ifndef PIPEDREAM_DATA_H
#define PIPEDREAM_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fashion-MNIST's pixel statistics over its training set (x/255). */
#define PD_FASHION_MNIST_MEAN 0.2860f
#define PD_FASHION_MNIST_STD 0.3530f

/* An image classification data set in host memory. Read-only once loaded;
 * made by a pd_dataset_load_* function, freed by pd_dataset_destroy. */
typedef struct pd_dataset {
    int64_t count;   /* N samples */
    int height;      /* H */
    int width;       /* W */
    int classes;     /* every label is in [0, classes) */
    uint8_t *images; /* [N,H,W] row-major pixels */
    int32_t *labels; /* [N] */
} pd_dataset;

/* Loads an image file (IDX magic 0x00000803, u8 [N,H,W]) and its label file
 * (0x00000801, u8 [N]), each plain or gzip-compressed. Everything is
 * validated: magic, dimensions, the file length against the dimensions
 * (truncated files and trailing bytes are errors), equal sample counts and
 * labels < `classes`. `limit` > 0 keeps only the first `limit` samples (the
 * whole file is still checked); 0 keeps all. Errors name the file: PD_ENOTFOUND
 * (missing), PD_EIO (unreadable), PD_EFORMAT (malformed), PD_EINVAL (bad
 * arguments), PD_ENOMEM. */
pd_status pd_dataset_load_idx(const char *images_path, const char *labels_path, int classes, int64_t limit,
                              pd_dataset **out);

/* Loads split `split` ("train" or "t10k") of an MNIST-layout directory:
 * <dir>/<split>-images-idx3-ubyte and <dir>/<split>-labels-idx1-ubyte, each
 * taken as is or with a ".gz" suffix (the plain file wins if both exist);
 * 10 classes. `limit` and errors as pd_dataset_load_idx. */
pd_status pd_dataset_load_mnist(const char *dir, const char *split, int64_t limit, pd_dataset **out);

/* Frees a data set and its arrays. NULL is ignored. */
void pd_dataset_destroy(pd_dataset *ds);

/* How a pd_batches iterator walks a data set. */
typedef struct pd_batches_options {
    int batch;      /* B samples per minibatch, > 0 */
    bool shuffle;   /* a fresh permutation every epoch, from (seed, epoch) */
    uint64_t seed;
    /* true: an epoch is floor(N/B) full minibatches and the N mod B samples
     * left over (a different set each epoch when shuffling) are skipped, so
     * every minibatch is full (training). false: an epoch is ceil(N/B)
     * minibatches and the last one may be partial (evaluation). */
    bool drop_last;
    float mean, std; /* pixels become (x/255 - mean) / std; std > 0 */
} pd_batches_options;

/* A minibatch iterator over a pd_dataset (borrowed; it must outlive the
 * iterator). Epochs follow each other without end. */
typedef struct pd_batches pd_batches;

/* Creates an iterator positioned at the start of epoch 0. PD_EINVAL for bad
 * options or when drop_last leaves no full minibatch (N < B). */
pd_status pd_batches_create(const pd_dataset *ds, const pd_batches_options *opts, pd_batches **out);

/* Writes the next minibatch: `images` [B,1,H,W] f32 normalised, `labels` [B]
 * i32 (caller-owned, B as in the options). *valid receives how many leading
 * rows are samples (B except for the last minibatch of an epoch without
 * drop_last); the rows after them are zeros with label 0. After the last
 * minibatch of an epoch the next call starts the next epoch. */
pd_status pd_batches_next(pd_batches *it, float *images, int32_t *labels, int *valid);

/* Minibatches per epoch (floor or ceil of N/B, by drop_last). */
int64_t pd_batches_per_epoch(const pd_batches *it);

/* The epoch the next minibatch belongs to (0-based). */
int64_t pd_batches_epoch(const pd_batches *it);

/* Frees the iterator. NULL is ignored. */
void pd_batches_destroy(pd_batches *it);

#ifdef __cplusplus
}
#endif
#endif
