/* The pipeline runtime (PipeDream): ranks launched by MPI run the stage
 * replicas of a plan, each executing its action list of the schedule
 * (include/pipedream/sched.h) with weight stashing through the stage's
 * weight ring, activations and gradients over transport channels to the
 * neighbouring stages' replicas, and an MPI all-reduce of the gradients
 * among a stage's replicas. docs/runtime.md describes how a rank runs and
 * what is exact.
 *
 * Every rank calls pd_pipeline_create (which initialises MPI unless the
 * caller did), pd_pipeline_run and pd_pipeline_destroy with the same
 * options. A rank that fails should call pd_pipeline_abort so that the
 * others stop at once instead of waiting for their peer timeouts. */
#ifndef PIPEDREAM_PIPELINE_H
#define PIPEDREAM_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include <pipedream/sched.h>
#include <pipedream/status.h>
#include <pipedream/trainer.h>
#include <pipedream/weight_ring.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_pipeline pd_pipeline;

/* How to train. The strings are borrowed and must outlive the pipeline. */
typedef struct pd_pipeline_options {
    /* Model, data, device, optimizer, learning-rate schedule and seed as
     * for the single-process trainer. `steps` training minibatches (a
     * multiple of every stage's replicas, and of the microbatches for
     * gpipe), or `epochs` of the training split (each rounded down to such
     * a multiple). With eval_data, the whole test split is evaluated
     * through the pipeline after every epoch, every eval_every minibatches
     * and after the last (the pipeline drains first, so every stage holds
     * the same weights). metrics_path: rank 0 writes every minibatch's
     * loss and accuracy and the test accuracies (the trainer's CSV or JSON
     * lines). checkpoint_dir: after every checkpoint_every minibatches and
     * the last, each stage writes its file of a set that rank 0 commits
     * (docs/runtime.md); resume: such a directory, whose last committed
     * set this run continues from, under this plan or another. Only stage
     * 0 opens the data; each stage's optimizer holds and updates its own
     * parameters only. */
    pd_trainer_options train;
    /* A *.plan.json for the profile, or "auto" (or NULL): rank 0 profiles
     * the model (or reads profile_path) and plans it for the job's ranks
     * on `levels`, and every rank runs that plan. */
    const char *plan_path;
    const char *profile_path; /* the model's *.profile.json (node names = graph node names) */
    /* plan "auto": the cluster's levels ("4x10GB/s", as `pipedream plan
     * --levels`; their workers must be the job's ranks); NULL: one level of
     * all the job's ranks at this node's innermost bandwidth (topology
     * discovery). */
    const char *levels;
    pd_sched_type schedule;   /* 1f1b (0), gpipe, dp, straight */
    int microbatches;         /* gpipe: minibatches per flush; 0 = stages x replicas' lcm */
    bool vertical_sync;       /* 1f1b: every stage uses stage 0's weight version */
    /* 1f1b's weight versions: PD_WEIGHT_VERSIONS_STASH (0): every
     * minibatch in flight keeps the version its forward ran on (PipeDream's
     * weight stashing, a ring of in-flight + 2 versions per stage);
     * PD_WEIGHT_VERSIONS_2BW (2): PipeDream-2BW, two versions per stage:
     * the gradients of `accumulate` minibatches (a batch) are summed and
     * averaged into one update, batch k runs at every stage on the weights
     * after k - 1 updates and update k + 1 applies batch k's gradient to
     * the newest weights, W(k+1) = W(k) - lr grad f(W(k-1))
     * (pd_sched_2bw_accumulate; the schedule 1f1b-2bw). The pipeline drains
     * at a segment's end (epochs, evaluations, checkpoints), so there every
     * update is applied and the next segment starts from the newest
     * weights, with no gradient left to carry. Not with vertical_sync,
     * overlap_allreduce or another schedule. */
    int weight_versions;
    int accumulate;           /* 2BW: minibatches per update; 0: the default, the pipeline's depth or more */
    /* 1f1b, replicated stages: take a round's step after the next forward,
     * which overlaps the all-reduce but runs that forward on weights a
     * round old (the schedule generator's order). false: step right after
     * the all-reduce, as PipeDream's data-parallel stages do. */
    bool overlap_allreduce;
    const char *backends;     /* transport preference; NULL: $PD_TRANSPORT or the default */
    /* Where the channels' memory lives (docs/runtime.md, start-up step 6):
     * "host": the cut tensors are copied to host send buffers and from the
     * receiver's host slots (the device's copies to and from the host);
     * "device": send buffers and receive slots in memory of the rank's
     * device (PD_TRANSPORT_DEVICE channels, pack and unpack copy device to
     * device; the transport takes a direct path where it has one, else
     * stages through pinned host memory; allowed on the cpu device, where
     * it stages); "auto" (or NULL): device unless the device is the cpu. */
    const char *channel_memory;
    /* A thread per rank that progresses its channels (sends leave and
     * messages land while the rank computes) and sleeps on their
     * descriptors while idle: > 0 on, < 0 off, 0 the default (on). Never
     * with channels on the mpi backend (MPI is single-threaded here). */
    int progress_thread;
    int timeout_ms;           /* longest wait for a peer before failing; <= 0: 20000 */
    /* Every rank prints a progress line on stderr this often (minibatches,
     * samples/s, the last stage's loss and accuracy, time spent waiting
     * for each peer), and rank 0 a line per evaluation; 0: every 10 s;
     * < 0: no lines. */
    double progress_seconds;
    /* How each rank binds itself at start-up, before anything is allocated
     * (docs/runtime.md, "Binding"): "auto" (NULL: $PD_BIND, else "auto")
     * picks the rank's GPU by its local rank (through CUDA_VISIBLE_DEVICES
     * or SLURM_GPUS_ON_NODE where set; "cuda" becomes that "cuda:N"), the
     * NIC nearest to it (the channels listen on its address) and its NUMA
     * node's share of the cores and memory, from the node's topology
     * (discovered, or the hwloc XML $PD_TOPO_XML names); "none" binds
     * nothing. */
    const char *bind;
} pd_pipeline_options;

