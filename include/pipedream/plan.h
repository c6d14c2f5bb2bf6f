/* The partitioner: PipeDream's dynamic program over a profile's layers and
 * a hierarchy of workers, and the plan files it writes.
 *
 * A plan splits the layers of a profile into stages, consecutive in a
 * topological order, and gives each stage a number of replicas and the
 * ranks that run them. pd_plan_solve() chooses the plan that minimises the
 * predicted time per minibatch of the slowest stage, level by level over the
 * machine hierarchy (innermost level first), under one of two cost models:
 *
 * - PD_PLAN_COST_PIPEDREAM reproduces the original optimizer
 *   (optimizer_graph_hierarchical.py) exactly, quirks included, as
 *   ../shared/PIPEDREAM-OPTIMIZER.md specifies it;
 * - PD_PLAN_COST_DEFAULT is this project's model: activation transfers
 *   always counted and overlapped with compute as the runtime overlaps
 *   them, ring all-reduce among replicas, data loading on the first stage,
 *   per-stage memory from the 1F1B schedule checked against device memory,
 *   and fewer workers than given when that is faster.
 *
 * Times are milliseconds per minibatch of the profile's batch size; sizes
 * are bytes. Plans round-trip through `*.plan.json` files. */
#ifndef PIPEDREAM_PLAN_H
#define PIPEDREAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <pipedream/profile.h>
#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most levels of a hierarchy. */
#define PD_PLAN_MAX_LEVELS 8

/* One level of the machine hierarchy: a group of this level holds
 * `fanout` groups of the level below (workers at the innermost level),
 * connected to each other at `bandwidth_bytes_per_s`. */
typedef struct pd_plan_level {
    char name[32];                /* "gpu", "node", "level2", ... */
    int fanout;                   /* >= 1 */
    double bandwidth_bytes_per_s; /* > 0 */
    double latency_s;             /* >= 0; per message */
} pd_plan_level;

/* The workers a plan is made for: levels innermost first. The number of
 * workers is the product of the fanouts; worker (rank) r sits in group
 * r / (fanout_1 * ... * fanout_L) of level L+1. */
typedef struct pd_plan_cluster {
    int n_levels;
    pd_plan_level levels[PD_PLAN_MAX_LEVELS];
} pd_plan_cluster;

/* Parses levels written as "4x12GB/s,4x10Gb/s" (innermost first; a count,
 * 'x', a bandwidth with a unit among B/s, KB/s, MB/s, GB/s, TB/s (bytes,
 * powers of 1000) and b/s, Kb/s, Mb/s, Gb/s, Tb/s (bits), or a bare number
 * of bytes/s). PD_EINVAL names the bad item. */
pd_status pd_plan_cluster_parse_levels(const char *text, pd_plan_cluster *out);

/* Reads the levels of a `*.cluster.json` file (pipedream topo -o, or the
 * shipped clusters/ files) into *out. PD_EFORMAT/PD_EIO name the file and
 * field, as pd_cluster_read_json does. */
pd_status pd_plan_cluster_read(const char *path, pd_plan_cluster *out);

/* Total workers of the cluster: the product of the fanouts. */
int pd_plan_cluster_workers(const pd_plan_cluster *c);

typedef enum pd_plan_cost_model {
    PD_PLAN_COST_DEFAULT = 0,
    PD_PLAN_COST_PIPEDREAM = 1,
} pd_plan_cost_model;

/* What to do with a planning graph whose antichain DAG has more states
 * than the planner holds (NASNet: millions). */
typedef enum pd_plan_coarsen {
    /* Merge the nodes of contiguous ranges of a topological order, cutting
     * where fewest outputs are live (between NASNet's cells), as finely as
     * keeps the dynamic programs within seconds; the plan says so
     * (pd_plan.coarsened_from). Graphs that fit are never coarsened. */
    PD_PLAN_COARSEN_AUTO = 0,
    /* Refuse such a graph (PD_EINVAL naming the number of states). */
    PD_PLAN_COARSEN_NONE = 1,
} pd_plan_coarsen;

/* What to solve for. Zero-initialised options plus a cluster are a valid
 * default-model request without a memory limit. */
