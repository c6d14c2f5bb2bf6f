/* S2VT (Venugopalan et al., "Sequence to Sequence -- Video to Text", ICCV
 * 2015), the video captioning model of the PipeDream paper: two stacked
 * LSTMs read T_f frames, then write T_w words.
 *
 *   images [N,T_f,F] -> frame_proj (linear F->E) -> + T_w zero steps -> lstm1 (H)
 *   words  [N,T_w]   -> embedding (V x E)  -> T_f zero steps + ...  --'
 *   lstm2 over [h1, word] (H+E -> H) -> its last T_w steps -> out (linear H->V)
 *   -> mean cross-entropy against labels [N*T_w] over the non-IGNORE targets.
 *
 * During the T_f encoding steps lstm1 reads the projected frames and lstm2
 * reads [h1, 0] (the paper's <pad> word); during the T_w decoding steps
 * lstm1 reads zeros and lstm2 reads [h1, embedding(previous word)], the
 * first previous word being BOS (pd_s2vt_batches lays this out).
 *
 * The sequence plumbing the layer set lacks lives here as four small layer
 * classes that compute only through the device table: a reshape (a view, as
 * flatten), zero padding and slicing along time (concat and its split with
 * zero or data-less parts), and the masked loss. The masked loss gathers the
 * rows whose target is not IGNORE (an embedding lookup with the logits as
 * the table), runs the device's softmax cross-entropy on them alone, and
 * scatters the gradient back (the embedding's backward pass), so padding
 * adds nothing to the loss or the gradient and the mean is over real
 * targets, as Caffe's ignore_label and PyTorch's ignore_index. Finding those
 * rows reads the targets on the host, in fixed chunks. */
#include "config.h"

#include <assert.h>
#include <stdint.h>

#include <pipedream/models.h>
#include <pipedream/sequence.h>

#include "graph/pd_layer.h"

/* ---- reshape: the input's memory under another shape --------------------- */

typedef struct reshape_hparams {
    pd_shape shape;
} reshape_hparams;

static_assert(sizeof(reshape_hparams) <= PD_LAYER_HPARAMS_BYTES, "reshape hyper-parameters exceed the layer's room");

static pd_status reshape_setup(pd_layer *l)
{
    const reshape_hparams *hp = (const reshape_hparams *)l->hparams;
    char a[96], b[96];

    if (pd_shape_numel(&hp->shape) != pd_shape_numel(&l->in_shape[0]))
        return PD_LAYER_SHAPE_ERROR(l, "cannot reshape %s into %s", pd_shape_format(&l->in_shape[0], a, sizeof(a)),
                                    pd_shape_format(&hp->shape, b, sizeof(b)));
    l->out_shape = hp->shape;
    l->out_dtype = l->in_dtype[0];
    return PD_OK;
}

static pd_status reshape_forward(pd_layer *l, pd_device *dev, bool training) { return PD_OK; }

static pd_status reshape_backward(pd_layer *l, pd_device *dev)
{
    return l->d_in[0] ? pd_tensor_copy(l->d_in[0], l->d_out) : PD_OK;
}

static const pd_layer_class reshape_class = {
    .type = "reshape",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = reshape_setup,
    .forward = reshape_forward,
    .backward = reshape_backward,
    .output_aliases_input = true,
};

static pd_status add_reshape(pd_graph *g, const char *name, int x, pd_shape shape, int *out)
{
    reshape_hparams hp = {shape};
    return pd_graph_add_layer(g, &reshape_class, name, &hp, sizeof(hp), 1, &x, out);
}

/* ---- time_pad and time_slice along axis 1 of [N,T,I] --------------------- */

/* time_pad: `before` zero steps, the input, `after` zero steps.
 * time_slice: the input without its first `before` and last `after` steps.
 * Each is the other's backward pass. The zeros (for the pad's forward and
 * the slice's backward) are a saved buffer [N, max(before, after), I]. */
typedef struct time_hparams {
    int64_t before, after;
} time_hparams;

static_assert(sizeof(time_hparams) <= PD_LAYER_HPARAMS_BYTES, "time hyper-parameters exceed the layer's room");

enum { TIME_ZEROS };

