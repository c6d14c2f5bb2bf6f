/* A node's description as JSON: what a cluster file's "node" holds and
 * what each rank sends to rank 0. The PCIe tree itself is not kept: the
 * paths it gave are. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>

#include "core/pd_units.h"
#include "topology/topo_int.h"

#define WHERE_BYTES 512

/* ---- writing ---- */

static json_t *level_to_json(const pd_cluster_level *l)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(l->name));
    json_object_set_new(o, "fanout", json_integer(l->fanout));
    json_object_set_new(o, "bandwidth_bytes_per_s", json_real(l->bandwidth_bytes_per_s));
    json_object_set_new(o, "latency_s", json_real(l->latency_s));
    json_object_set_new(o, "source", json_string(l->source));
    return o;
}

json_t *pd_topo_levels_to_json(const pd_cluster_level *levels, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, level_to_json(&levels[i]));
    return a;
}

/* rows x cols path matrix as {"types": [[...]], "bandwidth_bytes_per_s": [[...]]}. */
static json_t *paths_to_json(const pd_topo_path *paths, int rows, int cols)
{
    json_t *o = json_object(), *types = json_array(), *bws = json_array();
    for (int i = 0; i < rows; i++) {
        json_t *tr = json_array(), *br = json_array();
        for (int j = 0; j < cols; j++) {
            json_array_append_new(tr, json_string(pd_topo_path_type_name(paths[i * cols + j].type)));
            json_array_append_new(br, json_real(paths[i * cols + j].bytes_per_s));
        }
        json_array_append_new(types, tr);
        json_array_append_new(bws, br);
    }
    json_object_set_new(o, "types", types);
    json_object_set_new(o, "bandwidth_bytes_per_s", bws);
    return o;
}

json_t *pd_topo_to_json(const pd_topo *t)
{
    json_t *o = json_object(), *numa = json_array(), *gpus = json_array(), *nics = json_array();

    json_object_set_new(o, "hostname", json_string(t->hostname));
    json_object_set_new(o, "origin", json_string(t->origin));
    json_object_set_new(o, "packages", json_integer(t->packages));
    json_object_set_new(o, "cores", json_integer(t->cores));
    json_object_set_new(o, "pus", json_integer(t->pus));
    for (int i = 0; i < t->n_numa; i++) {
        const pd_topo_numa *m = &t->numa[i];
        json_t *n = json_object();
        json_object_set_new(n, "os_index", json_integer(m->os_index));
        json_object_set_new(n, "package", json_integer(m->package));
        json_object_set_new(n, "pus", json_integer(m->pus));
        json_object_set_new(n, "memory_bytes", json_integer((json_int_t)m->memory_bytes));
        json_object_set_new(n, "cpuset", json_string(m->cpuset));
        json_array_append_new(numa, n);
    }
    json_object_set_new(o, "numa_nodes", numa);
    json_object_set_new(o, "memory_bandwidth_bytes_per_s", json_real(t->memory_bytes_per_s));
    json_object_set_new(o, "memory_bandwidth_source", json_string(t->memory_source));
    for (int i = 0; i < t->n_gpus; i++) {
        const pd_topo_gpu *g = &t->gpus[i];
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(g->name));
        json_object_set_new(x, "model", json_string(g->model));
        json_object_set_new(x, "pci_busid", json_string(g->pci_busid));
        json_object_set_new(x, "numa", json_integer(g->numa));
        json_object_set_new(x, "nic", json_integer(g->nic));
        json_object_set_new(x, "pcie_bandwidth_bytes_per_s", json_real(g->pcie_bytes_per_s));
        json_object_set_new(x, "pcie_source", json_string(g->pcie_source));
        json_array_append_new(gpus, x);
    }
    json_object_set_new(o, "gpus", gpus);
    for (int k = 0; k < t->n_nics; k++) {
        const pd_topo_nic *n = &t->nics[k];
        json_t *x = json_object();
        json_object_set_new(x, "name", json_string(n->name));
        json_object_set_new(x, "netdevs", json_string(n->netdevs));
        json_object_set_new(x, "pci_busid", json_string(n->pci_busid));
        json_object_set_new(x, "rdma", json_boolean(n->rdma));
        json_object_set_new(x, "numa", json_integer(n->numa));
        json_object_set_new(x, "bandwidth_bytes_per_s", json_real(n->bytes_per_s));
        json_object_set_new(x, "source", json_string(n->source));
        json_array_append_new(nics, x);
    }
    json_object_set_new(o, "nics", nics);
    json_object_set_new(o, "gpu_paths", paths_to_json(t->gpu_paths, t->n_gpus, t->n_gpus));
    json_object_set_new(o, "gpu_nic_paths", paths_to_json(t->gpu_nic_paths, t->n_gpus, t->n_nics));
    json_object_set_new(o, "worker", json_string(t->worker));
    json_object_set_new(o, "workers", json_integer(t->workers));
    json_object_set_new(o, "levels", pd_topo_levels_to_json(t->levels, t->n_levels));
    return o;
}

