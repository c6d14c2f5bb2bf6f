/* The single-process trainer: loaders -> host staging buffers (allocated
 * once) -> the graph's input tensors; forward, loss, backward, optimizer
 * step with the scheduled learning rate; periodic evaluation in inference
 * mode, metrics records, checkpoints. Every step is a pure function of the
 * seed and the global step, which is what makes --resume bit-identical. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pipedream/checkpoint.h>
#include <pipedream/log.h>
#include <pipedream/sequence.h>
#include <pipedream/trainer.h>

#include "runtime/pd_runtime_int.h"

#define PATH_BYTES 4096

/* S2VT's synthetic task ("s2vt-synthetic", trainer.h): defaults and the
 * fixed parts. */
#define SYN_FEATURES 12
#define SYN_FRAMES 5
#define SYN_WORDS 5
#define SYN_VOCAB 16
#define SYN_TEMPLATES 8
#define SYN_NOISE 0.5f
#define SYN_TRAIN_BATCHES 50 /* videos = this * batch unless `samples` is set */
#define SYN_EVAL_BATCHES 10

/* One split of S2VT caption data and its minibatch iterator. */
typedef struct seq_split {
    pd_s2vt_dataset *owned; /* loaded or generated; NULL when the arrays are the other split's */
    pd_s2vt_dataset view;   /* the captions iterated: all or part of a data set */
    int64_t *offset;        /* the view's offsets when it does not start at caption 0 */
    pd_s2vt_batches *it;
} seq_split;

struct pd_trainer {
    pd_trainer_options opts;
    pd_device *dev;
    pd_loader *train, *eval; /* image data */
    bool seq;                /* S2VT caption data instead: */
    seq_split seq_train, seq_eval;
    pd_loader_info train_info, eval_info;
    pd_model_options model;
    pd_graph *g;
    pd_model_io io;
    pd_optimizer *opt;
    pd_lr_schedule schedule;
    int64_t total_steps, start_step, done_steps;
    bool ran;

    /* Host staging buffers for one minibatch, allocated once. */
    float *images;   /* [B,C,H,W]; S2VT: frame features [B,T_f,F] */
    int32_t *labels; /* [B]; S2VT: targets [B*T_w] */
    float *logits;   /* [B,classes]; S2VT: [B*T_w,V] */
    int32_t *words;  /* S2VT: decoder inputs [B,T_w]; else NULL */

