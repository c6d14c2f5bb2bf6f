/* Checkpoints of a pipeline: a set of files, one per stage, committed by
 * rank 0 once every stage has written its own.
 *
 * After a segment marked for it (the pipeline has drained, so every stage
 * holds the weights after the same minibatches), replica 0 of each stage
 * writes <dir>/step-NNNNNNNN/stage-<s>-of-<n>.safetensors: the parameters
 * and buffers of its layers under the single-process trainer's (PyTorch's)
 * names, its optimizer's state, and the state of the run (the trainer's
 * checkpoint format, atomically replaced). The writers report size and
 * checksum to rank 0, which then replaces <dir>/checkpoint.json, the
 * index naming the set, atomically:
 *   {"format": "pipedream-checkpoint-set", "format_version": 1, "step": N,
 *    "set": "step-NNNNNNNN", "files": [{"name", "size", "checksum"}, ...]}
 * A crash at any point leaves the index naming the last complete set.
 *
 * --resume reads the index, checks every file's size and checksum against
 * it, and each rank loads its stage's tensors from whichever files hold
 * them: weights are stored per layer, so a set written under one plan
 * resumes under another. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/json.h>
#include <pipedream/safetensors.h>

#include "runtime/pd_runtime_int.h"

#define SET_FORMAT "pipedream-checkpoint-set"
#define SET_VERSION 1

/* What a writer tells rank 0. */
typedef struct written_report {
    int64_t status; /* PD_OK, an error, or 1: not a writer */
    int64_t bytes;
    char checksum[48];
} written_report;

static pd_status join(char *buf, size_t size, const char *a, const char *b)
{
    int len = snprintf(buf, size, "%s/%s", a, b);
    if (len < 0 || (size_t)len >= size)
        return PD_ERROR(PD_EINVAL, "checkpoint: path %s/%s is too long", a, b);
    return PD_OK;
}

static pd_status make_dir(const char *dir)
{
    struct stat st;

    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return PD_ERROR(PD_EIO, "checkpoint: cannot create directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return PD_ERROR(PD_EIO, "checkpoint: %s is not a directory", dir);
    return PD_OK;
}

/* This rank's stage's state after `step` minibatches of the run. The
 * loader position is (epoch, minibatch in it) of the run's epochs, or of
 * the split's without them. */
static void stage_state(const pd_pipeline *p, int64_t step, pd_checkpoint_state *st)
{
    const int64_t per_epoch = p->per_epoch ? p->per_epoch : p->train_batches;

    *st = (pd_checkpoint_state){
        .model_options = p->parts.model,
        .seed = p->opts.train.seed,
        .step = step,
        .total_steps = p->total,
        .loader_epoch = per_epoch > 0 ? step / per_epoch : 0,
        .loader_batch = per_epoch > 0 ? step % per_epoch : step,
        .lr_schedule = p->lr,
        .optimizer = pd_optimizer_get_kind(p->opt),
        .optimizer_steps = pd_optimizer_steps(p->opt),
    };
    snprintf(st->model, sizeof(st->model), "%s", p->opts.train.model);
    snprintf(st->dataset, sizeof(st->dataset), "%s", p->opts.train.train_data.kind);
    pd_optimizer_get_sgd(p->opt, &st->sgd);
    pd_optimizer_get_adam(p->opt, &st->adam);
}

static void set_name(char *buf, size_t size, int64_t step) { snprintf(buf, size, "step-%08lld", (long long)step); }

static void file_name(char *buf, size_t size, int stage, int n_stages)
{
    snprintf(buf, size, "stage-%d-of-%d.safetensors", stage, n_stages);
}

/* Replica 0 of a stage: its file of the set, with the newest weights. */
static pd_status write_stage(pd_pipeline *p, int64_t step, written_report *r)
{
    const char *dir = p->opts.train.checkpoint_dir;
    char set[64], name[64], set_dir[4096], path[4096];
    pd_checkpoint_state st;
    pd_safetensors *file;
    pd_weight_pin pin;
    struct stat sb;
    pd_status s;

    set_name(set, sizeof(set), step);
    file_name(name, sizeof(name), p->stage, p->plan->n_stages);
    PD_CHECK(join(set_dir, sizeof(set_dir), dir, set));
    PD_CHECK(join(path, sizeof(path), set_dir, name));
    PD_CHECK(make_dir(dir));
    PD_CHECK(make_dir(set_dir));
    pd_weight_ring_pin_newest(p->ver.ring, &pin);
    s = pd_versions_load(&p->ver, &p->st, &pin);
    pd_weight_ring_unpin(p->ver.ring, &pin);
    PD_CHECK(s);
    stage_state(p, step, &st);
    PD_CHECK(pd_checkpoint_save_params(path, p->st.saved, p->st.n_saved, p->opt, &st));
    if (stat(path, &sb) != 0)
        return PD_ERROR(PD_EIO, "checkpoint: cannot stat %s after writing it: %s", path, strerror(errno));
    PD_CHECK(pd_safetensors_open(path, &file));
    snprintf(r->checksum, sizeof(r->checksum), "%s",
             pd_safetensors_metadata(file, "checksum") ? pd_safetensors_metadata(file, "checksum") : "");
    pd_safetensors_close(file);
    r->bytes = (int64_t)sb.st_size;
    return PD_OK;
}

/* Rank 0: the index naming the set, once every stage has written. */
static pd_status commit(pd_pipeline *p, int64_t step, const written_report *all)
{
    const int n = p->plan->n_stages;
    char set[64], name[64], path[4096];
    json_t *files = json_array(), *index;
    pd_status s;

    if (!files)
        return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
    for (int stage = 0; stage < n; stage++) {
        const int writer = p->plan->stages[stage].ranks[0];
        const written_report *r = &all[writer];
        if (r->status != PD_OK) {
            json_decref(files);
            return PD_ERROR(PD_EIO, "checkpoint of minibatch %lld not committed: stage %d (rank %d) could not write "
                                    "its file", (long long)step, stage, writer);
        }
        file_name(name, sizeof(name), stage, n);
        json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", name, "size", (json_int_t)r->bytes,
                                               "checksum", r->checksum));
    }
    set_name(set, sizeof(set), step);
    index = json_pack("{s:s, s:i, s:I, s:s, s:o}", "format", SET_FORMAT, "format_version", SET_VERSION, "step",
                      (json_int_t)step, "set", set, "files", files);
    if (!index)
        return PD_ERROR(PD_ENOMEM, "checkpoint: cannot build the index JSON");
    if ((s = join(path, sizeof(path), p->opts.train.checkpoint_dir, PD_CHECKPOINT_INDEX)) == PD_OK)
        s = pd_json_write_file(path, index);
    json_decref(index);
    return s;
}

