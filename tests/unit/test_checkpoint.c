/* Unit tests of checkpoints and learning-rate schedules: schedule values
 * against hand-computed ones; a save/load round trip of a small graph's
 * parameters, buffers and SGD/Adam state that continues bit-identically;
 * the file's tensor names and metadata; mismatched models and
 * hyper-parameters named in the error; truncated and bit-flipped files
 * rejected without touching the graph; the directory index; the state's
 * typed validation (a file written here with the documented checksum). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/checkpoint.h>
#include <pipedream/trainer.h>

#define BATCH 4
#define CLASSES 3

static pd_device *dev;
static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "%s/pd-test-checkpoint.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    return pd_device_open("cpu", &dev) == PD_OK ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[512];
    (void)state;
    pd_device_close(dev);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in_tmp(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

/* ---- learning-rate schedules ------------------------------------------------ */

static void expect_lr(const pd_lr_schedule *s, int64_t step, int64_t total, double want)
{
    double got = pd_lr_schedule_at(s, step, total);
    if (fabs(got - want) > 1e-12 * fmax(1.0, fabs(want)))
        fail_msg("%s schedule, step %lld of %lld: got %.17g, want %.17g", pd_lr_kind_name(s->kind), (long long)step,
                 (long long)total, got, want);
}

static void test_lr_schedules(void **state)
{
    (void)state;
    pd_lr_schedule c = {.kind = PD_LR_CONSTANT, .lr = 0.3};
    assert_int_equal(pd_lr_schedule_check(&c), PD_OK);
    expect_lr(&c, 0, 10, 0.3);
    expect_lr(&c, 9, 10, 0.3);

    pd_lr_schedule st = {.kind = PD_LR_STEP, .lr = 0.1, .step_size = 10, .gamma = 0.5};
    assert_int_equal(pd_lr_schedule_check(&st), PD_OK);
    expect_lr(&st, 0, 100, 0.1);
    expect_lr(&st, 9, 100, 0.1);
    expect_lr(&st, 10, 100, 0.05);
    expect_lr(&st, 25, 100, 0.025);

    pd_lr_schedule poly = {.kind = PD_LR_POLY, .lr = 1.0, .power = 2.0};
    assert_int_equal(pd_lr_schedule_check(&poly), PD_OK);
    expect_lr(&poly, 0, 10, 1.0);
    expect_lr(&poly, 5, 10, 0.25);
    expect_lr(&poly, 9, 10, 0.01);
    expect_lr(&poly, 10, 10, 0.0);

    pd_lr_schedule cosine = {.kind = PD_LR_COSINE, .lr = 1.0};
    assert_int_equal(pd_lr_schedule_check(&cosine), PD_OK);
    expect_lr(&cosine, 0, 4, 1.0);
    expect_lr(&cosine, 1, 4, 0.85355339059327373); /* (1 + cos(pi/4)) / 2 */
    expect_lr(&cosine, 2, 4, 0.5);
    expect_lr(&cosine, 3, 4, 0.14644660940672624);
    expect_lr(&cosine, 4, 4, 0.0);

    /* Warm-up: lr*(s+1)/W, then the decay over the remaining steps. */
    pd_lr_schedule warm = {.kind = PD_LR_COSINE, .lr = 2.0, .warmup_steps = 4};
    expect_lr(&warm, 0, 8, 0.5);
    expect_lr(&warm, 1, 8, 1.0);
    expect_lr(&warm, 3, 8, 2.0);
    expect_lr(&warm, 4, 8, 2.0);
    expect_lr(&warm, 6, 8, 1.0);
    pd_lr_schedule warm_step = {.kind = PD_LR_STEP, .lr = 1.0, .warmup_steps = 2, .step_size = 3, .gamma = 0.1};
    expect_lr(&warm_step, 1, 20, 1.0);
    expect_lr(&warm_step, 4, 20, 1.0); /* t = 2 */
    expect_lr(&warm_step, 5, 20, 0.1); /* t = 3 */
    pd_lr_schedule warm_poly = {.kind = PD_LR_POLY, .lr = 1.0, .warmup_steps = 2, .power = 1.0};
    expect_lr(&warm_poly, 2, 6, 1.0);
    expect_lr(&warm_poly, 4, 6, 0.5);

    /* A pure function: the same value whatever was asked before. */
    assert_true(pd_lr_schedule_at(&cosine, 3, 4) == pd_lr_schedule_at(&cosine, 3, 4));

    pd_lr_kind kind;
    assert_int_equal(pd_lr_kind_parse("poly", &kind), PD_OK);
    assert_int_equal(kind, PD_LR_POLY);
    assert_int_equal(pd_lr_kind_parse("linear", &kind), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "linear"));

    pd_lr_schedule bad = st;
    bad.step_size = 0;
    assert_int_equal(pd_lr_schedule_check(&bad), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "step_size"));
    bad = st;
    bad.gamma = 0;
    assert_int_equal(pd_lr_schedule_check(&bad), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "gamma"));
    bad = poly;
    bad.power = 0;
    assert_int_equal(pd_lr_schedule_check(&bad), PD_EINVAL);
    bad = c;
    bad.lr = -1;
    assert_int_equal(pd_lr_schedule_check(&bad), PD_EINVAL);
    bad = c;
    bad.warmup_steps = -1;
    assert_int_equal(pd_lr_schedule_check(&bad), PD_EINVAL);
}

