/* A task's place in its Slurm job, read from the variables srun and sbatch
 * set (slurm/hostlist.c expands the node list). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/slurm.h>

static const char *process_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* A non-negative int variable: -1 if unset, PD_EINVAL if not a number. */
static pd_status read_int(pd_slurm_getenv_fn lookup, void *ctx, const char *name, int *out)
{
    const char *text = lookup(name, ctx);
    char *end;
    long v;

    *out = -1;
    if (!text)
        return PD_OK;
    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < 0 || v > INT_MAX)
        return PD_ERROR(PD_EINVAL, "Slurm environment: %s='%s' is not a count", name, text);
    *out = (int)v;
    return PD_OK;
}

/* The first of two names that is set (Slurm renamed several variables). */
static const char *either(pd_slurm_getenv_fn lookup, void *ctx, const char *name, const char *old_name)
{
    return lookup(name, ctx) ? name : old_name;
}

/* SLURM_TASKS_PER_NODE, "2(x3),1", into one count per node. */
static pd_status read_tasks_per_node(const char *text, int n_nodes, int **out)
{
    int *counts = calloc(n_nodes > 0 ? (size_t)n_nodes : 1, sizeof(*counts));
    const char *p = text;
    int filled = 0;

    if (!counts)
        return PD_ERROR(PD_ENOMEM, "Slurm environment: out of memory");
    while (*p) {
        char *end;
        long tasks = strtol(p, &end, 10), repeat = 1;

        if (end == p || tasks < 0 || tasks > INT_MAX)
            goto bad;
        p = end;
        if (strncmp(p, "(x", 2) == 0) {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat < 1)
                goto bad;
            p = end + 1;
        }
        if (repeat > n_nodes - filled)
            goto short_list;
        for (long i = 0; i < repeat; i++)
            counts[filled++] = (int)tasks;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    if (filled != n_nodes)
        goto short_list;
    *out = counts;
    return PD_OK;
bad:
    free(counts);
    return PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_TASKS_PER_NODE='%s' is not a list like 2(x3),1", text);
short_list:
    free(counts);
    return PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_TASKS_PER_NODE='%s' does not give one count for each of the %d nodes",
                    text, n_nodes);
}

/* CUDA_VISIBLE_DEVICES's entries; "" and Slurm's "NoDevFiles" are none. */
static pd_status read_visible_gpus(const char *text, pd_slurm_env *env)
{
    char *copy, *save = NULL;
    int n = 0;

    env->n_visible_gpus = 0;
    if (strcmp(text, "NoDevFiles") == 0)
        return PD_OK;
    if (!(copy = strdup(text)) ||
        !(env->visible_gpus = calloc(strlen(text) / 2 + 1, sizeof(*env->visible_gpus)))) {
        free(copy);
        return PD_ERROR(PD_ENOMEM, "Slurm environment: out of memory");
    }
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!(env->visible_gpus[n] = strdup(tok))) {
            free(copy);
            return PD_ERROR(PD_ENOMEM, "Slurm environment: out of memory");
        }
        env->n_visible_gpus = ++n;
    }
    free(copy);
    return PD_OK;
}

pd_status pd_slurm_env_read(pd_slurm_getenv_fn lookup, void *ctx, pd_slurm_env **out)
{
    pd_slurm_env *env = calloc(1, sizeof(*env));
    const char *job, *nodelist, *tasks, *visible;
    pd_status st;

    if (!env)
        return PD_ERROR(PD_ENOMEM, "Slurm environment: out of memory");
    if (!lookup)
        lookup = process_getenv;
    env->job_id = -1;
    env->n_visible_gpus = -1;
    if ((job = lookup("SLURM_JOB_ID", ctx))) {
        char *end;
        errno = 0;
        env->job_id = strtol(job, &end, 10);
        if (end == job || *end || errno || env->job_id < 0) {
            st = PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_JOB_ID='%s' is not a job id", job);
            goto fail;
        }
        env->in_job = true;
    }
    PD_CHECK_GOTO(read_int(lookup, ctx, "SLURM_PROCID", &env->rank), st, fail);
    PD_CHECK_GOTO(read_int(lookup, ctx, "SLURM_LOCALID", &env->local_rank), st, fail);
    PD_CHECK_GOTO(read_int(lookup, ctx, either(lookup, ctx, "SLURM_NTASKS", "SLURM_NPROCS"), &env->world_size), st,
                  fail);
    PD_CHECK_GOTO(read_int(lookup, ctx, "SLURM_NODEID", &env->node_index), st, fail);
    PD_CHECK_GOTO(read_int(lookup, ctx, "SLURM_GPUS_ON_NODE", &env->gpus_on_node), st, fail);
    if (env->world_size == 0) {
        st = PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_NTASKS=0");
        goto fail;
    }
    if (env->rank >= 0 && env->world_size > 0 && env->rank >= env->world_size) {
        st = PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_PROCID=%d is not below SLURM_NTASKS=%d", env->rank,
                      env->world_size);
        goto fail;
    }
    nodelist = lookup(either(lookup, ctx, "SLURM_JOB_NODELIST", "SLURM_NODELIST"), ctx);
    if (nodelist)
        PD_CHECK_GOTO(pd_slurm_hostlist_expand(nodelist, &env->nodes), st, fail);
    if (env->node_index >= 0 && nodelist && env->node_index >= env->nodes.count) {
        st = PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_NODEID=%d but the node list '%s' has %d nodes",
                      env->node_index, nodelist, env->nodes.count);
        goto fail;
    }
    if ((tasks = lookup("SLURM_TASKS_PER_NODE", ctx))) {
        if (!nodelist) {
            st = PD_ERROR(PD_EINVAL, "Slurm environment: SLURM_TASKS_PER_NODE without SLURM_JOB_NODELIST");
            goto fail;
        }
        PD_CHECK_GOTO(read_tasks_per_node(tasks, env->nodes.count, &env->tasks_per_node), st, fail);
    }
    if ((visible = lookup("CUDA_VISIBLE_DEVICES", ctx)))
        PD_CHECK_GOTO(read_visible_gpus(visible, env), st, fail);
    if (env->gpus_on_node < 0 && env->n_visible_gpus >= 0)
        env->gpus_on_node = env->n_visible_gpus;
    *out = env;
    return PD_OK;
fail:
    pd_slurm_env_destroy(env);
    return st;
}

void pd_slurm_env_destroy(pd_slurm_env *env)
{
    if (!env)
        return;
    pd_slurm_hostlist_clear(&env->nodes);
    free(env->tasks_per_node);
    for (int i = 0; i < env->n_visible_gpus; i++)
        free(env->visible_gpus[i]);
    free(env->visible_gpus);
    free(env);
}

int pd_slurm_env_gpu(const pd_slurm_env *env)
{
    int local = env->local_rank >= 0 ? env->local_rank : 0;

    if (env->n_visible_gpus == 0)
        return -1;
    if (env->n_visible_gpus > 0)
        return env->n_visible_gpus == 1 ? 0 : local % env->n_visible_gpus;
    return env->gpus_on_node > 0 ? local % env->gpus_on_node : -1;
}
