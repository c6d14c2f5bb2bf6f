/* The runtime's internals (module-private): what the pipeline borrows from
 * the single-process trainer, and the parts of a pipeline rank. */
#ifndef PD_RUNTIME_INT_H
#define PD_RUNTIME_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <pipedream/checkpoint.h>
#include <pipedream/pipeline.h>
#include <pipedream/slurm.h>
#include <pipedream/topology.h>
#include <pipedream/transport.h>
#include <pipedream/weight_ring.h>

/* ---- trainer.c: the pieces a pipeline rank reuses ---- */

/* A created trainer's device, model, optimizer and schedule, borrowed
 * (the trainer owns them), and its data's sizes (S2VT's as in
 * pd_trainer_stand_in_data; eval_info zero without evaluation data). Its
 * data itself is read through pd_trainer_load. */
typedef struct pd_trainer_parts {
    pd_device *dev;
    pd_loader_info train_info, eval_info;
    pd_model_options model;
    pd_graph *g;
    pd_model_io io;
    pd_optimizer *opt;
    const pd_lr_schedule *schedule;
} pd_trainer_parts;

void pd_trainer_get_parts(pd_trainer *t, pd_trainer_parts *out);

/* The next minibatch of the training data (with `eval`, of the evaluation
 * data), images or S2VT's frames, words and targets, into the model's input
 * tensors; *valid receives its samples. PD_ESTATE for `eval` without
 * evaluation data. */
pd_status pd_trainer_load(pd_trainer *t, bool eval, int *valid);

/* Puts the training (`eval`: evaluation) data at minibatch `batch` of
 * epoch `epoch`; data already there keeps what it has prefetched. */
pd_status pd_trainer_seek(pd_trainer *t, bool eval, int64_t epoch, int64_t batch);

/* Right predictions of the graph's logits against its labels tensor among
 * the first `valid` samples, out of *counted: the samples, or for S2VT
 * their tokens (a caption's words and its end, not the padding). */
pd_status pd_trainer_count_correct(pd_trainer *t, int valid, int64_t *correct, int64_t *counted);

/* The model options (input, classes, batch) that `opts` and its training
 * data (either kind) resolve to, as pd_trainer_create resolves them,
 * without building the model. */
pd_status pd_trainer_data_geometry(const pd_trainer_options *opts, pd_model_options *out);

/* Data for a rank that builds the model of `geometry` but reads no data (a
 * pipeline stage after the first): one synthetic minibatch of the same
 * family as the data set `kind` (s2vt-synthetic for S2VT's kinds, whose
 * channels, height, width and classes are features, frames, decoder steps
 * and vocabulary). */
pd_loader_options pd_trainer_stand_in_data(const char *kind, const pd_model_options *geometry);

/* Picks the part of a built, unallocated model graph a rank allocates:
 * sets run[k] and hold[k] (pd_graph_size entries each, all false on entry)
 * as pd_graph_allocate_nodes reads them. */
typedef pd_status (*pd_trainer_select_fn)(const pd_graph *g, void *user, bool *run, bool *hold);

/* pd_trainer_create allocating only the part of the model `select` picks
 * (NULL: the whole model); the trainer's optimizer then covers that part's
 * parameters. Such a trainer lends its parts to a pipeline rank; its own
 * training steps fail at the first node outside the part. */
pd_status pd_trainer_create_part(const pd_trainer_options *opts, pd_trainer_select_fn select, void *user,
                                 pd_trainer **out);

/* The optimizer of the options `o` (kind and hyper-parameters) over g's
 * trainable parameters, or over `n` of them when `params` is not NULL. */
pd_status pd_trainer_optimizer_create(const pd_trainer_options *o, pd_graph *g, pd_param *const *params, int n,
                                      pd_optimizer **out);


/* ---- checkpoint.c: checkpoints of some of a graph's parameters ---- */

/* pd_checkpoint_save over `n` parameters (a pipeline stage's, buffers
 * included) and the state of `opt` (nullable; its parameters must be among
 * them). */
pd_status pd_checkpoint_save_params(const char *path, pd_param *const *params, int n, pd_optimizer *opt,
                                    const pd_checkpoint_state *state);

/* Loads `n` parameters and the state of `opt` (nullable) from a set of
 * checkpoint files (a pipeline's, one per stage of the plan that wrote
 * them), each tensor from the one file holding it: every file validated
 * as pd_checkpoint_read_state does, compatible with `expected` (NULL: not
 * checked) and at the same step, every tensor found once with the right
 * dtype and shape before anything is copied. The optimizer's step count is
 * left to the caller. *out (nullable) receives the first file's state. */
