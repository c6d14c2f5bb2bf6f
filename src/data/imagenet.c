/* The "imagenet" kind: the usual folder tree <path>/train/<wnid>/<file>.JPEG
 * and <path>/val/<wnid>/<file>.JPEG. Classes are the class directories in byte order
 * of their names (so n01440764 is 0, as in torchvision's ImageFolder); files
 * are .JPEG, .jpeg or .jpg (any case; other files are ignored). Samples are
 * numbered round-robin over the classes (file 0 of every class, then file 1,
 * ...; each class's files in name order), so the evaluation order and any
 * `limit` prefix mix all classes.
 *
 * Training: torchvision's RandomResizedCrop (scale [0.08, 1], aspect ratio
 * [3/4, 4/3], ten tries then a centre crop) and a horizontal flip with
 * p = 1/2, drawn from the sample's seed. Evaluation: the shorter side resized
 * to 256/224 of the output (256 for 224), centre crop. Both are one
 * resampling of a box of the decoded image (pd_jpeg_decode_box). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/pd_rng.h"
#include "data/pd_data_int.h"

#define IMAGENET_SIDE 224
#define IMAGENET_PATH_BYTES 4096

typedef struct imagenet_set {
    char *root;          /* <path>/<train|val> */
    int classes;
    char **wnids;        /* [classes] */
    int64_t count;
    char *names;         /* file names, each NUL-terminated */
    size_t *name_at;     /* [count] offset of each sample's file name */
    int32_t *labels;     /* [count] */
} imagenet_set;

typedef struct imagenet_worker {
    pd_jpeg *jpeg;
    char path[IMAGENET_PATH_BYTES];
} imagenet_worker;

/* ---- loading one sample ---- */

/* Python's round(): halves to even (nearbyint in the default rounding
 * mode), so boxes match torchvision's to the pixel. */
static long round_half_even(double x) { return (long)nearbyint(x); }

/* torchvision's RandomResizedCrop.get_params: a box of the image. */
static void random_resized_crop(pd_rng *rng, int w, int h, double *x0, double *y0, double *bw, double *bh)
{
    const double area = (double)w * h, log_lo = log(3.0 / 4.0), log_hi = log(4.0 / 3.0);

    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * pd_rng_range(rng, 0.08f, 1.0f);
        double ratio = exp(log_lo + (log_hi - log_lo) * pd_rng_range(rng, 0.0f, 1.0f));
        long cw = round_half_even(sqrt(target * ratio)), ch = round_half_even(sqrt(target / ratio));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            *y0 = (double)(pd_rng_next(rng) % (uint64_t)(h - ch + 1));
            *x0 = (double)(pd_rng_next(rng) % (uint64_t)(w - cw + 1));
            *bw = (double)cw;
            *bh = (double)ch;
            return;
        }
    }
    /* Fallback: the whole image, cut to the nearest allowed aspect ratio. */
    double in_ratio = (double)w / h, cw = w, ch = h;
    if (in_ratio < 3.0 / 4.0)
        ch = (double)round_half_even(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0)
        cw = (double)round_half_even(h * (4.0 / 3.0));
    *x0 = (double)((w - (long)cw) / 2);
    *y0 = (double)((h - (long)ch) / 2);
    *bw = cw;
    *bh = ch;
}

/* Resize(shorter side = out*256/224) then CenterCrop(out), as one box. */
static void center_crop(int w, int h, int out_w, int out_h, double *x0, double *y0, double *bw, double *bh)
{
    const long side = round_half_even((out_w > out_h ? out_w : out_h) * 256.0 / 224.0);
    const long rw = w <= h ? side : (long)((double)side * w / h);
    const long rh = h <= w ? side : (long)((double)side * h / w);
    const double top = (double)round_half_even((rh - out_h) / 2.0), left = (double)round_half_even((rw - out_w) / 2.0);

    *x0 = left * w / rw;
    *y0 = top * h / rh;
    *bw = (double)out_w * w / rw;
    *bh = (double)out_h * h / rh;
}

static pd_status imagenet_load(void *state, void *worker, const pd_sample_geometry *g, int64_t index,
                               uint64_t rng_seed, float *image, int32_t *label)
{
    const imagenet_set *set = state;
    imagenet_worker *wk = worker;
    const int32_t cls = set->labels[index];
    double x0, y0, bw, bh;
    bool flip = false;
    int w, h;

    if (snprintf(wk->path, sizeof(wk->path), "%s/%s/%s", set->root, set->wnids[cls],
                 set->names + set->name_at[index]) >= (int)sizeof(wk->path))
        return PD_ERROR(PD_EIO, "%s/%s/%s: path too long", set->root, set->wnids[cls],
                        set->names + set->name_at[index]);
    PD_CHECK(pd_jpeg_open(wk->jpeg, wk->path, &w, &h));
    if (g->train) {
        pd_rng rng;
        pd_rng_init(&rng, rng_seed);
        random_resized_crop(&rng, w, h, &x0, &y0, &bw, &bh);
        flip = pd_rng_next(&rng) >> 63;
    } else {
        center_crop(w, h, g->width, g->height, &x0, &y0, &bw, &bh);
    }
    PD_CHECK(pd_jpeg_decode_box(wk->jpeg, x0, y0, bw, bh, flip, g, image));
    *label = cls;
    return PD_OK;
}

