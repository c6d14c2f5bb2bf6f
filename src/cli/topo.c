/* `pipedream topo`: discovers this node (or reads an hwloc XML file), prints
 * its tree, GPU paths, nearest NICs and levels, and writes the cluster file
 * the partitioner reads (with --mpi: of every node of an MPI job, gathered
 * by rank 0; with --measure: beside what the transport achieves at each
 * level); or checks and prints a cluster file. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>
#include <pipedream/topology.h>

#include "cli/pd_cli.h"
#include "cli/transport_measure.h"
#include "core/pd_units.h"

typedef struct topo_args {
    const char *xml, *output, *cluster, *name;
    int64_t nodes;
    double network, latency;
    bool json, measure, mpi;
} topo_args;

enum { OPT_XML = 256, OPT_NODES, OPT_NETWORK, OPT_LATENCY, OPT_JSON, OPT_CLUSTER, OPT_NAME, OPT_MEASURE, OPT_MPI };

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream topo [--xml FILE] [--nodes N] [--network BW] [-o FILE.cluster.json] [--json]\n"
            "       mpirun -np N pipedream topo --mpi [--measure] [--xml FILE] [--network BW] [-o FILE.cluster.json]\n"
            "       pipedream topo --cluster FILE.cluster.json [--json]\n"
            "\n"
            "Discovers this node with hwloc (or reads an hwloc XML file instead): CPUs and\n"
            "NUMA memory, the PCIe tree with link speeds, GPUs, NICs (port rates through\n"
            "libibverbs or sysfs), NVLink; prints the tree, the best path between every\n"
            "pair of GPUs, each GPU's nearest NIC and PipeDream's levels inside the node,\n"
            "then the cluster of N such nodes. Every number says where it came from\n"
            "(hwloc-pci, hwloc-nvlink, verbs, sysfs, pci-link, user, default).\n"
            "\n"
            "Options:\n"
            "  --xml FILE         an hwloc XML topology instead of this machine\n"
            "  --nodes N          nodes in the cluster (default 1)\n"
            "  --network BW       bandwidth between nodes, e.g. 25Gb/s or 12.5GB/s (default:\n"
            "                     the GPUs' way to their nearest NIC, else the fastest NIC)\n"
            "  --latency S        latency between nodes in seconds (default by NIC kind)\n"
            "  --name NAME        the cluster's name (default: the host's)\n"
            "  -o, --output FILE  write the cluster file (*.cluster.json)\n"
            "  --json             print the cluster file to stdout instead of the text\n"
            "  --mpi              every rank of the MPI job describes its node; rank 0\n"
            "                     gathers them (a node per host) into the cluster, prints\n"
            "                     it and writes -o FILE\n"
            "  --cluster FILE     read, check and print a cluster file\n"
            "  --measure          measure each level with the transport and print it beside\n"
            "                     the discovered numbers: with --mpi between a pair of ranks\n"
            "                     at that level (shm inside a node, verbs or tcp between\n"
            "                     nodes); alone, between two processes of this node for\n"
            "                     the innermost level (the others are named unmeasured)\n"
            "  --help             this text\n");
}

static int parse_args(int argc, char **argv, topo_args *a)
{
    static const struct option options[] = {
        {"xml", required_argument, NULL, OPT_XML},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"network", required_argument, NULL, OPT_NETWORK},
        {"latency", required_argument, NULL, OPT_LATENCY},
        {"name", required_argument, NULL, OPT_NAME},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"measure", no_argument, NULL, OPT_MEASURE},
        {"mpi", no_argument, NULL, OPT_MPI},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;

    *a = (topo_args){.nodes = 1, .latency = -1};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":ho:", options, NULL)) != -1) {
        switch (c) {
        case OPT_XML: a->xml = optarg; break;
        case OPT_NODES: bad = pd_cli_parse_int64("topo: --nodes", optarg, 1, 1 << 20, &a->nodes); break;
        case OPT_NETWORK:
            if (pd_bandwidth_parse(optarg, "topo: --network", &a->network) != PD_OK) {
                pd_cli_error("%s", pd_last_error());
                bad = 1;
            }
            break;
        case OPT_LATENCY: bad = pd_cli_parse_double("topo: --latency", optarg, 0, 10, &a->latency); break;
        case OPT_NAME: a->name = optarg; break;
        case 'o': a->output = optarg; break;
        case OPT_JSON: a->json = true; break;
        case OPT_CLUSTER: a->cluster = optarg; break;
        case OPT_MEASURE: a->measure = true; break;
        case OPT_MPI: a->mpi = true; break;
        case 'h': usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("topo", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("topo: unexpected argument '%s' (see 'pipedream topo --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (a->cluster &&
        (a->xml || a->output || a->nodes != 1 || a->network > 0 || a->latency >= 0 || a->name || a->mpi)) {
        pd_cli_error("topo: --cluster reads a cluster file; --xml, --nodes, --network, --latency, --name, --mpi and -o "
                     "do not apply");
        return PD_CLI_USAGE;
    }
    if (a->mpi && a->nodes != 1) {
        pd_cli_error("topo: --mpi counts the nodes of the MPI job; --nodes does not apply");
        return PD_CLI_USAGE;
    }
#ifndef HAVE_MPI
    if (a->mpi) {
        pd_cli_error("topo: --mpi: this build has no MPI (configure found none; see --with-mpi)");
        return PD_CLI_USAGE;
    }
#endif
    if (a->output && !a->output[0]) {
        pd_cli_error("topo: -o: an empty file name");
        return PD_CLI_USAGE;
    }
    if (a->measure && (a->cluster || a->json || a->xml)) {
        pd_cli_error("topo: --measure measures this machine or MPI job and prints a table; --cluster, --xml and "
                     "--json do not apply (-o writes the cluster file)");
        return PD_CLI_USAGE;
    }
    return -1;
}

static int show_cluster_file(const topo_args *a)
{
    pd_cluster *c;
    pd_status s;

    if ((s = pd_cluster_read_json(a->cluster, &c)) != PD_OK)
        return pd_cli_fail("topo: --cluster", s);
    if (a->json)
        s = pd_cluster_print_json(c, stdout);
    else {
        if (c->node)
            pd_topo_print(c->node, stdout);
        pd_cluster_print(c, stdout);
    }
    pd_cluster_destroy(c);
    return s == PD_OK ? PD_CLI_OK : pd_cli_fail("topo", s);
}

/* --mpi: MPI's start (this rank in *rank) and end around the gather. */
static int mpi_start(int *rank)
{
#ifdef HAVE_MPI
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        pd_cli_error("topo: --mpi: MPI_Init failed");
        return PD_CLI_FAILURE;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    pd_log_set_rank(*rank);
#else
    *rank = 0;
#endif
    return -1;
}