pd_status pd_checkpoint_load_params(const char *const *paths, int n_paths, const pd_checkpoint_state *expected,
                                    pd_param *const *params, int n, pd_optimizer *opt, pd_checkpoint_state *out);

/* ---- stage.c: the stage's nodes, boundary tensors and stash ---- */

typedef struct pd_stage {
    pd_graph *g;
    int index, n_stages;
    int *nodes, n_nodes;       /* graph ids of the stage's non-input nodes, increasing */
    int *cut_in, n_cut_in;     /* tensors received from the previous stage (its cut) */
    int *cut_out, n_cut_out;   /* tensors sent to the next stage */
    size_t act_in_bytes, act_out_bytes, grad_in_bytes, grad_out_bytes;
    int *seed_nodes, n_seeds;  /* backward seeds: needing-grad cut_out tensors, or the loss */
    pd_tensor **seeds;         /* [n_seeds]; NULL for the loss */
    pd_param **params;         /* the stage's trainable parameters */
    int n_params;
    pd_param **saved;          /* all its parameters, buffers too (checkpoints) */
    int n_saved;
    size_t n_weights;          /* their f32 elements */
    size_t stash_bytes;        /* per stashed minibatch */
    int stash_slots;
    unsigned char *stash;      /* [stash_slots][stash_bytes] */
    int64_t *stash_mb;         /* [stash_slots]; -1 free */
} pd_stage;

/* The part of the model graph `g` (built, allocated or not) stage `index`
 * of `plan` allocates (pd_graph_allocate_nodes): run[k] for its nodes,
 * hold[k] for the tensors crossing its cuts (received, or forwarded to the
 * next stage) and, on stage 0, the model's inputs; nothing of another
 * stage's layers. run and hold are pd_graph_size entries, zeroed. */
pd_status pd_stage_select(const pd_graph *g, const pd_plan *plan, const pd_profile *profile, int index, bool *run,
                          bool *hold);

/* Resolves stage `index` of `plan` on the allocated graph `g` (profile node
 * names = graph node names; allocated whole or as pd_stage_select picks),
 * with room to stash `in_flight` minibatches. */
pd_status pd_stage_init(pd_stage *st, pd_graph *g, const pd_plan *plan, const pd_profile *profile, int index,
                        int in_flight);
void pd_stage_destroy(pd_stage *st);

/* Copies the tensors of `nodes` (outputs, or gradients when `grads`) to or
 * from a message buffer, in order; only nodes needing a gradient count for
 * gradients. The buffer is host memory when `buf_dev` is NULL, else memory
 * of `buf_dev` (the tensors' device: copied device to device). Either way
 * the copies are complete when these return (the buffer may be sent, the
 * slot released). */
pd_status pd_stage_pack(pd_stage *st, const int *nodes, int n, bool grads, void *buf, pd_device *buf_dev);
pd_status pd_stage_unpack_act(pd_stage *st, const void *buf, size_t bytes, pd_device *buf_dev);
pd_status pd_stage_unpack_grad(pd_stage *st, const void *buf, size_t bytes, pd_device *buf_dev);

/* Keeps / brings back the forward state of minibatch `mb`. */
pd_status pd_stage_stash_save(pd_stage *st, int64_t mb);
pd_status pd_stage_stash_restore(pd_stage *st, int64_t mb);

/* The stage's parameters to and from a flat f32 buffer (values or grads). */
pd_status pd_stage_params_get(pd_stage *st, bool grads, float *buf);
pd_status pd_stage_params_set(pd_stage *st, bool grads, const float *buf);

/* ---- versions.c: weight stashing over the weight ring ---- */

typedef struct pd_stage_versions {
    pd_weight_ring *ring;
    float **slots;
    int depth;
    uint64_t loaded; /* the version in the graph's parameters */
} pd_stage_versions;

/* Checks the options' weight versions (pd_pipeline_options.weight_versions
 * and what goes with it): PD_EINVAL naming the option otherwise. */
pd_status pd_versions_check_options(const pd_pipeline_options *o);
/* The ring depth for `in_flight` minibatches in flight under the options,
 * checked against the host's memory for `weight_bytes` per version. */
pd_status pd_versions_depth(const pd_pipeline_options *o, int in_flight, size_t weight_bytes, int *depth);
pd_status pd_versions_init(pd_stage_versions *v, pd_stage *st, int depth);
void pd_versions_destroy(pd_stage_versions *v);
/* Makes the graph's parameters hold the pinned version. */
pd_status pd_versions_load(pd_stage_versions *v, pd_stage *st, const pd_weight_pin *pin);
/* Applies the gradients in the graph (computed on any version) to the
 * newest version with `opt` at learning rate `lr`, into a free slot, and
 * publishes it. */