/* ---- a small model -------------------------------------------------------------- */

typedef struct net {
    pd_graph *g;
    pd_optimizer *opt;
    int images, labels, loss;
} net;

/* images [4,2,5,5] -> features.0 conv 3x3 (4) -> bn1 -> relu -> flatten ->
 * classifier linear (CLASSES or `classes`) -> loss. */
static void net_build(net *n, uint64_t seed, int classes, bool adam)
{
    const pd_conv2d_desc conv = {3, 3, 1, 1, 1, 1, 1, 1, 1};
    const pd_batchnorm_desc bn = {1e-5f, 0.1f};
    pd_shape image_shape = pd_shape_make(4, (int64_t)BATCH, (int64_t)2, (int64_t)5, (int64_t)5);
    pd_shape label_shape = pd_shape_make(1, (int64_t)BATCH);
    int x;

    assert_int_equal(pd_graph_create(dev, seed, &n->g), PD_OK);
    assert_int_equal(pd_graph_input(n->g, "images", PD_F32, &image_shape, false, &n->images), PD_OK);
    assert_int_equal(pd_graph_input(n->g, "labels", PD_I32, &label_shape, false, &n->labels), PD_OK);
    assert_int_equal(pd_graph_conv2d(n->g, "features.0", n->images, 4, &conv, true, &x), PD_OK);
    assert_int_equal(pd_graph_batchnorm(n->g, "bn1", x, &bn, &x), PD_OK);
    assert_int_equal(pd_graph_relu(n->g, "relu", x, &x), PD_OK);
    assert_int_equal(pd_graph_flatten(n->g, "flatten", x, &x), PD_OK);
    assert_int_equal(pd_graph_linear(n->g, "classifier", x, classes, true, &x), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(n->g, "loss", x, n->labels, &n->loss), PD_OK);
    assert_int_equal(pd_graph_allocate(n->g), PD_OK);
    if (adam) {
        const pd_adam_desc d = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f};
        assert_int_equal(pd_optimizer_create_adam(n->g, &d, &n->opt), PD_OK);
    } else {
        const pd_sgd_desc d = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f};
        assert_int_equal(pd_optimizer_create_sgd(n->g, &d, &n->opt), PD_OK);
    }
}

static void net_free(net *n)
{
    pd_optimizer_destroy(n->opt);
    pd_graph_destroy(n->g);
}

