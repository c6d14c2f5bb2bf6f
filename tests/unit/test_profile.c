/* Profiles: the data model's checks, JSON round trips and the rejection of
 * bad files by field, PipeDream graph.txt import of every shared profile
 * (counts checked by hand, the VGG16 total against the optimizer's worked
 * example) and export back, single-node passes equal to the whole passes,
 * and a measured LeNet profile. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/profile.h>

#include "test_files.h"

/* Every field of two profiles' nodes is equal (doubles exactly); the
 * descriptions only when `descriptions`. */
static void assert_same_nodes(const pd_profile *a, const pd_profile *b, bool descriptions)
{
    assert_int_equal(pd_profile_size(a), pd_profile_size(b));
    for (int i = 0; i < pd_profile_size(a); i++) {
        const pd_profile_node *x = pd_profile_node_at(a, i), *y = pd_profile_node_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_string_equal(x->type, y->type);
        if (descriptions)
            assert_string_equal(x->description, y->description);
        assert_true(x->fwd_ms == y->fwd_ms);
        assert_true(x->bwd_ms == y->bwd_ms);
        assert_int_equal(x->activation_bytes, y->activation_bytes);
        assert_int_equal(x->weight_bytes, y->weight_bytes);
        assert_int_equal(x->n_inputs, y->n_inputs);
        for (int k = 0; k < x->n_inputs; k++)
            assert_int_equal(x->inputs[k], y->inputs[k]);
    }
}

/* A small branching profile with awkward numbers. */
static pd_profile *sample_profile(void)
{
    const pd_profile_info info = {
        .model = "toy", .batch = 32, .dtype = PD_F32, .device = "cpu", .source = "measured",
        .warmup = 2, .iterations = 7, .step_ms = 1.0 / 3.0, .data_note = "loader x: \"quoted\"",
    };
    pd_profile *p;
    const int in_a[] = {0}, in_b[] = {1, 1}, in_c[] = {1, 2};
    const pd_profile_node nodes[] = {
        {"images", PD_PROFILE_INPUT_TYPE, "input [32,3,8,8]", 0.125, 0, 24576, 0, 0, 0, NULL},
        {"conv", "conv2d", "conv2d [32,4,8,8]", 0.1, 0.2, 32768, 448, 1000, 1, in_a},
        {"sum", "add", "", 1e-9, 12345.678901234567, INT64_C(1) << 40, 0, -1, 2, in_b},
        {"cat", "concat", "concat", 3.0, 0, 65536, INT64_C(9007199254740993), 7, 2, in_c},
    };

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    for (int i = 0; i < 4; i++) {
        int index;
        assert_int_equal(pd_profile_add_node(p, &nodes[i], &index), PD_OK);
        assert_int_equal(index, i);
    }
    return p;
}

static void test_model_checks(void **state)
{
    pd_profile *p = sample_profile();
    const int bad_input[] = {4};
    pd_profile_node node = {"x", "relu", "", 1, 1, 0, 0, -1, 1, bad_input};

    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "input 0 is node 4, not one of the 4 before it"));
    node.n_inputs = 0;
    node.name = "conv";
    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "'conv' exists already"));
    node.name = "a b";
    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    node.name = "x";
    node.bwd_ms = -1;
    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    node.bwd_ms = NAN;
    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    node.bwd_ms = 0;
    node.description = "two\nlines";
    assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_EINVAL);
    assert_int_equal(pd_profile_size(p), 4);

    /* Sums: inputs are data loading, the rest compute. */
    assert_true(pd_profile_data_loading_ms(p) == 0.125);
    assert_true(fabs(pd_profile_compute_ms(p) - (0.1 + 0.2 + 1e-9 + 12345.678901234567 + 3.0)) < 1e-9);
    assert_int_equal(pd_profile_weight_bytes(p), 448 + INT64_C(9007199254740993));
    assert_int_equal(pd_profile_find(p, "sum"), 2);
    assert_int_equal(pd_profile_find(p, "nope"), -1);
    pd_profile_destroy(p);
}

