/* Binding pipeline ranks (src/runtime/binding.c): the choice of GPU, NIC,
 * NUMA node and cores for local ranks 0..N-1 made from real machines'
 * hwloc XML (tests/topology/), with and without CUDA_VISIBLE_DEVICES and
 * SLURM_GPUS_ON_NODE; CPU-only nodes, where ranks beyond the cores are not
 * bound; the line a rank prints; the mode and $PD_TOPO_XML checked; and
 * the act of binding on this machine (its cores, through hwloc). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

#include "runtime/pd_runtime_int.h"
#include "test_files.h"
#include "test_topo_xml.h"

/* An environment of "NAME=value" entries, NULL-terminated. */
static const char *lookup(const char *name, void *ctx)
{
    size_t n = strlen(name);

    for (const char *const *e = ctx; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static pd_slurm_env *env_of(const char *const *vars)
{
    pd_slurm_env *env = NULL;

    assert_int_equal(pd_slurm_env_read(lookup, (void *)vars, &env), PD_OK);
    return env;
}

/* The binding of local rank `rank` of `ranks`; `why` receives why it is
 * not bound, `notes` the rest. */
static pd_pipeline_binding choose(const pd_topo *t, const pd_slurm_env *env, int rank, int ranks, int cuda_device,
                                  char *why, char *notes)
{
    pd_binding_input in = {.topo = t, .local_rank = rank, .local_ranks = ranks, .env = env, .cuda_device = cuda_device};
    pd_pipeline_binding b;
    char w[192], n[192];

    assert_int_equal(pd_binding_choose(&in, &b, why ? why : w, notes ? notes : n, sizeof(w)), PD_OK);
    return b;
}

/* The NUMA node (os index) of logical core c. */
static int numa_of_core(const pd_topo *t, int c)
{
    for (int i = 0; i < t->n_numa; i++)
        if (c >= t->numa[i].first_core && c < t->numa[i].first_core + t->numa[i].cores)
            return t->numa[i].os_index;
    fail_msg("core %d in no NUMA node", c);
    return -1;
}

/* ---- the cores of each NUMA node, as discovery now records them ---- */

static void test_numa_cores(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");

    assert_int_equal(t->n_numa, 2);
    assert_int_equal(t->numa[0].cores, 2);
    assert_int_equal(t->numa[0].first_core, 0);
    assert_int_equal(t->numa[1].cores, 2);
    assert_int_equal(t->numa[1].first_core, 2);
    pd_topo_destroy(t);
    t = test_topo_load("96em64t-4n4d3ca2co-pci");
    for (int i = 0, next = 0; i < t->n_numa; i++) {
        assert_int_equal(t->numa[i].cores, 24);
        assert_int_equal(t->numa[i].first_core, next);
        next += t->numa[i].cores;
    }
    pd_topo_destroy(t);
}

/* ---- GPU nodes ---- */

/* DGX-2: 16 ranks get the 16 GPUs, each its own, with its CUDA ordinal;
 * the XML has no NIC; 8 GPUs per NUMA node of 2 cores, so the 8 ranks of a
 * node share its 2 cores rather than go unbound. */
static void test_dgx2_sixteen_ranks(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");
    bool taken[16] = {false};
    char why[192];

    for (int r = 0; r < 16; r++) {
        pd_pipeline_binding b = choose(t, NULL, r, 16, -1, why, NULL);
        assert_string_equal(why, "");
        assert_int_equal(b.gpu, r);
        assert_int_equal(b.cuda_device, r);
        assert_false(taken[b.gpu]);
        taken[b.gpu] = true;
        assert_string_equal(b.gpu_busid, t->gpus[r].pci_busid);
        assert_int_equal(b.nic, -1);
        assert_int_equal(b.numa, r < 8 ? 0 : 1);
        assert_int_equal(b.first_core, r < 8 ? 0 : 2);
        assert_int_equal(b.cores, 2);
        assert_int_equal(b.sharing, 8);
    }
    pd_topo_destroy(t);
}

/* CUDA_VISIBLE_DEVICES maps local rank -> visible ordinal -> the node's
 * GPU; a NUMA node's cores are split among the ranks on it when they are
 * no more than its cores. */
static void test_dgx2_visible_devices(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");
    const char *const upper[] = {"CUDA_VISIBLE_DEVICES=8,9,10,11", NULL};
    const char *const split[] = {"CUDA_VISIBLE_DEVICES=3,12", NULL};
    const char *const one[] = {"CUDA_VISIBLE_DEVICES=5", "SLURM_LOCALID=1", NULL};
    const char *const on_node[] = {"SLURM_GPUS_ON_NODE=4", NULL};
    pd_slurm_env *env = env_of(upper);

    for (int r = 0; r < 4; r++) {
        pd_pipeline_binding b = choose(t, env, r, 4, -1, NULL, NULL);
        assert_int_equal(b.gpu, 8 + r);
        assert_int_equal(b.cuda_device, r);
        assert_int_equal(b.numa, 1);
        assert_int_equal(b.sharing, 4);
    }
    pd_slurm_env_destroy(env);

    env = env_of(split);
    pd_pipeline_binding b0 = choose(t, env, 0, 2, -1, NULL, NULL), b1 = choose(t, env, 1, 2, -1, NULL, NULL);
    assert_int_equal(b0.gpu, 3);
    assert_int_equal(b0.cuda_device, 0);
    assert_int_equal(b0.numa, 0);
    assert_int_equal(b0.first_core, 0);
    assert_int_equal(b0.cores, 2); /* alone on NUMA node 0: both its cores */
    assert_int_equal(b0.sharing, 1);
    assert_int_equal(b1.gpu, 12);
    assert_int_equal(b1.cuda_device, 1);
    assert_int_equal(b1.numa, 1);
    assert_int_equal(b1.first_core, 2);
    assert_int_equal(b1.cores, 2);
    pd_slurm_env_destroy(env);

    /* One GPU per task (srun --gpus-per-task=1): CUDA's device 0 is GPU 5. */
    env = env_of(one);
    pd_pipeline_binding b = choose(t, env, 1, 2, -1, NULL, NULL);
    assert_int_equal(b.gpu, 5);
    assert_int_equal(b.cuda_device, 0);
    assert_int_equal(b.numa, 0);
    assert_int_equal(b.first_core, 1); /* the second of the two ranks counted on NUMA node 0 */
    assert_int_equal(b.cores, 1);
    pd_slurm_env_destroy(env);

    /* SLURM_GPUS_ON_NODE alone: GPUs 0..3, local rank mod 4. */
    env = env_of(on_node);
    for (int r = 0; r < 8; r++)
        assert_int_equal(choose(t, env, r, 8, -1, NULL, NULL).gpu, r % 4);
    pd_slurm_env_destroy(env);

    /* --device cuda:6 names the ordinal whatever the local rank. */
    b = choose(t, NULL, 0, 2, 6, NULL, NULL);
    assert_int_equal(b.gpu, 6);
    assert_int_equal(b.cuda_device, 6);
    pd_topo_destroy(t);
}

/* No GPU visible, or one the topology cannot place: the rank is a CPU
 * worker; 16 of them on the DGX-2 XML's 4 cores are not bound. */
static void test_dgx2_gpus_not_located(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");
    const char *const none[] = {"CUDA_VISIBLE_DEVICES=NoDevFiles", NULL};
    const char *const uuid[] = {"CUDA_VISIBLE_DEVICES=GPU-8a3c5e1f-0000-0000-0000-000000000000", NULL};
    const char *const beyond[] = {"CUDA_VISIBLE_DEVICES=16,17", NULL};
    char why[192], notes[192];
    pd_slurm_env *env = env_of(none);

    pd_pipeline_binding b = choose(t, env, 3, 16, -1, why, notes);
    assert_int_equal(b.gpu, -1);
    assert_int_equal(b.cuda_device, -1);
    assert_int_equal(b.cores, 0);
    assert_int_equal(b.numa, -1);
    assert_string_equal(why, "16 local ranks on 4 cores");
    assert_non_null(strstr(notes, "CUDA_VISIBLE_DEVICES shows no GPU"));
    b = choose(t, env, 3, 4, -1, why, notes); /* as many ranks as cores: one each */
    assert_string_equal(why, "");
    assert_int_equal(b.first_core, 3);
    assert_int_equal(b.cores, 1);
    assert_int_equal(b.numa, 1);
    pd_slurm_env_destroy(env);

    env = env_of(uuid);
    b = choose(t, env, 0, 1, -1, why, notes);
    assert_int_equal(b.gpu, -1);
    assert_int_equal(b.cuda_device, 0); /* a CUDA build still opens cuda:0 */
    assert_non_null(strstr(notes, "is not an index"));
    assert_int_equal(b.cores, 4);
    pd_slurm_env_destroy(env);

    env = env_of(beyond);
    b = choose(t, env, 1, 2, -1, why, notes);
    assert_int_equal(b.gpu, -1);
    assert_int_equal(b.cuda_device, 1);
    assert_non_null(strstr(notes, "GPU 17 is not in the topology (16 GPUs)"));
    pd_slurm_env_destroy(env);
    pd_topo_destroy(t);
}

/* A PCIe machine: 3 GPUs, one on NUMA node 0 and two on node 1, and the
 * RDMA NIC mlx4_0 nearest to all of them (as `pipedream topo` prints). */
static void test_24em64t(void **state)
{
    pd_topo *t = test_topo_load("24em64t-2n6c2t-pci");
    static const int numa[] = {0, 1, 1}, first[] = {0, 6, 9}, cores[] = {6, 3, 3};

    assert_int_equal(t->n_gpus, 3);
    for (int r = 0; r < 3; r++) {
        pd_pipeline_binding b = choose(t, NULL, r, 3, -1, NULL, NULL);
        assert_int_equal(b.gpu, r);
        assert_int_equal(b.nic, t->gpus[r].nic);
        assert_int_equal(b.nic, test_topo_nic(t, "mlx4_0"));
        assert_string_equal(b.nic_name, "mlx4_0");
        assert_true(b.nic_rdma);
        assert_int_equal(b.numa, numa[r]);
        assert_int_equal(b.first_core, first[r]);
        assert_int_equal(b.cores, cores[r]);
        assert_int_equal(numa_of_core(t, b.first_core), b.numa);
        assert_int_equal(numa_of_core(t, b.first_core + b.cores - 1), b.numa);
    }
    pd_topo_destroy(t);
}

static void test_32em64t(void **state)
{
    pd_topo *t = test_topo_load("32em64t-2n8c2t-pci-wholeio");

    for (int r = 0; r < 3; r++) {
        pd_pipeline_binding b = choose(t, NULL, r, 3, -1, NULL, NULL);
        assert_int_equal(b.gpu, r);
        assert_string_equal(b.nic_name, "mlx5_0");
        assert_int_equal(b.numa, t->gpus[r].numa);
    }
    pd_topo_destroy(t);
}

/* ---- CPU-only nodes ---- */

/* 96 cores in 4 NUMA nodes with two Ethernet NICs each: N ranks get
 * disjoint shares covering the cores, each with a NIC of its NUMA node;
 * 97 ranks are not bound. */
static void test_cpu_only_shares(void **state)
{
    pd_topo *t = test_topo_load("96em64t-4n4d3ca2co-pci");
    static const int counts[] = {1, 4, 8, 96};
    char why[192];

    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        int next = 0;
        for (int r = 0; r < counts[c]; r++) {
            pd_pipeline_binding b = choose(t, NULL, r, counts[c], -1, why, NULL);
            assert_string_equal(why, "");
            assert_int_equal(b.gpu, -1);
            assert_int_equal(b.first_core, next);
            assert_int_equal(b.cores, 96 / counts[c]);
            next += b.cores;
            assert_int_equal(b.numa, counts[c] == 1 ? -1 : numa_of_core(t, b.first_core));
            if (b.numa >= 0)
                assert_int_equal(t->nics[b.nic].numa, b.numa);
        }
        assert_int_equal(next, 96);
    }
    pd_pipeline_binding b = choose(t, NULL, 5, 97, -1, why, NULL);
    assert_string_equal(why, "97 local ranks on 96 cores");
    assert_int_equal(b.cores, 0);
    assert_int_equal(b.numa, -1);
    pd_topo_destroy(t);
}

/* With an RDMA NIC on the node, every rank takes it (qib0 on NUMA node
 * 1), as GPUs do. */
static void test_cpu_only_rdma(void **state)
{
    pd_topo *t = test_topo_load("40intel64-2g2n4c+pcilocality");

    for (int r = 0; r < 4; r++) {
        pd_pipeline_binding b = choose(t, NULL, r, 4, -1, NULL, NULL);
        assert_string_equal(b.nic_name, "qib0");
        assert_int_equal(b.cores, 10);
        assert_int_equal(b.numa, numa_of_core(t, b.first_core));
    }
    pd_topo_destroy(t);
}

/* ---- the line, bad input ---- */

static void test_line(void **state)
{
    pd_topo *t = test_topo_load("24em64t-2n6c2t-pci"), *dgx = test_topo_load("nvidiaDGX2");
    char why[192], notes[192];

    pd_pipeline_binding b = choose(t, NULL, 1, 3, -1, why, notes);
    pd_binding_format(&b, 7, why, notes);
    assert_string_equal(b.line, "rank 7 (local 1 of 3): GPU 1 (0000:11:00.0, cuda:1), NIC mlx4_0, NUMA 1, cores 6-8");
    b = choose(dgx, NULL, 9, 16, -1, why, notes);
    pd_binding_format(&b, 9, why, "the GPU is not used: device cpu");
    assert_string_equal(b.line, "rank 9 (local 9 of 16): GPU 9 (0000:b9:00.0, cuda:9), no NIC, NUMA 1, cores 2-3 "
                                "shared by 8 ranks; the GPU is not used: device cpu");
    pd_topo_destroy(dgx);
    dgx = test_topo_load("96em64t-4n4d3ca2co-pci");
    b = choose(dgx, NULL, 1, 100, -1, why, notes);
    pd_binding_format(&b, 1, why, notes);
    assert_string_equal(b.line, "rank 1 (local 1 of 100): no GPU, NIC eth0; not bound: 100 local ranks on 96 cores");
    pd_topo_destroy(dgx);
    pd_topo_destroy(t);
}

static void test_bad_input(void **state)
{
    pd_topo *t = test_topo_load("nvidiaDGX2");
    pd_binding_input in = {.topo = t, .local_rank = 2, .local_ranks = 2, .cuda_device = -1};
    pd_pipeline_binding b;
    char why[64], notes[64];

    assert_int_equal(pd_binding_choose(&in, &b, why, notes, sizeof(why)), PD_EINVAL);
    in.local_rank = -1;
    assert_int_equal(pd_binding_choose(&in, &b, why, notes, sizeof(why)), PD_EINVAL);
    pd_topo_destroy(t);

    unsetenv("PD_BIND");
    unsetenv("PD_TOPO_XML");
    assert_int_equal(pd_pipeline_check_bind(NULL), PD_OK);
    assert_int_equal(pd_pipeline_check_bind("auto"), PD_OK);
    assert_int_equal(pd_pipeline_check_bind("none"), PD_OK);
    assert_int_equal(pd_pipeline_check_bind("numa"), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "bind 'numa': expected auto or none"));
    setenv("PD_BIND", "cores", 1);
    assert_int_equal(pd_pipeline_check_bind(NULL), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "PD_BIND='cores'"));
    assert_int_equal(pd_pipeline_check_bind("none"), PD_OK); /* the option wins */
    unsetenv("PD_BIND");
    setenv("PD_TOPO_XML", "/nonexistent/node.xml", 1);
    assert_int_equal(pd_pipeline_check_bind(NULL), PD_EIO);
    assert_non_null(strstr(pd_last_error(), "PD_TOPO_XML: /nonexistent/node.xml: cannot open"));
    assert_int_equal(pd_pipeline_check_bind("none"), PD_OK);
    setenv("PD_TOPO_XML", test_src_path("tests/topology/nvidiaDGX2.xml"), 1);
    assert_int_equal(pd_pipeline_check_bind(NULL), PD_OK);
    unsetenv("PD_TOPO_XML");
}