/* One training step on a minibatch drawn from `step`. */
static void net_step(net *n, int64_t step)
{
    float images[BATCH * 2 * 5 * 5];
    int32_t labels[BATCH];

    for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++)
        images[i] = (float)((i * 37 + (size_t)step * 11) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < BATCH; i++)
        labels[i] = (int32_t)((i + step) % CLASSES);
    pd_tensor *x = pd_graph_output(n->g, n->images), *y = pd_graph_output(n->g, n->labels);
    assert_int_equal(pd_tensor_copy_from_host(x, images, sizeof(images)), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(y, labels, sizeof(labels)), PD_OK);
    assert_int_equal(pd_graph_forward(n->g, step, true), PD_OK);
    assert_int_equal(pd_graph_backward(n->g, step, n->loss, NULL), PD_OK);
    assert_int_equal(pd_optimizer_step(n->opt), PD_OK);
}

static pd_checkpoint_state net_state(const net *n, int64_t step)
{
    pd_checkpoint_state st = {
        .model = "tiny",
        .model_options = {.batch = BATCH, .channels = 2, .height = 5, .width = 5, .classes = CLASSES,
                          .width_multiplier = 1.0f},
        .dataset = "synthetic",
        .seed = 7,
        .step = step,
        .total_steps = 10,
        .loader_epoch = step / 4,
        .loader_batch = step % 4,
        .lr_schedule = {.kind = PD_LR_COSINE, .lr = 0.1, .power = 1.0, .gamma = 0.1},
        .optimizer = pd_optimizer_get_kind(n->opt),
        .optimizer_steps = pd_optimizer_steps(n->opt),
    };
    pd_optimizer_get_sgd(n->opt, &st.sgd);
    pd_optimizer_get_adam(n->opt, &st.adam);
    return st;
}

/* All parameter and optimizer-state bytes of a net, concatenated. */
static unsigned char *net_bytes(net *n, size_t *size)
{
    pd_param **params;
    int n_params = pd_graph_params(n->g, &params);
    size_t total = 0, at = 0;
    unsigned char *buf;

    for (int i = 0; i < n_params; i++)
        total += pd_tensor_nbytes(&params[i]->value);
    for (int i = 0; i < pd_optimizer_state_count(n->opt); i++) {
        const char *kind;
        const pd_param *p;
        pd_tensor *t;
        assert_int_equal(pd_optimizer_state(n->opt, i, &kind, &p, &t), PD_OK);
        total += pd_tensor_nbytes(t);
    }
    buf = malloc(total);
    assert_non_null(buf);
    for (int i = 0; i < n_params; i++) {
        size_t b = pd_tensor_nbytes(&params[i]->value);
        assert_int_equal(pd_tensor_copy_to_host(&params[i]->value, buf + at, b), PD_OK);
        at += b;
    }
    for (int i = 0; i < pd_optimizer_state_count(n->opt); i++) {
        const char *kind;
        const pd_param *p;
        pd_tensor *t;
        assert_int_equal(pd_optimizer_state(n->opt, i, &kind, &p, &t), PD_OK);
        assert_int_equal(pd_tensor_copy_to_host(t, buf + at, pd_tensor_nbytes(t)), PD_OK);
        at += pd_tensor_nbytes(t);
    }
    *size = total;
    return buf;
}

static void expect_same_bytes(net *a, net *b, const char *what)
{
    size_t na, nb;
    unsigned char *x = net_bytes(a, &na), *y = net_bytes(b, &nb);
    assert_int_equal(na, nb);
    if (memcmp(x, y, na) != 0)
        fail_msg("%s: the two nets differ", what);
    free(x);
    free(y);
}

/* Saves after 3 steps, loads into a differently seeded net, and checks that
 * both continue identically for 3 more steps. */
