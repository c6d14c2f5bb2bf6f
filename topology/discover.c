/* Discovery: an hwloc topology (live or from XML) into a pd_topo of typed
 * vertices and links with bandwidths: one CPU vertex per NUMA node, the
 * PCIe bridges leading to GPUs and NICs, the GPUs (NVIDIA display or 3D
 * controllers, named after their CUDA or NVML device where hwloc has one),
 * the NICs (PCI devices with network or OpenFabrics devices) and NVLink
 * from hwloc's NVLinkBandwidth distances, all NVSwitches merged into one
 * vertex as NCCL merges them. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hwloc.h>

#include "topology/topo_int.h"

#define NVIDIA_VENDOR 0x10de
#define MEBIBYTE 1048576.0

/* ---- the pd_topo builders shared with the JSON reader ---- */

pd_status pd_topo_alloc(pd_topo **out)
{
    pd_topo *t = calloc(1, sizeof(*t));
    if (!t)
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    PD_TOPO_SET(t->worker, "gpu");
    *out = t;
    return PD_OK;
}

pd_status pd_topo_add_vertex(pd_topo *t, pd_topo_vertex_kind kind, const char *name, int numa, int *index)
{
    pd_topo_vertex *v = realloc(t->vertices, (size_t)(t->n_vertices + 1) * sizeof(*v));
    if (!v)
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    t->vertices = v;
    v += t->n_vertices;
    *v = (pd_topo_vertex){.kind = kind, .numa = numa, .parent = -1, .uplink = -1};
    PD_TOPO_SET(v->name, name);
    *index = t->n_vertices++;
    return PD_OK;
}

pd_status pd_topo_add_link(pd_topo *t, pd_topo_link_kind kind, int a, int b, double bytes_per_s, const char *source,
                           int *index)
{
    pd_topo_link *l = realloc(t->links, (size_t)(t->n_links + 1) * sizeof(*l));
    if (!l)
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    t->links = l;
    l += t->n_links;
    *l = (pd_topo_link){.kind = kind, .a = a, .b = b, .bytes_per_s = bytes_per_s};
    PD_TOPO_SET(l->source, source);
    if (index)
        *index = t->n_links;
    t->n_links++;
    return PD_OK;
}

void pd_topo_destroy(pd_topo *t)
{
    if (!t)
        return;
    if (t->hwloc)
        hwloc_topology_destroy(t->hwloc);
    free(t->numa);
    free(t->vertices);
    free(t->links);
    free(t->gpus);
    free(t->nics);
    free(t->gpu_paths);
    free(t->gpu_nic_paths);
    free(t);
}

/* ---- hwloc objects ---- */

static void busid(hwloc_obj_t pci, char *buf, size_t size)
{
    const struct hwloc_pcidev_attr_s *a =
        pci->type == HWLOC_OBJ_BRIDGE ? &pci->attr->bridge.upstream.pci : &pci->attr->pcidev;
    snprintf(buf, size, "%04x:%02x:%02x.%01x", (unsigned)a->domain, (unsigned)a->bus, (unsigned)a->dev,
             (unsigned)a->func);
}

static bool is_gpu(hwloc_obj_t pci)
{
    return pci->attr->pcidev.vendor_id == NVIDIA_VENDOR && (pci->attr->pcidev.class_id >> 8) == 0x03;
}

static bool is_nvswitch(hwloc_obj_t pci)
{
    return (pci->subtype && strcmp(pci->subtype, "NVSwitch") == 0) ||
           (pci->attr->pcidev.vendor_id == NVIDIA_VENDOR && pci->attr->pcidev.class_id == 0x0680);
}

/* The first OS device of `pci` of one of the given types, or NULL. */
static hwloc_obj_t osdev_of(hwloc_obj_t pci, int type_a, int type_b, const char *prefix)
{
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && ((int)c->attr->osdev.type == type_a || (int)c->attr->osdev.type == type_b) &&
            (!prefix || strncmp(c->name ? c->name : "", prefix, strlen(prefix)) == 0))
            return c;
    return NULL;
}

/* The os index of the NUMA node local to an object, -1 if none. */
static int local_numa(hwloc_topology_t hw, hwloc_obj_t obj)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(hw, obj);
    int first = anc && anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : -1;
    return first;
}

static int cpu_vertex(const pd_topo *t, int numa)
{
    for (int i = 0; i < t->n_vertices; i++)
        if (t->vertices[i].kind == PD_TOPO_CPU && t->vertices[i].numa == numa)
            return i;
    return 0; /* locality unknown: the first CPU */
}

