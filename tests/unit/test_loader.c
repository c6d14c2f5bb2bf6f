/* pd_loader on data sets the test writes itself into a temporary directory:
 * MNIST-layout IDX files, CIFAR-10 binary batches and small ImageNet trees of
 * real JPEGs (TurboJPEG-encoded), plus broken files of each kind.
 *
 * Checked against independent references: pixel placement and normalisation
 * computed here from the written bytes; CIFAR augmentation as the pad-crop-
 * flip it must be; the ImageNet evaluation transform against a plain
 * double-precision resize-then-crop of the same decoded image, and against an
 * analytic gradient after scaled decoding; class numbering by sorted wnid.
 * Then the sequence properties: determinism across runs and thread counts,
 * seek equal to an uninterrupted run, shards as an interleaving of the
 * unsharded minibatches, drop_last, unreadable JPEGs skipped once with one
 * warning, and bad inputs refused with messages naming the file. The last
 * case measures decoding throughput with 1 and 2 threads. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_files.h"

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pipedream/data.h>
#include <pipedream/loader.h>
#include <pipedream/log.h>

#include "data/pd_data_int.h"

#ifdef HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

static char root[64]; /* the temporary directory of the whole program */

#define MNIST_N 10
#define CIFAR_PER_FILE 7
#define CIFAR_N (5 * CIFAR_PER_FILE)
#define CIFAR_TEST_N 5

/* ---- writing data sets ---- */

static void path_of(char *out, size_t size, const char *rel)
{
    snprintf(out, size, "%s/%s", root, rel);
}

