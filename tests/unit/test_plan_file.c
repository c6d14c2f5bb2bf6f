/* Plans as files and as given by hand: the --levels syntax (every bad form
 * named), plan files written and read back field for field, every malformed
 * field of a plan file named with its file and place, hand-written plans
 * (layer names, layer ranges, ranks assigned in order, inputs joining stage
 * 0), the checks a plan must pass (a layer missing or twice, an edge running
 * backwards, too many or duplicated ranks), and the printed table. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/plan.h>

#include "test_files.h"

/* A small model with a branch:
 *   0 images (input) -> 1 conv1 -> 2 relu1 -> 3 conv2a, 4 conv2b -> 5 concat -> 6 fc -> 8 loss
 *   and a second input, 7 labels -> 8 loss. */
static pd_profile *toy_profile(void)
{
    const pd_profile_info info = {
        .model = "toy", .batch = 16, .dtype = PD_F32, .device = "cpu", .source = "measured", .data_note = "",
    };
    static const int in_conv1[] = {0}, in_relu1[] = {1}, in_branch[] = {2}, in_concat[] = {3, 4}, in_fc[] = {5};
    static const int in_loss[] = {6, 7};
    const pd_profile_node nodes[] = {
        {"images", PD_PROFILE_INPUT_TYPE, "", 0.5, 0, 4096, 0, -1, 0, NULL},
        {"conv1", "conv2d", "", 1.0, 2.0, 8192, 1000, -1, 1, in_conv1},
        {"relu1", "relu", "", 0.1, 0.1, 8192, 0, -1, 1, in_relu1},
        {"conv2a", "conv2d", "", 2.0, 4.0, 4096, 2000, -1, 1, in_branch},
        {"conv2b", "conv2d", "", 2.5, 5.0, 4096, 3000, -1, 1, in_branch},
        {"concat", "concat", "", 0.2, 0.2, 8192, 0, -1, 2, in_concat},
        {"fc", "linear", "", 3.0, 6.0, 640, 40000, -1, 1, in_fc},
        {"labels", PD_PROFILE_INPUT_TYPE, "", 0.25, 0, 64, 0, -1, 0, NULL},
        {"loss", "softmax_cross_entropy", "", 0.05, 0.05, 4, 0, -1, 2, in_loss},
    };
    pd_profile *p;

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
        assert_int_equal(pd_profile_add_node(p, &nodes[i], NULL), PD_OK);
    return p;
}

/* A plan of `n` stages over the toy profile: stage k holds the layers
 * lists[k] (terminated by -1) and the ranks ranks[k] (terminated by -1). */
static pd_plan *make_plan(const char *levels, int n, const int lists[][10], const int ranks[][5])
{
    pd_plan *plan = calloc(1, sizeof(*plan));

    assert_non_null(plan);
    assert_int_equal(pd_plan_cluster_parse_levels(levels, &plan->cluster), PD_OK);
    plan->workers = pd_plan_cluster_workers(&plan->cluster);
    plan->model = strdup("toy");
    plan->batch = 16;
    plan->n_stages = n;
    plan->stages = calloc((size_t)n, sizeof(*plan->stages));
    assert_non_null(plan->stages);
    for (int k = 0; k < n; k++) {
        pd_plan_stage *st = &plan->stages[k];
        while (lists[k][st->n_layers] >= 0)
            st->n_layers++;
        while (ranks[k][st->replicas] >= 0)
            st->replicas++;
        st->layers = malloc((size_t)st->n_layers * sizeof(int));
        st->ranks = malloc((size_t)(st->replicas ? st->replicas : 1) * sizeof(int));
        memcpy(st->layers, lists[k], (size_t)st->n_layers * sizeof(int));
        memcpy(st->ranks, ranks[k], (size_t)st->replicas * sizeof(int));
        plan->workers_used += st->replicas;
    }
    return plan;
}

/* ---- levels ---- */