static void round_trip(bool adam)
{
    char path[512];
    net a, b;
    pd_checkpoint_state saved, loaded, expected;
    pd_st_info info;
    pd_safetensors *file;

    path_in_tmp(path, sizeof(path), adam ? "adam.safetensors" : "sgd.safetensors");
    net_build(&a, 7, CLASSES, adam);
    net_build(&b, 99, CLASSES, adam);
    for (int s = 0; s < 3; s++)
        net_step(&a, s);
    saved = net_state(&a, 3);
    assert_int_equal(saved.optimizer_steps, 3);
    assert_int_equal(pd_checkpoint_save(path, a.g, a.opt, &saved), PD_OK);

    /* The file holds PyTorch names, the optimizer's prefixed ones and the metadata. */
    assert_int_equal(pd_safetensors_open(path, &file), PD_OK);
    assert_int_equal(pd_safetensors_find(file, "features.0.weight", &info), PD_OK);
    assert_int_equal(info.shape.ndim, 4);
    assert_int_equal(pd_safetensors_find(file, "bn1.running_mean", &info), PD_OK);
    assert_int_equal(pd_safetensors_find(file, "bn1.running_var", &info), PD_OK);
    assert_int_equal(pd_safetensors_find(file, "classifier.bias", &info), PD_OK);
    if (adam) {
        assert_int_equal(pd_safetensors_find(file, "optimizer.adam_m.features.0.weight", &info), PD_OK);
        assert_int_equal(pd_safetensors_find(file, "optimizer.adam_v.classifier.weight", &info), PD_OK);
        assert_int_equal(pd_safetensors_count(file), 8 + 2 * 6);
    } else {
        assert_int_equal(pd_safetensors_find(file, "optimizer.momentum.features.0.weight", &info), PD_OK);
        assert_int_equal(pd_safetensors_find(file, "optimizer.momentum.bn1.weight", &info), PD_OK);
        /* buffers have no optimizer state */
        assert_int_equal(pd_safetensors_find(file, "optimizer.momentum.bn1.running_mean", &info), PD_ENOTFOUND);
        assert_int_equal(pd_safetensors_count(file), 8 + 6);
    }
    assert_string_equal(pd_safetensors_metadata(file, "format"), "pipedream-checkpoint");
    assert_string_equal(pd_safetensors_metadata(file, "model"), "tiny");
    assert_non_null(strstr(pd_safetensors_metadata(file, "checksum"), "crc32:"));
    pd_safetensors_close(file);

    expected = net_state(&b, 3);
    expected.total_steps = 99; /* may differ */
    assert_int_equal(pd_checkpoint_load(path, &expected, b.g, b.opt, &loaded), PD_OK);
    assert_int_equal(pd_optimizer_steps(b.opt), 3);
    assert_int_equal(loaded.step, 3);
    assert_int_equal(loaded.total_steps, 10);
    assert_int_equal(loaded.loader_epoch, 0);
    assert_int_equal(loaded.loader_batch, 3);
    assert_int_equal(loaded.seed, 7);
    assert_string_equal(loaded.model, "tiny");
    assert_string_equal(loaded.dataset, "synthetic");
    assert_true(loaded.model_options.width_multiplier == 1.0f);
    assert_int_equal(loaded.lr_schedule.kind, PD_LR_COSINE);
    assert_true(loaded.lr_schedule.lr == 0.1);
    if (adam) {
        assert_true(loaded.adam.beta2 == 0.99f);
        assert_true(loaded.adam.weight_decay == 0.01f);
    } else {
        assert_true(loaded.sgd.momentum == 0.9f);
        assert_true(loaded.sgd.weight_decay == 1e-4f);
    }
    expect_same_bytes(&a, &b, "after loading");
    for (int s = 3; s < 6; s++) {
        net_step(&a, s);
        net_step(&b, s);
    }
    expect_same_bytes(&a, &b, "three steps after loading");

    /* read_state agrees with load. */
    pd_checkpoint_state only;
    assert_int_equal(pd_checkpoint_read_state(path, &only), PD_OK);
    assert_int_equal(only.step, 3);
    assert_int_equal(only.optimizer_steps, 3);
    net_free(&a);
    net_free(&b);
}

static void test_round_trip_sgd(void **state)
{
    (void)state;
    round_trip(false);
}