static void make_dir(const char *rel)
{
    char path[512];
    path_of(path, sizeof(path), rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

static void write_bytes(const char *rel, const void *data, size_t n)
{
    char path[512];
    FILE *f;
    path_of(path, sizeof(path), rel);
    assert_non_null(f = fopen(path, "wb"));
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint8_t mnist_pixel(int i, int y, int x) { return (uint8_t)(i * 29 + y * 9 + x * 7); }

static void write_mnist(const char *dir, const char *split, int n)
{
    unsigned char images[16 + MNIST_N * 28 * 28], labels[8 + MNIST_N];
    char rel[256];

    put32(images, 0x803);
    put32(images + 4, (uint32_t)n);
    put32(images + 8, 28);
    put32(images + 12, 28);
    put32(labels, 0x801);
    put32(labels + 4, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        labels[8 + i] = (unsigned char)((i * 3) % 10);
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++)
                images[16 + (i * 28 + y) * 28 + x] = mnist_pixel(i, y, x);
    }
    snprintf(rel, sizeof(rel), "%s/%s-images-idx3-ubyte", dir, split);
    write_bytes(rel, images, 16 + (size_t)n * 28 * 28);
    snprintf(rel, sizeof(rel), "%s/%s-labels-idx1-ubyte", dir, split);
    write_bytes(rel, labels, 8 + (size_t)n);
}

static uint8_t cifar_pixel(int i, int c, int y, int x) { return (uint8_t)(i * 37 + c * 71 + y * 13 + x * 5); }

static int cifar_label(int i) { return (i * 7) % 10; }

/* Records [first, first+n) of the set as one batch file. */
static void write_cifar(const char *rel, int first, int n, int bad_label_at)
{
    unsigned char *buf = malloc((size_t)n * 3073);
    assert_non_null(buf);
    for (int r = 0; r < n; r++) {
        unsigned char *rec = buf + (size_t)r * 3073;
        int i = first + r;
        rec[0] = (unsigned char)(r == bad_label_at ? 10 : cifar_label(i));
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    rec[1 + (c * 32 + y) * 32 + x] = cifar_pixel(i, c, y, x);
    }
    write_bytes(rel, buf, (size_t)n * 3073);
    free(buf);
}

#ifdef HAVE_TURBOJPEG
typedef void (*pixel_fn)(int x, int y, int w, int h, const void *arg, unsigned char rgb[3]);

static void solid(int x, int y, int w, int h, const void *arg, unsigned char rgb[3])
{
    (void)x, (void)y, (void)w, (void)h;
    memcpy(rgb, arg, 3);
}

static void gradient(int x, int y, int w, int h, const void *arg, unsigned char rgb[3])
{
    (void)arg;
    rgb[0] = (unsigned char)lround(255.0 * x / (w - 1));
    rgb[1] = (unsigned char)lround(255.0 * y / (h - 1));
    rgb[2] = 128;
}

/* Smooth structure with some texture, like a photograph. */
static void texture(int x, int y, int w, int h, const void *arg, unsigned char rgb[3])
{
    int seed = *(const int *)arg;
    rgb[0] = (unsigned char)(127 + 120 * sin(0.05 * x + seed));
    rgb[1] = (unsigned char)(127 + 120 * sin(0.07 * y + 0.03 * x));
    rgb[2] = (unsigned char)((x * y + seed * 13) & 255);
    (void)w, (void)h;
}

/* Encodes a w x h JPEG at `quality` (4:4:4 when `full_chroma`); returns
 * its bytes (malloc'd) and size. */
static unsigned char *encode_jpeg(int w, int h, pixel_fn fn, const void *arg, int quality, bool full_chroma,
                                  unsigned long *size)
{
    unsigned char *rgb = malloc((size_t)w * h * 3), *jpeg = NULL;
    tjhandle tj = tjInitCompress();

    assert_non_null(rgb);
    assert_non_null(tj);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            fn(x, y, w, h, arg, rgb + ((size_t)y * w + x) * 3);
    assert_int_equal(tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpeg, size, full_chroma ? TJSAMP_444 : TJSAMP_420,
                                 quality, 0),
                     0);
    tjDestroy(tj);
    free(rgb);
    return jpeg;
}

static void write_jpeg(const char *rel, int w, int h, pixel_fn fn, const void *arg, size_t keep_bytes)
{
    unsigned long size;
    unsigned char *jpeg = encode_jpeg(w, h, fn, arg, 100, true, &size);
    write_bytes(rel, jpeg, keep_bytes && keep_bytes < size ? keep_bytes : size);
    tjFree(jpeg);
}

static const unsigned char class_colour[3][3] = {{200, 30, 30}, {30, 200, 30}, {30, 30, 200}};
static const char *const wnids[3] = {"n01440764", "n02102040", "n03000684"};
static const int sizes[4][2] = {{40, 30}, {64, 48}, {50, 80}, {33, 33}};

static void write_imagenet(void)
{
    char rel[256];
    static const char garbage[] = "this is not a JPEG file at all, only some text";
    int seed = 0;

    /* The main tree; classes created in reverse order, numbered sorted. */
    make_dir("inet");
    make_dir("inet/train");
    make_dir("inet/val");
    for (int c = 2; c >= 0; c--) {
        snprintf(rel, sizeof(rel), "inet/train/%s", wnids[c]);
        make_dir(rel);
        snprintf(rel, sizeof(rel), "inet/val/%s", wnids[c]);
        make_dir(rel);
        for (int k = 0; k < 4; k++) {
            snprintf(rel, sizeof(rel), "inet/train/%s/%s_%d.JPEG", wnids[c], wnids[c], k);
            write_jpeg(rel, sizes[k][0], sizes[k][1], solid, class_colour[c], 0);
        }
        for (int k = 0; k < 2; k++) {
            snprintf(rel, sizeof(rel), "inet/val/%s/val_%d.jpg", wnids[c], k);
            write_jpeg(rel, sizes[k + 2][0], sizes[k + 2][1], solid, class_colour[c], 0);
        }
        snprintf(rel, sizeof(rel), "inet/train/%s/notes.txt", wnids[c]);
        write_bytes(rel, "ignored", 7);
    }
    /* A reference image and a large gradient. */
    make_dir("ref");
    make_dir("ref/val");
    make_dir("ref/val/a");
    write_jpeg("ref/val/a/pattern.JPEG", 48, 48, texture, &seed, 0);
    make_dir("grad");
    make_dir("grad/val");
    make_dir("grad/val/a");
    write_jpeg("grad/val/a/gradient.JPEG", 640, 480, gradient, NULL, 0);
    /* Unreadable images among readable ones: garbage, a cut header, a
     * cut scan. */
    make_dir("corrupt");
    make_dir("corrupt/train");
    make_dir("corrupt/train/n01");
    make_dir("corrupt/train/n02");
    write_jpeg("corrupt/train/n01/a.JPEG", 40, 40, solid, class_colour[0], 0);
    write_jpeg("corrupt/train/n01/b.JPEG", 40, 40, solid, class_colour[0], 0);
    write_bytes("corrupt/train/n01/garbage.JPEG", garbage, sizeof(garbage));
    write_jpeg("corrupt/train/n02/a.JPEG", 40, 40, solid, class_colour[1], 0);
    write_jpeg("corrupt/train/n02/cut_header.JPEG", 40, 40, solid, class_colour[1], 100);
    write_jpeg("corrupt/train/n02/cut_scan.JPEG", 96, 96, texture, &seed, 1200);
    make_dir("allbad");
    make_dir("allbad/train");
    make_dir("allbad/train/n01");
    write_bytes("allbad/train/n01/x.JPEG", garbage, sizeof(garbage));
    /* Structural errors. */
    make_dir("empty_class");
    make_dir("empty_class/train");
    make_dir("empty_class/train/n01");
    make_dir("empty_class/train/n02");
    write_jpeg("empty_class/train/n01/a.JPEG", 8, 8, solid, class_colour[0], 0);
    make_dir("flat");
    make_dir("flat/val");
    write_jpeg("flat/val/ILSVRC2012_val_00000001.JPEG", 8, 8, solid, class_colour[0], 0);
    /* The throughput set: 64 photograph-like 500x375 images in 4 classes. */
    make_dir("bench");
    make_dir("bench/train");
    for (int c = 0; c < 4; c++) {
        snprintf(rel, sizeof(rel), "bench/train/c%d", c);
        make_dir(rel);
        for (int k = 0; k < 16; k++) {
            unsigned long size;
            int s = c * 16 + k;
            unsigned char *jpeg = encode_jpeg(500, 375, texture, &s, 90, false, &size);
            snprintf(rel, sizeof(rel), "bench/train/c%d/%d.JPEG", c, k);
            write_bytes(rel, jpeg, size);
            tjFree(jpeg);
        }
    }
}
#endif

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    pd_log_set_level(PD_LOG_WARN);
    strcpy(root, "/tmp/pd-test-loader.XXXXXX");
    if (!mkdtemp(root))
        return -1;
    make_dir("mnist");
    write_mnist("mnist", "train", MNIST_N);
    write_mnist("mnist", "t10k", 4);
    make_dir("cifar");
    for (int f = 0; f < 5; f++) {
        char rel[64];
        snprintf(rel, sizeof(rel), "cifar/data_batch_%d.bin", f + 1);
        write_cifar(rel, f * CIFAR_PER_FILE, CIFAR_PER_FILE, -1);
    }
    write_cifar("cifar/test_batch.bin", 1000, CIFAR_TEST_N, -1);
    make_dir("cifar_bad");
    write_cifar("cifar_bad/test_batch.bin", 0, 3, 1);
    make_dir("cifar_cut");
    write_cifar("cifar_cut/test_batch.bin", 0, 3, -1);
    char cut[512];
    path_of(cut, sizeof(cut), "cifar_cut/test_batch.bin");
    if (truncate(cut, 3 * 3073 - 100) != 0)
        return -1;
#ifdef HAVE_TURBOJPEG
    write_imagenet();
#endif
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- helpers ---- */

static pd_loader_options options(const char *kind, const char *rel, const char *split, int batch, bool train)
{
    static char paths[8][512];
    static int next;
    char *path = paths[next++ % 8];

    path_of(path, 512, rel);
    return (pd_loader_options){.kind = kind, .path = path, .split = split, .batch = batch, .train = train,
                               .seed = 42};
}

static pd_loader *open_ok(const pd_loader_options *o)
{
    pd_loader *l = NULL;
    pd_status s = pd_loader_open(o, &l);
    if (s != PD_OK)
        fail_msg("pd_loader_open: %s", pd_last_error());
    return l;
}

/* Runs n minibatches into arrays sized for them. */
typedef struct run {
    int n, batch;
    size_t floats; /* per image */
    float *images;
    int32_t *labels;
    int *valid;
} run;

static run take(pd_loader *l, int n)
{
    pd_loader_info info;
    run r;

    pd_loader_get_info(l, &info);
    r.n = n;
    r.batch = info.batch;
    r.floats = (size_t)info.channels * info.height * info.width;
    assert_non_null(r.images = malloc((size_t)n * r.batch * r.floats * sizeof(float)));
    assert_non_null(r.labels = malloc((size_t)n * r.batch * sizeof(int32_t)));
    assert_non_null(r.valid = malloc((size_t)n * sizeof(int)));
    for (int b = 0; b < n; b++) {
        pd_status s = pd_loader_next(l, r.images + (size_t)b * r.batch * r.floats, r.labels + (size_t)b * r.batch,
                                     &r.valid[b]);
        if (s != PD_OK)
            fail_msg("pd_loader_next: %s", pd_last_error());
    }
    return r;
}

static void run_free(run *r)
{
    free(r->images);
    free(r->labels);
    free(r->valid);
}

/* Minibatch a of x equals minibatch b of y, bit for bit. */
static void assert_same_batch(const run *x, int a, const run *y, int b)
{
    assert_int_equal(x->valid[a], y->valid[b]);
    assert_memory_equal(x->labels + (size_t)a * x->batch, y->labels + (size_t)b * y->batch,
                        (size_t)x->batch * sizeof(int32_t));
    assert_memory_equal(x->images + (size_t)a * x->batch * x->floats, y->images + (size_t)b * y->batch * y->floats,
                        (size_t)x->batch * x->floats * sizeof(float));
}

static void expect_error(const pd_loader_options *o, pd_status want, const char *needle)
{
    pd_loader *l = NULL;
    pd_status s;

    pd_error_clear();
    s = pd_loader_open(o, &l);
    if (s != want || !strstr(pd_last_error(), needle))
        fail_msg("expected status %d mentioning '%s', got %d: %s", want, needle, s, pd_last_error());
    assert_null(l);
}

static float norm(int v, float mean, float std) { return ((float)v / 255.0f - mean) / std; }

/* ---- MNIST ---- */

static void test_mnist_padding_replication_normalisation(void **state)
{
    (void)state;
    pd_loader_options o = options("fashion-mnist", "mnist", "train", 4, false);
    o.channels = 3;
    o.height = 32;
    o.width = 32;
    pd_loader *l = open_ok(&o);
    pd_loader_info info;
    pd_loader_get_info(l, &info);
    assert_int_equal(info.channels, 3);
    assert_int_equal(info.height, 32);
    assert_int_equal(info.width, 32);
    assert_int_equal(info.classes, 10);
    assert_int_equal(info.samples, MNIST_N);
    assert_int_equal(info.batches_per_epoch, 3); /* 4 + 4 + 2 */
    for (int c = 0; c < 3; c++) {
        assert_true(info.mean[c] == PD_FASHION_MNIST_MEAN);
        assert_true(info.std[c] == PD_FASHION_MNIST_STD);
    }
    run r = take(l, 3);
    assert_int_equal(r.valid[2], 2);
    for (int i = 0; i < MNIST_N; i++) {
        const float *img = r.images + (size_t)i * r.floats; /* eval order is the file order */
        assert_int_equal(r.labels[i], (i * 3) % 10);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) {
                    bool inside = y >= 2 && y < 30 && x >= 2 && x < 30;
                    int v = inside ? mnist_pixel(i, y - 2, x - 2) : 0;
                    assert_true(img[(c * 32 + y) * 32 + x] == norm(v, PD_FASHION_MNIST_MEAN, PD_FASHION_MNIST_STD));
                }
    }
    /* The two rows after the last samples are zeros. */
    for (size_t k = 2 * r.floats; k < 4 * r.floats; k++)
        assert_true(r.images[2 * 4 * r.floats + k] == 0.0f);
    assert_int_equal(r.labels[2 * 4 + 2], 0);
    assert_int_equal(r.labels[2 * 4 + 3], 0);
    run_free(&r);
    pd_loader_destroy(l);

    /* kind "mnist": MNIST's statistics; explicit ones win; test = t10k. */
    o = options("mnist", "mnist", "test", 4, false);
    l = open_ok(&o);
    pd_loader_get_info(l, &info);
    assert_true(info.mean[0] == PD_MNIST_MEAN && info.std[0] == PD_MNIST_STD);
    assert_int_equal(info.samples, 4);
    assert_int_equal(info.channels, 1);
    assert_int_equal(info.height, 28);
    pd_loader_destroy(l);
    o.mean[0] = 0.5f;
    o.std[0] = 0.25f;
    l = open_ok(&o);
    r = take(l, 1);
    assert_true(r.images[5 * 28 + 6] == norm(mnist_pixel(0, 5, 6), 0.5f, 0.25f));
    run_free(&r);
    pd_loader_destroy(l);
}

