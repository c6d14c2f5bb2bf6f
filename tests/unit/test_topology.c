/* Topology: golden tests on real machines' hwloc XML (tests/topology/, the
 * text of pd_topo_print compared with the expected files beside them, and
 * the facts checked by hand: GPUs, NICs, NUMA locality, NVLink through
 * NVSwitch, levels), live discovery on whatever runs the test, clusters
 * built and round-tripped through files, bad files named by field, the
 * shipped cluster files, bandwidth units and binding. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/topology.h>

#include "core/pd_units.h"
#include "test_files.h"
#include "test_topo_xml.h"

static char *print_to_string(const pd_topo *t)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);

    assert_non_null(f);
    pd_topo_print(t, f);
    assert_int_equal(fclose(f), 0);
    return text;
}

/* ---- golden files ---- */

static const char *const machines[] = {
    "24em64t-2n6c2t-pci", "32em64t-2n8c2t-pci-wholeio", "40intel64-2g2n4c+pcilocality",
    "96em64t-4n4d3ca2co-pci", "nvidiaDGX2",
};

static void test_golden_text(void **state)
{
    for (size_t m = 0; m < sizeof(machines) / sizeof(machines[0]); m++) {
        char rel[256];
        size_t size;
        pd_topo *t = test_topo_load(machines[m]);
        char *text = print_to_string(t);
        snprintf(rel, sizeof(rel), "tests/topology/%s.expected", machines[m]);
        unsigned char *expected = test_read_file(test_src_path(rel), &size);
        if (strcmp(text, (const char *)expected) != 0) {
            const char *a = text, *b = (const char *)expected;
            int line = 1;
            while (*a && *a == *b) {
                line += *a == '\n';
                a++;
                b++;
            }
            fail_msg("%s: printed text differs from %s at line %d:\n got: %.120s\nwant: %.120s", machines[m], rel, line,
                     a, b);
        }
        free(expected);
        free(text);
        pd_topo_destroy(t);
    }
}

/* DGX-2: 16 V100 in two groups of 8, each GPU with one NVLink to each of
 * its baseboard's 6 NVSwitches (25 GB/s each); every pair 150 GB/s. */
static void test_dgx2(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");

    assert_int_equal(t->n_gpus, 16);
    assert_int_equal(t->n_nics, 0);
    for (int i = 0; i < 16; i++) {
        char name[16];
        snprintf(name, sizeof(name), "nvml%d", i);
        assert_string_equal(t->gpus[i].name, name);
        assert_string_equal(t->gpus[i].model, "Tesla V100-SXM3-32GB-H");
        assert_int_equal(t->gpus[i].numa, i < 8 ? 0 : 1);
        assert_true(fabs(t->gpus[i].pcie_bytes_per_s - 15.753846e9) < 1e4);
        assert_int_equal(t->gpus[i].nic, -1);
        for (int j = 0; j < 16; j++) {
            const pd_topo_path *p = pd_topo_gpu_path(t, i, j);
            if (i == j) {
                assert_int_equal(p->type, PD_TOPO_PATH_SELF);
                continue;
            }
            assert_int_equal(p->type, PD_TOPO_PATH_NVL);
            assert_true(p->bytes_per_s == 150e9);
            assert_string_equal(p->source, "hwloc-nvlink");
        }
    }
    assert_int_equal(t->n_levels, 1);
    assert_string_equal(t->levels[0].name, "nvlink");
    assert_int_equal(t->levels[0].fanout, 16);
    assert_true(t->levels[0].bandwidth_bytes_per_s == 150e9);
    assert_string_equal(t->worker, "gpu");
    pd_topo_destroy(t);
}

/* mirage004: GPU 06:00.0 on NUMA node 0, 11:00.0 and 14:00.0 on node 1
 * (PCIe 4 GB/s each); the InfiniBand HCA mlx4_0 (eth2, ib0) and two
 * Ethernet ports on node 0. */
