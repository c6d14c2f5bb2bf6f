/* The model zoo against torchvision: parameter counts, parameter names and
 * shapes (state_dict keys), intermediate shapes and multiply-adds at the
 * paper sizes (torchvision's published figures); per-layer FLOPs against hand
 * counts; input-size checks; and one training step of every model at a
 * small size with a finite loss and a gradient in every parameter. */
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
#include <time.h>

#include <pipedream.h>
#include <pipedream/models.h>

typedef struct zoo_case {
    const char *model;
    int channels, height, width, classes;
} zoo_case;

typedef struct built {
    pd_device *dev;
    pd_graph *g;
    pd_model_io io;
} built;

static pd_status build(const char *model, int batch, int channels, int side, int classes, float width_multiplier,
                       built *b)
{
    pd_model_options o = {batch, channels, side, side, classes, width_multiplier};

    assert_int_equal(pd_device_open("cpu", &b->dev), PD_OK);
    assert_int_equal(pd_graph_create(b->dev, 11, &b->g), PD_OK);
    return pd_model_build(model, b->g, &o, &b->io);
}

static void release(built *b)
{
    pd_graph_destroy(b->g);
    pd_device_close(b->dev);
}

static pd_param *param(built *b, const char *name)
{
    pd_param **params;
    int n = pd_graph_params(b->g, &params);

    for (int i = 0; i < n; i++)
        if (strcmp(params[i]->name, name) == 0)
            return params[i];
    return NULL;
}

/* The parameter exists with this shape and trainability. */
static void expect_param(built *b, const char *name, const char *shape, bool trainable)
{
    pd_param *p = param(b, name);
    char buf[96];

    if (!p)
        fail_msg("no parameter '%s'", name);
    assert_string_equal(pd_shape_format(&p->value.shape, buf, sizeof(buf)), shape);
    assert_int_equal(p->trainable, trainable);
}

static void expect_node_shape(built *b, const char *node, const char *shape)
{
    int id = pd_graph_find(b->g, node);
    char buf[96];

    if (id < 0)
        fail_msg("no node '%s'", node);
    assert_string_equal(pd_shape_format(pd_graph_node_shape(b->g, id), buf, sizeof(buf)), shape);
}

static int trainable_tensors(built *b)
{
    pd_param **params;
    int n = pd_graph_params(b->g, &params), count = 0;

    for (int i = 0; i < n; i++)
        count += params[i]->trainable;
    return count;
}

/* torchvision: sum(p.numel() for p in m.parameters()), len(list(m.parameters())),
 * len(m.state_dict()) less the num_batches_tracked entries. */
static void test_paper_parameter_counts(void **state)
{
    static const struct {
        zoo_case c;
        int64_t params;
        int tensors, entries;
    } cases[] = {
        {{"vgg16", 3, 224, 224, 1000}, 138357544, 32, 32},
        {{"alexnet", 3, 224, 224, 1000}, 61100840, 16, 16},
        {{"resnet50", 3, 224, 224, 1000}, 25557032, 161, 267},
        {{"inception_v3", 3, 299, 299, 1000}, 23834568, 284, 472},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        built b;
        pd_param **params;
        assert_int_equal(build(cases[i].c.model, 1, 3, cases[i].c.height, 1000, 1.0f, &b), PD_OK);
        if (pd_graph_param_count(b.g) != cases[i].params)
            fail_msg("%s: %lld parameters, torchvision has %lld", cases[i].c.model,
                     (long long)pd_graph_param_count(b.g), (long long)cases[i].params);
        assert_int_equal(trainable_tensors(&b), cases[i].tensors);
        assert_int_equal(pd_graph_params(b.g, &params), cases[i].entries);
        release(&b);
    }
}

