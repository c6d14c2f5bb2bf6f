/* Allocating part of a graph (a pipeline stage's): memory only for the
 * part's nodes and the tensors it receives or forwards, parameters equal to
 * the whole graph's for the same seed, passes bit for bit the whole graph's
 * when the parts are chained, and a clear refusal for a node outside. */
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

#define SEED 7
#define BATCH 4
#define CLASSES 5
#define N_PARTS 3
#define MAX_NODES 16

/* The test model and its split into three parts (a 3-stage pipeline):
 *   A: conv1 bn1 relu1 flat       (flat is a view of relu1 and crosses the cut)
 *   B: fc1 drop relu2 fc2         (relu2 is read by fc2 and, past the cut, by add)
 *   C: add fc3 loss               (labels travel from the inputs through B) */
typedef struct model {
    pd_graph *g;
    int images, labels, conv1, bn1, relu1, flat, fc1, drop, relu2, fc2, add, fc3, loss;
    int owner[MAX_NODES]; /* the part of every node; inputs: A */
} model;

static void build(pd_device *dev, model *m)
{
    const pd_shape image = pd_shape_make(4, (int64_t)BATCH, (int64_t)2, (int64_t)6, (int64_t)6);
    const pd_shape label = pd_shape_make(1, (int64_t)BATCH);
    const pd_conv2d_desc conv = {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1,
                                 .dilation_h = 1, .dilation_w = 1, .groups = 1};
    const pd_batchnorm_desc bn = {1e-5f, 0.1f};
    pd_graph *g;

    assert_int_equal(pd_graph_create(dev, SEED, &g), PD_OK);
    m->g = g;
    assert_int_equal(pd_graph_input(g, "images", PD_F32, &image, false, &m->images), PD_OK);
    assert_int_equal(pd_graph_input(g, "labels", PD_I32, &label, false, &m->labels), PD_OK);
    assert_int_equal(pd_graph_conv2d(g, "conv1", m->images, 3, &conv, true, &m->conv1), PD_OK);
    assert_int_equal(pd_graph_batchnorm(g, "bn1", m->conv1, &bn, &m->bn1), PD_OK);
    assert_int_equal(pd_graph_relu(g, "relu1", m->bn1, &m->relu1), PD_OK);
    assert_int_equal(pd_graph_flatten(g, "flat", m->relu1, &m->flat), PD_OK);
    assert_int_equal(pd_graph_linear(g, "fc1", m->flat, 16, true, &m->fc1), PD_OK);
    assert_int_equal(pd_graph_dropout(g, "drop", m->fc1, 0.25f, &m->drop), PD_OK);
    assert_int_equal(pd_graph_relu(g, "relu2", m->drop, &m->relu2), PD_OK);
    assert_int_equal(pd_graph_linear(g, "fc2", m->relu2, 16, true, &m->fc2), PD_OK);
    assert_int_equal(pd_graph_add(g, "add", m->relu2, m->fc2, &m->add), PD_OK);
    assert_int_equal(pd_graph_linear(g, "fc3", m->add, CLASSES, true, &m->fc3), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", m->fc3, m->labels, &m->loss), PD_OK);
    assert_true(pd_graph_size(g) <= MAX_NODES);
    for (int k = 0; k < pd_graph_size(g); k++)
        m->owner[k] = k <= m->flat ? 0 : k <= m->fc2 ? 1 : 2;
}

/* Part `p`'s nodes (increasing, inputs excluded), and what it runs and
 * holds: the tensors crossing the cuts before and after it. */
static int part_nodes(const model *m, int p, int *nodes, bool *run, bool *hold)
{
    const int n = pd_graph_size(m->g);
    int count = 0;

    memset(run, 0, sizeof(bool) * (size_t)n);
    memset(hold, 0, sizeof(bool) * (size_t)n);
    for (int k = 0; k < n; k++) {
        const int *in;
        int n_in = pd_graph_node_inputs(m->g, k, &in);
        if (m->owner[k] == p && n_in > 0) {
            nodes[count++] = k;
            run[k] = true;
        }
        for (int i = 0; i < n_in; i++)
            if (m->owner[in[i]] < m->owner[k] && (m->owner[k] >= p && m->owner[in[i]] <= p))
                hold[in[i]] = true; /* crosses a cut at or after p-1 .. p */
    }
    if (p == 0)
        hold[m->images] = hold[m->labels] = true;
    return count;
}

static void fill_inputs(model *m)
{
    float images[BATCH * 2 * 6 * 6];
    int32_t labels[BATCH];

    for (size_t i = 0; i < sizeof(images) / sizeof(images[0]); i++)
        images[i] = (float)((int)((i * 7919) % 23) - 11) / 7.0f;
    for (int i = 0; i < BATCH; i++)
        labels[i] = (i * 3) % CLASSES;
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(m->g, m->images), images, sizeof(images)), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(m->g, m->labels), labels, sizeof(labels)), PD_OK);
}