static void test_levels_good(void **state)
{
    pd_plan_cluster c;

    (void)state;
    assert_int_equal(pd_plan_cluster_parse_levels("4x12GB/s,4x10Gb/s", &c), PD_OK);
    assert_int_equal(c.n_levels, 2);
    assert_int_equal(c.levels[0].fanout, 4);
    assert_int_equal(c.levels[1].fanout, 4);
    assert_true(c.levels[0].bandwidth_bytes_per_s == 12e9);
    assert_true(c.levels[1].bandwidth_bytes_per_s == 1.25e9);
    assert_true(c.levels[0].latency_s == 0);
    assert_int_equal(pd_plan_cluster_workers(&c), 16);

    assert_int_equal(pd_plan_cluster_parse_levels("8x1e9", &c), PD_OK);
    assert_int_equal(c.n_levels, 1);
    assert_int_equal(c.levels[0].fanout, 8);
    assert_true(c.levels[0].bandwidth_bytes_per_s == 1e9);

    assert_int_equal(pd_plan_cluster_parse_levels("2x100MB/s,3x1Tb/s,1x800b/s", &c), PD_OK);
    assert_int_equal(c.n_levels, 3);
    assert_true(c.levels[0].bandwidth_bytes_per_s == 100e6);
    assert_true(c.levels[1].bandwidth_bytes_per_s == 1e12 / 8);
    assert_true(c.levels[2].bandwidth_bytes_per_s == 100);
    assert_int_equal(pd_plan_cluster_workers(&c), 6);

    assert_int_equal(pd_plan_cluster_parse_levels("1x1B/s,1x1B/s,1x1B/s,1x1B/s,1x1B/s,1x1B/s,1x1B/s,2x1B/s", &c),
                     PD_OK);
    assert_int_equal(c.n_levels, PD_PLAN_MAX_LEVELS);
    assert_int_equal(pd_plan_cluster_workers(&c), 2);
}

static void test_levels_bad(void **state)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"", "levels: empty"},
        {"4", "item 1 (\"4\"): expected COUNTxBANDWIDTH"},
        {"x12GB/s", "item 1 (\"x12GB/s\"): expected COUNTxBANDWIDTH"},
        {"4x", "item 1 (\"4x\"): expected COUNTxBANDWIDTH"},
        {"4y12GB/s", "item 1 (\"4y12GB/s\"): expected COUNTxBANDWIDTH"},
        {"0x1GB/s", "item 1 (\"0x1GB/s\"): the count must be in [1, "},
        {"-4x1GB/s", "item 1 (\"-4x1GB/s\"): the count '-4' is not an integer >= 1"},
        {"four x1GB/s", "the count 'four ' is not an integer"},
        {"99999999999999999999x1GB/s", "the count must be in"},
        {"4x12GBps", "item 1 (\"4x12GBps\"): '12GBps': unknown unit 'GBps'"},
        {"4xfast", "item 1 (\"4xfast\"): 'fast' is not a bandwidth"},
        {"4x-1GB/s", "item 1 (\"4x-1GB/s\"): '-1GB/s': a bandwidth must be > 0"},
        {"4x0GB/s", "a bandwidth must be > 0"},
        {"4xinf", "'inf' is not a bandwidth"},
        {"4x1GB/s,", "item 2 is empty"},
        {",4x1GB/s", "item 1 is empty"},
        {"4x1GB/s,,4x1GB/s", "item 2 is empty"},
        {"4x1GB/s,4x10Gb/s,4", "item 3 (\"4\")"},
        {" 4x1GB/s", "item 1 (\" 4x1GB/s\"): the count ' 4' is not an integer"},
        {"4x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s,2x1GB/s", "more than 8 levels"},
        {"2000x1GB/s,2000x1GB/s", "more than 1048576 workers"},
    };
    pd_plan_cluster c = {.n_levels = 5};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pd_error_clear();
        if (pd_plan_cluster_parse_levels(cases[i].text, &c) != PD_EINVAL || !strstr(pd_last_error(), cases[i].message))
            fail_msg("levels \"%s\": got \"%s\", expected PD_EINVAL and \"%s\"", cases[i].text, pd_last_error(),
                     cases[i].message);
        assert_null(strchr(pd_last_error(), '\n'));
    }
    assert_int_equal(c.n_levels, 5); /* untouched on failure */
    assert_int_equal(pd_plan_cluster_parse_levels(NULL, &c), PD_EINVAL);
}

static void test_terms_and_workers(void **state)
{
    pd_plan_cluster none = {0};

    (void)state;
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_COMPUTE), "compute");
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_SYNC), "sync");
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_RECV), "recv");
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_SEND), "send");
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_DATA), "data");
    assert_string_equal(pd_plan_term_name(PD_PLAN_TERM_MEMORY), "memory");
    assert_int_equal(pd_plan_cluster_workers(&none), 0);
    pd_plan_destroy(NULL);
}

/* ---- files ---- */

