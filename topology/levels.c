/* PipeDream's levels inside a node. GPUs are grouped by the bandwidth
 * between them: for each bandwidth met between two GPUs, widest first, the
 * GPUs joined by paths at least that wide form groups; when the groups are
 * all the same size and larger than the last level's, they make a level
 * (fanout: previous groups per group; bandwidth: the narrowest path joining
 * two of them). Eight GPUs in two NVLink cliques of four joined over PCIe
 * give {nvlink, 4} then {socket, 2}; a DGX-2 gives {nvlink, 16}. A node
 * without GPUs has one worker per CPU package, joined through memory. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "topology/topo_int.h"

static const char *level_name(pd_topo_path_type worst)
{
    switch (worst) {
    case PD_TOPO_PATH_NVL: return "nvlink";
    case PD_TOPO_PATH_PCI: return "pcie";
    case PD_TOPO_PATH_PHB: return "host-bridge";
    default: return "socket";
    }
}

static int find(int *parent, int i)
{
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

static int compare_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Groups of GPUs joined by paths of at least `bw`: group[i] is a root id;
 * returns the common size of the groups, or 0 if sizes differ. */
static int group_at(const pd_topo *t, double bw, int *group)
{
    int n = t->n_gpus, size = 0;

    for (int i = 0; i < n; i++)
        group[i] = i;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (pd_topo_gpu_path(t, i, j)->bytes_per_s >= bw)
                group[find(group, i)] = find(group, j);
    for (int i = 0; i < n; i++) {
        int members = 0, root = find(group, i);
        for (int j = 0; j < n; j++)
            members += find(group, j) == root;
        if (size && members != size)
            return 0;
        size = members;
    }
    for (int i = 0; i < n; i++)
        group[i] = find(group, i);
    return size;
}

static pd_status gpu_levels(pd_topo *t)
{
    int n = t->n_gpus, n_bw = 0, prev_size = 1;
    double *bws = malloc((size_t)n * (size_t)n * sizeof(*bws));
    int *prev = malloc((size_t)n * sizeof(*prev)), *group = malloc((size_t)n * sizeof(*group));
    pd_status s = PD_OK;

    if (!bws || !prev || !group) {
        s = PD_ERROR(PD_ENOMEM, "topology: out of memory");
        goto release;
    }
    for (int i = 0; i < n; i++) {
        prev[i] = i;
        for (int j = i + 1; j < n; j++)
            bws[n_bw++] = pd_topo_gpu_path(t, i, j)->bytes_per_s;
    }
    qsort(bws, (size_t)n_bw, sizeof(*bws), compare_desc);
    for (int b = 0; b < n_bw && prev_size < n && t->n_levels < PD_CLUSTER_MAX_LEVELS; b++) {
        int size;
        if ((b > 0 && bws[b] == bws[b - 1]) || (size = group_at(t, bws[b], group)) <= prev_size ||
            size % prev_size != 0)
            continue;
        pd_cluster_level *l = &t->levels[t->n_levels++];
        const pd_topo_path *narrowest = NULL;
        pd_topo_path_type worst = PD_TOPO_PATH_SELF;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (group[i] == group[j] && prev[i] != prev[j]) {
                    const pd_topo_path *p = pd_topo_gpu_path(t, i, j);
                    if (!narrowest || p->bytes_per_s < narrowest->bytes_per_s)
                        narrowest = p;
                    if (p->type > worst)
                        worst = p->type;
                }
        PD_TOPO_SET(l->name, level_name(worst));
        l->fanout = size / prev_size;
        l->bandwidth_bytes_per_s = narrowest->bytes_per_s;
        l->latency_s = PD_TOPO_DEFAULT_INTRA_LATENCY;
        PD_TOPO_SET(l->source, narrowest->source);
        memcpy(prev, group, (size_t)n * sizeof(*prev));
        prev_size = size;
    }
release:
    free(bws);
    free(prev);
    free(group);
    return s;
}

pd_status pd_topo_derive_levels(pd_topo *t)
{
    pd_cluster_level *l = &t->levels[0];

    t->n_levels = 0;
    if (t->n_gpus > 1) {
        PD_TOPO_SET(t->worker, "gpu");
        t->workers = t->n_gpus;
        return gpu_levels(t);
    }
    *l = (pd_cluster_level){.fanout = 1, .latency_s = PD_TOPO_DEFAULT_INTRA_LATENCY};
    t->n_levels = 1;
    if (t->n_gpus == 1) {
        /* One GPU: the level inside the node is its own PCIe link. */
        PD_TOPO_SET(t->worker, "gpu");
        t->workers = 1;
        PD_TOPO_SET(l->name, "gpu");
        l->bandwidth_bytes_per_s = t->gpus[0].pcie_bytes_per_s;
        PD_TOPO_SET(l->source, t->gpus[0].pcie_source);
        return PD_OK;
    }
    PD_TOPO_SET(t->worker, "socket");
    t->workers = t->packages > 0 ? t->packages : 1;
    PD_TOPO_SET(l->name, "socket");
    l->fanout = t->workers;
    l->bandwidth_bytes_per_s = t->memory_bytes_per_s;
    PD_TOPO_SET(l->source, t->memory_source);
    return PD_OK;
}
