/* The graph: construction errors, topology queries, memory planning and the
 * states in which passes may run. Gradients are checked in test_backend_ops. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

typedef struct fixture {
    pd_device *dev;
    pd_graph *g;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (pd_device_open("cpu", &f->dev) != PD_OK || pd_graph_create(f->dev, 7, &f->g) != PD_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pd_graph_destroy(f->g);
    pd_device_close(f->dev);
    free(f);
    return 0;
}

static void test_bad_construction_is_named(void **state)
{
    fixture *f = *state;
    pd_shape a = pd_shape_make(2, (int64_t)2, (int64_t)3), b = pd_shape_make(2, (int64_t)2, (int64_t)4);
    int x, y, z;

    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &a, true, &x), PD_OK);
    assert_int_equal(pd_graph_input(f->g, "y", PD_F32, &b, true, &y), PD_OK);
    assert_int_equal(pd_graph_add(f->g, "sum", x, y, &z), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "layer 'sum' (add): input shapes differ: [2,3] and [2,4]"));
    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &a, false, &z), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "'x' exists already"));
    assert_int_equal(pd_graph_relu(f->g, "r", 17, &z), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "node 17, which does not exist"));
    pd_shape bad = pd_shape_make(2, (int64_t)0, (int64_t)3);
    assert_int_equal(pd_graph_input(f->g, "empty", PD_F32, &bad, false, &z), PD_ESHAPE);
    assert_int_equal(pd_graph_input(f->g, "labels", PD_I32, &a, true, &z), PD_ESHAPE);
    /* Failed additions leave no trace. */
    assert_int_equal(pd_graph_size(f->g), 2);
    assert_int_equal(pd_graph_find(f->g, "sum"), -1);
    assert_int_equal(pd_graph_find(f->g, "y"), y);
}

static void test_chain_plans_less_memory_than_it_holds(void **state)
{
    fixture *f = *state;
    pd_shape shape = pd_shape_make(2, (int64_t)16, (int64_t)256);
    int x, node;
    char name[16];

    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &shape, true, &x), PD_OK);
    node = x;
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "relu%d", i);
        assert_int_equal(pd_graph_relu(f->g, name, node, &node), PD_OK);
    }
    assert_int_equal(pd_graph_allocate(f->g), PD_OK);
    /* 13 activations must all live (training), but only two gradients at a time. */
    size_t tensor = 16 * 256 * sizeof(float);
    assert_true(pd_graph_arena_bytes(f->g) < pd_graph_unplanned_bytes(f->g));
    assert_int_equal(pd_graph_unplanned_bytes(f->g), 26 * tensor);
    assert_true(pd_graph_arena_bytes(f->g) <= 15 * tensor);
    assert_int_equal(pd_graph_relu(f->g, "late", node, &node), PD_ESTATE);
    assert_int_equal(pd_graph_allocate(f->g), PD_ESTATE);
}

static void test_pass_states(void **state)
{
    fixture *f = *state;
    pd_shape shape = pd_shape_make(2, (int64_t)2, (int64_t)3);
    int x, labels, r;

    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &shape, false, &x), PD_OK);
    assert_int_equal(pd_graph_input(f->g, "labels", PD_I32, &shape, false, &labels), PD_OK);
    assert_int_equal(pd_graph_relu(f->g, "r", x, &r), PD_OK);
    assert_int_equal(pd_graph_forward(f->g, 0, true), PD_ESTATE); /* not allocated */
    assert_int_equal(pd_graph_allocate(f->g), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 0, r, NULL), PD_ESTATE); /* no forward yet */
    assert_int_equal(pd_graph_forward(f->g, 3, true), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 4, r, NULL), PD_ESTATE); /* another minibatch */
    /* Nothing before r is trainable or requires a gradient. */
    assert_int_equal(pd_graph_backward(f->g, 3, r, NULL), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "no gradient flows through 'r'"));
    assert_int_equal(pd_graph_forward(f->g, 5, false), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 5, r, NULL), PD_ESTATE); /* inference pass */
}