/* A complete plan with awkward numbers in every field. */
static pd_plan *full_plan(void)
{
    static const int lists[][10] = {{0, 1, 2, 3, 4, 7, -1}, {5, 6, 8, -1}};
    static const int ranks[][5] = {{0, 1, 3, -1}, {2, -1}};
    pd_plan *plan = make_plan("2x12GB/s,2x10Gb/s", 2, lists, ranks);

    plan->cost_model = PD_PLAN_COST_PIPEDREAM;
    plan->cluster.levels[1].latency_s = 1.5e-6;
    snprintf(plan->cluster.levels[0].name, sizeof(plan->cluster.levels[0].name), "gpu");
    for (int k = 0; k < 2; k++) {
        pd_plan_stage *st = &plan->stages[k];
        st->in_flight = 3 - k;
        st->compute_ms = 1.0 / 3.0 + k;
        st->sync_ms = 0.1 * (k + 1);
        st->recv_ms = k ? 1e-7 : 0;
        st->send_ms = k ? 0 : 2.0 / 7.0;
        st->time_ms = 12345.678901234567 + k;
        st->bottleneck = k ? PD_PLAN_TERM_SEND : PD_PLAN_TERM_DATA;
        st->weight_bytes = 6000.0 + k;
        st->activation_bytes = 1e10 / 3.0;
        st->optimizer_bytes = 4096.5;
        st->memory_bytes = 9007199254740993.0;
        st->weight_versions = 4 - k;
    }
    plan->time_ms = 12346.75;
    plan->single_worker_ms = 27.9;
    plan->data_parallel_ms = 9.75;
    plan->bottleneck_stage = 1;
    snprintf(plan->profile_hash, sizeof(plan->profile_hash), "0123456789abcdef");
    snprintf(plan->cluster_hash, sizeof(plan->cluster_hash), "fedcba9876543210");
    plan->explanation = strdup("the next best, 1 stage x 4, lost on sync: \"quoted\"");
    return plan;
}

static void assert_same_plans(const pd_plan *a, const pd_plan *b)
{
    assert_string_equal(a->model, b->model);
    assert_int_equal(a->batch, b->batch);
    assert_int_equal(a->cost_model, b->cost_model);
    assert_int_equal(a->cluster.n_levels, b->cluster.n_levels);
    for (int i = 0; i < a->cluster.n_levels; i++) {
        assert_string_equal(a->cluster.levels[i].name, b->cluster.levels[i].name);
        assert_int_equal(a->cluster.levels[i].fanout, b->cluster.levels[i].fanout);
        assert_true(a->cluster.levels[i].bandwidth_bytes_per_s == b->cluster.levels[i].bandwidth_bytes_per_s);
        assert_true(a->cluster.levels[i].latency_s == b->cluster.levels[i].latency_s);
    }
    assert_int_equal(a->workers, b->workers);
    assert_int_equal(a->workers_used, b->workers_used);
    assert_int_equal(a->n_stages, b->n_stages);
    for (int k = 0; k < a->n_stages; k++) {
        const pd_plan_stage *x = &a->stages[k], *y = &b->stages[k];
        assert_int_equal(x->n_layers, y->n_layers);
        assert_memory_equal(x->layers, y->layers, (size_t)x->n_layers * sizeof(int));
        assert_int_equal(x->replicas, y->replicas);
        assert_memory_equal(x->ranks, y->ranks, (size_t)x->replicas * sizeof(int));
        assert_int_equal(x->in_flight, y->in_flight);
        assert_true(x->compute_ms == y->compute_ms);
        assert_true(x->sync_ms == y->sync_ms);
        assert_true(x->recv_ms == y->recv_ms);
        assert_true(x->send_ms == y->send_ms);
        assert_true(x->time_ms == y->time_ms);
        assert_int_equal(x->bottleneck, y->bottleneck);
        assert_true(x->weight_bytes == y->weight_bytes);
        assert_true(x->activation_bytes == y->activation_bytes);
        assert_true(x->optimizer_bytes == y->optimizer_bytes);
        assert_true(x->memory_bytes == y->memory_bytes);
        assert_int_equal(x->weight_versions, y->weight_versions);
    }
    assert_true(a->time_ms == b->time_ms);
    assert_true(a->single_worker_ms == b->single_worker_ms);
    assert_true(a->data_parallel_ms == b->data_parallel_ms);
    assert_int_equal(a->bottleneck_stage, b->bottleneck_stage);
    assert_string_equal(a->profile_hash, b->profile_hash);
    assert_string_equal(a->cluster_hash, b->cluster_hash);
    if (a->explanation || b->explanation) {
        assert_non_null(a->explanation);
        assert_non_null(b->explanation);
        assert_string_equal(a->explanation, b->explanation);
    }
}