static void test_json_round_trip(void **state)
{
    pd_profile *p = sample_profile(), *q;
    const char *path = test_tmp_path("toy.profile.json");

    assert_int_equal(pd_profile_write_json(p, path), PD_OK);
    assert_int_equal(pd_profile_read_json(path, &q), PD_OK);
    assert_same_nodes(p, q, true);
    const pd_profile_info *a = pd_profile_get_info(p), *b = pd_profile_get_info(q);
    assert_string_equal(a->model, b->model);
    assert_int_equal(a->batch, b->batch);
    assert_int_equal(a->dtype, b->dtype);
    assert_string_equal(a->device, b->device);
    assert_string_equal(a->source, b->source);
    assert_int_equal(a->warmup, b->warmup);
    assert_int_equal(a->iterations, b->iterations);
    assert_true(a->step_ms == b->step_ms);
    assert_string_equal(a->data_note, b->data_note);
    assert_int_equal(pd_profile_node_at(q, 2)->flops, -1);
    assert_int_equal(pd_profile_node_at(q, 1)->flops, 1000);
    pd_profile_destroy(q);
    pd_profile_destroy(p);
}

/* Writes `text` as a profile file and expects PD_EFORMAT naming `needle`. */
static void expect_bad_json(const char *text, const char *needle)
{
    const char *path = test_tmp_path("bad.profile.json");
    pd_profile *p = NULL;

    test_write_text(path, text);
    pd_error_clear();
    assert_int_equal(pd_profile_read_json(path, &p), PD_EFORMAT);
    assert_null(p);
    if (!strstr(pd_last_error(), needle))
        fail_msg("expected '%s' in: %s", needle, pd_last_error());
    assert_non_null(strstr(pd_last_error(), "bad.profile.json"));
}

#define HEAD "{\"format\": \"pipedream-profile\", \"version\": 1, \"model\": \"m\", \"batch\": 4, \"dtype\": \"f32\", "
#define TAIL "\"device\": \"cpu\", \"source\": \"measured\", \"data_loading\": {\"ms\": 0, \"note\": \"\"}, "
#define NODE(name, extra)                                                                                            \
    "{\"name\": \"" name "\", \"type\": \"relu\", \"fwd_ms\": 1, \"bwd_ms\": 2, \"activation_bytes\": 16, "       \
    "\"weight_bytes\": 0, \"inputs\": [" extra "]}"

static void test_json_rejects_bad_fields(void **state)
{
    pd_profile *p;

    /* A good one first, so the cases below fail for their one reason. */
    test_write_text(test_tmp_path("good.profile.json"),
                    HEAD TAIL "\"nodes\": [" NODE("a", "") ", " NODE("b", "\"a\"") "]}");
    assert_int_equal(pd_profile_read_json(test_tmp_path("good.profile.json"), &p), PD_OK);
    assert_int_equal(pd_profile_node_at(p, 1)->inputs[0], 0);
    pd_profile_destroy(p);

    expect_bad_json("{\"format\": \"other\"}", "format: expected \"pipedream-profile\"");
    expect_bad_json(HEAD TAIL "\"nodes\": []}", "nodes: the profile has no nodes");
    expect_bad_json(HEAD TAIL "\"nodes\": [" NODE("a", "\"b\"") "]}", "nodes[0].inputs[0]: \"b\" is not a node");
    expect_bad_json(HEAD TAIL "\"nodes\": [" NODE("a", "") ", " NODE("a", "") "]}", "nodes[1]: node 'a' exists");
    expect_bad_json(HEAD TAIL "\"nodes\": [{\"name\": \"a\", \"type\": \"relu\", \"fwd_ms\": -1, \"bwd_ms\": 2, "
                    "\"activation_bytes\": 16, \"weight_bytes\": 0, \"inputs\": []}]}",
                    "nodes[0].fwd_ms: expected a number >= 0");
    expect_bad_json(HEAD TAIL "\"nodes\": [{\"name\": \"a\", \"type\": \"relu\", \"fwd_ms\": 1, "
                    "\"activation_bytes\": 16, \"weight_bytes\": 0, \"inputs\": []}]}",
                    "nodes[0].bwd_ms: required field is missing");
    expect_bad_json(HEAD TAIL "\"nodes\": [{\"name\": \"a\", \"type\": \"relu\", \"fwd_ms\": 1, \"bwd_ms\": 2, "
                    "\"activation_bytes\": 1.5, \"weight_bytes\": 0, \"inputs\": []}]}",
                    "nodes[0].activation_bytes");
    expect_bad_json(HEAD TAIL "\"nodes\": [{\"name\": \"a\", \"typo\": 1, \"type\": \"relu\", \"fwd_ms\": 1, "
                    "\"bwd_ms\": 2, \"activation_bytes\": 1, \"weight_bytes\": 0, \"inputs\": []}]}",
                    "typo");
    expect_bad_json(HEAD TAIL "\"nodes\": [{\"name\": \"a b\", \"type\": \"relu\", \"fwd_ms\": 1, \"bwd_ms\": 2, "
                    "\"activation_bytes\": 1, \"weight_bytes\": 0, \"inputs\": []}]}",
                    "nodes[0]: node 0: name 'a b'");
    expect_bad_json("{\"format\": \"pipedream-profile\", \"version\": 1, \"model\": \"m\", \"batch\": 4, "
                    "\"dtype\": \"f33\", " TAIL "\"nodes\": [" NODE("a", "") "]}",
                    "dtype: unknown dtype \"f33\"");
    expect_bad_json("{\"format\": \"pipedream-profile\", \"version\": 2}", "version");
    /* The loading entry must agree with the input nodes. */
    expect_bad_json(HEAD "\"device\": \"cpu\", \"source\": \"measured\", \"data_loading\": {\"ms\": 5, \"note\": "
                    "\"\"}, \"nodes\": [" NODE("a", "") "]}",
                    "data_loading.ms: 5, but the input nodes' forward times add up to 0");
    expect_bad_json(HEAD TAIL "\"measurement\": {\"warmup\": 1, \"iterations\": 0, \"step_ms\": 1}, \"nodes\": ["
                    NODE("a", "") "]}", "measurement.iterations: expected an integer in [1,");
    pd_status st = pd_profile_read_json(test_tmp_path("missing.profile.json"), &p);
    assert_true(st == PD_EIO || st == PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "missing.profile.json"));
}