/* Copies a tensor's bytes to a new host buffer. */
static void *host_copy(const pd_tensor *t)
{
    void *buf = malloc(pd_tensor_nbytes(t));
    assert_non_null(buf);
    assert_int_equal(pd_tensor_copy_to_host(t, buf, pd_tensor_nbytes(t)), PD_OK);
    return buf;
}

/* Bit for bit; `what` names the tensor when they differ. */
static void assert_same_tensor(const pd_tensor *a, const pd_tensor *b, const char *what)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(pd_tensor_nbytes(a), pd_tensor_nbytes(b));
    void *x = host_copy(a), *y = host_copy(b);
    if (memcmp(x, y, pd_tensor_nbytes(a)) != 0)
        print_message("%s differs\n", what);
    assert_memory_equal(x, y, pd_tensor_nbytes(a));
    free(x);
    free(y);
}

static int setup(void **state)
{
    pd_device *dev;
    if (pd_device_open("cpu", &dev) != PD_OK)
        return -1;
    *state = dev;
    return 0;
}

static int teardown(void **state)
{
    pd_device_close(*state);
    return 0;
}

/* Part B (the middle stage) holds its nodes, the tensors it receives (flat,
 * a view upstream, and the labels) and those it forwards; its parameters
 * only; and exactly the bytes its blocks and parameters add up to. */
static void test_part_allocates_only_its_nodes(void **state)
{
    model whole, part;
    bool run[MAX_NODES], hold[MAX_NODES];
    int nodes[MAX_NODES];
    size_t planned_part, planned_whole;
    pd_param **params;

    build(*state, &whole);
    build(*state, &part);
    part_nodes(&part, 1, nodes, run, hold);
    assert_true(hold[part.flat] && hold[part.labels] && hold[part.relu2] && hold[part.fc2]);
    assert_false(hold[part.relu1] || hold[part.images] || hold[part.add]);
    assert_int_equal(pd_graph_plan_bytes(whole.g, NULL, NULL, &planned_whole), PD_OK);
    assert_int_equal(pd_graph_plan_bytes(part.g, run, hold, &planned_part), PD_OK);
    assert_int_equal(pd_graph_allocate(whole.g), PD_OK);
    assert_int_equal(pd_graph_allocate_nodes(part.g, run, hold), PD_OK);
    assert_int_equal(pd_graph_allocated_bytes(whole.g), planned_whole);
    assert_int_equal(pd_graph_allocated_bytes(part.g), planned_part);
    assert_true(planned_part < planned_whole);

    for (int k = 0; k < pd_graph_size(part.g); k++) {
        bool expect = k == part.labels || (k >= part.flat && k <= part.fc2);
        assert_true((pd_graph_output(part.g, k) != NULL) == expect);
        assert_non_null(pd_graph_output(whole.g, k));
    }
    /* fc1's and fc2's weights and biases (values and gradients), nothing
     * else: conv1's, bn1's (with its running statistics) and fc3's are
     * absent. */
    int n_params = pd_graph_params(part.g, &params);
    size_t param_bytes = 0;
    for (int i = 0; i < n_params; i++) {
        bool mine = strncmp(params[i]->name, "fc1.", 4) == 0 || strncmp(params[i]->name, "fc2.", 4) == 0;
        assert_true((params[i]->value.data != NULL) == mine);
        assert_true((params[i]->grad.data != NULL) == mine);
        if (mine)
            param_bytes += 2 * pd_tensor_nbytes(&params[i]->value);
    }
    assert_int_equal(param_bytes, 4 * 2 * ((16 * 108 + 16) + (16 * 16 + 16)));
    /* The arena's blocks, each rounded up to 256 bytes: outputs of labels
     * (16 bytes), flat (its own copy, 4 x 108 floats), fc1, drop, relu2 and
     * fc2 (4 x 16 floats each); gradients of flat, fc1, drop, relu2 and fc2;
     * the scratch where fc2's gradient of relu2 is summed with add's. */
    const size_t flat_bytes = 1792 /* 4 x 108 x 4 rounded up */, small = 256;
    assert_int_equal(pd_graph_unplanned_bytes(part.g), small + flat_bytes + 4 * small + flat_bytes + 4 * small + small);
    assert_true(pd_graph_arena_bytes(part.g) <= pd_graph_unplanned_bytes(part.g));
    assert_int_equal(pd_graph_allocated_bytes(part.g), pd_graph_arena_bytes(part.g) + param_bytes);
    pd_graph_destroy(part.g);
    pd_graph_destroy(whole.g);
}