static void test_round_trip(void **state)
{
    pd_profile *p = toy_profile();
    pd_plan *plan = full_plan(), *back = NULL, *again = NULL;
    const char *path = test_tmp_path("full.plan.json");
    unsigned char *text;
    size_t size;
    FILE *f;

    (void)state;
    assert_int_equal(pd_plan_validate(p, plan), PD_OK);
    assert_int_equal(pd_plan_write_json(plan, p, path), PD_OK);
    assert_int_equal(pd_plan_read_json(path, p, &back), PD_OK);
    assert_same_plans(plan, back);

    /* What the file says, by name. */
    text = test_read_file(path, &size);
    assert_non_null(strstr((char *)text, "\"format\": \"pipedream-plan\""));
    assert_non_null(strstr((char *)text, "\"first_layer\": \"concat\""));
    assert_non_null(strstr((char *)text, "\"last_layer\": \"labels\""));
    assert_non_null(strstr((char *)text, "\"bottleneck\": \"send\""));
    assert_non_null(strstr((char *)text, "\"over_single_worker\""));
    free(text);

    /* The stream form is the same document. */
    f = fopen(test_tmp_path("stream.plan.json"), "w");
    assert_non_null(f);
    assert_int_equal(pd_plan_print_json(back, p, f), PD_OK);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(pd_plan_read_json(test_tmp_path("stream.plan.json"), p, &again), PD_OK);
    assert_same_plans(plan, again);

    /* Without an explanation there is no field. */
    free(again->explanation);
    again->explanation = NULL;
    assert_int_equal(pd_plan_write_json(again, p, path), PD_OK);
    text = test_read_file(path, &size);
    assert_null(strstr((char *)text, "explanation"));
    free(text);

    /* A file that cannot be written is PD_EIO, nothing left behind. */
    assert_int_equal(pd_plan_write_json(plan, p, test_tmp_path("no/such/dir.plan.json")), PD_EIO);

    pd_plan_destroy(again);
    pd_plan_destroy(back);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}

/* Writes a valid plan, swaps `from` for `to` in its text (once, which
 * must be found) and reads it back; the read must fail naming `field`. */
static void expect_bad_edit(const pd_profile *p, const char *from, const char *to, const char *field)
{
    pd_plan *plan = full_plan(), *back = NULL;
    const char *path = test_tmp_path("bad.plan.json");
    unsigned char *text;
    char *edited, *at;
    size_t size;
    pd_status s;

    assert_int_equal(pd_plan_write_json(plan, p, path), PD_OK);
    text = test_read_file(path, &size);
    at = strstr((char *)text, from);
    if (!at)
        fail_msg("'%s' is not in the written plan", from);
    edited = malloc(size + strlen(to) + 1);
    assert_non_null(edited);
    snprintf(edited, size + strlen(to) + 1, "%.*s%s%s", (int)(at - (char *)text), (char *)text, to,
             at + strlen(from));
    test_write_text(path, edited);
    pd_error_clear();
    s = pd_plan_read_json(path, p, &back);
    if (s != PD_EFORMAT || !strstr(pd_last_error(), field))
        fail_msg("edit '%s' -> '%s': status %d, message \"%s\"; expected PD_EFORMAT naming \"%s\"", from, to, s,
                 pd_last_error(), field);
    assert_non_null(strstr(pd_last_error(), "bad.plan.json"));
    assert_null(back);
    free(edited);
    free(text);
    pd_plan_destroy(plan);
}