/* The loader walks an IDX set exactly as pd_batches does (trainer migration). */
static void test_mnist_matches_pd_batches(void **state)
{
    (void)state;
    char dir[512];
    pd_dataset *ds;
    pd_batches *it;
    float images[3 * 28 * 28];
    int32_t labels[3];
    int valid;

    path_of(dir, sizeof(dir), "mnist");
    assert_int_equal(pd_dataset_load_mnist(dir, "train", 0, &ds), PD_OK);
    pd_batches_options bo = {.batch = 3, .shuffle = true, .seed = 42, .drop_last = true,
                             .mean = PD_FASHION_MNIST_MEAN, .std = PD_FASHION_MNIST_STD};
    assert_int_equal(pd_batches_create(ds, &bo, &it), PD_OK);
    pd_loader_options o = options("fashion-mnist", "mnist", "train", 3, true);
    pd_loader *l = open_ok(&o);
    run r = take(l, 9); /* three epochs of 3 */
    for (int b = 0; b < 9; b++) {
        assert_int_equal(pd_batches_next(it, images, labels, &valid), PD_OK);
        assert_int_equal(valid, 3);
        assert_memory_equal(labels, r.labels + 3 * b, sizeof(labels));
        assert_memory_equal(images, r.images + (size_t)3 * b * r.floats, sizeof(images));
    }
    run_free(&r);
    pd_loader_destroy(l);
    pd_batches_destroy(it);
    pd_dataset_destroy(ds);
}