/* ---- reading ---- */

/* A bandwidth member: a number of bytes/s > 0 or a string with a unit. */
static pd_status get_bandwidth(const json_t *obj, const char *key, const char *where, double *out)
{
    char at[WHERE_BYTES];
    json_t *v;
    double parsed;

    PD_CHECK(pd_json_get(obj, key, where, &v));
    if (!json_is_string(v))
        return pd_json_get_double(obj, key, where, PD_JSON_POSITIVE, out);
    pd_json_where(at, sizeof(at), where, key, -1);
    if (pd_bandwidth_parse(json_string_value(v), at, &parsed) != PD_OK) {
        pd_error_clear();
        return PD_ERROR(PD_EFORMAT, "%s: expected a bandwidth (bytes/s > 0, or a string such as \"25Gb/s\"), got \"%s\"",
                        at, json_string_value(v));
    }
    *out = parsed;
    return PD_OK;
}

static pd_status copy_string(const json_t *obj, const char *key, const char *where, const char *fallback, char *dst,
                             size_t size)
{
    const char *s;
    PD_CHECK(pd_json_opt_string(obj, key, where, fallback, &s));
    snprintf(dst, size, "%s", s);
    return PD_OK;
}

static pd_status level_from_json(const json_t *o, const char *where, pd_cluster_level *l)
{
    static const char *const keys[] = {"name", "fanout", "bandwidth_bytes_per_s", "latency_s", "source", NULL};
    const char *name;

    PD_CHECK(pd_json_check_keys(o, where, keys));
    PD_CHECK(pd_json_get_string(o, "name", where, &name));
    if (!name[0] || strlen(name) >= sizeof(l->name))
        return PD_ERROR(PD_EFORMAT, "%s.name: expected 1 to %zu characters, got \"%s\"", where, sizeof(l->name) - 1,
                        name);
    PD_TOPO_SET(l->name, name);
    PD_CHECK(pd_json_get_int(o, "fanout", where, 1, 1 << 20, &l->fanout));
    PD_CHECK(get_bandwidth(o, "bandwidth_bytes_per_s", where, &l->bandwidth_bytes_per_s));
    PD_CHECK(pd_json_opt_double(o, "latency_s", where, PD_JSON_CLOSED(0, 10), 0, &l->latency_s));
    return copy_string(o, "source", where, "file", l->source, sizeof(l->source));
}

pd_status pd_topo_levels_from_json(const json_t *array, const char *where, pd_cluster_level *levels, int *n)
{
    char at[WHERE_BYTES];
    size_t len;

    PD_CHECK(pd_json_expect_array(array, where, &len));
    if (len == 0 || len > PD_CLUSTER_MAX_LEVELS)
        return PD_ERROR(PD_EFORMAT, "%s: expected 1 to %d levels, got %zu", where, PD_CLUSTER_MAX_LEVELS, len);
    for (size_t i = 0; i < len; i++) {
        pd_json_where(at, sizeof(at), where, NULL, (long)i);
        PD_CHECK(pd_json_expect_object(json_array_get(array, i), at));
        PD_CHECK(level_from_json(json_array_get(array, i), at, &levels[i]));
    }
    *n = (int)len;
    return PD_OK;
}