/* The vertex of a PCI object, created with its bridges above it on first
 * use (hwloc userdata remembers index + 1). Host bridges and non-I/O
 * objects are the local CPU. */
static pd_status ensure_vertex(pd_topo *t, hwloc_topology_t hw, hwloc_obj_t obj, pd_topo_vertex_kind kind, int *index)
{
    char name[32];
    float speed;
    int parent, v, link;

    if (obj->userdata) {
        *index = (int)(intptr_t)obj->userdata - 1;
        return PD_OK;
    }
    if (obj->type != HWLOC_OBJ_PCI_DEVICE &&
        (obj->type != HWLOC_OBJ_BRIDGE || obj->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI)) {
        *index = cpu_vertex(t, local_numa(hw, obj));
        return PD_OK;
    }
    PD_CHECK(ensure_vertex(t, hw, obj->parent, PD_TOPO_PCI_SWITCH, &parent));
    busid(obj, name, sizeof(name));
    PD_CHECK(pd_topo_add_vertex(t, kind, name, local_numa(hw, obj), &v));
    speed = obj->type == HWLOC_OBJ_BRIDGE ? obj->attr->bridge.upstream.pci.linkspeed : obj->attr->pcidev.linkspeed;
    PD_CHECK(pd_topo_add_link(t, PD_TOPO_LINK_PCIE, v, parent, speed > 0 ? speed * 1e9 : PD_TOPO_DEFAULT_PCIE_BW,
                              speed > 0 ? "hwloc-pci" : "default", &link));
    t->vertices[v].parent = parent;
    t->vertices[v].uplink = link;
    obj->userdata = (void *)(intptr_t)(v + 1);
    *index = v;
    return PD_OK;
}

/* ---- the parts of a node ---- */

/* The cores of a NUMA node's CPUs, when hwloc numbers them in a row. */
static void count_cores(hwloc_topology_t hw, hwloc_const_cpuset_t cpuset, pd_topo_numa *m)
{
    hwloc_obj_t first = hwloc_get_next_obj_inside_cpuset_by_type(hw, cpuset, HWLOC_OBJ_CORE, NULL);
    hwloc_obj_t core = first;
    int n = 0;

    for (; core; core = hwloc_get_next_obj_inside_cpuset_by_type(hw, cpuset, HWLOC_OBJ_CORE, core), n++)
        if ((int)core->logical_index != (int)first->logical_index + n)
            return;
    m->cores = n;
    m->first_core = first ? (int)first->logical_index : 0;
}

static pd_status add_numa_nodes(pd_topo *t, hwloc_topology_t hw)
{
    int n = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);

    if (!(t->numa = calloc((size_t)(n > 0 ? n : 1), sizeof(*t->numa))))
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    for (int i = 0; i < n; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(hw, HWLOC_OBJ_PACKAGE, node);
        pd_topo_numa *m = &t->numa[t->n_numa++];
        char name[32];
        int v;

        m->os_index = (int)node->os_index;
        m->package = pkg ? (int)pkg->os_index : -1;
        m->pus = node->cpuset ? hwloc_bitmap_weight(node->cpuset) : 0;
        m->memory_bytes = node->attr->numanode.local_memory;
        if (node->cpuset) {
            hwloc_bitmap_snprintf(m->cpuset, sizeof(m->cpuset), node->cpuset);
            count_cores(hw, node->cpuset, m);
        }
        snprintf(name, sizeof(name), "numa%d", m->os_index);
        PD_CHECK(pd_topo_add_vertex(t, PD_TOPO_CPU, name, m->os_index, &v));
    }
    /* Every pair of NUMA nodes talks over the inter-socket link. */
    for (int a = 0; a < t->n_vertices; a++)
        for (int b = a + 1; b < t->n_vertices; b++)
            PD_CHECK(pd_topo_add_link(t, PD_TOPO_LINK_SMP, a, b, PD_TOPO_DEFAULT_SMP_BW, "default", NULL));
    return PD_OK;
}

/* Memory bandwidth per NUMA node: hwloc's (from the firmware's HMAT) when it
 * has one for every node, the smallest; else the default. */
