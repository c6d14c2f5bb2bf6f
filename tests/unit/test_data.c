/* The IDX reader on hand-made files (contents, prefix limits, every kind of
 * malformed file) and the minibatch iterator: normalisation, epochs that visit
 * every sample once, drop_last, reproducible and uniform shuffling. Gzip
 * files are covered by tests/integration/cli_errors.sh. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream/data.h>

typedef struct fixture {
    char dir[64];
    char images[128], labels[128];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/pd-test-data.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->images, sizeof(f->images), "%s/train-images-idx3-ubyte", f->dir);
    snprintf(f->labels, sizeof(f->labels), "%s/train-labels-idx1-ubyte", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    unlink(f->images);
    unlink(f->labels);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void put32(FILE *out, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    fwrite(b, 1, 4, out);
}

/* Images whose every pixel of sample i is `i`, with `extra` bytes more (or
 * fewer) than the header announces. */
static void write_images(const char *path, uint32_t magic, uint32_t n, uint32_t h, uint32_t w, long extra)
{
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    put32(out, magic);
    put32(out, n);
    put32(out, h);
    put32(out, w);
    long bytes = (long)(n * h * w) + extra;
    for (long b = 0; b < bytes; b++)
        fputc((int)((uint32_t)b / (h * w)), out);
    assert_int_equal(fclose(out), 0);
}

/* Labels i % modulo for i < n. */
static void write_labels(const char *path, uint32_t n, int modulo)
{
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    put32(out, 0x00000801);
    put32(out, n);
    for (uint32_t i = 0; i < n; i++)
        fputc((int)(i % (uint32_t)modulo), out);
    assert_int_equal(fclose(out), 0);
}

static void test_reads_images_and_labels(void **state)
{
    fixture *f = *state;
    pd_dataset *ds;

    write_images(f->images, 0x00000803, 5, 2, 3, 0);
    write_labels(f->labels, 5, 4);
    assert_int_equal(pd_dataset_load_idx(f->images, f->labels, 4, 0, &ds), PD_OK);
    assert_int_equal(ds->count, 5);
    assert_int_equal(ds->height, 2);
    assert_int_equal(ds->width, 3);
    assert_int_equal(ds->classes, 4);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ds->labels[i], i % 4);
        for (int p = 0; p < 6; p++)
            assert_int_equal(ds->images[i * 6 + p], i);
    }
    pd_dataset_destroy(ds);

    /* A prefix; the split loader finds the same files. */
    assert_int_equal(pd_dataset_load_mnist(f->dir, "train", 2, &ds), PD_OK);
    assert_int_equal(ds->count, 2);
    assert_int_equal(ds->classes, 10);
    assert_int_equal(ds->images[6], 1);
    assert_int_equal(ds->labels[1], 1);
    pd_dataset_destroy(ds);
}

/* Expects `status` and a message that names the images or labels file and
 * contains `needle`. */
static void expect_error(fixture *f, int classes, int64_t limit, pd_status status, const char *path,
                         const char *needle)
{
    pd_dataset *ds = NULL;

    pd_error_clear();
    assert_int_equal(pd_dataset_load_idx(f->images, f->labels, classes, limit, &ds), status);
    assert_null(ds);
    if (!strstr(pd_last_error(), path) || !strstr(pd_last_error(), needle))
        fail_msg("message '%s' lacks '%s' or '%s'", pd_last_error(), path, needle);
}

static void test_malformed_files_are_named(void **state)
{
    fixture *f = *state;

    write_labels(f->labels, 5, 4);
    write_images(f->images, 0x00000804, 5, 2, 3, 0);
    expect_error(f, 4, 0, PD_EFORMAT, f->images, "magic 0x00000804");
    write_images(f->images, 0x00000803, 5, 2, 3, -1);
    expect_error(f, 4, 0, PD_EFORMAT, f->images, "truncated");
    /* A truncated file is found even when only a prefix is kept. */
    expect_error(f, 4, 1, PD_EFORMAT, f->images, "truncated");
    write_images(f->images, 0x00000803, 5, 2, 3, 1);
    expect_error(f, 4, 0, PD_EFORMAT, f->images, "trailing");
    write_images(f->images, 0x00000803, 5, 0, 3, 0);
    expect_error(f, 4, 0, PD_EFORMAT, f->images, "dimensions");
    write_images(f->images, 0x00000803, 6, 2, 3, 0);
    expect_error(f, 4, 0, PD_EFORMAT, f->images, "6 images");
    expect_error(f, 4, 2, PD_EFORMAT, f->labels, "5 labels");
    write_images(f->images, 0x00000803, 5, 2, 3, 0);
    expect_error(f, 3, 0, PD_EFORMAT, f->labels, "label 3 of sample 3");
    unlink(f->labels);
    expect_error(f, 4, 0, PD_ENOTFOUND, f->labels, "no such file");
    FILE *out = fopen(f->labels, "wb");
    assert_non_null(out);
    put32(out, 0x00000801);
    assert_int_equal(fclose(out), 0);
    expect_error(f, 4, 0, PD_EFORMAT, f->labels, "header");
    assert_int_equal(pd_dataset_load_mnist(f->dir, "t10k", 0, &(pd_dataset *){NULL}), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "t10k-images-idx3-ubyte"));
}

/* A data set of n 1x1 images whose pixel is the sample index. */
static pd_dataset make_set(int64_t n, uint8_t *pixels, int32_t *labels)
{
    for (int64_t i = 0; i < n; i++) {
        pixels[i] = (uint8_t)i;
        labels[i] = (int32_t)(i % 10);
    }
    return (pd_dataset){.count = n, .height = 1, .width = 1, .classes = 10, .images = pixels, .labels = labels};
}