static void test_seed_must_fit(void **state)
{
    fixture *f = *state;
    pd_shape shape = pd_shape_make(2, (int64_t)2, (int64_t)3);
    pd_shape wrong = pd_shape_make(2, (int64_t)3, (int64_t)2);
    pd_tensor *seed;
    int x, r;

    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &shape, true, &x), PD_OK);
    assert_int_equal(pd_graph_relu(f->g, "r", x, &r), PD_OK);
    assert_int_equal(pd_graph_allocate(f->g), PD_OK);
    assert_int_equal(pd_graph_forward(f->g, 1, true), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 1, r, NULL), PD_EINVAL); /* non-scalar needs a seed */
    assert_int_equal(pd_tensor_create_zero(f->dev, PD_F32, &wrong, &seed), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 1, r, seed), PD_ESHAPE);
    pd_tensor_destroy(seed);
}

/* Inputs and outputs stay readable after the backward pass has reused the
 * memory of everything in between (the loss, the logits of a stage). */
static void test_inputs_and_outputs_survive_backward(void **state)
{
    fixture *f = *state;
    pd_shape shape = pd_shape_make(2, (int64_t)4, (int64_t)64);
    pd_tensor *seed;
    int x, node;
    float in[256], out_before[256], out_after[256], back[256];
    char name[16];

    assert_int_equal(pd_graph_input(f->g, "x", PD_F32, &shape, true, &x), PD_OK);
    node = x;
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "relu%d", i);
        assert_int_equal(pd_graph_relu(f->g, name, node, &node), PD_OK);
    }
    assert_int_equal(pd_graph_allocate(f->g), PD_OK);
    for (int i = 0; i < 256; i++)
        in[i] = (float)((i * 37) % 11) - 5.0f;
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(f->g, x), in, sizeof(in)), PD_OK);
    assert_int_equal(pd_tensor_create(f->dev, PD_F32, &shape, &seed), PD_OK);
    for (int i = 0; i < 256; i++)
        back[i] = 1000.0f + (float)i; /* gradients unlike any activation */
    assert_int_equal(pd_tensor_copy_from_host(seed, back, sizeof(back)), PD_OK);
    assert_int_equal(pd_graph_forward(f->g, 1, true), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(f->g, node), out_before, sizeof(out_before)), PD_OK);
    assert_int_equal(pd_graph_backward(f->g, 1, node, seed), PD_OK);
    assert_non_null(pd_graph_grad(f->g, x));
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(f->g, node), out_after, sizeof(out_after)), PD_OK);
    assert_memory_equal(out_before, out_after, sizeof(out_before));
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(f->g, x), back, sizeof(back)), PD_OK);
    assert_memory_equal(in, back, sizeof(in));
    pd_tensor_destroy(seed);
}

static void test_print_lists_every_node(void **state)
{
    fixture *f = *state;
    pd_shape shape = pd_shape_make(4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)4);
    int x, r, flat;
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);

    assert_int_equal(pd_graph_input(f->g, "image", PD_F32, &shape, false, &x), PD_OK);
    assert_int_equal(pd_graph_relu(f->g, "act", x, &r), PD_OK);
    assert_int_equal(pd_graph_flatten(f->g, "flat", r, &flat), PD_OK);
    assert_string_equal(pd_graph_node_type(f->g, flat), "flatten");
    assert_int_equal(pd_graph_node_shape(f->g, flat)->dim[1], 48);
    pd_graph_print(f->g, mem);
    fclose(mem);
    assert_non_null(strstr(text, "image"));
    assert_non_null(strstr(text, "[2,48]"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bad_construction_is_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_plans_less_memory_than_it_holds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pass_states, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seed_must_fit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inputs_and_outputs_survive_backward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_lists_every_node, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
