/* Topology helpers for the unit tests (include after <cmocka.h> and
 * test_files.h): the real machines' hwloc XML of tests/topology/ loaded,
 * GPUs and NICs found by name. Every failure is a test failure. */
#ifndef TEST_TOPO_XML_H
#define TEST_TOPO_XML_H

#include <stdio.h>
#include <string.h>

#include <pipedream/topology.h>

/* tests/topology/<name>.xml; the caller destroys it. */
static inline pd_topo *test_topo_load(const char *name)
{
    char rel[256];
    pd_topo *t = NULL;

    snprintf(rel, sizeof(rel), "tests/topology/%s.xml", name);
    if (pd_topo_load_xml(test_src_path(rel), &t) != PD_OK)
        print_error("%s\n", pd_last_error());
    assert_non_null(t);
    return t;
}

static inline int test_topo_gpu(const pd_topo *t, const char *name)
{
    for (int i = 0; i < t->n_gpus; i++)
        if (strcmp(t->gpus[i].name, name) == 0)
            return i;
    fail_msg("no GPU %s", name);
    return -1;
}

static inline int test_topo_nic(const pd_topo *t, const char *name)
{
    for (int k = 0; k < t->n_nics; k++)
        if (strcmp(t->nics[k].name, name) == 0)
            return k;
    fail_msg("no NIC %s", name);
    return -1;
}

#endif