static pd_status imagenet_worker_create(void *state, void **out)
{
    imagenet_worker *wk = calloc(1, sizeof(*wk));
    pd_status s;

    (void)state;
    if (!wk)
        return PD_ERROR(PD_ENOMEM, "imagenet: out of host memory for a loader thread");
    if ((s = pd_jpeg_create(&wk->jpeg)) != PD_OK) {
        free(wk);
        return s;
    }
    *out = wk;
    return PD_OK;
}

static void imagenet_worker_destroy(void *worker)
{
    imagenet_worker *wk = worker;

    if (!wk)
        return;
    pd_jpeg_destroy(wk->jpeg);
    free(wk);
}

static void imagenet_destroy(void *state)
{
    imagenet_set *set = state;

    if (!set)
        return;
    if (set->wnids)
        for (int c = 0; c < set->classes; c++)
            free(set->wnids[c]);
    free(set->wnids);
    free(set->names);
    free(set->name_at);
    free(set->labels);
    free(set->root);
    free(set);
}

static const pd_source_ops imagenet_ops = {
    .prepare = pd_source_no_prepare,
    .worker_create = imagenet_worker_create,
    .worker_destroy = imagenet_worker_destroy,
    .load = imagenet_load,
    .destroy = imagenet_destroy,
};

/* ---- the directory tree ---- */

/* A growing list of strings. */
typedef struct name_list {
    char **items;
    size_t count, cap;
} name_list;

static pd_status list_add(name_list *l, const char *name)
{
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **p = realloc(l->items, cap * sizeof(*p));
        if (!p)
            return PD_ERROR(PD_ENOMEM, "imagenet: out of host memory listing files");
        l->items = p;
        l->cap = cap;
    }
    if (!(l->items[l->count] = strdup(name)))
        return PD_ERROR(PD_ENOMEM, "imagenet: out of host memory listing files");
    l->count++;
    return PD_OK;
}

static void list_free(name_list *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof(*l));
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_jpeg_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && dot != name &&
           (strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".jpg") == 0);
}

/* Is `dir`/`name` a directory (following links)? */
static bool is_dir(const char *dir, const char *name, const struct dirent *e)
{
    char path[IMAGENET_PATH_BYTES];
    struct stat st;

    if (e->d_type == DT_DIR)
        return true;
    if (e->d_type != DT_UNKNOWN && e->d_type != DT_LNK)
        return false;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lists the entries of `dir`: sub-directories into `dirs` (may be NULL),
 * JPEG files into `files` (may be NULL), both sorted. */
static pd_status list_dir(const char *dir, name_list *dirs, name_list *files)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    pd_status s = PD_OK;

    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR)
            return PD_ERROR(PD_ENOTFOUND, "imagenet: %s: no such directory", dir);
        return PD_ERROR(PD_EIO, "imagenet: %s: cannot list: %s", dir, strerror(errno));
    }
    for (errno = 0; (e = readdir(d)); errno = 0) {
        if (e->d_name[0] == '.')
            continue;
        if (is_dir(dir, e->d_name, e)) {
            if (dirs && (s = list_add(dirs, e->d_name)) != PD_OK)
                break;
        } else if (files && is_jpeg_name(e->d_name)) {
            if ((s = list_add(files, e->d_name)) != PD_OK)
                break;
        }
    }
    if (s == PD_OK && errno != 0)
        s = PD_ERROR(PD_EIO, "imagenet: %s: cannot list: %s", dir, strerror(errno));
    closedir(d);
    if (dirs && dirs->count)
        qsort(dirs->items, dirs->count, sizeof(*dirs->items), compare_names);
    if (files && files->count)
        qsort(files->items, files->count, sizeof(*files->items), compare_names);
    return s;
}