static void test_small_model_counts(void **state)
{
    built b;

    assert_int_equal(build("lenet", 2, 1, 28, 10, 1.0f, &b), PD_OK);
    assert_int_equal(pd_graph_param_count(b.g), 61706);
    release(&b);

    /* 784-256-256-10 */
    assert_int_equal(build("mlp", 2, 1, 28, 10, 1.0f, &b), PD_OK);
    assert_int_equal(pd_graph_param_count(b.g), (784 * 256 + 256) + (256 * 256 + 256) + (256 * 10 + 10));
    assert_int_equal(pd_graph_param_count(b.g), 269322);
    expect_param(&b, "fc1.weight", "[256,784]", true);
    expect_param(&b, "fc3.bias", "[10]", true);
    release(&b);

    /* Half width: 3072-128-128-5. */
    assert_int_equal(build("mlp", 2, 3, 32, 5, 0.5f, &b), PD_OK);
    assert_int_equal(pd_graph_param_count(b.g), (3072 * 128 + 128) + (128 * 128 + 128) + (128 * 5 + 5));
    release(&b);

    /* VGG-16 at 1/8 width on 1x32x32: channels 8..64, a 1x1 map, classifier 512. */
    assert_int_equal(build("vgg16", 2, 1, 32, 10, 0.125f, &b), PD_OK);
    expect_param(&b, "features.0.weight", "[8,1,3,3]", true);
    expect_param(&b, "features.28.weight", "[64,64,3,3]", true);
    expect_param(&b, "classifier.0.weight", "[512,64]", true);
    expect_param(&b, "classifier.6.weight", "[10,512]", true);
    assert_int_equal(pd_graph_find(b.g, "avgpool"), -1);
    release(&b);
}

static void test_pytorch_names(void **state)
{
    built b;
    pd_param **params;
    int n;

    assert_int_equal(build("vgg16", 1, 3, 224, 1000, 1.0f, &b), PD_OK);
    n = pd_graph_params(b.g, &params);
    assert_string_equal(params[0]->name, "features.0.weight");
    assert_string_equal(params[n - 1]->name, "classifier.6.bias");
    expect_param(&b, "features.0.weight", "[64,3,3,3]", true);
    expect_param(&b, "features.0.bias", "[64]", true);
    expect_param(&b, "features.10.weight", "[256,128,3,3]", true);
    expect_param(&b, "features.28.weight", "[512,512,3,3]", true);
    expect_param(&b, "classifier.0.weight", "[4096,25088]", true);
    expect_param(&b, "classifier.3.weight", "[4096,4096]", true);
    expect_param(&b, "classifier.6.bias", "[1000]", true);
    release(&b);

    assert_int_equal(build("alexnet", 1, 3, 224, 1000, 1.0f, &b), PD_OK);
    expect_param(&b, "features.0.weight", "[64,3,11,11]", true);
    expect_param(&b, "features.3.weight", "[192,64,5,5]", true);
    expect_param(&b, "features.10.bias", "[256]", true);
    expect_param(&b, "classifier.1.weight", "[4096,9216]", true);
    expect_param(&b, "classifier.4.weight", "[4096,4096]", true);
    expect_param(&b, "classifier.6.weight", "[1000,4096]", true);
    release(&b);

    assert_int_equal(build("resnet50", 1, 3, 224, 1000, 1.0f, &b), PD_OK);
    n = pd_graph_params(b.g, &params);
    assert_string_equal(params[0]->name, "conv1.weight");
    assert_string_equal(params[n - 1]->name, "fc.bias");
    /* torchvision's state_dict order: the shortcut after bn3. */
    assert_string_equal(params[20]->name, "layer1.0.downsample.0.weight");
    expect_param(&b, "conv1.weight", "[64,3,7,7]", true);
    expect_param(&b, "bn1.running_mean", "[64]", false);
    expect_param(&b, "bn1.running_var", "[64]", false);
    expect_param(&b, "layer1.0.conv1.weight", "[64,64,1,1]", true);
    expect_param(&b, "layer1.0.downsample.0.weight", "[256,64,1,1]", true);
    expect_param(&b, "layer1.0.downsample.1.bias", "[256]", true);
    expect_param(&b, "layer2.0.conv2.weight", "[128,128,3,3]", true);
    expect_param(&b, "layer3.5.bn3.weight", "[1024]", true);
    expect_param(&b, "layer4.2.conv3.weight", "[2048,512,1,1]", true);
    expect_param(&b, "fc.weight", "[1000,2048]", true);
    assert_null(param(&b, "layer1.1.downsample.0.weight"));
    assert_null(param(&b, "conv1.bias"));
    assert_null(param(&b, "bn1.num_batches_tracked"));
    release(&b);

    assert_int_equal(build("inception_v3", 1, 3, 299, 1000, 1.0f, &b), PD_OK);
    n = pd_graph_params(b.g, &params);
    assert_string_equal(params[0]->name, "Conv2d_1a_3x3.conv.weight");
    assert_string_equal(params[n - 1]->name, "fc.bias");
    expect_param(&b, "Conv2d_1a_3x3.conv.weight", "[32,3,3,3]", true);
    expect_param(&b, "Conv2d_1a_3x3.bn.running_var", "[32]", false);
    expect_param(&b, "Mixed_5b.branch1x1.bn.weight", "[64]", true);
    expect_param(&b, "Mixed_5b.branch_pool.conv.weight", "[32,192,1,1]", true);
    expect_param(&b, "Mixed_6a.branch3x3.conv.weight", "[384,288,3,3]", true);
    expect_param(&b, "Mixed_6b.branch7x7_2.conv.weight", "[128,128,1,7]", true);
    expect_param(&b, "Mixed_6e.branch7x7dbl_4.conv.weight", "[192,192,7,1]", true);
    expect_param(&b, "Mixed_7a.branch3x3_2.conv.weight", "[320,192,3,3]", true);
    expect_param(&b, "Mixed_7c.branch3x3dbl_1.conv.weight", "[448,2048,1,1]", true);
    expect_param(&b, "Mixed_7c.branch3x3dbl_3b.conv.weight", "[384,384,3,1]", true);
    expect_param(&b, "fc.weight", "[1000,2048]", true);
    assert_null(param(&b, "Conv2d_1a_3x3.conv.bias"));
    assert_null(param(&b, "AuxLogits.fc.weight"));
    release(&b);
}

