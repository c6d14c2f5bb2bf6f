/* Checkpoints: a graph's parameters and buffers, an optimizer's state and
 * the trainer's state in one safetensors file, guarded by a CRC-32 over
 * everything it holds, and a JSON index naming the latest file of a
 * directory. Loading validates the whole file against the graph before it
 * changes a byte of it. No random-number state is saved because there is
 * none: initialisation is drawn once from the seed, dropout and data order
 * are counter-based functions of (seed, step) and (seed, epoch). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <pipedream/checkpoint.h>
#include <pipedream/json.h>
#include <pipedream/safetensors.h>

#include "runtime/pd_runtime_int.h"

#define FORMAT_NAME "pipedream-checkpoint"
#define INDEX_FORMAT_NAME "pipedream-checkpoint-index"
#define OPT_PREFIX "optimizer."
#define NAME_MAX_LEN 160

/* The metadata keys besides "checksum", in the order they are hashed. */
enum { META_FORMAT, META_VERSION, META_MODEL, META_STATE, N_META };
static const char *const meta_keys[N_META] = {"format", "format_version", "model", "state"};

/* ---- the state as JSON ----------------------------------------------------- */

static json_t *state_to_json(const pd_checkpoint_state *st)
{
    const pd_model_options *m = &st->model_options;
    const pd_lr_schedule *lr = &st->lr_schedule;
    json_t *opt;

    if (st->optimizer == PD_OPTIMIZER_ADAM)
        opt = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:b}", "kind", "adam", "steps", (json_int_t)st->optimizer_steps,
                        "beta1", (double)st->adam.beta1, "beta2", (double)st->adam.beta2, "eps",
                        (double)st->adam.eps, "weight_decay", (double)st->adam.weight_decay, "decoupled",
                        (int)st->adam.decoupled);
    else
        opt = json_pack("{s:s, s:I, s:f, s:f, s:f, s:b}", "kind", "sgd", "steps", (json_int_t)st->optimizer_steps,
                        "momentum", (double)st->sgd.momentum, "dampening", (double)st->sgd.dampening,
                        "weight_decay", (double)st->sgd.weight_decay, "nesterov", (int)st->sgd.nesterov);
    return json_pack("{s:{s:s, s:i, s:i, s:i, s:i, s:i, s:f}, s:s, s:I, s:I, s:I, s:{s:I, s:I}, "
                     "s:{s:s, s:f, s:I, s:I, s:f, s:f}, s:o*}",
                     "model", "name", st->model, "batch", m->batch, "channels", m->channels, "height", m->height,
                     "width", m->width, "classes", m->classes, "width_multiplier", (double)m->width_multiplier,
                     "dataset", st->dataset, "seed", (json_int_t)st->seed, "step", (json_int_t)st->step,
                     "total_steps", (json_int_t)st->total_steps, "loader", "epoch", (json_int_t)st->loader_epoch,
                     "batch", (json_int_t)st->loader_batch, "lr_schedule", "kind", pd_lr_kind_name(lr->kind), "lr",
                     lr->lr, "warmup_steps", (json_int_t)lr->warmup_steps, "step_size", (json_int_t)lr->step_size,
                     "gamma", lr->gamma, "power", lr->power, "optimizer", opt);
}

/* Copies a string field into a fixed buffer; PD_EFORMAT if it does not fit. */
static pd_status copy_name(const json_t *obj, const char *key, const char *where, char *dst, size_t size)
{
    const char *s;
    char at[600];

    PD_CHECK(pd_json_get_string(obj, key, where, &s));
    if (s[0] == '\0' || strlen(s) >= size)
        return PD_ERROR(PD_EFORMAT, "%s: expected a name of 1 to %zu characters, got \"%s\"",
                        pd_json_where(at, sizeof(at), where, key, -1), size - 1, s);
    strcpy(dst, s);
    return PD_OK;
}

static pd_status get_float(const json_t *obj, const char *key, const char *where, pd_json_range range, float *out)
{
    double v;

    PD_CHECK(pd_json_get_double(obj, key, where, range, &v));
    *out = (float)v;
    return PD_OK;
}

