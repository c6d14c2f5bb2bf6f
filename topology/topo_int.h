/* Topology internals shared by the files of topology/: building a pd_topo
 * (vertices, links), deriving paths and levels, reading rates. */
#ifndef PD_TOPO_INT_H
#define PD_TOPO_INT_H

#include <stddef.h>

#include <jansson.h>

#include <pipedream/topology.h>

/* Copies text into a fixed field, always terminated. */
#define PD_TOPO_SET(field, text) snprintf((field), sizeof(field), "%s", (text))

/* An empty topology (all arrays NULL, numbers 0). PD_ENOMEM. */
pd_status pd_topo_alloc(pd_topo **out);

/* Appends a vertex / link; the index in *index. PD_ENOMEM. */
pd_status pd_topo_add_vertex(pd_topo *t, pd_topo_vertex_kind kind, const char *name, int numa, int *index);
pd_status pd_topo_add_link(pd_topo *t, pd_topo_link_kind kind, int a, int b, double bytes_per_s,
                           const char *source, int *index);

/* Fills the GPU and GPU-NIC path matrices, each GPU's nearest NIC
 * (paths.c), then the node's levels (levels.c). */
pd_status pd_topo_compute_paths(pd_topo *t);
pd_status pd_topo_derive_levels(pd_topo *t);

/* hwloc 3 XML (osdev types as bit masks, version "3.0") rewritten as the
 * hwloc 2 XML this hwloc reads; other XML returned as it is. The result is
 * malloc'd and NUL-terminated. PD_EFORMAT, PD_ENOMEM. */
pd_status pd_topo_xml_compat(const char *xml, size_t size, const char *path, char **out, size_t *out_size);

/* The live rate of a NIC: its OpenFabrics port (libibverbs where built in,
 * else sysfs), else its interface's Ethernet speed (sysfs). Sets
 * nic->bytes_per_s and nic->source and returns true when one is known. */
bool pd_topo_nic_live_rate(pd_topo_nic *nic);

/* The node description as JSON (a new object) and back. from_json names
 * the bad field after `where` ("x.cluster.json: node"). */
json_t *pd_topo_to_json(const pd_topo *t);
pd_status pd_topo_from_json(const json_t *obj, const char *where, pd_topo **out);

/* The cluster as JSON (a new object) and back (gather.c broadcasts it so):
 * from_json fills a zeroed cluster, whose node is to be freed with it even
 * on failure, and names the bad field after `where`. */
json_t *pd_cluster_to_json(const pd_cluster *c);
pd_status pd_cluster_from_json(const json_t *root, const char *where, pd_cluster *c);

/* Gathering an MPI job's nodes (cluster_ranks.c; gather.c moves the
 * texts): a rank's message, {"host": host, "node": {...}} as compact JSON
 * (malloc'd; NULL if out of memory), and the cluster of every rank's
 * message (NULL for a rank that had none: an error naming it), with a node
 * per host, as pd_cluster_gather describes. */
char *pd_cluster_rank_message(const pd_topo *node, const char *host);
pd_status pd_cluster_from_ranks(const char *const *messages, int ranks, const pd_cluster_network *net,
                                pd_cluster **out);

/* Level (de)serialisation shared by the node and cluster objects. */
json_t *pd_topo_levels_to_json(const pd_cluster_level *levels, int n);
pd_status pd_topo_levels_from_json(const json_t *array, const char *where, pd_cluster_level *levels, int *n);

#endif