/* ---- CIFAR-10 ---- */

static void test_cifar_eval_contents(void **state)
{
    (void)state;
    const float mean[3] = PD_CIFAR10_MEAN, std[3] = PD_CIFAR10_STD;
    pd_loader_options o = options("cifar10", "cifar", "train", 8, false);
    pd_loader *l = open_ok(&o);
    pd_loader_info info;

    pd_loader_get_info(l, &info);
    assert_int_equal(info.samples, CIFAR_N);
    assert_int_equal(info.batches_per_epoch, 5); /* ceil(35 / 8) */
    assert_string_equal(pd_loader_class_name(l, 0), "airplane");
    assert_string_equal(pd_loader_class_name(l, 9), "truck");
    assert_null(pd_loader_class_name(l, 10));
    run r = take(l, 5);
    assert_int_equal(r.valid[4], 3);
    for (int i = 0; i < CIFAR_N; i++) {
        const float *img = r.images + (size_t)i * r.floats;
        assert_int_equal(r.labels[i], cifar_label(i));
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y += 3)
                for (int x = 0; x < 32; x++)
                    assert_true(img[(c * 32 + y) * 32 + x] == norm(cifar_pixel(i, c, y, x), mean[c], std[c]));
    }
    run_free(&r);
    pd_loader_destroy(l);

    o = options("cifar10", "cifar", "test", 8, false);
    o.limit = 3;
    l = open_ok(&o);
    pd_loader_get_info(l, &info);
    assert_int_equal(info.samples, 3);
    r = take(l, 1);
    assert_int_equal(r.valid[0], 3);
    assert_int_equal(r.labels[2], cifar_label(1002));
    assert_true(r.images[2 * r.floats + 1024 + 33] == norm(cifar_pixel(1002, 1, 1, 1), mean[1], std[1]));
    run_free(&r);
    pd_loader_destroy(l);
}

/* Is `img` sample i padded by 4, cropped at shift (dy, dx) and maybe flipped? */
static bool is_pad_crop_flip(const float *img, int i, int dy, int dx, bool flip)
{
    const float mean[3] = PD_CIFAR10_MEAN, std[3] = PD_CIFAR10_STD;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int sx = (flip ? 31 - x : x) - dx, sy = y - dy;
                int v = sx >= 0 && sx < 32 && sy >= 0 && sy < 32 ? cifar_pixel(i, c, sy, sx) : 0;
                if (img[(c * 32 + y) * 32 + x] != norm(v, mean[c], std[c]))
                    return false;
            }
    return true;
}

static void test_cifar_augmentation_is_pad_crop_flip(void **state)
{
    (void)state;
    pd_loader_options o = options("cifar10", "cifar", "train", 8, true);
    pd_loader *l = open_ok(&o);
    int64_t order[CIFAR_N];
    int flips = 0, shifted = 0;
    bool shifts_seen[9] = {0};

    run r = take(l, 8); /* two epochs of floor(35 / 8) = 4 */
    for (int b = 0; b < 8; b++) {
        assert_int_equal(r.valid[b], 8);
        pd_data_epoch_order(order, CIFAR_N, true, 42, b / 4);
        for (int row = 0; row < 8; row++) {
            int i = (int)order[(b % 4) * 8 + row], found = 0;
            const float *img = r.images + ((size_t)b * 8 + row) * r.floats;
            assert_int_equal(r.labels[b * 8 + row], cifar_label(i));
            for (int dy = -4; dy <= 4; dy++)
                for (int dx = -4; dx <= 4; dx++)
                    for (int f = 0; f < 2; f++)
                        if (is_pad_crop_flip(img, i, dy, dx, f)) {
                            found++;
                            flips += f;
                            shifted += dy != 0 || dx != 0;
                            shifts_seen[dx + 4] = true;
                        }
            assert_int_equal(found, 1);
        }
    }
    /* 64 draws: both flip states and many shifts occur. */
    assert_in_range(flips, 16, 48);
    assert_true(shifted > 40);
    int distinct = 0;
    for (int k = 0; k < 9; k++)
        distinct += shifts_seen[k];
    assert_true(distinct >= 6);
    run_free(&r);
    pd_loader_destroy(l);
}

static void test_drop_last_and_partial_batch(void **state)
{
    (void)state;
    pd_loader_options o = options("cifar10", "cifar", "train", 6, true);
    pd_loader *l = open_ok(&o);
    pd_loader_info info;
    pd_loader_get_info(l, &info);
    assert_int_equal(info.batches_per_epoch, 5); /* floor(35 / 6): 5 left over */
    assert_int_equal(info.samples, 30);
    assert_int_equal(info.split_samples, 35);
    run r = take(l, 5);
    for (int b = 0; b < 5; b++)
        assert_int_equal(r.valid[b], 6);
    assert_int_equal(pd_loader_epoch(l), 1);
    assert_int_equal(pd_loader_position(l), 0);
    run_free(&r);
    pd_loader_destroy(l);

    o.train = false;
    l = open_ok(&o);
    pd_loader_get_info(l, &info);
    assert_int_equal(info.batches_per_epoch, 6);
    assert_int_equal(info.samples, 35);
    r = take(l, 7);
    assert_int_equal(r.valid[5], 5);
    assert_int_equal(r.valid[6], 6); /* the next epoch starts over */
    for (size_t k = 0; k < r.floats; k++)
        assert_true(r.images[(5 * 6 + 5) * r.floats + k] == 0.0f);
    assert_int_equal(r.labels[5 * 6 + 5], 0);
    assert_int_equal(r.labels[6 * 6], cifar_label(0));
    run_free(&r);
    pd_loader_destroy(l);
}

