/* Single-process training: a model of the zoo, a training and an evaluation
 * loader, an optimizer with a learning-rate schedule, periodic evaluation,
 * metrics, and checkpoints that resume to bit-identical training.
 *
 * Determinism: for fixed options the run is a pure function of the seed.
 * The graph's seed (parameter initialisation, dropout), the loader's seed
 * (sample order, augmentation) and the global step (the minibatch id that
 * seeds dropout, the learning rate) determine every update, so a run
 * resumed from a checkpoint continues exactly as the uninterrupted one on
 * the same device. */
#ifndef PIPEDREAM_TRAINER_H
#define PIPEDREAM_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include <pipedream/kernels.h>
#include <pipedream/loader.h>
#include <pipedream/models.h>
#include <pipedream/optim.h>
#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- learning-rate schedules ---------------------------------------------- */

typedef enum pd_lr_kind {
    PD_LR_CONSTANT = 0, /* lr */
    PD_LR_STEP = 1,     /* lr * gamma^floor(t / step_size) */
    PD_LR_POLY = 2,     /* lr * (1 - t/T)^power, reaching 0 at the end */
    PD_LR_COSINE = 3,   /* lr * (1 + cos(pi t/T)) / 2, reaching 0 at the end */
} pd_lr_kind;

/* A schedule: the learning rate of every step as a pure function of (step,
 * total steps), so that a resumed run gets the same values. With warm-up,
 * steps 0 .. warmup_steps-1 use lr * (step+1) / warmup_steps, and the decay
 * above runs over the remaining steps: t = step - warmup_steps,
 * T = total - warmup_steps. */
typedef struct pd_lr_schedule {
    pd_lr_kind kind;
    double lr;            /* the base (peak) learning rate, >= 0 */
    int64_t warmup_steps; /* >= 0 */
    int64_t step_size;    /* PD_LR_STEP: steps between decays, > 0 */
    double gamma;         /* PD_LR_STEP: factor per decay, in (0, 1] */
    double power;         /* PD_LR_POLY: > 0 (1 is linear decay) */
} pd_lr_schedule;

/* "constant", "step", "poly", "cosine". */
const char *pd_lr_kind_name(pd_lr_kind kind);

/* Parses a name of pd_lr_kind_name(); PD_EINVAL naming it otherwise. */
pd_status pd_lr_kind_parse(const char *name, pd_lr_kind *out);

/* PD_EINVAL naming the field unless every field the kind uses is in range. */
pd_status pd_lr_schedule_check(const pd_lr_schedule *s);

/* The learning rate for step `step` (0-based) of a run of `total_steps`
 * steps. Steps at or past the end get the final value (0 for poly and
 * cosine). The schedule must have passed pd_lr_schedule_check. */
double pd_lr_schedule_at(const pd_lr_schedule *s, int64_t step, int64_t total_steps);

/* ---- the trainer ---------------------------------------------------------- */

/* The data set kinds of S2VT's caption data (sequence.h), which the trainer
 * reads instead of a pd_loader:
 *  "s2vt": pd_loader_options.path is a directory holding
 *      <split>.features and <split>.captions (split "train" or "test"),
 *      the two files sequence.h describes. channels and height, if set, must
 *      be the file's F and T (frames); width is T_w, the decoder steps
 *      (0: the longest training caption + 1, for its EOS); classes is the
 *      captions file's vocabulary; limit keeps the first N captions.
 *  "s2vt-synthetic": pd_s2vt_synthetic with 8 templates and noise 0.5, F =
 *      channels (0: 12), T = height (0: 5), T_w = width (0: 5; captions of
 *      at most T_w - 1 words), V = classes (0: 16); `samples` videos (0:
 *      50 * batch) for training and the evaluation's `samples` (0: 10 *
 *      batch) more for the test split: one generated set, so the test
 *      videos show the same templates with noise never trained on.
 * Only the model "s2vt" reads them, and it reads nothing else. Accuracy is
 * then per token: the arg-max of a decoding step's logits against its
 * target, over the targets that are not padding (PD_S2VT_IGNORE). */

/* PD_EINVAL naming both unless the model `model` reads the data set kind
 * `dataset` (S2VT's kinds go with "s2vt" only, image kinds with the rest). */
pd_status pd_trainer_check_data(const char *model, const char *dataset);

typedef enum pd_metrics_format {
    PD_METRICS_CSV = 0,   /* header, then one row per step */
    PD_METRICS_JSONL = 1, /* one JSON object per step */
} pd_metrics_format;

/* What the progress callback and the metrics see after every step. */
typedef struct pd_trainer_progress {
    int64_t step;        /* steps done, 1 .. total_steps */
    int64_t total_steps;
    int64_t first_step;  /* the step this run started from (> 0 after --resume) */
    double epoch;        /* fractional epochs done */
    float loss;          /* of this step's minibatch */
    double train_accuracy; /* of this step's minibatch (S2VT: of its tokens) */
    double lr;           /* used by this step */
    double step_seconds; /* wall time of this step */
    double seconds;      /* wall time of the training steps of this run so far */
    double samples_per_s;  /* over this run's steps so far */
    double eta_seconds;  /* for the remaining steps at that rate */
    bool evaluated;      /* the eval split was evaluated after this step */
    double eval_accuracy;  /* if evaluated */
    int64_t eval_correct, eval_samples; /* S2VT: tokens, not captions */
    double eval_seconds;
    const char *checkpoint; /* the checkpoint written after this step, else NULL */
} pd_trainer_progress;

