/* The text form of a node: the tree with link bandwidths and their
 * sources, the GPU path matrix, NICs, each GPU's nearest NIC, the levels.
 * The golden tests (the tests/topology/ expected files) compare this text. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "core/pd_units.h"
#include "topology/topo_int.h"

static const char *bw(double bytes_per_s, char *buf, size_t size)
{
    return pd_bandwidth_format(bytes_per_s, buf, size);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static const char *kind_name(pd_topo_vertex_kind kind)
{
    switch (kind) {
    case PD_TOPO_CPU: return "CPU";
    case PD_TOPO_PCI_SWITCH: return "PCI bridge";
    case PD_TOPO_GPU: return "GPU";
    case PD_TOPO_NIC: return "NIC";
    default: return "NVSwitch";
    }
}

static void print_subtree(const pd_topo *t, int v, int depth, FILE *out)
{
    char b[32];

    for (int c = 0; c < t->n_vertices; c++) {
        const pd_topo_vertex *x = &t->vertices[c];
        if (x->parent != v)
            continue;
        const pd_topo_link *up = &t->links[x->uplink];
        fprintf(out, "%*s%s %s, PCIe %s (%s)\n", 2 * depth, "", kind_name(x->kind), x->name,
                bw(up->bytes_per_s, b, sizeof(b)), up->source);
        print_subtree(t, c, depth + 1, out);
    }
}

static void print_tree(const pd_topo *t, FILE *out)
{
    char b[32];

    fprintf(out, "tree:\n");
    for (int i = 0; i < t->n_numa; i++) {
        const pd_topo_numa *m = &t->numa[i];
        fprintf(out, "  CPU numa%d: package %d, %d hardware threads, %.1f GiB\n", m->os_index, m->package, m->pus,
                (double)m->memory_bytes / (1024.0 * 1024.0 * 1024.0));
        for (int v = 0; v < t->n_vertices; v++)
            if (t->vertices[v].kind == PD_TOPO_CPU && t->vertices[v].numa == m->os_index)
                print_subtree(t, v, 2, out);
    }
    for (int i = 0; i < t->n_links; i++) {
        const pd_topo_link *l = &t->links[i];
        if (l->kind == PD_TOPO_LINK_PCIE)
            continue;
        fprintf(out, "  %s %s - %s: %s (%s)\n", l->kind == PD_TOPO_LINK_SMP ? "inter-socket" : "NVLink",
                t->vertices[l->a].name, t->vertices[l->b].name, bw(l->bytes_per_s, b, sizeof(b)), l->source);
    }
}

static void print_gpus(const pd_topo *t, FILE *out)
{
    char b[32];

    if (t->n_gpus == 0) {
        fprintf(out, "GPUs: none (no NVIDIA GPU on the PCI bus)\n");
        return;
    }
    fprintf(out, "GPUs: %d\n", t->n_gpus);
    for (int i = 0; i < t->n_gpus; i++) {
        const pd_topo_gpu *g = &t->gpus[i];
        fprintf(out, "  %-8s %s  %s  numa%d  PCIe %s (%s)\n", g->name, g->pci_busid, g->model, g->numa,
                bw(g->pcie_bytes_per_s, b, sizeof(b)), g->pcie_source);
    }
    fprintf(out, "GPU paths (type, GB/s of the narrowest link):\n%10s", "");
    for (int j = 0; j < t->n_gpus; j++)
        fprintf(out, " %-9s", t->gpus[j].name);
    fprintf(out, "\n");
    for (int i = 0; i < t->n_gpus; i++) {
        fprintf(out, "  %-8s", t->gpus[i].name);
        for (int j = 0; j < t->n_gpus; j++) {
            const pd_topo_path *p = pd_topo_gpu_path(t, i, j);
            char cell[40];
            if (p->type == PD_TOPO_PATH_SELF)
                snprintf(cell, sizeof(cell), "-");
            else
                snprintf(cell, sizeof(cell), "%s %.4g", pd_topo_path_type_name(p->type), p->bytes_per_s / 1e9);
            fprintf(out, " %-9s", cell);
        }
        fprintf(out, "\n");
    }
}

static void print_nics(const pd_topo *t, FILE *out)
{
    char b[32];
    int rdma = 0;

    for (int k = 0; k < t->n_nics; k++)
        rdma += t->nics[k].rdma;
    if (t->n_nics == 0)
        fprintf(out, "NICs: none\n");
    else
        fprintf(out, "NICs: %d\n", t->n_nics);
    for (int k = 0; k < t->n_nics; k++) {
        const pd_topo_nic *n = &t->nics[k];
        fprintf(out, "  %-8s %s  %s  numa%d  %s  %s (%s)\n", n->name, n->pci_busid, n->rdma ? "RDMA" : "Ethernet",
                n->numa, n->netdevs[0] ? n->netdevs : "-", bw(n->bytes_per_s, b, sizeof(b)), n->source);
    }
    if (rdma == 0)
        fprintf(out, "RDMA NICs: none (no OpenFabrics device)\n");
    for (int i = 0; i < t->n_gpus && t->n_nics; i++) {
        const pd_topo_gpu *g = &t->gpus[i];
        if (g->nic < 0) {
            fprintf(out, "nearest NIC of %s: none\n", g->name);
            continue;
        }
        const pd_topo_path *p = pd_topo_gpu_nic_path(t, i, g->nic);
        char nb[32];
        fprintf(out, "nearest NIC of %s: %s (path %s %s, NIC %s)\n", g->name, t->nics[g->nic].name,
                pd_topo_path_type_name(p->type), bw(p->bytes_per_s, b, sizeof(b)),
                bw(t->nics[g->nic].bytes_per_s, nb, sizeof(nb)));
    }
}

static void print_levels(const pd_topo *t, FILE *out)
{
    char b[32];

    fprintf(out, "levels inside the node (innermost first; worker: %s, %d per node):\n", t->worker, t->workers);
    for (int i = 0; i < t->n_levels; i++) {
        const pd_cluster_level *l = &t->levels[i];
        fprintf(out, "  %d %-12s fanout %-3d %s, latency %g s (%s)\n", i, l->name, l->fanout,
                bw(l->bandwidth_bytes_per_s, b, sizeof(b)), l->latency_s, l->source);
    }
}

void pd_topo_print(const pd_topo *t, FILE *out)
{
    char b[32];

    fprintf(out, "node %s (%s): packages %d, cores %d, hardware threads %d, NUMA nodes %d\n",
            t->hostname[0] ? t->hostname : "?", base_name(t->origin), t->packages, t->cores, t->pus, t->n_numa);
    fprintf(out, "memory bandwidth per NUMA node: %s (%s)\n", bw(t->memory_bytes_per_s, b, sizeof(b)),
            t->memory_source);
    if (t->n_vertices)
        print_tree(t, out);
    print_gpus(t, out);
    print_nics(t, out);
    print_levels(t, out);
}