/* An optional array member's elements through `read`, into a calloc'd
 * array of `size`-byte items. */
static pd_status read_array(const json_t *obj, const char *key, const char *where, size_t size,
                            pd_status (*read)(const json_t *, const char *, void *), void **items, int *count)
{
    char at[WHERE_BYTES], elem[WHERE_BYTES];
    json_t *a = json_object_get(obj, key);
    size_t len;

    *items = NULL;
    *count = 0;
    if (!a)
        return PD_OK;
    pd_json_where(at, sizeof(at), where, key, -1);
    PD_CHECK(pd_json_expect_array(a, at, &len));
    if (len == 0)
        return PD_OK;
    if (!(*items = calloc(len, size)))
        return PD_ERROR(PD_ENOMEM, "%s: out of memory", at);
    for (size_t i = 0; i < len; i++) {
        pd_json_where(elem, sizeof(elem), where, key, (long)i);
        PD_CHECK(pd_json_expect_object(json_array_get(a, i), elem));
        PD_CHECK(read(json_array_get(a, i), elem, (char *)*items + i * size));
        (*count)++;
    }
    return PD_OK;
}

static pd_status numa_from_json(const json_t *o, const char *where, void *item)
{
    static const char *const keys[] = {"os_index", "package", "pus", "memory_bytes", "cpuset", NULL};
    pd_topo_numa *m = item;
    int64_t bytes;

    PD_CHECK(pd_json_check_keys(o, where, keys));
    PD_CHECK(pd_json_get_int(o, "os_index", where, 0, 1 << 20, &m->os_index));
    PD_CHECK(pd_json_opt_int(o, "package", where, -1, 1 << 20, -1, &m->package));
    PD_CHECK(pd_json_opt_int(o, "pus", where, 0, 1 << 24, 0, &m->pus));
    PD_CHECK(pd_json_opt_int64(o, "memory_bytes", where, 0, INT64_MAX, 0, &bytes));
    m->memory_bytes = (uint64_t)bytes;
    return copy_string(o, "cpuset", where, "", m->cpuset, sizeof(m->cpuset));
}

static pd_status gpu_from_json(const json_t *o, const char *where, void *item)
{
    static const char *const keys[] = {"name", "model", "pci_busid", "numa", "nic", "pcie_bandwidth_bytes_per_s",
                                       "pcie_source", NULL};
    pd_topo_gpu *g = item;
    const char *name;

    g->vertex = -1;
    PD_CHECK(pd_json_check_keys(o, where, keys));
    PD_CHECK(pd_json_get_string(o, "name", where, &name));
    PD_TOPO_SET(g->name, name);
    PD_CHECK(copy_string(o, "model", where, "", g->model, sizeof(g->model)));
    PD_CHECK(copy_string(o, "pci_busid", where, "", g->pci_busid, sizeof(g->pci_busid)));
    PD_CHECK(pd_json_opt_int(o, "numa", where, -1, 1 << 20, -1, &g->numa));
    PD_CHECK(pd_json_opt_int(o, "nic", where, -1, 1 << 20, -1, &g->nic));
    PD_CHECK(get_bandwidth(o, "pcie_bandwidth_bytes_per_s", where, &g->pcie_bytes_per_s));
    return copy_string(o, "pcie_source", where, "file", g->pcie_source, sizeof(g->pcie_source));
}