/* Called after every step with what it measured; `p` and its strings are
 * valid during the call only. */

typedef void (*pd_trainer_progress_fn)(const pd_trainer_progress *p, void *user);

/* How to train. Zero-initialise, then set what you need. The strings (and
 * the loader options' strings) are borrowed: they must outlive the trainer. */
typedef struct pd_trainer_options {
    const char *model; /* a name of pd_model_name() */
    /* batch, channels, height, width and classes that are 0 are taken from
     * the training loader; others must agree with it. width_multiplier 0
     * means 1. */
    pd_model_options model_options;
    /* .train is forced true, .seed to seed; .kind may be S2VT's (above). */
    pd_loader_options train_data;
    /* eval_data.kind NULL: no evaluation. Its batch is forced to the
     * model's, .train to false. */
    pd_loader_options eval_data;
    const char *device; /* "cpu" (NULL), "cuda", "cuda:N" */
    /* Arithmetic, set on the device once opened and on the graph (0: f32);
     * tf32 needs a CUDA device; bf16 stores activations in bf16 around f32
     * master weights (pd_graph_set_precision); a pipeline stage's part
     * too, its cut tensors then bf16. */
    pd_precision precision;

    pd_optimizer_kind optimizer;
    double lr;           /* > 0 */
    double momentum;     /* SGD, [0, 1) */
    double weight_decay; /* >= 0; L2 for SGD and Adam, decoupled for AdamW */
    bool nesterov;       /* SGD */
    bool decoupled_weight_decay; /* Adam -> AdamW */
    double beta1, beta2, eps;    /* Adam; 0 = 0.9, 0.999, 1e-8 */

    pd_lr_kind lr_schedule;
    int64_t warmup_steps;
    int64_t lr_step_epochs; /* PD_LR_STEP: decay every N epochs (0 = 30) */
    double lr_gamma;        /* PD_LR_STEP: 0 = 0.1 */
    double lr_power;        /* PD_LR_POLY: 0 = 1 */

    uint64_t seed; /* at most INT64_MAX */
    int64_t epochs, steps; /* exactly one > 0 */
    int64_t eval_every;    /* evaluate every N steps too (0: only after the last) */

    const char *checkpoint_dir; /* NULL: no checkpoints; created if missing */
    int64_t checkpoint_every;   /* steps (0: only after the last) */
    const char *resume;         /* a checkpoint file, or a directory with checkpoint.json */

    const char *metrics_path; /* NULL: none */
    pd_metrics_format metrics_format;

    pd_trainer_progress_fn progress; /* called after every step; may be NULL */
    void *progress_user;
} pd_trainer_options;

/* Facts about a prepared run, for reporting before it starts. */
typedef struct pd_trainer_info {
    const char *device;      /* its name, e.g. "cpu" */
    int64_t parameters;      /* trainable elements */
    pd_model_options model_options; /* as resolved */
    pd_loader_info train, eval;     /* eval zero without evaluation */
    int64_t total_steps;
    int64_t start_step; /* > 0 when resumed */
} pd_trainer_info;

/* What a finished run measured. */
typedef struct pd_trainer_result {
    int64_t steps;        /* total steps done (checkpointed ones included) */
    int64_t run_steps;    /* steps done by this run */
    double epochs;        /* fractional epochs done in total */
    float final_loss;     /* of the last step (NaN if this run did none) */
    double eval_accuracy; /* of the final evaluation (NaN without) */
    int64_t eval_correct, eval_samples;
    double train_seconds; /* wall time in this run's training steps */
    double eval_seconds;  /* wall time of the final evaluation */
    double samples_per_s; /* training samples over train_seconds */
    const char *checkpoint; /* the last checkpoint written, or NULL; owned by the trainer */
} pd_trainer_result;

typedef struct pd_trainer pd_trainer;

/* Validates the options, opens the device and the loaders, builds and
 * allocates the model, creates the optimizer, allocates the host minibatch
 * buffers once, opens the metrics file, and with `resume` loads the
 * checkpoint (which must match the model, its options, the data set, the
 * seed and the optimizer's hyper-parameters; the message names the first
 * difference) and seeks the loader to where it stopped. Errors: PD_EINVAL
 * for options (naming the field), PD_ENOTFOUND / PD_EFORMAT / PD_EIO for
 * data and checkpoint files, PD_ESHAPE for a model the input does not fit,
 * PD_ENOMEM. Free with pd_trainer_destroy. */
pd_status pd_trainer_create(const pd_trainer_options *opts, pd_trainer **out);

/* Fills *out; valid until pd_trainer_destroy. */
void pd_trainer_get_info(const pd_trainer *t, pd_trainer_info *out);

/* Trains the remaining steps (lr from the schedule, dropout seeded by the
 * global step), evaluating every eval_every steps and after the last in
 * inference mode over the whole eval split, writing a metrics record per
 * step and checkpoints every checkpoint_every steps and after the last.
 * A non-finite loss stops the run with PD_ESTATE ("diverged ... try a lower
 * learning rate"). May be called once. */
pd_status pd_trainer_run(pd_trainer *t);

/* Fills *out after pd_trainer_run (also after a failed one: what was done). */
void pd_trainer_get_result(const pd_trainer *t, pd_trainer_result *out);

/* Closes the metrics file and frees everything. NULL is ignored. */
void pd_trainer_destroy(pd_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