static pd_status optimizer_from_json(const json_t *o, const char *where, pd_checkpoint_state *st)
{
    static const char *const sgd_keys[] = {"kind", "steps", "momentum", "dampening", "weight_decay", "nesterov", NULL};
    static const char *const adam_keys[] = {"kind",         "steps",     "beta1", "beta2", "eps",
                                            "weight_decay", "decoupled", NULL};
    const char *kind;

    PD_CHECK(pd_json_get_string(o, "kind", where, &kind));
    PD_CHECK(pd_json_get_int64(o, "steps", where, 0, INT64_MAX, &st->optimizer_steps));
    if (strcmp(kind, "sgd") == 0) {
        st->optimizer = PD_OPTIMIZER_SGD;
        PD_CHECK(pd_json_check_keys(o, where, sgd_keys));
        PD_CHECK(get_float(o, "momentum", where, PD_JSON_CLOSED(0, 1), &st->sgd.momentum));
        PD_CHECK(get_float(o, "dampening", where, PD_JSON_CLOSED(0, 1), &st->sgd.dampening));
        PD_CHECK(get_float(o, "weight_decay", where, PD_JSON_NONNEGATIVE, &st->sgd.weight_decay));
        PD_CHECK(pd_json_get_bool(o, "nesterov", where, &st->sgd.nesterov));
    } else if (strcmp(kind, "adam") == 0) {
        st->optimizer = PD_OPTIMIZER_ADAM;
        PD_CHECK(pd_json_check_keys(o, where, adam_keys));
        PD_CHECK(get_float(o, "beta1", where, PD_JSON_CLOSED(0, 1), &st->adam.beta1));
        PD_CHECK(get_float(o, "beta2", where, PD_JSON_CLOSED(0, 1), &st->adam.beta2));
        PD_CHECK(get_float(o, "eps", where, PD_JSON_NONNEGATIVE, &st->adam.eps));
        PD_CHECK(get_float(o, "weight_decay", where, PD_JSON_NONNEGATIVE, &st->adam.weight_decay));
        PD_CHECK(pd_json_get_bool(o, "decoupled", where, &st->adam.decoupled));
    } else {
        return PD_ERROR(PD_EFORMAT, "%s.kind: expected \"sgd\" or \"adam\", got \"%s\"", where, kind);
    }
    return PD_OK;
}

/* Parses and validates the "state" metadata of the checkpoint `path`. */
static pd_status state_from_json(const char *path, const char *text, pd_checkpoint_state *out)
{
    static const char *const top_keys[] = {"model", "dataset", "seed", "step", "total_steps", "loader",
                                           "lr_schedule", "optimizer", NULL};
    static const char *const model_keys[] = {"name",  "batch",   "channels",         "height",
                                             "width", "classes", "width_multiplier", NULL};
    static const char *const loader_keys[] = {"epoch", "batch", NULL};
    static const char *const lr_keys[] = {"kind", "lr", "warmup_steps", "step_size", "gamma", "power", NULL};
    char root[512], where[600];
    pd_checkpoint_state st = {0};
    json_t *doc = NULL, *obj;
    const char *kind;
    int64_t seed;
    double multiplier;
    pd_status s;

    snprintf(root, sizeof(root), "%s: state", path);
    PD_CHECK(pd_json_load_buffer(text, strlen(text), root, &doc));
    PD_CHECK_GOTO(pd_json_expect_object(doc, root), s, done);
    PD_CHECK_GOTO(pd_json_check_keys(doc, root, top_keys), s, done);

    PD_CHECK_GOTO(pd_json_get_object(doc, "model", root, &obj), s, done);
    pd_json_where(where, sizeof(where), root, "model", -1);
    PD_CHECK_GOTO(pd_json_check_keys(obj, where, model_keys), s, done);
    PD_CHECK_GOTO(copy_name(obj, "name", where, st.model, sizeof(st.model)), s, done);
    PD_CHECK_GOTO(pd_json_get_int(obj, "batch", where, 1, 1 << 30, &st.model_options.batch), s, done);
    PD_CHECK_GOTO(pd_json_get_int(obj, "channels", where, 1, 1 << 20, &st.model_options.channels), s, done);
    PD_CHECK_GOTO(pd_json_get_int(obj, "height", where, 1, 1 << 20, &st.model_options.height), s, done);
    PD_CHECK_GOTO(pd_json_get_int(obj, "width", where, 1, 1 << 20, &st.model_options.width), s, done);
    PD_CHECK_GOTO(pd_json_get_int(obj, "classes", where, 2, 1 << 30, &st.model_options.classes), s, done);
    PD_CHECK_GOTO(pd_json_get_double(obj, "width_multiplier", where, PD_JSON_POSITIVE, &multiplier), s, done);
    st.model_options.width_multiplier = (float)multiplier;

    PD_CHECK_GOTO(copy_name(doc, "dataset", root, st.dataset, sizeof(st.dataset)), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(doc, "seed", root, 0, INT64_MAX, &seed), s, done);
    st.seed = (uint64_t)seed;
    PD_CHECK_GOTO(pd_json_get_int64(doc, "step", root, 0, INT64_MAX, &st.step), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(doc, "total_steps", root, 1, INT64_MAX, &st.total_steps), s, done);

    PD_CHECK_GOTO(pd_json_get_object(doc, "loader", root, &obj), s, done);
    pd_json_where(where, sizeof(where), root, "loader", -1);
    PD_CHECK_GOTO(pd_json_check_keys(obj, where, loader_keys), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(obj, "epoch", where, 0, INT64_MAX, &st.loader_epoch), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(obj, "batch", where, 0, INT64_MAX, &st.loader_batch), s, done);

    PD_CHECK_GOTO(pd_json_get_object(doc, "lr_schedule", root, &obj), s, done);
    pd_json_where(where, sizeof(where), root, "lr_schedule", -1);
    PD_CHECK_GOTO(pd_json_check_keys(obj, where, lr_keys), s, done);
    PD_CHECK_GOTO(pd_json_get_string(obj, "kind", where, &kind), s, done);
    if (pd_lr_kind_parse(kind, &st.lr_schedule.kind) != PD_OK) {
        s = PD_ERROR(PD_EFORMAT, "%s.kind: unknown schedule \"%s\"", where, kind);
        goto done;
    }
    PD_CHECK_GOTO(pd_json_get_double(obj, "lr", where, PD_JSON_NONNEGATIVE, &st.lr_schedule.lr), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(obj, "warmup_steps", where, 0, INT64_MAX, &st.lr_schedule.warmup_steps), s,
                  done);
    PD_CHECK_GOTO(pd_json_get_int64(obj, "step_size", where, 0, INT64_MAX, &st.lr_schedule.step_size), s, done);
    PD_CHECK_GOTO(pd_json_get_double(obj, "gamma", where, PD_JSON_CLOSED(0, 1), &st.lr_schedule.gamma), s, done);
    PD_CHECK_GOTO(pd_json_get_double(obj, "power", where, PD_JSON_NONNEGATIVE, &st.lr_schedule.power), s, done);
    if (pd_lr_schedule_check(&st.lr_schedule) != PD_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", pd_last_error()); /* the next error overwrites it */
        s = PD_ERROR(PD_EFORMAT, "%s: %s", where, why);
        goto done;
    }

    PD_CHECK_GOTO(pd_json_get_object(doc, "optimizer", root, &obj), s, done);
    pd_json_where(where, sizeof(where), root, "optimizer", -1);
    PD_CHECK_GOTO(optimizer_from_json(obj, where, &st), s, done);
    *out = st;
    s = PD_OK;
done:
    json_decref(doc);
    return s;
}