static pd_status nic_from_json(const json_t *o, const char *where, void *item)
{
    static const char *const keys[] = {"name", "netdevs", "pci_busid", "rdma", "numa", "bandwidth_bytes_per_s",
                                       "source", NULL};
    pd_topo_nic *n = item;
    const char *name;

    n->vertex = -1;
    PD_CHECK(pd_json_check_keys(o, where, keys));
    PD_CHECK(pd_json_get_string(o, "name", where, &name));
    PD_TOPO_SET(n->name, name);
    PD_CHECK(copy_string(o, "netdevs", where, "", n->netdevs, sizeof(n->netdevs)));
    PD_CHECK(copy_string(o, "pci_busid", where, "", n->pci_busid, sizeof(n->pci_busid)));
    PD_CHECK(pd_json_opt_bool(o, "rdma", where, false, &n->rdma));
    PD_CHECK(pd_json_opt_int(o, "numa", where, -1, 1 << 20, -1, &n->numa));
    PD_CHECK(get_bandwidth(o, "bandwidth_bytes_per_s", where, &n->bytes_per_s));
    return copy_string(o, "source", where, "file", n->source, sizeof(n->source));
}

static pd_status path_type_from_name(const char *name, const char *where, pd_topo_path_type *out)
{
    for (int t = PD_TOPO_PATH_SELF; t <= PD_TOPO_PATH_NONE; t++)
        if (strcmp(name, pd_topo_path_type_name((pd_topo_path_type)t)) == 0) {
            *out = (pd_topo_path_type)t;
            return PD_OK;
        }
    return PD_ERROR(PD_EFORMAT, "%s: unknown path type \"%s\" (SELF, NVL, PCI, PHB, SYS or NONE)", where, name);
}

/* A rows x cols path matrix (absent: all NONE). */
static pd_status paths_from_json(const json_t *obj, const char *key, const char *where, int rows, int cols,
                                 pd_topo_path **out)
{
    static const char *const keys[] = {"types", "bandwidth_bytes_per_s", NULL};
    char at[WHERE_BYTES], row[WHERE_BYTES], cell[WHERE_BYTES];
    json_t *m = json_object_get(obj, key), *types, *bws;
    size_t n;

    if (!(*out = calloc((size_t)(rows * cols > 0 ? rows * cols : 1), sizeof(**out))))
        return PD_ERROR(PD_ENOMEM, "%s: out of memory", where);
    for (int i = 0; i < rows * cols; i++)
        (*out)[i].type = PD_TOPO_PATH_NONE;
    if (!m)
        return PD_OK;
    pd_json_where(at, sizeof(at), where, key, -1);
    PD_CHECK(pd_json_check_keys(m, at, keys));
    PD_CHECK(pd_json_get_array(m, "types", at, &types, &n));
    if ((int)n != rows)
        return PD_ERROR(PD_EFORMAT, "%s.types: expected %d rows, got %zu", at, rows, n);
    PD_CHECK(pd_json_get_array(m, "bandwidth_bytes_per_s", at, &bws, &n));
    if ((int)n != rows)
        return PD_ERROR(PD_EFORMAT, "%s.bandwidth_bytes_per_s: expected %d rows, got %zu", at, rows, n);
    for (int i = 0; i < rows; i++) {
        json_t *tr = json_array_get(types, (size_t)i), *br = json_array_get(bws, (size_t)i);
        size_t tn, bn;
        pd_json_where(row, sizeof(row), at, "types", i);
        PD_CHECK(pd_json_expect_array(tr, row, &tn));
        pd_json_where(row, sizeof(row), at, "bandwidth_bytes_per_s", i);
        PD_CHECK(pd_json_expect_array(br, row, &bn));
        if ((int)tn != cols || (int)bn != cols)
            return PD_ERROR(PD_EFORMAT, "%s: row %d: expected %d columns", at, i, cols);
        for (int j = 0; j < cols; j++) {
            const char *name;
            pd_topo_path *p = &(*out)[i * cols + j];
            pd_json_where(cell, sizeof(cell), row, NULL, j);
            PD_CHECK(pd_json_as_double(json_array_get(br, (size_t)j), cell, PD_JSON_NONNEGATIVE, &p->bytes_per_s));
            pd_json_where(row, sizeof(row), at, "types", i);
            pd_json_where(cell, sizeof(cell), row, NULL, j);
            PD_CHECK(pd_json_as_string(json_array_get(tr, (size_t)j), cell, &name));
            PD_CHECK(path_type_from_name(name, cell, &p->type));
            PD_TOPO_SET(p->source, "file");
        }
    }
    return PD_OK;
}