/* Feature-map shapes that torchvision's models produce at their paper sizes. */
static void test_paper_shapes(void **state)
{
    built b;

    assert_int_equal(build("vgg16", 2, 3, 224, 1000, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "features.30", "[2,512,7,7]");
    expect_node_shape(&b, "flatten", "[2,25088]");
    assert_int_equal(pd_graph_find(b.g, "avgpool"), -1); /* 7x7 already: identity */
    release(&b);

    assert_int_equal(build("alexnet", 2, 3, 224, 1000, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "features.0", "[2,64,55,55]");
    expect_node_shape(&b, "features.12", "[2,256,6,6]");
    release(&b);

    assert_int_equal(build("resnet50", 2, 3, 224, 1000, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "maxpool", "[2,64,56,56]");
    expect_node_shape(&b, "layer1.2.relu3", "[2,256,56,56]");
    expect_node_shape(&b, "layer2.0.conv2", "[2,128,28,28]");
    expect_node_shape(&b, "layer3.5.relu3", "[2,1024,14,14]");
    expect_node_shape(&b, "layer4.2.relu3", "[2,2048,7,7]");
    expect_node_shape(&b, "fc", "[2,1000]");
    release(&b);

    assert_int_equal(build("inception_v3", 2, 3, 299, 1000, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "maxpool2", "[2,192,35,35]");
    expect_node_shape(&b, "Mixed_5b.concat", "[2,256,35,35]");
    expect_node_shape(&b, "Mixed_5d.concat", "[2,288,35,35]");
    expect_node_shape(&b, "Mixed_6a.concat", "[2,768,17,17]");
    expect_node_shape(&b, "Mixed_6e.concat", "[2,768,17,17]");
    expect_node_shape(&b, "Mixed_7a.concat", "[2,1280,8,8]");
    expect_node_shape(&b, "Mixed_7c.concat", "[2,2048,8,8]");
    expect_node_shape(&b, "fc", "[2,1000]");
    release(&b);

    /* A 448x448 VGG-16 map is 14x14: a 2x2 average pool gives 7x7. */
    assert_int_equal(build("vgg16", 1, 3, 448, 1000, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "avgpool", "[1,512,7,7]");
    assert_string_equal(pd_graph_node_type(b.g, pd_graph_find(b.g, "avgpool")), "pool2d");
    assert_int_equal(pd_graph_param_count(b.g), 138357544);
    release(&b);
}

static void expect_shape_error(const char *model, int side, const char *fragment)
{
    built b;

    assert_int_equal(build(model, 1, 3, side, 10, 1.0f, &b), PD_ESHAPE);
    if (!strstr(pd_last_error(), fragment))
        fail_msg("%s at %d: '%s' lacks '%s'", model, side, pd_last_error(), fragment);
    release(&b);
}

static void test_input_sizes(void **state)
{
    expect_shape_error("vgg16", 28, "input 28x28 is too small; input sides that work: 32..255");
    expect_shape_error("vgg16", 300, "9x9 feature map");
    expect_shape_error("vgg16", 300, "224..255, 448..479, 672..703, ...");
    expect_shape_error("alexnet", 62, "input sides that work: 63..254");
    expect_shape_error("alexnet", 300, "8x8 feature map");
    expect_shape_error("inception_v3", 74, "smaller than the minimum 75x75");

    built b;
    assert_int_equal(build("alexnet", 1, 3, 63, 10, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "features.12", "[1,256,1,1]");
    release(&b);
    assert_int_equal(build("inception_v3", 1, 3, 75, 10, 1.0f, &b), PD_OK);
    expect_node_shape(&b, "Mixed_7c.concat", "[1,2048,1,1]");
    release(&b);
    assert_int_equal(build("resnet50", 1, 3, 1, 10, 1.0f, &b), PD_OK);
    release(&b);
}

/* One layer of each kind on hand-sized inputs. */
static void test_layer_flops(void **state)
{
    const pd_conv2d_desc conv = {3, 3, 1, 1, 1, 1, 1, 1, 1};
    const pd_conv2d_desc grouped = {3, 3, 1, 1, 0, 0, 1, 1, 2};
    const pd_pool2d_desc pool = {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false};
    const pd_pool2d_desc global = {PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, true};
    const pd_batchnorm_desc bn = {1e-5f, 0.1f};
    const pd_lrn_desc lrn = {5, 1e-4f, 0.75f, 2.0f};
    pd_shape image = pd_shape_make(4, (int64_t)2, (int64_t)3, (int64_t)10, (int64_t)10);
    pd_shape four = pd_shape_make(4, (int64_t)1, (int64_t)4, (int64_t)5, (int64_t)5);
    pd_shape labels = pd_shape_make(1, (int64_t)2);
    pd_shape seq = pd_shape_make(3, (int64_t)2, (int64_t)3, (int64_t)4);
    pd_shape ids = pd_shape_make(2, (int64_t)2, (int64_t)3);
    pd_device *dev;
    pd_graph *g;
    int x, y, c, p, gp, f, l, r, a, d, bnode, ln, cat, sce, x4, gc, s, lstm, id, emb;

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_graph_create(dev, 1, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &image, false, &x), PD_OK);
    assert_int_equal(pd_graph_input(g, "y", PD_I32, &labels, false, &y), PD_OK);
    assert_int_equal(pd_graph_conv2d(g, "conv", x, 8, &conv, true, &c), PD_OK);
    assert_int_equal(pd_graph_pool2d(g, "pool", c, &pool, &p), PD_OK);
    assert_int_equal(pd_graph_pool2d(g, "gap", c, &global, &gp), PD_OK);
    assert_int_equal(pd_graph_batchnorm(g, "bn", c, &bn, &bnode), PD_OK);
    assert_int_equal(pd_graph_lrn(g, "lrn", c, &lrn, &ln), PD_OK);
    assert_int_equal(pd_graph_relu(g, "relu", c, &r), PD_OK);
    assert_int_equal(pd_graph_add(g, "add", c, r, &a), PD_OK);
    assert_int_equal(pd_graph_dropout(g, "drop", a, 0.5f, &d), PD_OK);
    const int both[2] = {c, r};
    assert_int_equal(pd_graph_concat(g, "cat", 2, both, 1, &cat), PD_OK);
    assert_int_equal(pd_graph_flatten(g, "flat", p, &f), PD_OK);
    assert_int_equal(pd_graph_linear(g, "fc", f, 7, true, &l), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", l, y, &sce), PD_OK);
    assert_int_equal(pd_graph_input(g, "x4", PD_F32, &four, false, &x4), PD_OK);
    assert_int_equal(pd_graph_conv2d(g, "gconv", x4, 6, &grouped, false, &gc), PD_OK);
    assert_int_equal(pd_graph_input(g, "seq", PD_F32, &seq, false, &s), PD_OK);
    assert_int_equal(pd_graph_lstm(g, "lstm", s, 5, &lstm), PD_OK);
    assert_int_equal(pd_graph_input(g, "ids", PD_I32, &ids, false, &id), PD_OK);
    assert_int_equal(pd_graph_embedding(g, "emb", id, 11, 4, &emb), PD_OK);

    /* conv: 2x8x10x10 outputs, 3x3x3 multiply-adds each, plus the bias. */
    assert_int_equal(pd_graph_node_flops(g, c), 1600 * (2 * 27 + 1));
    assert_int_equal(pd_graph_node_param_count(g, c), 8 * 27 + 8);
    assert_int_equal(pd_graph_node_activation_bytes(g, c), 1600 * 4);
    /* grouped, no bias: 1x6x3x3 outputs, 2 input channels x 3x3 each. */
    assert_int_equal(pd_graph_node_flops(g, gc), 54 * 2 * 18);
    /* pooling: one operation per window element of every output. */
    assert_int_equal(pd_graph_node_flops(g, p), 2 * 8 * 5 * 5 * 4);
    assert_int_equal(pd_graph_node_flops(g, gp), 2 * 8 * 100);
    assert_int_equal(pd_graph_node_flops(g, bnode), 2 * 1600);
    assert_int_equal(pd_graph_node_param_count(g, bnode), 16); /* running statistics are buffers */
    assert_int_equal(pd_graph_node_flops(g, ln), 1600 * (5 + 5));
    assert_int_equal(pd_graph_node_flops(g, r), 1600);
    assert_int_equal(pd_graph_node_flops(g, a), 1600);
    assert_int_equal(pd_graph_node_flops(g, d), 1600);
    assert_int_equal(pd_graph_node_flops(g, cat), 0);
    assert_int_equal(pd_graph_node_activation_bytes(g, cat), 3200 * 4);
    assert_int_equal(pd_graph_node_flops(g, f), 0);
    assert_int_equal(pd_graph_node_activation_bytes(g, f), 400 * 4); /* a view still carries its bytes */
    /* linear: 2x7 outputs of 200 multiply-adds plus the bias. */
    assert_int_equal(pd_graph_node_flops(g, l), 14 * (2 * 200 + 1));
    assert_int_equal(pd_graph_node_flops(g, sce), 4 * 14);
    assert_int_equal(pd_graph_node_flops(g, x), 0);
    assert_int_equal(pd_graph_node_activation_bytes(g, y), 2 * 4);
    assert_int_equal(pd_graph_node_dtype(g, y), PD_I32);
    /* LSTM, N=2 T=3 I=4 H=5: per sample 3 x (8*5*4 + 13*5) + 2 x 8*5*5. */
    assert_int_equal(pd_graph_node_flops(g, lstm), 2 * (3 * (160 + 65) + 2 * 200));
    assert_int_equal(pd_graph_node_param_count(g, lstm), 4 * 5 * 4 + 4 * 5 * 5 + 2 * 4 * 5);
    assert_int_equal(pd_graph_node_flops(g, emb), 0);
    pd_graph_destroy(g);
    pd_device_close(dev);
}

/* torchvision's documented GFLOPS are convolution and linear multiply-adds:
 * VGG-16 15.47, AlexNet 0.71, ResNet-50 4.09, Inception-v3 5.71 (at 299). */
static void test_paper_flops(void **state)
{
    static const struct {
        const char *model;
        int side;
        double gmacs;
    } cases[] = {{"vgg16", 224, 15.47}, {"alexnet", 224, 0.71}, {"resnet50", 224, 4.09}, {"inception_v3", 299, 5.71}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        built b;
        int64_t flops = 0, bias_adds = 0, total = 0, params = 0;
        assert_int_equal(build(cases[i].model, 2, 3, cases[i].side, 1000, 1.0f, &b), PD_OK);
        for (int k = 0; k < pd_graph_size(b.g); k++) {
            const char *type = pd_graph_node_type(b.g, k);
            char bias[128];
            total += pd_graph_node_flops(b.g, k);
            params += pd_graph_node_param_count(b.g, k);
            if (strcmp(type, "conv2d") != 0 && strcmp(type, "linear") != 0)
                continue;
            flops += pd_graph_node_flops(b.g, k);
            snprintf(bias, sizeof(bias), "%s.bias", pd_graph_node_name(b.g, k));
            if (param(&b, bias))
                bias_adds += pd_shape_numel(pd_graph_node_shape(b.g, k));
        }
        double gmacs = (double)(flops - bias_adds) / 2 / 2 / 1e9; /* per sample of the batch of 2 */
        printf("# %s: %.4f GMACs per sample (torchvision %.2f), %.3f GFLOPs in all\n", cases[i].model, gmacs,
               cases[i].gmacs, (double)total / 2 / 1e9);
        assert_true(fabs(gmacs - cases[i].gmacs) < 0.005);
        assert_true(total > flops && total < flops + flops / 50); /* the rest is element-wise */
        assert_int_equal(params, pd_graph_param_count(b.g));
        release(&b);
    }
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every trainable parameter's gradient is finite and somewhere non-zero. */
static void expect_gradients(built *b, const char *model)
{
    pd_param **params;
    int n = pd_graph_params(b->g, &params);

    for (int i = 0; i < n; i++) {
        if (!params[i]->trainable)
            continue;
        size_t count = (size_t)pd_tensor_numel(&params[i]->grad);
        float *grad = malloc(count * sizeof(float));
        bool nonzero = false;
        assert_non_null(grad);
        assert_int_equal(pd_tensor_copy_to_host(&params[i]->grad, grad, count * sizeof(float)), PD_OK);
        for (size_t j = 0; j < count; j++) {
            if (!isfinite(grad[j]))
                fail_msg("%s: gradient of %s[%zu] is %g", model, params[i]->name, j, (double)grad[j]);
            nonzero = nonzero || grad[j] != 0.0f;
        }
        free(grad);
        if (!nonzero)
            fail_msg("%s: the gradient of %s is zero everywhere", model, params[i]->name);
    }
}

static void test_small_training_step(void **state)
{
    static const struct {
        zoo_case c;
        float width;
    } cases[] = {
        {{"mlp", 1, 28, 28, 10}, 1.0f},         {{"vgg16", 1, 32, 32, 10}, 0.125f},
        {{"alexnet", 3, 64, 64, 10}, 0.125f},   {{"resnet50", 3, 32, 32, 10}, 0.125f},
        {{"inception_v3", 3, 75, 75, 10}, 0.125f},
    };
    const int batch = 2;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const zoo_case *c = &cases[i].c;
        size_t pixels = (size_t)batch * (size_t)(c->channels * c->height * c->width);
        float *images = malloc(pixels * sizeof(float));
        int32_t labels[2] = {3, 7};
        float loss;
        built b;

        assert_non_null(images);
        for (size_t j = 0; j < pixels; j++)
            images[j] = (float)((j * 2654435761u) % 1000) / 500.0f - 1.0f;
        assert_int_equal(build(c->model, batch, c->channels, c->height, c->classes, cases[i].width, &b), PD_OK);
        assert_int_equal(pd_graph_allocate(b.g), PD_OK);
        assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(b.g, b.io.images), images, pixels * sizeof(float)),
                         PD_OK);
        assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(b.g, b.io.labels), labels, sizeof(labels)), PD_OK);
        double start = seconds();
        assert_int_equal(pd_graph_forward(b.g, 0, true), PD_OK);
        /* The loss's memory is reused by gradients once the backward pass starts. */
        assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(b.g, b.io.loss), &loss, sizeof(loss)), PD_OK);
        assert_int_equal(pd_graph_backward(b.g, 0, b.io.loss, NULL), PD_OK);
        double elapsed = seconds() - start;
        printf("# %s %dx%dx%dx%d width %g: loss %.4f, forward+backward %.1f ms, %lld parameters\n", c->model, batch,
               c->channels, c->height, c->width, (double)cases[i].width, (double)loss, 1e3 * elapsed,
               (long long)pd_graph_param_count(b.g));
        assert_true(isfinite(loss) && loss > 0.0f && loss < 50.0f);
        expect_gradients(&b, c->model);
        release(&b);
        free(images);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_parameter_counts), cmocka_unit_test(test_small_model_counts),
        cmocka_unit_test(test_pytorch_names),          cmocka_unit_test(test_paper_shapes),
        cmocka_unit_test(test_input_sizes),            cmocka_unit_test(test_layer_flops),
        cmocka_unit_test(test_paper_flops),            cmocka_unit_test(test_small_training_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