/* ---- the checksum ------------------------------------------------------------ */

static uint32_t crc_bytes(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;

    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

/* A tensor to hash: its name and where its bytes are (host bytes, or a
 * tensor to copy from). */
typedef struct hashed_tensor {
    const char *name;
    const void *host;
    const pd_tensor *tensor;
    size_t nbytes;
} hashed_tensor;

static int compare_hashed(const void *a, const void *b)
{
    return strcmp(((const hashed_tensor *)a)->name, ((const hashed_tensor *)b)->name);
}

/* CRC-32 of the metadata values (in meta_keys order) and of every tensor's
 * name and bytes in name order; sorts `tensors`. Tensors on a device are
 * staged through one host buffer of the largest one's size. */
static pd_status checksum(const char *const *meta_values, hashed_tensor *tensors, int n, uint32_t *out)
{
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    size_t largest = 0;
    unsigned char *staging = NULL;

    for (int k = 0; k < N_META; k++) {
        crc = crc_bytes(crc, meta_keys[k], strlen(meta_keys[k]) + 1);
        crc = crc_bytes(crc, meta_values[k], strlen(meta_values[k]) + 1);
    }
    qsort(tensors, (size_t)n, sizeof(*tensors), compare_hashed);
    for (int i = 0; i < n; i++)
        if (!tensors[i].host && tensors[i].nbytes > largest)
            largest = tensors[i].nbytes;
    if (largest && !(staging = malloc(largest)))
        return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory for a %zu-byte staging buffer", largest);
    for (int i = 0; i < n; i++) {
        const void *bytes = tensors[i].host;
        crc = crc_bytes(crc, tensors[i].name, strlen(tensors[i].name) + 1);
        if (!bytes && tensors[i].nbytes) {
            pd_status s = pd_tensor_copy_to_host(tensors[i].tensor, staging, tensors[i].nbytes);
            if (s != PD_OK) {
                free(staging);
                return s;
            }
            bytes = staging;
        }
        crc = crc_bytes(crc, bytes, tensors[i].nbytes);
    }
    free(staging);
    *out = crc;
    return PD_OK;
}

/* ---- saving ------------------------------------------------------------------ */

/* The file's tensors: the graph's parameters, then the optimizer's state. */
typedef struct tensor_list {
    int n;
    pd_st_entry *entries;
    hashed_tensor *hashed;
    char (*names)[NAME_MAX_LEN]; /* optimizer state names */
} tensor_list;

static void tensor_list_free(tensor_list *l)
{
    free(l->names);
    free(l->hashed);
    free(l->entries);
}

static pd_status optimizer_name(char *dst, const char *kind, const pd_param *p)
{
    int len = snprintf(dst, NAME_MAX_LEN, OPT_PREFIX "%s.%s", kind, p->name);
    if (len < 0 || len >= NAME_MAX_LEN)
        return PD_ERROR(PD_EINVAL, "checkpoint: optimizer state name for %s is too long", p->name);
    return PD_OK;
}

static pd_status tensor_list_make(pd_param *const *params, int n_params, pd_optimizer *opt, tensor_list *l)
{
    int n_state = opt ? pd_optimizer_state_count(opt) : 0;
    size_t n = (size_t)(n_params + n_state) + 1;

    *l = (tensor_list){0};
    l->entries = calloc(n, sizeof(*l->entries));
    l->hashed = calloc(n, sizeof(*l->hashed));
    l->names = calloc((size_t)n_state + 1, sizeof(*l->names));
    if (!l->entries || !l->hashed || !l->names) {
        tensor_list_free(l);
        return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory for %zu tensor entries", n);
    }
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->value.data && pd_tensor_numel(&params[i]->value) > 0) {
            tensor_list_free(l);
            return PD_ERROR(PD_ESTATE, "checkpoint: parameter %s has no memory (allocate the graph first)",
                            params[i]->name);
        }
        l->entries[l->n] = (pd_st_entry){.name = params[i]->name, .tensor = &params[i]->value};
        l->n++;
    }
    for (int i = 0; i < n_state; i++) {
        const char *kind;
        const pd_param *p;
        pd_tensor *t;
        pd_status s;
        if ((s = pd_optimizer_state(opt, i, &kind, &p, &t)) != PD_OK || (s = optimizer_name(l->names[i], kind, p)) != PD_OK) {
            tensor_list_free(l);
            return s;
        }
        l->entries[l->n] = (pd_st_entry){.name = l->names[i], .tensor = t};
        l->n++;
    }
    for (int i = 0; i < l->n; i++)
        l->hashed[i] = (hashed_tensor){.name = l->entries[i].name, .tensor = l->entries[i].tensor,
                                       .nbytes = pd_tensor_nbytes(l->entries[i].tensor)};
    return PD_OK;
}