/* Declares the zeros buffer shared by both classes. */
static pd_status time_declare_zeros(pd_layer *l)
{
    const time_hparams *hp = (const time_hparams *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    int64_t edge = hp->before > hp->after ? hp->before : hp->after;

    if (edge == 0)
        return PD_OK;
    pd_shape zeros = pd_shape_make(3, in->dim[0], edge, in->dim[2]);
    return pd_layer_declare_saved(l, PD_F32, &zeros, NULL);
}

static pd_status time_check(pd_layer *l)
{
    const time_hparams *hp = (const time_hparams *)l->hparams;
    const pd_shape *in = &l->in_shape[0];
    char buf[96];

    if (l->in_dtype[0] != PD_F32 || in->ndim != 3)
        return PD_LAYER_SHAPE_ERROR(l, "input must be an f32 sequence [N,T,I], got %s %s",
                                    pd_dtype_name(l->in_dtype[0]), pd_shape_format(in, buf, sizeof(buf)));
    if (hp->before < 0 || hp->after < 0)
        return PD_LAYER_SHAPE_ERROR(l, "negative step counts %lld, %lld", (long long)hp->before,
                                    (long long)hp->after);
    return PD_OK;
}

static pd_status time_pad_setup(pd_layer *l)
{
    const time_hparams *hp = (const time_hparams *)l->hparams;

    PD_CHECK(time_check(l));
    l->out_shape = l->in_shape[0];
    l->out_shape.dim[1] += hp->before + hp->after;
    l->out_dtype = PD_F32;
    return time_declare_zeros(l);
}

static pd_status time_slice_setup(pd_layer *l)
{
    const time_hparams *hp = (const time_hparams *)l->hparams;
    char buf[96];

    PD_CHECK(time_check(l));
    if (hp->before + hp->after >= l->in_shape[0].dim[1])
        return PD_LAYER_SHAPE_ERROR(l, "dropping %lld + %lld steps leaves nothing of %s", (long long)hp->before,
                                    (long long)hp->after, pd_shape_format(&l->in_shape[0], buf, sizeof(buf)));
    l->out_shape = l->in_shape[0];
    l->out_shape.dim[1] -= hp->before + hp->after;
    l->out_dtype = PD_F32;
    return time_declare_zeros(l);
}

/* The parts of the long sequence: [before steps] `middle` [after steps],
 * the edges viewing `edge_data` (zeros, or NULL: skipped by the split);
 * empty edges are left out. Returns the number of parts. */
static int time_parts(const pd_layer *l, pd_device *dev, pd_tensor *middle, void *edge_data, pd_tensor edges[2],
                      pd_tensor *parts[3])
{
    const time_hparams *hp = (const time_hparams *)l->hparams;
    const int64_t steps[2] = {hp->before, hp->after};
    int n = 0;

    for (int e = 0; e < 2; e++) {
        pd_shape s = pd_shape_make(3, middle->shape.dim[0], steps[e], middle->shape.dim[2]);
        pd_tensor_view(&edges[e], dev, PD_F32, &s, edge_data);
    }
    if (steps[0] > 0)
        parts[n++] = &edges[0];
    parts[n++] = middle;
    if (steps[1] > 0)
        parts[n++] = &edges[1];
    return n;
}

/* Concatenates zeros, `middle` and zeros into `whole`. */
static pd_status time_join(pd_layer *l, pd_device *dev, const pd_tensor *middle, pd_tensor *whole)
{
    pd_tensor edges[2], *parts[3];
    void *zeros = l->n_saved ? l->saved[TIME_ZEROS].data : NULL;

    if (zeros)
        PD_CHECK(dev->ops->fill(dev, &l->saved[TIME_ZEROS], 0.0f));
    int n = time_parts(l, dev, (pd_tensor *)middle, zeros, edges, parts);
    return dev->ops->concat_forward(dev, 1, n, (const pd_tensor *const *)parts, whole);
}

/* Copies the middle steps of `whole` into `middle`. */
static pd_status time_cut(pd_layer *l, pd_device *dev, const pd_tensor *whole, pd_tensor *middle)
{
    pd_tensor edges[2], *parts[3];
    int n = time_parts(l, dev, middle, NULL, edges, parts);

    return dev->ops->concat_backward(dev, 1, n, whole, parts);
}

static pd_status time_pad_forward(pd_layer *l, pd_device *dev, bool training)
{
    return time_join(l, dev, l->in[0], l->out);
}

static pd_status time_pad_backward(pd_layer *l, pd_device *dev)
{
    return l->d_in[0] ? time_cut(l, dev, l->d_out, l->d_in[0]) : PD_OK;
}

static pd_status time_slice_forward(pd_layer *l, pd_device *dev, bool training)
{
    return time_cut(l, dev, l->in[0], l->out);
}

static pd_status time_slice_backward(pd_layer *l, pd_device *dev)
{
    return l->d_in[0] ? time_join(l, dev, l->d_out, l->d_in[0]) : PD_OK;
}

static const pd_layer_class time_pad_class = {
    .type = "time_pad",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = time_pad_setup,
    .forward = time_pad_forward,
    .backward = time_pad_backward,
};

static const pd_layer_class time_slice_class = {
    .type = "time_slice",
    .min_inputs = 1,
    .max_inputs = 1,
    .setup = time_slice_setup,
    .forward = time_slice_forward,
    .backward = time_slice_backward,
};

static pd_status add_time_layer(pd_graph *g, const pd_layer_class *cls, const char *name, int x, int64_t before,
                                int64_t after, int *out)
{
    time_hparams hp = {before, after};
    return pd_graph_add_layer(g, cls, name, &hp, sizeof(hp), 1, &x, out);
}

/* ---- masked cross-entropy ------------------------------------------------ */

/* Targets are read from the device in chunks of this many, through a stack
 * buffer: no allocation per step. */
#define MCE_CHUNK 1024

typedef struct mce_hparams {
    int ignore; /* the target value that does not count */
} mce_hparams;

static_assert(sizeof(mce_hparams) <= PD_LAYER_HPARAMS_BYTES, "loss hyper-parameters exceed the layer's room");

/* Saved: the softmax of the counted rows, the counted rows' logits (their
 * gradient in the backward pass), and an i32 index: [0,M) the counted rows,
 * [M,2M) their targets, [2M] how many there are. */
enum { MCE_PROBS, MCE_PACKED, MCE_INDEX };

static pd_status mce_setup(pd_layer *l)
{
    const pd_shape *logits = &l->in_shape[0], *labels = &l->in_shape[1];
    char a[96], b[96];

    if (l->in_dtype[0] != PD_F32 || logits->ndim != 2 || logits->dim[1] <= 0)
        return PD_LAYER_SHAPE_ERROR(l, "logits must be f32 [N,C] with C > 0, got %s %s",
                                    pd_dtype_name(l->in_dtype[0]), pd_shape_format(logits, a, sizeof(a)));
    if (l->in_dtype[1] != PD_I32 || labels->ndim != 1 || labels->dim[0] != logits->dim[0])
        return PD_LAYER_SHAPE_ERROR(l, "labels must be i32 [N] for logits %s, got %s %s",
                                    pd_shape_format(logits, a, sizeof(a)), pd_dtype_name(l->in_dtype[1]),
                                    pd_shape_format(labels, b, sizeof(b)));
    if (logits->dim[0] > INT32_MAX / 2 - 1)
        return PD_LAYER_SHAPE_ERROR(l, "%lld rows exceed the i32 row index", (long long)logits->dim[0]);
    pd_shape index = pd_shape_make(1, 2 * logits->dim[0] + 1);
    int i;
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, logits, &i));
    assert(i == MCE_PROBS);
    PD_CHECK(pd_layer_declare_saved(l, PD_F32, logits, &i));
    assert(i == MCE_PACKED);
    PD_CHECK(pd_layer_declare_saved(l, PD_I32, &index, &i));
    assert(i == MCE_INDEX);
    l->out_shape = pd_shape_make(1, (int64_t)1);
    l->out_dtype = PD_F32;
    return PD_OK;
}