/* ---- graph.txt ---- */

/* Lines starting with a tab: the edges, counted without the importer. */
static int count_edge_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int c, prev = '\n', n = 0;

    assert_non_null(f);
    while ((c = fgetc(f)) != EOF) {
        n += prev == '\n' && c == '\t';
        prev = c;
    }
    fclose(f);
    return n;
}

static int count_edges(const pd_profile *p)
{
    int n = 0;
    for (int i = 0; i < pd_profile_size(p); i++)
        n += pd_profile_node_at(p, i)->n_inputs;
    return n;
}

static pd_profile *import_shared(const char *dir, const char *file)
{
    char path[PATH_MAX];
    pd_profile *p = NULL;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (pd_profile_import_graph_txt(path, "m", 0, &p) != PD_OK)
        fail_msg("import of %s: %s", path, pd_last_error());
    return p;
}

static const pd_profile_node *node_named(const pd_profile *p, const char *name)
{
    int i = pd_profile_find(p, name);
    assert_true(i >= 0);
    return pd_profile_node_at(p, i);
}

static void test_graph_txt_known_files(void **state)
{
    const char *dir = test_src_path("profiles/pipedream");
    pd_profile *p;

    assert_non_null(dir); /* main() leaves this test out when it is absent */
    /* Node and edge counts by hand: grep -c ' -- forward' and grep -c '^\t'. */
    static const struct {
        const char *file;
        int nodes, edges;
    } known[] = {
        {"vgg16/graph.txt", 41, 41},
        {"resnet50/graph.txt", 177, 193},
        {"gnmt/graph.txt", 48, 58},
        {"inception_v3/graph_compressed.txt", 92, 128},
        {"nasnetalarge/graph.txt", 1251, 1468},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        p = import_shared(dir, known[i].file);
        assert_int_equal(pd_profile_size(p), known[i].nodes);
        assert_int_equal(count_edges(p), known[i].edges);
        pd_profile_destroy(p);
    }

    /* VGG16: one line read exactly; its compute total is the single-worker
     * time of the optimizer's worked example, 0.672535 s; the input's
     * forward time is the data loading. */
    p = import_shared(dir, "vgg16/graph.txt");
    const pd_profile_node *n = node_named(p, "node11");
    assert_string_equal(n->type, "MaxPool2d");
    assert_string_equal(n->description, "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
    assert_true(n->fwd_ms == 2.211 && n->bwd_ms == 2.788);
    assert_int_equal(n->activation_bytes, 205520896);
    assert_int_equal(n->weight_bytes, 0);
    assert_int_equal(node_named(p, "node12")->weight_bytes, 1180672);
    assert_true(fabs(pd_profile_compute_ms(p) - 672.535) < 1e-6);
    assert_true(pd_profile_data_loading_ms(p) == 17.972);
    assert_string_equal(pd_profile_node_at(p, 0)->name, "node1");
    assert_string_equal(pd_profile_node_at(p, 0)->type, PD_PROFILE_INPUT_TYPE);
    /* A chain but for the flattening: node32 (pool) feeds Size(0) node33,
     * and both feed View(-1) node34, in the order of the edge lines. */
    for (int i = 1; i < pd_profile_size(p); i++)
        assert_int_equal(pd_profile_node_at(p, i)->n_inputs, strcmp(pd_profile_node_at(p, i)->name, "node34") ? 1 : 2);
    n = node_named(p, "node34");
    assert_int_equal(n->inputs[0], pd_profile_find(p, "node33"));
    assert_int_equal(n->inputs[1], pd_profile_find(p, "node32"));
    assert_int_equal(node_named(p, "node33")->inputs[0], pd_profile_find(p, "node32"));
    pd_profile_destroy(p);

    /* GNMT: a list of activation sizes is summed; three inputs. */
    p = import_shared(dir, "gnmt/graph.txt");
    assert_int_equal(node_named(p, "node7")->activation_bytes, 6291456 + 131072 + 131072);
    assert_int_equal(node_named(p, "node23")->activation_bytes, 6160384 + 131072 + 131072 + 6160384 + 288768);
    int inputs = 0;
    for (int i = 0; i < pd_profile_size(p); i++)
        inputs += strcmp(pd_profile_node_at(p, i)->type, PD_PROFILE_INPUT_TYPE) == 0;
    assert_int_equal(inputs, 3);
    pd_profile_destroy(p);

    /* Compressed Inception: ids other than nodeN, fan-in of 4. */
    p = import_shared(dir, "inception_v3/graph_compressed.txt");
    n = node_named(p, "node41");
    assert_int_equal(n->n_inputs, 4);
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof(name), "compressed_node%d", k);
        assert_int_equal(n->inputs[k], pd_profile_find(p, name));
    }
    assert_string_equal(node_named(p, "compressed_node0")->type, "Branch");
    pd_profile_destroy(p);
}