static void test_round_trip_adam(void **state)
{
    (void)state;
    round_trip(true);
}

/* ---- mismatches ----------------------------------------------------------------- */

static void expect_load_error(const char *path, const pd_checkpoint_state *expected, net *n, pd_status want,
                              const char *needle, const char *needle2)
{
    pd_error_clear();
    pd_status s = pd_checkpoint_load(path, expected, n->g, n->opt, NULL);
    if (s != want)
        fail_msg("loading %s: status %d, expected %d (%s)", path, s, want, pd_last_error());
    if (!strstr(pd_last_error(), needle) || (needle2 && !strstr(pd_last_error(), needle2)))
        fail_msg("loading %s: message \"%s\" does not name '%s'%s%s", path, pd_last_error(), needle,
                 needle2 ? " and " : "", needle2 ? needle2 : "");
}

static void test_mismatch(void **state)
{
    (void)state;
    char path[512];
    net a, b, wide, adam;
    pd_checkpoint_state expected;

    path_in_tmp(path, sizeof(path), "mismatch.safetensors");
    net_build(&a, 7, CLASSES, false);
    net_step(&a, 0);
    pd_checkpoint_state saved = net_state(&a, 1);
    assert_int_equal(pd_checkpoint_save(path, a.g, a.opt, &saved), PD_OK);
    net_build(&b, 8, CLASSES, false);
    size_t before_size;
    unsigned char *before = net_bytes(&b, &before_size);

    expected = saved;
    snprintf(expected.model, sizeof(expected.model), "mlp");
    expect_load_error(path, &expected, &b, PD_EINVAL, "model is 'tiny'", "'mlp'");
    expected = saved;
    expected.model_options.height = 6;
    expect_load_error(path, &expected, &b, PD_EINVAL, "input height is 5", "6");
    expected = saved;
    expected.model_options.width_multiplier = 0.5f;
    expect_load_error(path, &expected, &b, PD_EINVAL, "width multiplier", NULL);
    expected = saved;
    expected.seed = 8;
    expect_load_error(path, &expected, &b, PD_EINVAL, "seed is 7", NULL);
    expected = saved;
    expected.sgd.momentum = 0.5f;
    expect_load_error(path, &expected, &b, PD_EINVAL, "momentum", NULL);
    expected = saved;
    expected.lr_schedule.kind = PD_LR_STEP;
    expect_load_error(path, &expected, &b, PD_EINVAL, "lr schedule is 'cosine'", "'step'");
    expected = saved;
    snprintf(expected.dataset, sizeof(expected.dataset), "mnist");
    expect_load_error(path, &expected, &b, PD_EINVAL, "data set", "mnist");

    /* A graph whose classifier has another shape: the tensor is named. */
    net_build(&wide, 8, CLASSES + 1, false);
    expect_load_error(path, NULL, &wide, PD_EFORMAT, "classifier.weight", "[4,100]");
    /* Adam state expected, SGD's found. */
    net_build(&adam, 8, CLASSES, true);
    expect_load_error(path, NULL, &adam, PD_EINVAL, "optimizer is 'sgd'", "'adam'");

    /* No failed load changed b. */
    size_t after_size;
    unsigned char *after = net_bytes(&b, &after_size);
    assert_int_equal(before_size, after_size);
    assert_memory_equal(before, after, before_size);
    free(before);
    free(after);

    /* ... and the other way round. */
    assert_int_equal(pd_checkpoint_save(path, wide.g, NULL, &saved), PD_OK);
    expect_load_error(path, NULL, &b, PD_EFORMAT, "classifier.weight", NULL);

    /* Weights only: no optimizer given, its tensors are skipped. */
    assert_int_equal(pd_checkpoint_save(path, a.g, a.opt, &saved), PD_OK);
    assert_int_equal(pd_checkpoint_load(path, NULL, b.g, NULL, NULL), PD_OK);
    net_free(&adam);
    net_free(&wide);
    net_free(&b);
    net_free(&a);
}