/* Shard s of n yields minibatches s, s+n, ... of the unsharded loader. */
static void check_shards(pd_loader_options o, int n, int epochs)
{
    pd_loader *whole = open_ok(&o);
    pd_loader_info info;
    pd_loader_get_info(whole, &info);
    const int64_t k = info.batches_per_epoch;
    run all = take(whole, (int)(k * epochs));
    int64_t covered = 0, per_shard_total = 0;

    for (int s = 0; s < n; s++) {
        pd_loader_options so = o;
        so.shard = s;
        so.num_shards = n;
        pd_loader *l = open_ok(&so);
        pd_loader_info si;
        pd_loader_get_info(l, &si);
        int64_t expect = o.train ? k / n : (k - s + n - 1) / n;
        assert_int_equal(si.batches_per_epoch, expect);
        run r = take(l, (int)(expect * epochs));
        for (int e = 0; e < epochs; e++)
            for (int64_t j = 0; j < expect; j++) {
                assert_same_batch(&r, (int)(e * expect + j), &all, (int)(e * k + s + j * n));
                covered += e == 0 ? r.valid[e * expect + j] : 0;
            }
        per_shard_total += si.samples;
        run_free(&r);
        pd_loader_destroy(l);
    }
    /* Evaluation covers every sample once (the unsharded minibatches
     * partition the set); training all but the K mod n left over. */
    assert_int_equal(covered, per_shard_total);
    if (!o.train)
        assert_int_equal(covered, info.samples);
    else
        assert_int_equal(covered, (k - k % n) * o.batch);
    run_free(&all);
    pd_loader_destroy(whole);
}

static void test_shards_disjoint_and_covering(void **state)
{
    (void)state;
    check_shards(options("cifar10", "cifar", "train", 4, false), 3, 2); /* K = 9 */
    check_shards(options("cifar10", "cifar", "train", 4, false), 4, 1); /* K = 9: shard 0 gets 3 */
    check_shards(options("cifar10", "cifar", "train", 4, true), 3, 3);  /* K = 8: 2 each, 2 left */
    /* Disjointness of the samples themselves: labels+pixels identify a
     * CIFAR sample; the eval shards' rows are distinct samples. */
    int seen[CIFAR_N] = {0};
    for (int s = 0; s < 3; s++) {
        pd_loader_options o = options("cifar10", "cifar", "train", 4, false);
        o.shard = s;
        o.num_shards = 3;
        o.std[0] = o.std[1] = o.std[2] = 1.0f; /* pixels become v/255 */
        pd_loader *l = open_ok(&o);
        pd_loader_info info;
        pd_loader_get_info(l, &info);
        run r = take(l, (int)info.batches_per_epoch);
        for (int b = 0; b < r.n; b++)
            for (int row = 0; row < r.valid[b]; row++) {
                const float *img = r.images + ((size_t)b * 4 + row) * r.floats;
                int v0 = (int)lroundf(img[0] * 255.0f), v1 = (int)lroundf(img[1] * 255.0f);
                int match = -1;
                for (int i = 0; i < CIFAR_N; i++)
                    if (cifar_pixel(i, 0, 0, 0) == v0 && cifar_pixel(i, 0, 0, 1) == v1 &&
                        cifar_label(i) == r.labels[b * 4 + row])
                        match = i;
                assert_true(match >= 0);
                seen[match]++;
            }
        run_free(&r);
        pd_loader_destroy(l);
    }
    for (int i = 0; i < CIFAR_N; i++)
        assert_int_equal(seen[i], 1);
}

/* ---- synthetic ---- */

static void test_synthetic(void **state)
{
    (void)state;
    const float mean[3] = PD_IMAGENET_MEAN, std[3] = PD_IMAGENET_STD;
    pd_loader_options o = {.kind = "synthetic", .batch = 4, .train = true, .seed = 7, .classes = 5, .samples = 12,
                           .channels = 3, .height = 9, .width = 11};
    pd_loader *a = open_ok(&o), *b = open_ok(&o);
    pd_loader_info info;
    pd_loader_get_info(a, &info);
    assert_int_equal(info.samples, 12);
    assert_int_equal(info.classes, 5);
    assert_int_equal(info.height, 9);
    assert_int_equal(info.width, 11);
    run ra = take(a, 6), rb = take(b, 6);
    int counts[5] = {0};
    for (int k = 0; k < 6; k++)
        assert_same_batch(&ra, k, &rb, k);
    for (int k = 0; k < 24; k++) {
        assert_in_range(ra.labels[k], 0, 4);
        counts[ra.labels[k]]++;
    }
    /* Every value is a normalised byte, and the bytes vary. */
    int distinct_first = 0;
    for (int k = 0; k < 24; k++) {
        const float *img = ra.images + (size_t)k * ra.floats;
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 99; p++) {
                float v = img[c * 99 + p] * std[c] + mean[c];
                assert_true(v > -1e-5f && v < 1 + 1e-5f);
                assert_true(fabsf(v * 255.0f - nearbyintf(v * 255.0f)) < 1e-3f);
            }
        distinct_first += img[0] != ra.images[0];
    }
    assert_true(distinct_first > 12);
    /* Epochs reorder the same fixed set: each epoch has the same labels. */
    int e0[5] = {0}, e1[5] = {0};
    for (int k = 0; k < 12; k++) {
        e0[ra.labels[k]]++;
        e1[ra.labels[12 + k]]++;
    }
    assert_memory_equal(e0, e1, sizeof(e0));
    run_free(&ra);
    run_free(&rb);
    pd_loader_destroy(a);
    pd_loader_destroy(b);

    /* In evaluation order, epoch 1 repeats epoch 0 bit for bit. */
    o.train = false;
    a = open_ok(&o);
    ra = take(a, 6);
    for (int k = 0; k < 3; k++)
        assert_same_batch(&ra, k, &ra, k + 3);
    run_free(&ra);
    pd_loader_destroy(a);

    o.seed = 8;
    a = open_ok(&o);
    o.seed = 7;
    b = open_ok(&o);
    ra = take(a, 1);
    rb = take(b, 1);
    assert_true(memcmp(ra.images, rb.images, 4 * ra.floats * sizeof(float)) != 0);
    run_free(&ra);
    run_free(&rb);
    pd_loader_destroy(a);
    pd_loader_destroy(b);
}