/* ---- binding this process (last: it changes the test's affinity) ---- */

static int cpus_allowed(void)
{
    cpu_set_t set;

    assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
    return CPU_COUNT(&set);
}

static void test_bind_cores_live(void **state)
{
    pd_topo *t = NULL, *full = NULL, *xml = test_topo_load("nvidiaDGX2");
    char why[192];
    int all;

    assert_int_equal(pd_topo_discover_cpus(&t), PD_OK);
    assert_int_equal(t->n_gpus, 0); /* no I/O devices */
    assert_int_equal(pd_topo_discover(&full), PD_OK);
    assert_int_equal(full->cores, t->cores);
    assert_int_equal(full->n_numa, t->n_numa);
    for (int i = 0; i < t->n_numa; i++) {
        assert_int_equal(full->numa[i].cores, t->numa[i].cores);
        assert_int_equal(full->numa[i].first_core, t->numa[i].first_core);
    }
    assert_true(t->cores >= 1);
    all = t->pus;
    /* The last local rank of as many as the cores: its core alone. */
    pd_pipeline_binding b = choose(t, NULL, t->cores - 1, t->cores, -1, why, NULL);
    assert_string_equal(why, "");
    assert_int_equal(b.cores, 1);
    assert_int_equal(pd_topo_bind_cores(t, b.first_core, b.cores, b.numa), PD_OK);
    assert_int_equal(cpus_allowed(), t->pus / t->cores);
    /* One rank: every core. */
    b = choose(t, NULL, 0, 1, -1, why, NULL);
    assert_int_equal(pd_topo_bind_cores(t, b.first_core, b.cores, b.numa), PD_OK);
    assert_int_equal(cpus_allowed(), all);
    assert_int_equal(pd_topo_bind_cores(t, t->cores, 1, -1), PD_EINVAL);
    assert_int_equal(pd_topo_bind_cores(t, 0, 1, 4096), PD_EINVAL);
    assert_int_equal(pd_topo_bind_cores(xml, 0, 1, 0), PD_ENOTSUP);
    pd_topo_destroy(xml);
    pd_topo_destroy(full);
    pd_topo_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numa_cores),
        cmocka_unit_test(test_dgx2_sixteen_ranks),
        cmocka_unit_test(test_dgx2_visible_devices),
        cmocka_unit_test(test_dgx2_gpus_not_located),
        cmocka_unit_test(test_24em64t),
        cmocka_unit_test(test_32em64t),
        cmocka_unit_test(test_cpu_only_shares),
        cmocka_unit_test(test_cpu_only_rdma),
        cmocka_unit_test(test_line),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_bind_cores_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
