/* Creating a pipeline rank: options, plan and profile, this rank's place,
 * the model built through the single-process trainer (device, loader,
 * graph, optimizer and learning-rate schedule are the trainer's, so one
 * stage on one rank trains exactly as `pipedream train` does), the data's
 * sizes from stage 0, the run's segments and their schedules (generated
 * identically on every rank, checked for deadlock), the stage, its weight
 * versions, the channels and the replicas' communicator. run.c runs it. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>
#include <pipedream/optim.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "runtime/pd_runtime_int.h"

#define DEFAULT_TIMEOUT_MS 20000

pd_status pd_pipeline_check_options(const pd_pipeline_options *o)
{
    const pd_trainer_options *t = &o->train;

    if (o->plan_path && strcmp(o->plan_path, "auto") != 0 && !o->profile_path)
        return PD_ERROR(PD_EINVAL, "pipeline: a plan file needs the profile it was made from");
    if ((t->steps > 0) == (t->epochs > 0) || t->steps < 0 || t->epochs < 0)
        return PD_ERROR(PD_EINVAL, "pipeline: give a number of training minibatches (steps) or of epochs, not both");
    if (t->steps > (1 << 30) || t->epochs > (1 << 20))
        return PD_ERROR(PD_EINVAL, "pipeline: %lld steps or %lld epochs are too many for one run", (long long)t->steps,
                        (long long)t->epochs);
    if (t->eval_every < 0 || t->checkpoint_every < 0)
        return PD_ERROR(PD_EINVAL, "pipeline: eval_every %lld and checkpoint_every %lld must be >= 0",
                        (long long)t->eval_every, (long long)t->checkpoint_every);
    if (o->vertical_sync && o->schedule != PD_SCHED_1F1B && o->schedule != PD_SCHED_1F1B_VSYNC)
        return PD_ERROR(PD_EINVAL, "pipeline: vertical sync needs the 1f1b schedule");
    if (o->channel_memory && strcmp(o->channel_memory, "auto") != 0 && strcmp(o->channel_memory, "host") != 0 &&
        strcmp(o->channel_memory, "device") != 0)
        return PD_ERROR(PD_EINVAL, "pipeline: channel memory '%s': expected host, device or auto", o->channel_memory);
    return pd_versions_check_options(o);
}

/* The device whose memory the channels use (opts.channel_memory), or NULL
 * for host memory; an unused rank (no device, no channels) has none. */
static pd_device *channel_device(const pd_pipeline *p)
{
    const char *m = p->opts.channel_memory;
    pd_device *dev = p->parts.dev;

    if (!dev || (m && strcmp(m, "host") == 0))
        return NULL;
    if (m && strcmp(m, "device") == 0)
        return dev;
    return dev->kind != PD_DEVICE_CPU ? dev : NULL; /* auto */
}

static int64_t lcm64(int64_t a, int64_t b)
{
    int64_t x = a, y = b;

    while (y) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

/* This rank's stage and replica in the plan, which must fit the job. */
static pd_status place(pd_pipeline *p)
{
    const pd_plan *plan = p->plan;

    if (plan->workers_used > p->boot.ranks)
        return PD_ERROR(PD_EINVAL, "pipeline: the plan uses %d ranks, the job has %d (mpirun -np %d)",
                        plan->workers_used, p->boot.ranks, plan->workers_used);
    if (!(p->rank_stage = malloc(sizeof(*p->rank_stage) * (size_t)p->boot.ranks)))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int r = 0; r < p->boot.ranks; r++)
        p->rank_stage[r] = -1;
    p->unit = 1;
    for (int s = 0; s < plan->n_stages; s++) {
        p->unit = lcm64(p->unit, plan->stages[s].replicas);
        for (int r = 0; r < plan->stages[s].replicas; r++) {
            if (plan->stages[s].ranks[r] >= p->boot.ranks || plan->stages[s].ranks[r] < 0)
                return PD_ERROR(PD_EINVAL, "pipeline: stage %d runs on rank %d, the job has %d ranks", s,
                                plan->stages[s].ranks[r], p->boot.ranks);
            p->rank_stage[plan->stages[s].ranks[r]] = s;
            if (plan->stages[s].ranks[r] == p->boot.rank) {
                p->stage = s;
                p->replica = r;
            }
        }
    }
    if (p->opts.schedule == PD_SCHED_GPIPE) {
        if (!p->opts.microbatches)
            p->opts.microbatches = (int)(plan->n_stages * p->unit);
        p->unit = lcm64(p->unit, p->opts.microbatches);
    }
    if (p->opts.weight_versions == PD_WEIGHT_VERSIONS_2BW || p->opts.schedule == PD_SCHED_1F1B_2BW) {
        p->opts.weight_versions = PD_WEIGHT_VERSIONS_2BW;
        p->opts.schedule = PD_SCHED_1F1B_2BW; /* segments end on update boundaries */
        PD_CHECK(pd_sched_2bw_accumulate(plan, p->opts.accumulate, &p->opts.accumulate));
        p->unit = lcm64(p->unit, p->opts.accumulate);
    }
    return PD_OK;
}