/* ---- seek ---- */

static void check_seek(pd_loader_options o, int total)
{
    pd_loader *whole = open_ok(&o);
    run all = take(whole, total);
    pd_loader_info info;
    pd_loader_get_info(whole, &info);
    const int64_t k = info.batches_per_epoch;

    /* Fresh loaders seeking mid-epoch, to an epoch start and via batch == k. */
    const int64_t points[][2] = {{0, 1}, {1, k - 1}, {1, 0}, {0, k}, {2, 1}};
    for (size_t p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
        int start = (int)(points[p][0] * k + points[p][1]);
        if (start >= total)
            continue;
        pd_loader *l = open_ok(&o);
        assert_int_equal(pd_loader_seek(l, points[p][0], points[p][1]), PD_OK);
        assert_int_equal(pd_loader_epoch(l), start / k);
        assert_int_equal(pd_loader_position(l), start % k);
        run r = take(l, total - start);
        for (int b = 0; b < r.n; b++)
            assert_same_batch(&r, b, &all, start + b);
        run_free(&r);
        pd_loader_destroy(l);
    }
    /* A loader that already ran ahead (prefetching) seeks back and forth. */
    pd_loader *l = open_ok(&o);
    run ahead = take(l, total - 1);
    run_free(&ahead);
    assert_int_equal(pd_loader_seek(l, 0, 2), PD_OK);
    run back = take(l, total - 2);
    for (int b = 0; b < back.n; b++)
        assert_same_batch(&back, b, &all, 2 + b);
    run_free(&back);
    assert_int_equal(pd_loader_seek(l, -1, 0), PD_EINVAL);
    assert_int_equal(pd_loader_seek(l, 0, k + 1), PD_EINVAL);
    pd_loader_destroy(l);
    run_free(&all);
    pd_loader_destroy(whole);
}

static void test_seek_reproduces_uninterrupted_run(void **state)
{
    (void)state;
    check_seek(options("cifar10", "cifar", "train", 8, true), 11);  /* 4 per epoch */
    check_seek(options("cifar10", "cifar", "train", 8, false), 12); /* 5 per epoch */
#ifdef HAVE_TURBOJPEG
    pd_loader_options o = options("imagenet", "inet", "train", 3, true);
    o.height = o.width = 24;
    o.threads = 2;
    o.prefetch = 2;
    check_seek(o, 10); /* 4 per epoch */
#endif
}

static void test_bad_inputs(void **state)
{
    (void)state;
    pd_loader_options o = options("nonsense", "mnist", "train", 4, false);
    pd_loader *l = NULL;
    expect_error(&o, PD_EINVAL, "nonsense");
    o.kind = NULL;
    expect_error(&o, PD_EINVAL, "kind");
    o = options("mnist", "mnist", "dev", 4, false);
    expect_error(&o, PD_EINVAL, "dev");
    o = options("mnist", "mnist", "train", 0, false);
    expect_error(&o, PD_EINVAL, "batch");
    o = options("mnist", "mnist", "train", 4, false);
    o.shard = 2;
    o.num_shards = 2;
    expect_error(&o, PD_EINVAL, "shard 2 of 2");
    o = options("mnist", "mnist", "train", 11, true);
    expect_error(&o, PD_EINVAL, "minibatch of 11");
    o = options("mnist", "mnist", "train", 4, false);
    o.height = o.width = 16;
    expect_error(&o, PD_EINVAL, "smaller");
    o = options("cifar10", "cifar", "train", 4, false);
    o.channels = 1;
    expect_error(&o, PD_EINVAL, "1 output channel");
    o.channels = 2;
    expect_error(&o, PD_EINVAL, "2 output channels");
    o = options("cifar10", "cifar", "train", 4, false);
    o.std[0] = 0.5f; /* std[1] left 0 */
    expect_error(&o, PD_EINVAL, "channel 1");
    o = options("mnist", "no_such_dir", "train", 4, false);
    expect_error(&o, PD_ENOTFOUND, "no_such_dir");
    o = options("cifar10", "no_such_dir", "train", 4, false);
    expect_error(&o, PD_ENOTFOUND, "no_such_dir");
    o = options("cifar10", "cifar_cut", "test", 4, false);
    expect_error(&o, PD_EFORMAT, "cifar_cut/test_batch.bin");
    o = options("cifar10", "cifar_bad", "test", 4, false);
    expect_error(&o, PD_EFORMAT, "record 1 has label 10");
    o = options("cifar10", "cifar_bad", "train", 4, false);
    expect_error(&o, PD_ENOTFOUND, "data_batch_1.bin");
    o = options("imagenet", "no_such_dir", "train", 4, false);
#ifdef HAVE_TURBOJPEG
    expect_error(&o, PD_ENOTFOUND, "no_such_dir/train");
    o = options("imagenet", "empty_class", "train", 1, false);
    expect_error(&o, PD_EFORMAT, "empty_class/train/n02: no JPEG images");
    o = options("imagenet", "flat", "val", 1, false);
    expect_error(&o, PD_EFORMAT, "no class directories but JPEG files");
    o = options("imagenet", "inet", "train", 4, false);
    o.threads = -1;
    expect_error(&o, PD_EINVAL, "threads");
#else
    expect_error(&o, PD_ENOTSUP, "no JPEG decoder");
#endif
    assert_int_equal(pd_loader_open(NULL, &l), PD_EINVAL);
    o = options("synthetic", "", "train", 2, false);
    l = open_ok(&o);
    int valid;
    assert_int_equal(pd_loader_next(l, NULL, NULL, &valid), PD_EINVAL);
    pd_loader_destroy(l);
    pd_loader_destroy(NULL);
}

/* ---- ImageNet ---- */

