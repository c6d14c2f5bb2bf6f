/* Profiles and plans for the planner and scheduler tests (include after
 * <cmocka.h>): PipeDream's published profiles from the source tree, and
 * plans laid out by hand. Every failure is a test failure. */
#ifndef TEST_PLANS_H
#define TEST_PLANS_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "test_files.h"

/* PipeDream's profile `file` (under profiles/pipedream/ in the source tree,
 * e.g. "vgg16/graph.txt") imported as model `model` measured at `batch`
 * (0: unknown). Free with pd_profile_destroy. */
static inline pd_profile *test_pipedream_profile(const char *file, const char *model, int batch)
{
    char relative[256];
    const char *path;
    pd_profile *p = NULL;

    snprintf(relative, sizeof(relative), "profiles/pipedream/%s", file);
    path = test_src_path(relative);
    if (pd_profile_import_graph_txt(path, model, batch, &p) != PD_OK)
        fail_msg("import of %s: %s", path, pd_last_error());
    return p;
}

/* A plan of n_stages stages with the given replicas, ranks assigned in
 * order from 0 (workers and workers_used: all of them); no layers and no
 * cluster (the caller sets it). Free with pd_plan_destroy. */
static inline pd_plan *test_plan_by_replicas(int n_stages, const int *replicas)
{
    pd_plan *p = calloc(1, sizeof(*p));
    int rank = 0;

    assert_non_null(p);
    p->n_stages = n_stages;
    p->stages = calloc(n_stages, sizeof(*p->stages));
    assert_non_null(p->stages);
    for (int i = 0; i < n_stages; i++) {
        p->stages[i].replicas = replicas[i];
        p->stages[i].ranks = malloc(sizeof(int) * replicas[i]);
        assert_non_null(p->stages[i].ranks);
        for (int j = 0; j < replicas[i]; j++)
            p->stages[i].ranks[j] = rank++;
    }
    p->workers = p->workers_used = rank;
    return p;
}

#endif
