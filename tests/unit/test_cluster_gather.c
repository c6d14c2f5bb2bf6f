/* Rank 0's part of `pipedream topo --mpi` without MPI (the messages the
 * ranks would send, made here from real machines' hwloc XML): ranks grouped
 * by host into nodes; the network level from the slowest node's way to its
 * NIC, or as given; nodes with different workers reduced to the fewest; a
 * node without a NIC named in the error; a rank without a description or
 * with a malformed one named; the cluster surviving the JSON round trip
 * that the broadcast makes. tests/integration/topo_mpi.sh runs the MPI
 * part under mpirun. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/topology.h>

#include "topology/topo_int.h"

/* 3 GPUs, an RDMA NIC and two Ethernet ones, rates bounded by PCIe. */
#define GPU3_A "24em64t-2n6c2t-pci"
/* 3 GPUs, NICs of unknown rate. */
#define GPU3_B "32em64t-2n8c2t-pci-wholeio"
/* CPU-only: 4 socket workers. */
#define SOCKET4 "40intel64-2g2n4c+pcilocality"
/* 16 GPUs on NVSwitch, no NIC. */
#define DGX2 "nvidiaDGX2"

static pd_topo *load(const char *name)
{
    char path[PATH_MAX];
    const char *top = getenv("top_srcdir");
    pd_topo *t = NULL;

    snprintf(path, sizeof(path), "%s/tests/topology/%s.xml", top ? top : ".", name);
    if (pd_topo_load_xml(path, &t) != PD_OK)
        print_error("%s\n", pd_last_error());
    assert_non_null(t);
    return t;
}

/* The messages of `ranks` ranks: rank r on hosts[r] with machines[r]. */
typedef struct job {
    int ranks;
    char *messages[8];
} job;

static void job_make(job *j, int ranks, const char *const *hosts, const char *const *machines)
{
    j->ranks = ranks;
    for (int r = 0; r < ranks; r++) {
        pd_topo *t = load(machines[r]);
        j->messages[r] = pd_cluster_rank_message(t, hosts[r]);
        assert_non_null(j->messages[r]);
        pd_topo_destroy(t);
    }
}

static void job_free(job *j)
{
    for (int r = 0; r < j->ranks; r++)
        free(j->messages[r]);
}

static pd_status gather(const job *j, const pd_cluster_network *net, pd_cluster **out)
{
    return pd_cluster_from_ranks((const char *const *)j->messages, j->ranks, net, out);
}

/* The network level pd_cluster_build gives two nodes like `machine`. */
static pd_cluster_level network_of(const char *machine)
{
    pd_topo *t = load(machine);
    pd_cluster *pair = NULL;
    pd_cluster_level l;

    assert_int_equal(pd_cluster_build(t, 2, NULL, &pair), PD_OK);
    l = pair->levels[pair->n_levels - 1];
    pd_cluster_destroy(pair);
    pd_topo_destroy(t);
    return l;
}

/* The cluster as the broadcast carries it, read back, equals the original. */
static void expect_round_trip(const pd_cluster *c)
{
    json_t *j = pd_cluster_to_json(c);
    pd_cluster *back = calloc(1, sizeof(*back));

    assert_non_null(back);
    assert_int_equal(pd_cluster_from_json(j, "broadcast", back), PD_OK);
    assert_string_equal(back->name, c->name);
    assert_string_equal(back->description, c->description);
    assert_int_equal(back->nodes, c->nodes);
    assert_int_equal(back->workers_per_node, c->workers_per_node);
    assert_int_equal(back->n_levels, c->n_levels);
    for (int i = 0; i < c->n_levels; i++) {
        assert_string_equal(back->levels[i].name, c->levels[i].name);
        assert_int_equal(back->levels[i].fanout, c->levels[i].fanout);
        assert_true(back->levels[i].bandwidth_bytes_per_s == c->levels[i].bandwidth_bytes_per_s);
        assert_true(back->levels[i].latency_s == c->levels[i].latency_s);
        assert_string_equal(back->levels[i].source, c->levels[i].source);
    }
    assert_int_equal(back->node->n_gpus, c->node->n_gpus);
    pd_cluster_destroy(back);
    json_decref(j);
}

static void test_one_host(void **state)
{
    const char *hosts[] = {"n0", "n0", "n0"}, *machines[] = {GPU3_A, GPU3_A, GPU3_A};
    pd_topo *t = load(GPU3_A);
    pd_cluster *c = NULL;
    job j;
    (void)state;

    job_make(&j, 3, hosts, machines);
    assert_int_equal(gather(&j, NULL, &c), PD_OK);
    assert_int_equal(c->nodes, 1);
    assert_int_equal(c->workers_per_node, 3);
    assert_int_equal(pd_cluster_workers(c), 3);
    /* The node's own levels, no network. */
    assert_int_equal(c->n_levels, t->n_levels);
    for (int i = 0; i < t->n_levels; i++) {
        assert_string_equal(c->levels[i].name, t->levels[i].name);
        assert_int_equal(c->levels[i].fanout, t->levels[i].fanout);
        assert_true(c->levels[i].bandwidth_bytes_per_s == t->levels[i].bandwidth_bytes_per_s);
    }
    assert_string_equal(c->description, "1 node of 3 gpu workers, gathered from 3 MPI ranks");
    expect_round_trip(c);
    pd_cluster_destroy(c);
    pd_topo_destroy(t);
    job_free(&j);
}