/* Where a rank was bound at start-up (pd_pipeline_get_binding). Indices
 * are the node topology's (GPUs in PCI bus order); -1 is none. */
typedef struct pd_pipeline_binding {
    bool bound;            /* the CPUs (and memory) were bound */
    int local_rank, local_ranks;
    int gpu;               /* the node's GPU of this rank */
    int cuda_device;       /* its CUDA ordinal among the visible devices */
    char gpu_busid[16];
    char device[16];       /* "cuda:N" when the rank's device was "cuda" */
    int nic;               /* the GPU's (or cores') nearest NIC */
    char nic_name[32];     /* "mlx5_1", "eth0"; "" none */
    bool nic_rdma;
    char nic_address[48];  /* its IPv4 address here when it is an RDMA NIC
                              of this machine (the channels listen on it) */
    int numa;              /* os index of the NUMA node memory is bound to */
    int first_core, cores; /* logical indices (hwloc's); cores 0: CPUs not bound */
    int sharing;           /* local ranks bound to these same cores (1: alone) */
    char line[320];        /* "rank 1 (local 1 of 2): GPU 1 (0000:3b:00.0) ..." */
} pd_pipeline_binding;

/* Checks a binding mode as pd_pipeline_options.bind takes it and, for
 * "auto", that $PD_TOPO_XML (when set) can be read: PD_EINVAL or PD_EIO
 * naming the value or file, as pd_pipeline_create would fail, so that a
 * launcher can refuse before starting ranks. */
pd_status pd_pipeline_check_bind(const char *bind);