typedef struct pd_plan_options {
    pd_plan_cost_model cost_model;
    /* Device memory per worker in bytes; 0: unlimited. The pipedream model
     * uses it only with use_memory_constraint (its -s, default 16e9). */
    double memory_bytes;
    /* Bytes of optimizer state per weight byte (SGD with momentum 1,
     * Adam 2, plain SGD 0), for the default model's memory. */
    double optimizer_state_factor;
    /* PipeDream's flags (pipedream model only). */
    bool straight_pipeline;
    bool use_memory_constraint;
    bool use_fewer_machines;
    double activation_compression_ratio; /* 0: not given */
    /* Default model: allow plans on fewer workers than the cluster has
     * when they are faster (on by default through the CLI). */
    bool allow_fewer_workers;
    /* Record the best alternative that lost (plan->explanation). */
    bool explain;
    /* Merge chains inside branches before solving (PipeDream's
     * compress_graph_branches), so that branchy models stay tractable. */
    bool collapse_branches;
    /* Graphs with too many antichain states: coarsened (the default) or
     * refused. */
    pd_plan_coarsen coarsen;
} pd_plan_options;

/* Which term of a stage's time per minibatch is the largest. */
typedef enum pd_plan_term {
    PD_PLAN_TERM_COMPUTE = 0, /* forward + backward */
    PD_PLAN_TERM_SYNC,        /* weight synchronisation among replicas */
    PD_PLAN_TERM_RECV,        /* activations in + gradients out, from the previous stage */
    PD_PLAN_TERM_SEND,        /* activations out + gradients in, to the next stage */
    PD_PLAN_TERM_DATA,        /* data loading (stage 0, default model) */
    PD_PLAN_TERM_MEMORY,      /* (never a time term; used to say why a plan was refused) */
} pd_plan_term;

/* 1F1B's warm-up forwards per replica of each of `n_stages` stages with
 * the given replicas (pd_sched_generate uses it): 1 at the last stage, and
 * upstream one more than it takes to cover, shared among the stage's
 * replicas, every minibatch in flight at the next stage:
 * w_s = 1 + ceil(w_{s+1} r_{s+1} / r_s). This is PipeDream's NOAM,
 * ceil(workers of stages s.. / r_s), whenever the divisions below are
 * exact (unreplicated pipelines, 15-1, 2-2, ...); where one rounds up
 * (1-2-1: 5 at stage 0, not 4) NOAM falls short of what a rank needs to
 * never wait when every stage takes its replicas' share of the time per
 * minibatch (docs/simulator.md). */
void pd_plan_1f1b_in_flight(int n_stages, const int *replicas, int *in_flight);

/* Short lower-case name of a term ("compute", "sync", ...). */
const char *pd_plan_term_name(pd_plan_term term);

/* One stage: a set of layers run by `replicas` workers. Owned by its plan. */
typedef struct pd_plan_stage {
    int n_layers;
    int *layers;   /* profile node indices, increasing (a topological order) */
    int replicas;  /* >= 1 */
    int *ranks;    /* `replicas` worker ranks, increasing */
    /* Minibatches in flight at one replica in 1F1B: the schedule's warm-up
     * (pd_plan_1f1b_in_flight) under the default model, PipeDream's NOAM
     * count under the pipedream model. */
    int in_flight;
    /* Predicted, per minibatch (ms): compute of one replica for one
     * minibatch (fwd + bwd; the default model keeps data loading apart as
     * the overlapped PD_PLAN_TERM_DATA), weight synchronisation of one
     * replica, and the transfers across the cut before and after the
     * stage. */
    double compute_ms, sync_ms, recv_ms, send_ms;
    /* The stage's time per minibatch once its replicas share the work: the
     * quantity the partitioner minimises the maximum of. */
    double time_ms;
    pd_plan_term bottleneck;
    /* Memory per replica (bytes): weights x weight versions, stashed
     * activations x in-flight minibatches, optimizer state. */
    double weight_bytes, activation_bytes, optimizer_bytes, memory_bytes;
    int weight_versions;
} pd_plan_stage;

