/* The "cifar10" kind: the binary version of CIFAR-10 (data_batch_1.bin ..
 * data_batch_5.bin for training, test_batch.bin for testing), records of one
 * label byte and 3072 pixel bytes (32x32 red, then green, then blue plane).
 * Files are checked up front (size a whole number of records, labels < 10)
 * and held in memory. Training augmentation as the usual CIFAR recipe:
 * zero-pad by 4, random 32x32 crop, horizontal flip. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/pd_rng.h"
#include "data/pd_data_int.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_PAD 4
#define CIFAR_TRAIN_FILES 5
#define CIFAR_MAX_PATH 4096

static const char *const cifar_class_names[CIFAR_CLASSES] = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
};

typedef struct cifar_set {
    int64_t count;
    uint8_t *pixels; /* [count][3072] */
    int32_t *labels; /* [count] */
} cifar_set;

static pd_status cifar_load(void *state, void *worker, const pd_sample_geometry *g, int64_t index, uint64_t rng_seed,
                            float *image, int32_t *label)
{
    const cifar_set *set = state;
    int dy = 0, dx = 0;
    bool flip = false;

    (void)worker;
    if (g->train) {
        pd_rng rng;
        pd_rng_init(&rng, rng_seed);
        dy = CIFAR_PAD - (int)(pd_rng_next(&rng) % (2 * CIFAR_PAD + 1));
        dx = CIFAR_PAD - (int)(pd_rng_next(&rng) % (2 * CIFAR_PAD + 1));
        flip = pd_rng_next(&rng) >> 63;
    }
    pd_source_put_planar_u8(set->pixels + index * CIFAR_PIXELS, 3, CIFAR_SIDE, CIFAR_SIDE, g, dy, dx, flip, image);
    *label = set->labels[index];
    return PD_OK;
}

static void cifar_destroy(void *state)
{
    cifar_set *set = state;

    if (!set)
        return;
    free(set->pixels);
    free(set->labels);
    free(set);
}

static const pd_source_ops cifar_ops = {
    .prepare = pd_source_no_prepare,
    .worker_create = pd_source_no_worker,
    .worker_destroy = pd_source_no_worker_destroy,
    .load = cifar_load,
    .destroy = cifar_destroy,
};

/* The directory holding the batch files: `dir` itself, or the
 * cifar-10-batches-bin folder the official archive unpacks into. */
static pd_status find_dir(const char *dir, const char *first_file, char *found, size_t size)
{
    struct stat st;

    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return PD_ERROR(PD_ENOTFOUND, "cifar10: %s: no such directory", dir);
    for (int nested = 0; nested < 2; nested++) {
        char path[CIFAR_MAX_PATH];
        snprintf(found, size, nested ? "%s/cifar-10-batches-bin" : "%s", dir);
        if (snprintf(path, sizeof(path), "%s/%s", found, first_file) >= (int)sizeof(path))
            return PD_ERROR(PD_EINVAL, "cifar10: data directory path '%s' is too long", dir);
        if (stat(path, &st) == 0)
            return PD_OK;
    }
    snprintf(found, size, "%s", dir);
    return PD_OK; /* reading names the missing file */
}

/* Checks one batch file's size; *records receives its record count. */
static pd_status check_file(const char *path, int64_t *records)
{
    uint64_t size;

    PD_CHECK(pd_data_regular_file(path, &size));
    if (size == 0 || size % CIFAR_RECORD != 0)
        return PD_ERROR(PD_EFORMAT,
                        "%s: %lld bytes is not a whole number of %d-byte CIFAR-10 records (1 label byte + %d pixel "
                        "bytes): truncated or not a CIFAR-10 binary batch",
                        path, (long long)size, CIFAR_RECORD, CIFAR_PIXELS);
    *records = (int64_t)size / CIFAR_RECORD;
    return PD_OK;
}

/* Appends the first `want` records of `path` to the set. */
static pd_status read_file(const char *path, int64_t want, cifar_set *set)
{
    unsigned char record[CIFAR_RECORD];
    FILE *f = fopen(path, "rb");
    pd_status s = PD_OK;

    if (!f)
        return PD_ERROR(PD_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (int64_t r = 0; r < want; r++) {
        if (fread(record, 1, sizeof(record), f) != sizeof(record)) {
            s = PD_ERROR(PD_EIO, "%s: read of record %lld failed%s", path, (long long)r,
                         ferror(f) ? "" : " (the file shrank while being read)");
            break;
        }
        if (record[0] >= CIFAR_CLASSES) {
            s = PD_ERROR(PD_EFORMAT, "%s: record %lld has label %u, not below the %d classes", path, (long long)r,
                         (unsigned)record[0], CIFAR_CLASSES);
            break;
        }
        set->labels[set->count] = record[0];
        memcpy(set->pixels + set->count * CIFAR_PIXELS, record + 1, CIFAR_PIXELS);
        set->count++;
    }
    fclose(f);
    return s;
}

pd_status pd_source_open_cifar10(const pd_loader_options *o, pd_source *out)
{
    bool train = strcmp(o->split, "train") == 0;
    int files = train ? CIFAR_TRAIN_FILES : 1;
    char dir[CIFAR_MAX_PATH], paths[CIFAR_TRAIN_FILES][CIFAR_MAX_PATH + 32];
    int64_t records[CIFAR_TRAIN_FILES], total = 0, keep;
    cifar_set *set;
    pd_status s;

    if (!o->path)
        return PD_ERROR(PD_EINVAL, "cifar10: no data directory given");
    PD_CHECK(find_dir(o->path, train ? "data_batch_1.bin" : "test_batch.bin", dir, sizeof(dir)));
    for (int i = 0; i < files; i++) {
        if (train)
            snprintf(paths[i], sizeof(paths[i]), "%s/data_batch_%d.bin", dir, i + 1);
        else
            snprintf(paths[i], sizeof(paths[i]), "%s/test_batch.bin", dir);
        PD_CHECK(check_file(paths[i], &records[i]));
        total += records[i];
    }
    keep = o->limit > 0 && o->limit < total ? o->limit : total;
    if (!(set = calloc(1, sizeof(*set))) || !(set->pixels = malloc((size_t)keep * CIFAR_PIXELS)) ||
        !(set->labels = malloc((size_t)keep * sizeof(*set->labels)))) {
        cifar_destroy(set);
        return PD_ERROR(PD_ENOMEM, "cifar10: out of host memory for %lld images", (long long)keep);
    }
    for (int i = 0; i < files && set->count < keep; i++) {
        int64_t want = keep - set->count < records[i] ? keep - set->count : records[i];
        PD_CHECK_GOTO(read_file(paths[i], want, set), s, fail);
    }
    *out = (pd_source){
        .ops = &cifar_ops,
        .state = set,
        .count = set->count,
        .classes = CIFAR_CLASSES,
        .channels = 3,
        .height = CIFAR_SIDE,
        .width = CIFAR_SIDE,
        .mean = PD_CIFAR10_MEAN,
        .std = PD_CIFAR10_STD,
        .class_names = cifar_class_names,
    };
    return PD_OK;

fail:
    cifar_destroy(set);
    return s;
}
