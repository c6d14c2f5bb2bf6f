/* Schedules: every rank's work as an ordered list of actions, generated once
 * from a plan, checked for deadlock before it runs, timed by the simulator
 * and executed by the runtime.
 *
 * A schedule holds, per rank, an array of pd_sched_action: load a
 * minibatch, forward, backward, send or receive an activation or a
 * gradient, all-reduce gradients among a stage's replicas, optimizer step,
 * evaluation forward. Minibatch b is processed by replica b mod r_s of
 * stage s, so every send names its receiver and every receive its sender
 * without coordination. Ranks execute their lists in order; sends are
 * posted into a channel of `depth` slots (one channel per ordered pair of
 * ranks and direction, messages received in the order sent) and block only
 * when the channel is full; receives block until the message is there; an
 * all-reduce is posted without blocking and the step that follows it waits
 * until every replica of the stage has posted the same round and the
 * reduction is done.
 *
 * Weight versions count the minibatches whose gradients a stage has
 * applied (a step after a round of r replicas publishes version + r): a
 * forward records the version it runs on, its backward uses the same one
 * (weight stashing), a step records the version it publishes.
 *
 * Times are milliseconds per minibatch of the plan's batch; sizes bytes. */
#ifndef PIPEDREAM_SCHED_H
#define PIPEDREAM_SCHED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <pipedream/plan.h>
#include <pipedream/profile.h>
#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules. */
typedef enum pd_sched_type {
    PD_SCHED_1F1B = 0,    /* PipeDream: warm-up forwards (NOAM), then one backward, one forward */
    PD_SCHED_1F1B_VSYNC,  /* 1F1B with vertical sync: every stage uses stage 0's version */
    PD_SCHED_GPIPE,       /* fill and drain, flush (one step) every `microbatches` */
    PD_SCHED_DP,          /* one stage on every rank, BSP all-reduce every step */
    PD_SCHED_STRAIGHT,    /* model parallel, one minibatch in flight */
    PD_SCHED_1F1B_2BW,    /* PipeDream-2BW: 1F1B, one update every `microbatches`, two weight versions */
    PD_SCHED_TYPE_COUNT,
} pd_sched_type;

/* "1f1b", "1f1b-vsync", "gpipe", "dp", "straight", "1f1b-2bw"; NULL if out
 * of range. */
const char *pd_sched_type_name(pd_sched_type type);

/* The type called `name` (the names above); PD_EINVAL names it otherwise. */
pd_status pd_sched_type_parse(const char *name, pd_sched_type *out);

/* What a rank does. */
typedef enum pd_sched_op {
    PD_SCHED_LOAD = 0,   /* stage 0: load minibatch */
    PD_SCHED_FORWARD,
    PD_SCHED_BACKWARD,
    PD_SCHED_SEND_ACT,   /* activation of minibatch to `peer` (next stage) */
    PD_SCHED_RECV_ACT,   /* activation from `peer` (previous stage) */
    PD_SCHED_SEND_GRAD,  /* gradient to `peer` (previous stage) */
    PD_SCHED_RECV_GRAD,  /* gradient from `peer` (next stage) */
    PD_SCHED_ALLREDUCE,  /* post round `round` of the replicas' gradient all-reduce */
    PD_SCHED_STEP,       /* optimizer step: waits for the posted all-reduce, publishes a version */
    PD_SCHED_EVAL,       /* evaluation forward (no stash, no backward) */
    PD_SCHED_OP_COUNT,
} pd_sched_op;

/* "load", "forward", "backward", "send-act", "recv-act", "send-grad",
 * "recv-grad", "allreduce", "step", "eval"; NULL if out of range. */
const char *pd_sched_op_name(pd_sched_op op);

/* One action of a rank's list. */
typedef struct pd_sched_action {
    pd_sched_op op;
    int minibatch;      /* training minibatches 0..n-1, evaluation ones n..; -1 for all-reduce and step */
    int stage;          /* the rank's stage */
    int peer;           /* sends and receives: the other rank; -1 otherwise */
    int64_t bytes;      /* sends/receives: message; all-reduce: the gradient (the stage's weights) */
    int weight_version; /* forward/backward/eval: version used; step: version published; else -1 */
    int round;          /* all-reduce and step: the replicas' round; else -1 */
} pd_sched_action;