static void add_memory_bandwidth(pd_topo *t, hwloc_topology_t hw)
{
    double lowest = 0;
    int n = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);

    for (int i = 0; i < n; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
        struct hwloc_location initiator = {.type = HWLOC_LOCATION_TYPE_CPUSET, .location.cpuset = node->cpuset};
        hwloc_uint64_t mib_per_s = 0;

        if (!node->cpuset || hwloc_memattr_get_value(hw, HWLOC_MEMATTR_ID_BANDWIDTH, node, &initiator, 0, &mib_per_s) ||
            mib_per_s == 0) {
            lowest = 0;
            break;
        }
        if (lowest == 0 || (double)mib_per_s * MEBIBYTE < lowest)
            lowest = (double)mib_per_s * MEBIBYTE;
    }
    t->memory_bytes_per_s = lowest > 0 ? lowest : PD_TOPO_DEFAULT_MEMORY_BW;
    PD_TOPO_SET(t->memory_source, lowest > 0 ? "hwloc-memattr" : "default");
}

static int compare_busid(const void *a, const void *b)
{
    char x[32], y[32];
    busid(*(hwloc_obj_t const *)a, x, sizeof(x));
    busid(*(hwloc_obj_t const *)b, y, sizeof(y));
    return strcmp(x, y);
}

/* The PCI devices that pass `keep`, sorted by bus id. */
static pd_status collect(hwloc_topology_t hw, bool (*keep)(hwloc_obj_t), hwloc_obj_t **out, int *n)
{
    hwloc_obj_t *list = NULL, pci = NULL;
    int count = 0;

    while ((pci = hwloc_get_next_pcidev(hw, pci)))
        if (keep(pci)) {
            hwloc_obj_t *grown = realloc(list, (size_t)(count + 1) * sizeof(*list));
            if (!grown) {
                free(list);
                return PD_ERROR(PD_ENOMEM, "topology: out of memory");
            }
            list = grown;
            list[count++] = pci;
        }
    if (count > 1)
        qsort(list, (size_t)count, sizeof(*list), compare_busid);
    *out = list;
    *n = count;
    return PD_OK;
}

static pd_status add_gpus(pd_topo *t, hwloc_topology_t hw)
{
    hwloc_obj_t *list;
    pd_status s = PD_OK;
    int n;

    PD_CHECK(collect(hw, is_gpu, &list, &n));
    if (n && !(t->gpus = calloc((size_t)n, sizeof(*t->gpus)))) {
        free(list);
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    }
    for (int i = 0; i < n && s == PD_OK; i++) {
        hwloc_obj_t pci = list[i];
        hwloc_obj_t cuda = osdev_of(pci, HWLOC_OBJ_OSDEV_COPROC, HWLOC_OBJ_OSDEV_GPU, "cuda");
        hwloc_obj_t nvml = osdev_of(pci, HWLOC_OBJ_OSDEV_COPROC, HWLOC_OBJ_OSDEV_GPU, "nvml");
        hwloc_obj_t named = cuda ? cuda : nvml;
        const char *model = NULL;
        pd_topo_gpu *g = &t->gpus[t->n_gpus++];

        if (named)
            PD_TOPO_SET(g->name, named->name);
        else
            snprintf(g->name, sizeof(g->name), "gpu%d", i);
        for (hwloc_obj_t c = pci->io_first_child; c && !model; c = c->next_sibling)
            model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (model)
            PD_TOPO_SET(g->model, model);
        else
            snprintf(g->model, sizeof(g->model), "NVIDIA [%04x:%04x]", (unsigned)pci->attr->pcidev.vendor_id,
                     (unsigned)pci->attr->pcidev.device_id);
        busid(pci, g->pci_busid, sizeof(g->pci_busid));
        g->numa = local_numa(hw, pci);
        g->nic = -1;
        s = ensure_vertex(t, hw, pci, PD_TOPO_GPU, &g->vertex);
        if (s == PD_OK) {
            const pd_topo_link *up = &t->links[t->vertices[g->vertex].uplink];
            PD_TOPO_SET(t->vertices[g->vertex].name, g->name);
            g->pcie_bytes_per_s = up->bytes_per_s;
            PD_TOPO_SET(g->pcie_source, up->source);
        }
    }
    free(list);
    return s;
}

static bool is_nic(hwloc_obj_t pci)
{
    return osdev_of(pci, HWLOC_OBJ_OSDEV_NETWORK, HWLOC_OBJ_OSDEV_OPENFABRICS, NULL) != NULL;
}