/* The part of the model this rank's stage allocates. */
static pd_status select_stage(const pd_graph *g, void *user, bool *run, bool *hold)
{
    const pd_pipeline *p = user;

    return pd_stage_select(g, p->plan, p->profile, p->stage, run, hold);
}

/* The model through the trainer, which also opens the device and the
 * data: stage 0's replicas read their shards of the training and the test
 * split; the other stages read no data (the trainer gets one synthetic
 * minibatch of stage 0's geometry, never read): whatever a later stage's
 * layers read of the data (labels, S2VT's words and targets) travels from
 * stage 0 with the activations (stage.c), so that one reader decides the
 * order, shards and augmentation of every minibatch. The
 * graph holds the stage's part of the model only (pd_stage_select). The
 * trainer's own optimizer is stateless SGD, never stepped: the stage's
 * optimizer comes with the stage (make_stage). */
static pd_status make_model(pd_pipeline *p, const pd_model_options *geometry)
{
    pd_trainer_options t = p->opts.train;
    int r0 = p->plan->stages[0].replicas;

    if (p->stage == 0 && r0 > 1) {
        t.train_data.shard = t.eval_data.shard = p->replica;
        t.train_data.num_shards = t.eval_data.num_shards = r0;
    }
    if (p->stage != 0) {
        t.train_data = pd_trainer_stand_in_data(t.train_data.kind, geometry);
        t.eval_data = (pd_loader_options){0};
        t.model_options.batch = t.model_options.channels = t.model_options.height = t.model_options.width = 0;
        t.model_options.classes = 0;
    }
    t.optimizer = PD_OPTIMIZER_SGD;
    t.momentum = t.weight_decay = 0;
    t.nesterov = false;
    t.metrics_path = NULL;
    t.progress = NULL;
    t.eval_every = t.checkpoint_every = 0;
    t.resume = NULL; /* the stage resumes (make_stage); the trainer only checks checkpoint_dir */
    PD_CHECK(pd_trainer_create_part(&t, select_stage, p, &p->trainer));
    pd_trainer_get_parts(p->trainer, &p->parts);
    return pd_graph_plan_bytes(p->parts.g, NULL, NULL, &p->model_bytes);
}

/* Stage 0 builds its model first; its first rank then tells every rank the
 * model's input and the data's sizes; the other stages build theirs. */