/* Per-stage costs the generator and the simulator use, per minibatch. */
typedef struct pd_sched_stage_cost {
    double load_ms;         /* data loading (stage 0), by the loader beside the rank */
    double fwd_ms, bwd_ms;  /* compute on one replica */
    int64_t send_bytes;     /* activations to the next stage (gradients back: the same) */
    int64_t weight_bytes;   /* trainable weights */
    int64_t stash_bytes;    /* activations kept per minibatch in flight */
} pd_sched_stage_cost;

/* Costs of a plan's stages. Owned: free with pd_sched_costs_destroy. */
typedef struct pd_sched_costs {
    int n_stages;
    pd_sched_stage_cost *stages;
    double optimizer_state_factor; /* optimizer state bytes per weight byte */
} pd_sched_costs;

/* Costs of `plan`'s stages from `profile`: forward and backward sums of the
 * stage's layers, data loading from the input nodes (on stage 0), bytes
 * crossing the cut after each stage (outputs of earlier layers, inputs
 * included, consumed by later ones: a skip connection is forwarded stage by
 * stage), weights, and the stage's activations as the stash per minibatch.
 * PD_EINVAL names a layer index out of range. */
pd_status pd_sched_costs_from_profile(const pd_plan *plan, const pd_profile *profile, double optimizer_state_factor,
                                      pd_sched_costs *out);

/* Costs from the plan alone: each stage's compute_ms split 1:2 into forward
 * and backward, stage 0's data loading inside its forward, no bytes (the
 * plan does not record them): communication is then free. */
pd_status pd_sched_costs_from_plan(const pd_plan *plan, pd_sched_costs *out);

/* Frees the stages; NULL or an empty struct is fine. */
void pd_sched_costs_destroy(pd_sched_costs *costs);

/* What to generate. */
typedef struct pd_sched_options {
    pd_sched_type type;
    int minibatches;      /* training minibatches, a multiple of every stage's replicas (gpipe: of microbatches) */
    /* gpipe: minibatches per flush, a multiple of every stage's replicas;
     * 1f1b-2bw: minibatches per weight version (the gradients one update
     * sums), 0 for pd_sched_2bw_accumulate's default */
    int microbatches;
    int eval_minibatches; /* evaluation forwards after training (0: none) */
    int depth;            /* slots per channel for the checker and the simulator; >= 1 */
    /* 1f1b on replicated stages: take round i's step after backward i + 1
     * instead of before it. Every forward still sees the same version (the
     * step precedes the forward after backward i + 1 either way), but a
     * replica no longer waits for the round while a later replica is in
     * its backward, which costs throughput when a replicated stage's
     * backward is longer than the pipeline's time per minibatch
     * (docs/simulator.md). The rank needs a second gradient buffer, since
     * backward i + 1 runs while round i is reduced. */
    bool defer_step;
    /* 1f1b with costs: raise each stage's warm-up above
     * pd_plan_1f1b_in_flight where the stages' real forward, backward
     * and transfer times (bytes over the plan's links) say the pipeline
     * would otherwise wait at the period of the slowest stage's compute
     * (src/sched/warmup.c derives it). More minibatches in flight: more stash and versions;
     * the extra ones travel in the channels, so the schedule's depth is
     * opts.depth plus the most forwards a stage runs beyond
     * pd_plan_1f1b_in_flight's. */
    bool warmup_from_costs;
} pd_sched_options;

/* A generated schedule. Read its fields; free with pd_sched_destroy. */
typedef struct pd_sched {
    pd_sched_type type;
    int n_ranks;           /* the plan's workers */
    int n_stages;
    int minibatches, eval_minibatches, microbatches;
    int depth;             /* slots per channel: opts.depth, more with warmup_from_costs */
    int *rank_stage;       /* per rank: its stage, -1 if unused */
    int *rank_replica;     /* per rank: its replica index in the stage, -1 if unused */
    int *stage_replicas;   /* per stage */
    int **stage_ranks;     /* per stage: its ranks, replica order */
    int *in_flight;        /* per stage: warm-up forwards (NOAM at stage 0) */
    int *n_actions;        /* per rank */
    pd_sched_action **actions; /* per rank: its list */
} pd_sched;