static void test_malformed_fields(void **state)
{
    static const struct {
        const char *from, *to, *field;
    } cases[] = {
        {"\"pipedream-plan\"", "\"pipedream-profile\"", "bad.plan.json: format: expected \"pipedream-plan\""},
        {"\"version\": 1", "\"version\": 2", "bad.plan.json: version: expected an integer in [1, 1], got 2"},
        {"\"model\": \"toy\"", "\"model\": \"vgg16\"", "bad.plan.json: model: the plan is for \"vgg16\""},
        {"\"batch\": 16", "\"batch\": -1", "bad.plan.json: batch:"},
        {"\"pipedream\"", "\"fast\"", "bad.plan.json: cost_model: expected \"default\" or \"pipedream\""},
        {"\"fanout\": 2", "\"fanout\": 0", "bad.plan.json: cluster.levels[0].fanout: expected an integer in [1, "},
        {"\"bandwidth_bytes_per_s\": 12000000000.0", "\"bandwidth_bytes_per_s\": -3",
         "bad.plan.json: cluster.levels[0].bandwidth_bytes_per_s: expected a number > 0, got -3"},
        {"\"latency_s\": 1.5e-6", "\"latency_s\": \"slow\"", "bad.plan.json: cluster.levels[1].latency_s"},
        {"\"name\": \"gpu\"", "\"name\": \"\"", "bad.plan.json: cluster.levels[0].name"},
        {"\"name\": \"gpu\"", "\"nam\": \"gpu\"", "bad.plan.json: cluster.levels[0].nam: unknown field"},
        {"\"levels\": [", "\"levels\": \"4x1GB/s,4\", \"x\": [", "bad.plan.json: cluster.x: unknown field"},
        {"\"workers\": 4", "\"workers\": 5", "bad.plan.json: workers: 5, but the cluster's levels hold 4"},
        {"\"workers_used\": 4", "\"workers_used\": 3", "bad.plan.json: workers_used: 3, but the stages' replicas"},
        {"\"stages\": [", "\"stagez\": [", "bad.plan.json: stagez: unknown field"},
        {"\"replicas\": 1", "\"replicas\": 0", "bad.plan.json: stages[1].replicas: expected an integer >= 1, got 0"},
        {"\"replicas\": 1", "\"replicas\": \"1\"", "bad.plan.json: stages[1].replicas: expected an integer >= 1"},
        {"\"replicas\": 1", "\"replicas\": 1.5", "bad.plan.json: stages[1].replicas: expected an integer >= 1"},
        {"\"replicas\": 3", "\"replica\": 3", "bad.plan.json: stages[0].replica: unknown field"},
        {"\"replicas\": 3", "\"replicas\": 2", "bad.plan.json: stages[0].ranks: 3 ranks for 2 replicas"},
        {"\"ranks\": [\n        0,", "\"ranks\": [\n        -1,", "bad.plan.json: stages[0].ranks[0]: expected an "},
        {"\"ranks\": [\n        0,", "\"ranks\": [\n        1,", "bad.plan.json: stages[0].ranks: rank 1 is listed twice"},
        {"\"ranks\": [\n        2\n      ]", "\"ranks\": 2", "bad.plan.json: stages[1].ranks: expected an array"},
        {"\"layers\": [\n        \"images\"", "\"layers\": [\n        \"pictures\"",
         "bad.plan.json: stages[0].layers[0]: no layer \"pictures\" in the profile of toy"},
        {"\"layers\": [\n        \"images\"", "\"layers\": [\n        7", "bad.plan.json: stages[0].layers[0]: expected a "},
        {"\"layers\": [\n        \"images\"", "\"layers\": [\n        \"conv1\"",
         "bad.plan.json: stages[0].layers: layer \"conv1\" is listed twice"},
        {"\"first_layer\": \"images\"", "\"first_layer\": \"conv1\"",
         "bad.plan.json: stages[0]: first_layer \"conv1\" and last_layer \"labels\" are not the first and last"},
        {"\"first_layer\": \"images\"", "\"first_layer\": 3", "bad.plan.json: stages[0].first_layer: expected a "},
        {"\"last_layer\": \"labels\"", "\"last_layer\": \"nope\"",
         "bad.plan.json: stages[0].last_layer: no layer \"nope\""},
        {"\"in_flight\": 3", "\"in_flight\": 1.5", "bad.plan.json: stages[0].in_flight: expected an integer"},
        {"\"weight_versions\": 4", "\"weight_versions\": -4", "bad.plan.json: stages[0].weight_versions"},
        {"\"compute_ms\": 0.33333333333333331", "\"compute_ms\": -1",
         "bad.plan.json: stages[0].compute_ms: expected a number >= 0, got -1"},
        {"\"memory_bytes\": 9007199254740992.0", "\"memory_bytes\": null", "bad.plan.json: stages[0].memory_bytes"},
        {"\"bottleneck\": \"data\"", "\"bottleneck\": \"cpu\"", "bad.plan.json: stages[0].bottleneck: unknown term"},
        {"\"time_ms\": 12346.75", "\"time_ms\": \"fast\"", "bad.plan.json: time_ms: expected a number"},
        {"\"single_worker_ms\": 27.899999999999999", "\"single_worker_ms\": -27.9", "bad.plan.json: single_worker_ms"},
        {"\"over_data_parallel\"", "\"over_dp\"", "bad.plan.json: speedups.over_dp: unknown field"},
        {"\"bottleneck_stage\": 1", "\"bottleneck_stage\": 2", "bad.plan.json: bottleneck_stage: expected an integer"},
        {"\"0123456789abcdef\"", "\"xyz\"", "bad.plan.json: profile_hash: expected 16 lower-case hex digits"},
        {"\"fedcba9876543210\"", "\"FEDCBA9876543210\"", "bad.plan.json: cluster_hash: expected 16 lower-case hex"},
        {"\"explanation\": \"the next best, 1 stage x 4, lost on sync: \\\"quoted\\\"\"", "\"explanation\": 3",
         "bad.plan.json: explanation: expected a string"},
        {"{", "[", "bad.plan.json:"},
        {"\"format\"", "\"format\" \"", "bad.plan.json:2:"},
    };
    pd_profile *p = toy_profile();

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_bad_edit(p, cases[i].from, cases[i].to, cases[i].field);
    pd_profile_destroy(p);
}

/* Reads a whole hand-written file; returns the status (and the plan). */
static pd_status read_hand(const pd_profile *p, const char *text, pd_plan **out)
{
    const char *path = test_tmp_path("hand.plan.json");

    *out = NULL;
    test_write_text(path, text);
    pd_error_clear();
    return pd_plan_read_json(path, p, out);
}