pd_status pd_pipeline_checkpoint_save(pd_pipeline *p, int64_t step)
{
    written_report mine = {.status = 1}, *all = NULL;
    pd_status s = PD_OK, verdict;

    if (p->stage >= 0 && p->replica == 0) {
        s = write_stage(p, step, &mine);
        mine.status = s;
    }
    if (p->boot.rank == 0 && !(all = calloc((size_t)p->boot.ranks, sizeof(*all))))
        s = PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
#ifdef HAVE_MPI
    MPI_Gather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, 0, MPI_COMM_WORLD);
#else
    if (all)
        all[0] = mine;
#endif
    verdict = p->boot.rank == 0 && all ? commit(p, step, all) : PD_OK;
    free(all);
    int64_t v = verdict;
#ifdef HAVE_MPI
    MPI_Bcast(&v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
#endif
    if (s != PD_OK || verdict != PD_OK)
        return s != PD_OK ? s : verdict;
    if (v != PD_OK)
        return PD_ERROR((pd_status)v, "checkpoint of minibatch %lld not committed (rank 0 says why)",
                        (long long)step);
    return PD_OK;
}

/* ---- resuming ---- */

static pd_status read_index(pd_pipeline *p, const char *dir, json_t *index, const char *where, int64_t *step)
{
    static const char *const keys[] = {"format", "format_version", "step", "set", "files", NULL};
    static const char *const file_keys[] = {"name", "size", "checksum", NULL};
    const char *format, *set;
    int64_t version;
    json_t *files;
    size_t n;

    PD_CHECK(pd_json_expect_object(index, where));
    PD_CHECK(pd_json_check_keys(index, where, keys));
    PD_CHECK(pd_json_get_string(index, "format", where, &format));
    if (strcmp(format, SET_FORMAT) != 0)
        return PD_ERROR(PD_EFORMAT, "%s: format: expected \"" SET_FORMAT "\" (a pipeline's checkpoints), got \"%s\"",
                        where, format);
    PD_CHECK(pd_json_get_int64(index, "format_version", where, SET_VERSION, SET_VERSION, &version));
    PD_CHECK(pd_json_get_int64(index, "step", where, 0, INT64_MAX, step));
    PD_CHECK(pd_json_get_string(index, "set", where, &set));
    PD_CHECK(pd_json_get_array(index, "files", where, &files, &n));
    if (n < 1 || n > 1 << 16)
        return PD_ERROR(PD_EFORMAT, "%s: files: %zu entries", where, n);
    if (!(p->resume_paths = calloc(n, sizeof(*p->resume_paths))))
        return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
    for (size_t i = 0; i < n; i++) {
        char at[600], set_dir[4096], path[4096];
        const char *name, *sum;
        int64_t bytes;
        struct stat sb;
        json_t *f = json_array_get(files, i);
        pd_json_where(at, sizeof(at), where, "files", (long)i);
        PD_CHECK(pd_json_expect_object(f, at));
        PD_CHECK(pd_json_check_keys(f, at, file_keys));
        PD_CHECK(pd_json_get_string(f, "name", at, &name));
        PD_CHECK(pd_json_get_int64(f, "size", at, 0, INT64_MAX, &bytes));
        PD_CHECK(pd_json_get_string(f, "checksum", at, &sum));
        if (strchr(name, '/') || strchr(set, '/') || !name[0] || !set[0] || name[0] == '.' || set[0] == '.')
            return PD_ERROR(PD_EFORMAT, "%s: expected file names in the directory, got \"%s/%s\"", at, set, name);
        PD_CHECK(join(set_dir, sizeof(set_dir), dir, set));
        PD_CHECK(join(path, sizeof(path), set_dir, name));
        if (stat(path, &sb) != 0)
            return PD_ERROR(PD_ENOTFOUND, "%s names %s, which cannot be read: %s", where, path, strerror(errno));
        if ((int64_t)sb.st_size != bytes)
            return PD_ERROR(PD_EFORMAT, "%s: %s is %lld bytes, the index says %lld (truncated or replaced)", where,
                            path, (long long)sb.st_size, (long long)bytes);
        pd_safetensors *file;
        PD_CHECK(pd_safetensors_open(path, &file));
        const char *stored = pd_safetensors_metadata(file, "checksum");
        bool same = stored && strcmp(stored, sum) == 0;
        pd_safetensors_close(file);
        if (!same)
            return PD_ERROR(PD_EFORMAT, "%s: %s does not hold checksum %s (replaced?)", where, path, sum);
        if (!(p->resume_paths[i] = strdup(path)))
            return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
        p->n_resume_paths = (int)i + 1;
    }
    return PD_OK;
}