/* Every file of the shared directory imports; its edge count matches the
 * tab lines; export and import again give the same profile. */
static void test_graph_txt_all_files_round_trip(void **state)
{
    const char *dir = test_src_path("profiles/pipedream");
    DIR *d;
    struct dirent *e;
    int files = 0;

    assert_non_null(dir); /* main() leaves this test out when it is absent */
    d = opendir(dir);
    assert_non_null(d);
    while ((e = readdir(d))) {
        char sub[2 * PATH_MAX];
        DIR *m;
        struct dirent *f;
        if (e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        if (!(m = opendir(sub)))
            continue;
        while ((f = readdir(m))) {
            char path[2 * PATH_MAX + 2], rel[PATH_MAX];
            pd_profile *p, *q, *r;
            if (strncmp(f->d_name, "graph", 5) != 0 || strcmp(f->d_name + strlen(f->d_name) - 4, ".txt") != 0)
                continue;
            snprintf(rel, sizeof(rel), "%s/%s", e->d_name, f->d_name);
            snprintf(path, sizeof(path), "%s/%s", dir, rel);
            p = import_shared(dir, rel);
            assert_int_equal(count_edges(p), count_edge_lines(path));
            assert_int_equal(pd_profile_export_graph_txt(p, test_tmp_path("export.txt")), PD_OK);
            if (pd_profile_import_graph_txt(test_tmp_path("export.txt"), "m", 0, &q) != PD_OK)
                fail_msg("re-import of %s: %s", rel, pd_last_error());
            assert_same_nodes(p, q, true);
            /* and through JSON */
            assert_int_equal(pd_profile_write_json(q, test_tmp_path("export.profile.json")), PD_OK);
            assert_int_equal(pd_profile_read_json(test_tmp_path("export.profile.json"), &r), PD_OK);
            assert_same_nodes(p, r, true);
            print_message("# %-36s %5d nodes %5d edges  compute %9.3f ms  loading %8.3f ms: round trip equal\n",
                          rel, pd_profile_size(p), count_edges(p), pd_profile_compute_ms(p),
                          pd_profile_data_loading_ms(p));
            pd_profile_destroy(r);
            pd_profile_destroy(q);
            pd_profile_destroy(p);
            files++;
        }
        closedir(m);
    }
    closedir(d);
    assert_int_equal(files, 15);
}

/* Writes a graph.txt and expects PD_EFORMAT with "bad.txt:<line>" and `needle`. */
static void expect_bad_txt(const char *text, int line, const char *needle)
{
    const char *path = test_tmp_path("bad.txt");
    char where[80];
    pd_profile *p = NULL;

    test_write_text(path, text);
    pd_error_clear();
    assert_int_equal(pd_profile_import_graph_txt(path, "m", 0, &p), PD_EFORMAT);
    assert_null(p);
    if (line > 0)
        snprintf(where, sizeof(where), "bad.txt:%d: ", line);
    else
        snprintf(where, sizeof(where), "bad.txt: ");
    if (!strstr(pd_last_error(), where) || !strstr(pd_last_error(), needle))
        fail_msg("expected '%s' and '%s' in: %s", where, needle, pd_last_error());
}

#define T(a, b, act, par) " -- forward_compute_time=" a ", backward_compute_time=" b ", activation_size=" act \
                          ", parameter_size=" par "\n"

static void test_graph_txt_rejects_bad_lines(void **state)
{
    pd_profile *p;

    /* Accepted: any node order, blank lines, CRLF, a stage_id, " -- " inside a description. */
    test_write_text(test_tmp_path("ok.txt"), "b -- ReLU -- a -- forward_compute_time=1.5, backward_compute_time=2.000, "
                                   "activation_size=[8.0; 8.0], parameter_size=0.000 -- stage_id=1\r\n"
                                   "\n"
                                   "a -- Input0" T("0.250", "0.000", "16.0", "0.0")
                                   "\ta -- b\n");
    assert_int_equal(pd_profile_import_graph_txt(test_tmp_path("ok.txt"), "m", 8, &p), PD_OK);
    assert_int_equal(pd_profile_size(p), 2);
    assert_string_equal(pd_profile_node_at(p, 0)->name, "a");
    assert_string_equal(pd_profile_node_at(p, 1)->description, "ReLU -- a");
    assert_int_equal(pd_profile_node_at(p, 1)->activation_bytes, 16);
    assert_true(pd_profile_node_at(p, 1)->fwd_ms == 1.5);
    assert_int_equal(pd_profile_get_info(p)->batch, 8);
    assert_true(pd_profile_data_loading_ms(p) == 0.25);
    pd_profile_destroy(p);

    expect_bad_txt("", 0, "no node lines");
    expect_bad_txt("a -- X" T("1", "x2", "1", "1"), 1, "backward_compute_time: 'x2' is not a number");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "b -- X" T("-1", "2", "1", "1"), 2,
                   "forward_compute_time: -1 is not a finite number >= 0");
    expect_bad_txt("a -- X" T("1", "2", "1.5", "1"), 1, "activation_size: 1.5 is not a whole number of bytes");
    expect_bad_txt("a -- X" T("1", "2", "[1.0; x]", "1"), 1, "activation_size: 'x' is not a number");
    expect_bad_txt("a -- X -- forward_compute_time=1, activation_size=1, parameter_size=1\n", 1,
                   "expected 'backward_compute_time='");
    expect_bad_txt("a -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=1\n", 1,
                   "expected ', parameter_size='");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "a b -- X" T("1", "2", "1", "1"), 2, "expected 'ID -- DESCRIPTION");
    expect_bad_txt("a forward_compute_time=1\n", 1, "expected 'ID -- DESCRIPTION");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "\n" "a -- Y" T("1", "2", "1", "1"), 3,
                   "node 'a' is defined again (first on line 1)");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "\ta -- c\n", 2, "edge to node 'c', which has no node line");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "\ta - a\n", 2, "expected an edge");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "\ta -- a\n", 2, "edge from node 'a' to itself");
    expect_bad_txt("a -- X" T("1", "2", "1", "1") "b -- X" T("1", "2", "1", "1") "c -- X" T("1", "2", "1", "1")
                   "\ta -- b\n\tb -- c\n\tc -- b\n",
                   0, "the edges form a cycle through node 'b' (line 2)");
    assert_int_equal(pd_profile_import_graph_txt(test_tmp_path("absent.txt"), "m", 0, &p), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "absent.txt"));
}

