/* Rank 0's part of gathering an MPI job's nodes into a cluster, without
 * MPI (gather.c moves the messages), so that it can be tested on one
 * machine: the message each rank sends and the cluster made of them. */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>
#include <pipedream/log.h>

#include "topology/topo_int.h"

#define WHERE_BYTES 64
#define MESSAGE_BYTES 1024

char *pd_cluster_rank_message(const pd_topo *node, const char *host)
{
    json_t *msg = json_object();
    char *text = NULL;

    if (msg && json_object_set_new(msg, "host", json_string(host)) == 0 &&
        json_object_set_new(msg, "node", pd_topo_to_json(node)) == 0)
        text = json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(msg);
    return text;
}

/* One host of the job: its ranks and the node its first rank described. */
typedef struct host {
    const char *name; /* borrowed from that rank's document */
    int ranks;
    pd_topo *node;
} host;

/* Reads rank r's message into the host list: a new host, or one more rank
 * of a known one. */
static pd_status add_rank(const char *text, int r, json_t **docs, host *hosts, int *n_hosts)
{
    char where[WHERE_BYTES];
    const char *name;
    json_t *node;

    if (!text)
        return PD_ERROR(PD_ECOMM, "cluster gather: rank %d has no description of its node (see its error)", r);
    snprintf(where, sizeof(where), "rank %d's node", r);
    PD_CHECK(pd_json_load_buffer(text, strlen(text), where, &docs[r]));
    PD_CHECK(pd_json_get_string(docs[r], "host", where, &name));
    PD_CHECK(pd_json_get_object(docs[r], "node", where, &node));
    for (int h = 0; h < *n_hosts; h++)
        if (strcmp(hosts[h].name, name) == 0) {
            hosts[h].ranks++;
            return PD_OK;
        }
    hosts[*n_hosts] = (host){.name = name, .ranks = 1};
    PD_CHECK(pd_topo_from_json(node, where, &hosts[*n_hosts].node));
    (*n_hosts)++;
    return PD_OK;
}

/* Appends "host: N gpus" (with `ranks`: "host: R ranks for N gpus") to the
 * list in text. */
static void list_host(char *text, size_t size, const host *h, bool ranks)
{
    size_t used = strlen(text);
    const char *plural = h->node->workers == 1 ? "" : "s";

    if (used + 1 >= size)
        return;
    if (ranks)
        snprintf(text + used, size - used, "%s%s: %d rank%s for %d %s%s", used ? ", " : "", h->name, h->ranks,
                 h->ranks == 1 ? "" : "s", h->node->workers, h->node->worker, plural);
    else
        snprintf(text + used, size - used, "%s%s: %d %s%s", used ? ", " : "", h->name, h->node->workers,
                 h->node->worker, plural);
}

/* Nodes should look alike; when their workers differ the cluster takes the
 * fewest (a plan must fit every node). Ranks are expected one per worker.
 * Returns the chosen host's index. */
static int smallest_node(const host *hosts, int n_hosts)
{
    char differ[MESSAGE_BYTES] = "", ranks[MESSAGE_BYTES] = "";
    int best = 0;
    bool alike = true;

    for (int h = 0; h < n_hosts; h++) {
        const pd_topo *t = hosts[h].node;
        if (t->workers != hosts[0].node->workers || strcmp(t->worker, hosts[0].node->worker) != 0)
            alike = false;
        if (t->workers < hosts[best].node->workers)
            best = h;
        if (hosts[h].ranks != t->workers)
            list_host(ranks, sizeof(ranks), &hosts[h], true);
    }
    if (ranks[0])
        PD_LOG_WARNF("ranks are not one per worker (%s): the cluster counts workers", ranks);
    if (alike)
        return best;
    for (int h = 0; h < n_hosts; h++)
        list_host(differ, sizeof(differ), &hosts[h], false);
    PD_LOG_WARNF("nodes differ in workers (%s): the cluster uses %s's %d per node", differ, hosts[best].name,
                 hosts[best].node->workers);
    return best;
}

/* The network between nodes when not given: the slowest node's way out
 * (pd_cluster_build's network level of a two-node cluster of it). */
static pd_status slowest_network(const host *hosts, int n_hosts, const pd_cluster_network *net,
                                 pd_cluster_level *slowest)
{
    int slow_host = -1;

    for (int h = 0; h < n_hosts; h++) {
        pd_cluster *pair;
        pd_status s = pd_cluster_build(hosts[h].node, 2, net, &pair);

        if (s != PD_OK) {
            char cause[MESSAGE_BYTES];
            snprintf(cause, sizeof(cause), "%s", pd_last_error());
            return PD_ERROR(s, "host %s: %s", hosts[h].name, cause);
        }
        if (slow_host < 0 || pair->levels[pair->n_levels - 1].bandwidth_bytes_per_s < slowest->bandwidth_bytes_per_s) {
            *slowest = pair->levels[pair->n_levels - 1];
            slow_host = h;
        }
        pd_cluster_destroy(pair);
    }
    PD_LOG_DEBUGF("network between nodes: %g bytes/s (%s), the slowest node's (%s)", slowest->bandwidth_bytes_per_s,
                  slowest->source, hosts[slow_host].name);
    return PD_OK;
}

pd_status pd_cluster_from_ranks(const char *const *messages, int ranks, const pd_cluster_network *net,
                                pd_cluster **out)
{
    json_t **docs = NULL;
    host *hosts = NULL;
    pd_cluster *c = NULL;
    pd_cluster_level network = {0};
    pd_cluster_network given = net ? *net : (pd_cluster_network){.latency_s = -1};
    int n_hosts = 0, chosen;
    pd_status s = PD_OK;

    if (ranks < 1)
        return PD_ERROR(PD_EINVAL, "cluster gather: no ranks");
    docs = calloc((size_t)ranks, sizeof(*docs));
    hosts = calloc((size_t)ranks, sizeof(*hosts));
    if (!docs || !hosts) {
        s = PD_ERROR(PD_ENOMEM, "cluster gather: out of memory for %d ranks", ranks);
        goto release;
    }
    for (int r = 0; r < ranks; r++)
        PD_CHECK_GOTO(add_rank(messages[r], r, docs, hosts, &n_hosts), s, release);
    chosen = smallest_node(hosts, n_hosts);
    if (n_hosts > 1 && !(given.bandwidth_bytes_per_s > 0)) {
        PD_CHECK_GOTO(slowest_network(hosts, n_hosts, &given, &network), s, release);
        given.bandwidth_bytes_per_s = network.bandwidth_bytes_per_s;
        given.latency_s = network.latency_s;
    }
    PD_CHECK_GOTO(pd_cluster_build(hosts[chosen].node, n_hosts, &given, &c), s, release);
    if (network.source[0]) /* pd_cluster_build calls a given bandwidth the user's */
        PD_TOPO_SET(c->levels[c->n_levels - 1].source, network.source);
    snprintf(c->description, sizeof(c->description), "%d node%s of %d %s worker%s, gathered from %d MPI rank%s",
             c->nodes, c->nodes > 1 ? "s" : "", c->workers_per_node, c->node->worker,
             c->workers_per_node > 1 ? "s" : "", ranks, ranks > 1 ? "s" : "");
    *out = c;
release:
    for (int h = 0; h < n_hosts; h++)
        pd_topo_destroy(hosts[h].node);
    for (int r = 0; docs && r < ranks; r++)
        json_decref(docs[r]);
    free(hosts);
    free(docs);
    return s;
}