/* Where this rank sits. */
typedef struct pd_pipeline_info {
    int rank, ranks;         /* MPI world */
    int local_rank;          /* among the ranks of this node */
    int stage, replica;      /* -1 when the plan leaves this rank unused */
    int n_stages, replicas;  /* of the plan; of this rank's stage */
    int64_t minibatches;     /* training minibatches this run */
    int64_t per_epoch;       /* minibatches per epoch (0: the run counts steps) */
    int batch;
    int64_t test_samples;    /* evaluated after each epoch; 0: no evaluation */
    int in_flight;           /* this stage's warm-up forwards */
    int weight_versions;     /* the depth of this stage's weight ring */
    int accumulate;          /* 2BW: minibatches per update; 0 otherwise */
    int64_t parameters;      /* trainable elements of this stage */
    size_t allocated_bytes;  /* the graph memory of this rank's part of the model */
    size_t model_bytes;      /* what the whole model's graph would take */
    char channel_memory[80]; /* where its channels' memory lives: "host memory", "memory of cuda:0" */
} pd_pipeline_info;

/* What a finished run measured (losses and accuracies on rank 0 only). */
typedef struct pd_pipeline_result {
    int64_t minibatches;    /* training minibatches of this run */
    double epochs;          /* epochs done in all (fractional; 0 without epochs) */
    float final_loss;       /* of the last minibatch (rank 0; NaN elsewhere) */
    double train_accuracy;  /* of the last minibatch (rank 0) */
    double test_accuracy;   /* of the last evaluation (rank 0; NaN without) */
    int64_t test_correct, test_samples; /* S2VT: tokens (a caption's words and its end) */
    double seconds;         /* training wall time, the slowest rank's (rank 0) */
    double eval_seconds;    /* evaluation wall time, the slowest rank's (rank 0) */
    double samples_per_s;   /* minibatches x batch / seconds */
} pd_pipeline_result;

/* Checks the options alone (no file is read), as pd_pipeline_create does
 * first: PD_EINVAL or PD_ENOTSUP naming the option, so that a launcher can
 * refuse before starting ranks. */
pd_status pd_pipeline_check_options(const pd_pipeline_options *opts);

/* Bootstraps this rank: MPI, the plan and profile (or --plan auto's), the
 * model with this stage's nodes and optimizer, the run's segments and
 * their schedules (checked for deadlock), the checkpoint resumed from, the
 * weight ring, the channels to the neighbouring stages' replicas
 * (addresses exchanged with MPI_Allgatherv, the job token from
 * $PD_JOB_TOKEN or rank 0), the replicas' communicator, and the watchdog
 * thread that ends the process (exit code 1, naming the rank) when another
 * rank of the node dies. Collective: every rank must call it. Errors name
 * the option, file or rank. Free with pd_pipeline_destroy. */
pd_status pd_pipeline_create(const pd_pipeline_options *opts, pd_pipeline **out);

/* Fills *out. */
void pd_pipeline_get_info(const pd_pipeline *p, pd_pipeline_info *out);

/* Fills *out with where this rank was bound (its `line` says it). */
void pd_pipeline_get_binding(const pd_pipeline *p, pd_pipeline_binding *out);

/* Runs the training, segment by segment with the evaluations: this
 * rank's action list of each, then every minibatch's loss and accuracy and
 * the test accuracy are gathered on rank 0, which writes the metrics, and
 * the checkpoints due are written and committed. A peer that dies or stops
 * answering for timeout_ms is PD_ECOMM / PD_ETIMEOUT naming its rank (the
 * flight recorder is printed). May be called once. */
pd_status pd_pipeline_run(pd_pipeline *p);

/* Fills *out after pd_pipeline_run. */
void pd_pipeline_get_result(const pd_pipeline *p, pd_pipeline_result *out);

/* Stops every rank of the job (MPI_Abort) with exit code `code`, after
 * this rank has printed its message. Does not return when MPI runs. */
void pd_pipeline_abort(int code);

/* Closes the channels, frees everything and finalises MPI if
 * pd_pipeline_create initialised it. NULL is ignored. */
void pd_pipeline_destroy(pd_pipeline *p);

#ifdef __cplusplus
}
#endif
#endif