/* ---- corruption ------------------------------------------------------------------ */

static void test_corruption(void **state)
{
    (void)state;
    char path[512], bad[512];
    net a, b;
    size_t size, before_size, after_size;

    path_in_tmp(path, sizeof(path), "good.safetensors");
    path_in_tmp(bad, sizeof(bad), "bad.safetensors");
    net_build(&a, 7, CLASSES, true);
    net_step(&a, 0);
    net_step(&a, 1);
    pd_checkpoint_state saved = net_state(&a, 2);
    assert_int_equal(pd_checkpoint_save(path, a.g, a.opt, &saved), PD_OK);
    unsigned char *good = test_read_file(path, &size);
    net_build(&b, 8, CLASSES, true);
    unsigned char *before = net_bytes(&b, &before_size);

    /* Truncated anywhere: header length, header, data, last byte. */
    const size_t cuts[] = {0, 4, 8, 9, 100, size / 2, size - 4, size - 1};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        test_write_file(bad, good, cuts[i]);
        pd_error_clear();
        if (pd_checkpoint_load(bad, NULL, b.g, b.opt, NULL) == PD_OK)
            fail_msg("a checkpoint truncated to %zu of %zu bytes loaded", cuts[i], size);
        assert_non_null(strstr(pd_last_error(), "bad.safetensors"));
        assert_null(strchr(pd_last_error(), '\n'));
    }

    /* Every byte of the file with one bit flipped (a different bit at each
     * position): every one is rejected with a message. */
    unsigned char *flipped = malloc(size);
    assert_non_null(flipped);
    int rejected = 0;
    for (size_t pos = 0; pos < size; pos++) {
        memcpy(flipped, good, size);
        flipped[pos] ^= (unsigned char)(1u << (pos % 8));
        test_write_file(bad, flipped, size);
        pd_error_clear();
        if (pd_checkpoint_load(bad, NULL, b.g, b.opt, NULL) == PD_OK)
            fail_msg("a checkpoint with bit %zu of byte %zu (of %zu) flipped loaded", pos % 8, pos, size);
        if (pd_last_error()[0] == '\0')
            fail_msg("flipping byte %zu: no message", pos);
        rejected++;
    }
    assert_int_equal((size_t)rejected, size);
    free(flipped);

    /* A flip in the data names the checksum. */
    memcpy(good + size - 3, (unsigned char[]){good[size - 3] ^ 0x10}, 1);
    test_write_file(bad, good, size);
    assert_int_not_equal(pd_checkpoint_load(bad, NULL, b.g, b.opt, NULL), PD_OK);
    assert_non_null(strstr(pd_last_error(), "checksum"));

    unsigned char *after = net_bytes(&b, &after_size);
    assert_memory_equal(before, after, before_size);
    assert_int_equal(pd_optimizer_steps(b.opt), 0);

    /* A safetensors file that is not a checkpoint. */
    const float x[2] = {1, 2};
    const pd_st_entry plain = {.name = "w", .dtype = PD_F32, .shape = pd_shape_make(1, (int64_t)2), .data = x};
    assert_int_equal(pd_safetensors_write(bad, &plain, 1, NULL, 0), PD_OK);
    assert_int_equal(pd_checkpoint_read_state(bad, &saved), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "not a pipedream checkpoint"));
    /* A missing file. */
    path_in_tmp(bad, sizeof(bad), "missing.safetensors");
    assert_int_not_equal(pd_checkpoint_read_state(bad, &saved), PD_OK);
    assert_non_null(strstr(pd_last_error(), "missing.safetensors"));

    free(before);
    free(after);
    free(good);
    net_free(&b);
    net_free(&a);
}

/* ---- the state's validation, through a file written with the documented checksum ---- */

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32), bit by bit: an
 * independent reference for the checksum the header documents. */