static void test_24em64t_locality(void **state)
{
    pd_topo *t = test_topo_load("24em64t-2n6c2t-pci");
    int mlx = test_topo_nic(t, "mlx4_0");

    assert_int_equal(t->n_gpus, 3);
    assert_string_equal(t->gpus[0].pci_busid, "0000:06:00.0");
    assert_int_equal(t->gpus[0].numa, 0);
    assert_string_equal(t->gpus[1].pci_busid, "0000:11:00.0");
    assert_int_equal(t->gpus[1].numa, 1);
    assert_string_equal(t->gpus[2].pci_busid, "0000:14:00.0");
    assert_int_equal(t->gpus[2].numa, 1);
    assert_int_equal(t->n_nics, 3);
    assert_true(t->nics[mlx].rdma);
    assert_string_equal(t->nics[mlx].netdevs, "eth2 ib0");
    assert_int_equal(t->nics[mlx].numa, 0);
    assert_false(t->nics[test_topo_nic(t, "eth0")].rdma);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t->gpus[i].nic, mlx);
    assert_int_equal(pd_topo_gpu_nic_path(t, 0, mlx)->type, PD_TOPO_PATH_PHB);
    assert_int_equal(pd_topo_gpu_nic_path(t, 1, mlx)->type, PD_TOPO_PATH_SYS);
    assert_int_equal(pd_topo_gpu_path(t, 1, 2)->type, PD_TOPO_PATH_PHB);
    assert_int_equal(pd_topo_gpu_path(t, 0, 1)->type, PD_TOPO_PATH_SYS);
    assert_true(pd_topo_gpu_path(t, 0, 1)->bytes_per_s == 4e9);
    assert_int_equal(t->n_levels, 1);
    assert_int_equal(t->levels[0].fanout, 3);
    assert_true(t->levels[0].bandwidth_bytes_per_s == 4e9);
    pd_topo_destroy(t);
}

/* conan: the CUDA GPU 84:00.0 shares a PCIe bridge with the ConnectX-4
 * mlx5_0, so that is its nearest NIC through switches only; the GPU on
 * node 0 reaches it across the sockets. */
static void test_32em64t_locality(void **state)
{
    pd_topo *t = test_topo_load("32em64t-2n8c2t-pci-wholeio");
    int cuda = test_topo_gpu(t, "cuda0"), mlx = test_topo_nic(t, "mlx5_0");

    assert_int_equal(t->n_gpus, 3);
    assert_string_equal(t->gpus[cuda].model, "Tesla K40m");
    assert_int_equal(t->gpus[cuda].numa, 1);
    assert_int_equal(t->gpus[cuda].nic, mlx);
    assert_int_equal(pd_topo_gpu_nic_path(t, cuda, mlx)->type, PD_TOPO_PATH_PCI);
    assert_int_equal(t->gpus[0].numa, 0);
    assert_int_equal(t->gpus[0].nic, mlx);
    assert_int_equal(pd_topo_gpu_nic_path(t, 0, mlx)->type, PD_TOPO_PATH_SYS);
    assert_true(t->nics[mlx].rdma);
    assert_int_equal(t->nics[mlx].numa, 1);
    /* PCIe speeds are unknown in this file: defaults, and said so. */
    assert_string_equal(t->gpus[cuda].pcie_source, "default");
    assert_string_equal(t->nics[mlx].source, "default");
    pd_topo_destroy(t);
}

/* CPU-only machines: a worker per package, memory as the link. */
static void test_cpu_only(void **state)
{
    pd_topo *t = test_topo_load("40intel64-2g2n4c+pcilocality");
    int qib = test_topo_nic(t, "qib0");

    assert_int_equal(t->n_gpus, 0);
    assert_int_equal(t->n_numa, 4);
    assert_int_equal(t->n_nics, 5);
    assert_true(t->nics[qib].rdma);
    assert_int_equal(t->nics[qib].numa, 1);
    assert_int_equal(t->nics[test_topo_nic(t, "eth3")].numa, 0);
    assert_string_equal(t->worker, "socket");
    assert_int_equal(t->workers, 4);
    assert_int_equal(t->levels[0].fanout, 4);
    assert_true(t->levels[0].bandwidth_bytes_per_s == PD_TOPO_DEFAULT_MEMORY_BW);
    assert_string_equal(t->levels[0].source, "default");
    pd_topo_destroy(t);

    t = test_topo_load("96em64t-4n4d3ca2co-pci");
    assert_int_equal(t->n_gpus, 0);
    assert_int_equal(t->packages, 16);
    assert_int_equal(t->n_nics, 8);
    for (int k = 0; k < 8; k++) {
        assert_false(t->nics[k].rdma);
        assert_int_equal(t->nics[k].numa, k / 2);
    }
    assert_int_equal(t->workers, 16);
    pd_topo_destroy(t);
}