pd_status pd_versions_step(pd_stage_versions *v, pd_stage *st, pd_optimizer *opt, float lr, uint64_t *published);

/* ---- binding.c: each rank's GPU, NIC, cores and memory ---- */

/* What a local rank's binding is chosen from. */
typedef struct pd_binding_input {
    const pd_topo *topo;     /* the node's */
    int local_rank, local_ranks;
    const pd_slurm_env *env; /* CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE; NULL: the node's GPUs all visible */
    int cuda_device;         /* the ordinal the rank's device names ("cuda:N"); -1: by local rank */
} pd_binding_input;

/* The choice alone, nothing bound (testable from an XML topology): the
 * rank's GPU (visible list: local rank -> CUDA ordinal -> the node's GPU),
 * its nearest NIC and NUMA node and the share of that node's cores among
 * the local ranks whose GPUs it holds (all of them, shared, when they are
 * more than its cores); without a GPU, the rank's share of the node's
 * cores, none when the local ranks outnumber the cores. Fills *out but
 * `bound`, `device`, `nic_address` and `line`; `why` says why nothing
 * can be bound ("" when something can), `notes` why the visible GPU was
 * not located (both `size` bytes). PD_EINVAL for a local rank outside
 * 0..local_ranks-1. */
pd_status pd_binding_choose(const pd_binding_input *in, pd_pipeline_binding *out, char *why, char *notes,
                            size_t size);

/* Writes b->line for world rank `rank`: the choice, then "; not bound:
 * <why>" and "; <notes>" when not empty. */
void pd_binding_format(pd_pipeline_binding *b, int rank, const char *why, const char *notes);

/* At start-up, after pd_boot_init and before anything is allocated: the
 * mode (opts.bind, $PD_BIND), the topology ($PD_TOPO_XML or discovery),
 * the choice for this local rank, the binding itself, p->boot.binding,
 * and the trainer's device "cuda" made "cuda:N". Fails on bad input only
 * (mode, $PD_TOPO_XML, the Slurm environment); what the machine refuses
 * is said in the line and leaves the rank unbound. */
pd_status pd_binding_setup(pd_pipeline *p);

/* ---- bootstrap.c: MPI, ranks, channels, communicators ---- */

typedef struct pd_peer_channel {
    int peer;          /* world rank */
    bool send;         /* this rank sends on it */
    pd_channel *ch;
    size_t slot_bytes;
    unsigned char *buffers; /* send side: depth buffers of slot_bytes (host, or the channel device's memory) */
    void *buffers_alloc;    /* device memory: the allocation holding them (page-padded) */
    uint64_t *seqs;         /* send side: per buffer, the send using it (UINT64_MAX: none) */
    uint64_t sent;          /* send side: messages posted */
    double wait_s;          /* time this rank waited on the channel since the last progress line */
    uint64_t sent_bytes, sent_msgs; /* send side: posted since the last progress line (the wire's share) */
} pd_peer_channel;

typedef struct pd_boot {
    int rank, ranks, local_rank;
    int64_t *procs;          /* per rank: its pid and its node (the node's first rank); NULL without MPI */
    pd_pipeline_binding binding; /* binding.c: the channels listen on binding.nic_address */
    bool mpi_initialised_here;
    void *replica_comm;      /* MPI_Comm* of this stage's replicas, or NULL */
    pd_transport_token token;
    pd_peer_channel *channels;
    int n_channels;
    int depth;
    pd_device *channel_dev;  /* the channels' memory: NULL host, else this device's (PD_TRANSPORT_DEVICE) */
} pd_boot;

pd_status pd_boot_init(pd_boot *b);
/* Opens one channel per ordered pair of ranks that exchange messages in
 * `s`, slot sizes from `act_bytes`/`grad_bytes` per stage cut; in memory of
 * `dev` (receive slots, send buffers, registered with the channel where it
 * has a direct path) or, when `dev` is NULL, in host memory. */
pd_status pd_boot_channels(pd_boot *b, const pd_sched *s, const size_t *cut_bytes, const size_t *cut_grad_bytes,
                           const char *backends, int timeout_ms, pd_device *dev);
pd_status pd_boot_replica_comm(pd_boot *b, const pd_sched *s);
pd_peer_channel *pd_boot_channel(pd_boot *b, int peer, bool send);
/* Closes the channels and frees their buffers (before their device
 * closes); pd_boot_destroy does it too when not done. */
void pd_boot_close_channels(pd_boot *b);
void pd_boot_destroy(pd_boot *b);