static pd_status make_models(pd_pipeline *p)
{
    const int root = p->plan->stages[0].ranks[0];
    int64_t v[7] = {0};
    pd_status s = PD_OK;

    if (p->stage == 0)
        s = make_model(p, NULL);
    if (p->boot.rank == root && s == PD_OK) {
        const pd_model_options *m = &p->parts.model;
        v[0] = m->batch;
        v[1] = m->channels;
        v[2] = m->height;
        v[3] = m->width;
        v[4] = m->classes;
        v[5] = p->parts.train_info.split_samples;
        v[6] = p->parts.eval_info.split_samples;
    }
#ifdef HAVE_MPI
    /* Every rank takes part, also one that failed (it aborts the job). */
    MPI_Bcast(v, 7, MPI_INT64_T, root, MPI_COMM_WORLD);
#endif
    PD_CHECK(s);
    if (v[0] <= 0)
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d: stage 0 (rank %d) shared no model input", p->boot.rank, root);
    p->batch = (int)v[0];
    p->train_batches = v[5] / v[0];
    p->eval_samples = v[6];
    p->eval_batches = (v[6] + v[0] - 1) / v[0];
    if (p->stage > 0) {
        const pd_model_options geometry = {
            .batch = (int)v[0], .channels = (int)v[1], .height = (int)v[2], .width = (int)v[3], .classes = (int)v[4]};
        PD_CHECK(make_model(p, &geometry));
    }
    if (p->stage < 0)
        return PD_OK;
    /* The trainer counts a step decay's epochs in its loader's minibatches
     * (a shard's on stage 0, one elsewhere); the stages count the split's. */
    p->lr = *p->parts.schedule;
    if (p->parts.train_info.batches_per_epoch > 0)
        p->lr.step_size = p->lr.step_size / p->parts.train_info.batches_per_epoch * p->train_batches;
    return PD_OK;
}

static pd_status make_segments(pd_pipeline *p)
{
    const pd_trainer_options *t = &p->opts.train;

    if (t->epochs) {
        p->per_epoch = p->train_batches / p->unit * p->unit;
        if (p->per_epoch == 0)
            return PD_ERROR(PD_EINVAL, "pipeline: the training split has %lld minibatches of %d, fewer than the %lld "
                                       "every epoch must be a multiple of", (long long)p->train_batches, p->batch,
                            (long long)p->unit);
    }
    p->total = t->steps ? t->steps : t->epochs * p->per_epoch;
    if (t->resume)
        PD_CHECK(pd_pipeline_resume_open(p));
    pd_segment_options so = {
        .start = p->start,
        .total = p->total,
        .per_epoch = p->per_epoch,
        .unit = p->unit,
        .eval_every = t->eval_every,
        .checkpoint_every = t->checkpoint_every,
        .eval = p->eval_batches > 0,
        .checkpoint = t->checkpoint_dir != NULL,
    };
    if (p->start == p->total)
        return PD_ERROR(PD_EINVAL, "pipeline: the checkpoint is at minibatch %lld, the end of this run: nothing to "
                                   "train (give more --epochs or --steps)", (long long)p->start);
    PD_CHECK(pd_segments_plan(&so, &p->segments, &p->n_segments));
    p->losses = calloc((size_t)p->total, sizeof(*p->losses));
    p->correct = calloc((size_t)p->total, sizeof(*p->correct));
    p->counted = calloc((size_t)p->total, sizeof(*p->counted));
    p->mb_time = calloc((size_t)p->total, sizeof(*p->mb_time));
    if (!p->losses || !p->correct || !p->counted || !p->mb_time)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for %lld minibatches' losses", (long long)p->total);
    return PD_OK;
}

/* 1f1b on a replicated stage: the generator takes round i's step after
 * the forward that follows backward i, so that the all-reduce overlaps
 * that forward, which then runs on weights a round old. PipeDream's
 * data-parallel stages step first: this moves each step right after its
 * all-reduce and gives the forwards it passes (and their backwards, which
 * use the forward's version) the version it publishes. One stage
 * replicated is then data parallelism exactly. */
static void step_first(pd_sched *s)
{
    for (int r = 0; r < s->n_ranks; r++) {
        pd_sched_action *list = s->actions[r];
        const int n = s->n_actions[r];
        if (s->rank_stage[r] < 0 || s->stage_replicas[s->rank_stage[r]] < 2)
            continue;
        for (int i = 0; i < n; i++) {
            int j = i + 1;
            if (list[i].op != PD_SCHED_ALLREDUCE)
                continue;
            while (j < n && list[j].op != PD_SCHED_STEP)
                j++;
            if (j == n)
                break;
            const pd_sched_action step = list[j];
            memmove(&list[i + 2], &list[i + 1], sizeof(*list) * (size_t)(j - i - 1));
            list[i + 1] = step;
            for (int k = i + 2; k <= j; k++) {
                if (list[k].op != PD_SCHED_FORWARD)
                    continue;
                list[k].weight_version = step.weight_version;
                for (int m = k + 1; m < n; m++)
                    if (list[m].op == PD_SCHED_BACKWARD && list[m].minibatch == list[k].minibatch) {
                        list[m].weight_version = step.weight_version;
                        break;
                    }
            }
        }
    }
}