/* ---- live ---- */

static void test_live_discovery(void **state)
{
    pd_topo *t = NULL;
    int rdma = 0;
    char *text;

    if (pd_topo_discover(&t) != PD_OK)
        fail_msg("%s", pd_last_error());
    assert_true(t->n_numa >= 1);
    assert_true(t->pus >= 1);
    assert_true(t->n_levels >= 1);
    assert_true(t->workers >= 1);
    text = print_to_string(t);
    for (int k = 0; k < t->n_nics; k++)
        rdma += t->nics[k].rdma;
    /* The text says plainly when there is no GPU or RDMA NIC. */
    assert_int_equal(strstr(text, "GPUs: none") != NULL, t->n_gpus == 0);
    assert_int_equal(strstr(text, "RDMA NICs: none") != NULL, rdma == 0);
    free(text);
    pd_topo_destroy(t);
}

static void test_bind(void **state)
{
    pd_topo *t = NULL, *xml;
    int gpu = 7, nic = 7, numa = 7;
    cpu_set_t set;

    assert_int_equal(pd_topo_discover(&t), PD_OK);
    assert_int_equal(pd_topo_bind(t, 0, &gpu, &nic, &numa), PD_OK);
    assert_int_equal(gpu, t->n_gpus ? 0 : -1);
    assert_true(numa >= 0);
    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    for (int i = 0; i < t->n_numa; i++)
        if (t->numa[i].os_index == numa && t->n_gpus)
            assert_int_equal(CPU_COUNT(&set), t->numa[i].pus);
    assert_true(CPU_COUNT(&set) >= 1);
    assert_int_equal(pd_topo_bind(t, -1, NULL, NULL, NULL), PD_EINVAL);
    pd_topo_destroy(t);
    xml = test_topo_load("nvidiaDGX2");
    assert_int_equal(pd_topo_bind(xml, 0, NULL, NULL, NULL), PD_ENOTSUP);
    pd_topo_destroy(xml);
}

/* ---- clusters ---- */

static void assert_levels_equal(const pd_cluster_level *a, const pd_cluster_level *b, int n)
{
    for (int i = 0; i < n; i++) {
        assert_string_equal(a[i].name, b[i].name);
        assert_int_equal(a[i].fanout, b[i].fanout);
        assert_true(a[i].bandwidth_bytes_per_s == b[i].bandwidth_bytes_per_s);
        assert_true(a[i].latency_s == b[i].latency_s);
        assert_string_equal(a[i].source, b[i].source);
    }
}

static void test_cluster_round_trip(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");
    pd_cluster_network net = {.bandwidth_bytes_per_s = 12.5e9, .latency_s = -1};
    pd_cluster *c, *back;
    pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS];
    int n;

    assert_int_equal(pd_cluster_build(t, 4, &net, &c), PD_OK);
    assert_int_equal(c->n_levels, 2);
    assert_string_equal(c->levels[1].name, "network");
    assert_int_equal(c->levels[1].fanout, 4);
    assert_true(c->levels[1].bandwidth_bytes_per_s == 12.5e9);
    assert_string_equal(c->levels[1].source, "user");
    assert_int_equal(pd_cluster_workers(c), 64);
    assert_int_equal(pd_cluster_write_json(c, test_tmp_path("dgx2.cluster.json")), PD_OK);
    assert_int_equal(pd_cluster_read_json(test_tmp_path("dgx2.cluster.json"), &back), PD_OK);
    assert_int_equal(back->nodes, 4);
    assert_int_equal(back->workers_per_node, 16);
    assert_int_equal(back->n_levels, 2);
    assert_levels_equal(back->levels, c->levels, 2);
    assert_non_null(back->node);
    assert_int_equal(back->node->n_gpus, 16);
    assert_int_equal(back->node->gpus[9].numa, 1);
    assert_int_equal(pd_topo_gpu_path(back->node, 3, 12)->type, PD_TOPO_PATH_NVL);
    assert_true(pd_topo_gpu_path(back->node, 3, 12)->bytes_per_s == 150e9);
    assert_int_equal(pd_cluster_read_levels(test_tmp_path("dgx2.cluster.json"), levels, &n), PD_OK);
    assert_int_equal(n, 2);
    assert_levels_equal(levels, c->levels, 2);
    pd_cluster_destroy(back);
    pd_cluster_destroy(c);

    /* Without a NIC nothing says how nodes are joined. */
    assert_int_equal(pd_cluster_build(t, 2, NULL, &c), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "no NIC"));
    pd_topo_destroy(t);

    /* mirage004: the network is the GPUs' narrowest way out, the HCA's
     * PCIe link (2 GB/s, its rate being unknown in XML). */
    t = test_topo_load("24em64t-2n6c2t-pci");
    assert_int_equal(pd_cluster_build(t, 2, NULL, &c), PD_OK);
    assert_int_equal(c->n_levels, 2);
    assert_true(c->levels[1].bandwidth_bytes_per_s == 2e9);
    assert_string_equal(c->levels[1].source, "pci-link");
    assert_true(c->levels[1].latency_s == PD_TOPO_DEFAULT_RDMA_LATENCY);
    pd_cluster_destroy(c);
    pd_topo_destroy(t);
}

