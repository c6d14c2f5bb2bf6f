/* Video captioning data for S2VT (Venugopalan et al., "Sequence to Sequence
 * -- Video to Text", ICCV 2015): per-video sequences of frame features, the
 * captions of the videos as word ids, a minibatch iterator that lays them out
 * for the model (pd_model_s2vt in models.h), and a synthetic generator.
 *
 * Files (two per data set):
 *
 *  features file, binary, little-endian:
 *    offset  0  8 bytes  magic "PDS2VTF1"
 *    offset  8  u64      N, the number of videos (> 0)
 *    offset 16  u32      T, frames per video (> 0)
 *    offset 20  u32      F, features per frame (> 0)
 *    offset 24  f32      [N,T,F] features, row-major, all finite
 *    and nothing after them. Videos with fewer frames are padded by the
 *    producer (zeros are what the model reads during decoding, too).
 *
 *  captions file, text (UTF-8/ASCII, '\n' or "\r\n" line ends):
 *    line 1:   "PDS2VTC1 <V>"   V = vocabulary size, > PD_S2VT_FIRST_WORD
 *    line 2..: "<video>\t<id> <id> ... <id>"   one caption per line: the
 *              decimal video index in [0, N), one tab, then at least one
 *              word id in [PD_S2VT_FIRST_WORD, V), separated by single
 *              spaces. A video may have any number of captions (also none);
 *              every caption line is one training sample.
 *    Ids below PD_S2VT_FIRST_WORD are reserved for the tokens the iterator
 *    adds; mapping ids to words (a vocabulary list) is the producer's
 *    business. Example (vocabulary of 12, two captions of video 0):
 *      PDS2VTC1 12
 *      0<TAB>5 9 4
 *      0<TAB>5 11
 *      1<TAB>7 3 3 8
 *
 * Layout of a minibatch for a model built with T_words = W (the iterator's
 * `words`): caption c = (w_0 .. w_{L-1}) becomes
 *    targets  [w_0, ..., w_{L-1}, EOS, IGNORE, ...]   (W entries)
 *    inputs   [BOS, w_0, ..., w_{L-1}, PAD, ...]     (W entries: BOS, then
 *             the targets shifted by one, PAD where they are IGNORE)
 * truncated to W (a caption of W or more words loses its tail and its EOS).
 * Targets equal to PD_S2VT_IGNORE do not count in S2VT's loss (the mean is
 * over the other positions), so padding never trains the model. */
#ifndef PIPEDREAM_SEQUENCE_H
#define PIPEDREAM_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reserved word ids, and the target of positions the loss skips. */
#define PD_S2VT_PAD 0        /* decoder input after the end of a caption */
#define PD_S2VT_BOS 1        /* decoder input of the first step */
#define PD_S2VT_EOS 2        /* target after the last word */
#define PD_S2VT_FIRST_WORD 3 /* captions use ids in [FIRST_WORD, vocab) */
#define PD_S2VT_IGNORE (-1)  /* target not counted in the loss */

/* An S2VT data set in host memory; made by pd_s2vt_load or
 * pd_s2vt_synthetic and freed by pd_s2vt_destroy (which frees the arrays).
 * A caller may also fill one with its own arrays to pass to pd_s2vt_write or
 * pd_s2vt_batches_create (then it frees them itself). */
typedef struct pd_s2vt_dataset {
    int64_t videos;         /* N */
    int frames;             /* T */
    int features;           /* F */
    int vocab;              /* V: word ids < V */
    float *feats;           /* [N,T,F] */
    int64_t captions;       /* C caption lines (samples) */
    int32_t *video;         /* [C] the video of each caption */
    int64_t *offset;        /* [C+1] caption c is words[offset[c] .. offset[c+1]) */
    int32_t *words;         /* [offset[C]] word ids in [FIRST_WORD, V) */
} pd_s2vt_dataset;

/* Loads a features file and a captions file (formats above) and checks
 * everything: magic, header counts against the file length (truncated files
 * and trailing bytes are errors), finite features, the captions header, every
 * line's layout, video indices < N and word ids in [FIRST_WORD, V). Errors
 * name the file (and "path:line" for captions): PD_ENOTFOUND (missing),
 * PD_EIO (unreadable), PD_EFORMAT (malformed), PD_EINVAL (NULL arguments),
 * PD_ENOMEM. */
pd_status pd_s2vt_load(const char *features_path, const char *captions_path, pd_s2vt_dataset **out);