static uint32_t crc32_ref(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;

    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* crc32 over "format\0<v>\0format_version\0<v>\0model\0<v>\0state\0<v>\0", then
 * each tensor's name and '\0' and bytes, in name order. */
static void write_with_state(const char *path, const char *state_json)
{
    const float w[3] = {1.0f, -2.0f, 0.5f}, bias[1] = {0.25f};
    const char *values[4] = {"pipedream-checkpoint", "1", "tiny", state_json};
    const char *keys[4] = {"format", "format_version", "model", "state"};
    uint32_t crc = 0;
    char sum[32];

    for (int k = 0; k < 4; k++) {
        crc = crc32_ref(crc, keys[k], strlen(keys[k]) + 1);
        crc = crc32_ref(crc, values[k], strlen(values[k]) + 1);
    }
    crc = crc32_ref(crc, "b", 2);
    crc = crc32_ref(crc, bias, sizeof(bias));
    crc = crc32_ref(crc, "w", 2);
    crc = crc32_ref(crc, w, sizeof(w));
    snprintf(sum, sizeof(sum), "crc32:%08lx", (unsigned long)crc);
    const char *metadata[10] = {keys[0], values[0], keys[1], values[1], keys[2], values[2], keys[3], values[3],
                                "checksum", sum};
    const pd_st_entry entries[2] = {
        {.name = "w", .dtype = PD_F32, .shape = pd_shape_make(1, (int64_t)3), .data = w},
        {.name = "b", .dtype = PD_F32, .shape = pd_shape_make(1, (int64_t)1), .data = bias},
    };
    assert_int_equal(pd_safetensors_write(path, entries, 2, metadata, 5), PD_OK);
}

#define GOOD_MODEL "\"model\":{\"name\":\"tiny\",\"batch\":4,\"channels\":1,\"height\":2,\"width\":2,\"classes\":3," \
                   "\"width_multiplier\":1.0}"
#define GOOD_LR "\"lr_schedule\":{\"kind\":\"step\",\"lr\":0.1,\"warmup_steps\":0,\"step_size\":5,\"gamma\":0.5," \
                "\"power\":1.0}"
#define GOOD_OPT "\"optimizer\":{\"kind\":\"sgd\",\"steps\":3,\"momentum\":0.9,\"dampening\":0.0," \
                 "\"weight_decay\":0.0,\"nesterov\":false}"

static void expect_state_error(const char *state_json, const char *needle)
{
    char path[512];
    pd_checkpoint_state st;

    path_in_tmp(path, sizeof(path), "state.safetensors");
    write_with_state(path, state_json);
    pd_error_clear();
    if (pd_checkpoint_read_state(path, &st) != PD_EFORMAT || !strstr(pd_last_error(), needle))
        fail_msg("state %s: expected an error naming '%s', got \"%s\"", state_json, needle, pd_last_error());
}

static void test_state_validation(void **state)
{
    (void)state;
    char path[512];
    pd_checkpoint_state st;

    /* The reference checksum matches: a well-formed state reads back. */
    path_in_tmp(path, sizeof(path), "state.safetensors");
    write_with_state(path, "{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":3,\"total_steps\":9,"
                           "\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR "," GOOD_OPT "}");
    assert_int_equal(pd_checkpoint_read_state(path, &st), PD_OK);
    assert_int_equal(st.seed, 5);
    assert_int_equal(st.loader_epoch, 1);
    assert_int_equal(st.lr_schedule.step_size, 5);
    assert_true(st.lr_schedule.gamma == 0.5);
    assert_true(st.sgd.momentum == 0.9f);

    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":\"3\",\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR "," GOOD_OPT "}",
                       "state.step");
    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":-5,\"step\":3,\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR "," GOOD_OPT "}",
                       "state.seed");
    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":3,\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1}," GOOD_LR "," GOOD_OPT "}",
                       "loader");
    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":3,\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR "," GOOD_OPT ",\"extra\":1}",
                       "extra");
    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":3,\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1,\"batch\":0},"
                       "\"lr_schedule\":{\"kind\":\"step\",\"lr\":0.1,\"warmup_steps\":0,\"step_size\":0,"
                       "\"gamma\":0.5,\"power\":1.0}," GOOD_OPT "}",
                       "step_size");
    expect_state_error("{" GOOD_MODEL ",\"dataset\":\"mnist\",\"seed\":5,\"step\":3,\"total_steps\":9,"
                       "\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR ","
                       "\"optimizer\":{\"kind\":\"lamb\",\"steps\":3}}",
                       "lamb");
    expect_state_error("{\"model\":{\"name\":\"tiny\",\"batch\":0,\"channels\":1,\"height\":2,\"width\":2,"
                       "\"classes\":3,\"width_multiplier\":1.0},\"dataset\":\"mnist\",\"seed\":5,\"step\":3,"
                       "\"total_steps\":9,\"loader\":{\"epoch\":1,\"batch\":0}," GOOD_LR "," GOOD_OPT "}",
                       "model.batch");
    expect_state_error("[1,2]", "state");
    expect_state_error("{not json", "state");
}