pd_status pd_checkpoint_save(const char *path, pd_graph *g, pd_optimizer *opt, const pd_checkpoint_state *state)
{
    pd_param **params;

    if (!path || !g || !state)
        return PD_ERROR(PD_EINVAL, "checkpoint: save needs a path, a graph and a state");
    return pd_checkpoint_save_params(path, params, pd_graph_params(g, &params), opt, state);
}

pd_status pd_checkpoint_save_params(const char *path, pd_param *const *params, int n, pd_optimizer *opt,
                                    const pd_checkpoint_state *state)
{
    const char *meta_values[N_META];
    const char *metadata[2 * (N_META + 1)];
    char version[16], crc_text[32];
    char *state_text = NULL;
    json_t *state_json;
    tensor_list list;
    uint32_t crc;
    pd_status s;

    if (!path || !state)
        return PD_ERROR(PD_EINVAL, "checkpoint: save needs a path and a state");
    if (state->seed > (uint64_t)INT64_MAX)
        return PD_ERROR(PD_EINVAL, "checkpoint: seed %" PRIu64 " exceeds %" PRId64, state->seed, INT64_MAX);
    if (!(state_json = state_to_json(state)))
        return PD_ERROR(PD_ENOMEM, "checkpoint: cannot build the state JSON");
    state_text = json_dumps(state_json, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(state_json);
    if (!state_text)
        return PD_ERROR(PD_ENOMEM, "checkpoint: cannot format the state JSON");
    PD_CHECK_GOTO(tensor_list_make(params, n, opt, &list), s, free_text);

    snprintf(version, sizeof(version), "%d", PD_CHECKPOINT_FORMAT_VERSION);
    meta_values[META_FORMAT] = FORMAT_NAME;
    meta_values[META_VERSION] = version;
    meta_values[META_MODEL] = state->model;
    meta_values[META_STATE] = state_text;
    PD_CHECK_GOTO(checksum(meta_values, list.hashed, list.n, &crc), s, free_list);
    snprintf(crc_text, sizeof(crc_text), "crc32:%08" PRIx32, crc);
    for (int k = 0; k < N_META; k++) {
        metadata[2 * k] = meta_keys[k];
        metadata[2 * k + 1] = meta_values[k];
    }
    metadata[2 * N_META] = "checksum";
    metadata[2 * N_META + 1] = crc_text;
    s = pd_safetensors_write(path, list.entries, list.n, metadata, N_META + 1);
free_list:
    tensor_list_free(&list);
free_text:
    free(state_text);
    return s;
}

/* Joins dir and name into buf; PD_EINVAL if it does not fit. */
static pd_status join_path(char *buf, size_t size, const char *dir, const char *name)
{
    int len = snprintf(buf, size, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= size)
        return PD_ERROR(PD_EINVAL, "checkpoint: path %s/%s is too long", dir, name);
    return PD_OK;
}

pd_status pd_checkpoint_save_in_dir(const char *dir, pd_graph *g, pd_optimizer *opt, const pd_checkpoint_state *state,
                                    char *written, size_t size)
{
    char name[64], path[4096], index_path[4096];
    pd_safetensors *file;
    struct stat st;
    json_t *index;
    pd_status s;

    if (!dir || !state)
        return PD_ERROR(PD_EINVAL, "checkpoint: save needs a directory and a state");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return PD_ERROR(PD_EIO, "checkpoint: cannot create directory %s: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return PD_ERROR(PD_EIO, "checkpoint: %s is not a directory", dir);
    snprintf(name, sizeof(name), "step-%08lld.safetensors", (long long)state->step);
    PD_CHECK(join_path(path, sizeof(path), dir, name));
    PD_CHECK(join_path(index_path, sizeof(index_path), dir, PD_CHECKPOINT_INDEX));
    PD_CHECK(pd_checkpoint_save(path, g, opt, state));

    /* The index records what was written, read back from the file itself. */
    if (stat(path, &st) != 0)
        return PD_ERROR(PD_EIO, "checkpoint: cannot stat %s after writing it: %s", path, strerror(errno));
    PD_CHECK(pd_safetensors_open(path, &file));
    index = json_pack("{s:s, s:i, s:s, s:I, s:I, s:s}", "format", INDEX_FORMAT_NAME, "format_version",
                      PD_CHECKPOINT_FORMAT_VERSION, "latest", name, "step", (json_int_t)state->step, "size",
                      (json_int_t)st.st_size, "checksum", pd_safetensors_metadata(file, "checksum"));
    pd_safetensors_close(file);
    if (!index)
        return PD_ERROR(PD_ENOMEM, "checkpoint: cannot build the index JSON");
    s = pd_json_write_file(index_path, index);
    json_decref(index);
    if (s == PD_OK && written) {
        snprintf(written, size, "%s", path);
    }
    return s;
}

/* ---- loading ----------------------------------------------------------------- */

/* Opens `path` and validates format, version, checksum and state. */
static pd_status open_checked(const char *path, pd_safetensors **out, pd_checkpoint_state *state)
{
    const char *meta_values[N_META], *stored;
    hashed_tensor *hashed = NULL;
    pd_safetensors *file;
    char computed[32], version[16];
    uint32_t crc;
    pd_status s;
    int n;

    PD_CHECK(pd_safetensors_open(path, &file));
    for (int k = 0; k < N_META; k++)
        if (!(meta_values[k] = pd_safetensors_metadata(file, meta_keys[k]))) {
            s = PD_ERROR(PD_EFORMAT, "%s: not a pipedream checkpoint (its metadata has no \"%s\")", path,
                         meta_keys[k]);
            goto close;
        }
    if (strcmp(meta_values[META_FORMAT], FORMAT_NAME) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: metadata format is \"%s\", expected \"" FORMAT_NAME "\"", path,
                     meta_values[META_FORMAT]);
        goto close;
    }
    snprintf(version, sizeof(version), "%d", PD_CHECKPOINT_FORMAT_VERSION);
    if (strcmp(meta_values[META_VERSION], version) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: checkpoint format version \"%s\" is not supported (this build reads %s)", path,
                     meta_values[META_VERSION], version);
        goto close;
    }
    if (!(stored = pd_safetensors_metadata(file, "checksum"))) {
        s = PD_ERROR(PD_EFORMAT, "%s: its metadata has no \"checksum\"", path);
        goto close;
    }
    n = pd_safetensors_count(file);
    if (!(hashed = calloc((size_t)n + 1, sizeof(*hashed)))) {
        s = PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory for %d entries", n);
        goto close;
    }
    for (int i = 0; i < n; i++) {
        pd_st_info info;
        PD_CHECK_GOTO(pd_safetensors_entry(file, i, &info), s, close);
        hashed[i] = (hashed_tensor){.name = info.name, .host = info.data, .nbytes = info.nbytes};
    }
    PD_CHECK_GOTO(checksum(meta_values, hashed, n, &crc), s, close);
    snprintf(computed, sizeof(computed), "crc32:%08" PRIx32, crc);
    if (strcmp(computed, stored) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: checksum mismatch (the file says %s, its contents give %s): the file is corrupt",
                     path, stored, computed);
        goto close;
    }
    PD_CHECK_GOTO(state_from_json(path, meta_values[META_STATE], state), s, close);
    if (strcmp(state->model, meta_values[META_MODEL]) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: metadata model \"%s\" differs from the state's \"%s\"", path,
                     meta_values[META_MODEL], state->model);
        goto close;
    }
    free(hashed);
    *out = file;
    return PD_OK;