/* A bad file is PD_EFORMAT with the file and field in the message. */
static void expect_bad(const char *text, const char *field)
{
    const char *path = test_tmp_path("bad.cluster.json");
    pd_cluster *c = NULL;

    test_write_text(path, text);
    pd_error_clear();
    assert_int_equal(pd_cluster_read_json(path, &c), PD_EFORMAT);
    assert_null(c);
    if (!strstr(pd_last_error(), field) || !strstr(pd_last_error(), "bad.cluster.json"))
        fail_msg("message '%s' does not name '%s'", pd_last_error(), field);
}

static void test_cluster_file_errors(void **state)
{
    pd_cluster *c;

    expect_bad("{\"levels\": [{\"name\": \"gpu\", \"fanout\": 4, \"bandwidth_bytes_per_s\": 1e10},"
               " {\"name\": \"network\", \"fanout\": 2, \"bandwidth_bytes_per_s\": -3}]}",
               "levels[1].bandwidth_bytes_per_s");
    expect_bad("{\"levels\": [{\"name\": \"gpu\", \"fanout\": 4, \"bandwidth_bytes_per_s\": \"25 furlongs\"}]}",
               "levels[0].bandwidth_bytes_per_s");
    expect_bad("{\"levels\": [{\"name\": \"gpu\", \"fanuot\": 4, \"bandwidth_bytes_per_s\": 1}]}", "fanuot");
    expect_bad("{\"levels\": [{\"name\": \"gpu\", \"fanout\": 0, \"bandwidth_bytes_per_s\": 1}]}", "levels[0].fanout");
    expect_bad("{\"nodes\": 3, \"levels\": [{\"name\": \"gpu\", \"fanout\": 4, \"bandwidth_bytes_per_s\": 1}]}",
               "nodes x workers_per_node");
    expect_bad("{\"levels\": []}", "levels");
    expect_bad("{\"format\": \"pipedream-plan\", \"levels\": []}", "format");
    expect_bad("{\"name\": \"x\"}", "levels");
    expect_bad("{\"levels\": [", "bad.cluster.json:");
    expect_bad("{\"levels\": [{\"name\": \"g\", \"fanout\": 1, \"bandwidth_bytes_per_s\": 1}], \"node\": {\"gpus\": "
               "[{\"name\": \"g0\", \"pcie_bandwidth_bytes_per_s\": 1, \"nic\": 2}]}}",
               "gpus[0].nic");

    /* Hand-written: units and defaults. */
    test_write_text(test_tmp_path("ok.cluster.json"),
               "{\"nodes\": 2, \"levels\": [{\"name\": \"pcie\", \"fanout\": 4, \"bandwidth_bytes_per_s\": "
               "\"12GB/s\"}, {\"name\": \"network\", \"fanout\": 2, \"bandwidth_bytes_per_s\": \"25Gb/s\", "
               "\"latency_s\": 2e-5}]}");
    assert_int_equal(pd_cluster_read_json(test_tmp_path("ok.cluster.json"), &c), PD_OK);
    assert_int_equal(c->workers_per_node, 4);
    assert_true(c->levels[0].bandwidth_bytes_per_s == 12e9);
    assert_true(c->levels[1].bandwidth_bytes_per_s == 3.125e9);
    assert_true(c->levels[0].latency_s == 0);
    assert_string_equal(c->levels[1].source, "file");
    assert_null(c->node);
    pd_cluster_destroy(c);
}