/* A view of `count` i32 at element `at` of the index buffer. */
static pd_tensor *index_view(pd_layer *l, pd_device *dev, int64_t at, int64_t count, pd_tensor *view)
{
    pd_shape s = pd_shape_make(1, count);
    pd_tensor_view(view, dev, PD_I32, &s, (int32_t *)l->saved[MCE_INDEX].data + at);
    return view;
}

/* Appends k counted rows and their targets to the index at position `at`. */
static pd_status mce_flush(pd_layer *l, pd_device *dev, int64_t m, int64_t at, const int32_t *rows,
                           const int32_t *targets, int k)
{
    pd_tensor view;

    if (k == 0)
        return PD_OK;
    PD_CHECK(pd_tensor_copy_from_host(index_view(l, dev, at, k, &view), rows, (size_t)k * sizeof(*rows)));
    return pd_tensor_copy_from_host(index_view(l, dev, m + at, k, &view), targets, (size_t)k * sizeof(*targets));
}

/* Builds the index of counted rows from the labels; *count receives their
 * number. A label neither IGNORE nor in [0, C) is PD_EINVAL naming it. */
static pd_status mce_pack(pd_layer *l, pd_device *dev, int64_t *count)
{
    const mce_hparams *hp = (const mce_hparams *)l->hparams;
    const int64_t m = l->in_shape[0].dim[0], classes = l->in_shape[0].dim[1];
    int32_t labels[MCE_CHUNK], rows[MCE_CHUNK], targets[MCE_CHUNK];
    int64_t done = 0;
    int k = 0;
    pd_tensor view;

    for (int64_t start = 0; start < m; start += MCE_CHUNK) {
        int64_t len = m - start < MCE_CHUNK ? m - start : MCE_CHUNK;
        pd_shape s = pd_shape_make(1, len);
        pd_tensor_view(&view, dev, PD_I32, &s, (int32_t *)l->in[1]->data + start);
        PD_CHECK(pd_tensor_copy_to_host(&view, labels, (size_t)len * sizeof(*labels)));
        for (int64_t i = 0; i < len; i++) {
            if (labels[i] == hp->ignore)
                continue;
            if (labels[i] < 0 || labels[i] >= classes)
                return PD_ERROR(PD_EINVAL, "layer '%s': label %lld is %d, outside [0, %lld) and not the ignored %d",
                                l->name, (long long)(start + i), (int)labels[i], (long long)classes, hp->ignore);
            rows[k] = (int32_t)(start + i);
            targets[k++] = labels[i];
            if (k == MCE_CHUNK) {
                PD_CHECK(mce_flush(l, dev, m, done, rows, targets, k));
                done += k;
                k = 0;
            }
        }
    }
    PD_CHECK(mce_flush(l, dev, m, done, rows, targets, k));
    done += k;
    int32_t stored = (int32_t)done;
    PD_CHECK(pd_tensor_copy_from_host(index_view(l, dev, 2 * m, 1, &view), &stored, sizeof(stored)));
    *count = done;
    return PD_OK;
}