static void mpi_end(void)
{
#ifdef HAVE_MPI
    MPI_Finalize();
#endif
}

int pd_cli_topo(int argc, char **argv)
{
    pd_cluster_network net = {0};
    pd_cluster *c = NULL;
    pd_topo *t = NULL;
    topo_args a;
    pd_status s;
    int rank = 0, measured, code = parse_args(argc, argv, &a);

    if (code >= 0)
        return code;
    if (a.cluster)
        return show_cluster_file(&a);
    if (a.mpi && (code = mpi_start(&rank)) >= 0)
        return code;
    s = a.xml ? pd_topo_load_xml(a.xml, &t) : pd_topo_discover(&t);
    if (s != PD_OK) {
        code = pd_cli_fail(a.xml ? "topo: --xml" : "topo", s);
        if (!a.mpi)
            return code;
    }
    net.bandwidth_bytes_per_s = a.network;
    net.latency_s = a.latency;
    if (a.mpi) {
        /* A rank that failed above still takes part, so that none waits. */
        pd_status gathered = pd_cluster_gather(s == PD_OK ? t : NULL, &net, &c);
        if (s != PD_OK)
            goto release;
        if ((s = gathered) != PD_OK) {
            code = pd_cli_fail("topo: --mpi", s);
            goto release;
        }
    } else if ((s = pd_cluster_build(t, (int)a.nodes, &net, &c)) != PD_OK) {
        code = pd_cli_fail(a.network > 0 ? "topo" : "topo: --nodes", s);
        goto release;
    }
    if (rank != 0) { /* rank 0 prints and writes for the job */
        code = a.measure ? pd_cli_topo_measure(c, t, a.mpi, stdout) : PD_CLI_OK;
        goto release;
    }
    if (a.name)
        snprintf(c->name, sizeof(c->name), "%s", a.name);
    if (a.json) {
        if ((s = pd_cluster_print_json(c, stdout)) != PD_OK) {
            code = pd_cli_fail("topo", s);
            goto release;
        }
    } else {
        pd_topo_print(t, stdout);
        printf("\n");
        pd_cluster_print(c, stdout);
    }
    /* Before -o, which only rank 0 writes: the others measure with it. */
    measured = a.measure ? pd_cli_topo_measure(c, t, a.mpi, stdout) : PD_CLI_OK;
    if (a.output && (s = pd_cluster_write_json(c, a.output)) != PD_OK) {
        code = pd_cli_fail("topo: -o", s);
        goto release;
    }
    code = measured;
release:
    pd_cluster_destroy(c);
    pd_topo_destroy(t);
    if (a.mpi)
        mpi_end();
    return code;
}