/* A plan. Strings and arrays are owned by the plan. */
typedef struct pd_plan {
    char *model;            /* the profile's model */
    int batch;              /* the profile's batch (0: unknown) */
    pd_plan_cost_model cost_model;
    pd_plan_cluster cluster;
    int workers;            /* of the cluster */
    int workers_used;       /* sum of the stages' replicas */
    int n_stages;
    pd_plan_stage *stages;
    double time_ms;             /* predicted time per minibatch of the pipeline */
    double single_worker_ms;    /* the whole model on one worker */
    double data_parallel_ms;    /* data parallelism on all workers, same cost model */
    int bottleneck_stage;       /* index of the slowest stage */
    /* FNV-1a 64-bit hashes (16 hex digits) of the profile's nodes (names,
     * times, sizes, edges) and of the cluster's levels, so a plan can be
     * checked against the inputs it was made for. */
    char profile_hash[17];
    char cluster_hash[17];
    char *explanation;          /* with options.explain: why the next-best lost; else NULL */
    /* When pd_plan_solve coarsened the planning graph: its nodes before
     * (after branch collapsing) and after. The plan is then the best only
     * over the cuts between the merged nodes. Both 0 when the graph was
     * planned as it is (and after pd_plan_evaluate, which plans nothing). */
    int coarsened_from, coarsened_to;
} pd_plan;

/* Chooses the best plan of `profile` on `cluster` under `opts` (see the
 * file comment). PD_EINVAL for bad options or a profile without compute,
 * PD_ENOTFOUND ("no plan fits in N bytes of device memory ...") when the
 * memory limit rules every plan out. Free with pd_plan_destroy. */
pd_status pd_plan_solve(const pd_profile *profile, const pd_plan_cluster *cluster, const pd_plan_options *opts,
                        pd_plan **out);

/* Fills the predicted times, memory and bottlenecks of `plan` (stages,
 * layers, replicas and ranks given) for `profile` on its cluster under
 * `opts`, as pd_plan_solve would have for the same stages. Validates the
 * plan first (pd_plan_validate). Used for hand-written plans. */
pd_status pd_plan_evaluate(const pd_profile *profile, const pd_plan_options *opts, pd_plan *plan);

/* Checks that the plan's stages cover every non-input layer of `profile`
 * exactly once, that no edge runs from a later stage to an earlier one,
 * that replicas match the ranks given and every rank is a worker of the
 * cluster used at most once. PD_EINVAL names the first problem ("layer
 * 'fc8' is in no stage", "layer 'conv1' is in stages 0 and 2", ...). */
pd_status pd_plan_validate(const pd_profile *profile, const pd_plan *plan);

/* Frees the plan. NULL is ignored. */
void pd_plan_destroy(pd_plan *plan);

/* ---- files ---- */

/* Writes the plan as JSON (format "pipedream-plan", version 1) atomically:
 * stages with layer names, replicas, ranks, in-flight depth, predicted
 * times and memory; the cluster; the inputs' hashes; the coarsening, if
 * any. PD_EIO on failure. */
pd_status pd_plan_write_json(const pd_plan *plan, const pd_profile *profile, const char *path);

/* Reads a plan file for `profile`: either one written by
 * pd_plan_write_json or a hand-written one that gives only the cluster
 * levels and, per stage, its layers (names, or "first".."last" in the
 * profile's order) and replicas (ranks then assigned in order). PD_EFORMAT
 * names the file and field; a layer name the profile lacks is PD_EFORMAT
 * too. Predicted fields are read as written; call pd_plan_evaluate to
 * recompute them. */
pd_status pd_plan_read_json(const char *path, const pd_profile *profile, pd_plan **out);

/* Prints the plan as a table: per stage its layers (first..last and
 * count), replicas, compute, sync and communication ms, memory, and the
 * bottleneck term; then the totals and the speedups over one worker and
 * over data parallelism. A coarsened plan says so under its title. */
void pd_plan_print(const pd_plan *plan, const pd_profile *profile, FILE *out);

/* Writes the plan's JSON document (as pd_plan_write_json) to a stream.
 * PD_EIO on failure. */
pd_status pd_plan_print_json(const pd_plan *plan, const pd_profile *profile, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
