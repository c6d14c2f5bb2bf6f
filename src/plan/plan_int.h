/* The partitioner's private pieces, shared by the files of src/plan/:
 * the graph the dynamic programs run on, its antichain states, and the
 * solvers of the two cost models. */
#ifndef PD_PLAN_INT_H
#define PD_PLAN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pipedream/plan.h>

/* ---- the planning graph (plan_graph.c) ---- */

/* One output that leaves a node: its bytes and the nodes that read it. */
typedef struct pd_plan_exit {
    double bytes;
    int n_to;
    int *to; /* increasing */
} pd_plan_exit;

/* A profile reduced to what the partitioner needs: the compute nodes (input
 * nodes removed, their forward time kept as data loading; PipeDream's
 * `__getitem__` sinks removed), in the profile's order, each possibly a
 * merge of several profile nodes (branch collapsing, coarsening). */
typedef struct pd_plan_graph {
    int n;                  /* nodes */
    double *fwd_ms, *bwd_ms;
    /* Output activation bytes of the node; of a coarsened node, the sum of
     * its members' (the pipedream model's stash). */
    double *act_bytes;
    double *par_bytes;      /* weight bytes */
    int *n_in, **in;        /* input edges (indices < own), in the profile's order */
    int *n_out, **out;      /* output edges, increasing */
    int *n_members, **members; /* profile node indices merged into the node, increasing */
    double data_loading_ms; /* sum of the removed input nodes' forward times */
    int n_inputs;           /* removed input nodes */
    int *inputs;            /* their profile indices */
    /* The removed `__getitem__` sinks (profile indices) and, for each, the
     * graph nodes feeding it: it joins the latest stage among theirs (stage
     * 0 when only input nodes feed it), so that a plan covers every layer. */
    int n_dropped;
    int *dropped;
    int *n_dropped_in, **dropped_in;
    /* A coarsened graph's nodes have several outputs that leave them, each
     * read by its own nodes: exits[v] (n_exits[v] of them). NULL for every
     * other graph, whose node v has one output, act_bytes[v], read by
     * out[v] (pd_plan_graph_exits hides the difference). */
    int *n_exits;
    pd_plan_exit **exits;
} pd_plan_graph;

/* The outputs of node v that other nodes read (none for a sink): *exits
 * points at them, or at *one filled with v's single output. Returns how
 * many. The bytes crossing a cut are the exits of nodes before it with a
 * reader after it. */
static inline int pd_plan_graph_exits(const pd_plan_graph *g, int v, pd_plan_exit *one, const pd_plan_exit **exits)
{
    if (g->exits) {
        *exits = g->exits[v];
        return g->n_exits[v];
    }
    *one = (pd_plan_exit){.bytes = g->act_bytes[v], .n_to = g->n_out[v], .to = g->out[v]};
    *exits = one;
    return g->n_out[v] > 0;
}

/* Builds the planning graph of `profile`. PD_EINVAL for a profile without
 * compute nodes. Free with pd_plan_graph_destroy. */
pd_status pd_plan_graph_from_profile(const pd_profile *profile, pd_plan_graph **out);

/* Collapses chains inside branches (PipeDream's compress_graph_branches):
 * a node with one input whose input has one output is merged into it
 * when both lie inside a branch, so that the antichain DAG of a branchy
 * model (Inception-v3) stays small. Times and sizes of merged nodes add up,
 * the output activation is the last member's. Returns a new graph. */
pd_status pd_plan_graph_collapse_branches(const pd_plan_graph *g, pd_plan_graph **out);

void pd_plan_graph_destroy(pd_plan_graph *g);

/* Pieces for the files that derive one graph from another (plan_graph.c,
 * plan_coarsen.c). A graph of n nodes, every per-node array zeroed (lists
 * NULL, no exits), with room for the input nodes and dropped sinks; NULL
 * when out of memory. */
pd_plan_graph *pd_plan_graph_alloc(int n, int n_inputs, int n_dropped);

/* Fills the output lists from the input lists, each in increasing order of
 * the consumer (an edge given twice appears twice). */
pd_status pd_plan_graph_fill_outputs(pd_plan_graph *g);

/* Merges node v of g into node w of c: members join (appended), times and
 * weights add up; the activation is left to the caller. */
