/* `pipedream topo --measure`: what the transport achieves at each level of
 * the discovered cluster, printed beside what discovery says. Under MPI
 * (--mpi) the ranks are placed on nodes by host name and on workers by
 * local rank (as the runtime binds them); each level with a pair of ranks
 * at it is measured between that pair (shm inside a node, verbs or tcp
 * between nodes), the others say why not. Alone, two forked processes of
 * this node stand for the innermost level. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>
#include <pipedream/topology.h>
#include <pipedream/transport.h>

#include "cli/pd_cli.h"
#include "cli/transport_measure.h"
#include "core/pd_units.h"

#define STREAM_BYTES (4 << 20)
#define STREAM_MESSAGES 64
#define WARM_UP_MESSAGES 16 /* every slot written once before the clock runs */
#define PING_BYTES 64
#define PINGS 500
#define DEPTH 8
#define INTRA_BACKENDS "shm"
#define NETWORK_BACKENDS "verbs,tcp"

/* One level's outcome (sent between ranks as bytes). */
typedef struct level_result {
    int state; /* NOT_MEASURED, MEASURED, FAILED */
    double bytes_per_s, latency_s;
    char backend[32];
    char between[96];
    char why[200];
} level_result;

enum { NOT_MEASURED = 0, MEASURED = 1, FAILED = 2 };

/* The peer side of one measurement: a warm-up, the stream, the pings. */
static int serve(pd_cli_link *link, const void *unused)
{
    return pd_cli_link_serve(link, STREAM_BYTES, WARM_UP_MESSAGES, 0) != PD_OK ||
           pd_cli_link_serve(link, STREAM_BYTES, STREAM_MESSAGES, 0) != PD_OK ||
           pd_cli_link_serve(link, PING_BYTES, 0, PINGS) != PD_OK;
}

static void measure(pd_cli_link *link, level_result *r)
{
    double bw = 0, lat_us = 0, unused;

    if (pd_cli_link_measure(link, STREAM_BYTES, WARM_UP_MESSAGES, 0, &unused, &unused) != PD_OK ||
        pd_cli_link_measure(link, STREAM_BYTES, STREAM_MESSAGES, 0, &bw, &unused) != PD_OK ||
        pd_cli_link_measure(link, PING_BYTES, 0, PINGS, &unused, &lat_us) != PD_OK) {
        r->state = FAILED;
        snprintf(r->why, sizeof(r->why), "failed: %s", pd_last_error());
        return;
    }
    r->state = MEASURED;
    r->bytes_per_s = bw;
    r->latency_s = lat_us * 1e-6;
    /* Slots are in host memory in this build: say so beside GPU levels. */
    snprintf(r->backend, sizeof(r->backend), "%s%s", pd_channel_backend(link->rx),
             strcmp(pd_channel_backend(link->rx), "shm") == 0 ? ", host memory" : "");
}

static pd_channel_config link_config(const pd_transport_token *token, const char *backends)
{
    pd_channel_config c = {.depth = DEPTH, .slot_bytes = STREAM_BYTES, .token = token, .backends = backends,
                           .timeout_ms = 30000};
    return c;
}

/* Levels inside a node: all but the network level of a multi-node cluster. */
static int intra_levels(const pd_cluster *c) { return c->nodes > 1 ? c->n_levels - 1 : c->n_levels; }

/* Alone: the innermost level between this process and a forked one. */
static void measure_alone(const pd_cluster *c, level_result *res)
{
    pd_transport_token token;
    pd_channel_config config = link_config(&token, INTRA_BACKENDS);
    pd_cli_link link;
    pid_t pid;
    int status;

    for (int i = 0; i < c->n_levels; i++)
        snprintf(res[i].why, sizeof(res[i].why), "not measured: %s",
                 i >= intra_levels(c) ? "needs ranks on two nodes (mpirun ... pipedream topo --mpi --measure)"
                                      : "needs ranks on two workers of a node (mpirun ... pipedream topo --mpi "
                                        "--measure)");
    if (intra_levels(c) == 0)
        return;
    snprintf(res[0].between, sizeof(res[0].between), "two processes of this node (unbound)");
    if (pd_transport_token_generate(&token) != PD_OK ||
        pd_cli_link_open_forked(&link, &config, serve, NULL, &pid) != PD_OK) {
        res[0].state = FAILED;
        snprintf(res[0].why, sizeof(res[0].why), "failed: %s", pd_last_error());
        return;
    }
    measure(&link, &res[0]);
    pd_cli_link_close(&link);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        res[0].state = FAILED;
        snprintf(res[0].why, sizeof(res[0].why), "failed: the peer process failed");
    }
}

