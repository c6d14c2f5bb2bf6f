/* Machine topology: what each node holds (CPUs and their NUMA memory, the
 * PCIe tree, GPUs, NICs, NVLink) with the bandwidth of every link, the best
 * path between every pair of GPUs and from each GPU to its nearest NIC (as
 * NCCL chooses them), and PipeDream's levels derived from them; then the
 * cluster (nodes x workers per node) the partitioner plans for, in
 * `*.cluster.json` files.
 *
 * Numbers carry their source, so a user can see which were discovered and
 * which are defaults to override: "hwloc-pci" (the PCIe link speed hwloc
 * read), "hwloc-nvlink" (hwloc's NVLinkBandwidth distances), "verbs" (the
 * port's active rate through libibverbs), "sysfs" (the rate or speed the
 * kernel reports), "hwloc-memattr" (memory bandwidth hwloc got from the
 * firmware), "pci-link" (a NIC's rate unknown: its PCIe link, an upper
 * bound), "user" (given on the command line), "file" (read from a cluster
 * file without a source) and "default" (nothing known: the documented value
 * of docs/cluster-format.md). Bandwidths are bytes per second, one
 * direction. */
#ifndef PIPEDREAM_TOPOLOGY_H
#define PIPEDREAM_TOPOLOGY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most levels of a hierarchy (as PD_PLAN_MAX_LEVELS). */
#define PD_CLUSTER_MAX_LEVELS 8

/* Defaults where nothing is discoverable (source "default"). The PCIe and
 * inter-socket values are NCCL's (src/graph/topo.h: PCI_BW, SKL_QPI_BW). */
#define PD_TOPO_DEFAULT_PCIE_BW 12e9       /* a PCIe link of unknown speed */
#define PD_TOPO_DEFAULT_SMP_BW 10e9        /* between two NUMA nodes (QPI/UPI) */
#define PD_TOPO_DEFAULT_MEMORY_BW 10e9     /* one NUMA node's memory, CPU-only workers */
#define PD_TOPO_DEFAULT_NIC_BW 1.25e9      /* a NIC of unknown rate: 10 Gb/s */
#define PD_TOPO_DEFAULT_INTRA_LATENCY 1e-5 /* a message inside a node */
#define PD_TOPO_DEFAULT_RDMA_LATENCY 5e-6  /* a message over an RDMA NIC */
#define PD_TOPO_DEFAULT_ETH_LATENCY 5e-5   /* a message over TCP/Ethernet */

/* ---- one node ---- */

typedef enum pd_topo_vertex_kind {
    PD_TOPO_CPU = 0,     /* a NUMA node's CPUs and memory (NCCL's CPU node) */
    PD_TOPO_PCI_SWITCH,  /* a PCIe bridge below the host bridge */
    PD_TOPO_GPU,
    PD_TOPO_NIC,
    PD_TOPO_NVSWITCH,    /* all NVSwitches of the node, merged (as NCCL does) */
} pd_topo_vertex_kind;

typedef enum pd_topo_link_kind {
    PD_TOPO_LINK_PCIE = 0, /* device or bridge to its parent */
    PD_TOPO_LINK_NVLINK,   /* GPU to GPU or to the NVSwitch fabric */
    PD_TOPO_LINK_SMP,      /* between the CPUs of two NUMA nodes */
} pd_topo_link_kind;

/* The kind of a path, nearest first (NCCL's names; PCI covers NCCL's PIX
 * and PXB: through PCIe switches only). */
typedef enum pd_topo_path_type {
    PD_TOPO_PATH_SELF = 0,
    PD_TOPO_PATH_NVL, /* NVLink, directly or through NVSwitch */
    PD_TOPO_PATH_PCI, /* PCIe switches, not the host bridge */
    PD_TOPO_PATH_PHB, /* through the host bridge of one CPU */
    PD_TOPO_PATH_SYS, /* across CPUs (NUMA nodes) */
    PD_TOPO_PATH_NONE,
} pd_topo_path_type;

typedef struct pd_topo_vertex {
    pd_topo_vertex_kind kind;
    char name[32];   /* "numa0", "0000:2c:00.0", "nvml3", "mlx5_0", "nvswitch" */
    int numa;        /* os index of the local NUMA node, -1 unknown */
    int parent;      /* vertex above in the PCIe tree; -1 for CPUs and the NVSwitch */
    int uplink;      /* link to the parent; -1 if none */
} pd_topo_vertex;

typedef struct pd_topo_link {
    pd_topo_link_kind kind;
    int a, b; /* vertices */
    double bytes_per_s;
    char source[16];
} pd_topo_link;