pd_status pd_plan_graph_add_member(pd_plan_graph *c, int w, const pd_plan_graph *g, int v);

/* Copies g's data loading, input nodes and dropped sinks into c, the
 * sinks' inputs renumbered by new_of (g's node -> c's). */
pd_status pd_plan_graph_copy_extras(pd_plan_graph *c, const pd_plan_graph *g, const int *new_of);

/* ---- coarsening (plan_coarsen.c) ---- */

/* How far pd_plan_solve coarsens a graph over PD_PLAN_MAX_STATES states:
 * to at most this many stage candidates (pairs of a state and one of its
 * predecessors, the dynamic programs' inner loop; Inception-v3's compressed
 * graph has 695242) and PD_PLAN_MAX_STATES states. */
#define PD_PLAN_COARSEN_PAIRS 200000

/* Merges the nodes of contiguous ranges of a topological order of g into
 * single nodes: the quotient over such ranges is acyclic, and a plan of it
 * is a plan of g. The order keeps few outputs live (greedy: the ready node
 * after which fewest outputs are live first). A range starts only where
 * its first node reads from the range before, so the ranges form a chain
 * (one antichain state each, K (K + 1) / 2 stage candidates for K); of
 * those cuts, the ones with fewest outputs live across them (then fewest
 * bytes) are kept, as many as keep K within `max_states` and the stage
 * candidates within `max_pairs`. Times, weights and activations of merged
 * nodes add up, members join, and each member output read outside its
 * node becomes one of the node's exits (so cut bytes stay exact).
 * PD_EINVAL for a budget below one state. Returns a new graph (free with
 * pd_plan_graph_destroy). */
pd_status pd_plan_graph_coarsen(const pd_plan_graph *g, int max_states, long long max_pairs, pd_plan_graph **out);

/* ---- antichain states (antichain.c) ---- */

/* PipeDream's antichain DAG over a planning graph (a chain: one state per
 * node). State s stands for the cut after the nodes of prefix(s) (its
 * antichain and all their predecessors); a stage is the nodes between two
 * states k < j where k is a predecessor of j: prefix(j) \ prefix(k). */
typedef struct pd_plan_states {
    int n;                   /* states, numbered in PipeDream's order; n-1 holds every node */
    /* Sums over prefix(s), as in PIPEDREAM-OPTIMIZER.md step 3. */
    double *compute_ms;      /* fwd + bwd */
    double *act_bytes;
    double *par_bytes;
    /* Activation bytes of the augmented antichain's nodes (the original's
     * output activation); on a coarsened graph, cut_bytes. */
    double *out_act_bytes;
    /* Bytes that really cross the cut after s: outputs of prefix(s) nodes
     * consumed by a node outside it (the default model's transfer). */
    double *cut_bytes;
    /* prefix(s) as a bit set over the graph's nodes (words of 64 bits). */
    int words;
    uint64_t **prefix;
    /* Transitive predecessors of each state in the antichain DAG,
     * increasing, and a bit set over states for membership tests. */
    int *n_preds, **preds;
    uint64_t **is_pred;
    int *n_antichain, **antichain; /* graph nodes of each state's antichain */
} pd_plan_states;

/* Most states pd_plan_states_build accepts: their predecessor sets grow as
 * the square of their number. A branchy graph (Inception-v3 uncollapsed:
 * 221564 states) must be collapsed first. */
#define PD_PLAN_MAX_STATES 16384

/* Builds the antichain DAG of `g` (PIPEDREAM-OPTIMIZER.md step 2).
 * PD_EINVAL when it has more than PD_PLAN_MAX_STATES states (the message
 * says how many and suggests collapsing branches) or when a node is in no
 * state (a graph in pieces). */
pd_status pd_plan_states_build(const pd_plan_graph *g, pd_plan_states **out);

/* Only counts the states of g's antichain DAG, up to `limit`: *count is
 * the number, or limit + 1 when there are more. */
pd_status pd_plan_states_count(const pd_plan_graph *g, int limit, int *count);

void pd_plan_states_destroy(pd_plan_states *s);

/* ---- from the dynamic program's stages to a plan (stages.c) ---- */