#ifdef HAVE_TURBOJPEG
static void test_imagenet_labels_and_colours(void **state)
{
    (void)state;
    const float mean[3] = PD_IMAGENET_MEAN, std[3] = PD_IMAGENET_STD;

    for (int train = 0; train < 2; train++) {
        pd_loader_options o = options("imagenet", "inet", train ? "train" : "val", 3, train);
        o.height = 20;
        o.width = 28;
        pd_loader *l = open_ok(&o);
        pd_loader_info info;
        pd_loader_get_info(l, &info);
        assert_int_equal(info.classes, 3);
        assert_int_equal(info.samples, train ? 12 : 6);
        assert_int_equal(info.channels, 3);
        for (int c = 0; c < 3; c++)
            assert_string_equal(pd_loader_class_name(l, c), wnids[c]);
        run r = take(l, (int)info.batches_per_epoch);
        for (int k = 0; k < r.n * 3; k++) {
            int cls = r.labels[k];
            assert_in_range(cls, 0, 2);
            if (!train)
                assert_int_equal(cls, k % 3); /* round-robin over the classes */
            /* Solid colours survive any crop, flip and resize. */
            for (int c = 0; c < 3; c++)
                for (int p = 0; p < 20 * 28; p += 7) {
                    float v = r.images[(size_t)k * r.floats + (size_t)c * 560 + p];
                    assert_float_equal(v, norm(class_colour[cls][c], mean[c], std[c]), 2.5f / 255 / std[c]);
                }
        }
        run_free(&r);
        pd_loader_destroy(l);
    }
    /* One channel: the luminance. */
    pd_loader_options o = options("imagenet", "inet", "val", 2, false);
    o.channels = 1;
    o.height = o.width = 8;
    pd_loader *l = open_ok(&o);
    run r = take(l, 1);
    double luma = 0.299 * class_colour[0][0] + 0.587 * class_colour[0][1] + 0.114 * class_colour[0][2];
    assert_float_equal(r.images[0], norm((int)lround(luma), mean[0], std[0]), 2.5f / 255 / std[0]);
    run_free(&r);
    pd_loader_destroy(l);
}

/* A triangle-filter resize of a whole axis (double precision, every source
 * pixel weighed), the independent reference of the evaluation transform. */
static void reference_resize_axis(const double *in, int n_in, int stride_in, double *out, int n_out, int stride_out)
{
    double scale = (double)n_in / n_out, filter = scale > 1 ? scale : 1;
    for (int o = 0; o < n_out; o++) {
        double center = (o + 0.5) * scale, sum = 0, total = 0;
        for (int i = 0; i < n_in; i++) {
            double w = 1 - fabs((i + 0.5 - center) / filter);
            if (w > 0) {
                sum += w * in[(size_t)i * stride_in];
                total += w;
            }
        }
        out[(size_t)o * stride_out] = sum / total;
    }
}

static void test_imagenet_eval_transform_matches_reference(void **state)
{
    (void)state;
    const float mean[3] = PD_IMAGENET_MEAN, std[3] = PD_IMAGENET_STD;
    char path[512];
    unsigned char *file, pixels[48 * 48 * 3];
    size_t size;
    tjhandle tj = tjInitDecompress();

    /* Decode the file as it is on disk. */
    path_of(path, sizeof(path), "ref/val/a/pattern.JPEG");
    file = test_read_file(path, &size);
    assert_int_equal(tjDecompress2(tj, file, (unsigned long)size, pixels, 48, 0, 48, TJPF_RGB, 0), 0);
    tjDestroy(tj);
    free(file);

    /* torchvision: Resize(46) (= round(40 * 256 / 224)) then CenterCrop(40). */
    static double src[48 * 48], mid[46 * 48], resized[46 * 46];
    pd_loader_options o = options("imagenet", "ref", "val", 1, false);
    o.height = o.width = 40;
    pd_loader *l = open_ok(&o);
    run r = take(l, 1);
    double worst = 0;
    for (int c = 0; c < 3; c++) {
        for (int p = 0; p < 48 * 48; p++)
            src[p] = pixels[p * 3 + c];
        for (int y = 0; y < 48; y++)
            reference_resize_axis(src + y * 48, 48, 1, mid + y * 46, 46, 1);
        for (int x = 0; x < 46; x++)
            reference_resize_axis(mid + x, 48, 46, resized + x, 46, 46);
        for (int y = 0; y < 40; y++)
            for (int x = 0; x < 40; x++) {
                double want = (resized[(y + 3) * 46 + x + 3] / 255 - mean[c]) / std[c];
                double got = r.images[(c * 40 + y) * 40 + x];
                worst = fmax(worst, fabs(got - want) * std[c] * 255);
            }
    }
    print_message("# eval transform vs reference resize+crop: max error %.2g (of 255)\n", worst);
    assert_true(worst < 1e-3);
    run_free(&r);
    pd_loader_destroy(l);
}

/* A 640x480 gradient to 32x32 goes through 1/8-scale decoding; the result
 * must still be the gradient at each output pixel's centre. */
static void test_imagenet_scaled_decode_keeps_geometry(void **state)
{
    (void)state;
    const float mean[3] = PD_IMAGENET_MEAN, std[3] = PD_IMAGENET_STD;
    pd_loader_options o = options("imagenet", "grad", "val", 1, false);
    o.height = o.width = 32;
    pd_loader *l = open_ok(&o);
    run r = take(l, 1);
    /* Resize(37): 49x37, crop 32x32 at (left 8, top 2) (halves to even). */
    double worst = 0;
    for (int y = 1; y < 31; y++)
        for (int x = 1; x < 31; x++) {
            double sx = (8 + x + 0.5) * 640.0 / 49 - 0.5, sy = (2 + y + 0.5) * 480.0 / 37 - 0.5;
            double want[3] = {255 * sx / 639, 255 * sy / 479, 128};
            for (int c = 0; c < 3; c++) {
                double got = (r.images[(c * 32 + y) * 32 + x] * std[c] + mean[c]) * 255;
                worst = fmax(worst, fabs(got - want[c]));
            }
        }
    print_message("# 1/8-scale decode of a gradient: max deviation %.2f (of 255)\n", worst);
    assert_true(worst < 3.0);
    run_free(&r);
    pd_loader_destroy(l);
}

