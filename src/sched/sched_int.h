/* Private to src/sched: the builder the generators append actions with,
 * and the pieces every schedule shares (routing, forward and backward
 * blocks with their transfers, the replicas' synchronisation). */
#ifndef PD_SCHED_INT_H
#define PD_SCHED_INT_H

#include <stdbool.h>

#include <pipedream/sched.h>

/* A schedule under construction: the lists' capacities and, per stage and
 * minibatch, the weight version its forward used (for stashing and
 * vertical sync). */
typedef struct pd_sched_builder {
    pd_sched *s;
    const pd_sched_costs *costs; /* nullable: no bytes */
    const pd_plan_cluster *cluster; /* the plan's: links between ranks */
    int *capacity;               /* per rank */
    int *version;                /* per rank: minibatches applied (the newest version) */
    int *steps;                  /* per rank: steps taken (the round of the next step) */
    int *posted;                 /* per rank: all-reduce rounds posted (the round of the next one) */
    int **fwd_version;           /* per stage, per minibatch (training and evaluation) */
} pd_sched_builder;

/* Allocates the schedule's rank maps from the plan and an empty builder.
 * PD_EINVAL names an inconsistent plan (ranks out of range or repeated). */
pd_status pd_sched_builder_init(pd_sched_builder *b, const pd_plan *plan, const pd_sched_costs *costs,
                                const pd_sched_options *opts);

/* Hands the schedule over (*out) and frees the rest; on failure (status
 * != PD_OK) frees everything. */
pd_status pd_sched_builder_finish(pd_sched_builder *b, pd_status status, pd_sched **out);

/* The rank running minibatch `mb` at `stage`: replica mb mod r. */
int pd_sched_route(const pd_sched *s, int stage, int mb);

/* The minibatches of replica `replica` of `stage` in [first, last), in
 * order, into `mbs` (room for last - first); returns how many. */
int pd_sched_local_minibatches(const pd_sched *s, int stage, int replica, int first, int last, int *mbs);

/* Appends blocks to `rank`'s list. forward: load or receive the input,
 * forward on `version` (or eval), send the output on; backward: receive
 * the gradient, backward on the forward's version, send the gradient back.
 * allreduce posts the rank's next round on stages with replicas; step
 * takes the rank's next round and publishes the next version (the
 * round's minibatches applied), step_to publishes `version`. */
pd_status pd_sched_emit_forward(pd_sched_builder *b, int rank, int mb, int version, bool eval);
pd_status pd_sched_emit_backward(pd_sched_builder *b, int rank, int mb);
pd_status pd_sched_emit_allreduce(pd_sched_builder *b, int rank);
pd_status pd_sched_emit_step(pd_sched_builder *b, int rank);
pd_status pd_sched_emit_step_to(pd_sched_builder *b, int rank, int version);

/* Evaluation forwards of every evaluation minibatch this rank runs. */
pd_status pd_sched_emit_eval(pd_sched_builder *b, int rank);

/* The generators (one file each). */
pd_status pd_sched_gen_1f1b(pd_sched_builder *b, bool vertical_sync, bool defer_step, bool warmup_from_costs);
/* PipeDream-2BW, `microbatches` per update (0: the default). */
pd_status pd_sched_gen_2bw(pd_sched_builder *b, int microbatches, bool warmup_from_costs);

/* 1F1B's warm-up into b->s->in_flight: pd_plan_1f1b_in_flight, or with
 * warmup_from_costs (and costs) raised as the costs say, the channels'
 * depth raised by as many (warmup.c). */
void pd_sched_1f1b_warmup(pd_sched_builder *b, bool warmup_from_costs);

/* 1F1B's warm-up forwards per stage as pd_plan_1f1b_in_flight, raised
 * where the builder's costs and the cluster's links say that transfers
 * and unequal stages need more to never hold the pipeline back
 * (warmup.c). Needs b->costs. Returns the most forwards a stage runs
 * beyond pd_plan_1f1b_in_flight's. */
int pd_sched_1f1b_in_flight_from_costs(const pd_sched_builder *b, int *in_flight);
pd_status pd_sched_gen_gpipe(pd_sched_builder *b, int microbatches);
pd_status pd_sched_gen_dp(pd_sched_builder *b);

/* The most minibatches in flight and weight versions alive at once on
 * `rank` over its list (memory.c). */
pd_status pd_sched_rank_memory(const pd_sched *s, int rank, int *max_in_flight, int *max_versions);

#endif
