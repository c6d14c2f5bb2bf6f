/* The model registry and LeNet-5: names, parameter names and counts (hand
 * computed from the layer sizes), node shapes, and the option checks. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <pipedream.h>
#include <pipedream/models.h>

static pd_graph *new_graph(pd_device **dev)
{
    pd_graph *g;
    assert_int_equal(pd_device_open("cpu", dev), PD_OK);
    assert_int_equal(pd_graph_create(*dev, 1, &g), PD_OK);
    return g;
}

static void test_registry(void **state)
{
    int n = 0;
    for (; pd_model_name(n); n++)
        assert_non_null(pd_model_description(pd_model_name(n)));
    assert_true(n >= 1);
    assert_null(pd_model_name(-1));
    assert_string_equal(pd_model_name(0), "lenet");
    assert_null(pd_model_description("lenet5000"));

    pd_device *dev;
    pd_graph *g = new_graph(&dev);
    pd_model_options o = {.batch = 2, .channels = 1, .height = 28, .width = 28, .classes = 10, .width_multiplier = 1};
    pd_model_io io;
    assert_int_equal(pd_model_build("lenet5000", g, &o, &io), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "unknown model 'lenet5000' (known: lenet"));
    o.classes = 1;
    assert_int_equal(pd_model_build("lenet", g, &o, &io), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "classes"));
    o.classes = 10;
    o.width_multiplier = 0;
    assert_int_equal(pd_model_build("lenet", g, &o, &io), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "width multiplier"));
    pd_graph_destroy(g);
    pd_device_close(dev);
}

static void test_lenet_shapes_and_parameters(void **state)
{
    static const char *const names[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                        "fc1.bias",     "fc2.weight", "fc2.bias",     "fc3.weight", "fc3.bias"};
    static const int64_t numel[] = {6 * 25, 6, 16 * 6 * 25, 16, 120 * 400, 120, 84 * 120, 84, 10 * 84, 10};
    pd_device *dev;
    pd_graph *g = new_graph(&dev);
    pd_model_options o = {.batch = 3, .channels = 1, .height = 28, .width = 28, .classes = 10, .width_multiplier = 1};
    pd_model_io io;
    pd_param **params;
    char buf[64];

    assert_int_equal(pd_model_build("lenet", g, &o, &io), PD_OK);
    assert_int_equal(pd_graph_param_count(g), 61706);
    assert_int_equal(pd_graph_params(g, &params), 10);
    for (int i = 0; i < 10; i++) {
        assert_string_equal(params[i]->name, names[i]);
        assert_int_equal(pd_shape_numel(&params[i]->value.shape), numel[i]);
    }
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.images), buf, sizeof(buf)), "[3,1,28,28]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.labels), buf, sizeof(buf)), "[3]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.logits), buf, sizeof(buf)), "[3,10]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.loss), buf, sizeof(buf)), "[1]");
    assert_int_equal(pd_graph_find(g, "images"), io.images);
    assert_int_equal(pd_graph_find(g, "labels"), io.labels);
    assert_int_equal(pd_graph_find(g, "loss"), io.loss);
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, pd_graph_find(g, "pool2")), buf, sizeof(buf)),
                        "[3,16,5,5]");
    pd_graph_destroy(g);
    pd_device_close(dev);

    /* Half width: 3, 8, 60, 42 channels/features. */
    g = new_graph(&dev);
    o.width_multiplier = 0.5f;
    assert_int_equal(pd_model_build("lenet", g, &o, &io), PD_OK);
    assert_int_equal(pd_graph_param_count(g), (3 * 25 + 3) + (8 * 3 * 25 + 8) + (60 * 200 + 60) + (42 * 60 + 42) +
                                                  (10 * 42 + 10));
    pd_graph_destroy(g);
    pd_device_close(dev);

    /* An input too small for the second convolution is a named shape error. */
    g = new_graph(&dev);
    o.height = o.width = 8;
    assert_int_equal(pd_model_build("lenet", g, &o, &io), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "conv2"));
    pd_graph_destroy(g);
    pd_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_lenet_shapes_and_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