pd_status pd_pipeline_schedule(pd_pipeline *p, const pd_segment *seg)
{
    const int64_t n_eval = seg->eval ? p->eval_batches : 0;
    pd_sched *s;

    if (p->sched && p->sched_train == seg->count && p->sched_eval == n_eval)
        return PD_OK;
    pd_sched_options so = {
        .type = p->opts.vertical_sync ? PD_SCHED_1F1B_VSYNC : p->opts.schedule,
        .minibatches = (int)seg->count,
        .eval_minibatches = (int)n_eval,
        .microbatches = p->opts.schedule == PD_SCHED_1F1B_2BW ? p->opts.accumulate : p->opts.microbatches,
        .depth = p->plan->workers_used + 1,
    };
    PD_CHECK(pd_sched_generate(p->plan, NULL, &so, &s));
    if (so.type == PD_SCHED_1F1B && !p->opts.overlap_allreduce)
        step_first(s);
    pd_status st = pd_sched_check(s);
    if (st != PD_OK) {
        pd_sched_destroy(s);
        return st;
    }
    pd_sched_destroy(p->sched);
    p->sched = s;
    p->sched_train = seg->count;
    p->sched_eval = n_eval;
    p->boot.depth = s->depth;
    if (p->stage >= 0) {
        const int replicas = s->stage_replicas[p->stage];
        p->mb_per_step = s->type == PD_SCHED_GPIPE || s->type == PD_SCHED_STRAIGHT || s->type == PD_SCHED_1F1B_2BW
                             ? s->microbatches
                             : replicas;
    }
    return PD_OK;
}

static pd_status make_stage(pd_pipeline *p)
{
    const int in_flight = p->sched->in_flight[p->stage] > 0 ? p->sched->in_flight[p->stage] : 1;
    int64_t longest = 0;
    int depth;

    for (int i = 0; i < p->n_segments; i++)
        longest = p->segments[i].count > longest ? p->segments[i].count : longest;
    PD_CHECK(pd_stage_init(&p->st, p->parts.g, p->plan, p->profile, p->stage, in_flight));
    PD_CHECK(pd_trainer_optimizer_create(&p->opts.train, p->parts.g, p->st.params, p->st.n_params, &p->opt));
    if (p->opts.train.resume)
        PD_CHECK(pd_pipeline_resume_load(p));
    PD_CHECK(pd_versions_depth(&p->opts, in_flight, sizeof(float) * p->st.n_weights, &depth));
    PD_CHECK(pd_versions_init(&p->ver, &p->st, depth)); /* version 0: the weights the graph holds now */
    p->n_pins = in_flight + 1;
    p->n_versions = longest + 2;
    p->grad_acc = malloc(sizeof(float) * (2 * p->st.n_weights + 1));
    p->pins = calloc((size_t)p->n_pins, sizeof(*p->pins));
    p->pin_mb = malloc(sizeof(*p->pin_mb) * (size_t)p->n_pins);
    p->version_of = malloc(sizeof(*p->version_of) * (size_t)p->n_versions);
    if (!p->grad_acc || !p->pins || !p->pin_mb || !p->version_of)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int i = 0; i < p->n_pins; i++)
        p->pin_mb[i] = -1;
    p->holds_mb = -1;
    return PD_OK;
}