static pd_status add_nics(pd_topo *t, hwloc_topology_t hw, bool live)
{
    hwloc_obj_t *list;
    pd_status s = PD_OK;
    int n;

    PD_CHECK(collect(hw, is_nic, &list, &n));
    if (n && !(t->nics = calloc((size_t)n, sizeof(*t->nics)))) {
        free(list);
        return PD_ERROR(PD_ENOMEM, "topology: out of memory");
    }
    for (int i = 0; i < n && s == PD_OK; i++) {
        hwloc_obj_t pci = list[i];
        hwloc_obj_t fabric = osdev_of(pci, HWLOC_OBJ_OSDEV_OPENFABRICS, HWLOC_OBJ_OSDEV_OPENFABRICS, NULL);
        pd_topo_nic *nic = &t->nics[t->n_nics++];
        size_t used = 0;

        for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
            if (c->type == HWLOC_OBJ_OS_DEVICE && c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && c->name &&
                used < sizeof(nic->netdevs))
                used += (size_t)snprintf(nic->netdevs + used, sizeof(nic->netdevs) - used, "%s%s", used ? " " : "",
                                         c->name);
        nic->rdma = fabric != NULL;
        if (fabric && fabric->name)
            PD_TOPO_SET(nic->name, fabric->name);
        else
            snprintf(nic->name, sizeof(nic->name), "%.*s", (int)strcspn(nic->netdevs, " "), nic->netdevs);
        busid(pci, nic->pci_busid, sizeof(nic->pci_busid));
        nic->numa = local_numa(hw, pci);
        s = ensure_vertex(t, hw, pci, PD_TOPO_NIC, &nic->vertex);
        if (s != PD_OK)
            break;
        PD_TOPO_SET(t->vertices[nic->vertex].name, nic->name);
        if (live && pd_topo_nic_live_rate(nic))
            continue;
        if (pci->attr->pcidev.linkspeed > 0) {
            nic->bytes_per_s = pci->attr->pcidev.linkspeed * 1e9;
            PD_TOPO_SET(nic->source, "pci-link");
        } else {
            nic->bytes_per_s = PD_TOPO_DEFAULT_NIC_BW;
            PD_TOPO_SET(nic->source, "default");
        }
    }
    free(list);
    return s;
}

static int gpu_of_object(const pd_topo *t, hwloc_obj_t obj)
{
    hwloc_obj_t pci = obj->type == HWLOC_OBJ_OS_DEVICE ? obj->parent : obj;
    for (int i = 0; pci && pci->userdata && i < t->n_gpus; i++)
        if (t->gpus[i].vertex == (int)(intptr_t)pci->userdata - 1)
            return i;
    return -1;
}

/* NVLink from hwloc's NVLinkBandwidth distances (MB/s between GPUs and from
 * GPUs to NVSwitches). */
static pd_status add_nvlinks(pd_topo *t, hwloc_topology_t hw)
{
    struct hwloc_distances_s *dist[4];
    unsigned nr = 4;
    double *to_switch;
    pd_status s = PD_OK;
    int nvswitch = -1;

    if (t->n_gpus == 0 || hwloc_distances_get_by_name(hw, "NVLinkBandwidth", &nr, dist, 0) != 0 || nr == 0)
        return PD_OK;
    if (!(to_switch = calloc((size_t)t->n_gpus, sizeof(*to_switch)))) {
        s = PD_ERROR(PD_ENOMEM, "topology: out of memory");
        goto release;
    }
    for (unsigned d = 0; d < nr && d < 4; d++) {
        unsigned n = dist[d]->nbobjs;
        for (unsigned i = 0; i < n; i++) {
            int gi = gpu_of_object(t, dist[d]->objs[i]);
            if (gi < 0)
                continue;
            for (unsigned j = 0; j < n && s == PD_OK; j++) {
                hwloc_uint64_t mb = dist[d]->values[i * n + j];
                hwloc_obj_t o = dist[d]->objs[j];
                int gj = gpu_of_object(t, o);
                if (mb == 0 || i == j)
                    continue;
                if (gj > gi)
                    s = pd_topo_add_link(t, PD_TOPO_LINK_NVLINK, t->gpus[gi].vertex, t->gpus[gj].vertex,
                                         (double)mb * 1e6, "hwloc-nvlink", NULL);
                else if (gj < 0 && o->type == HWLOC_OBJ_PCI_DEVICE && is_nvswitch(o))
                    to_switch[gi] += (double)mb * 1e6;
            }
        }
    }
    for (int g = 0; g < t->n_gpus && s == PD_OK; g++) {
        if (to_switch[g] <= 0)
            continue;
        if (nvswitch < 0)
            s = pd_topo_add_vertex(t, PD_TOPO_NVSWITCH, "nvswitch", -1, &nvswitch);
        if (s == PD_OK)
            s = pd_topo_add_link(t, PD_TOPO_LINK_NVLINK, t->gpus[g].vertex, nvswitch, to_switch[g], "hwloc-nvlink",
                                 NULL);
    }
    free(to_switch);
release:
    for (unsigned d = 0; d < nr && d < 4; d++)
        hwloc_distances_release(hw, dist[d]);
    return s;
}

