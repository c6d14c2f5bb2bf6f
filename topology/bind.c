/* Binding a rank to its place: the GPU of its local rank, that GPU's
 * nearest NIC, and the CPUs and memory of the GPU's NUMA node (a CPU
 * package's on a CPU-only node), through hwloc; or to cores and a NUMA
 * node chosen by the caller (the pipeline runtime's src/runtime/binding.c). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <hwloc.h>

#include "topology/topo_int.h"

/* Binds every thread of the process to `cpuset` (NULL: left) and its
 * memory to `nodeset` (NULL: left), NUMA node `node` for the messages. */
static pd_status bind_process(const pd_topo *t, hwloc_const_cpuset_t cpuset, hwloc_const_nodeset_t nodeset, int node)
{
    hwloc_topology_t hw = t->hwloc;

    if (cpuset && hwloc_set_cpubind(hw, cpuset, HWLOC_CPUBIND_PROCESS) != 0)
        return PD_ERROR(PD_EDEVICE, "bind: hwloc_set_cpubind to numa%d failed: %s", node, strerror(errno));
    /* With one NUMA node there is nothing to choose; containers often
     * forbid mbind, so only a multi-node machine needs it to work. */
    if (nodeset &&
        hwloc_set_membind(hw, nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0 &&
        t->n_numa > 1)
        return PD_ERROR(PD_EDEVICE, "bind: hwloc_set_membind to numa%d failed: %s", node, strerror(errno));
    return PD_OK;
}

pd_status pd_topo_bind(const pd_topo *t, int local_rank, int *gpu, int *nic, int *numa)
{
    hwloc_topology_t hw = t->hwloc;
    hwloc_obj_t place = NULL;
    int g = -1, k = -1, node = -1;

    if (!hw)
        return PD_ERROR(PD_ENOTSUP, "binding needs the topology of this machine, not one read from %s", t->origin);
    if (local_rank < 0)
        return PD_ERROR(PD_EINVAL, "bind: local rank %d < 0", local_rank);
    if (t->n_gpus > 0) {
        g = local_rank % t->n_gpus;
        k = t->gpus[g].nic;
        node = t->gpus[g].numa;
        place = node >= 0 ? hwloc_get_numanode_obj_by_os_index(hw, (unsigned)node) : NULL;
    } else {
        int packages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
        place = packages > 0 ? hwloc_get_obj_by_type(hw, HWLOC_OBJ_PACKAGE, (unsigned)(local_rank % packages)) : NULL;
        node = place && place->nodeset ? hwloc_bitmap_first(place->nodeset) : -1;
        for (int i = 0; i < t->n_nics && k < 0; i++)
            if (t->nics[i].numa == node)
                k = i;
    }
    if (!place)
        place = hwloc_get_root_obj(hw);
    PD_CHECK(bind_process(t, place->cpuset, place->nodeset, node));
    if (gpu)
        *gpu = g;
    if (nic)
        *nic = k;
    if (numa)
        *numa = node;
    return PD_OK;
}

pd_status pd_topo_bind_cores(const pd_topo *t, int first_core, int n_cores, int numa)
{
    hwloc_topology_t hw = t->hwloc;
    hwloc_bitmap_t cpus = NULL;
    hwloc_obj_t node = NULL;
    int total;
    pd_status s;

    if (!hw)
        return PD_ERROR(PD_ENOTSUP, "binding needs the topology of this machine, not one read from %s", t->origin);
    total = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
    if (n_cores < 0 || first_core < 0 || (n_cores > 0 && first_core > total - n_cores))
        return PD_ERROR(PD_EINVAL, "bind: cores %d-%d: this machine has cores 0-%d", first_core,
                        first_core + n_cores - 1, total - 1);
    if (numa >= 0 && !(node = hwloc_get_numanode_obj_by_os_index(hw, (unsigned)numa)))
        return PD_ERROR(PD_EINVAL, "bind: this machine has no NUMA node %d", numa);
    if (n_cores > 0) {
        if (!(cpus = hwloc_bitmap_alloc()))
            return PD_ERROR(PD_ENOMEM, "bind: out of memory");
        for (int i = first_core; i < first_core + n_cores; i++)
            hwloc_bitmap_or(cpus, cpus, hwloc_get_obj_by_type(hw, HWLOC_OBJ_CORE, (unsigned)i)->cpuset);
    }
    s = bind_process(t, cpus, node ? node->nodeset : NULL, numa);
    hwloc_bitmap_free(cpus);
    return s;
}