/* PipeDream-2BW (1f1b-2bw): minibatch b of batch k = b / m runs its
 * forward and backward at every stage on the weights after k - 1 updates
 * (0 for the first two batches), and a stage's update k + 1 applies batch
 * k's gradients, summed over its m minibatches and its replicas, to the
 * newest weights: W(k+1) = W(k) - lr grad f(W(k-1)). The minibatches per
 * update m: `requested`, or when 0 the smallest allowed: a multiple of
 * every stage's replicas r_s, at least the pipeline's depth (stages) and
 * at least r_s (w_s - 1) at every stage (w_s: its 1F1B warm-up forwards,
 * pd_plan_1f1b_in_flight), so that a forward never waits for a version
 * and at most two versions are alive. PD_EINVAL names the bound a
 * requested m misses. */
pd_status pd_sched_2bw_accumulate(const pd_plan *plan, int requested, int *out);

/* Generates every rank's list for `plan` under `opts`. `costs` (nullable)
 * gives the message and all-reduce bytes (0 without). 1F1B's warm-up is
 * pd_plan_1f1b_in_flight's (also 1f1b-2bw's, whose last batch may be
 * shorter). dp needs a one-stage plan, straight one replica per stage. PD_EINVAL names a bad option or plan. */
pd_status pd_sched_generate(const pd_plan *plan, const pd_sched_costs *costs, const pd_sched_options *opts,
                            pd_sched **out);

/* Frees a schedule. NULL is ignored. */
void pd_sched_destroy(pd_sched *s);

/* Prints the action `a` as one line, e.g. "send-act mb 3 to rank 2 (4096 B)". */
void pd_sched_action_format(const pd_sched_action *a, char *buf, size_t size);

/* Writes every rank's list, one action a line. */
void pd_sched_print(const pd_sched *s, FILE *out);

/* ---- the checker (check.c) ---- */

/* Dry-runs `s` with blocking semantics (sends block on a full channel of
 * s->depth slots, receives on an empty one, steps on an all-reduce round
 * not yet posted by every replica) and checks what it sees: a receive
 * whose channel holds another message first, a forward or backward without
 * its input, a forward on a weight version its rank has not published, a
 * deadlock (no rank can move; every blocked rank named), a message never
 * received, a training minibatch not forwarded and backwarded once at
 * every stage by its replica (or an evaluation one not evaluated), and for
 * 1f1b-2bw a rank keeping more than two versions alive. PD_ESTATE with the first problem, naming rank, action index,
 * action and minibatch ("rank 1 action 7 (recv-act mb 3 from rank 0): ...").
 * `s` may have been edited by hand after generation. */
pd_status pd_sched_check(const pd_sched *s);

/* ---- the simulator (simulate.c) ---- */

/* One timed action, for traces. */
typedef struct pd_sched_event {
    int rank, action; /* index into s->actions[rank] */
    double start_ms, end_ms;
} pd_sched_event;

/* Traffic of one directed pair of ranks. */
typedef struct pd_sched_link_stats {
    int src, dst;
    int64_t bytes;
    double busy_ms;
} pd_sched_link_stats;

/* Per rank. */
typedef struct pd_sched_rank_stats {
    double busy_ms;          /* compute: forward, backward, eval */
    double idle_ms;          /* the rest of the run (bubbles and waits) */
    double utilisation;      /* busy / makespan */
    int64_t bytes_sent;      /* messages plus this rank's share of all-reduce traffic */
    int weight_versions;     /* most versions alive at once (stashed + newest) */
    int max_in_flight;       /* most minibatches forwarded but not backwarded */
    double memory_bytes;     /* weights x versions + stash x in flight + optimizer state */
} pd_sched_rank_stats;

