/* `*.profile.json`: a profile as JSON, written atomically and read back with
 * every field checked and named when wrong.
 *
 *   {"format": "pipedream-profile", "version": 1,
 *    "model": "lenet", "batch": 64, "dtype": "f32", "device": "cpu", "source": "measured",
 *    "measurement": {"warmup": 5, "iterations": 30, "step_ms": 2.5},     (absent for imports)
 *    "data_loading": {"ms": 0.0, "note": "..."},     (ms: the input nodes' forward times)
 *    "nodes": [{"name": "conv1", "type": "conv2d", "description": "conv2d [64,6,28,28]",
 *               "fwd_ms": 0.4, "bwd_ms": 0.9, "activation_bytes": 1204224,
 *               "weight_bytes": 624, "flops": 9031680, "inputs": ["images"]}, ...]}
 *
 * Nodes come in topological order: inputs name nodes listed before. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>
#include <pipedream/profile.h>

#define PROFILE_FORMAT "pipedream-profile"
#define PROFILE_VERSION 1

/* ---- writing ---- */

/* json_object_set_new that remembers a failure instead of returning it. */
static void set(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

static json_t *node_json(const pd_profile *p, const pd_profile_node *n)
{
    json_t *obj = json_object(), *inputs = json_array();
    bool ok = obj && inputs;

    if (!ok) {
        json_decref(obj);
        json_decref(inputs);
        return NULL;
    }
    for (int i = 0; i < n->n_inputs; i++)
        if (json_array_append_new(inputs, json_string(pd_profile_node_at(p, n->inputs[i])->name)) != 0)
            ok = false;
    set(obj, "name", json_string(n->name), &ok);
    set(obj, "type", json_string(n->type), &ok);
    set(obj, "description", json_string(n->description), &ok);
    set(obj, "fwd_ms", json_real(n->fwd_ms), &ok);
    set(obj, "bwd_ms", json_real(n->bwd_ms), &ok);
    set(obj, "activation_bytes", json_integer(n->activation_bytes), &ok);
    set(obj, "weight_bytes", json_integer(n->weight_bytes), &ok);
    set(obj, "flops", json_integer(n->flops), &ok);
    set(obj, "inputs", inputs, &ok);
    if (!ok) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static json_t *profile_json(const pd_profile *p)
{
    const pd_profile_info *info = pd_profile_get_info(p);
    json_t *root = json_object(), *nodes = json_array(), *loading = json_object(), *measurement = NULL;
    bool ok = root && nodes && loading;

    set(root, "format", json_string(PROFILE_FORMAT), &ok);
    set(root, "version", json_integer(PROFILE_VERSION), &ok);
    set(root, "model", json_string(info->model), &ok);
    set(root, "batch", json_integer(info->batch), &ok);
    set(root, "dtype", json_string(pd_dtype_name(info->dtype)), &ok);
    set(root, "device", json_string(info->device), &ok);
    set(root, "source", json_string(info->source), &ok);
    if (info->iterations > 0) {
        measurement = json_object();
        set(measurement, "warmup", json_integer(info->warmup), &ok);
        set(measurement, "iterations", json_integer(info->iterations), &ok);
        set(measurement, "step_ms", json_real(info->step_ms), &ok);
        set(root, "measurement", measurement, &ok);
    }
    set(loading, "ms", json_real(pd_profile_data_loading_ms(p)), &ok);
    set(loading, "note", json_string(info->data_note), &ok);
    set(root, "data_loading", loading, &ok);
    for (int i = 0; ok && i < pd_profile_size(p); i++) {
        json_t *node = node_json(p, pd_profile_node_at(p, i));
        if (!node || json_array_append_new(nodes, node) != 0)
            ok = false;
    }
    set(root, "nodes", nodes, &ok);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

pd_status pd_profile_write_json(const pd_profile *p, const char *path)
{
    json_t *root = profile_json(p);
    pd_status s;

    if (!root)
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory building the JSON document", path);
    s = pd_json_write_file(path, root);
    json_decref(root);
    return s;
}

/* ---- reading ---- */

static pd_status read_info(const json_t *root, const char *path, pd_profile_info *info)
{
    static const char *const root_keys[] = {"format", "version", "model", "batch", "dtype", "device", "source",
                                            "measurement", "data_loading", "nodes", NULL};
    static const char *const measurement_keys[] = {"warmup", "iterations", "step_ms", NULL};
    static const char *const loading_keys[] = {"ms", "note", NULL};
    char where[512];
    const char *format, *dtype;
    int version;
    json_t *measurement, *loading;

    PD_CHECK(pd_json_expect_object(root, path));
    PD_CHECK(pd_json_check_keys(root, path, root_keys));
    PD_CHECK(pd_json_get_string(root, "format", path, &format));
    if (strcmp(format, PROFILE_FORMAT) != 0)
        return PD_ERROR(PD_EFORMAT, "%s: format: expected \"%s\", got \"%s\"", path, PROFILE_FORMAT, format);
    PD_CHECK(pd_json_get_int(root, "version", path, PROFILE_VERSION, PROFILE_VERSION, &version));
    PD_CHECK(pd_json_get_string(root, "model", path, &info->model));
    PD_CHECK(pd_json_get_int(root, "batch", path, 0, 1 << 30, &info->batch));
    PD_CHECK(pd_json_get_string(root, "dtype", path, &dtype));
    if (pd_dtype_parse(dtype, &info->dtype) != PD_OK)
        return PD_ERROR(PD_EFORMAT, "%s: dtype: unknown dtype \"%s\" (f32, bf16, f16, i32 or u8)", path, dtype);
    PD_CHECK(pd_json_get_string(root, "device", path, &info->device));
    PD_CHECK(pd_json_get_string(root, "source", path, &info->source));
    if (json_object_get(root, "measurement")) {
        PD_CHECK(pd_json_get_object(root, "measurement", path, &measurement));
        pd_json_where(where, sizeof(where), path, "measurement", -1);
        PD_CHECK(pd_json_check_keys(measurement, where, measurement_keys));
        PD_CHECK(pd_json_get_int(measurement, "warmup", where, 0, 1 << 30, &info->warmup));
        PD_CHECK(pd_json_get_int(measurement, "iterations", where, 1, 1 << 30, &info->iterations));
        PD_CHECK(pd_json_get_double(measurement, "step_ms", where, PD_JSON_NONNEGATIVE, &info->step_ms));
    }
    PD_CHECK(pd_json_get_object(root, "data_loading", path, &loading));
    pd_json_where(where, sizeof(where), path, "data_loading", -1);
    PD_CHECK(pd_json_check_keys(loading, where, loading_keys));
    PD_CHECK(pd_json_get_string(loading, "note", where, &info->data_note));
    return PD_OK;
}

/* Reports the data model's complaint about a value read at `where`
 * (PD_EINVAL becomes PD_EFORMAT: the file is wrong), without its
 * "profile: " prefix and source location. */
static pd_status relocate_error(pd_status s, const char *where)
{
    char reason[1024];
    const char *text = pd_last_error();
    size_t len;

    snprintf(reason, sizeof(reason), "%s", strncmp(text, "profile: ", 9) == 0 ? text + 9 : text);
    len = strlen(reason);
    if (len && reason[len - 1] == ')') {
        char *open = strrchr(reason, '(');
        if (open && open > reason && open[-1] == ' ' && strstr(open, ".c:"))
            open[-1] = '\0';
    }
    return PD_ERROR(s == PD_EINVAL ? PD_EFORMAT : s, "%s: %s", where, reason);
}

/* Reads nodes[i] into the profile; the model's own checks (pd_profile_add_node)
 * are reported after the node's location. */
static pd_status read_node(pd_profile *p, const json_t *obj, const char *where)
{
    static const char *const node_keys[] = {"name", "type", "description", "fwd_ms", "bwd_ms", "activation_bytes",
                                            "weight_bytes", "flops", "inputs", NULL};
    pd_profile_node node = {0};
    json_t *inputs;
    size_t n_inputs;
    int *ids = NULL;
    char at[512];
    pd_status s;

    PD_CHECK(pd_json_expect_object(obj, where));
    PD_CHECK(pd_json_check_keys(obj, where, node_keys));
    PD_CHECK(pd_json_get_string(obj, "name", where, &node.name));
    PD_CHECK(pd_json_get_string(obj, "type", where, &node.type));
    PD_CHECK(pd_json_opt_string(obj, "description", where, "", &node.description));
    PD_CHECK(pd_json_get_double(obj, "fwd_ms", where, PD_JSON_NONNEGATIVE, &node.fwd_ms));
    PD_CHECK(pd_json_get_double(obj, "bwd_ms", where, PD_JSON_NONNEGATIVE, &node.bwd_ms));
    PD_CHECK(pd_json_get_int64(obj, "activation_bytes", where, 0, INT64_MAX, &node.activation_bytes));
    PD_CHECK(pd_json_get_int64(obj, "weight_bytes", where, 0, INT64_MAX, &node.weight_bytes));
    PD_CHECK(pd_json_opt_int64(obj, "flops", where, -1, INT64_MAX, -1, &node.flops));
    PD_CHECK(pd_json_get_array(obj, "inputs", where, &inputs, &n_inputs));
    ids = malloc(n_inputs ? n_inputs * sizeof(*ids) : 1);
    if (!ids)
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory for %zu inputs", where, n_inputs);
    for (size_t i = 0; i < n_inputs; i++) {
        const char *name;
        pd_json_where(at, sizeof(at), where, "inputs", (long)i);
        PD_CHECK_GOTO(pd_json_as_string(json_array_get(inputs, i), at, &name), s, free_ids);
        ids[i] = pd_profile_find(p, name);
        if (ids[i] < 0) {
            s = PD_ERROR(PD_EFORMAT, "%s: \"%s\" is not a node listed before this one", at, name);
            goto free_ids;
        }
    }
    node.n_inputs = (int)n_inputs;
    node.inputs = ids;
    s = pd_profile_add_node(p, &node, NULL);
    if (s != PD_OK)
        s = relocate_error(s, where);
free_ids:
    free(ids);
    return s;
}

static pd_status read_profile(const json_t *root, const char *path, pd_profile **out)
{
    pd_profile_info info = {0};
    pd_profile *p;
    json_t *nodes, *loading;
    size_t n_nodes;
    char where[512];
    double loading_ms;
    pd_status s;

    PD_CHECK(read_info(root, path, &info));
    PD_CHECK(pd_json_get_array(root, "nodes", path, &nodes, &n_nodes));
    if (n_nodes == 0)
        return PD_ERROR(PD_EFORMAT, "%s: nodes: the profile has no nodes", path);
    s = pd_profile_create(&info, &p);
    if (s != PD_OK)
        return relocate_error(s, path);
    for (size_t i = 0; i < n_nodes; i++) {
        pd_json_where(where, sizeof(where), path, "nodes", (long)i);
        PD_CHECK_GOTO(read_node(p, json_array_get(nodes, i), where), s, fail);
    }
    /* The loading time is derived from the input nodes; a hand-edited file
     * that changed one but not the other is caught here. */
    pd_json_where(where, sizeof(where), path, "data_loading", -1);
    PD_CHECK_GOTO(pd_json_get_object(root, "data_loading", path, &loading), s, fail);
    PD_CHECK_GOTO(pd_json_get_double(loading, "ms", where, PD_JSON_NONNEGATIVE, &loading_ms), s, fail);
    double inputs_ms = pd_profile_data_loading_ms(p);
    if (fabs(loading_ms - inputs_ms) > 1e-9 * fmax(1.0, fabs(inputs_ms))) {
        s = PD_ERROR(PD_EFORMAT, "%s.ms: %.17g, but the input nodes' forward times add up to %.17g", where, loading_ms,
                     inputs_ms);
        goto fail;
    }
    *out = p;
    return PD_OK;
fail:
    pd_profile_destroy(p);
    return s;
}

pd_status pd_profile_read_json(const char *path, pd_profile **out)
{
    json_t *root;
    pd_status s;

    PD_CHECK(pd_json_load_file(path, &root));
    s = read_profile(root, path, out);
    json_decref(root);
    return s;
}
