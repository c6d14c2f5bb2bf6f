/* `*.plan.json`: a plan as JSON, written atomically and read back with every
 * field checked and named when wrong. docs/plan-format.md describes the
 * fields:
 *
 *   {"format": "pipedream-plan", "version": 1, "model": "vgg16", "batch": 128,
 *    "cost_model": "pipedream",
 *    "cluster": {"levels": [{"name": "level1", "fanout": 4,
 *                            "bandwidth_bytes_per_s": 1e9, "latency_s": 0}]},
 *    "workers": 4, "workers_used": 4,
 *    "stages": [{"layers": ["node1", ...], "first_layer": "node1", "last_layer": "node17",
 *                "replicas": 3, "ranks": [0, 1, 2], "in_flight": 2,
 *                "compute_ms": ..., "sync_ms": ..., "recv_ms": ..., "send_ms": ...,
 *                "time_ms": ..., "bottleneck": "compute",
 *                "weight_bytes": ..., "activation_bytes": ..., "optimizer_bytes": ...,
 *                "memory_bytes": ..., "weight_versions": 2}, ...],
 *    "time_ms": ..., "single_worker_ms": ..., "data_parallel_ms": ...,
 *    "speedups": {"over_single_worker": ..., "over_data_parallel": ...},
 *    "bottleneck_stage": 0, "profile_hash": "...", "cluster_hash": "...",
 *    "coarsened": {"from_nodes": 920, "to_nodes": 631},   (only when coarsened)
 *    "explanation": "..."}                                   (only with --explain)
 *
 * A hand-written plan needs only "stages", each with "replicas" and either
 * "layers" or a range "first_layer".."last_layer" in the profile's order
 * (input nodes skipped: they always join stage 0); "cluster" may be left to
 * the command line, and "levels" may be written as "4x12GB/s,4x10Gb/s". */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>

#include "plan/plan_int.h"

#define PLAN_FORMAT "pipedream-plan"
#define PLAN_VERSION 1
/* Bounds of counts read from a file (pd_plan_cluster_check's too). */
#define MAX_RANKS (1 << 20)

static const char *cost_model_name(pd_plan_cost_model m)
{
    return m == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default";
}

/* ---- writing ---- */