static void test_two_hosts(void **state)
{
    const char *hosts[] = {"a", "b", "a", "b"}, *machines[] = {GPU3_A, GPU3_B, GPU3_A, GPU3_B};
    pd_cluster_level na = network_of(GPU3_A), nb = network_of(GPU3_B);
    const pd_cluster_level *slow = na.bandwidth_bytes_per_s <= nb.bandwidth_bytes_per_s ? &na : &nb;
    pd_cluster_network given = {.bandwidth_bytes_per_s = 3.125e9, .latency_s = 2e-6};
    pd_cluster *c = NULL;
    const pd_cluster_level *net;
    job j;
    (void)state;

    /* The test means something only if the two ways out differ. */
    assert_true(na.bandwidth_bytes_per_s != nb.bandwidth_bytes_per_s);
    job_make(&j, 4, hosts, machines);
    assert_int_equal(gather(&j, NULL, &c), PD_OK);
    assert_int_equal(c->nodes, 2);
    assert_int_equal(c->workers_per_node, 3);
    assert_int_equal(pd_cluster_workers(c), 6);
    net = &c->levels[c->n_levels - 1];
    assert_string_equal(net->name, "network");
    assert_int_equal(net->fanout, 2);
    assert_true(net->bandwidth_bytes_per_s == slow->bandwidth_bytes_per_s);
    assert_true(net->latency_s == slow->latency_s);
    assert_string_equal(net->source, slow->source);
    assert_string_equal(c->description, "2 nodes of 3 gpu workers, gathered from 4 MPI ranks");
    expect_round_trip(c);
    pd_cluster_destroy(c);

    /* A bandwidth given on the command line wins. */
    assert_int_equal(gather(&j, &given, &c), PD_OK);
    net = &c->levels[c->n_levels - 1];
    assert_true(net->bandwidth_bytes_per_s == 3.125e9);
    assert_true(net->latency_s == 2e-6);
    assert_string_equal(net->source, "user");
    pd_cluster_destroy(c);
    job_free(&j);
}

static void test_nodes_differ(void **state)
{
    const char *hosts[] = {"big", "small"}, *machines[] = {SOCKET4, GPU3_A};
    pd_cluster *c = NULL;
    job j;
    (void)state;

    job_make(&j, 2, hosts, machines);
    assert_int_equal(gather(&j, NULL, &c), PD_OK);
    /* The fewest workers: a plan must fit on every node. */
    assert_int_equal(c->nodes, 2);
    assert_int_equal(c->workers_per_node, 3);
    assert_string_equal(c->node->worker, "gpu");
    assert_int_equal(pd_cluster_workers(c), 6);
    pd_cluster_destroy(c);
    job_free(&j);
}

static void test_errors(void **state)
{
    const char *hosts[] = {"x", "y"}, *machines[] = {DGX2, DGX2};
    pd_cluster_network given = {.bandwidth_bytes_per_s = 12.5e9, .latency_s = -1};
    pd_cluster *c = NULL;
    char *kept;
    job j;
    (void)state;

    /* Nodes without a NIC cannot be joined unless the network is given. */
    job_make(&j, 2, hosts, machines);
    assert_int_equal(gather(&j, NULL, &c), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "host x: "));
    assert_non_null(strstr(pd_last_error(), "no NIC"));
    assert_null(c);
    assert_int_equal(gather(&j, &given, &c), PD_OK);
    assert_int_equal(pd_cluster_workers(c), 32);
    assert_string_equal(c->levels[c->n_levels - 1].source, "user");
    pd_cluster_destroy(c);
    c = NULL;

    /* A rank that had nothing to send. */
    kept = j.messages[1];
    j.messages[1] = NULL;
    assert_int_equal(gather(&j, &given, &c), PD_ECOMM);
    assert_non_null(strstr(pd_last_error(), "rank 1 has no description of its node"));
    j.messages[1] = kept;

    /* Malformed messages name the rank. */
    kept = j.messages[0];
    j.messages[0] = "{\"host\": \"x\"";
    assert_int_equal(gather(&j, &given, &c), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "rank 0's node"));
    j.messages[0] = "{\"host\": 3, \"node\": {}}";
    assert_int_equal(gather(&j, &given, &c), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "rank 0's node: host"));
    j.messages[0] = "{\"host\": \"x\", \"node\": {\"workers\": -1}}";
    assert_int_equal(gather(&j, &given, &c), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "rank 0's node"));
    j.messages[0] = kept;
    assert_null(c);
    assert_int_equal(pd_cluster_from_ranks(NULL, 0, NULL, &c), PD_EINVAL);
    job_free(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_host),
        cmocka_unit_test(test_two_hosts),
        cmocka_unit_test(test_nodes_differ),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