static void test_imagenet_deterministic_across_threads(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {2, 2}, {3, 5}, {2, 1}};
    run first = {0};

    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        pd_loader_options o = options("imagenet", "inet", "train", 5, true);
        o.height = o.width = 16;
        o.threads = shapes[k][0];
        o.prefetch = shapes[k][1];
        pd_loader *l = open_ok(&o);
        run r = take(l, 6); /* three epochs of floor(12 / 5) = 2 */
        if (k == 0)
            first = r;
        else {
            for (int b = 0; b < 6; b++)
                assert_same_batch(&r, b, &first, b);
            run_free(&r);
        }
        pd_loader_destroy(l);
    }
    /* Epochs differ (a new order and new crops), seeds differ. */
    assert_true(memcmp(first.images, first.images + 2 * 5 * first.floats, 5 * first.floats * sizeof(float)) != 0);
    pd_loader_options o = options("imagenet", "inet", "train", 5, true);
    o.height = o.width = 16;
    o.seed = 43;
    pd_loader *l = open_ok(&o);
    run other = take(l, 1);
    assert_true(memcmp(first.labels, other.labels, 5 * sizeof(int32_t)) != 0 ||
                memcmp(first.images, other.images, 5 * first.floats * sizeof(float)) != 0);
    run_free(&other);
    pd_loader_destroy(l);
    run_free(&first);
    /* Shards of the threaded loader interleave like the others. */
    o = options("imagenet", "inet", "val", 2, false);
    o.height = o.width = 8;
    o.threads = 2;
    check_shards(o, 2, 2);
}

/* Counts lines of `text` containing `needle`. */
static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void test_imagenet_unreadable_images_skipped_once(void **state)
{
    (void)state;
    char log_path[512], text[8192] = {0};
    int saved = dup(2), fd;

    path_of(log_path, sizeof(log_path), "warnings.log");
    assert_true((fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
    fflush(stderr);
    dup2(fd, 2);
    close(fd);

    /* Eval order (round-robin): n01/a n02/a n01/b n02/cut_header n01/garbage
     * n02/cut_scan: the last three are unreadable. */
    pd_loader_options o = options("imagenet", "corrupt", "train", 3, false);
    o.height = o.width = 8;
    o.threads = 2;
    pd_loader *l = open_ok(&o);
    run r = take(l, 6); /* three epochs */
    pd_loader_info info;
    pd_loader_get_info(l, &info);
    pd_loader_destroy(l);

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[got] = '\0';

    assert_int_equal(info.skipped, 3);
    assert_int_equal(count_lines(text, "garbage.JPEG"), 1);
    assert_int_equal(count_lines(text, "cut_header.JPEG"), 1);
    assert_int_equal(count_lines(text, "cut_scan.JPEG"), 1);
    assert_int_equal(count_lines(text, "warn"), 3);
    /* Each unreadable sample became the next readable one, wrapping: row 3
     * (n02/cut_header) -> row 4 (garbage) -> row 5 (cut_scan) -> row 0. */
    for (int b = 0; b < 6; b++) {
        int base = b * 3;
        assert_int_equal(r.valid[b], 3);
        if (b % 2 == 0) {
            assert_int_equal(r.labels[base + 0], 0);
            assert_int_equal(r.labels[base + 1], 1);
            assert_int_equal(r.labels[base + 2], 0);
        } else {
            for (int row = 0; row < 3; row++) {
                assert_int_equal(r.labels[base + row], 0); /* n01/a, the first sample */
                assert_memory_equal(r.images + (size_t)(base + row) * r.floats, r.images,
                                    r.floats * sizeof(float));
            }
        }
    }
    run_free(&r);

    /* Nothing readable at all: an error, not a hang. */
    o = options("imagenet", "allbad", "train", 1, false);
    o.threads = 2;
    int saved2 = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
    l = open_ok(&o);
    float image[3 * 224 * 224];
    int32_t label;
    int valid;
    pd_status s = pd_loader_next(l, image, &label, &valid);
    pd_loader_destroy(l);
    dup2(saved2, 2);
    close(saved2);
    assert_int_equal(s, PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "none of the 1 images"));
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 64 photograph-like 500x375 JPEGs to 224x224 with the training transform,
 * one thread against two; the bytes must not depend on the thread count. */
static void test_imagenet_decode_throughput(void **state)
{
    (void)state;
    double rate[2];
    run first = {0};

    for (int t = 1; t <= 2; t++) {
        pd_loader_options o = options("imagenet", "bench", "train", 16, true);
        o.threads = t;
        pd_loader *l = open_ok(&o);
        run warm = take(l, 1); /* threads started and caches warm */
        run_free(&warm);
        double t0 = now();
        run r = take(l, 8); /* two epochs */
        rate[t - 1] = 8 * 16 / (now() - t0);
        pd_loader_destroy(l);
        if (t == 1)
            first = r;
        else {
            for (int b = 0; b < 8; b++)
                assert_same_batch(&r, b, &first, b);
            run_free(&r);
        }
    }
    run_free(&first);
    print_message("# imagenet decode 500x375 -> 224x224 train transform: %.0f images/s with 1 thread, %.0f with 2 "
                  "(x%.2f, %ld cores online)\n",
                  rate[0], rate[1], rate[1] / rate[0], sysconf(_SC_NPROCESSORS_ONLN));
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mnist_padding_replication_normalisation),
        cmocka_unit_test(test_mnist_matches_pd_batches),
        cmocka_unit_test(test_cifar_eval_contents),
        cmocka_unit_test(test_cifar_augmentation_is_pad_crop_flip),
        cmocka_unit_test(test_drop_last_and_partial_batch),
        cmocka_unit_test(test_shards_disjoint_and_covering),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_seek_reproduces_uninterrupted_run),
        cmocka_unit_test(test_bad_inputs),
#ifdef HAVE_TURBOJPEG
        cmocka_unit_test(test_imagenet_labels_and_colours),
        cmocka_unit_test(test_imagenet_eval_transform_matches_reference),
        cmocka_unit_test(test_imagenet_scaled_decode_keeps_geometry),
        cmocka_unit_test(test_imagenet_deterministic_across_threads),
        cmocka_unit_test(test_imagenet_unreadable_images_skipped_once),
        cmocka_unit_test(test_imagenet_decode_throughput),
#endif
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