/* What a simulation predicts. Owned: free with pd_sched_result_destroy. */
typedef struct pd_sched_result {
    double makespan_ms;         /* the whole run */
    double ms_per_minibatch;    /* steady state (middle of the run, whole periods) */
    double minibatches_per_s;   /* 1000 / ms_per_minibatch */
    double samples_per_s;       /* times the batch; 0 when the batch is unknown */
    int batch;
    int64_t bytes_total;        /* messages + all-reduce traffic, whole run */
    double bytes_per_minibatch; /* bytes_total / training minibatches */
    double bytes_per_sample;    /* / batch; 0 when unknown */
    int n_ranks;
    pd_sched_rank_stats *ranks;
    int n_links;
    pd_sched_link_stats *links;
    int n_events;
    pd_sched_event *events;     /* one per action, per rank in list order */
} pd_sched_result;

/* The bandwidth (bytes/s) and latency (s) of the link between ranks a and
 * b: the level of their lowest common group (rank r is in group
 * r / (fanout_0 * ... * fanout_L) of level L+1). The same rank: infinite
 * bandwidth, 0 latency. */
void pd_sched_link(const pd_plan_cluster *cluster, int a, int b, double *bandwidth, double *latency);

/* Ring all-reduce of `bytes` among `n` ranks over links of `bandwidth`
 * and `latency`: 2(n-1)/n * bytes / bandwidth + 2(n-1) * latency, in ms. */
double pd_sched_allreduce_ms(int n, int64_t bytes, double bandwidth, double latency);

/* Times `s` (checked first with pd_sched_check) as a discrete-event run:
 * compute actions take their stage's costs; a load waits for the rank's
 * data loader, which prepares one minibatch after the other in load_ms
 * each, up to 3 ahead of the rank (the loader's default prefetch), so
 * loading overlaps compute; a message takes bytes / bandwidth + latency
 * of its link (pd_sched_link) from when both it is posted and the link
 * (one per ordered pair) is free; a receive ends when its message has
 * arrived; an all-reduce round starts when every replica has posted it and
 * takes pd_sched_allreduce_ms over the group's slowest link, overlapping
 * whatever its ranks do until their step; a send's slot frees when the
 * receive ends. `batch` (0: unknown) converts to samples. */
pd_status pd_sched_simulate(const pd_sched *s, const pd_sched_costs *costs, const pd_plan_cluster *cluster, int batch,
                            pd_sched_result **out);

/* Frees a result. NULL is ignored. */
void pd_sched_result_destroy(pd_sched_result *r);

/* Prints the result as a table: throughput, per-rank utilisation, idle,
 * memory and bytes, per-link bytes. */
void pd_sched_result_print(const pd_sched_result *r, const pd_sched *s, FILE *out);

/* ---- baselines (baselines.c) ---- */

/* Data parallelism: one stage holding every non-input layer of `profile`,
 * replicated on every worker of `cluster`. Free with pd_plan_destroy. */
pd_status pd_sched_plan_data_parallel(const pd_profile *profile, const pd_plan_cluster *cluster, pd_plan **out);

/* Straight model parallelism: one stage per worker (fewer when the model
 * has fewer layers), consecutive layers, each stage closed once the stages
 * so far hold their share of the total forward + backward time. Free with
 * pd_plan_destroy. */
pd_status pd_sched_plan_straight(const pd_profile *profile, const pd_plan_cluster *cluster, pd_plan **out);

/* ---- outputs (trace.c, plot.c) ---- */

/* Writes the events as Chrome trace-event JSON (one track per rank,
 * "ph":"X" events in microseconds; opens in Perfetto and
 * chrome://tracing), atomically. PD_EIO on failure. */
pd_status pd_sched_write_trace(const pd_sched *s, const pd_sched_result *r, const char *path);

/* Writes a per-rank timeline as gnuplot input: `data_path` holds one line
 * per compute or transfer action (rank, start, end, kind), `script_path`
 * a script drawing it into `png_path`. PD_EIO on failure. */
pd_status pd_sched_write_plot(const pd_sched *s, const pd_sched_result *r, const char *data_path,
                              const char *script_path, const char *png_path);

#ifdef __cplusplus
}
#endif
#endif