/* ---- segments.c: the run as schedules between flushes ---- */

/* One schedule of the run: its training minibatches (global indices
 * first .. first + count - 1), then an evaluation of the whole test split
 * and a checkpoint where marked. The pipeline drains at its end, so every
 * stage then holds the weights after the same minibatches. */
typedef struct pd_segment {
    int64_t first, count;
    bool eval, checkpoint;
} pd_segment;

typedef struct pd_segment_options {
    int64_t start, total; /* training minibatches done before this run; in all */
    int64_t per_epoch;    /* an epoch's minibatches (a boundary after each); 0: no epochs */
    int64_t unit;         /* every segment is a multiple of it */
    int64_t eval_every, checkpoint_every; /* minibatches, rounded up to the unit; 0: never */
    bool eval, checkpoint; /* evaluation data, a checkpoint directory */
} pd_segment_options;

/* The segments from `start` to `total`: boundaries at epoch ends, every
 * eval_every and checkpoint_every minibatches and the end; evaluation after
 * epoch ends, eval_every boundaries and the last; checkpoints after
 * checkpoint_every boundaries and the last. PD_EINVAL when the counts are
 * not multiples of the unit. *out is freed by the caller. */
pd_status pd_segments_plan(const pd_segment_options *o, pd_segment **out, int *count);

/* ---- progress.c: per-rank progress lines ---- */

typedef struct pd_rank_progress {
    double every_s;          /* <= 0: no lines */
    double last_s;           /* when the last line was printed (or the run began) */
    int64_t forwards, backwards, evals; /* since then */
    double loss_sum;         /* last stage: losses and hits since then */
    int64_t losses, correct, counted; /* counted: samples, or S2VT's tokens */
    double allreduce_wait_s; /* waiting for the replicas' all-reduce since then */
} pd_rank_progress;

/* Starts counting (at the run's beginning). */
void pd_progress_start(pd_pipeline *p);
/* Prints this rank's line when every_s has passed since the last one:
 * minibatches done, samples/s, the last stage's loss and accuracy, the
 * messages and bytes sent to each peer, and the time spent waiting for
 * each peer and for the all-reduce. */
void pd_progress_tick(pd_pipeline *p);
/* At the end of the run: the line for what was done since the last one
 * (if anything), so that a rank's lines add up to its whole run. */
void pd_progress_finish(pd_pipeline *p);

/* ---- flight.c: the last actions of this rank ---- */

#define PD_FLIGHT_ACTIONS 32

typedef struct pd_flight_entry {
    int segment, index;     /* the action `index` of segment `segment`'s list */
    pd_sched_action action;
    double start, end;      /* monotonic seconds; end < 0 while it runs */
} pd_flight_entry;

typedef struct pd_flight {
    pd_flight_entry ring[PD_FLIGHT_ACTIONS];
    _Atomic uint64_t count; /* actions begun */
} pd_flight;

/* The executor: action `index` of the segment begins, the last one ends. */
void pd_flight_begin(pd_flight *f, int segment, int index, const pd_sched_action *a, double now);
void pd_flight_end(pd_flight *f, double now);
/* Prints the recorded actions on stderr in one piece, saying `why`. */
void pd_flight_dump(const pd_pipeline *p, const char *why, double now);

/* ---- watchdog.c: dead neighbours and SIGUSR1 ---- */

/* Starts the thread that ends this process (exit code 1, naming the rank)
 * when another rank of this node dies, and dumps the flight recorder on
 * SIGUSR1. */
pd_status pd_watchdog_start(pd_pipeline *p);
/* Stops and joins it; nothing when it does not run. */
void pd_watchdog_stop(pd_pipeline *p);

/* ---- progress_thread.c: communication beside compute ---- */

/* After the channels are connected: unless opts.progress_thread < 0, no
 * channel or a channel on the mpi backend, starts the thread that
 * progresses every channel of the rank and sleeps on their descriptors
 * while idle. */
pd_status pd_progress_thread_start(pd_pipeline *p);
/* Whether it runs and still serves the channels (it stops itself when a
 * channel fails; the compute thread then progresses them again). */
bool pd_progress_thread_live(const pd_pipeline *p);
/* The events it has seen so far (take before looking at a channel). */
uint64_t pd_progress_thread_events(pd_pipeline *p);
/* Sleeps until it sees an event after `seen`, stops serving, or `ms`
 * pass. Only while pd_progress_thread_live(). */
void pd_progress_thread_sleep(pd_pipeline *p, uint64_t seen, int ms);
/* Stops and joins it, before the channels close; nothing when it does not
 * run. */