/* ---- the directory index --------------------------------------------------------- */

static void test_index(void **state)
{
    (void)state;
    char dir[512], path[1024], index[1024], file1[1024];
    net a;

    path_in_tmp(dir, sizeof(dir), "ckpt");
    snprintf(index, sizeof(index), "%s/checkpoint.json", dir);
    net_build(&a, 7, CLASSES, false);

    /* No directory yet / no index in it. */
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_ENOTFOUND);
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "checkpoint.json"));

    net_step(&a, 0);
    pd_checkpoint_state st = net_state(&a, 1);
    assert_int_equal(pd_checkpoint_save_in_dir(dir, a.g, a.opt, &st, file1, sizeof(file1)), PD_OK);
    assert_non_null(strstr(file1, "step-00000001.safetensors"));
    net_step(&a, 1);
    st = net_state(&a, 2);
    assert_int_equal(pd_checkpoint_save_in_dir(dir, a.g, a.opt, &st, NULL, 0), PD_OK);
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_OK);
    assert_non_null(strstr(path, "/step-00000002.safetensors"));
    assert_int_equal(access(file1, R_OK), 0); /* older ones are kept */
    pd_checkpoint_state got;
    assert_int_equal(pd_checkpoint_read_state(path, &got), PD_OK);
    assert_int_equal(got.step, 2);

    /* A file path resolves to itself. */
    assert_int_equal(pd_checkpoint_resolve(file1, path, sizeof(path)), PD_OK);
    assert_string_equal(path, file1);

    /* The latest file truncated: the index's size disagrees. */
    char latest[1024];
    snprintf(latest, sizeof(latest), "%s/step-00000002.safetensors", dir);
    size_t size, other_size;
    unsigned char *bytes = test_read_file(latest, &size);
    test_write_file(latest, bytes, size - 10);
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "truncated"));
    /* ... replaced by another checkpoint of the same size: the checksum disagrees. */
    unsigned char *other = test_read_file(file1, &other_size);
    assert_int_equal(other_size, size);
    test_write_file(latest, other, other_size);
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "checksum"));
    test_write_file(latest, bytes, size);

    /* A malformed index names its field. */
    const char *escape = "{\"format\":\"pipedream-checkpoint-index\",\"format_version\":1,\"latest\":\"../x\","
                         "\"step\":2,\"size\":1,\"checksum\":\"crc32:0\"}";
    test_write_file(index, escape, strlen(escape));
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "latest"));
    const char *short_index = "{\"format\":\"pipedream-checkpoint-index\"}";
    test_write_file(index, short_index, strlen(short_index));
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "format_version"));
    test_write_file(index, "{", 1);
    assert_int_equal(pd_checkpoint_resolve(dir, path, sizeof(path)), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "checkpoint.json"));
    free(bytes);
    free(other);
    net_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_round_trip_sgd),
        cmocka_unit_test(test_round_trip_adam),
        cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_state_validation),
        cmocka_unit_test(test_index),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
