/* Training checkpoints: one safetensors file per checkpoint, loadable by
 * PyTorch, plus a small JSON index naming the latest one.
 *
 * The file holds every parameter and buffer of the graph under its PyTorch
 * state-dict name ("features.0.weight", "bn1.running_mean"), the optimizer's
 * state under "optimizer.<kind>.<parameter name>" ("optimizer.momentum.fc1.weight",
 * "optimizer.adam_m.conv1.weight", "optimizer.adam_v.conv1.weight"), and in
 * its __metadata__:
 *   "format"          "pipedream-checkpoint"
 *   "format_version"  "1"
 *   "model"           the model's name
 *   "state"           a JSON object (pd_checkpoint_state: model options, data
 *                     set, seed, steps, loader position, learning-rate
 *                     schedule, optimizer kind, hyper-parameters and steps)
 *   "checksum"        "crc32:xxxxxxxx" over the tensors' names and bytes (in
 *                     name order) and the other metadata, so that a flipped
 *                     bit anywhere is detected before anything is loaded.
 *
 * The index, <dir>/checkpoint.json:
 *   {"format": "pipedream-checkpoint-index", "format_version": 1,
 *    "latest": "<file name in dir>", "step": N, "size": <bytes>, "checksum": "crc32:..."} */
#ifndef PIPEDREAM_CHECKPOINT_H
#define PIPEDREAM_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <pipedream/graph.h>
#include <pipedream/models.h>
#include <pipedream/optim.h>
#include <pipedream/status.h>
#include <pipedream/trainer.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PD_CHECKPOINT_FORMAT_VERSION 1
#define PD_CHECKPOINT_INDEX "checkpoint.json"

/* Everything besides tensors that a run needs to continue exactly. */
typedef struct pd_checkpoint_state {
    char model[64];
    pd_model_options model_options;
    char dataset[32];  /* the training loader's kind */
    uint64_t seed;     /* at most INT64_MAX */
    int64_t step;      /* optimizer steps done */
    int64_t total_steps; /* of the run that wrote it */
    int64_t loader_epoch, loader_batch; /* position of the next training minibatch */
    pd_lr_schedule lr_schedule;
    pd_optimizer_kind optimizer;
    pd_sgd_desc sgd;   /* when SGD; lr and first_step are not compared */
    pd_adam_desc adam; /* when Adam; lr and step are not compared */
    int64_t optimizer_steps;
} pd_checkpoint_state;

/* Writes the graph's parameters and buffers, the optimizer's state tensors
 * (opt may be NULL: none) and `state` to `path` atomically. */
pd_status pd_checkpoint_save(const char *path, pd_graph *g, pd_optimizer *opt, const pd_checkpoint_state *state);

/* Saves to <dir>/step-<step>.safetensors (step zero-padded to 8 digits),
 * creating dir if missing, then atomically replaces <dir>/checkpoint.json
 * to name it. If `written` is not NULL the file's path is stored there
 * (truncated to `size`). Older checkpoint files are kept. */
pd_status pd_checkpoint_save_in_dir(const char *dir, pd_graph *g, pd_optimizer *opt,
                                    const pd_checkpoint_state *state, char *written, size_t size);

/* Resolves what a user named: a directory is read through its
 * checkpoint.json (validated; its size and checksum must match the file it
 * names), anything else is taken as a checkpoint file. Writes the file's
 * path to `path`. PD_ENOTFOUND / PD_EFORMAT / PD_EIO naming the file. */
pd_status pd_checkpoint_resolve(const char *dir_or_file, char *path, size_t size);

/* Opens and validates the checkpoint at `path` (structure, format version,
 * checksum, and every field of the state typed and in range) and returns its
 * state without touching any graph. */
pd_status pd_checkpoint_read_state(const char *path, pd_checkpoint_state *out);

/* PD_EINVAL naming the first difference ("checkpoint x: model is 'lenet',
 * this run's is 'mlp'") unless `found` and `expected` describe the same
 * model, options, data set, seed, learning-rate schedule (total steps may
 * differ) and optimizer hyper-parameters. */
pd_status pd_checkpoint_check_compatible(const char *path, const pd_checkpoint_state *found,
                                         const pd_checkpoint_state *expected);

/* Loads the checkpoint at `path` into `g` (allocated) and `opt` (may be
 * NULL): validates it as pd_checkpoint_read_state does, checks it against
 * `expected` (NULL: no check) with pd_checkpoint_check_compatible, checks
 * that the file holds exactly the graph's parameters and buffers and the
 * optimizer's state tensors, each with the right dtype and shape, and only
 * then copies them and sets the optimizer's step count. Nothing is changed
 * when any check fails. *out (nullable) receives the state. */
pd_status pd_checkpoint_load(const char *path, const pd_checkpoint_state *expected, pd_graph *g,
                             pd_optimizer *opt, pd_checkpoint_state *out);

#ifdef __cplusplus
}
#endif
#endif