    FILE *metrics;
    pd_trainer_result result;
    char checkpoint[PATH_BYTES];
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- creation ------------------------------------------------------------- */

static bool is_sequence_kind(const char *kind)
{
    return kind && (strcmp(kind, "s2vt") == 0 || strcmp(kind, "s2vt-synthetic") == 0);
}

pd_status pd_trainer_check_data(const char *model, const char *dataset)
{
    const bool s2vt = model && strcmp(model, "s2vt") == 0;

    if (s2vt && !is_sequence_kind(dataset))
        return PD_ERROR(PD_EINVAL, "trainer: model s2vt reads video captioning data (data set s2vt or "
                                   "s2vt-synthetic), not the image data set '%s'", dataset ? dataset : "(null)");
    if (!s2vt && is_sequence_kind(dataset))
        return PD_ERROR(PD_EINVAL, "trainer: data set '%s' is video captioning data for model s2vt; model '%s' "
                                   "reads image data", dataset, model ? model : "(null)");
    return PD_OK;
}

static pd_status check_options(const pd_trainer_options *o)
{
    if (!o->model || !pd_model_description(o->model))
        return PD_ERROR(PD_EINVAL, "trainer: unknown model '%s'", o->model ? o->model : "(null)");
    if (!o->train_data.kind)
        return PD_ERROR(PD_EINVAL, "trainer: no training data set (train_data.kind is NULL)");
    PD_CHECK(pd_trainer_check_data(o->model, o->train_data.kind));
    if (o->eval_data.kind)
        PD_CHECK(pd_trainer_check_data(o->model, o->eval_data.kind));
    if ((o->epochs > 0) == (o->steps > 0) || o->epochs < 0 || o->steps < 0)
        return PD_ERROR(PD_EINVAL, "trainer: give a positive number of epochs or of steps, not both (got %lld and %lld)",
                        (long long)o->epochs, (long long)o->steps);
    if ((int)o->optimizer != PD_OPTIMIZER_SGD && (int)o->optimizer != PD_OPTIMIZER_ADAM)
        return PD_ERROR(PD_EINVAL, "trainer: unknown optimizer %d", (int)o->optimizer);
    if (!isfinite(o->lr) || !(o->lr > 0))
        return PD_ERROR(PD_EINVAL, "trainer: lr %g must be finite and > 0", o->lr);
    if (!(o->momentum >= 0 && o->momentum < 1))
        return PD_ERROR(PD_EINVAL, "trainer: momentum %g must lie in [0, 1)", o->momentum);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return PD_ERROR(PD_EINVAL, "trainer: weight decay %g must be finite and >= 0", o->weight_decay);
    if (o->nesterov && (o->optimizer != PD_OPTIMIZER_SGD || o->momentum <= 0))
        return PD_ERROR(PD_EINVAL, "trainer: nesterov needs SGD with momentum > 0");
    if (o->seed > (uint64_t)INT64_MAX)
        return PD_ERROR(PD_EINVAL, "trainer: seed must be at most %lld", (long long)INT64_MAX);
    if (o->eval_every < 0 || o->checkpoint_every < 0 || o->warmup_steps < 0 || o->lr_step_epochs < 0)
        return PD_ERROR(PD_EINVAL, "trainer: eval_every, checkpoint_every, warmup_steps and lr_step_epochs must "
                                   "be >= 0");
    if ((int)o->metrics_format != PD_METRICS_CSV && (int)o->metrics_format != PD_METRICS_JSONL)
        return PD_ERROR(PD_EINVAL, "trainer: unknown metrics format %d", (int)o->metrics_format);
    return PD_OK;
}

/* Fills the model options the caller left 0 from the training loader and
 * checks the others against it. */
static pd_status resolve_model_options(pd_trainer *t)
{
    const pd_loader_info *in = &t->train_info;
    pd_model_options m = t->opts.model_options;
    struct {
        const char *name;
        int *field, loader;
    } fields[] = {
        {"batch", &m.batch, in->batch},          {"channels", &m.channels, in->channels},
        {"height", &m.height, in->height},       {"width", &m.width, in->width},
        {"classes", &m.classes, in->classes},
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (*fields[i].field == 0)
            *fields[i].field = fields[i].loader;
        else if (*fields[i].field != fields[i].loader)
            return PD_ERROR(PD_EINVAL, "trainer: model %s %d differs from the training data's %d", fields[i].name,
                            *fields[i].field, fields[i].loader);
    }
    if (m.width_multiplier == 0.0f)
        m.width_multiplier = 1.0f;
    t->model = m;
    return pd_model_check_options(&m);
}

/* ---- S2VT caption data ---- */

/* Makes sp's view captions [first, first + count) of `ds`. */
static pd_status seq_view(seq_split *sp, const pd_s2vt_dataset *ds, int64_t first, int64_t count)
{
    sp->view = *ds;
    sp->view.captions = count;
    if (first == 0)
        return PD_OK;
    if (!(sp->offset = malloc((size_t)(count + 1) * sizeof(*sp->offset))))
        return PD_ERROR(PD_ENOMEM, "trainer: out of host memory for the offsets of %lld captions", (long long)count);
    for (int64_t c = 0; c <= count; c++)
        sp->offset[c] = ds->offset[first + c] - ds->offset[first];
    sp->view.video = ds->video + first;
    sp->view.words = ds->words + ds->offset[first];
    sp->view.offset = sp->offset;
    return PD_OK;
}

static int64_t limited(int64_t count, int64_t limit)
{
    return limit > 0 && limit < count ? limit : count;
}

/* "s2vt": <path>/<split>.features and <path>/<split>.captions. */
static pd_status seq_load(const pd_loader_options *o, seq_split *sp)
{
    char features[PATH_BYTES], captions[PATH_BYTES];
    const char *split = o->split ? o->split : "train";

    if (!o->path)
        return PD_ERROR(PD_EINVAL, "trainer: data set s2vt needs a directory (path)");
    if (strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
        return PD_ERROR(PD_EINVAL, "trainer: data set s2vt: split '%s' is neither train nor test", split);
    if ((size_t)snprintf(features, sizeof(features), "%s/%s.features", o->path, split) >= sizeof(features) ||
        (size_t)snprintf(captions, sizeof(captions), "%s/%s.captions", o->path, split) >= sizeof(captions))
        return PD_ERROR(PD_EINVAL, "trainer: data directory '%s' is too long a path", o->path);
    PD_CHECK(pd_s2vt_load(features, captions, &sp->owned));
    return seq_view(sp, sp->owned, 0, limited(sp->owned->captions, o->limit));
}

/* "s2vt-synthetic": one generated set, its first videos for training and
 * the rest (if `eval`) for evaluation. */
static pd_status seq_generate(pd_trainer *t, const pd_loader_options *train, const pd_loader_options *eval,
                              int words)
{
    const int64_t n_train = train->samples ? train->samples : SYN_TRAIN_BATCHES * (int64_t)train->batch;
    const int64_t n_eval = !eval ? 0 : eval->samples ? eval->samples : SYN_EVAL_BATCHES * (int64_t)train->batch;
    const pd_s2vt_synthetic_options so = {
        .videos = n_train + n_eval,
        .frames = train->height ? train->height : SYN_FRAMES,
        .features = train->channels ? train->channels : SYN_FEATURES,
        .vocab = train->classes ? train->classes : SYN_VOCAB,
        .max_words = words - 1,
        .templates = SYN_TEMPLATES,
        .noise = SYN_NOISE,
        .seed = t->opts.seed,
    };

    if (words < 2)
        return PD_ERROR(PD_EINVAL, "trainer: s2vt-synthetic needs at least 2 decoder steps (width), got %d", words);
    if (n_train < 0 || n_eval < 0)
        return PD_ERROR(PD_EINVAL, "trainer: s2vt-synthetic: negative sample count");
    PD_CHECK(pd_s2vt_synthetic(&so, &t->seq_train.owned));
    PD_CHECK(seq_view(&t->seq_train, t->seq_train.owned, 0, limited(n_train, train->limit)));
    if (!eval)
        return PD_OK;
    return seq_view(&t->seq_eval, t->seq_train.owned, n_train, limited(n_eval, eval->limit));
}

/* Starts sp's iterator with T_w = `words` and describes it as a loader
 * would: channels F, height T_f, width T_w, classes V. */
static pd_status seq_start(seq_split *sp, const pd_loader_options *o, int words, pd_loader_info *info)
{
    const pd_s2vt_dataset *ds = &sp->view;
    const pd_s2vt_batches_options bo = {
        .batch = o->batch,
        .words = words,
        .shuffle = o->train,
        .seed = o->seed,
        .drop_last = o->train,
        .shard = o->shard,
        .num_shards = o->num_shards,
    };

    if ((o->channels && o->channels != ds->features) || (o->height && o->height != ds->frames))
        return PD_ERROR(PD_EINVAL, "trainer: s2vt %s data has %d frames of %d features, not the %d of %d asked for "
                                   "(height, channels)",
                        o->train ? "training" : "evaluation", ds->frames, ds->features, o->height, o->channels);
    PD_CHECK(pd_s2vt_batches_create(ds, &bo, &sp->it));
    const int64_t per_epoch = pd_s2vt_batches_per_epoch(sp->it);
    *info = (pd_loader_info){
        .channels = ds->features,
        .height = ds->frames,
        .width = words,
        .classes = ds->vocab,
        .batch = o->batch,
        .samples = o->train ? per_epoch * o->batch : ds->captions,
        .batches_per_epoch = per_epoch,
        .split_samples = ds->captions,
    };
    return PD_OK;
}

/* The longest caption of `ds` in words. */
static int longest_caption(const pd_s2vt_dataset *ds)
{
    int64_t longest = 0;

    for (int64_t c = 0; c < ds->captions; c++)
        if (ds->offset[c + 1] - ds->offset[c] > longest)
            longest = ds->offset[c + 1] - ds->offset[c];
    return longest < (1 << 20) ? (int)longest : 1 << 20;
}

static pd_status open_sequences(pd_trainer *t, const pd_loader_options *train, const pd_loader_options *eval)
{
    int words = train->width;

    if (eval && strcmp(eval->kind, train->kind) != 0)
        return PD_ERROR(PD_EINVAL, "trainer: s2vt trains on '%s' but would evaluate on '%s'; use one kind",
                        train->kind, eval->kind);
    if (strcmp(train->kind, "s2vt-synthetic") == 0) {
        words = words ? words : SYN_WORDS;
        PD_CHECK(seq_generate(t, train, eval, words));
    } else {
        PD_CHECK(seq_load(train, &t->seq_train));
        if (eval)
            PD_CHECK(seq_load(eval, &t->seq_eval));
        words = words ? words : longest_caption(&t->seq_train.view) + 1;
    }
    PD_CHECK(seq_start(&t->seq_train, train, words, &t->train_info));
    PD_CHECK(resolve_model_options(t));
    return eval ? seq_start(&t->seq_eval, eval, words, &t->eval_info) : PD_OK;
}

static void seq_split_free(seq_split *sp)
{
    pd_s2vt_batches_destroy(sp->it);
    free(sp->offset);
    pd_s2vt_destroy(sp->owned);
}

/* ---- the data, either kind ---- */

static pd_status open_loaders(pd_trainer *t)
{
    pd_loader_options train = t->opts.train_data, eval = t->opts.eval_data;

    train.train = true;
    train.seed = t->opts.seed;
    if (train.batch == 0)
        train.batch = t->opts.model_options.batch;
    if (train.batch <= 0)
        return PD_ERROR(PD_EINVAL, "trainer: no batch size (set train_data.batch)");
    eval.train = false;
    eval.seed = t->opts.seed;
    if (t->seq) {
        eval.batch = train.batch; /* the model's: resolve_model_options checks that they agree */
        PD_CHECK(open_sequences(t, &train, eval.kind ? &eval : NULL));
    } else {
        PD_CHECK(pd_loader_open(&train, &t->train));
        pd_loader_get_info(t->train, &t->train_info);
        PD_CHECK(resolve_model_options(t));
        if (!eval.kind)
            return PD_OK;
        eval.batch = t->model.batch;
        /* The same geometry as training unless the caller chose one. */
        if (!eval.channels && !eval.height && !eval.width) {
            eval.channels = t->train_info.channels;
            eval.height = t->train_info.height;
            eval.width = t->train_info.width;
        }
        PD_CHECK(pd_loader_open(&eval, &t->eval));
        pd_loader_get_info(t->eval, &t->eval_info);
    }
    if (!eval.kind)
        return PD_OK;
    const pd_loader_info *e = &t->eval_info;
    if (e->channels != t->model.channels || e->height != t->model.height || e->width != t->model.width ||
        e->classes != t->model.classes)
        return PD_ERROR(PD_EINVAL, "trainer: evaluation data is %dx%dx%d with %d classes, the model's input is "
                                   "%dx%dx%d with %d classes",
                        e->channels, e->height, e->width, e->classes, t->model.channels, t->model.height,
                        t->model.width, t->model.classes);
    return PD_OK;
}

/* A split's position: epoch and minibatch of the next step. */
static int64_t data_epoch(const pd_trainer *t, bool eval)
{
    if (t->seq)
        return pd_s2vt_batches_epoch((eval ? &t->seq_eval : &t->seq_train)->it);
    return pd_loader_epoch(eval ? t->eval : t->train);
}

static int64_t data_position(const pd_trainer *t, bool eval)
{
    if (t->seq)
        return pd_s2vt_batches_position((eval ? &t->seq_eval : &t->seq_train)->it);
    return pd_loader_position(eval ? t->eval : t->train);
}

static pd_status data_seek(pd_trainer *t, bool eval, int64_t epoch, int64_t batch)
{
    if (t->seq)
        return pd_s2vt_batches_seek((eval ? &t->seq_eval : &t->seq_train)->it, epoch, batch);
    return pd_loader_seek(eval ? t->eval : t->train, epoch, batch);
}

static bool has_eval(const pd_trainer *t)
{
    return t->seq ? t->seq_eval.it != NULL : t->eval != NULL;
}

pd_status pd_trainer_seek(pd_trainer *t, bool eval, int64_t epoch, int64_t batch)
{
    if (eval && !has_eval(t))
        return PD_ERROR(PD_ESTATE, "trainer: no evaluation data to position");
    if (data_epoch(t, eval) == epoch && data_position(t, eval) == batch)
        return PD_OK;
    return data_seek(t, eval, epoch, batch);
}

/* The next minibatch of a split into the staging buffers. */
static pd_status data_next(pd_trainer *t, bool eval, int *valid)
{
    if (t->seq)
        return pd_s2vt_batches_next((eval ? &t->seq_eval : &t->seq_train)->it, t->images, t->words, t->labels,
                                    valid);
    return pd_loader_next(eval ? t->eval : t->train, t->images, t->labels, valid);
}

static pd_status make_schedule(pd_trainer *t)
{
    const pd_trainer_options *o = &t->opts;

    t->schedule = (pd_lr_schedule){
        .kind = o->lr_schedule,
        .lr = o->lr,
        .warmup_steps = o->warmup_steps,
        .step_size = (o->lr_step_epochs ? o->lr_step_epochs : 30) * t->train_info.batches_per_epoch,
        .gamma = o->lr_gamma != 0 ? o->lr_gamma : 0.1,
        .power = o->lr_power != 0 ? o->lr_power : 1.0,
    };
    return pd_lr_schedule_check(&t->schedule);
}

pd_status pd_trainer_optimizer_create(const pd_trainer_options *o, pd_graph *g, pd_param *const *params, int n,
                                      pd_optimizer **out)
{
    if (o->optimizer == PD_OPTIMIZER_ADAM) {
        const pd_adam_desc adam = {
            .lr = (float)o->lr,
            .beta1 = o->beta1 != 0 ? (float)o->beta1 : 0.9f,
            .beta2 = o->beta2 != 0 ? (float)o->beta2 : 0.999f,
            .eps = o->eps != 0 ? (float)o->eps : 1e-8f,
            .weight_decay = (float)o->weight_decay,
            .decoupled = o->decoupled_weight_decay,
        };
        return params ? pd_optimizer_create_adam_for(g, params, n, &adam, out) : pd_optimizer_create_adam(g, &adam, out);
    }
    const pd_sgd_desc sgd = {
        .lr = (float)o->lr,
        .momentum = (float)o->momentum,
        .weight_decay = (float)o->weight_decay,
        .nesterov = o->nesterov,
    };
    return params ? pd_optimizer_create_sgd_for(g, params, n, &sgd, out) : pd_optimizer_create_sgd(g, &sgd, out);
}

/* The state a checkpoint of this run at its current step holds. */
static void current_state(const pd_trainer *t, pd_checkpoint_state *st)
{
    *st = (pd_checkpoint_state){
        .model_options = t->model,
        .seed = t->opts.seed,
        .step = t->done_steps,
        .total_steps = t->total_steps,
        .loader_epoch = data_epoch(t, false),
        .loader_batch = data_position(t, false),
        .lr_schedule = t->schedule,
        .optimizer = pd_optimizer_get_kind(t->opt),
        .optimizer_steps = pd_optimizer_steps(t->opt),
    };
    snprintf(st->model, sizeof(st->model), "%s", t->opts.model);
    snprintf(st->dataset, sizeof(st->dataset), "%s", t->opts.train_data.kind);
    pd_optimizer_get_sgd(t->opt, &st->sgd);
    pd_optimizer_get_adam(t->opt, &st->adam);
}

static pd_status resume(pd_trainer *t)
{
    char path[PATH_BYTES];
    pd_checkpoint_state expected, found;
    const int64_t per_epoch = t->train_info.batches_per_epoch;

    PD_CHECK(pd_checkpoint_resolve(t->opts.resume, path, sizeof(path)));
    /* The position first: a schedule's step size in steps also differs when
     * the data does, and the data is the cause to name. */
    PD_CHECK(pd_checkpoint_read_state(path, &found));
    if (found.loader_epoch * per_epoch + found.loader_batch != found.step || found.loader_batch > per_epoch)
        return PD_ERROR(PD_EINVAL, "checkpoint %s: step %lld at minibatch %lld of epoch %lld does not fit this run's "
                                   "%lld minibatches per epoch (different training data or limit?)",
                        path, (long long)found.step, (long long)found.loader_batch, (long long)found.loader_epoch,
                        (long long)per_epoch);
    if (found.step > t->total_steps)
        return PD_ERROR(PD_EINVAL, "checkpoint %s is at step %lld, past this run's %lld steps", path,
                        (long long)found.step, (long long)t->total_steps);
    if (found.optimizer_steps != found.step)
        return PD_ERROR(PD_EFORMAT, "checkpoint %s: optimizer steps %lld differ from the trainer's %lld", path,
                        (long long)found.optimizer_steps, (long long)found.step);
    current_state(t, &expected);
    PD_CHECK(pd_checkpoint_load(path, &expected, t->g, t->opt, &found));
    PD_CHECK(data_seek(t, false, found.loader_epoch, found.loader_batch));
    t->start_step = t->done_steps = found.step;
    PD_LOG_DEBUGF("resumed from %s at step %lld (epoch %lld, minibatch %lld)", path, (long long)found.step,
                  (long long)found.loader_epoch, (long long)found.loader_batch);
    return PD_OK;
}

static pd_status open_metrics(pd_trainer *t)
{
    const char *path = t->opts.metrics_path;

    if (!path)
        return PD_OK;
    if (!(t->metrics = fopen(path, "w")))
        return PD_ERROR(PD_EIO, "trainer: cannot write metrics file '%s': %s", path, strerror(errno));
    if (t->opts.metrics_format == PD_METRICS_CSV)
        fprintf(t->metrics, "iteration,epoch,seconds,loss,train_accuracy,samples_per_s,lr,test_accuracy\n");
    return PD_OK;
}

/* Creates the checkpoint directory if missing and checks that it can be
 * written, so that a bad path fails before training rather than after. */
static pd_status check_checkpoint_dir(const char *dir)
{
    struct stat st;

    if (!dir)
        return PD_OK;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return PD_ERROR(PD_EIO, "trainer: cannot create checkpoint directory '%s': %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return PD_ERROR(PD_EIO, "trainer: checkpoint directory '%s' is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return PD_ERROR(PD_EIO, "trainer: checkpoint directory '%s' is not writable: %s", dir, strerror(errno));
    return PD_OK;
}

/* The part of the built model `select` picks, allocated, and the trainer's
 * optimizer over that part's parameters. */
static pd_status allocate_part(pd_trainer *t, pd_trainer_select_fn select, void *user)
{
    const int n = pd_graph_size(t->g);
    bool *run = calloc((size_t)n + 1, sizeof(*run)), *hold = calloc((size_t)n + 1, sizeof(*hold));
    pd_param **all, **mine = NULL;
    int n_all = pd_graph_params(t->g, &all), n_mine = 0;
    pd_status s;

    if (!run || !hold) {
        s = PD_ERROR(PD_ENOMEM, "trainer: out of host memory");
        goto done;
    }
    PD_CHECK_GOTO(select(t->g, user, run, hold), s, done);
    PD_CHECK_GOTO(pd_graph_allocate_nodes(t->g, run, hold), s, done);
    if (!(mine = malloc(sizeof(*mine) * (size_t)(n_all + 1)))) {
        s = PD_ERROR(PD_ENOMEM, "trainer: out of host memory");
        goto done;
    }
    for (int i = 0; i < n_all; i++)
        if (all[i]->value.data)
            mine[n_mine++] = all[i];
    s = pd_trainer_optimizer_create(&t->opts, t->g, mine, n_mine, &t->opt);
done:
    free(mine);
    free(run);
    free(hold);
    return s;
}

pd_status pd_trainer_create(const pd_trainer_options *opts, pd_trainer **out)
{
    return pd_trainer_create_part(opts, NULL, NULL, out);
}

/* A trainer of checked options that holds nothing yet; `out` is the
 * caller's output, checked for NULL with the options. */
static pd_status trainer_new(const pd_trainer_options *opts, const void *out, pd_trainer **t)
{
    if (!opts || !out)
        return PD_ERROR(PD_EINVAL, "trainer: NULL options or output");
    PD_CHECK(check_options(opts));
    if (!(*t = calloc(1, sizeof(**t))))
        return PD_ERROR(PD_ENOMEM, "trainer: out of host memory");
    (*t)->opts = *opts;
    (*t)->seq = is_sequence_kind(opts->train_data.kind);
    return PD_OK;
}

pd_status pd_trainer_create_part(const pd_trainer_options *opts, pd_trainer_select_fn select, void *user,
                                 pd_trainer **out)
{
    pd_trainer *t;
    pd_status s;

    PD_CHECK(trainer_new(opts, out, &t));
    t->result.final_loss = NAN;
    t->result.eval_accuracy = NAN;

    /* Cheap checks that name a user's mistake first. */
    PD_CHECK_GOTO(open_metrics(t), s, fail);
    PD_CHECK_GOTO(check_checkpoint_dir(opts->checkpoint_dir), s, fail);
    PD_CHECK_GOTO(pd_device_open(opts->device ? opts->device : "cpu", &t->dev), s, fail);
    PD_CHECK_GOTO(t->dev->ops->set_precision(t->dev, opts->precision), s, fail);
    PD_CHECK_GOTO(open_loaders(t), s, fail);
    t->total_steps = opts->steps ? opts->steps : opts->epochs * t->train_info.batches_per_epoch;
    if (t->total_steps <= 0) {
        s = PD_ERROR(PD_EINVAL, "trainer: the training data yields no full minibatch of %d", t->model.batch);
        goto fail;
    }
    PD_CHECK_GOTO(make_schedule(t), s, fail);

    PD_CHECK_GOTO(pd_graph_create(t->dev, opts->seed, &t->g), s, fail);
    PD_CHECK_GOTO(pd_graph_set_precision(t->g, opts->precision), s, fail);
    PD_CHECK_GOTO(pd_model_build(opts->model, t->g, &t->model, &t->io), s, fail);
    if (select) {
        PD_CHECK_GOTO(allocate_part(t, select, user), s, fail);
    } else {
        PD_CHECK_GOTO(pd_graph_allocate(t->g), s, fail);
        PD_CHECK_GOTO(pd_trainer_optimizer_create(opts, t->g, NULL, 0, &t->opt), s, fail);
    }

    const size_t batch = (size_t)t->model.batch, steps = t->seq ? (size_t)t->model.width : 1;
    const size_t image = (size_t)t->model.channels * (size_t)t->model.height * (t->seq ? 1 : (size_t)t->model.width);
    /* Staging for copies to and from the device: pinned on a GPU. */
    pd_device *d = t->dev;
    PD_CHECK_GOTO(d->ops->host_alloc(d, batch * image * sizeof(*t->images), (void **)&t->images), s, fail);
    PD_CHECK_GOTO(d->ops->host_alloc(d, batch * steps * sizeof(*t->labels), (void **)&t->labels), s, fail);
    PD_CHECK_GOTO(d->ops->host_alloc(d, batch * steps * (size_t)t->model.classes * sizeof(*t->logits),
                                     (void **)&t->logits), s, fail);
    if (t->seq)
        PD_CHECK_GOTO(d->ops->host_alloc(d, batch * steps * sizeof(*t->words), (void **)&t->words), s, fail);
    if (opts->resume)
        PD_CHECK_GOTO(resume(t), s, fail);
    *out = t;
    return PD_OK;
fail:
    pd_trainer_destroy(t);
    return s;
}

pd_status pd_trainer_data_geometry(const pd_trainer_options *opts, pd_model_options *out)
{
    pd_trainer *t;
    pd_status s;

    PD_CHECK(trainer_new(opts, out, &t));
    t->opts.eval_data = (pd_loader_options){0}; /* the training data decides */
    if ((s = open_loaders(t)) == PD_OK)
        *out = t->model;
    pd_trainer_destroy(t);
    return s;
}

pd_loader_options pd_trainer_stand_in_data(const char *kind, const pd_model_options *geometry)
{
    /* S2VT's fields mean features, frames, decoder steps and vocabulary
     * there, as the sequence data reports them (seq_start). */
    return (pd_loader_options){
        .kind = is_sequence_kind(kind) ? "s2vt-synthetic" : "synthetic",
        .split = "train",
        .batch = geometry->batch,
        .channels = geometry->channels,
        .height = geometry->height,
        .width = geometry->width,
        .classes = geometry->classes,
        .samples = geometry->batch,
    };
}

void pd_trainer_get_info(const pd_trainer *t, pd_trainer_info *out)
{
    *out = (pd_trainer_info){
        .device = t->dev->name,
        .parameters = pd_graph_param_count(t->g),
        .model_options = t->model,
        .train = t->train_info,
        .eval = t->eval_info,
        .total_steps = t->total_steps,
        .start_step = t->start_step,
    };
}

void pd_trainer_get_result(const pd_trainer *t, pd_trainer_result *out)
{
    *out = t->result;
    out->checkpoint = t->checkpoint[0] ? t->checkpoint : NULL;
}

void pd_trainer_destroy(pd_trainer *t)
{
    if (!t)
        return;
    if (t->dev) { /* the staging buffers came from it */
        t->dev->ops->host_free(t->dev, t->words);
        t->dev->ops->host_free(t->dev, t->logits);
        t->dev->ops->host_free(t->dev, t->labels);
        t->dev->ops->host_free(t->dev, t->images);
    }
    pd_optimizer_destroy(t->opt);
    pd_graph_destroy(t->g);
    pd_loader_destroy(t->eval);
    pd_loader_destroy(t->train);
    seq_split_free(&t->seq_eval);
    seq_split_free(&t->seq_train);
    pd_device_close(t->dev);
    if (t->metrics)
        fclose(t->metrics);
    free(t);
}

/* ---- running -------------------------------------------------------------- */

/* Copies the staged minibatch into the model's input tensors. */
static pd_status feed(pd_trainer *t)
{
    pd_tensor *images = pd_graph_output(t->g, t->io.images), *labels = pd_graph_output(t->g, t->io.labels);

    PD_CHECK(pd_tensor_copy_from_host(images, t->images, pd_tensor_nbytes(images)));
    if (t->seq) {
        pd_tensor *words = pd_graph_output(t->g, t->io.words);
        PD_CHECK(pd_tensor_copy_from_host(words, t->words, pd_tensor_nbytes(words)));
    }
    return pd_tensor_copy_from_host(labels, t->labels, pd_tensor_nbytes(labels));
}

pd_status pd_trainer_load(pd_trainer *t, bool eval, int *valid)
{
    if (eval && !has_eval(t))
        return PD_ERROR(PD_ESTATE, "trainer: no evaluation data to load");
    PD_CHECK(data_next(t, eval, valid));
    return feed(t);
}

/* Counts the rows among the first `rows` of `logits` [rows,classes] whose
 * arg-max (first maximum) is the label; `host` receives the logits. */
static pd_status count_rows(const pd_tensor *logits, const int32_t *labels, int rows, int classes, float *host,
                            int64_t *correct)
{
    int64_t hits = 0;

    if (logits->dtype == PD_F32) {
        PD_CHECK(pd_tensor_copy_to_host(logits, host, pd_tensor_nbytes(logits)));
    } else { /* bf16 activations (--precision bf16) */
        void *stored = malloc(pd_tensor_nbytes(logits));
        pd_status s = stored ? pd_tensor_copy_to_host(logits, stored, pd_tensor_nbytes(logits))
                             : PD_ERROR(PD_ENOMEM, "trainer: out of host memory for the logits");
        if (s == PD_OK)
            s = pd_dtype_convert(PD_F32, host, logits->dtype, stored, (size_t)pd_tensor_numel(logits));
        free(stored);
        PD_CHECK(s);
    }
    for (int i = 0; i < rows; i++) {
        const float *row = host + (size_t)i * (size_t)classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (row[k] > row[best])
                best = k;
        hits += best == labels[i];
    }
    *correct = hits;
    return PD_OK;
}

/* The labels are read back from the graph, where a pipeline's last stage
 * received them. S2VT counts tokens: targets other than PD_S2VT_IGNORE,
 * which no arg-max equals, so the rows of padding count nowhere. */
pd_status pd_trainer_count_correct(pd_trainer *t, int valid, int64_t *correct, int64_t *counted)
{
    const pd_tensor *labels = pd_graph_output(t->g, t->io.labels);
    int rows = valid;

    PD_CHECK(pd_tensor_copy_to_host(labels, t->labels, pd_tensor_nbytes(labels)));
    *counted = valid;
    if (t->seq) {
        rows = valid * t->model.width;
        *counted = 0;
        for (int r = 0; r < rows; r++)
            *counted += t->labels[r] != PD_S2VT_IGNORE;
    }
    return count_rows(pd_graph_output(t->g, t->io.logits), t->labels, rows, t->model.classes, t->logits, correct);
}

void pd_trainer_get_parts(pd_trainer *t, pd_trainer_parts *out)
{
    *out = (pd_trainer_parts){
        .dev = t->dev,
        .train_info = t->train_info,
        .eval_info = t->eval_info,
        .model = t->model,
        .g = t->g,
        .io = t->io,
        .opt = t->opt,
        .schedule = &t->schedule,
    };
}

/* Accuracy over the whole evaluation split in inference mode. */
static pd_status evaluate(pd_trainer *t, pd_trainer_progress *p)
{
    double start = now_seconds();
    int64_t hits = 0, seen = 0;

    PD_CHECK(data_seek(t, true, 0, 0));
    for (int64_t b = 0; b < t->eval_info.batches_per_epoch; b++) {
        int valid;
        int64_t batch_hits, batch_counted;
        PD_CHECK(pd_trainer_load(t, true, &valid));
        PD_CHECK(pd_graph_forward(t->g, b, false));
        PD_CHECK(pd_trainer_count_correct(t, valid, &batch_hits, &batch_counted));
        hits += batch_hits;
        seen += batch_counted;
    }
    p->evaluated = true;
    p->eval_correct = hits;
    p->eval_samples = seen;
    p->eval_accuracy = seen ? (double)hits / (double)seen : NAN;
    p->eval_seconds = now_seconds() - start;
    return PD_OK;
}

/* One training step on the next minibatch: global step `step` (0-based). */
static pd_status train_step(pd_trainer *t, int64_t step, float *loss, int64_t *correct, int64_t *counted)
{
    int valid;

    PD_CHECK(pd_trainer_load(t, false, &valid));
    PD_CHECK(pd_graph_forward(t->g, step, true));
    PD_CHECK(pd_trainer_count_correct(t, valid, correct, counted));
    PD_CHECK(pd_tensor_copy_to_host(pd_graph_output(t->g, t->io.loss), loss, sizeof(*loss)));
    if (!isfinite(*loss))
        return PD_ERROR(PD_ESTATE, "training diverged at step %lld: the loss is %g (try a lower learning rate, --lr)",
                        (long long)step + 1, (double)*loss);
    PD_CHECK(pd_graph_backward(t->g, step, t->io.loss, NULL));
    return pd_optimizer_step(t->opt);
}

static void write_metrics(pd_trainer *t, const pd_trainer_progress *p)
{
    FILE *f = t->metrics;
    const double step_rate = (double)t->model.batch / p->step_seconds;

    if (t->opts.metrics_format == PD_METRICS_CSV) {
        fprintf(f, "%lld,%.6f,%.6f,%.9g,%.6f,%.1f,%.6g,", (long long)p->step, p->epoch, p->seconds, (double)p->loss,
                p->train_accuracy, step_rate, p->lr);
        if (p->evaluated)
            fprintf(f, "%.6f", p->eval_accuracy);
        fputc('\n', f);
        return;
    }
    fprintf(f,
            "{\"iteration\":%lld,\"epoch\":%.6f,\"seconds\":%.6f,\"loss\":%.9g,\"train_accuracy\":%.6f,"
            "\"samples_per_s\":%.1f,\"lr\":%.6g",
            (long long)p->step, p->epoch, p->seconds, (double)p->loss, p->train_accuracy, step_rate, p->lr);
    if (p->evaluated)
        fprintf(f, ",\"test_accuracy\":%.6f,\"test_samples\":%lld", p->eval_accuracy, (long long)p->eval_samples);
    fputs("}\n", f);
}

/* Flushes and closes the metrics file; PD_EIO if anything was lost. */
static pd_status close_metrics(pd_trainer *t)
{
    FILE *f = t->metrics;

    if (!f)
        return PD_OK;
    t->metrics = NULL;
    if (ferror(f) | fclose(f))
        return PD_ERROR(PD_EIO, "trainer: writing metrics file '%s' failed: %s", t->opts.metrics_path,
                        strerror(errno));
    return PD_OK;
}

static pd_status save_checkpoint(pd_trainer *t)
{
    pd_checkpoint_state st;

    current_state(t, &st);
    return pd_checkpoint_save_in_dir(t->opts.checkpoint_dir, t->g, t->opt, &st, t->checkpoint, sizeof(t->checkpoint));
}

pd_status pd_trainer_run(pd_trainer *t)
{
    if (!t || t->ran)
        return PD_ERROR(PD_ESTATE, "trainer: pd_trainer_run may be called once");
    t->ran = true;

    const pd_trainer_options *o = &t->opts;
    const double per_epoch = (double)t->train_info.batches_per_epoch;
    pd_trainer_result *r = &t->result;
    double train_seconds = 0;

    r->steps = t->done_steps;
    r->epochs = (double)t->done_steps / per_epoch;
    for (int64_t step = t->start_step; step < t->total_steps; step++) {
        pd_trainer_progress p = {.total_steps = t->total_steps, .first_step = t->start_step};
        int64_t correct, counted;
        float loss;

        p.lr = pd_lr_schedule_at(&t->schedule, step, t->total_steps);
        pd_optimizer_set_lr(t->opt, (float)p.lr);
        p.lr = (double)(float)p.lr; /* what the update used */
        double t0 = now_seconds();
        PD_CHECK(train_step(t, step, &loss, &correct, &counted));
        p.step_seconds = now_seconds() - t0;
        train_seconds += p.step_seconds;

        t->done_steps = p.step = step + 1;
        r->steps = p.step;
        r->run_steps = p.step - t->start_step;
        r->epochs = p.epoch = (double)p.step / per_epoch;
        r->final_loss = p.loss = loss;
        r->train_seconds = p.seconds = train_seconds;
        r->samples_per_s = p.samples_per_s = (double)(r->run_steps * t->model.batch) / train_seconds;
        p.train_accuracy = counted ? (double)correct / (double)counted : NAN;
        p.eta_seconds = train_seconds / (double)r->run_steps * (double)(t->total_steps - p.step);

        const bool last = p.step == t->total_steps;
        if (has_eval(t) && (last || (o->eval_every && p.step % o->eval_every == 0))) {
            PD_CHECK(evaluate(t, &p));
            r->eval_accuracy = p.eval_accuracy;
            r->eval_correct = p.eval_correct;
            r->eval_samples = p.eval_samples;
            r->eval_seconds = p.eval_seconds;
        }
        if (o->checkpoint_dir && (last || (o->checkpoint_every && p.step % o->checkpoint_every == 0))) {
            PD_CHECK(save_checkpoint(t));
            p.checkpoint = t->checkpoint;
        }
        if (t->metrics) {
            write_metrics(t, &p);
            if (p.evaluated || p.checkpoint)
                fflush(t->metrics);
        }
        if (o->progress)
            o->progress(&p, o->progress_user);
    }
    /* A run resumed at its last step still reports the final accuracy. */
    if (has_eval(t) && t->start_step == t->total_steps) {
        pd_trainer_progress p = {0};
        PD_CHECK(evaluate(t, &p));
        r->eval_accuracy = p.eval_accuracy;
        r->eval_correct = p.eval_correct;
        r->eval_samples = p.eval_samples;
        r->eval_seconds = p.eval_seconds;
    }
    return close_metrics(t);
}