/* Writes `ds` as the two files, each replaced atomically (temporary file,
 * fsync, rename). PD_EINVAL naming the field if `ds` is inconsistent (the
 * reader would reject the files), PD_EIO if a file cannot be written. */
pd_status pd_s2vt_write(const pd_s2vt_dataset *ds, const char *features_path, const char *captions_path);

/* Frees a data set made by pd_s2vt_load or pd_s2vt_synthetic. NULL is
 * ignored. */
void pd_s2vt_destroy(pd_s2vt_dataset *ds);

/* A synthetic captioning task that is learnable: `templates` fixed captions
 * (lengths uniform in 1..max_words, words uniform in [FIRST_WORD, vocab)),
 * each with its own random sequence of T frame prototypes (N(0,1) entries);
 * video v shows template v mod templates: its frames are the template's
 * prototypes plus N(0, noise^2) noise, and its one caption is the template's.
 * Everything is a function of `seed`. */
typedef struct pd_s2vt_synthetic_options {
    int64_t videos;  /* N > 0 */
    int frames;      /* T > 0 */
    int features;    /* F > 0 */
    int vocab;       /* V > FIRST_WORD */
    int max_words;   /* > 0 */
    int templates;   /* > 0 */
    float noise;     /* >= 0 */
    uint64_t seed;
} pd_s2vt_synthetic_options;

/* Generates the synthetic data set (free with pd_s2vt_destroy). PD_EINVAL
 * naming the option out of range, PD_ENOMEM. */
pd_status pd_s2vt_synthetic(const pd_s2vt_synthetic_options *opts, pd_s2vt_dataset **out);

/* How a pd_s2vt_batches iterator walks the captions (the samples). */
typedef struct pd_s2vt_batches_options {
    int batch;     /* B > 0 */
    int words;     /* W = T_words of the model, > 0 */
    bool shuffle;  /* a new order every epoch, from (seed, epoch) alone */
    uint64_t seed;
    /* true: floor(C/B) full minibatches per epoch (the rest is skipped);
     * false: ceil(C/B), the last one possibly partial. */
    bool drop_last;
    /* Data-parallel sharding as pd_loader_options (0 and 0, or 0 and 1:
     * everything): shard s of n yields minibatches s, s+n, ... of the
     * unsharded iterator; with drop_last every shard yields floor(K/n) per
     * epoch (K unsharded), else ceil((K-s)/n). */
    int shard, num_shards;
} pd_s2vt_batches_options;

/* A minibatch iterator over a pd_s2vt_dataset (borrowed; it must outlive
 * the iterator). Epochs follow each other without end. */
typedef struct pd_s2vt_batches pd_s2vt_batches;

/* Creates an iterator at epoch 0, minibatch 0. PD_EINVAL for bad options,
 * an inconsistent data set, or when a shard gets no minibatch. */
pd_status pd_s2vt_batches_create(const pd_s2vt_dataset *ds, const pd_s2vt_batches_options *opts,
                                 pd_s2vt_batches **out);

/* Writes the next minibatch into caller-owned buffers: `features` [B,T,F],
 * `words` [B,W] decoder inputs and `targets` [B*W] (row b*W + t), laid out
 * as the header says. *valid receives the number of leading rows that are
 * samples; the rows after them have zero features, PAD inputs and IGNORE
 * targets. After the last minibatch of an epoch the next call starts the
 * next epoch. */
pd_status pd_s2vt_batches_next(pd_s2vt_batches *it, float *features, int32_t *words, int32_t *targets,
                               int *valid);

/* Minibatches per epoch (of this shard). */
int64_t pd_s2vt_batches_per_epoch(const pd_s2vt_batches *it);

/* The epoch and the index within it of the next minibatch (0-based). */
int64_t pd_s2vt_batches_epoch(const pd_s2vt_batches *it);
int64_t pd_s2vt_batches_position(const pd_s2vt_batches *it);

/* Moves to minibatch `batch` (in [0, per_epoch]) of epoch `epoch`, so that
 * what follows is exactly what an uninterrupted run yields from there.
 * PD_EINVAL for a negative epoch or a batch out of range. */
pd_status pd_s2vt_batches_seek(pd_s2vt_batches *it, int64_t epoch, int64_t batch);

/* Frees the iterator. NULL is ignored. */
void pd_s2vt_batches_destroy(pd_s2vt_batches *it);

#ifdef __cplusplus
}
#endif
#endif