/* Views of the counted rows' indices and targets, and of the first `count`
 * rows of the probabilities and packed logits. */
typedef struct mce_views {
    pd_tensor rows, targets, probs, packed;
} mce_views;

static void mce_bind(pd_layer *l, pd_device *dev, int64_t count, mce_views *v)
{
    const int64_t m = l->in_shape[0].dim[0], classes = l->in_shape[0].dim[1];
    pd_shape s = pd_shape_make(2, count, classes);

    index_view(l, dev, 0, count, &v->rows);
    index_view(l, dev, m, count, &v->targets);
    pd_tensor_view(&v->probs, dev, PD_F32, &s, l->saved[MCE_PROBS].data);
    pd_tensor_view(&v->packed, dev, PD_F32, &s, l->saved[MCE_PACKED].data);
}

static pd_status mce_forward(pd_layer *l, pd_device *dev, bool training)
{
    int64_t count;
    mce_views v;

    PD_CHECK(mce_pack(l, dev, &count));
    if (count == 0)
        return dev->ops->fill(dev, l->out, 0.0f); /* nothing to predict: no loss */
    mce_bind(l, dev, count, &v);
    PD_CHECK(dev->ops->embedding_forward(dev, &v.rows, l->in[0], &v.packed));
    return dev->ops->softmax_cross_entropy_forward(dev, &v.packed, &v.targets, &v.probs, l->out);
}

