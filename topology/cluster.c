/* The cluster: nodes x workers per node, its levels (a node's own, then the
 * network between nodes), and `*.cluster.json` files. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>

#include "core/pd_units.h"
#include "topology/topo_int.h"

#define WHERE_BYTES 512

void pd_cluster_destroy(pd_cluster *c)
{
    if (!c)
        return;
    pd_topo_destroy(c->node);
    free(c);
}

int pd_cluster_workers(const pd_cluster *c)
{
    int workers = 1;
    for (int i = 0; i < c->n_levels; i++)
        workers *= c->levels[i].fanout;
    return workers;
}

/* The description of `node` without its tree: a copy through its JSON form. */
static pd_status copy_node(const pd_topo *node, pd_topo **out)
{
    json_t *j = pd_topo_to_json(node);
    pd_status s;

    if (!j)
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    s = pd_topo_from_json(j, "node", out);
    json_decref(j);
    return s;
}

/* The network level from the node's NICs: on a GPU node the narrowest of
 * the GPUs' ways out (path to the nearest NIC, the NIC's rate); else the
 * fastest NIC, RDMA first. */
static pd_status network_from_nics(const pd_topo *node, pd_cluster_level *l, bool *rdma)
{
    int chosen = -1;

    if (node->n_gpus > 0) {
        for (int i = 0; i < node->n_gpus; i++) {
            int k = node->gpus[i].nic;
            if (k < 0)
                continue;
            const pd_topo_path *p = pd_topo_gpu_nic_path(node, i, k);
            double bw = node->nics[k].bytes_per_s;
            const char *source = node->nics[k].source;
            if (p->type != PD_TOPO_PATH_NONE && p->bytes_per_s < bw) {
                bw = p->bytes_per_s;
                source = p->source;
            }
            if (chosen < 0 || bw < l->bandwidth_bytes_per_s) {
                l->bandwidth_bytes_per_s = bw;
                PD_TOPO_SET(l->source, source);
                *rdma = node->nics[k].rdma;
            }
            chosen = k;
        }
    } else {
        for (int k = 0; k < node->n_nics; k++) {
            const pd_topo_nic *n = &node->nics[k];
            if (chosen < 0 || (n->rdma && !node->nics[chosen].rdma) ||
                (n->rdma == node->nics[chosen].rdma && n->bytes_per_s > node->nics[chosen].bytes_per_s))
                chosen = k;
        }
        if (chosen >= 0) {
            l->bandwidth_bytes_per_s = node->nics[chosen].bytes_per_s;
            PD_TOPO_SET(l->source, node->nics[chosen].source);
            *rdma = node->nics[chosen].rdma;
        }
    }
    if (chosen < 0)
        return PD_ERROR(PD_EINVAL, "the node has no NIC%s to reach other nodes: give the network's bandwidth",
                        node->n_gpus ? " near its GPUs" : "");
    return PD_OK;
}

pd_status pd_cluster_build(const pd_topo *node, int nodes, const pd_cluster_network *net, pd_cluster **out)
{
    pd_cluster *c;
    pd_status s;
    bool rdma = false;

    if (nodes < 1)
        return PD_ERROR(PD_EINVAL, "a cluster needs at least one node, got %d", nodes);
    if (!(c = calloc(1, sizeof(*c))))
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    PD_CHECK_GOTO(copy_node(node, &c->node), s, fail);
    c->nodes = nodes;
    c->workers_per_node = node->workers;
    for (int i = 0; i < node->n_levels; i++)
        if (nodes == 1 || node->levels[i].fanout > 1)
            c->levels[c->n_levels++] = node->levels[i];
    if (nodes > 1) {
        pd_cluster_level *l = &c->levels[c->n_levels];
        if (c->n_levels >= PD_CLUSTER_MAX_LEVELS) {
            s = PD_ERROR(PD_EINVAL, "a cluster has at most %d levels", PD_CLUSTER_MAX_LEVELS);
            goto fail;
        }
        *l = (pd_cluster_level){.fanout = nodes};
        PD_TOPO_SET(l->name, "network");
        if (net && net->bandwidth_bytes_per_s > 0) {
            l->bandwidth_bytes_per_s = net->bandwidth_bytes_per_s;
            PD_TOPO_SET(l->source, "user");
            for (int k = 0; k < node->n_nics; k++)
                rdma |= node->nics[k].rdma;
        } else {
            PD_CHECK_GOTO(network_from_nics(node, l, &rdma), s, fail);
        }
        l->latency_s = net && net->latency_s >= 0 ? net->latency_s
                       : rdma                     ? PD_TOPO_DEFAULT_RDMA_LATENCY
                                                  : PD_TOPO_DEFAULT_ETH_LATENCY;
        c->n_levels++;
    }
    const char *origin = strrchr(node->origin, '/') ? strrchr(node->origin, '/') + 1 : node->origin;
    snprintf(c->name, sizeof(c->name), "%s", node->hostname[0] ? node->hostname : "cluster");
    snprintf(c->description, sizeof(c->description), "%d node%s of %d %s worker%s (%.160s)", nodes,
             nodes > 1 ? "s" : "", node->workers, node->worker, node->workers > 1 ? "s" : "", origin);
    *out = c;
    return PD_OK;
fail:
    pd_cluster_destroy(c);
    return s;
}