static void expect_bad_hand(const pd_profile *p, const char *text, const char *message)
{
    pd_plan *plan;
    pd_status s = read_hand(p, text, &plan);

    if (s != PD_EFORMAT || !strstr(pd_last_error(), message))
        fail_msg("%s: status %d, message \"%s\"; expected PD_EFORMAT and \"%s\"", text, s, pd_last_error(), message);
    assert_null(plan);
}

static void test_hand_written(void **state)
{
    pd_profile *p = toy_profile();
    pd_plan *plan;

    (void)state;
    /* Names; no cluster; no ranks: assigned in order. Inputs join stage 0. */
    assert_int_equal(read_hand(p,
                               "{\"stages\": [{\"layers\": [\"relu1\", \"conv1\", \"conv2a\"], \"replicas\": 2},\n"
                               "              {\"layers\": [\"conv2b\", \"concat\", \"fc\", \"loss\"], "
                               "\"replicas\": 1}]}",
                               &plan),
                     PD_OK);
    assert_int_equal(plan->n_stages, 2);
    assert_int_equal(plan->cluster.n_levels, 0);
    assert_string_equal(plan->model, "toy");
    assert_int_equal(plan->batch, 16);
    assert_int_equal(plan->stages[0].n_layers, 5);
    assert_memory_equal(plan->stages[0].layers, ((int[]){0, 1, 2, 3, 7}), 5 * sizeof(int));
    assert_int_equal(plan->stages[1].n_layers, 4);
    assert_memory_equal(plan->stages[1].layers, ((int[]){4, 5, 6, 8}), 4 * sizeof(int));
    assert_memory_equal(plan->stages[0].ranks, ((int[]){0, 1}), 2 * sizeof(int));
    assert_int_equal(plan->stages[1].ranks[0], 2);
    assert_int_equal(plan->workers_used, 3);
    /* Valid once it has a cluster. */
    assert_int_equal(pd_plan_validate(p, plan), PD_EINVAL);
    assert_int_equal(pd_plan_cluster_parse_levels("4x1GB/s", &plan->cluster), PD_OK);
    assert_int_equal(pd_plan_validate(p, plan), PD_OK);
    pd_plan_destroy(plan);

    /* Ranges in the profile's order (inputs skipped), levels as a string,
     * some ranks given: the others take the lowest free ones. */
    assert_int_equal(read_hand(p,
                               "{\"cluster\": {\"levels\": \"2x10GB/s,2x1GB/s\"},\n"
                               " \"stages\": [{\"first_layer\": \"images\", \"last_layer\": \"conv2b\", "
                               "\"replicas\": 2, \"ranks\": [3, 1]},\n"
                               "              {\"first_layer\": \"concat\", \"last_layer\": \"loss\", "
                               "\"replicas\": 2}]}",
                               &plan),
                     PD_OK);
    assert_int_equal(plan->cluster.n_levels, 2);
    assert_int_equal(pd_plan_cluster_workers(&plan->cluster), 4);
    assert_int_equal(plan->workers, 4);
    assert_int_equal(plan->stages[0].n_layers, 6);
    assert_memory_equal(plan->stages[0].layers, ((int[]){0, 1, 2, 3, 4, 7}), 6 * sizeof(int));
    assert_int_equal(plan->stages[1].n_layers, 3);
    assert_memory_equal(plan->stages[1].layers, ((int[]){5, 6, 8}), 3 * sizeof(int));
    assert_memory_equal(plan->stages[0].ranks, ((int[]){1, 3}), 2 * sizeof(int));
    assert_memory_equal(plan->stages[1].ranks, ((int[]){0, 2}), 2 * sizeof(int));
    assert_int_equal(pd_plan_validate(p, plan), PD_OK);
    pd_plan_destroy(plan);

    /* The same from a range with the input named last: the input moves to
     * stage 0 whatever the range says. */
    assert_int_equal(read_hand(p,
                               "{\"stages\": [{\"first_layer\": \"conv1\", \"last_layer\": \"conv1\", "
                               "\"replicas\": 1}, {\"first_layer\": \"relu1\", \"last_layer\": \"loss\", "
                               "\"replicas\": 3}]}",
                               &plan),
                     PD_OK);
    assert_memory_equal(plan->stages[0].layers, ((int[]){0, 1, 7}), 3 * sizeof(int));
    assert_int_equal(plan->stages[1].n_layers, 6);
    pd_plan_destroy(plan);

    expect_bad_hand(p, "{}", "hand.plan.json: stages: required field is missing");
    expect_bad_hand(p, "{\"stages\": []}", "hand.plan.json: stages: expected at least one stage");
    expect_bad_hand(p, "{\"stages\": [3]}", "hand.plan.json: stages[0]: expected an object");
    expect_bad_hand(p, "{\"stages\": [{\"replicas\": 1}]}",
                    "hand.plan.json: stages[0]: give \"layers\" (names) or \"first_layer\" and \"last_layer\"");
    expect_bad_hand(p, "{\"stages\": [{\"layers\": [\"conv1\"]}]}",
                    "hand.plan.json: stages[0].replicas: required field is missing");
    expect_bad_hand(p, "{\"stages\": [{\"layers\": [], \"replicas\": 1}]}",
                    "hand.plan.json: stages[0].layers: expected at least one layer name");
    expect_bad_hand(p, "{\"stages\": [{\"first_layer\": \"conv1\", \"replicas\": 1}]}",
                    "hand.plan.json: stages[0].last_layer: required field is missing");
    expect_bad_hand(p, "{\"stages\": [{\"first_layer\": \"fc\", \"last_layer\": \"conv1\", \"replicas\": 1}]}",
                    "hand.plan.json: stages[0].last_layer: \"conv1\" comes before first_layer \"fc\"");
    expect_bad_hand(p, "{\"stages\": [{\"first_layer\": \"images\", \"last_layer\": \"images\", \"replicas\": 1}]}",
                    "hand.plan.json: stages[0]: the range \"images\"..\"images\" holds no layer that computes");
    expect_bad_hand(p, "{\"cluster\": {\"levels\": \"4x1GB/s,x\"}, \"stages\": [{\"layers\": [\"fc\"], "
                       "\"replicas\": 1}]}",
                    "hand.plan.json: cluster.levels: levels: item 2 (\"x\"): expected COUNTxBANDWIDTH");
    expect_bad_hand(p, "{\"cluster\": {\"levels\": []}, \"stages\": [{\"layers\": [\"fc\"], \"replicas\": 1}]}",
                    "hand.plan.json: cluster.levels: expected 1 to 8 levels, got 0");
    expect_bad_hand(p, "{\"cluster\": {\"levels\": 4}, \"stages\": [{\"layers\": [\"fc\"], \"replicas\": 1}]}",
                    "hand.plan.json: cluster.levels: expected an array of levels or a string");
    expect_bad_hand(p, "{\"cluster\": {}, \"stages\": [{\"layers\": [\"fc\"], \"replicas\": 1}]}",
                    "hand.plan.json: cluster.levels: required field is missing");
    expect_bad_hand(p, "{\"cluster\": {\"levels\": [{\"fanout\": 2000, \"bandwidth_bytes_per_s\": 1}, {\"fanout\": "
                       "2000, \"bandwidth_bytes_per_s\": 1}]}, \"stages\": [{\"layers\": [\"fc\"], \"replicas\": 1}]}",
                    "hand.plan.json: cluster: cluster: more than 1048576 workers");
    expect_bad_hand(p, "{\"stages\": [{\"layers\": [\"fc\"], \"replicas\": 2000000}]}",
                    "hand.plan.json: stages[0].replicas: 2000000 replicas; at most 1048576");
    expect_bad_hand(p, "{\"stages\": [{\"layers\": [\"fc\"], \"replicas\": 1, \"ranks\": [1048576]}]}",
                    "hand.plan.json: stages[0].ranks[0]: expected an integer in [0, 1048575]");
    expect_bad_hand(p, "{\"stages\": {}}", "hand.plan.json: stages: expected an array");
    expect_bad_hand(p, "[]", "hand.plan.json: expected an object");
    pd_profile_destroy(p);
}