/* Every part's parameters hold the whole graph's initial values. */
static void test_part_parameters_equal_whole(void **state)
{
    model whole;
    bool run[MAX_NODES], hold[MAX_NODES];
    int nodes[MAX_NODES];
    pd_param **wp, **pp;

    build(*state, &whole);
    assert_int_equal(pd_graph_allocate(whole.g), PD_OK);
    int n = pd_graph_params(whole.g, &wp);
    for (int p = 0; p < N_PARTS; p++) {
        model part;
        int found = 0;
        build(*state, &part);
        part_nodes(&part, p, nodes, run, hold);
        assert_int_equal(pd_graph_allocate_nodes(part.g, run, hold), PD_OK);
        assert_int_equal(pd_graph_params(part.g, &pp), n);
        for (int i = 0; i < n; i++) {
            if (!pp[i]->value.data)
                continue;
            assert_string_equal(pp[i]->name, wp[i]->name);
            assert_same_tensor(&pp[i]->value, &wp[i]->value, pp[i]->name);
            found++;
        }
        assert_true(found > 0);
        pd_graph_destroy(part.g);
    }
    pd_graph_destroy(whole.g);
}

/* The three parts chained as a pipeline does it (cut outputs copied
 * forward, the gradients of the received tensors copied back as the
 * previous part's seeds) compute the whole graph's loss, outputs and
 * gradients bit for bit. */
static void test_chained_parts_equal_whole(void **state)
{
    const int64_t mb = 3;
    model whole, parts[N_PARTS];
    bool run[N_PARTS][MAX_NODES], hold[N_PARTS][MAX_NODES];
    int nodes[N_PARTS][MAX_NODES], n_nodes[N_PARTS];

    build(*state, &whole);
    assert_int_equal(pd_graph_allocate(whole.g), PD_OK);
    fill_inputs(&whole);
    assert_int_equal(pd_graph_forward(whole.g, mb, true), PD_OK);
    const int n = pd_graph_size(whole.g);

    for (int p = 0; p < N_PARTS; p++) {
        build(*state, &parts[p]);
        n_nodes[p] = part_nodes(&parts[p], p, nodes[p], run[p], hold[p]);
        assert_int_equal(pd_graph_allocate_nodes(parts[p].g, run[p], hold[p]), PD_OK);
    }
    fill_inputs(&parts[0]);
    for (int p = 0; p < N_PARTS; p++) {
        if (p > 0) /* what part p receives: the held outputs it does not compute */
            for (int k = 0; k < n; k++)
                if (hold[p][k] && !run[p][k] && parts[p].owner[k] < p)
                    assert_int_equal(pd_tensor_copy(pd_graph_output(parts[p].g, k), pd_graph_output(parts[p - 1].g, k)),
                                     PD_OK);
        assert_int_equal(pd_graph_forward_nodes(parts[p].g, nodes[p], n_nodes[p], mb, true), PD_OK);
        for (int i = 0; i < n_nodes[p]; i++)
            assert_same_tensor(pd_graph_output(parts[p].g, nodes[p][i]), pd_graph_output(whole.g, nodes[p][i]),
                               pd_graph_node_name(whole.g, nodes[p][i]));
    }
    /* After the forward comparisons: the backward pass reuses activations' memory. */
    assert_int_equal(pd_graph_backward(whole.g, mb, whole.loss, NULL), PD_OK);
    for (int p = N_PARTS - 1; p >= 0; p--) {
        int seed_nodes[MAX_NODES], n_seeds = 0;
        const pd_tensor *seeds[MAX_NODES];
        if (p == N_PARTS - 1) {
            seed_nodes[n_seeds] = whole.loss;
            seeds[n_seeds++] = NULL;
        } else { /* the gradients the next part computed for what it received */
            for (int k = 0; k < n; k++)
                if (hold[p + 1][k] && !run[p + 1][k] && pd_graph_node_needs_grad(parts[p + 1].g, k)) {
                    seed_nodes[n_seeds] = k;
                    seeds[n_seeds++] = pd_graph_grad(parts[p + 1].g, k);
                    assert_non_null(seeds[n_seeds - 1]);
                }
            assert_true(n_seeds > 0);
        }
        assert_int_equal(pd_graph_backward_nodes(parts[p].g, nodes[p], n_nodes[p], mb, n_seeds, seed_nodes, seeds),
                         PD_OK);
    }
    /* Every parameter gradient (fc1's sums relu2's gradients from fc2 and,
     * as a seed, from add past the cut), and the gradient reaching conv1's
     * output (the whole pass reuses the memory of the others' afterwards). */
    pd_param **wp;
    int n_params = pd_graph_params(whole.g, &wp), checked = 0;
    for (int p = 0; p < N_PARTS; p++) {
        pd_param **pp;
        pd_graph_params(parts[p].g, &pp);
        for (int i = 0; i < n_params; i++)
            if (pp[i]->grad.data) {
                assert_same_tensor(&pp[i]->grad, &wp[i]->grad, pp[i]->name);
                checked++;
            }
    }
    assert_int_equal(checked, 10); /* conv1, bn1, fc1, fc2, fc3: weight and bias each; bn1's statistics none */
    assert_same_tensor(pd_graph_grad(parts[0].g, whole.conv1), pd_graph_grad(whole.g, whole.conv1), "conv1's gradient");
    for (int p = 0; p < N_PARTS; p++)
        pd_graph_destroy(parts[p].g);
    pd_graph_destroy(whole.g);
}