/* ---- measurement ---- */

typedef struct grads {
    int n;
    float *data[16];
    size_t bytes[16];
} grads;

static void save_grads(pd_graph *g, grads *out)
{
    pd_param **params;
    int n = pd_graph_params(g, &params);

    out->n = 0;
    for (int i = 0; i < n; i++) {
        if (!params[i]->trainable)
            continue;
        assert_true(out->n < 16);
        out->bytes[out->n] = pd_tensor_nbytes(&params[i]->grad);
        out->data[out->n] = malloc(out->bytes[out->n]);
        assert_int_equal(pd_tensor_copy_to_host(&params[i]->grad, out->data[out->n], out->bytes[out->n]), PD_OK);
        out->n++;
    }
}

static void free_grads(grads *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->data[i]);
}

/* Single-node passes in order are the whole passes, bit for bit, also
 * where a gradient fans in (a used by relu and by add) and where the
 * minibatch and training mode matter (dropout). */
static void test_run_node_equals_whole_pass(void **state)
{
    pd_device *dev;
    pd_graph *g;
    pd_shape xs = pd_shape_make(2, (int64_t)4, (int64_t)6), ls = pd_shape_make(1, (int64_t)4);
    int x, labels, a, r, d, s, logits, loss;
    float xv[24];
    int32_t lv[4] = {0, 2, 1, 2};
    grads whole, single;

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_graph_create(dev, 3, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &xs, false, &x), PD_OK);
    assert_int_equal(pd_graph_input(g, "labels", PD_I32, &ls, false, &labels), PD_OK);
    assert_int_equal(pd_graph_linear(g, "a", x, 6, true, &a), PD_OK);
    assert_int_equal(pd_graph_relu(g, "r", a, &r), PD_OK);
    assert_int_equal(pd_graph_dropout(g, "d", r, 0.5f, &d), PD_OK);
    assert_int_equal(pd_graph_add(g, "s", d, a, &s), PD_OK);
    assert_int_equal(pd_graph_linear(g, "out", s, 3, true, &logits), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", logits, labels, &loss), PD_OK);
    assert_int_equal(pd_graph_run_node(g, 0, 0, false), PD_ESTATE); /* not allocated */
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    for (int i = 0; i < 24; i++)
        xv[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, x), xv, sizeof(xv)), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, labels), lv, sizeof(lv)), PD_OK);

    assert_int_equal(pd_graph_run_node(g, loss, 5, true), PD_ESTATE); /* no forward yet */
    assert_int_equal(pd_graph_forward(g, 5, true), PD_OK);
    assert_int_equal(pd_graph_backward(g, 5, loss, NULL), PD_OK);
    save_grads(g, &whole);

    /* Clobber the gradients so that stale values cannot pass. */
    pd_param **params;
    int np = pd_graph_params(g, &params);
    for (int i = 0; i < np; i++)
        if (params[i]->trainable)
            assert_int_equal(pd_tensor_zero(&params[i]->grad), PD_OK);
    for (int k = 0; k <= loss; k++)
        assert_int_equal(pd_graph_run_node(g, k, 5, false), PD_OK);
    for (int k = loss; k >= 0; k--)
        assert_int_equal(pd_graph_run_node(g, k, 5, true), PD_OK);
    save_grads(g, &single);
    assert_int_equal(whole.n, 4);
    assert_int_equal(single.n, whole.n);
    for (int i = 0; i < whole.n; i++)
        assert_memory_equal(whole.data[i], single.data[i], whole.bytes[i]);
    /* The backward pass belongs to the last forward's minibatch. */
    assert_int_equal(pd_graph_run_node(g, loss, 6, true), PD_ESTATE);
    assert_int_equal(pd_graph_run_node(g, loss + 1, 5, true), PD_EINVAL);
    assert_int_equal(pd_graph_run_node(g, -1, 5, false), PD_EINVAL);
    /* A partial forward pass does not complete one. */
    assert_int_equal(pd_graph_run_node(g, 0, 7, false), PD_OK);
    assert_int_equal(pd_graph_backward(g, 7, loss, NULL), PD_ESTATE);
    free_grads(&whole);
    free_grads(&single);
    pd_graph_destroy(g);
    pd_device_close(dev);
}