/* Numbers the files round-robin over the classes into the set's arrays. */
static pd_status interleave(imagenet_set *set, name_list *files, int64_t keep)
{
    size_t bytes = 0, longest = 0;
    int64_t n = 0;

    for (int c = 0; c < set->classes; c++)
        if (files[c].count > longest)
            longest = files[c].count;
    for (size_t r = 0, k = 0; r < longest && (int64_t)k < keep; r++)
        for (int c = 0; c < set->classes && (int64_t)k < keep; c++)
            if (r < files[c].count) {
                bytes += strlen(files[c].items[r]) + 1;
                k++;
            }
    if (!(set->names = malloc(bytes ? bytes : 1)) || !(set->name_at = malloc((size_t)keep * sizeof(*set->name_at))) ||
        !(set->labels = malloc((size_t)keep * sizeof(*set->labels))))
        return PD_ERROR(PD_ENOMEM, "imagenet: out of host memory for %lld file names", (long long)keep);
    bytes = 0;
    for (size_t r = 0; r < longest && n < keep; r++)
        for (int c = 0; c < set->classes && n < keep; c++)
            if (r < files[c].count) {
                size_t len = strlen(files[c].items[r]) + 1;
                memcpy(set->names + bytes, files[c].items[r], len);
                set->name_at[n] = bytes;
                set->labels[n] = c;
                bytes += len;
                n++;
            }
    set->count = n;
    return PD_OK;
}

pd_status pd_source_open_imagenet(const pd_loader_options *o, pd_source *out)
{
    name_list dirs = {0}, *files = NULL, stray = {0};
    imagenet_set *set = NULL;
    int64_t total = 0;
    pd_status s;

#ifndef HAVE_TURBOJPEG
    (void)o;
    (void)out;
    return PD_ERROR(PD_ENOTSUP, "imagenet: this build has no JPEG decoder (configure did not find libjpeg-turbo's "
                                "TurboJPEG; install it and reconfigure, or use --with-turbojpeg=DIR)");
#endif
    if (!o->path)
        return PD_ERROR(PD_EINVAL, "imagenet: no data directory given");
    if (!(set = calloc(1, sizeof(*set))) || !(set->root = malloc(strlen(o->path) + 8))) {
        s = PD_ERROR(PD_ENOMEM, "imagenet: out of host memory");
        goto fail;
    }
    sprintf(set->root, "%s/%s", o->path, strcmp(o->split, "train") == 0 ? "train" : "val");
    PD_CHECK_GOTO(list_dir(set->root, &dirs, &stray), s, fail);
    if (dirs.count == 0) {
        s = PD_ERROR(PD_EFORMAT, "imagenet: %s holds no class directories%s", set->root,
                     stray.count ? " but JPEG files (expected <wnid>/<file>.JPEG; sort a flat validation set into "
                                   "class directories first)"
                                 : "");
        goto fail;
    }
    if (dirs.count > INT32_MAX) {
        s = PD_ERROR(PD_EFORMAT, "imagenet: %s holds too many class directories", set->root);
        goto fail;
    }
    set->classes = (int)dirs.count;
    if (!(files = calloc(dirs.count, sizeof(*files))) || !(set->wnids = calloc(dirs.count, sizeof(*set->wnids)))) {
        s = PD_ERROR(PD_ENOMEM, "imagenet: out of host memory for %zu classes", dirs.count);
        goto fail;
    }
    for (size_t c = 0; c < dirs.count; c++) {
        char path[IMAGENET_PATH_BYTES];
        if (snprintf(path, sizeof(path), "%s/%s", set->root, dirs.items[c]) >= (int)sizeof(path)) {
            s = PD_ERROR(PD_EINVAL, "imagenet: %s/%s: path too long", set->root, dirs.items[c]);
            goto fail;
        }
        PD_CHECK_GOTO(list_dir(path, NULL, &files[c]), s, fail);
        if (files[c].count == 0) {
            s = PD_ERROR(PD_EFORMAT, "imagenet: %s: no JPEG images in this class directory", path);
            goto fail;
        }
        total += (int64_t)files[c].count;
        set->wnids[c] = dirs.items[c]; /* moved */
        dirs.items[c] = NULL;
    }
    PD_CHECK_GOTO(interleave(set, files, o->limit > 0 && o->limit < total ? o->limit : total), s, fail);
    for (size_t c = 0; c < dirs.count; c++)
        list_free(&files[c]);
    free(files);
    list_free(&dirs);
    list_free(&stray);
    *out = (pd_source){
        .ops = &imagenet_ops,
        .state = set,
        .count = set->count,
        .classes = set->classes,
        .channels = 3,
        .height = IMAGENET_SIDE,
        .width = IMAGENET_SIDE,
        .resamples = true,
        .threaded = true,
        .mean = PD_IMAGENET_MEAN,
        .std = PD_IMAGENET_STD,
        .class_names = (const char *const *)set->wnids,
    };
    return PD_OK;

fail:
    if (files)
        for (size_t c = 0; c < dirs.count; c++)
            list_free(&files[c]);
    free(files);
    list_free(&dirs);
    list_free(&stray);
    imagenet_destroy(set);
    return s;
}