/* Builds *out from a loaded hwloc topology; `live` reads NIC rates. */
static pd_status build(hwloc_topology_t hw, const char *origin, bool live, pd_topo **out)
{
    hwloc_obj_t root = hwloc_get_root_obj(hw);
    const char *host = hwloc_obj_get_info_by_name(root, "HostName");
    pd_topo *t;
    pd_status s;

    PD_CHECK(pd_topo_alloc(&t));
    PD_TOPO_SET(t->origin, origin);
    PD_TOPO_SET(t->hostname, host ? host : "");
    t->packages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
    t->cores = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
    t->pus = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU);
    add_memory_bandwidth(t, hw);
    PD_CHECK_GOTO(add_numa_nodes(t, hw), s, fail);
    PD_CHECK_GOTO(add_gpus(t, hw), s, fail);
    PD_CHECK_GOTO(add_nics(t, hw, live), s, fail);
    PD_CHECK_GOTO(add_nvlinks(t, hw), s, fail);
    PD_CHECK_GOTO(pd_topo_compute_paths(t), s, fail);
    PD_CHECK_GOTO(pd_topo_derive_levels(t), s, fail);
    *out = t;
    return PD_OK;
fail:
    pd_topo_destroy(t);
    return s;
}

/* `io`: every PCI device (NVSwitches are "other bridge" devices, which
 * the default filter drops) and OS device; else none. */
static pd_status init(hwloc_topology_t *hw, bool io)
{
    if (hwloc_topology_init(hw) != 0)
        return PD_ERROR(PD_EDEVICE, "topology: hwloc_topology_init failed: %s", strerror(errno));
    hwloc_topology_set_io_types_filter(*hw, io ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_NONE);
    return PD_OK;
}

static pd_status discover_live(bool io, pd_topo **out)
{
    hwloc_topology_t hw;
    pd_status s;

    PD_CHECK(init(&hw, io));
    if (hwloc_topology_load(hw) != 0) {
        s = PD_ERROR(PD_EDEVICE, "topology: hwloc could not discover this machine: %s", strerror(errno));
        hwloc_topology_destroy(hw);
        return s;
    }
    if ((s = build(hw, "live", true, out)) != PD_OK) {
        hwloc_topology_destroy(hw);
        return s;
    }
    (*out)->hwloc = hw;
    return PD_OK;
}

pd_status pd_topo_discover(pd_topo **out) { return discover_live(true, out); }

pd_status pd_topo_discover_cpus(pd_topo **out) { return discover_live(false, out); }

/* hwloc 3 keeps the host name among the topology's own infos, after the
 * root object, where hwloc 2 does not look. */
static void xml_hostname(const char *xml, char *buf, size_t size)
{
    static const char tag[] = "<info name=\"HostName\" value=\"";
    const char *at = strstr(xml, tag);

    if (at) {
        at += sizeof(tag) - 1;
        snprintf(buf, size, "%.*s", (int)strcspn(at, "\""), at);
    }
}

pd_status pd_topo_load_xml(const char *path, pd_topo **out)
{
    hwloc_topology_t hw = NULL;
    char *xml = NULL, *compat = NULL;
    size_t size = 0, compat_size;
    FILE *f;
    long n;
    pd_status s;

    if (!(f = fopen(path, "rb")))
        return PD_ERROR(PD_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(xml = malloc((size_t)n + 1)) || fread(xml, 1, (size_t)n, f) != (size_t)n) {
        s = xml ? PD_ERROR(PD_EIO, "%s: cannot read: %s", path, strerror(errno ? errno : EIO))
                : PD_ERROR(PD_ENOMEM, "%s: out of memory", path);
        fclose(f);
        free(xml);
        return s;
    }
    fclose(f);
    size = (size_t)n;
    xml[size] = '\0';
    PD_CHECK_GOTO(pd_topo_xml_compat(xml, size, path, &compat, &compat_size), s, release);
    PD_CHECK_GOTO(init(&hw, true), s, release);
    /* hwloc wants the buffer's size with its terminating NUL. */
    if (hwloc_topology_set_xmlbuffer(hw, compat, (int)compat_size + 1) != 0 || hwloc_topology_load(hw) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: not a valid hwloc XML topology", path);
        goto release;
    }
    if ((s = build(hw, path, false, out)) == PD_OK && !(*out)->hostname[0])
        xml_hostname(xml, (*out)->hostname, sizeof((*out)->hostname));
release:
    if (hw)
        hwloc_topology_destroy(hw);
    free(compat);
    free(xml);
    return s;
}