/* A node outside the part is refused by name, never run on absent memory. */
static void test_node_outside_part_is_refused(void **state)
{
    model m;
    bool run[MAX_NODES], hold[MAX_NODES];
    int nodes[MAX_NODES], n_nodes;
    const int conv1_alone[] = {2}, fc3_alone[] = {11};

    build(*state, &m);
    assert_int_equal(pd_graph_allocate_nodes(m.g, (bool[MAX_NODES]){false}, NULL), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "has none of the"));
    n_nodes = part_nodes(&m, 1, nodes, run, hold);
    assert_int_equal(pd_graph_allocate_nodes(m.g, run, hold), PD_OK);
    assert_int_equal(pd_graph_allocate_nodes(m.g, run, hold), PD_ESTATE);
    assert_int_equal(conv1_alone[0], m.conv1);
    assert_int_equal(fc3_alone[0], m.fc3);

    assert_int_equal(pd_graph_forward_nodes(m.g, conv1_alone, 1, 0, true), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "forward of node 'conv1' (2), which is not in the allocated part"));
    assert_int_equal(pd_graph_forward(m.g, 0, true), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "node 'images' (0)"));
    assert_null(pd_graph_output(m.g, m.relu1));
    assert_null(pd_graph_output(m.g, m.loss));

    assert_int_equal(pd_graph_forward_nodes(m.g, nodes, n_nodes, 0, true), PD_OK);
    assert_int_equal(pd_graph_backward_nodes(m.g, fc3_alone, 1, 0, 0, NULL, NULL), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "backward of node 'fc3' (11)"));
    assert_int_equal(pd_graph_backward(m.g, 0, m.loss, NULL), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "'loss'"));
    const int seed_node[] = {m.add};
    assert_int_equal(pd_graph_backward_nodes(m.g, nodes, n_nodes, 0, 1, seed_node, NULL), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "seed for node 'add'"));
    size_t bytes;
    assert_int_equal(pd_graph_stash_bytes(m.g, conv1_alone, 1, &bytes), PD_ESTATE);
    assert_non_null(strstr(pd_last_error(), "'conv1'"));
    assert_int_equal(pd_graph_stash_bytes(m.g, nodes, n_nodes, &bytes), PD_OK);
    pd_graph_destroy(m.g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_part_allocates_only_its_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_part_parameters_equal_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chained_parts_equal_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_outside_part_is_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