json_t *pd_cluster_to_json(const pd_cluster *c)
{
    json_t *root = json_object();

    json_object_set_new(root, "format", json_string("pipedream-cluster"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "name", json_string(c->name));
    json_object_set_new(root, "description", json_string(c->description));
    json_object_set_new(root, "nodes", json_integer(c->nodes));
    json_object_set_new(root, "workers_per_node", json_integer(c->workers_per_node));
    json_object_set_new(root, "levels", pd_topo_levels_to_json(c->levels, c->n_levels));
    if (c->node)
        json_object_set_new(root, "node", pd_topo_to_json(c->node));
    return root;
}

pd_status pd_cluster_write_json(const pd_cluster *c, const char *path)
{
    json_t *root = pd_cluster_to_json(c);
    pd_status s = pd_json_write_file(path, root);

    json_decref(root);
    return s;
}

pd_status pd_cluster_from_json(const json_t *root, const char *path, pd_cluster *c)
{
    static const char *const keys[] = {"format", "version", "name", "description", "nodes", "workers_per_node",
                                       "levels", "node", NULL};
    char at[WHERE_BYTES];
    const char *text;
    json_t *levels, *node;
    int version, workers;

    PD_CHECK(pd_json_expect_object(root, path));
    PD_CHECK(pd_json_check_keys(root, path, keys));
    PD_CHECK(pd_json_opt_string(root, "format", path, "pipedream-cluster", &text));
    if (strcmp(text, "pipedream-cluster") != 0)
        return PD_ERROR(PD_EFORMAT, "%s: format: expected \"pipedream-cluster\", got \"%s\"", path, text);
    PD_CHECK(pd_json_opt_int(root, "version", path, 1, 1, 1, &version));
    PD_CHECK(pd_json_opt_string(root, "name", path, "", &text));
    snprintf(c->name, sizeof(c->name), "%s", text);
    PD_CHECK(pd_json_opt_string(root, "description", path, "", &text));
    snprintf(c->description, sizeof(c->description), "%s", text);
    PD_CHECK(pd_json_get(root, "levels", path, &levels));
    pd_json_where(at, sizeof(at), path, "levels", -1);
    PD_CHECK(pd_topo_levels_from_json(levels, at, c->levels, &c->n_levels));
    workers = pd_cluster_workers(c);
    PD_CHECK(pd_json_opt_int(root, "nodes", path, 1, 1 << 20, 1, &c->nodes));
    PD_CHECK(pd_json_opt_int(root, "workers_per_node", path, 1, 1 << 20, workers / c->nodes, &c->workers_per_node));
    if (c->nodes * c->workers_per_node != workers)
        return PD_ERROR(PD_EFORMAT, "%s: nodes x workers_per_node = %d x %d does not match the levels' %d workers", path,
                        c->nodes, c->workers_per_node, workers);
    if ((node = json_object_get(root, "node"))) {
        pd_json_where(at, sizeof(at), path, "node", -1);
        PD_CHECK(pd_topo_from_json(node, at, &c->node));
        PD_TOPO_SET(c->node->origin, path);
    }
    return PD_OK;
}

pd_status pd_cluster_read_json(const char *path, pd_cluster **out)
{
    pd_cluster *c;
    json_t *root;
    pd_status s;

    PD_CHECK(pd_json_load_file(path, &root));
    if (!(c = calloc(1, sizeof(*c)))) {
        json_decref(root);
        return PD_ERROR(PD_ENOMEM, "%s: out of memory", path);
    }
    s = pd_cluster_from_json(root, path, c);
    json_decref(root);
    if (s != PD_OK) {
        pd_cluster_destroy(c);
        return s;
    }
    *out = c;
    return PD_OK;
}

pd_status pd_cluster_read_levels(const char *path, pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS], int *n_levels)
{
    pd_cluster *c;

    PD_CHECK(pd_cluster_read_json(path, &c));
    memcpy(levels, c->levels, sizeof(c->levels));
    *n_levels = c->n_levels;
    pd_cluster_destroy(c);
    return PD_OK;
}

pd_status pd_cluster_print_json(const pd_cluster *c, FILE *out)
{
    json_t *root = pd_cluster_to_json(c);
    int rc = json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (rc != 0 || fputc('\n', out) == EOF)
        return PD_ERROR(PD_EIO, "cannot write the cluster's JSON");
    return PD_OK;
}

void pd_cluster_print(const pd_cluster *c, FILE *out)
{
    char b[32];

    fprintf(out, "cluster %s: %d x %d = %d workers (nodes x workers per node)\n", c->name[0] ? c->name : "?",
            c->nodes, c->workers_per_node, pd_cluster_workers(c));
    if (c->description[0])
        fprintf(out, "  %s\n", c->description);
    fprintf(out, "levels (innermost first):\n");
    for (int i = 0; i < c->n_levels; i++) {
        const pd_cluster_level *l = &c->levels[i];
        fprintf(out, "  %d %-12s fanout %-3d %s, latency %g s (%s)\n", i, l->name, l->fanout,
                pd_bandwidth_format(l->bandwidth_bytes_per_s, b, sizeof(b)), l->latency_s, l->source);
    }
}