/* One stage as a dynamic program chose it, its workers placed: the graph
 * nodes of prefix(to_state) \ prefix(from_state) (from_state -1: from the
 * start) run by `n_ranks` workers. */
typedef struct pd_plan_span {
    int from_state, to_state;
    int n_ranks;
    int *ranks; /* increasing */
} pd_plan_span;

/* Sets plan->stages from `n` spans in pipeline order: each stage's layers
 * are the profile nodes merged into its graph nodes (the graph's removed
 * input nodes join stage 0, a dropped sink the latest stage of its
 * inputs), its replicas and ranks those of the span; the predicted fields
 * are zeroed for the solver to fill. Also sets n_stages and workers_used
 * (previous stages of the plan are freed). A graph node joins the first
 * span whose prefix(to_state) holds it, as the original assigns stages:
 * the same as prefix(to_state) \ prefix(from_state) when each span starts
 * where the previous one ended. PD_EINVAL when a node of
 * prefix(from_state) is in no earlier span, a node is in no span, or a
 * stage would be empty. */
pd_status pd_plan_set_stages(pd_plan *plan, const pd_plan_graph *g, const pd_plan_states *s, int n,
                             const pd_plan_span *spans);

/* ---- solvers ---- */

/* Solve with the original optimizer's model (pipedream_dp.c) and with ours
 * (default_dp.c); both fill a complete plan (stages, ranks, times, memory). */
pd_status pd_plan_solve_pipedream(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                  const pd_plan_cluster *cluster, const pd_plan_options *opts, pd_plan *plan);
pd_status pd_plan_solve_default(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                const pd_plan_cluster *cluster, const pd_plan_options *opts, pd_plan *plan);

/* pd_plan_evaluate for the default model (default_cost.c): the predicted
 * fields of a validated plan whose stages are given as layer sets, from the
 * same per-stage formulas the default dynamic program minimises. */
pd_status pd_plan_evaluate_default(const pd_profile *profile, const pd_plan_options *opts, pd_plan *plan);

/* ---- the default model's per-stage formulas (default_cost.c) ---- */

/* What the default model knows of one stage: totals over its graph nodes,
 * its replicas and the links its traffic crosses. */
typedef struct pd_plan_default_load {
    double compute_ms;       /* fwd + bwd of the stage's nodes, one minibatch */
    double weight_bytes;     /* their weights */
    /* Stashed per minibatch in flight: the nodes' outputs plus the stage's
     * input (the cut before it; stage 0: the input nodes' data). */
    double activation_bytes;
    double data_ms;          /* data loading per minibatch on stage 0, else 0 */
    int replicas;            /* >= 1 */
    /* The outermost level the replicas span (ring all-reduce); unused with
     * one replica. */
    double sync_bandwidth, sync_latency_s;
    /* Transfers across the cuts before and after the stage
     * (pd_plan_default_transfer_ms); 0 at the pipeline's ends. */
    double recv_ms, send_ms;
} pd_plan_default_load;

/* Activations forward and the same bytes of gradients back across a cut,
 * per minibatch (ms): 2 * bytes / (bandwidth * replicas) + 2 * latency,
 * `replicas` being the fewer of the two stages' (round-robin routing
 * spreads the minibatches over that many links). */
double pd_plan_default_transfer_ms(double cut_bytes, int replicas, double bandwidth, double latency_s);

/* PipeDream's NOAM for a stage: ceil(workers of this stage and all later
 * ones / its replicas). Never more than the 1F1B schedule's warm-up
 * (pd_plan_1f1b_in_flight, which plans are filled with), equal where no
 * division rounds: the dynamic program's optimistic count. */
int pd_plan_default_in_flight(int workers_from_stage, int replicas);

/* A bound on the schedule's warm-up at a stage from what the dynamic
 * program knows (workers of this stage and later ones, its replicas):
 * 1 + ceil((2 later - 1) / replicas), since the next stage's warm-up times
 * its replicas is below twice the later workers; 1 for the last stage. */
int pd_plan_default_in_flight_bound(int workers_from_stage, int replicas);

/* Memory per replica (bytes) with `in_flight` minibatches in flight:
 * weights x (in_flight + 1) versions + activations x in_flight + optimizer
 * state. */