/* ---- the checks a plan must pass ---- */

static void expect_invalid(const pd_profile *p, pd_plan *plan, const char *message)
{
    pd_error_clear();
    if (pd_plan_validate(p, plan) != PD_EINVAL || !strstr(pd_last_error(), message))
        fail_msg("expected PD_EINVAL and \"%s\", got \"%s\"", message, pd_last_error());
    /* Evaluating checks first, whatever the cost model. */
    pd_error_clear();
    assert_int_equal(pd_plan_evaluate(p, NULL, plan), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), message));
    pd_plan_destroy(plan);
}

static void test_validate(void **state)
{
    pd_profile *p = toy_profile();
    pd_plan_options pipedream = {.cost_model = PD_PLAN_COST_PIPEDREAM};
    pd_plan *plan;

    (void)state;
    /* Valid: inputs may be left out (stage 0 reads them). */
    plan = make_plan("4x1GB/s", 2, (const int[][10]){{1, 2, 3, 4, -1}, {5, 6, 8, -1}},
                     (const int[][5]){{0, 1, -1}, {3, -1}});
    assert_int_equal(pd_plan_validate(p, plan), PD_OK);
    /* The pipedream model evaluates no given plan; it says so after the checks. */
    pd_error_clear();
    assert_int_equal(pd_plan_evaluate(p, &pipedream, plan), PD_ENOTSUP);
    assert_non_null(strstr(pd_last_error(), "only supported with the default cost model"));
    pd_plan_destroy(plan);

#define STAGES(...) ((const int[][10]){__VA_ARGS__})
#define RANKS(...) ((const int[][5]){__VA_ARGS__})
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({0, 1, 2, 3, 4, -1}, {5, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "layer 'fc' is in no stage");
    expect_invalid(p,
                   make_plan("4x1GB/s", 2, STAGES({0, 1, 2, 3, 4, 5, -1}, {5, 6, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "layer 'concat' is in stages 0 and 1");
    expect_invalid(p,
                   make_plan("4x1GB/s", 2, STAGES({0, 1, 2, 3, 4, -1}, {5, 6, 7, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "input 'labels' is in stage 1; inputs belong to stage 0");
    expect_invalid(p,
                   make_plan("4x1GB/s", 2, STAGES({0, 1, 2, 4, 5, 7, -1}, {3, 6, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "edge 'conv2a' -> 'concat' runs backwards, from stage 1 to stage 0");
    expect_invalid(p, make_plan("2x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({0, 1, -1}, {2, -1})),
                   "the stages use 3 workers; the cluster has 2");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({0, 1, -1}, {1, -1})),
                   "rank 1 is in stages 0 and 1");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({1, 1, -1}, {0, -1})),
                   "stage 0: rank 1 is given twice");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({0, -1}, {4, -1})),
                   "stage 1: rank 4 is not a worker of the cluster (0..3)");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({2, 1, -1}, {0, -1})),
                   "stage 0: ranks must be increasing (1 after 2)");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({2, 1, 3, 4, -1}, {5, 6, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "stage 0: layer 'conv1' comes after 'relu1'");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({0, 7, -1}, {1, 2, 3, 4, 5, 6, 8, -1}), RANKS({0, -1}, {1, -1})),
                   "stage 0 holds only inputs");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, -1}), RANKS({0, -1}, {-1})),
                   "stage 1: 0 replicas");
    expect_invalid(p, make_plan("4x1GB/s", 2, STAGES({1, 2, 3, 4, -1}, {5, 6, 8, 9, -1}), RANKS({0, -1}, {1, -1})),
                   "stage 1: layer index 9 is not a node of the profile (0..8)");
    plan = make_plan("4x1GB/s", 1, STAGES({0, 1, 2, 3, 4, 5, 6, 7, 8, -1}), RANKS({0, 1, 2, 3, -1}));
    plan->cluster.n_levels = 0;
    expect_invalid(p, plan, "cluster: no levels");
    plan = make_plan("4x1GB/s", 1, STAGES({0, 1, 2, 3, 4, 5, 6, 7, 8, -1}), RANKS({0, 1, 2, 3, -1}));
    plan->n_stages = 0;
    assert_int_equal(pd_plan_validate(p, plan), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "the plan has no stages"));
    plan->n_stages = 1;
    pd_plan_destroy(plan);