close:
    free(hashed);
    pd_safetensors_close(file);
    return s;
}

pd_status pd_checkpoint_read_state(const char *path, pd_checkpoint_state *out)
{
    pd_safetensors *file;
    pd_checkpoint_state st;

    if (!path || !out)
        return PD_ERROR(PD_EINVAL, "checkpoint: read_state needs a path and an output");
    PD_CHECK(open_checked(path, &file, &st));
    pd_safetensors_close(file);
    *out = st;
    return PD_OK;
}

#define DIFF_INT(field, label)                                                                                    \
    if (found->field != expected->field)                                                                          \
    return PD_ERROR(PD_EINVAL, "checkpoint %s: %s is %lld, this run's is %lld", path, label, (long long)found->field, \
                    (long long)expected->field)
#define DIFF_REAL(field, label)                                                                                   \
    if (found->field != expected->field)                                                                          \
    return PD_ERROR(PD_EINVAL, "checkpoint %s: %s is %.9g, this run's is %.9g", path, label, (double)found->field, \
                    (double)expected->field)

pd_status pd_checkpoint_check_compatible(const char *path, const pd_checkpoint_state *found,
                                         const pd_checkpoint_state *expected)
{
    if (strcmp(found->model, expected->model) != 0)
        return PD_ERROR(PD_EINVAL, "checkpoint %s: model is '%s', this run's is '%s'", path, found->model,
                        expected->model);
    DIFF_INT(model_options.batch, "batch size");
    DIFF_INT(model_options.channels, "input channels");
    DIFF_INT(model_options.height, "input height");
    DIFF_INT(model_options.width, "input width");
    DIFF_INT(model_options.classes, "number of classes");
    DIFF_REAL(model_options.width_multiplier, "width multiplier");
    if (strcmp(found->dataset, expected->dataset) != 0)
        return PD_ERROR(PD_EINVAL, "checkpoint %s: data set is '%s', this run's is '%s'", path, found->dataset,
                        expected->dataset);
    DIFF_INT(seed, "seed");
    if (found->lr_schedule.kind != expected->lr_schedule.kind)
        return PD_ERROR(PD_EINVAL, "checkpoint %s: lr schedule is '%s', this run's is '%s'", path,
                        pd_lr_kind_name(found->lr_schedule.kind), pd_lr_kind_name(expected->lr_schedule.kind));
    DIFF_REAL(lr_schedule.lr, "lr");
    DIFF_INT(lr_schedule.warmup_steps, "warm-up steps");
    if (found->lr_schedule.kind == PD_LR_STEP) {
        DIFF_INT(lr_schedule.step_size, "lr step size (steps)");
        DIFF_REAL(lr_schedule.gamma, "lr gamma");
    }
    if (found->lr_schedule.kind == PD_LR_POLY)
        DIFF_REAL(lr_schedule.power, "lr power");
    if (found->optimizer != expected->optimizer)
        return PD_ERROR(PD_EINVAL, "checkpoint %s: optimizer is '%s', this run's is '%s'", path,
                        pd_optimizer_kind_name(found->optimizer), pd_optimizer_kind_name(expected->optimizer));
    if (found->optimizer == PD_OPTIMIZER_SGD) {
        DIFF_REAL(sgd.momentum, "momentum");
        DIFF_REAL(sgd.dampening, "dampening");
        DIFF_REAL(sgd.weight_decay, "weight decay");
        DIFF_INT(sgd.nesterov, "nesterov");
    } else {
        DIFF_REAL(adam.beta1, "adam beta1");
        DIFF_REAL(adam.beta2, "adam beta2");
        DIFF_REAL(adam.eps, "adam eps");
        DIFF_REAL(adam.weight_decay, "weight decay");
        DIFF_INT(adam.decoupled, "decoupled weight decay");
    }
    return PD_OK;
}