#ifdef HAVE_MPI
/* Whether workers v and w of a node talk at intra-node level i: in one
 * group of level i and (above level 0) in different groups of the level
 * below. */
static bool at_level(const pd_cluster *c, int i, int v, int w)
{
    int below = 1, group;

    for (int j = 0; j < i; j++)
        below *= c->levels[j].fanout;
    group = below * c->levels[i].fanout;
    return v / group == w / group && (i == 0 || v / below != w / below);
}

/* The pair of ranks (a < b) measured at each level, or why there is none. */
static void plan_pairs(const pd_cluster *c, const int *node, const int *local, int ranks, const char *hosts,
                       int host_bytes, int *pair_a, int *pair_b, level_result *res)
{
    int workers = c->workers_per_node > 0 ? c->workers_per_node : 1;

    for (int i = 0; i < c->n_levels; i++) {
        bool network = i >= intra_levels(c);

        pair_a[i] = pair_b[i] = -1;
        for (int a = 0; a < ranks && pair_a[i] < 0; a++)
            for (int b = a + 1; b < ranks && pair_a[i] < 0; b++) {
                bool fits = network ? node[a] != node[b]
                                    : node[a] == node[b] && at_level(c, i, local[a] % workers, local[b] % workers);
                if (fits) {
                    pair_a[i] = a;
                    pair_b[i] = b;
                }
            }
        if (pair_a[i] < 0) {
            snprintf(res[i].why, sizeof(res[i].why), "not measured: %s",
                     network ? "the job runs on one node"
                             : "no two ranks of one node sit on workers that meet at this level");
            continue;
        }
        if (network)
            snprintf(res[i].between, sizeof(res[i].between), "ranks %d (%s) and %d (%s)", pair_a[i],
                     hosts + (size_t)pair_a[i] * (size_t)host_bytes, pair_b[i],
                     hosts + (size_t)pair_b[i] * (size_t)host_bytes);
        else if (local[pair_a[i]] % workers == local[pair_b[i]] % workers)
            snprintf(res[i].between, sizeof(res[i].between), "ranks %d and %d on %s (both at %s %d)", pair_a[i],
                     pair_b[i], hosts + (size_t)pair_a[i] * (size_t)host_bytes, c->node ? c->node->worker : "worker",
                     local[pair_a[i]] % workers);
        else
            snprintf(res[i].between, sizeof(res[i].between), "ranks %d and %d on %s (%ss %d and %d)", pair_a[i],
                     pair_b[i], hosts + (size_t)pair_a[i] * (size_t)host_bytes, c->node ? c->node->worker : "worker",
                     local[pair_a[i]] % workers, local[pair_b[i]] % workers);
    }
}

/* Under MPI: every level's pair, one level after the other; the rank that
 * measured gives its result to all. */