pd_status pd_pipeline_resume_open(pd_pipeline *p)
{
    const char *dir = p->opts.train.resume;
    char where[4096];
    pd_checkpoint_state found;
    json_t *index;
    int64_t step, start;
    pd_status s;

    PD_CHECK(join(where, sizeof(where), dir, PD_CHECKPOINT_INDEX));
    PD_CHECK(pd_json_load_file(where, &index));
    s = read_index(p, dir, index, where, &step);
    json_decref(index);
    PD_CHECK(s);
    PD_CHECK(pd_checkpoint_read_state(p->resume_paths[0], &found));
    if (found.step != step)
        return PD_ERROR(PD_EFORMAT, "%s: the set is at minibatch %lld, %s at %lld", where, (long long)step,
                        p->resume_paths[0], (long long)found.step);
    start = p->per_epoch ? found.loader_epoch * p->per_epoch + found.loader_batch : found.step;
    if (start > p->total)
        return PD_ERROR(PD_EINVAL, "checkpoint %s is at minibatch %lld, past this run's %lld", dir, (long long)start,
                        (long long)p->total);
    if (start % p->unit)
        return PD_ERROR(PD_EINVAL, "checkpoint %s is at minibatch %lld, which this plan cannot start from: its stages' "
                                   "replicas need a multiple of %lld", dir, (long long)start, (long long)p->unit);
    p->start = start;
    return PD_OK;
}

pd_status pd_pipeline_resume_load(pd_pipeline *p)
{
    pd_checkpoint_state expected;

    stage_state(p, p->start, &expected);
    PD_CHECK(pd_checkpoint_load_params((const char *const *)p->resume_paths, p->n_resume_paths, &expected,
                                       p->st.saved, p->st.n_saved, p->opt, NULL));
    return pd_optimizer_set_steps(p->opt, p->start / p->mb_per_step);
}