/* The sample index a normalised 1x1 image came from. */
static int sample_of(float x, const pd_batches_options *o)
{
    return (int)lrintf((x * o->std + o->mean) * 255.0f);
}

static void test_epochs_visit_every_sample_once(void **state)
{
    uint8_t pixels[10];
    int32_t labels[10];
    pd_dataset ds = make_set(10, pixels, labels);
    pd_batches_options o = {.batch = 4, .shuffle = true, .seed = 3, .drop_last = false, .mean = 0.25f, .std = 0.5f};
    pd_batches *it;
    float x[4];
    int32_t y[4];
    int valid, order[2][10];

    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_OK);
    assert_int_equal(pd_batches_per_epoch(it), 3);
    for (int e = 0; e < 2; e++) {
        int seen[10] = {0}, n = 0;
        assert_int_equal(pd_batches_epoch(it), e);
        for (int b = 0; b < 3; b++) {
            assert_int_equal(pd_batches_next(it, x, y, &valid), PD_OK);
            assert_int_equal(valid, b < 2 ? 4 : 2);
            for (int r = 0; r < valid; r++) {
                int s = sample_of(x[r], &o);
                assert_true(s >= 0 && s < 10);
                assert_float_equal(x[r], ((float)s / 255.0f - 0.25f) / 0.5f, 1e-6);
                assert_int_equal(y[r], s % 10);
                seen[s]++;
                order[e][n++] = s;
            }
            for (int r = valid; r < 4; r++) {
                assert_true(x[r] == 0.0f);
                assert_int_equal(y[r], 0);
            }
        }
        for (int s = 0; s < 10; s++)
            assert_int_equal(seen[s], 1);
    }
    assert_int_equal(pd_batches_epoch(it), 2);
    assert_memory_not_equal(order[0], order[1], sizeof(order[0]));
    pd_batches_destroy(it);

    /* The same seed gives the same sequence; without shuffling, the file order. */
    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_OK);
    for (int n = 0; n < 10; n += valid) {
        assert_int_equal(pd_batches_next(it, x, y, &valid), PD_OK);
        for (int r = 0; r < valid; r++)
            assert_int_equal(sample_of(x[r], &o), order[0][n + r]);
    }
    pd_batches_destroy(it);
    o.shuffle = false;
    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_OK);
    for (int n = 0; n < 10; n += valid) {
        assert_int_equal(pd_batches_next(it, x, y, &valid), PD_OK);
        for (int r = 0; r < valid; r++)
            assert_int_equal(sample_of(x[r], &o), n + r);
    }
    pd_batches_destroy(it);
}

static void test_drop_last(void **state)
{
    uint8_t pixels[10];
    int32_t labels[10];
    pd_dataset ds = make_set(10, pixels, labels);
    pd_batches_options o = {.batch = 4, .shuffle = true, .seed = 9, .drop_last = true, .mean = 0, .std = 1};
    pd_batches *it;
    float x[4];
    int32_t y[4];
    int valid, dropped_differs = 0, prev_seen[10] = {0};

    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_OK);
    assert_int_equal(pd_batches_per_epoch(it), 2);
    for (int e = 0; e < 8; e++) {
        int seen[10] = {0};
        for (int b = 0; b < 2; b++) {
            assert_int_equal(pd_batches_next(it, x, y, &valid), PD_OK);
            assert_int_equal(valid, 4);
            for (int r = 0; r < 4; r++)
                seen[sample_of(x[r], &o)]++;
        }
        int distinct = 0;
        for (int s = 0; s < 10; s++)
            distinct += seen[s] == 1;
        assert_int_equal(distinct, 8);
        if (e > 0 && memcmp(seen, prev_seen, sizeof(seen)) != 0)
            dropped_differs = 1;
        memcpy(prev_seen, seen, sizeof(seen));
    }
    assert_true(dropped_differs); /* the left-over samples change between epochs */
    pd_batches_destroy(it);

    o.batch = 11;
    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_EINVAL);
    o.batch = 4;
    o.std = 0;
    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_EINVAL);
}

/* Fisher-Yates over 3 samples: all 6 orders equally likely (6000 epochs,
 * expected 1000 each, standard deviation ~29). */
static void test_shuffle_is_uniform(void **state)
{
    uint8_t pixels[3];
    int32_t labels[3];
    pd_dataset ds = make_set(3, pixels, labels);
    pd_batches_options o = {.batch = 3, .shuffle = true, .seed = 11, .drop_last = true, .mean = 0, .std = 1};
    pd_batches *it;
    float x[3];
    int32_t y[3];
    int valid, counts[3][3][3] = {{{0}}};

    assert_int_equal(pd_batches_create(&ds, &o, &it), PD_OK);
    for (int e = 0; e < 6000; e++) {
        assert_int_equal(pd_batches_next(it, x, y, &valid), PD_OK);
        counts[sample_of(x[0], &o)][sample_of(x[1], &o)][sample_of(x[2], &o)]++;
    }
    pd_batches_destroy(it);
    int total = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++) {
                total += counts[a][b][c];
                bool permutation = a != b && b != c && a != c;
                if (permutation ? counts[a][b][c] < 850 || counts[a][b][c] > 1150 : counts[a][b][c] != 0)
                    fail_msg("order %d%d%d drawn %d times of 6000", a, b, c, counts[a][b][c]);
            }
    assert_int_equal(total, 6000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_images_and_labels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_files_are_named, setup, teardown),
        cmocka_unit_test(test_epochs_visit_every_sample_once),
        cmocka_unit_test(test_drop_last),
        cmocka_unit_test(test_shuffle_is_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