/* json_object_set_new that remembers a failure instead of returning it. */
static void set(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

static void append(json_t *array, json_t *value, bool *ok)
{
    if (!value || json_array_append_new(array, value) != 0)
        *ok = false;
}

/* A number JSON can hold (jansson refuses inf and nan). */
static json_t *real(double x) { return json_real(isfinite(x) ? x : 0.0); }

static json_t *stage_json(const pd_plan_stage *st, const pd_profile *profile, bool *ok)
{
    json_t *obj = json_object(), *layers = json_array(), *ranks = json_array();

    if (!obj || !layers || !ranks) {
        json_decref(obj);
        json_decref(layers);
        json_decref(ranks);
        *ok = false;
        return NULL;
    }
    for (int l = 0; l < st->n_layers; l++)
        append(layers, json_string(pd_profile_node_at(profile, st->layers[l])->name), ok);
    for (int r = 0; r < st->replicas; r++)
        append(ranks, json_integer(st->ranks[r]), ok);
    set(obj, "layers", layers, ok);
    set(obj, "first_layer", json_string(pd_profile_node_at(profile, st->layers[0])->name), ok);
    set(obj, "last_layer", json_string(pd_profile_node_at(profile, st->layers[st->n_layers - 1])->name), ok);
    set(obj, "replicas", json_integer(st->replicas), ok);
    set(obj, "ranks", ranks, ok);
    set(obj, "in_flight", json_integer(st->in_flight), ok);
    set(obj, "compute_ms", real(st->compute_ms), ok);
    set(obj, "sync_ms", real(st->sync_ms), ok);
    set(obj, "recv_ms", real(st->recv_ms), ok);
    set(obj, "send_ms", real(st->send_ms), ok);
    set(obj, "time_ms", real(st->time_ms), ok);
    set(obj, "bottleneck", json_string(pd_plan_term_name(st->bottleneck)), ok);
    set(obj, "weight_bytes", real(st->weight_bytes), ok);
    set(obj, "activation_bytes", real(st->activation_bytes), ok);
    set(obj, "optimizer_bytes", real(st->optimizer_bytes), ok);
    set(obj, "memory_bytes", real(st->memory_bytes), ok);
    set(obj, "weight_versions", json_integer(st->weight_versions), ok);
    return obj;
}

static json_t *cluster_json(const pd_plan_cluster *c, bool *ok)
{
    json_t *obj = json_object(), *levels = json_array();

    if (!obj || !levels) {
        json_decref(obj);
        json_decref(levels);
        *ok = false;
        return NULL;
    }
    for (int i = 0; i < c->n_levels; i++) {
        json_t *level = json_object();
        if (!level) {
            *ok = false;
            break;
        }
        set(level, "name", json_string(c->levels[i].name), ok);
        set(level, "fanout", json_integer(c->levels[i].fanout), ok);
        set(level, "bandwidth_bytes_per_s", real(c->levels[i].bandwidth_bytes_per_s), ok);
        set(level, "latency_s", real(c->levels[i].latency_s), ok);
        append(levels, level, ok);
    }
    set(obj, "levels", levels, ok);
    return obj;
}

/* The layer and rank indices must be valid before names are looked up. */
static pd_status check_writable(const pd_plan *plan, const pd_profile *profile)
{
    if (!plan || plan->n_stages < 1 || !plan->stages)
        return PD_ERROR(PD_EINVAL, "cannot write a plan without stages");
    for (int k = 0; k < plan->n_stages; k++) {
        const pd_plan_stage *st = &plan->stages[k];
        if (st->n_layers < 1 || !st->layers || st->replicas < 1 || !st->ranks)
            return PD_ERROR(PD_EINVAL, "cannot write the plan: stage %d has no layers or no replicas", k);
        for (int l = 0; l < st->n_layers; l++)
            if (!pd_profile_node_at(profile, st->layers[l]))
                return PD_ERROR(PD_EINVAL, "cannot write the plan: stage %d: layer %d is not in the profile", k,
                                st->layers[l]);
    }
    return PD_OK;
}

static json_t *plan_json(const pd_plan *plan, const pd_profile *profile)
{
    json_t *root = json_object(), *stages = json_array(), *speedups = NULL;
    bool ok = root && stages;

    set(root, "format", json_string(PLAN_FORMAT), &ok);
    set(root, "version", json_integer(PLAN_VERSION), &ok);
    set(root, "model", json_string(plan->model ? plan->model : pd_profile_get_info(profile)->model), &ok);
    set(root, "batch", json_integer(plan->batch), &ok);
    set(root, "cost_model", json_string(cost_model_name(plan->cost_model)), &ok);
    set(root, "cluster", cluster_json(&plan->cluster, &ok), &ok);
    set(root, "workers", json_integer(plan->workers), &ok);
    set(root, "workers_used", json_integer(plan->workers_used), &ok);
    for (int k = 0; ok && k < plan->n_stages; k++)
        append(stages, stage_json(&plan->stages[k], profile, &ok), &ok);
    set(root, "stages", stages, &ok);
    set(root, "time_ms", real(plan->time_ms), &ok);
    set(root, "single_worker_ms", real(plan->single_worker_ms), &ok);
    set(root, "data_parallel_ms", real(plan->data_parallel_ms), &ok);
    if (plan->time_ms > 0) {
        speedups = json_object();
        set(speedups, "over_single_worker", real(plan->single_worker_ms / plan->time_ms), &ok);
        set(speedups, "over_data_parallel", real(plan->data_parallel_ms / plan->time_ms), &ok);
        set(root, "speedups", speedups, &ok);
    }
    set(root, "bottleneck_stage", json_integer(plan->bottleneck_stage), &ok);
    set(root, "profile_hash", json_string(plan->profile_hash), &ok);
    set(root, "cluster_hash", json_string(plan->cluster_hash), &ok);
    if (plan->coarsened_from > 0) {
        json_t *coarsened = json_object();
        set(coarsened, "from_nodes", json_integer(plan->coarsened_from), &ok);
        set(coarsened, "to_nodes", json_integer(plan->coarsened_to), &ok);
        set(root, "coarsened", coarsened, &ok);
    }
    if (plan->explanation)
        set(root, "explanation", json_string(plan->explanation), &ok);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

pd_status pd_plan_write_json(const pd_plan *plan, const pd_profile *profile, const char *path)
{
    json_t *root;
    pd_status s;

    PD_CHECK(check_writable(plan, profile));
    if (!(root = plan_json(plan, profile)))
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory building the JSON document", path);
    s = pd_json_write_file(path, root);
    json_decref(root);
    return s;
}

pd_status pd_plan_print_json(const pd_plan *plan, const pd_profile *profile, FILE *out)
{
    json_t *root;
    int failed;

    PD_CHECK(check_writable(plan, profile));
    if (!(root = plan_json(plan, profile)))
        return PD_ERROR(PD_ENOMEM, "cannot print the plan: out of host memory building the JSON document");
    failed = json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 || fputc('\n', out) == EOF;
    json_decref(root);
    if (failed)
        return PD_ERROR(PD_EIO, "cannot print the plan");
    return PD_OK;
}

/* ---- reading ---- */

static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The profile index of the layer named by `value` (at `where`). */
static pd_status layer_index(const json_t *value, const char *where, const pd_profile *profile, int *out)
{
    const char *name;

    PD_CHECK(pd_json_as_string(value, where, &name));
    *out = pd_profile_find(profile, name);
    if (*out < 0)
        return PD_ERROR(PD_EFORMAT, "%s: no layer \"%s\" in the profile of %s", where, name,
                        pd_profile_get_info(profile)->model);
    return PD_OK;
}

/* Re-reports a library complaint about a value read at `where` as a
 * malformed file, without its source location. */
static pd_status relocate_error(const char *where)
{
    char reason[1024];
    char *open;

    snprintf(reason, sizeof(reason), "%s", pd_last_error());
    open = strrchr(reason, '(');
    if (open && open > reason && open[-1] == ' ' && strstr(open, ".c:"))
        open[-1] = '\0';
    return PD_ERROR(PD_EFORMAT, "%s: %s", where, reason);
}

static pd_status read_level(const json_t *obj, const char *where, int index, pd_plan_level *out)
{
    static const char *const keys[] = {"name", "fanout", "bandwidth_bytes_per_s", "latency_s", NULL};
    char at[512];
    const char *name;

    PD_CHECK(pd_json_check_keys(obj, where, keys));
    snprintf(at, sizeof(at), "level%d", index + 1);
    PD_CHECK(pd_json_opt_string(obj, "name", where, at, &name));
    if (!name[0] || strlen(name) >= sizeof(out->name))
        return PD_ERROR(PD_EFORMAT, "%s: expected a non-empty name of at most %zu characters",
                        pd_json_where(at, sizeof(at), where, "name", -1), sizeof(out->name) - 1);
    snprintf(out->name, sizeof(out->name), "%s", name);
    PD_CHECK(pd_json_get_int(obj, "fanout", where, 1, MAX_RANKS, &out->fanout));
    PD_CHECK(pd_json_get_double(obj, "bandwidth_bytes_per_s", where, PD_JSON_POSITIVE, &out->bandwidth_bytes_per_s));
    PD_CHECK(pd_json_opt_double(obj, "latency_s", where, PD_JSON_NONNEGATIVE, 0.0, &out->latency_s));
    return PD_OK;
}

static pd_status read_cluster(const json_t *root, const char *path, pd_plan_cluster *out)
{
    static const char *const keys[] = {"levels", NULL};
    pd_plan_cluster c = {0};
    json_t *obj, *levels;
    char where[512], at[512];
    size_t n;

    PD_CHECK(pd_json_get_object(root, "cluster", path, &obj));
    pd_json_where(where, sizeof(where), path, "cluster", -1);
    PD_CHECK(pd_json_check_keys(obj, where, keys));
    PD_CHECK(pd_json_get(obj, "levels", where, &levels));
    pd_json_where(at, sizeof(at), where, "levels", -1);
    if (json_is_string(levels)) {
        if (pd_plan_cluster_parse_levels(json_string_value(levels), &c) != PD_OK)
            return relocate_error(at);
        *out = c;
        return PD_OK;
    }
    if (!json_is_array(levels))
        return PD_ERROR(PD_EFORMAT, "%s: expected an array of levels or a string like \"4x12GB/s,4x10Gb/s\"", at);
    n = json_array_size(levels);
    if (n < 1 || n > PD_PLAN_MAX_LEVELS)
        return PD_ERROR(PD_EFORMAT, "%s: expected 1 to %d levels, got %zu", at, PD_PLAN_MAX_LEVELS, n);
    for (size_t i = 0; i < n; i++) {
        pd_json_where(at, sizeof(at), where, "levels", (long)i);
        PD_CHECK(read_level(json_array_get(levels, i), at, (int)i, &c.levels[i]));
    }
    c.n_levels = (int)n;
    if (pd_plan_cluster_check(&c) != PD_OK)
        return relocate_error(where);
    *out = c;
    return PD_OK;
}

/* A stage's layers from "layers" (names) and/or "first_layer".."last_layer",
 * sorted in the profile's order. */
static pd_status read_stage_layers(const json_t *obj, const char *where, const pd_profile *profile,
                                   pd_plan_stage *st)
{
    json_t *layers = json_object_get(obj, "layers");
    bool has_range = json_object_get(obj, "first_layer") || json_object_get(obj, "last_layer");
    int first = -1, last = -1, n = 0;
    char at[512];

    if (!layers && !has_range)
        return PD_ERROR(PD_EFORMAT, "%s: give \"layers\" (names) or \"first_layer\" and \"last_layer\"", where);
    if (has_range) {
        json_t *v;
        PD_CHECK(pd_json_get(obj, "first_layer", where, &v));
        PD_CHECK(layer_index(v, pd_json_where(at, sizeof(at), where, "first_layer", -1), profile, &first));
        PD_CHECK(pd_json_get(obj, "last_layer", where, &v));
        PD_CHECK(layer_index(v, pd_json_where(at, sizeof(at), where, "last_layer", -1), profile, &last));
        if (last < first)
            return PD_ERROR(PD_EFORMAT, "%s: \"%s\" comes before first_layer \"%s\" in the profile", at,
                            pd_profile_node_at(profile, last)->name, pd_profile_node_at(profile, first)->name);
    }
    if (layers) {
        size_t len;
        PD_CHECK(pd_json_expect_array(layers, pd_json_where(at, sizeof(at), where, "layers", -1), &len));
        if (len == 0)
            return PD_ERROR(PD_EFORMAT, "%s: expected at least one layer name", at);
        if (len > (size_t)pd_profile_size(profile))
            return PD_ERROR(PD_EFORMAT, "%s: %zu names; the profile has %d layers", at, len, pd_profile_size(profile));
        if (!(st->layers = malloc(len * sizeof(*st->layers))))
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory", at);
        for (size_t l = 0; l < len; l++) {
            pd_json_where(at, sizeof(at), where, "layers", (long)l);
            PD_CHECK(layer_index(json_array_get(layers, l), at, profile, &st->layers[l]));
            st->n_layers = (int)l + 1;
        }
        qsort(st->layers, len, sizeof(*st->layers), compare_ints);
        for (size_t l = 1; l < len; l++)
            if (st->layers[l] == st->layers[l - 1])
                return PD_ERROR(PD_EFORMAT, "%s: layer \"%s\" is listed twice",
                                pd_json_where(at, sizeof(at), where, "layers", -1),
                                pd_profile_node_at(profile, st->layers[l])->name);
        /* A file we wrote has both; they must agree. */
        if (has_range && (st->layers[0] != first || st->layers[len - 1] != last))
            return PD_ERROR(PD_EFORMAT, "%s: first_layer \"%s\" and last_layer \"%s\" are not the first and last of "
                            "its layers (\"%s\" and \"%s\")", where, pd_profile_node_at(profile, first)->name,
                            pd_profile_node_at(profile, last)->name, pd_profile_node_at(profile, st->layers[0])->name,
                            pd_profile_node_at(profile, st->layers[len - 1])->name);
        return PD_OK;
    }
    for (int i = first; i <= last; i++)
        n += !pd_plan_is_input(profile, i);
    if (n == 0)
        return PD_ERROR(PD_EFORMAT, "%s: the range \"%s\"..\"%s\" holds no layer that computes", where,
                        pd_profile_node_at(profile, first)->name, pd_profile_node_at(profile, last)->name);
    if (!(st->layers = malloc((size_t)n * sizeof(*st->layers))))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", where);
    for (int i = first; i <= last; i++)
        if (!pd_plan_is_input(profile, i))
            st->layers[st->n_layers++] = i;
    return PD_OK;
}

/* Reads stages[k]. Ranks stay NULL when the stage gives none. */
static pd_status read_stage(const json_t *obj, const char *where, const pd_profile *profile, pd_plan_stage *st)
{
    static const char *const keys[] = {"layers", "first_layer", "last_layer", "replicas", "ranks", "in_flight",
                                       "compute_ms", "sync_ms", "recv_ms", "send_ms", "time_ms", "bottleneck",
                                       "weight_bytes", "activation_bytes", "optimizer_bytes", "memory_bytes",
                                       "weight_versions", NULL};
    static const struct {
        const char *key;
        size_t offset;
    } times[] = {
        {"compute_ms", offsetof(pd_plan_stage, compute_ms)},
        {"sync_ms", offsetof(pd_plan_stage, sync_ms)},
        {"recv_ms", offsetof(pd_plan_stage, recv_ms)},
        {"send_ms", offsetof(pd_plan_stage, send_ms)},
        {"time_ms", offsetof(pd_plan_stage, time_ms)},
        {"weight_bytes", offsetof(pd_plan_stage, weight_bytes)},
        {"activation_bytes", offsetof(pd_plan_stage, activation_bytes)},
        {"optimizer_bytes", offsetof(pd_plan_stage, optimizer_bytes)},
        {"memory_bytes", offsetof(pd_plan_stage, memory_bytes)},
    };
    char at[512];
    int64_t replicas;
    json_t *ranks;
    const char *term;

    PD_CHECK(pd_json_expect_object(obj, where));
    PD_CHECK(pd_json_check_keys(obj, where, keys));
    PD_CHECK(read_stage_layers(obj, where, profile, st));
    PD_CHECK(pd_json_get_int64(obj, "replicas", where, 1, INT64_MAX, &replicas));
    if (replicas > MAX_RANKS)
        return PD_ERROR(PD_EFORMAT, "%s: %lld replicas; at most %d",
                        pd_json_where(at, sizeof(at), where, "replicas", -1), (long long)replicas, MAX_RANKS);
    st->replicas = (int)replicas;
    if ((ranks = json_object_get(obj, "ranks"))) {
        size_t len;
        PD_CHECK(pd_json_expect_array(ranks, pd_json_where(at, sizeof(at), where, "ranks", -1), &len));
        if (len != (size_t)st->replicas)
            return PD_ERROR(PD_EFORMAT, "%s: %zu ranks for %d replicas", at, len, st->replicas);
        if (!(st->ranks = malloc(len * sizeof(*st->ranks))))
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory", at);
        for (size_t r = 0; r < len; r++) {
            int64_t rank;
            pd_json_where(at, sizeof(at), where, "ranks", (long)r);
            PD_CHECK(pd_json_as_int64(json_array_get(ranks, r), at, 0, MAX_RANKS - 1, &rank));
            st->ranks[r] = (int)rank;
        }
        qsort(st->ranks, len, sizeof(*st->ranks), compare_ints);
        for (size_t r = 1; r < len; r++)
            if (st->ranks[r] == st->ranks[r - 1])
                return PD_ERROR(PD_EFORMAT, "%s: rank %d is listed twice",
                                pd_json_where(at, sizeof(at), where, "ranks", -1), st->ranks[r]);
    }
    PD_CHECK(pd_json_opt_int(obj, "in_flight", where, 0, MAX_RANKS, 0, &st->in_flight));
    PD_CHECK(pd_json_opt_int(obj, "weight_versions", where, 0, MAX_RANKS, 0, &st->weight_versions));
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
        PD_CHECK(pd_json_opt_double(obj, times[i].key, where, PD_JSON_NONNEGATIVE, 0.0,
                                    (double *)((char *)st + times[i].offset)));
    PD_CHECK(pd_json_opt_string(obj, "bottleneck", where, pd_plan_term_name(PD_PLAN_TERM_COMPUTE), &term));
    for (st->bottleneck = PD_PLAN_TERM_COMPUTE; st->bottleneck <= PD_PLAN_TERM_MEMORY; st->bottleneck++)
        if (strcmp(term, pd_plan_term_name(st->bottleneck)) == 0)
            return PD_OK;
    return PD_ERROR(PD_EFORMAT, "%s: unknown term \"%s\" (compute, sync, recv, send, data or memory)",
                    pd_json_where(at, sizeof(at), where, "bottleneck", -1), term);
}

/* Gives the stages without ranks the lowest ranks no stage names, in stage
 * order; then lets stage 0 read every input no stage lists. */
static pd_status complete_stages(pd_plan *plan, const pd_profile *profile, const char *path)
{
    int n_given = 0, next = 0, g = 0, n_inputs = 0;
    int *given = NULL, *layers;
    bool *listed;
    pd_plan_stage *first = &plan->stages[0];

    for (int k = 0; k < plan->n_stages; k++)
        n_given += plan->stages[k].ranks ? plan->stages[k].replicas : 0;
    given = malloc((size_t)(n_given + 1) * sizeof(*given));
    if (!given)
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    n_given = 0;
    for (int k = 0; k < plan->n_stages; k++)
        for (int r = 0; plan->stages[k].ranks && r < plan->stages[k].replicas; r++)
            given[n_given++] = plan->stages[k].ranks[r];
    qsort(given, (size_t)n_given, sizeof(*given), compare_ints);
    for (int k = 0; k < plan->n_stages; k++) {
        pd_plan_stage *st = &plan->stages[k];
        if (st->ranks)
            continue;
        if (!(st->ranks = malloc((size_t)st->replicas * sizeof(*st->ranks)))) {
            free(given);
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
        }
        for (int r = 0; r < st->replicas; r++, next++) {
            while (g < n_given && given[g] < next)
                g++;
            while (g < n_given && given[g] == next) {
                next++;
                g++;
            }
            st->ranks[r] = next;
        }
    }
    free(given);

    listed = calloc((size_t)pd_profile_size(profile), sizeof(*listed));
    if (!listed)
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    for (int k = 0; k < plan->n_stages; k++)
        for (int l = 0; l < plan->stages[k].n_layers; l++)
            listed[plan->stages[k].layers[l]] = true;
    for (int i = 0; i < pd_profile_size(profile); i++)
        n_inputs += pd_plan_is_input(profile, i) && !listed[i];
    if (n_inputs > 0) {
        layers = realloc(first->layers, (size_t)(first->n_layers + n_inputs) * sizeof(*layers));
        if (!layers) {
            free(listed);
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
        }
        first->layers = layers;
        for (int i = 0; i < pd_profile_size(profile); i++)
            if (pd_plan_is_input(profile, i) && !listed[i])
                first->layers[first->n_layers++] = i;
        qsort(first->layers, (size_t)first->n_layers, sizeof(*first->layers), compare_ints);
    }
    free(listed);
    for (int k = 0; k < plan->n_stages; k++)
        plan->workers_used += plan->stages[k].replicas;
    return PD_OK;
}

static pd_status read_hash(const json_t *root, const char *key, const char *path, char out[17])
{
    const char *text;
    char at[512];

    PD_CHECK(pd_json_opt_string(root, key, path, "", &text));
    if (!text[0])
        return PD_OK;
    if (strlen(text) != 16 || strspn(text, "0123456789abcdef") != 16)
        return PD_ERROR(PD_EFORMAT, "%s: expected 16 lower-case hex digits, got \"%s\"",
                        pd_json_where(at, sizeof(at), path, key, -1), text);
    memcpy(out, text, 17);
    return PD_OK;
}

static pd_status read_totals(const json_t *root, const char *path, pd_plan *plan)
{
    static const char *const speedup_keys[] = {"over_single_worker", "over_data_parallel", NULL};
    json_t *speedups;
    char where[512];
    double ignored;

    PD_CHECK(pd_json_opt_double(root, "time_ms", path, PD_JSON_NONNEGATIVE, 0.0, &plan->time_ms));
    PD_CHECK(pd_json_opt_double(root, "single_worker_ms", path, PD_JSON_NONNEGATIVE, 0.0, &plan->single_worker_ms));
    PD_CHECK(pd_json_opt_double(root, "data_parallel_ms", path, PD_JSON_NONNEGATIVE, 0.0, &plan->data_parallel_ms));
    /* Derived from the times above; checked for form only. */
    if (json_object_get(root, "speedups")) {
        PD_CHECK(pd_json_get_object(root, "speedups", path, &speedups));
        pd_json_where(where, sizeof(where), path, "speedups", -1);
        PD_CHECK(pd_json_check_keys(speedups, where, speedup_keys));
        PD_CHECK(pd_json_opt_double(speedups, "over_single_worker", where, PD_JSON_NONNEGATIVE, 0.0, &ignored));
        PD_CHECK(pd_json_opt_double(speedups, "over_data_parallel", where, PD_JSON_NONNEGATIVE, 0.0, &ignored));
    }
    PD_CHECK(pd_json_opt_int(root, "bottleneck_stage", path, 0, plan->n_stages - 1, 0, &plan->bottleneck_stage));
    PD_CHECK(read_hash(root, "profile_hash", path, plan->profile_hash));
    PD_CHECK(read_hash(root, "cluster_hash", path, plan->cluster_hash));
    return PD_OK;
}

/* "coarsened": {"from_nodes": N, "to_nodes": M} with 1 <= M < N. */
static pd_status read_coarsened(const json_t *root, const char *path, pd_plan *plan)
{
    static const char *const keys[] = {"from_nodes", "to_nodes", NULL};
    json_t *obj;
    char where[512];

    PD_CHECK(pd_json_get_object(root, "coarsened", path, &obj));
    pd_json_where(where, sizeof(where), path, "coarsened", -1);
    PD_CHECK(pd_json_check_keys(obj, where, keys));
    PD_CHECK(pd_json_get_int(obj, "from_nodes", where, 2, INT_MAX, &plan->coarsened_from));
    PD_CHECK(pd_json_get_int(obj, "to_nodes", where, 1, plan->coarsened_from - 1, &plan->coarsened_to));
    return PD_OK;
}

static pd_status read_plan(const json_t *root, const char *path, const pd_profile *profile, pd_plan *plan)
{
    static const char *const keys[] = {"format", "version", "model", "batch", "cost_model", "cluster", "workers",
                                       "workers_used", "stages", "time_ms", "single_worker_ms", "data_parallel_ms",
                                       "speedups", "bottleneck_stage", "profile_hash", "cluster_hash",
                                       "coarsened", "explanation", NULL};
    const char *format, *model, *cost_model, *explanation;
    const char *profile_model = pd_profile_get_info(profile)->model;
    int version, workers, workers_used;
    json_t *stages;
    size_t n_stages;
    char where[512];

    PD_CHECK(pd_json_expect_object(root, path));
    PD_CHECK(pd_json_check_keys(root, path, keys));
    PD_CHECK(pd_json_opt_string(root, "format", path, PLAN_FORMAT, &format));
    if (strcmp(format, PLAN_FORMAT) != 0)
        return PD_ERROR(PD_EFORMAT, "%s: format: expected \"%s\", got \"%s\"", path, PLAN_FORMAT, format);
    PD_CHECK(pd_json_opt_int(root, "version", path, PLAN_VERSION, PLAN_VERSION, PLAN_VERSION, &version));
    PD_CHECK(pd_json_opt_string(root, "model", path, profile_model, &model));
    if (strcmp(model, profile_model) != 0)
        return PD_ERROR(PD_EFORMAT, "%s: model: the plan is for \"%s\", the profile is of \"%s\"", path, model,
                        profile_model);
    if (!(plan->model = strdup(model)))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    PD_CHECK(pd_json_opt_int(root, "batch", path, 0, 1 << 30, pd_profile_get_info(profile)->batch, &plan->batch));
    PD_CHECK(pd_json_opt_string(root, "cost_model", path, "default", &cost_model));
    if (strcmp(cost_model, "default") == 0)
        plan->cost_model = PD_PLAN_COST_DEFAULT;
    else if (strcmp(cost_model, "pipedream") == 0)
        plan->cost_model = PD_PLAN_COST_PIPEDREAM;
    else
        return PD_ERROR(PD_EFORMAT, "%s: cost_model: expected \"default\" or \"pipedream\", got \"%s\"", path,
                        cost_model);
    if (json_object_get(root, "cluster"))
        PD_CHECK(read_cluster(root, path, &plan->cluster));
    plan->workers = pd_plan_cluster_workers(&plan->cluster);
    if (json_object_get(root, "workers")) {
        PD_CHECK(pd_json_get_int(root, "workers", path, 1, MAX_RANKS, &workers));
        if (plan->cluster.n_levels > 0 && workers != plan->workers)
            return PD_ERROR(PD_EFORMAT, "%s: workers: %d, but the cluster's levels hold %d", path, workers,
                            plan->workers);
    }

    PD_CHECK(pd_json_get_array(root, "stages", path, &stages, &n_stages));
    if (n_stages == 0)
        return PD_ERROR(PD_EFORMAT, "%s: stages: expected at least one stage", path);
    if (n_stages > (size_t)pd_profile_size(profile))
        return PD_ERROR(PD_EFORMAT, "%s: stages: %zu stages; the profile has %d layers", path, n_stages,
                        pd_profile_size(profile));
    if (!(plan->stages = calloc(n_stages, sizeof(*plan->stages))))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    plan->n_stages = (int)n_stages;
    for (size_t k = 0; k < n_stages; k++) {
        pd_json_where(where, sizeof(where), path, "stages", (long)k);
        PD_CHECK(read_stage(json_array_get(stages, k), where, profile, &plan->stages[k]));
    }
    PD_CHECK(complete_stages(plan, profile, path));
    if (json_object_get(root, "workers_used")) {
        PD_CHECK(pd_json_get_int(root, "workers_used", path, 1, MAX_RANKS, &workers_used));
        if (workers_used != plan->workers_used)
            return PD_ERROR(PD_EFORMAT, "%s: workers_used: %d, but the stages' replicas add up to %d", path,
                            workers_used, plan->workers_used);
    }
    PD_CHECK(read_totals(root, path, plan));
    if (json_object_get(root, "coarsened"))
        PD_CHECK(read_coarsened(root, path, plan));
    if (json_object_get(root, "explanation")) {
        PD_CHECK(pd_json_get_string(root, "explanation", path, &explanation));
        if (!(plan->explanation = strdup(explanation)))
            return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    }
    return PD_OK;
}

pd_status pd_plan_read_json(const char *path, const pd_profile *profile, pd_plan **out)
{
    json_t *root;
    pd_plan *plan;
    pd_status s;

    PD_CHECK(pd_json_load_file(path, &root));
    if (!(plan = calloc(1, sizeof(*plan)))) {
        json_decref(root);
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    }
    s = read_plan(root, path, profile, plan);
    json_decref(root);
    if (s != PD_OK) {
        pd_plan_destroy(plan);
        return s;
    }
    *out = plan;
    return PD_OK;
}