/* PD_EFORMAT unless the file's tensor `name` exists and has t's dtype and shape. */
static pd_status check_tensor(const char *path, const pd_safetensors *file, const char *name, const pd_tensor *t)
{
    pd_st_info info;
    char want[96], got[96];

    if (pd_safetensors_find(file, name, &info) != PD_OK)
        return PD_ERROR(PD_EFORMAT, "checkpoint %s: tensor '%s' is missing", path, name);
    if (!info.supported || info.dtype != t->dtype || !pd_shape_equal(&info.shape, &t->shape))
        return PD_ERROR(PD_EFORMAT, "checkpoint %s: tensor '%s' is %s %s, the model's is %s %s", path, name,
                        info.dtype_name, pd_shape_format(&info.shape, got, sizeof(got)),
                        pd_dtype_name(t->dtype), pd_shape_format(&t->shape, want, sizeof(want)));
    return PD_OK;
}

/* True if `name` is one of the list's first n entries. */
static bool listed(const tensor_list *l, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(l->entries[i].name, name) == 0)
            return true;
    return false;
}

pd_status pd_checkpoint_load(const char *path, const pd_checkpoint_state *expected, pd_graph *g, pd_optimizer *opt,
                             pd_checkpoint_state *out)
{
    pd_checkpoint_state st;
    pd_safetensors *file;
    tensor_list list;
    pd_status s;

    if (!path || !g)
        return PD_ERROR(PD_EINVAL, "checkpoint: load needs a path and a graph");
    PD_CHECK(open_checked(path, &file, &st));
    pd_param **params;
    int n_params = pd_graph_params(g, &params);
    PD_CHECK_GOTO(tensor_list_make(params, n_params, opt, &list), s, close);
    if (expected)
        PD_CHECK_GOTO(pd_checkpoint_check_compatible(path, &st, expected), s, free_list);
    if (opt && pd_optimizer_get_kind(opt) != st.optimizer) {
        s = PD_ERROR(PD_EINVAL, "checkpoint %s: optimizer is '%s', this run's is '%s'", path,
                     pd_optimizer_kind_name(st.optimizer), pd_optimizer_kind_name(pd_optimizer_get_kind(opt)));
        goto free_list;
    }
    for (int i = 0; i < list.n; i++)
        PD_CHECK_GOTO(check_tensor(path, file, list.entries[i].name, list.entries[i].tensor), s, free_list);
    /* Nothing else: a tensor the model lacks means a different model. The
     * optimizer's are skipped when only the weights are wanted. */
    for (int i = 0; i < pd_safetensors_count(file); i++) {
        pd_st_info info;
        PD_CHECK_GOTO(pd_safetensors_entry(file, i, &info), s, free_list);
        if (!opt && strncmp(info.name, OPT_PREFIX, strlen(OPT_PREFIX)) == 0)
            continue;
        if (!listed(&list, list.n, info.name)) {
            s = PD_ERROR(PD_EFORMAT, "checkpoint %s: tensor '%s' does not belong to model '%s'%s", path, info.name,
                         st.model, opt ? " or its optimizer" : "");
            goto free_list;
        }
    }
    for (int i = 0; i < list.n; i++)
        PD_CHECK_GOTO(pd_safetensors_read_into(file, list.entries[i].name, (pd_tensor *)list.entries[i].tensor), s,
                      free_list);
    if (opt)
        PD_CHECK_GOTO(pd_optimizer_set_steps(opt, st.optimizer_steps), s, free_list);
    if (out)
        *out = st;
    s = PD_OK;
free_list:
    tensor_list_free(&list);
close:
    pd_safetensors_close(file);
    return s;
}