static pd_status fill_from_json(pd_topo *t, const json_t *o, const char *where)
{
    static const char *const keys[] = {"hostname", "origin", "packages", "cores", "pus", "numa_nodes",
                                       "memory_bandwidth_bytes_per_s", "memory_bandwidth_source", "gpus", "nics",
                                       "gpu_paths", "gpu_nic_paths", "worker", "workers", "levels", NULL};
    char at[WHERE_BYTES];
    json_t *levels;

    PD_CHECK(pd_json_expect_object(o, where));
    PD_CHECK(pd_json_check_keys(o, where, keys));
    PD_CHECK(copy_string(o, "hostname", where, "", t->hostname, sizeof(t->hostname)));
    PD_CHECK(copy_string(o, "origin", where, "file", t->origin, sizeof(t->origin)));
    PD_CHECK(pd_json_opt_int(o, "packages", where, 0, 1 << 20, 1, &t->packages));
    PD_CHECK(pd_json_opt_int(o, "cores", where, 0, 1 << 24, 0, &t->cores));
    PD_CHECK(pd_json_opt_int(o, "pus", where, 0, 1 << 24, 0, &t->pus));
    PD_CHECK(read_array(o, "numa_nodes", where, sizeof(pd_topo_numa), numa_from_json, (void **)&t->numa, &t->n_numa));
    if (json_object_get(o, "memory_bandwidth_bytes_per_s")) {
        PD_CHECK(get_bandwidth(o, "memory_bandwidth_bytes_per_s", where, &t->memory_bytes_per_s));
        PD_CHECK(copy_string(o, "memory_bandwidth_source", where, "file", t->memory_source, sizeof(t->memory_source)));
    } else {
        t->memory_bytes_per_s = PD_TOPO_DEFAULT_MEMORY_BW;
        PD_TOPO_SET(t->memory_source, "default");
    }
    PD_CHECK(read_array(o, "gpus", where, sizeof(pd_topo_gpu), gpu_from_json, (void **)&t->gpus, &t->n_gpus));
    PD_CHECK(read_array(o, "nics", where, sizeof(pd_topo_nic), nic_from_json, (void **)&t->nics, &t->n_nics));
    for (int i = 0; i < t->n_gpus; i++)
        if (t->gpus[i].nic >= t->n_nics)
            return PD_ERROR(PD_EFORMAT, "%s: gpus[%d].nic: %d is not a NIC index (%d NICs)", where, i, t->gpus[i].nic,
                            t->n_nics);
    PD_CHECK(paths_from_json(o, "gpu_paths", where, t->n_gpus, t->n_gpus, &t->gpu_paths));
    PD_CHECK(paths_from_json(o, "gpu_nic_paths", where, t->n_gpus, t->n_nics, &t->gpu_nic_paths));
    PD_CHECK(copy_string(o, "worker", where, t->n_gpus ? "gpu" : "socket", t->worker, sizeof(t->worker)));
    PD_CHECK(pd_json_opt_int(o, "workers", where, 1, 1 << 20, t->n_gpus ? t->n_gpus : t->packages ? t->packages : 1,
                             &t->workers));
    if ((levels = json_object_get(o, "levels"))) {
        pd_json_where(at, sizeof(at), where, "levels", -1);
        PD_CHECK(pd_topo_levels_from_json(levels, at, t->levels, &t->n_levels));
    }
    return PD_OK;
}

pd_status pd_topo_from_json(const json_t *o, const char *where, pd_topo **out)
{
    pd_topo *t;
    pd_status s;

    PD_CHECK(pd_topo_alloc(&t));
    if ((s = fill_from_json(t, o, where)) != PD_OK) {
        pd_topo_destroy(t);
        return s;
    }
    *out = t;
    return PD_OK;
}