void pd_progress_thread_stop(pd_pipeline *p);

/* ---- the pipeline rank (pipeline.c creates it, run.c and executor.c run it) ---- */

struct pd_pipeline {
    pd_pipeline_options opts;
    pd_boot boot;
    pd_profile *profile;
    pd_plan *plan;
    pd_sched *sched;       /* the running segment's */
    int64_t sched_train, sched_eval; /* what sched was generated for */
    pd_trainer *trainer;
    pd_trainer_parts parts;
    size_t model_bytes; /* the whole model's graph memory, of which parts.g holds this stage's */
    int stage, replica; /* -1: unused rank */
    int *rank_stage;    /* per world rank: its stage in the plan, -1 if none */
    pd_stage st;
    pd_optimizer *opt;   /* over the stage's parameters */
    pd_stage_versions ver;
    float *grad_acc;     /* the stage's gradients summed since the last step */
    int grad_count;      /* backward passes in grad_acc */
    void *allreduce;     /* MPI_Request* */
    bool allreduce_pending;
    pd_weight_pin *pins; /* per minibatch in flight */
    int64_t *pin_mb;     /* -1: free */
    int n_pins;
    uint64_t *version_of; /* schedule's version -> ring version */
    int64_t n_versions;
    int64_t holds_mb;    /* the minibatch whose forward state the graph holds, or -1 */

    /* The data as the first rank of stage 0 opened it (every rank has it). */
    int batch;
    int64_t train_batches;  /* full minibatches of the training split (unsharded) */
    int64_t eval_samples, eval_batches; /* of the evaluation split; 0 without */

    /* The run: its segments, and the one running. */
    pd_segment *segments;
    int n_segments;
    int64_t unit, per_epoch, start, total; /* minibatches; per_epoch 0 without epochs */
    const pd_segment *seg;
    int64_t mb_per_step;     /* this stage's minibatches per optimizer step */
    pd_lr_schedule lr;       /* this stage's, over minibatches */
    double run_start;        /* when the run began (every rank after a barrier) */
    double seg_train_s, seg_eval_s; /* this rank's time in the segment's training and evaluation */

    char **resume_paths; /* the files of the checkpoint set resumed from */
    int n_resume_paths;

    float *losses;       /* per minibatch (last stage; rank 0 after each segment) */
    int64_t *correct, *counted; /* right predictions out of samples (S2VT: tokens) */
    double *mb_time;     /* per minibatch: seconds into the run when its loss was computed */
    int64_t eval_correct, eval_counted; /* of the running segment (last stage; rank 0 after it) */
    FILE *metrics;       /* rank 0 */
    pd_rank_progress progress;
    pd_flight flight;
    pthread_t watchdog;
    bool watchdog_running;
    atomic_bool watchdog_stop;
    pd_channel_set *comm_set; /* progress_thread.c: the rank's channels */
    pthread_t comm_thread;
    bool comm_running;        /* started (and not joined yet) */
    atomic_bool comm_stop, comm_live; /* live: it still serves (not stopped by a failed channel) */
    pthread_mutex_t comm_lock; /* guards comm_events */
    pthread_cond_t comm_cond;  /* broadcast when comm_events grows or the thread ends */
    uint64_t comm_events;      /* set waits that reported an event */
    pd_pipeline_result result;
    bool ran;
};

/* executor.c: runs this rank's action list of the running segment. */
pd_status pd_executor_run(pd_pipeline *p);
/* executor.c: waits until every send of this rank has completed. */
pd_status pd_executor_drain(pd_pipeline *p);
/* pipeline_checkpoint.c: after `step` minibatches, replica 0 of every
 * stage writes its file of the set and rank 0 commits the set's index.
 * Collective. */
pd_status pd_pipeline_checkpoint_save(pd_pipeline *p, int64_t step);
/* pipeline_checkpoint.c: reads the index of the set to resume from
 * (opts.train.resume), checks its files and sets p->start. */
pd_status pd_pipeline_resume_open(pd_pipeline *p);
/* pipeline_checkpoint.c: this rank's stage's tensors and optimizer state
 * from the set (after pd_pipeline_resume_open). */
pd_status pd_pipeline_resume_load(pd_pipeline *p);
/* autoplan.c: --plan auto: rank 0 profiles and plans, every rank gets
 * p->profile and p->plan. Collective. */
pd_status pd_autoplan(pd_pipeline *p);
/* pipeline.c: the schedule of segment `seg` into p->sched (kept when the
 * last one had the same shape). */
pd_status pd_pipeline_schedule(pd_pipeline *p, const pd_segment *seg);

#endif