#undef STAGES
#undef RANKS
    pd_profile_destroy(p);
}

static void test_print(void **state)
{
    pd_profile *p = toy_profile();
    pd_plan *plan = full_plan();
    const char *path = test_tmp_path("table.txt");
    unsigned char *text;
    size_t size;
    FILE *f = fopen(path, "w");

    (void)state;
    assert_non_null(f);
    pd_plan_print(plan, p, f);
    assert_int_equal(fclose(f), 0);
    text = test_read_file(path, &size);
    /* Header, one row per stage (the bottleneck marked), totals, explanation. */
    assert_non_null(strstr((char *)text, "plan for toy (batch 16), cost model pipedream, cluster 2x12 GB/s,2x1.25 GB/s "
                                         "(4 workers): 2 stages, replicas 3-1\n"));
    assert_non_null(strstr((char *)text, "\n      0  images..labels"));
    assert_non_null(strstr((char *)text, "\n*     1  concat..loss  "));
    assert_non_null(strstr((char *)text, " 0-1,3 "));
    assert_non_null(strstr((char *)text, "predicted time per minibatch: 12346.750 ms (stage 1, send)\n"));
    assert_non_null(strstr((char *)text, "speedup: 0.002x over one worker (27.900 ms)"));
    assert_non_null(strstr((char *)text, "workers used: 4 of 4\n"));
    assert_non_null(strstr((char *)text, "lost on sync"));
    free(text);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
}


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_good),
        cmocka_unit_test(test_levels_bad),
        cmocka_unit_test(test_terms_and_workers),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed_fields),
        cmocka_unit_test(test_hand_written),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_print),
    };
    return cmocka_run_group_tests_name("plan_file", tests, test_tmpdir_setup, test_tmpdir_teardown);
}