static pd_status mce_backward(pd_layer *l, pd_device *dev)
{
    const int64_t m = l->in_shape[0].dim[0];
    int32_t count;
    float dloss;
    pd_tensor view;
    mce_views v;

    if (!l->d_in[0])
        return PD_OK;
    PD_CHECK(pd_tensor_copy_to_host(index_view(l, dev, 2 * m, 1, &view), &count, sizeof(count)));
    if (count == 0)
        return dev->ops->fill(dev, l->d_in[0], 0.0f);
    PD_CHECK(pd_tensor_copy_to_host(l->d_out, &dloss, sizeof(dloss)));
    mce_bind(l, dev, count, &v);
    PD_CHECK(dev->ops->softmax_cross_entropy_backward(dev, &v.probs, &v.targets, dloss, &v.packed));
    /* Zeroes the rows that did not count and places the others. */
    return dev->ops->embedding_backward(dev, &v.rows, &v.packed, l->d_in[0]);
}

static const pd_layer_class mce_class = {
    .type = "masked_cross_entropy",
    .min_inputs = 2,
    .max_inputs = 2,
    .setup = mce_setup,
    .forward = mce_forward,
    .backward = mce_backward,
};

/* ---- the model ------------------------------------------------------------ */

pd_status pd_model_s2vt(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    pd_model_io got = {0};
    int x, frames, words, joined;

    PD_CHECK(pd_model_check_options(opts));
    const int64_t n = opts->batch, t_frames = opts->height, t_words = opts->width, feats = opts->channels;
    const int hidden = pd_model_scale(1000, opts->width_multiplier);
    const int embed = pd_model_scale(500, opts->width_multiplier);
    pd_shape images = pd_shape_make(3, n, t_frames, feats);
    pd_shape word_ids = pd_shape_make(2, n, t_words);
    pd_shape labels = pd_shape_make(1, n * t_words);

    PD_CHECK(pd_graph_input(g, "images", PD_F32, &images, false, &got.images));
    PD_CHECK(pd_graph_input(g, "words", PD_I32, &word_ids, false, &got.words));
    PD_CHECK(pd_graph_input(g, "labels", PD_I32, &labels, false, &got.labels));

    /* Encoder input: projected frames, then zeros while decoding. */
    PD_CHECK(add_reshape(g, "frames_flat", got.images, pd_shape_make(2, n * t_frames, feats), &x));
    PD_CHECK(pd_graph_linear(g, "frame_proj", x, embed, true, &x));
    PD_CHECK(add_reshape(g, "frames_seq", x, pd_shape_make(3, n, t_frames, (int64_t)embed), &x));
    PD_CHECK(add_time_layer(g, &time_pad_class, "frames_pad", x, 0, t_words, &x));
    PD_CHECK(pd_graph_lstm(g, "lstm1", x, hidden, &frames));

    /* Decoder input: zeros (<pad>) while encoding, then the previous words. */
    PD_CHECK(pd_graph_embedding(g, "embedding", got.words, opts->classes, embed, &x));
    PD_CHECK(add_time_layer(g, &time_pad_class, "words_pad", x, t_frames, 0, &words));
    const int both[2] = {frames, words};
    PD_CHECK(pd_graph_concat(g, "lstm2_in", 2, both, 2, &joined));
    PD_CHECK(pd_graph_lstm(g, "lstm2", joined, hidden, &x));

    /* Words come out of the decoding steps only. */
    PD_CHECK(add_time_layer(g, &time_slice_class, "decode", x, t_frames, 0, &x));
    PD_CHECK(add_reshape(g, "decode_flat", x, pd_shape_make(2, n * t_words, (int64_t)hidden), &x));
    PD_CHECK(pd_graph_linear(g, "out", x, opts->classes, true, &got.logits));
    mce_hparams loss = {PD_S2VT_IGNORE};
    const int loss_in[2] = {got.logits, got.labels};
    PD_CHECK(pd_graph_add_layer(g, &mce_class, "loss", &loss, sizeof(loss), 2, loss_in, &got.loss));
    *io = got;
    return PD_OK;
}
