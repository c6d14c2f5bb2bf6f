/* Best paths between GPUs and from GPUs to NICs, and each GPU's nearest NIC,
 * in the manner of NCCL's paths.cc: a path's bandwidth is its narrowest
 * link; PCIe paths follow the tree (up to the common bridge or CPU, across
 * the inter-socket link between CPUs); NVLink paths go GPU to GPU directly
 * or through the NVSwitch fabric; the wider path wins, NVLink on a tie. */
#include "config.h"

#include <stdlib.h>

#include "topology/topo_int.h"

const char *pd_topo_path_type_name(pd_topo_path_type type)
{
    static const char *const names[] = {"SELF", "NVL", "PCI", "PHB", "SYS", "NONE"};
    return (unsigned)type <= PD_TOPO_PATH_NONE ? names[type] : "?";
}

const pd_topo_path *pd_topo_gpu_path(const pd_topo *t, int i, int j) { return &t->gpu_paths[i * t->n_gpus + j]; }

const pd_topo_path *pd_topo_gpu_nic_path(const pd_topo *t, int i, int k)
{
    return &t->gpu_nic_paths[i * t->n_nics + k];
}

/* Total bandwidth of the links of `kind` between a and b (0 if none). */
static double link_bw(const pd_topo *t, pd_topo_link_kind kind, int a, int b)
{
    double sum = 0;
    for (int i = 0; i < t->n_links; i++) {
        const pd_topo_link *l = &t->links[i];
        if (l->kind == kind && ((l->a == a && l->b == b) || (l->a == b && l->b == a)))
            sum += l->bytes_per_s;
    }
    return sum;
}

static double min_bw(double a, double b) { return a < b ? a : b; }

/* The root CPU of v and, on the way, the narrowest uplink and the hops,
 * stopping at `stop` (not counted) when it is met. */
static int climb(const pd_topo *t, int v, int stop, pd_topo_path *p)
{
    while (v != stop && t->vertices[v].parent >= 0) {
        const pd_topo_link *up = &t->links[t->vertices[v].uplink];
        if (up->bytes_per_s < p->bytes_per_s) {
            p->bytes_per_s = up->bytes_per_s;
            PD_TOPO_SET(p->source, up->source);
        }
        p->hops++;
        v = t->vertices[v].parent;
    }
    return v;
}

static bool is_ancestor(const pd_topo *t, int anc, int v)
{
    for (; v >= 0; v = t->vertices[v].parent)
        if (v == anc)
            return true;
    return false;
}

/* The PCIe path between two device vertices. */
static pd_topo_path pci_path(const pd_topo *t, int a, int b)
{
    pd_topo_path p = {.type = PD_TOPO_PATH_NONE, .bytes_per_s = 1e300};
    int lca = a;

    while (lca >= 0 && !is_ancestor(t, lca, b))
        lca = t->vertices[lca].parent;
    if (lca >= 0) {
        climb(t, a, lca, &p);
        climb(t, b, lca, &p);
        p.type = t->vertices[lca].kind == PD_TOPO_CPU ? PD_TOPO_PATH_PHB : PD_TOPO_PATH_PCI;
        return p;
    }
    int cpu_a = climb(t, a, -1, &p);
    int cpu_b = climb(t, b, -1, &p);
    double smp = link_bw(t, PD_TOPO_LINK_SMP, cpu_a, cpu_b);
    if (smp <= 0)
        return (pd_topo_path){.type = PD_TOPO_PATH_NONE};
    if (smp < p.bytes_per_s) {
        p.bytes_per_s = smp;
        PD_TOPO_SET(p.source, "default");
    }
    p.hops++;
    p.type = PD_TOPO_PATH_SYS;
    return p;
}

static pd_topo_path gpu_gpu_path(const pd_topo *t, int i, int j)
{
    int a = t->gpus[i].vertex, b = t->gpus[j].vertex;
    pd_topo_path best = pci_path(t, a, b);
    double direct = link_bw(t, PD_TOPO_LINK_NVLINK, a, b);

    if (direct > 0 && direct >= best.bytes_per_s)
        best = (pd_topo_path){.type = PD_TOPO_PATH_NVL, .bytes_per_s = direct, .hops = 1, .source = "hwloc-nvlink"};
    for (int v = 0; v < t->n_vertices; v++)
        if (t->vertices[v].kind == PD_TOPO_NVSWITCH) {
            double bw = min_bw(link_bw(t, PD_TOPO_LINK_NVLINK, a, v), link_bw(t, PD_TOPO_LINK_NVLINK, b, v));
            if (bw > 0 && (bw > best.bytes_per_s || (bw == best.bytes_per_s && best.type != PD_TOPO_PATH_NVL)))
                best = (pd_topo_path){.type = PD_TOPO_PATH_NVL, .bytes_per_s = bw, .hops = 2, .source = "hwloc-nvlink"};
        }
    return best;
}

/* The nearest NIC of every GPU: among RDMA NICs if the node has any, the
 * widest path (its NIC's rate included), then the nearest kind, then the
 * NIC serving fewer GPUs so far, then the first. */
static void choose_nics(pd_topo *t)
{
    bool any_rdma = false;
    int *load = calloc((size_t)(t->n_nics ? t->n_nics : 1), sizeof(*load));

    for (int k = 0; k < t->n_nics; k++)
        any_rdma |= t->nics[k].rdma;
    for (int i = 0; i < t->n_gpus; i++) {
        int best = -1;
        double best_bw = 0;
        for (int k = 0; k < t->n_nics; k++) {
            const pd_topo_path *p = pd_topo_gpu_nic_path(t, i, k);
            double bw = min_bw(p->bytes_per_s, t->nics[k].bytes_per_s);
            if ((any_rdma && !t->nics[k].rdma) || p->type == PD_TOPO_PATH_NONE)
                continue;
            if (best < 0 || bw > best_bw ||
                (bw == best_bw && (p->type < pd_topo_gpu_nic_path(t, i, best)->type ||
                                   (p->type == pd_topo_gpu_nic_path(t, i, best)->type && load && load[k] < load[best])))) {
                best = k;
                best_bw = bw;
            }
        }
        t->gpus[i].nic = best;
        if (best >= 0 && load)
            load[best]++;
    }
    free(load);
}

pd_status pd_topo_compute_paths(pd_topo *t)
{
    size_t gg = (size_t)t->n_gpus * (size_t)t->n_gpus, gn = (size_t)t->n_gpus * (size_t)t->n_nics;

    free(t->gpu_paths);
    free(t->gpu_nic_paths);
    t->gpu_paths = calloc(gg ? gg : 1, sizeof(*t->gpu_paths));
    t->gpu_nic_paths = calloc(gn ? gn : 1, sizeof(*t->gpu_nic_paths));
    if (!t->gpu_paths || !t->gpu_nic_paths)
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    for (int i = 0; i < t->n_gpus; i++) {
        for (int j = 0; j < t->n_gpus; j++)
            t->gpu_paths[i * t->n_gpus + j] =
                i == j ? (pd_topo_path){.type = PD_TOPO_PATH_SELF} : gpu_gpu_path(t, i, j);
        for (int k = 0; k < t->n_nics; k++)
            t->gpu_nic_paths[i * t->n_nics + k] = pci_path(t, t->gpus[i].vertex, t->nics[k].vertex);
    }
    choose_nics(t);
    return PD_OK;
}
