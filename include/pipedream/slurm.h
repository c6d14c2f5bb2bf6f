/* Slurm glue: where a process launched by `srun` (or by a batch script under
 * `mpirun` inside an allocation) sits in its job, read from the environment
 * Slurm gives every task, and Slurm's hostlist syntax expanded the way
 * `scontrol show hostnames` expands it. Nothing here talks to Slurm's
 * daemons or links against libslurm. */
#ifndef PIPEDREAM_SLURM_H
#define PIPEDREAM_SLURM_H

#include <stdbool.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most host names one hostlist may expand to ("node[1-99999999]" is refused
 * rather than allocated). */
#define PD_SLURM_HOSTLIST_MAX (1 << 20)

/* A hostlist expanded: host names in the order Slurm lists them, duplicates
 * kept. Owns its strings; release with pd_slurm_hostlist_clear. */
typedef struct pd_slurm_hostlist {
    int count;
    char **hosts;
} pd_slurm_hostlist;

/* Expands `text`, e.g. "node[01-03,7],gpu-a[1-2] login", into `out`:
 * items separated by commas or white space outside brackets; in an item each
 * bracket holds comma-separated numbers or lo-hi ranges (lo <= hi), printed
 * zero-padded to the width of the number (or range's lo) as written; several
 * brackets in one item give every combination, the first bracket varying
 * slowest ("r[1-2]n[1-2]": r1n1 r1n2 r2n1 r2n2). Text after an item's last
 * bracket, an unbalanced or nested bracket, an empty or non-numeric range
 * and more than PD_SLURM_HOSTLIST_MAX names are PD_EINVAL naming the item.
 * An empty `text` gives an empty list. `out` is written only on success. */
pd_status pd_slurm_hostlist_expand(const char *text, pd_slurm_hostlist *out);

/* Frees the names and zeroes the list; a zeroed list is fine. */
void pd_slurm_hostlist_clear(pd_slurm_hostlist *list);

/* This task's place in its job, from the Slurm environment. -1 (or NULL, 0)
 * marks what the environment does not say. */
typedef struct pd_slurm_env {
    bool in_job;          /* SLURM_JOB_ID is set */
    long job_id;          /* SLURM_JOB_ID */
    int rank;             /* SLURM_PROCID: this task among the step's tasks */
    int local_rank;       /* SLURM_LOCALID: this task among its node's tasks */
    int world_size;       /* SLURM_NTASKS (SLURM_NPROCS on old Slurm) */
    int node_index;       /* SLURM_NODEID: this node among the job's nodes */
    pd_slurm_hostlist nodes;  /* SLURM_JOB_NODELIST (SLURM_NODELIST) expanded */
    int *tasks_per_node;  /* SLURM_TASKS_PER_NODE expanded ("2(x3),1": 2 2 2 1),
                             one per node of `nodes`; NULL if unset */
    int gpus_on_node;     /* SLURM_GPUS_ON_NODE, else the devices listed in
                             CUDA_VISIBLE_DEVICES, else -1 */
    int n_visible_gpus;   /* CUDA_VISIBLE_DEVICES's entries; -1 if unset */
    char **visible_gpus;  /* its entries as written: ordinals or GPU-UUIDs */
} pd_slurm_env;

/* Looks up one variable of an environment: NULL when unset. */
typedef const char *(*pd_slurm_getenv_fn)(const char *name, void *ctx);

/* Reads this task's place into a new *out from `lookup` (NULL: the process
 * environment, getenv). A variable that is set but malformed (a rank that is
 * not a number, SLURM_PROCID >= SLURM_NTASKS, a bad hostlist, tasks per
 * node that do not cover the nodes) is PD_EINVAL naming it. Outside a job
 * everything is unset and this succeeds with in_job false. The caller owns
 * *out and frees it with pd_slurm_env_destroy. */
pd_status pd_slurm_env_read(pd_slurm_getenv_fn lookup, void *ctx, pd_slurm_env **out);

/* Frees an environment read by pd_slurm_env_read; NULL is fine. */
void pd_slurm_env_destroy(pd_slurm_env *env);

/* The CUDA device ordinal this task should use: with one visible GPU
 * (Slurm bound one per task, --gpus-per-task=1) ordinal 0, with several
 * local_rank mod their count (CUDA numbers the visible devices from 0), with
 * CUDA_VISIBLE_DEVICES unset local_rank mod gpus_on_node; -1 when the node
 * has no GPU for it (none visible, "NoDevFiles", or nothing known). */
int pd_slurm_env_gpu(const pd_slurm_env *env);

#ifdef __cplusplus
}
#endif

#endif