typedef struct pd_topo_path {
    pd_topo_path_type type;
    double bytes_per_s; /* of the narrowest link; 0 for NONE */
    int hops;           /* links crossed */
    char source[16];    /* of the narrowest link */
} pd_topo_path;

typedef struct pd_topo_numa {
    int os_index;
    int package;          /* os index, -1 unknown */
    int pus;              /* hardware threads */
    uint64_t memory_bytes;
    char cpuset[128];     /* hwloc's cpuset string, "" unknown */
    int cores;            /* its cores (hwloc Core objects); 0 unknown (a
                             cluster file's node, cores not numbered in a row) */
    int first_core;       /* logical index of the first, in hwloc's numbering
                             (hwloc-bind core:N); its cores follow in a row */
} pd_topo_numa;

typedef struct pd_topo_gpu {
    char name[32];        /* "cuda0", "nvml3", or "gpu<N>" found by PCI class only */
    char model[64];
    char pci_busid[16];   /* "0000:34:00.0" */
    int numa;             /* os index, -1 unknown */
    int vertex;           /* -1 when read from a file */
    int nic;              /* index of the nearest NIC, -1 none */
    double pcie_bytes_per_s;
    char pcie_source[16];
} pd_topo_gpu;

typedef struct pd_topo_nic {
    char name[32];        /* the OpenFabrics device ("mlx5_0") or the interface */
    char netdevs[64];     /* network interfaces, space-separated */
    char pci_busid[16];
    bool rdma;            /* has an OpenFabrics (verbs) device */
    int numa;
    int vertex;
    double bytes_per_s;   /* port rate */
    char source[16];
} pd_topo_nic;

/* A level of the hierarchy: a group of this level holds `fanout` groups of
 * the level below (workers at the innermost level) connected at
 * `bandwidth_bytes_per_s`. The first four fields are pd_plan_level's. */
typedef struct pd_cluster_level {
    char name[32];
    int fanout;
    double bandwidth_bytes_per_s;
    double latency_s;
    char source[16];
} pd_cluster_level;

/* One node's topology. Arrays are owned; paths are row-major matrices. */
typedef struct pd_topo {
    char hostname[64];
    char origin[256];      /* "live", or the XML or cluster file it came from */
    int packages, cores, pus;
    int n_numa;
    pd_topo_numa *numa;
    double memory_bytes_per_s; /* per NUMA node */
    char memory_source[16];
    int n_vertices;        /* 0 when read from a file */
    pd_topo_vertex *vertices;
    int n_links;
    pd_topo_link *links;
    int n_gpus;
    pd_topo_gpu *gpus;     /* ordered by PCI bus id (CUDA's PCI_BUS_ID order) */
    int n_nics;
    pd_topo_nic *nics;
    pd_topo_path *gpu_paths;     /* n_gpus x n_gpus */
    pd_topo_path *gpu_nic_paths; /* n_gpus x n_nics */
    char worker[16];       /* "gpu", or "socket" on a CPU-only node */
    int workers;           /* GPUs, or CPU packages */
    int n_levels;          /* inside the node, innermost first */
    pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS];
    void *hwloc;           /* the live hwloc topology (binding), else NULL */
} pd_topo;

/* Discovers this machine with hwloc (I/O devices included), reads NIC rates
 * through libibverbs or sysfs, and derives paths and levels. PD_EDEVICE if
 * hwloc fails. Free with pd_topo_destroy. */
pd_status pd_topo_discover(pd_topo **out);

/* Like pd_topo_discover without the I/O devices (no PCI tree, GPUs or
 * NICs): packages, cores and NUMA nodes, quickly; enough to bind a
 * process (pd_topo_bind_cores). PD_EDEVICE if hwloc fails. */
pd_status pd_topo_discover_cpus(pd_topo **out);

/* Like pd_topo_discover from an hwloc XML file (hwloc 2 format; a file
 * written by hwloc 3 is read the same when its content is hwloc 2's).
 * PD_EIO if unreadable, PD_EFORMAT "path: not a valid hwloc XML topology"
 * otherwise. Rates of NICs are not in XML: their PCIe link bounds them. */
pd_status pd_topo_load_xml(const char *path, pd_topo **out);

/* Frees the topology. NULL is ignored. */
void pd_topo_destroy(pd_topo *topo);

/* The path between GPUs i and j, and from GPU i to NIC k. */
const pd_topo_path *pd_topo_gpu_path(const pd_topo *topo, int i, int j);
const pd_topo_path *pd_topo_gpu_nic_path(const pd_topo *topo, int i, int k);

/* "NVL", "PCI", ... */
const char *pd_topo_path_type_name(pd_topo_path_type type);

/* Prints the tree (CPUs, switches, GPUs, NICs with link bandwidths and
 * sources), the GPU path matrix, each GPU's nearest NIC and the levels. */