/* The paper's clusters and two modern nodes, as shipped. */
static void test_shipped_clusters(void **state)
{
    static const struct {
        const char *file;
        int workers, levels;
        double outer_bw;
    } shipped[] = {
        {"cluster-a", 16, 2, 10e9 / 8},  /* 4 x 4 V100, PCIe; 10 Gb/s */
        {"cluster-b", 32, 2, 25e9 / 8},  /* 4 x 8 V100, NVLink; 25 Gb/s */
        {"cluster-c", 4, 1, 40e9 / 8},   /* 4 x 1 Titan X; 40 Gb/s */
        {"dgx2", 16, 1, 150e9},          /* one DGX-2 from its hwloc XML */
        {"h200-ndr", 32, 2, 400e9 / 8},  /* 4 x 8 H200, NVSwitch; NDR per GPU */
    };

    for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++) {
        char rel[256];
        pd_cluster *c = NULL;
        snprintf(rel, sizeof(rel), "topology/clusters/%s.cluster.json", shipped[i].file);
        if (pd_cluster_read_json(test_src_path(rel), &c) != PD_OK)
            fail_msg("%s", pd_last_error());
        assert_int_equal(pd_cluster_workers(c), shipped[i].workers);
        assert_int_equal(c->n_levels, shipped[i].levels);
        assert_true(fabs(c->levels[c->n_levels - 1].bandwidth_bytes_per_s - shipped[i].outer_bw) < 1);
        pd_cluster_destroy(c);
    }
}

static void test_bandwidth_units(void **state)
{
    double v = 0;
    char buf[32];

    assert_int_equal(pd_bandwidth_parse("25Gb/s", "x", &v), PD_OK);
    assert_true(v == 3.125e9);
    assert_int_equal(pd_bandwidth_parse("12.5 GB/s", "x", &v), PD_OK);
    assert_true(v == 12.5e9);
    assert_int_equal(pd_bandwidth_parse("100mb/s", "x", &v), PD_OK);
    assert_true(v == 12.5e6);
    assert_int_equal(pd_bandwidth_parse("1e9", "x", &v), PD_OK);
    assert_true(v == 1e9);
    assert_int_equal(pd_bandwidth_parse("400 Gb/s", "x", &v), PD_OK);
    assert_true(v == 50e9);
    assert_int_equal(pd_bandwidth_parse("0Gb/s", "--network", &v), PD_EINVAL);
    assert_int_equal(pd_bandwidth_parse("fast", "--network", &v), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "--network"));
    assert_int_equal(pd_bandwidth_parse("25 Gbit", "x", &v), PD_EINVAL);
    assert_int_equal(pd_bandwidth_parse(" 25Gb/s", "x", &v), PD_EINVAL);
    assert_string_equal(pd_bandwidth_format(15.753846e9, buf, sizeof(buf)), "15.75 GB/s");
    assert_string_equal(pd_bandwidth_format(200e6, buf, sizeof(buf)), "200 MB/s");
}

static void test_xml_errors(void **state)
{
    pd_topo *t = NULL;

    test_write_text(test_tmp_path("bad.xml"), "<topology version=\"2.0\"><object type=\"Machine\"");
    assert_int_equal(pd_topo_load_xml(test_tmp_path("bad.xml"), &t), PD_EFORMAT);
    assert_non_null(strstr(pd_last_error(), "bad.xml: not a valid hwloc XML topology"));
    test_write_text(test_tmp_path("bad.xml"), "{\"levels\": []}");
    assert_int_equal(pd_topo_load_xml(test_tmp_path("bad.xml"), &t), PD_EFORMAT);
    assert_int_equal(pd_topo_load_xml(test_tmp_path("missing.xml"), &t), PD_EIO);
    assert_non_null(strstr(pd_last_error(), "missing.xml"));
    assert_null(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_text),
        cmocka_unit_test(test_dgx2),
        cmocka_unit_test(test_24em64t_locality),
        cmocka_unit_test(test_32em64t_locality),
        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_live_discovery),
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_cluster_round_trip),
        cmocka_unit_test(test_cluster_file_errors),
        cmocka_unit_test(test_shipped_clusters),
        cmocka_unit_test(test_bandwidth_units),
        cmocka_unit_test(test_xml_errors),
    };
    return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