static void test_measure_lenet(void **state)
{
    pd_device *dev;
    pd_profile *p;
    const pd_model_options m = {.batch = 8, .channels = 1, .height = 28, .width = 28, .classes = 10,
                                .width_multiplier = 1.0f};
    const pd_profile_options o = {.warmup = 1, .iterations = 5};

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_profile_measure("lenet", &m, dev, 1, &o, &p), PD_OK);
    const pd_profile_info *info = pd_profile_get_info(p);
    assert_string_equal(info->model, "lenet");
    assert_int_equal(info->batch, 8);
    assert_string_equal(info->device, "cpu");
    assert_int_equal(info->iterations, 5);
    assert_true(info->step_ms > 0);
    assert_true(pd_profile_data_loading_ms(p) == 0.0);
    assert_non_null(strstr(info->data_note, "synthetic"));

    /* LeNet's shapes by hand: bytes = 4 x elements. */
    static const struct {
        const char *name, *type, *input;
        int64_t activation, weights;
    } expect[] = {
        {"images", "input", NULL, 8 * 1 * 28 * 28, 0},
        {"conv1", "conv2d", "images", 8 * 6 * 28 * 28, 6 * 25 + 6},
        {"pool1", "pool2d", "relu1", 8 * 6 * 14 * 14, 0},
        {"conv2", "conv2d", "pool1", 8 * 16 * 10 * 10, 16 * 6 * 25 + 16},
        {"flatten", "flatten", "pool2", 8 * 400, 0},
        {"fc1", "linear", "flatten", 8 * 120, 400 * 120 + 120},
        {"fc2", "linear", "relu3", 8 * 84, 120 * 84 + 84},
        {"fc3", "linear", "relu4", 8 * 10, 84 * 10 + 10},
        {"loss", "softmax_cross_entropy", "fc3", 1, 0},
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        const pd_profile_node *n = node_named(p, expect[i].name);
        assert_string_equal(n->type, expect[i].type);
        assert_int_equal(n->activation_bytes, 4 * expect[i].activation);
        assert_int_equal(n->weight_bytes, 4 * expect[i].weights);
        if (expect[i].input)
            assert_int_equal(n->inputs[0], pd_profile_find(p, expect[i].input));
        if (strcmp(n->type, "conv2d") == 0 || strcmp(n->type, "linear") == 0) {
            assert_true(n->fwd_ms > 0);
            assert_true(n->bwd_ms > 0);
            assert_true(n->flops > 0);
        }
    }
    assert_int_equal(pd_profile_size(p), 15);
    assert_int_equal(node_named(p, "loss")->n_inputs, 2);
    /* The layers add up to a whole step within a loose factor (timing
     * noise on a shared machine; the command reports the ratio). */
    double ratio = pd_profile_compute_ms(p) / info->step_ms;
    print_message("# lenet batch 8: layers %.3f ms, whole step %.3f ms, ratio %.2f\n", pd_profile_compute_ms(p),
                  info->step_ms, ratio);
    assert_true(ratio > 0.05 && ratio < 20);

    /* Measured profiles survive both file formats. */
    pd_profile *q;
    assert_int_equal(pd_profile_write_json(p, test_tmp_path("lenet.profile.json")), PD_OK);
    assert_int_equal(pd_profile_read_json(test_tmp_path("lenet.profile.json"), &q), PD_OK);
    assert_same_nodes(p, q, true);
    pd_profile_destroy(q);
    assert_int_equal(pd_profile_export_graph_txt(p, test_tmp_path("lenet.txt")), PD_OK);
    assert_int_equal(pd_profile_import_graph_txt(test_tmp_path("lenet.txt"), "lenet", 8, &q), PD_OK);
    assert_same_nodes(p, q, false);
    assert_string_equal(pd_profile_node_at(q, 0)->description, "Input(input [8,1,28,28])");
    pd_profile_destroy(q);
    pd_profile_destroy(p);

    const pd_profile_options bad = {.warmup = 0, .iterations = 0};
    assert_int_equal(pd_profile_measure("lenet", &m, dev, 1, &bad, &p), PD_EINVAL);
    assert_int_equal(pd_profile_measure("nope", &m, dev, 1, &o, &p), PD_ENOTFOUND);
    pd_device_close(dev);
}

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_checks),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_rejects_bad_fields),
        cmocka_unit_test(test_graph_txt_rejects_bad_lines),
        cmocka_unit_test(test_run_node_equals_whole_pass),
        cmocka_unit_test(test_measure_lenet),
        cmocka_unit_test(test_graph_txt_known_files),
        cmocka_unit_test(test_graph_txt_all_files_round_trip),
    };

    return cmocka_run_group_tests_name("profile", tests, test_tmpdir_setup, test_tmpdir_teardown);
}