void pd_topo_print(const pd_topo *topo, FILE *out);

/* Binds the calling process as local rank `local_rank` of its node: the
 * GPU local_rank mod GPUs (or CPU package on a CPU-only node), its NUMA
 * node's CPUs and memory (hwloc_set_cpubind, hwloc_set_membind). The chosen
 * GPU, NIC and NUMA node (-1 if none) are returned through the nullable
 * outputs. PD_ENOTSUP for a topology not discovered live. */
pd_status pd_topo_bind(const pd_topo *topo, int local_rank, int *gpu, int *nic, int *numa);

/* Binds the calling process (all its threads) to the `n_cores` cores from
 * logical index `first_core` (pd_topo_numa's numbering; n_cores 0 leaves
 * the CPUs as they are) and its memory to NUMA node `numa` (os index; -1
 * leaves it), preferred rather than strict. PD_ENOTSUP for a topology not
 * discovered live, PD_EINVAL for cores or a node it does not have,
 * PD_EDEVICE when the system refuses (memory binding only where the node
 * has several NUMA nodes: containers often forbid it). */
pd_status pd_topo_bind_cores(const pd_topo *topo, int first_core, int n_cores, int numa);

/* ---- the cluster ---- */

/* The machines a plan is made for: levels innermost first; the number of
 * workers is the product of the fanouts. */
typedef struct pd_cluster {
    char name[64];
    char description[256];
    int nodes;
    int workers_per_node;
    int n_levels;
    pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS];
    pd_topo *node;  /* a node's description (owned); NULL if the file has none */
} pd_cluster;

/* How nodes are connected, for pd_cluster_build: bandwidth 0 takes the
 * bandwidth from GPU to nearest NIC (or the fastest NIC on a CPU-only node);
 * latency < 0 takes the default for the NIC's kind. */
typedef struct pd_cluster_network {
    double bandwidth_bytes_per_s;
    double latency_s;
} pd_cluster_network;

/* A cluster of `nodes` copies of `node` (copied): the node's levels (those
 * of fanout 1 dropped when other levels remain) then, with nodes > 1, a
 * "network" level of fanout `nodes`. PD_EINVAL when nodes > 1 and the node
 * has no NIC and no bandwidth was given. */
pd_status pd_cluster_build(const pd_topo *node, int nodes, const pd_cluster_network *net, pd_cluster **out);

/* The cluster of an MPI job, collective over MPI_COMM_WORLD (initialised by
 * the caller): every rank passes its node (NULL if it could not describe
 * it: the call then fails on every rank instead of hanging); rank 0 gathers
 * the descriptions, groups the ranks by host (MPI's processor name) into
 * nodes, builds the cluster as pd_cluster_build does, from the node with
 * the fewest workers (a warning names the nodes when they differ) with the
 * network at `net`'s bandwidth or the slowest node's way to its NIC, and
 * broadcasts it: every rank gets the same cluster. The cluster counts
 * workers (GPUs, or sockets), not ranks. PD_ENOTSUP in a build without MPI,
 * PD_ESTATE if MPI is not initialised, PD_ECOMM when MPI fails; rank 0's
 * failure (e.g. a node without a NIC) is every rank's, "rank 0: ...". */
pd_status pd_cluster_gather(const pd_topo *node, const pd_cluster_network *net, pd_cluster **out);

/* Writes the cluster as JSON (format "pipedream-cluster", version 1)
 * atomically. PD_EIO on failure. */
pd_status pd_cluster_write_json(const pd_cluster *cluster, const char *path);

/* Writes the same JSON to a stream. PD_EIO on failure. */
pd_status pd_cluster_print_json(const pd_cluster *cluster, FILE *out);

/* Reads a cluster file, written by pd_cluster_write_json or by hand (only
 * "levels" is required; a bandwidth may be a number of bytes/s or a string
 * such as "25Gb/s"). PD_EFORMAT names the file and field. */
pd_status pd_cluster_read_json(const char *path, pd_cluster **out);

/* Reads only the levels of a cluster file (for the partitioner): up to
 * PD_CLUSTER_MAX_LEVELS into `levels`, their count in *n_levels. */
pd_status pd_cluster_read_levels(const char *path, pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS], int *n_levels);

/* Product of the fanouts. */
int pd_cluster_workers(const pd_cluster *cluster);

/* Prints the levels (and the node's GPUs and NICs when known). */
void pd_cluster_print(const pd_cluster *cluster, FILE *out);

/* Frees the cluster. NULL is ignored. */
void pd_cluster_destroy(pd_cluster *cluster);

#ifdef __cplusplus
}
#endif
#endif