pd_status pd_checkpoint_load_params(const char *const *paths, int n_paths, const pd_checkpoint_state *expected,
                                    pd_param *const *params, int n, pd_optimizer *opt, pd_checkpoint_state *out)
{
    pd_safetensors **files = calloc((size_t)(n_paths > 0 ? n_paths : 1), sizeof(*files));
    int *from = NULL;
    pd_checkpoint_state st, first = {0};
    tensor_list list = {0};
    pd_status s = PD_OK;

    if (!files)
        return PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
    for (int f = 0; f < n_paths; f++) {
        PD_CHECK_GOTO(open_checked(paths[f], &files[f], &st), s, close);
        if (expected)
            PD_CHECK_GOTO(pd_checkpoint_check_compatible(paths[f], &st, expected), s, close);
        if (f == 0)
            first = st;
        else if (st.step != first.step) {
            s = PD_ERROR(PD_EFORMAT, "checkpoint %s is at step %lld, %s at %lld: not one set", paths[f],
                         (long long)st.step, paths[0], (long long)first.step);
            goto close;
        }
    }
    PD_CHECK_GOTO(tensor_list_make(params, n, opt, &list), s, close);
    if (!(from = malloc(sizeof(*from) * (size_t)(list.n + 1)))) {
        s = PD_ERROR(PD_ENOMEM, "checkpoint: out of host memory");
        goto free_list;
    }
    /* Each tensor from the one file that holds it, checked before any is read. */
    for (int i = 0; i < list.n; i++) {
        pd_st_info info;
        from[i] = -1;
        for (int f = 0; f < n_paths; f++) {
            if (pd_safetensors_find(files[f], list.entries[i].name, &info) != PD_OK)
                continue;
            if (from[i] >= 0) {
                s = PD_ERROR(PD_EFORMAT, "checkpoint: tensor '%s' is in both %s and %s", list.entries[i].name,
                             paths[from[i]], paths[f]);
                goto free_list;
            }
            from[i] = f;
        }
        if (from[i] < 0) {
            s = PD_ERROR(PD_EFORMAT, "checkpoint %s%s: tensor '%s' is missing", paths[0],
                         n_paths > 1 ? " and the rest of its set" : "", list.entries[i].name);
            goto free_list;
        }
        PD_CHECK_GOTO(check_tensor(paths[from[i]], files[from[i]], list.entries[i].name, list.entries[i].tensor), s,
                      free_list);
    }
    for (int i = 0; i < list.n; i++)
        PD_CHECK_GOTO(pd_safetensors_read_into(files[from[i]], list.entries[i].name, (pd_tensor *)list.entries[i].tensor),
                      s, free_list);
    if (out)
        *out = first;
free_list:
    free(from);
    tensor_list_free(&list);
close:
    for (int f = 0; f < n_paths; f++)
        pd_safetensors_close(files[f]);
    free(files);
    return s;
}