static void measure_mpi(const pd_cluster *c, const pd_topo *t, level_result *res)
{
    int rank, ranks;
    char *hosts = NULL;
    int *node = NULL, *local = NULL, pair_a[PD_CLUSTER_MAX_LEVELS], pair_b[PD_CLUSTER_MAX_LEVELS];
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    pd_transport_token token = {{0}};
    int len = 0;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    hosts = calloc((size_t)ranks, MPI_MAX_PROCESSOR_NAME);
    node = calloc((size_t)ranks, sizeof(int));
    local = calloc((size_t)ranks, sizeof(int));
    if (!hosts || !node || !local) {
        /* The others wait in MPI_Allgather: this job cannot go on. */
        pd_cli_error("topo --measure: out of memory for %d ranks", ranks);
        MPI_Abort(MPI_COMM_WORLD, PD_CLI_FAILURE);
    }
    MPI_Get_processor_name(host, &len);
    MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    /* Nodes in order of their first rank; a rank's local rank counts the
     * ranks of its host before it. */
    for (int r = 0, nodes = 0; r < ranks; r++) {
        node[r] = -1;
        for (int q = 0; q < r; q++)
            if (strcmp(hosts + (size_t)q * MPI_MAX_PROCESSOR_NAME, hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME) == 0) {
                node[r] = node[q];
                local[r]++;
            }
        if (node[r] < 0)
            node[r] = nodes++;
    }
    /* Placed as the runtime places ranks: near worker local rank mod workers. */
    if (t && t->hwloc && pd_topo_bind(t, local[rank], NULL, NULL, NULL) != PD_OK)
        PD_LOG_DEBUGF("topo --measure: rank %d stays unbound: %s", rank, pd_last_error());
    plan_pairs(c, node, local, ranks, hosts, MPI_MAX_PROCESSOR_NAME, pair_a, pair_b, res);
    if (rank == 0 && pd_transport_token_generate(&token) != PD_OK)
        PD_LOG_WARNF("topo --measure: %s", pd_last_error()); /* a zero token still proves itself */
    MPI_Bcast(token.bytes, (int)sizeof(token.bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
    for (int i = 0; i < c->n_levels; i++) {
        bool network = i >= intra_levels(c);
        pd_cli_link link;

        if (pair_a[i] < 0)
            continue;
        if (rank == pair_a[i] || rank == pair_b[i]) {
            bool measuring = rank == pair_a[i];
            pd_status s = pd_cli_link_open_mpi(&link, measuring ? pair_b[i] : pair_a[i], measuring,
                                               network ? NETWORK_BACKENDS : INTRA_BACKENDS, &token, STREAM_BYTES,
                                               DEPTH);
            if (s != PD_OK) {
                res[i].state = FAILED;
                snprintf(res[i].why, sizeof(res[i].why), "failed: %s", pd_last_error());
            } else if (measuring) {
                measure(&link, &res[i]);
            } else if (serve(&link, NULL) != 0) {
                PD_LOG_WARNF("topo --measure: rank %d: %s", rank, pd_last_error());
            }
            pd_cli_link_close(&link);
        }
        MPI_Bcast(&res[i], (int)sizeof(res[i]), MPI_BYTE, pair_a[i], MPI_COMM_WORLD);
    }
    free(hosts);
    free(node);
    free(local);
}
#endif

/* "12.5 GB/s, 8 us"; between nodes also in bits, as NICs and --network
 * are given: "25 MB/s = 200 Mb/s, 50 us". */
static const char *speed(double bytes_per_s, double latency_s, bool network, char *buf, size_t size)
{
    static const char *const bit_units[] = {"b/s", "Kb/s", "Mb/s", "Gb/s", "Tb/s"};
    double bits = bytes_per_s * 8;
    char bw[32], in_bits[40] = "";
    int u = 0;

    for (; network && u < 4 && bits >= 1000.0; u++)
        bits /= 1000.0;
    if (network)
        snprintf(in_bits, sizeof(in_bits), " = %.4g %s", bits, bit_units[u]);
    snprintf(buf, size, "%s%s, %.3g us", pd_bandwidth_format(bytes_per_s, bw, sizeof(bw)), in_bits, latency_s * 1e6);
    return buf;
}

int pd_cli_topo_measure(const pd_cluster *c, const pd_topo *node, bool mpi, FILE *out)
{
    level_result res[PD_CLUSTER_MAX_LEVELS];
    int rank = 0, ranks = 1, code = PD_CLI_OK;

    memset(res, 0, sizeof(res));
#ifdef HAVE_MPI
    if (mpi) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    }
#endif
    if (ranks < 2)
        measure_alone(c, res);
#ifdef HAVE_MPI
    else
        measure_mpi(c, node, res);
#endif
    if (rank != 0)
        return PD_CLI_OK;
    fprintf(out, "\nmeasured with the transport (bandwidth: %d messages of %d MiB; latency: half round trip of %d B):\n",
            STREAM_MESSAGES, STREAM_BYTES >> 20, PING_BYTES);
    for (int i = 0; i < c->n_levels; i++) {
        const pd_cluster_level *l = &c->levels[i];
        bool network = i >= intra_levels(c);
        /* A bandwidth from --network was given, not discovered. */
        const char *known = strcmp(l->source, "user") == 0 ? "given" : "discovered";
        char found[80], got[80];

        fprintf(out, "  %d %-10s %-10s %s (%s%s)\n", i, l->name, known,
                speed(l->bandwidth_bytes_per_s, l->latency_s, network, found, sizeof(found)), l->source,
                strcmp(known, "given") == 0 ? ": --network" : "");
        if (res[i].state == MEASURED)
            fprintf(out, "  %*s measured   %s (%s; %.2f of %s), %s\n", 12, "",
                    speed(res[i].bytes_per_s, res[i].latency_s, network, got, sizeof(got)), res[i].backend,
                    l->bandwidth_bytes_per_s > 0 ? res[i].bytes_per_s / l->bandwidth_bytes_per_s : 0.0, known,
                    res[i].between);
        else
            fprintf(out, "  %*s %s\n", 12, "", res[i].why);
        if (res[i].state == FAILED)
            code = PD_CLI_FAILURE;
    }
    return code;
}