static pd_status make_channels(pd_pipeline *p)
{
    const int n = p->plan->n_stages;
    size_t *cut = calloc((size_t)n, sizeof(size_t)), *cut_grad = calloc((size_t)n, sizeof(size_t));
    pd_status s;

    if (!cut || !cut_grad) {
        free(cut);
        free(cut_grad);
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    }
    if (p->stage > 0) {
        cut[p->stage - 1] = p->st.act_in_bytes;
        cut_grad[p->stage - 1] = p->st.grad_out_bytes;
    }
    if (p->stage >= 0 && p->stage + 1 < n) {
        cut[p->stage] = p->st.act_out_bytes;
        cut_grad[p->stage] = p->st.grad_in_bytes;
    }
    s = pd_boot_channels(&p->boot, p->sched, cut, cut_grad, p->opts.backends, p->opts.timeout_ms,
                         channel_device(p));
    free(cut);
    free(cut_grad);
    PD_CHECK(s);
    PD_CHECK(pd_boot_replica_comm(&p->boot, p->sched));
#ifdef HAVE_MPI
    if (!(p->allreduce = malloc(sizeof(MPI_Request))))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
#endif
    return PD_OK;
}

/* Rank 0's metrics file, opened before training so a bad path fails first. */
static pd_status open_metrics(pd_pipeline *p)
{
    const char *path = p->opts.train.metrics_path;

    if (!path || p->boot.rank != 0)
        return PD_OK;
    if (!(p->metrics = fopen(path, "w")))
        return PD_ERROR(PD_EIO, "pipeline: cannot write metrics file '%s': %s", path, strerror(errno));
    if (p->opts.train.metrics_format == PD_METRICS_CSV)
        fprintf(p->metrics, "iteration,epoch,seconds,loss,train_accuracy,samples_per_s,lr,test_accuracy\n");
    return PD_OK;
}

/* A plan made from a profile of the other activation dtype priced the cut
 * tensors at the wrong size (bf16's are half of f32's); it still runs. */
static void warn_profile_dtype(const pd_pipeline *p)
{
    const pd_dtype profiled = pd_profile_get_info(p->profile)->dtype;
    const pd_dtype trained = p->opts.train.precision == PD_PRECISION_BF16 ? PD_BF16 : PD_F32;

    if (p->boot.rank == 0 && profiled != trained)
        PD_LOG_WARNF("pipeline: the profile %s holds %s activations but this run stores %s (--precision %s): the "
                     "plan priced the stage cuts at %s sizes; profile with --precision %s for a plan that fits",
                     p->opts.profile_path ? p->opts.profile_path : "", pd_dtype_name(profiled),
                     pd_dtype_name(trained), pd_precision_name(p->opts.train.precision), pd_dtype_name(profiled),
                     pd_precision_name(p->opts.train.precision));
}

pd_status pd_pipeline_create(const pd_pipeline_options *opts, pd_pipeline **out)
{
    pd_pipeline *p;
    pd_status s;

    if (!opts || !out)
        return PD_ERROR(PD_EINVAL, "pipeline: NULL options or output");
    PD_CHECK(pd_pipeline_check_options(opts));
    if (!(p = calloc(1, sizeof(*p))))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    p->opts = *opts;
    if (p->opts.timeout_ms <= 0)
        p->opts.timeout_ms = DEFAULT_TIMEOUT_MS;
    p->stage = p->replica = -1;
    p->result.final_loss = NAN;
    p->result.train_accuracy = NAN;
    p->result.test_accuracy = NAN;
    PD_CHECK_GOTO(pd_boot_init(&p->boot), s, fail);
    PD_CHECK_GOTO(pd_binding_setup(p), s, fail); /* before anything is allocated or connected */
    if (!opts->plan_path || strcmp(opts->plan_path, "auto") == 0) {
        PD_CHECK_GOTO(pd_autoplan(p), s, fail);
    } else {
        PD_CHECK_GOTO(pd_profile_read_json(opts->profile_path, &p->profile), s, fail);
        PD_CHECK_GOTO(pd_plan_read_json(opts->plan_path, p->profile, &p->plan), s, fail);
    }
    warn_profile_dtype(p);
    PD_CHECK_GOTO(place(p), s, fail);
    PD_CHECK_GOTO(open_metrics(p), s, fail);
    PD_CHECK_GOTO(make_models(p), s, fail);
    PD_CHECK_GOTO(make_segments(p), s, fail);
    PD_CHECK_GOTO(pd_pipeline_schedule(p, &p->segments[0]), s, fail);
    if (p->stage >= 0)
        PD_CHECK_GOTO(make_stage(p), s, fail);
    PD_CHECK_GOTO(make_channels(p), s, fail);
    PD_CHECK_GOTO(pd_progress_thread_start(p), s, fail);
    PD_CHECK_GOTO(pd_watchdog_start(p), s, fail);
    PD_LOG_DEBUGF("pipeline rank %d: stage %d replica %d, %d nodes, %zu weights, %d channels, %d segments",
                  p->boot.rank, p->stage, p->replica, p->st.n_nodes, p->st.n_weights, p->boot.n_channels,
                  p->n_segments);
    *out = p;
    return PD_OK;
fail:
    pd_pipeline_destroy(p);
    return s;
}