pd_status pd_checkpoint_resolve(const char *dir_or_file, char *path, size_t size)
{
    static const char *const keys[] = {"format", "format_version", "latest", "step", "size", "checksum", NULL};
    char index_path[4096], file_path[4096];
    const char *format, *latest, *sum;
    int64_t version, step, bytes;
    pd_safetensors *file;
    struct stat st;
    json_t *index;
    pd_status s;

    if (!dir_or_file || !path || size == 0)
        return PD_ERROR(PD_EINVAL, "checkpoint: resolve needs a path and an output");
    if (stat(dir_or_file, &st) != 0)
        return PD_ERROR(errno == ENOENT ? PD_ENOTFOUND : PD_EIO, "checkpoint %s: %s", dir_or_file, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if ((size_t)snprintf(path, size, "%s", dir_or_file) >= size)
            return PD_ERROR(PD_EINVAL, "checkpoint: path %s is too long", dir_or_file);
        return PD_OK;
    }
    PD_CHECK(join_path(index_path, sizeof(index_path), dir_or_file, PD_CHECKPOINT_INDEX));
    if (stat(index_path, &st) != 0)
        return PD_ERROR(PD_ENOTFOUND, "checkpoint directory %s has no " PD_CHECKPOINT_INDEX, dir_or_file);
    PD_CHECK(pd_json_load_file(index_path, &index));
    PD_CHECK_GOTO(pd_json_expect_object(index, index_path), s, done);
    PD_CHECK_GOTO(pd_json_check_keys(index, index_path, keys), s, done);
    PD_CHECK_GOTO(pd_json_get_string(index, "format", index_path, &format), s, done);
    if (strcmp(format, INDEX_FORMAT_NAME) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: format: expected \"" INDEX_FORMAT_NAME "\", got \"%s\"", index_path, format);
        goto done;
    }
    PD_CHECK_GOTO(pd_json_get_int64(index, "format_version", index_path, PD_CHECKPOINT_FORMAT_VERSION,
                                    PD_CHECKPOINT_FORMAT_VERSION, &version), s, done);
    PD_CHECK_GOTO(pd_json_get_string(index, "latest", index_path, &latest), s, done);
    if (latest[0] == '\0' || strchr(latest, '/') || strcmp(latest, ".") == 0 || strcmp(latest, "..") == 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: latest: expected a file name in the directory, got \"%s\"", index_path, latest);
        goto done;
    }
    PD_CHECK_GOTO(pd_json_get_int64(index, "step", index_path, 0, INT64_MAX, &step), s, done);
    PD_CHECK_GOTO(pd_json_get_int64(index, "size", index_path, 0, INT64_MAX, &bytes), s, done);
    PD_CHECK_GOTO(pd_json_get_string(index, "checksum", index_path, &sum), s, done);
    PD_CHECK_GOTO(join_path(file_path, sizeof(file_path), dir_or_file, latest), s, done);
    if (stat(file_path, &st) != 0) {
        s = PD_ERROR(PD_ENOTFOUND, "%s names %s, which cannot be read: %s", index_path, file_path, strerror(errno));
        goto done;
    }
    if ((int64_t)st.st_size != bytes) {
        s = PD_ERROR(PD_EFORMAT, "%s: %s is %lld bytes, the index says %lld (truncated or replaced)", index_path,
                     file_path, (long long)st.st_size, (long long)bytes);
        goto done;
    }
    PD_CHECK_GOTO(pd_safetensors_open(file_path, &file), s, done);
    const char *stored = pd_safetensors_metadata(file, "checksum");
    if (!stored || strcmp(stored, sum) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: %s holds checksum %s, the index says %s (replaced?)", index_path, file_path,
                     stored ? stored : "(none)", sum);
        pd_safetensors_close(file);
        goto done;
    }
    pd_safetensors_close(file);
    if ((size_t)snprintf(path, size, "%s", file_path) >= size) {
        s = PD_ERROR(PD_EINVAL, "checkpoint: path %s is too long", file_path);
        goto done;
    }
    s = PD_OK;
done:
    json_decref(index);
    return s;
}