double pd_plan_default_memory_bytes(const pd_plan_default_load *load, int in_flight, const pd_plan_options *opts);

/* The most minibatches in flight for which the stage fits in
 * opts->memory_bytes (INT_MAX without a limit; 0 when even one does not
 * fit), consistent with pd_plan_default_memory_bytes. */
int pd_plan_default_max_in_flight(const pd_plan_default_load *load, const pd_plan_options *opts);

/* The stage's predicted fields (in_flight, compute_ms, sync_ms, recv_ms,
 * send_ms, time_ms, bottleneck, memory) for `in_flight` minibatches in
 * flight: time_ms = max((compute + sync) / replicas, data / replicas,
 * recv, send), since communication and data loading run beside compute.
 * The one formula both the dynamic program and the evaluator use. */
void pd_plan_default_stage_cost(const pd_plan_default_load *load, int in_flight, const pd_plan_options *opts,
                                pd_plan_stage *out);

/* Bytes a graph node stashes per minibatch: the outputs of all the
 * profile nodes merged into it. */
double pd_plan_default_node_activation(const pd_profile *profile, const pd_plan_graph *g, int v);

/* Bytes of the data the removed input nodes produce (stashed by stage 0). */
double pd_plan_default_input_bytes(const pd_profile *profile, const pd_plan_graph *g);

/* Fills every predicted field of `plan` (its stages' replicas and ranks
 * given, the cluster set) when graph node v runs in stage node_stage[v]:
 * per stage and the totals, bottleneck_stage, workers, workers_used,
 * single_worker_ms and data_parallel_ms; in-flight minibatches (hence
 * weight versions and memory) as the 1F1B schedule warms up. */
pd_status pd_plan_default_fill(const pd_profile *profile, const pd_plan_graph *g, const int *node_stage,
                               const pd_plan_options *opts, pd_plan *plan);

/* Which of the default model's dynamic programs to run. */
typedef enum pd_plan_dp_method {
    /* pd_plan_solve's: under a memory limit with one or two levels (not
     * counting levels of fanout 1), the one pass with the 1F1B schedule's
     * in-flight counts (default_exact.c, when its tables fit in memory);
     * else the one pass with NOAM's, or the tables by level for three
     * levels or more */
    PD_PLAN_DP_SOLVER = 0,
    /* one or two levels: the one pass with NOAM's in-flight counts */
    PD_PLAN_DP_NOAM,
    /* the tables by level (as three levels or more), NOAM's counts */
    PD_PLAN_DP_NOAM_BY_LEVEL,
} pd_plan_dp_method;

/* The time per minibatch the default dynamic program (default_dp.c) named
 * by `method` predicts for the plan it would choose, before that plan is
 * built and evaluated (HUGE_VAL when none fits): for tests that hold it to
 * the evaluation of the plan and the methods to each other. */
pd_status pd_plan_default_dp_ms(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                const pd_plan_cluster *cluster, const pd_plan_options *opts,
                                pd_plan_dp_method method, double *ms);

/* ---- checks, hashes and names shared by plan.c, plan_file.c and plan_print.c ---- */

/* PD_EINVAL naming the first bad level of `c` (no levels, more than
 * PD_PLAN_MAX_LEVELS, a fanout < 1, a bandwidth not > 0, a latency < 0, more
 * than 2^20 workers). */
pd_status pd_plan_cluster_check(const pd_plan_cluster *c);

/* The levels for people, in pd_plan_cluster_parse_levels' syntax with
 * rounded byte units ("4x12 GB/s,4x1.25 GB/s"), into buf (always
 * terminated). */
void pd_plan_cluster_format(const pd_plan_cluster *c, char *buf, size_t size);

/* FNV-1a 64-bit hashes as 16 lower-case hex digits: of the profile's nodes
 * (names, types, times, sizes, edges) and of the cluster's levels. */
void pd_plan_hash_profile(const pd_profile *profile, char out[17]);
void pd_plan_hash_cluster(const pd_plan_cluster *cluster, char out[17]);

/* Whether profile node `index` is an input (its forward time is data
 * loading; it belongs to stage 0 whether or not a plan lists it). */
bool pd_plan_is_input(const pd_profile *profile, int index);

#endif