void pd_pipeline_get_info(const pd_pipeline *p, pd_pipeline_info *out)
{
    *out = (pd_pipeline_info){
        .rank = p->boot.rank,
        .ranks = p->boot.ranks,
        .local_rank = p->boot.local_rank,
        .stage = p->stage,
        .replica = p->replica,
        .n_stages = p->plan->n_stages,
        .replicas = p->stage >= 0 ? p->sched->stage_replicas[p->stage] : 0,
        .minibatches = p->total - p->start,
        .per_epoch = p->per_epoch,
        .batch = p->batch,
        .test_samples = p->eval_samples,
        .in_flight = p->stage >= 0 ? p->sched->in_flight[p->stage] : 0,
        .weight_versions = p->ver.depth,
        .accumulate = p->opts.schedule == PD_SCHED_1F1B_2BW ? p->opts.accumulate : 0,
        .parameters = (int64_t)p->st.n_weights,
        .allocated_bytes = p->parts.g ? pd_graph_allocated_bytes(p->parts.g) : 0, /* an unused rank has none */
        .model_bytes = p->model_bytes,
    };
    if (p->boot.channel_dev)
        snprintf(out->channel_memory, sizeof(out->channel_memory), "memory of %s", p->boot.channel_dev->name);
    else
        snprintf(out->channel_memory, sizeof(out->channel_memory), "host memory");
}

void pd_pipeline_get_result(const pd_pipeline *p, pd_pipeline_result *out) { *out = p->result; }

void pd_pipeline_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
#ifdef HAVE_MPI
    int initialised = 0, finalized = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalized);
    if (initialised && !finalized)
        MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)code;
#endif
}

void pd_pipeline_destroy(pd_pipeline *p)
{
    if (!p)
        return;
    pd_watchdog_stop(p);
    pd_progress_thread_stop(p); /* before the channels close */
    for (int i = 0; p->pins && i < p->n_pins; i++)
        if (p->pin_mb[i] >= 0)
            pd_weight_ring_unpin(p->ver.ring, &p->pins[i]);
    if (p->metrics)
        fclose(p->metrics);
    free(p->allreduce);
    free(p->pins);
    free(p->pin_mb);
    free(p->version_of);
    free(p->grad_acc);
    free(p->losses);
    free(p->correct);
    free(p->counted);
    free(p->mb_time);
    free(p->segments);
    free(p->rank_stage);
    for (int i = 0; i < p->n_resume_paths; i++)
        free(p->resume_paths[i]);
    free(p->resume_paths);
    pd_versions_destroy(&p->ver);
    pd_optimizer_destroy(p->opt);
    pd_stage_destroy(&p->st);
    pd_boot_close_channels(&p->boot); /* before their device closes with the trainer */
    pd_trainer_destroy(p->trainer);
    pd_sched_destroy(p->sched);
    pd_plan_destroy(p->plan);
    pd_profile_destroy(p->profile);
    pd_boot_destroy(&p->boot); /* last: it may finalise MPI */
    free(p);
}
