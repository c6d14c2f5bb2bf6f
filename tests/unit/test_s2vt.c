/* S2VT: the model against an independent double-precision reference (loss
 * and, by central differences, every parameter's gradient), its parameter
 * count at the paper's size, a learning check on the synthetic task, and the
 * data side: the two file formats byte for byte, their reader's rejection of
 * malformed files, and the minibatch layout, order, seeking and sharding. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/models.h>
#include <pipedream/sequence.h>

/* ---- helpers -------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pd_graph *build(pd_device **dev, const pd_model_options *o, pd_model_io *io, bool allocate)
{
    pd_graph *g;
    assert_int_equal(pd_device_open("cpu", dev), PD_OK);
    assert_int_equal(pd_graph_create(*dev, 3, &g), PD_OK);
    assert_int_equal(pd_model_build("s2vt", g, o, io), PD_OK);
    if (allocate)
        assert_int_equal(pd_graph_allocate(g), PD_OK);
    return g;
}

static void feed(pd_graph *g, int node, const void *data, size_t bytes)
{
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, node), data, bytes), PD_OK);
}

static float read_loss(pd_graph *g, const pd_model_io *io)
{
    float loss;
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, io->loss), &loss, sizeof(loss)), PD_OK);
    return loss;
}

/* A scratch directory and paths in it. */
typedef struct scratch {
    char dir[64];
    char features[128], captions[128];
} scratch;

static void scratch_open(scratch *s)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/test_s2vt.XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->features, sizeof(s->features), "%s/features.bin", s->dir);
    snprintf(s->captions, sizeof(s->captions), "%s/captions.txt", s->dir);
}

static void scratch_close(scratch *s)
{
    unlink(s->features);
    unlink(s->captions);
    assert_int_equal(rmdir(s->dir), 0);
}

/* ---- a double-precision reference of the whole model --------------------- */

enum { P_PROJ_W, P_PROJ_B, P_L1_WIH, P_L1_WHH, P_L1_BIH, P_L1_BHH, P_EMB, P_L2_WIH, P_L2_WHH, P_L2_BIH, P_L2_BHH,
       P_OUT_W, P_OUT_B, P_COUNT };

typedef struct ref_model {
    int n, tf, tw, f, v, h, e;
    double *p[P_COUNT];
    const float *feats;    /* [n,tf,f] */
    const int32_t *words;  /* [n,tw] */
    const int32_t *labels; /* [n*tw] */
} ref_model;

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* One LSTM step as PyTorch (gates i, f, g, o); h and c are updated. */
static void ref_lstm_step(const double *w_ih, const double *w_hh, const double *b_ih, const double *b_hh,
                          const double *x, int in, double *h, double *c, int hid)
{
    double gates[4 * 64], h_prev[64];

    assert_true(hid <= 64);
    memcpy(h_prev, h, (size_t)hid * sizeof(double));
    for (int r = 0; r < 4 * hid; r++) {
        double a = b_ih[r] + b_hh[r];
        for (int k = 0; k < in; k++)
            a += w_ih[r * in + k] * x[k];
        for (int k = 0; k < hid; k++)
            a += w_hh[r * hid + k] * h_prev[k];
        gates[r] = a;
    }
    for (int j = 0; j < hid; j++) {
        double i = sigmoid(gates[j]), f = sigmoid(gates[hid + j]), g = tanh(gates[2 * hid + j]);
        double o = sigmoid(gates[3 * hid + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * tanh(c[j]);
    }
}

/* The mean cross-entropy over the targets that are not IGNORE. */
static double ref_loss(const ref_model *m)
{
    const int h = m->h, e = m->e;
    double total = 0;
    int count = 0;

    for (int n = 0; n < m->n; n++) {
        double h1[64] = {0}, c1[64] = {0}, h2[64] = {0}, c2[64] = {0}, x1[64], x2[128], logits[64];
        for (int t = 0; t < m->tf + m->tw; t++) {
            for (int j = 0; j < e; j++) {
                x1[j] = 0;
                if (t < m->tf) {
                    x1[j] = m->p[P_PROJ_B][j];
                    for (int k = 0; k < m->f; k++)
                        x1[j] += m->p[P_PROJ_W][j * m->f + k] * m->feats[((size_t)n * m->tf + t) * m->f + k];
                }
            }
            ref_lstm_step(m->p[P_L1_WIH], m->p[P_L1_WHH], m->p[P_L1_BIH], m->p[P_L1_BHH], x1, e, h1, c1, h);
            memcpy(x2, h1, (size_t)h * sizeof(double));
            for (int j = 0; j < e; j++)
                x2[h + j] = t < m->tf ? 0 : m->p[P_EMB][m->words[n * m->tw + t - m->tf] * e + j];
            ref_lstm_step(m->p[P_L2_WIH], m->p[P_L2_WHH], m->p[P_L2_BIH], m->p[P_L2_BHH], x2, h + e, h2, c2, h);
            if (t < m->tf)
                continue;
            int label = m->labels[n * m->tw + t - m->tf];
            if (label == PD_S2VT_IGNORE)
                continue;
            double max = -INFINITY, sum = 0;
            for (int v = 0; v < m->v; v++) {
                logits[v] = m->p[P_OUT_B][v];
                for (int k = 0; k < h; k++)
                    logits[v] += m->p[P_OUT_W][v * h + k] * h2[k];
                max = logits[v] > max ? logits[v] : max;
            }
            for (int v = 0; v < m->v; v++)
                sum += exp(logits[v] - max);
            total += log(sum) + max - logits[label];
            count++;
        }
    }
    return count ? total / count : 0;
}

/* ---- the model ------------------------------------------------------------ */

static const char *const param_names[P_COUNT] = {
    "frame_proj.weight", "frame_proj.bias", "lstm1.weight_ih", "lstm1.weight_hh", "lstm1.bias_ih",
    "lstm1.bias_hh",     "embedding.weight", "lstm2.weight_ih", "lstm2.weight_hh", "lstm2.bias_ih",
    "lstm2.bias_hh",     "out.weight",       "out.bias"};

/* The parameter sizes by the formula in models.h. */
static void expected_numel(int64_t f, int64_t e, int64_t h, int64_t v, int64_t numel[P_COUNT])
{
    const int64_t sizes[P_COUNT] = {e * f, e, 4 * h * e, 4 * h * h, 4 * h, 4 * h, v * e, 4 * h * (h + e),
                                    4 * h * h, 4 * h, 4 * h, v * h, v};
    memcpy(numel, sizes, sizeof(sizes));
}

/* N=2, T_f=4, T_w=3, F=16, V=11, H=8, E=4, with one ignored target: the
 * graph's loss equals the reference's, and every parameter gradient equals
 * the reference's central differences. */
static void test_small_model_against_reference(void **state)
{
    enum { N = 2, TF = 4, TW = 3, F = 16, V = 11, H = 8, E = 4 };
    const pd_model_options o = {.batch = N, .channels = F, .height = TF, .width = TW, .classes = V,
                                .width_multiplier = 0.008f};
    float feats[N * TF * F];
    const int32_t words[N * TW] = {PD_S2VT_BOS, 5, 7, PD_S2VT_BOS, 9, PD_S2VT_PAD};
    const int32_t labels[N * TW] = {5, 7, PD_S2VT_EOS, 9, PD_S2VT_EOS, PD_S2VT_IGNORE};
    pd_device *dev;
    pd_model_io io;
    pd_param **params;
    ref_model ref = {N, TF, TW, F, V, H, E, {NULL}, feats, words, labels};
    int64_t numel[P_COUNT];
    char buf[64];

    for (int i = 0; i < N * TF * F; i++)
        feats[i] = (float)sin(0.37 * i + 0.1);
    pd_graph *g = build(&dev, &o, &io, true);
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.images), buf, sizeof(buf)), "[2,4,16]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.words), buf, sizeof(buf)), "[2,3]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.labels), buf, sizeof(buf)), "[6]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.logits), buf, sizeof(buf)), "[6,11]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, io.loss), buf, sizeof(buf)), "[1]");
    assert_string_equal(pd_shape_format(pd_graph_node_shape(g, pd_graph_find(g, "lstm2")), buf, sizeof(buf)),
                        "[2,7,8]");
    assert_int_equal(pd_graph_find(g, "words"), io.words);

    expected_numel(F, E, H, V, numel);
    assert_int_equal(pd_graph_params(g, &params), P_COUNT);
    for (int i = 0; i < P_COUNT; i++) {
        assert_string_equal(params[i]->name, param_names[i]);
        assert_int_equal(pd_shape_numel(&params[i]->value.shape), numel[i]);
        assert_true(params[i]->trainable);
        ref.p[i] = malloc((size_t)numel[i] * sizeof(double));
        float *w = malloc((size_t)numel[i] * sizeof(float));
        assert_int_equal(pd_tensor_copy_to_host(&params[i]->value, w, (size_t)numel[i] * sizeof(float)), PD_OK);
        for (int64_t k = 0; k < numel[i]; k++)
            ref.p[i][k] = w[k];
        free(w);
    }

    feed(g, io.images, feats, sizeof(feats));
    feed(g, io.words, words, sizeof(words));
    feed(g, io.labels, labels, sizeof(labels));
    assert_int_equal(pd_graph_forward(g, 0, true), PD_OK);
    float loss = read_loss(g, &io);
    double want = ref_loss(&ref);
    printf("# loss %.7f, reference %.7f\n", (double)loss, want);
    assert_true(isfinite(loss));
    assert_true(fabs(loss - want) <= 1e-5 * fabs(want));
    assert_int_equal(pd_graph_backward(g, 0, io.loss, NULL), PD_OK);

    /* Every parameter: a non-zero finite gradient equal to the reference's
     * central differences on up to 12 evenly spread elements. */
    for (int i = 0; i < P_COUNT; i++) {
        float *grad = malloc((size_t)numel[i] * sizeof(float));
        double err = 0, norm = 0, abs_sum = 0;
        assert_int_equal(pd_tensor_copy_to_host(&params[i]->grad, grad, (size_t)numel[i] * sizeof(float)), PD_OK);
        for (int64_t k = 0; k < numel[i]; k++) {
            assert_true(isfinite(grad[k]));
            abs_sum += fabs(grad[k]);
        }
        int64_t step = numel[i] > 12 ? numel[i] / 12 : 1;
        for (int64_t k = 0; k < numel[i]; k += step) {
            const double eps = 1e-6, keep = ref.p[i][k];
            ref.p[i][k] = keep + eps;
            double up = ref_loss(&ref);
            ref.p[i][k] = keep - eps;
            double down = ref_loss(&ref);
            ref.p[i][k] = keep;
            double fd = (up - down) / (2 * eps);
            err += (grad[k] - fd) * (grad[k] - fd);
            norm += fd * fd;
        }
        printf("# %-18s |grad|_1 %.3e  relative L2 error vs central differences %.2e\n", param_names[i], abs_sum,
               sqrt(err / (norm > 0 ? norm : 1)));
        assert_true(abs_sum > 0);
        assert_true(sqrt(err) <= 1e-4 * sqrt(norm) + 1e-7);
        free(grad);
    }
    for (int i = 0; i < P_COUNT; i++)
        free(ref.p[i]);
    pd_graph_destroy(g);
    pd_device_close(dev);
}

/* Every target ignored: no loss and no gradient, not NaN. */
static void test_all_targets_ignored(void **state)
{
    const pd_model_options o = {.batch = 2, .channels = 5, .height = 2, .width = 2, .classes = 6,
                                .width_multiplier = 0.004f};
    float feats[2 * 2 * 5] = {1, 2, 3};
    const int32_t words[4] = {PD_S2VT_BOS, PD_S2VT_PAD, PD_S2VT_BOS, PD_S2VT_PAD};
    const int32_t none[4] = {PD_S2VT_IGNORE, PD_S2VT_IGNORE, PD_S2VT_IGNORE, PD_S2VT_IGNORE};
    const int32_t bad[4] = {3, PD_S2VT_IGNORE, 6, 0};
    pd_device *dev;
    pd_model_io io;
    pd_param **params;
    float out[6 * 4];

    pd_graph *g = build(&dev, &o, &io, true);
    feed(g, io.images, feats, sizeof(feats));
    feed(g, io.words, words, sizeof(words));
    feed(g, io.labels, none, sizeof(none));
    assert_int_equal(pd_graph_forward(g, 0, true), PD_OK);
    assert_true(read_loss(g, &io) == 0.0f);
    assert_int_equal(pd_graph_backward(g, 0, io.loss, NULL), PD_OK);
    assert_int_equal(pd_graph_params(g, &params), P_COUNT);
    assert_int_equal(pd_tensor_copy_to_host(&params[P_OUT_B]->grad, out, 6 * sizeof(float)), PD_OK);
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == 0.0f);

    /* A target outside the vocabulary that is not IGNORE is named. */
    feed(g, io.labels, bad, sizeof(bad));
    assert_int_equal(pd_graph_forward(g, 1, true), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "layer 'loss': label 2 is 6, outside [0, 6)"));
    pd_graph_destroy(g);
    pd_device_close(dev);
}

/* The paper's size: H=1000, E=500, F=4096 (VGG fc7), V=10000. */
static void test_paper_parameter_count(void **state)
{
    const pd_model_options o = {.batch = 1, .channels = 4096, .height = 80, .width = 20, .classes = 10000,
                                .width_multiplier = 1};
    pd_device *dev;
    pd_model_io io;
    pd_param **params;
    int64_t numel[P_COUNT], total = 0;

    pd_graph *g = build(&dev, &o, &io, false);
    expected_numel(4096, 500, 1000, 10000, numel);
    assert_int_equal(pd_graph_params(g, &params), P_COUNT);
    for (int i = 0; i < P_COUNT; i++) {
        assert_string_equal(params[i]->name, param_names[i]);
        assert_int_equal(pd_shape_numel(&params[i]->value.shape), numel[i]);
        total += numel[i];
    }
    /* frame_proj 4097*500 + lstm1 4000*1500 + 8000 + embedding 10000*500
     * + lstm2 4000*2500 + 8000 + out 1001*10000, added by hand. */
    assert_int_equal(total, 33074500);
    assert_int_equal(pd_graph_param_count(g), 33074500);
    assert_non_null(strstr(pd_model_description("s2vt"), "33,074,500"));
    pd_graph_destroy(g);
    pd_device_close(dev);
}

/* Adam on the synthetic task: the loss falls from about log(V) and the
 * model predicts every word (the first word of each caption depends only on
 * the video, so this needs the encoder). */
static void test_learns_synthetic_captions(void **state)
{
    enum { B = 16, TF = 5, F = 12, V = 16, MAXW = 4, TW = MAXW + 1, STEPS = 100 };
    const pd_s2vt_synthetic_options so = {.videos = 64, .frames = TF, .features = F, .vocab = V,
                                          .max_words = MAXW, .templates = 8, .noise = 0.5f, .seed = 7};
    const pd_model_options o = {.batch = B, .channels = F, .height = TF, .width = TW, .classes = V,
                                .width_multiplier = 0.032f};
    pd_s2vt_batches_options bo = {.batch = B, .words = TW, .shuffle = true, .seed = 11, .drop_last = true};
    const pd_adam_desc adam = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    float feats[B * TF * F], logits[B * TW * V], curve[STEPS];
    int32_t words[B * TW], targets[B * TW];
    pd_s2vt_dataset *ds;
    pd_s2vt_batches *it;
    pd_optimizer *opt;
    pd_device *dev;
    pd_model_io io;
    int valid;

    assert_int_equal(pd_s2vt_synthetic(&so, &ds), PD_OK);
    assert_int_equal(pd_s2vt_batches_create(ds, &bo, &it), PD_OK);
    pd_graph *g = build(&dev, &o, &io, true);
    assert_int_equal(pd_optimizer_create_adam(g, &adam, &opt), PD_OK);
    double start = now_s();
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(pd_s2vt_batches_next(it, feats, words, targets, &valid), PD_OK);
        feed(g, io.images, feats, sizeof(feats));
        feed(g, io.words, words, sizeof(words));
        feed(g, io.labels, targets, sizeof(targets));
        assert_int_equal(pd_graph_forward(g, s, true), PD_OK);
        curve[s] = read_loss(g, &io);
        assert_int_equal(pd_graph_backward(g, s, io.loss, NULL), PD_OK);
        assert_int_equal(pd_optimizer_step(opt), PD_OK);
    }
    double seconds = now_s() - start;
    printf("# %d Adam steps in %.2f s; loss:", STEPS, seconds);
    for (int s = 0; s < STEPS; s += 10)
        printf(" [%d] %.3f", s, (double)curve[s]);
    printf(" [%d] %.3f\n", STEPS - 1, (double)curve[STEPS - 1]);

    double last = 0;
    for (int s = STEPS - 10; s < STEPS; s++)
        last += curve[s] / 10.0;
    assert_true(fabs(curve[0] - log(V)) < 0.5);
    assert_true(last < 0.1 * curve[0]);

    /* Teacher-forced predictions over one epoch in evaluation mode. */
    int right = 0, counted = 0, first_right = 0, firsts = 0;
    for (int64_t b = 0; b < pd_s2vt_batches_per_epoch(it); b++) {
        assert_int_equal(pd_s2vt_batches_next(it, feats, words, targets, &valid), PD_OK);
        feed(g, io.images, feats, sizeof(feats));
        feed(g, io.words, words, sizeof(words));
        feed(g, io.labels, targets, sizeof(targets));
        assert_int_equal(pd_graph_forward(g, STEPS + b, false), PD_OK);
        assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, io.logits), logits, sizeof(logits)), PD_OK);
        for (int r = 0; r < B * TW; r++) {
            if (targets[r] == PD_S2VT_IGNORE)
                continue;
            int best = 0;
            for (int v = 1; v < V; v++)
                best = logits[r * V + v] > logits[r * V + best] ? v : best;
            right += best == targets[r];
            counted++;
            if (r % TW == 0) {
                first_right += best == targets[r];
                firsts++;
            }
        }
    }
    /* Without the frames no model beats the most frequent first word. */
    int most = 0;
    for (int w = 0; w < V; w++) {
        int k = 0;
        for (int64_t c = 0; c < ds->captions; c++)
            k += ds->words[ds->offset[c]] == w;
        most = k > most ? k : most;
    }
    printf("# accuracy %d/%d words, %d/%d first words (%lld/%lld without the video)\n", right, counted,
           first_right, firsts, (long long)most, (long long)ds->captions);
    assert_true(most <= 0.5 * ds->captions);
    assert_true(right >= 0.95 * counted);
    assert_true(first_right >= 0.95 * firsts);
    pd_optimizer_destroy(opt);
    pd_graph_destroy(g);
    pd_device_close(dev);
    pd_s2vt_batches_destroy(it);
    pd_s2vt_destroy(ds);
}

/* ---- files ---------------------------------------------------------------- */

/* 3 videos of 2 frames x 3 features, vocabulary 9; video 0 has two
 * captions, video 1 none. */
static float hand_feats[3 * 2 * 3] = {0.5f, -1, 2, 3.25f, 4, 5, 6, 7, 8, 9, 10, 11, -12, 13, 14, 15, 16, 1e-3f};
static int32_t hand_video[4] = {0, 2, 0, 2};
static int64_t hand_offset[5] = {0, 3, 4, 6, 8};
static int32_t hand_words[8] = {5, 8, 4, 3, 7, 7, 6, 5};

static pd_s2vt_dataset hand_dataset(void)
{
    pd_s2vt_dataset ds = {3, 2, 3, 9, hand_feats, 4, hand_video, hand_offset, hand_words};
    return ds;
}

static void assert_same_dataset(const pd_s2vt_dataset *a, const pd_s2vt_dataset *b)
{
    assert_int_equal(a->videos, b->videos);
    assert_int_equal(a->frames, b->frames);
    assert_int_equal(a->features, b->features);
    assert_int_equal(a->vocab, b->vocab);
    assert_int_equal(a->captions, b->captions);
    assert_memory_equal(a->feats, b->feats, (size_t)(a->videos * a->frames * a->features) * sizeof(float));
    assert_memory_equal(a->video, b->video, (size_t)a->captions * sizeof(int32_t));
    assert_memory_equal(a->offset, b->offset, (size_t)(a->captions + 1) * sizeof(int64_t));
    assert_memory_equal(a->words, b->words, (size_t)a->offset[a->captions] * sizeof(int32_t));
}

static void test_file_round_trip(void **state)
{
    pd_s2vt_dataset hand = hand_dataset(), *back;
    const pd_s2vt_synthetic_options so = {.videos = 10, .frames = 3, .features = 4, .vocab = 50, .max_words = 6,
                                          .templates = 3, .noise = 0.1f, .seed = 1};
    pd_s2vt_dataset *syn;
    scratch s;
    size_t n;

    scratch_open(&s);
    assert_int_equal(pd_s2vt_write(&hand, s.features, s.captions), PD_OK);

    /* The bytes, by the format's definition. */
    unsigned char *raw = test_read_file(s.features, &n);
    assert_int_equal(n, 24 + 4 * 18);
    assert_memory_equal(raw, "PDS2VTF1", 8);
    const unsigned char counts[16] = {3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0};
    assert_memory_equal(raw + 8, counts, 16);
    const unsigned char three_and_a_quarter[4] = {0x00, 0x00, 0x50, 0x40}; /* 3.25f little-endian */
    assert_memory_equal(raw + 24 + 4 * 3, three_and_a_quarter, 4);
    free(raw);
    char *text = (char *)test_read_file(s.captions, &n);
    assert_string_equal(text, "PDS2VTC1 9\n0\t5 8 4\n2\t3\n0\t7 7\n2\t6 5\n");
    free(text);

    assert_int_equal(pd_s2vt_load(s.features, s.captions, &back), PD_OK);
    assert_same_dataset(&hand, back);
    pd_s2vt_destroy(back);

    /* Synthetic data: written, read back identical; same seed, same data. */
    assert_int_equal(pd_s2vt_synthetic(&so, &syn), PD_OK);
    assert_int_equal(syn->captions, 10);
    for (int64_t c = 0; c < 10; c++) {
        int64_t len = syn->offset[c + 1] - syn->offset[c];
        assert_true(len >= 1 && len <= 6);
        /* Videos of one template share the caption. */
        if (c >= 3) {
            assert_int_equal(len, syn->offset[c - 2] - syn->offset[c - 3]);
            assert_memory_equal(syn->words + syn->offset[c], syn->words + syn->offset[c - 3],
                                (size_t)len * sizeof(int32_t));
        }
    }
    assert_int_equal(pd_s2vt_write(syn, s.features, s.captions), PD_OK);
    assert_int_equal(pd_s2vt_load(s.features, s.captions, &back), PD_OK);
    assert_same_dataset(syn, back);
    pd_s2vt_destroy(back);
    assert_int_equal(pd_s2vt_synthetic(&so, &back), PD_OK);
    assert_same_dataset(syn, back);
    pd_s2vt_destroy(back);
    pd_s2vt_destroy(syn);

    /* An inconsistent data set is not written. */
    hand.words[1] = 9;
    assert_int_equal(pd_s2vt_write(&hand, s.features, s.captions), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "caption 0, word 1: id 9 outside [3, 9)"));
    hand.words[1] = 8;
    scratch_close(&s);
}

/* Loads `features` bytes and `captions` text; expects `status` and a
 * message containing "<file name><where>" and `what`. */
static void expect_rejected(scratch *s, const void *features, size_t features_bytes, const char *captions,
                            pd_status status, const char *file, const char *where, const char *what)
{
    pd_s2vt_dataset *ds = NULL;
    char named[256];

    test_write_file(s->features, features, features_bytes);
    test_write_file(s->captions, captions, strlen(captions));
    assert_int_equal(pd_s2vt_load(s->features, s->captions, &ds), status);
    assert_null(ds);
    snprintf(named, sizeof(named), "%s%s", strcmp(file, "features") == 0 ? s->features : s->captions, where);
    if (!strstr(pd_last_error(), named) || !strstr(pd_last_error(), what))
        fail_msg("message \"%s\" lacks \"%s\" or \"%s\"", pd_last_error(), named, what);
}

static void test_malformed_files_rejected(void **state)
{
    unsigned char good[24 + 4 * 6] = "PDS2VTF1", bad[sizeof(good) + 4] = {0};
    const unsigned char counts[16] = {2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0}; /* N=2, T=1, F=3 */
    const char *ok = "PDS2VTC1 9\n0\t3 4\n1\t8\n";
    pd_s2vt_dataset *ds;
    scratch s;

    memcpy(good + 8, counts, sizeof(counts));
    scratch_open(&s);
    test_write_file(s.features, good, sizeof(good));
    test_write_file(s.captions, ok, strlen(ok));
    assert_int_equal(pd_s2vt_load(s.features, s.captions, &ds), PD_OK);
    assert_int_equal(ds->captions, 2);
    pd_s2vt_destroy(ds);

    /* Features. */
    memcpy(bad, good, sizeof(good));
    bad[7] = '2';
    expect_rejected(&s, bad, sizeof(good), ok, PD_EFORMAT, "features", ":", "not an S2VT features file");
    expect_rejected(&s, good, 4, ok, PD_EFORMAT, "features", ":", "not an S2VT features file");
    expect_rejected(&s, good, 12, ok, PD_EFORMAT, "features", ":", "truncated header (12 of 24 bytes)");
    expect_rejected(&s, good, sizeof(good) - 4, ok, PD_EFORMAT, "features", ":", "truncated");
    memcpy(bad, good, sizeof(good));
    expect_rejected(&s, bad, sizeof(good) + 4, ok, PD_EFORMAT, "features", ":", "4 trailing bytes");
    bad[8] = 0;
    expect_rejected(&s, bad, sizeof(good), ok, PD_EFORMAT, "features", ":", "N=0 videos");
    memcpy(bad, good, sizeof(good));
    bad[20] = 0xff, bad[21] = 0xff, bad[22] = 0xff, bad[23] = 0x7f; /* F = 2^31-1: far beyond the file */
    expect_rejected(&s, bad, sizeof(good), ok, PD_EFORMAT, "features", ":", "truncated");
    memcpy(bad, good, sizeof(good));
    const float nan = NAN;
    memcpy(bad + 24 + 4 * 4, &nan, 4);
    expect_rejected(&s, bad, sizeof(good), ok, PD_EFORMAT, "features", ":", "feature [1,0,1]");

    /* Captions. */
    expect_rejected(&s, good, sizeof(good), "", PD_EFORMAT, "captions", ":", "empty file");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC2 9\n0\t3\n", PD_EFORMAT, "captions", ":1:",
                    "not an S2VT captions file");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 nine\n0\t3\n", PD_EFORMAT, "captions", ":1:", "header");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 3\n0\t3\n", PD_EFORMAT, "captions", ":1:",
                    "leaves no word id");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n", PD_EFORMAT, "captions", ":", "no caption lines");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t3 4\n1\t3 9\n", PD_EFORMAT, "captions", ":3:",
                    "word id 9 outside [3, 9)");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t2\n", PD_EFORMAT, "captions", ":2:",
                    "word id 2 outside [3, 9) (ids below 3 are reserved)");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n2\t3\n", PD_EFORMAT, "captions", ":2:",
                    "video 2 outside [0, 2)");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0 3 4\n", PD_EFORMAT, "captions", ":2:",
                    "expected '<video index><TAB><word ids>'");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n-1\t3\n", PD_EFORMAT, "captions", ":2:",
                    "expected '<video index><TAB><word ids>'");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t3\n\n", PD_EFORMAT, "captions", ":3:",
                    "expected '<video index><TAB><word ids>'");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t\n", PD_EFORMAT, "captions", ":2:",
                    "expected a word id at column 3");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t3  4\n", PD_EFORMAT, "captions", ":2:",
                    "expected a word id at column 5");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t3 4x\n", PD_EFORMAT, "captions", ":2:",
                    "unexpected character 0x78 at column 6");
    expect_rejected(&s, good, sizeof(good), "PDS2VTC1 9\n0\t3 99999999999\n", PD_EFORMAT, "captions", ":2:",
                    "expected a word id");

    /* Line ends: CRLF and a last line without one are fine. */
    test_write_file(s.captions, "PDS2VTC1 9\r\n0\t3 4\r\n1\t8", 22);
    assert_int_equal(pd_s2vt_load(s.features, s.captions, &ds), PD_OK);
    assert_int_equal(ds->captions, 2);
    assert_int_equal(ds->words[2], 8);
    pd_s2vt_destroy(ds);

    /* Missing files. */
    unlink(s.captions);
    assert_int_equal(pd_s2vt_load(s.features, s.captions, &ds), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "captions.txt: no such file"));
    unlink(s.features);
    assert_int_equal(pd_s2vt_load(s.features, s.captions, &ds), PD_ENOTFOUND);
    assert_non_null(strstr(pd_last_error(), "features.bin: no such file"));
    scratch_close(&s);
}

/* ---- minibatches ---------------------------------------------------------- */

static void test_batch_layout(void **state)
{
    pd_s2vt_dataset hand = hand_dataset();
    pd_s2vt_batches_options bo = {.batch = 3, .words = 3};
    float feats[3 * 6];
    int32_t words[3 * 3], targets[3 * 3];
    pd_s2vt_batches *it;
    int valid;

    assert_int_equal(pd_s2vt_batches_create(&hand, &bo, &it), PD_OK);
    assert_int_equal(pd_s2vt_batches_per_epoch(it), 2);
    assert_int_equal(pd_s2vt_batches_next(it, feats, words, targets, &valid), PD_OK);
    assert_int_equal(valid, 3);
    /* Captions 0 (video 0, "5 8 4": truncated, no EOS), 1 (video 2, "3"),
     * 2 (video 0, "7 7"). */
    assert_memory_equal(feats, hand_feats, 6 * sizeof(float));
    assert_memory_equal(feats + 6, hand_feats + 12, 6 * sizeof(float));
    assert_memory_equal(feats + 12, hand_feats, 6 * sizeof(float));
    const int32_t want_words[9] = {1, 5, 8, 1, 3, 2, 1, 7, 7};
    const int32_t want_targets[9] = {5, 8, 4, 3, 2, -1, 7, 7, 2};
    assert_memory_equal(words, want_words, sizeof(want_words));
    assert_memory_equal(targets, want_targets, sizeof(want_targets));
    assert_int_equal(pd_s2vt_batches_position(it), 1);

    /* The last minibatch is partial: padding rows are zeros, PAD, IGNORE. */
    assert_int_equal(pd_s2vt_batches_next(it, feats, words, targets, &valid), PD_OK);
    assert_int_equal(valid, 1);
    const int32_t want_words2[9] = {1, 6, 5, 0, 0, 0, 0, 0, 0};
    const int32_t want_targets2[9] = {6, 5, 2, -1, -1, -1, -1, -1, -1};
    assert_memory_equal(words, want_words2, sizeof(want_words2));
    assert_memory_equal(targets, want_targets2, sizeof(want_targets2));
    for (int i = 6; i < 18; i++)
        assert_true(feats[i] == 0.0f);
    assert_int_equal(pd_s2vt_batches_epoch(it), 1);
    pd_s2vt_batches_destroy(it);

    /* Bad options. */
    bo.words = 0;
    assert_int_equal(pd_s2vt_batches_create(&hand, &bo, &it), PD_EINVAL);
    bo.words = 3;
    bo.batch = 5;
    bo.drop_last = true;
    assert_int_equal(pd_s2vt_batches_create(&hand, &bo, &it), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "leave no minibatch"));
    bo.batch = 1;
    bo.shard = 2;
    bo.num_shards = 2;
    assert_int_equal(pd_s2vt_batches_create(&hand, &bo, &it), PD_EINVAL);
}

/* The targets of the next `count` minibatches, concatenated. */
static void collect(pd_s2vt_batches *it, int count, int rows, int w, int32_t *out)
{
    float feats[8 * 2 * 2];
    int32_t words[8 * 8];
    int valid;

    for (int b = 0; b < count; b++) {
        assert_int_equal(pd_s2vt_batches_next(it, feats, words, out + b * rows * w, &valid), PD_OK);
        assert_int_equal(valid, rows);
    }
}

static int compare_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void test_batch_order_seek_and_shards(void **state)
{
    /* 48 videos with distinct one-word captions: the targets name the sample. */
    enum { C = 48, B = 4, W = 2, K = C / B };
    const pd_s2vt_synthetic_options so = {.videos = C, .frames = 2, .features = 2, .vocab = C + 3, .max_words = 1,
                                          .templates = C, .seed = 5};
    pd_s2vt_batches_options bo = {.batch = B, .words = W, .shuffle = true, .seed = 9, .drop_last = true};
    int32_t epoch0[C * W], epoch1[C * W], again[C * W], shard[2][C * W];
    pd_s2vt_dataset *ds;
    pd_s2vt_batches *it, *other;

    assert_int_equal(pd_s2vt_synthetic(&so, &ds), PD_OK);
    assert_int_equal(pd_s2vt_batches_create(ds, &bo, &it), PD_OK);
    collect(it, K, B, W, epoch0);
    collect(it, K, B, W, epoch1);
    /* Each epoch is a permutation of the captions (one word, then EOS). */
    int32_t got[C], want[C];
    for (int c = 0; c < C; c++) {
        assert_int_equal(epoch1[c * W + 1], PD_S2VT_EOS);
        got[c] = epoch0[c * W];
        want[c] = ds->words[c];
    }
    qsort(got, C, sizeof(int32_t), compare_i32);
    qsort(want, C, sizeof(int32_t), compare_i32);
    assert_memory_equal(got, want, sizeof(got));
    assert_memory_not_equal(epoch0, epoch1, sizeof(epoch0));

    /* The same seed gives the same epochs; seeking reproduces epoch 1. */
    assert_int_equal(pd_s2vt_batches_create(ds, &bo, &other), PD_OK);
    collect(other, K, B, W, again);
    assert_memory_equal(again, epoch0, sizeof(epoch0));
    assert_int_equal(pd_s2vt_batches_seek(other, 1, 3), PD_OK);
    collect(other, K - 3, B, W, again);
    assert_memory_equal(again, epoch1 + 3 * B * W, (size_t)(K - 3) * B * W * sizeof(int32_t));
    assert_int_equal(pd_s2vt_batches_seek(other, 0, K + 1), PD_EINVAL);
    pd_s2vt_batches_destroy(other);

    /* Two shards: minibatches 0, 2, 4, ... and 1, 3, 5, ... of epoch 0. */
    for (int s = 0; s < 2; s++) {
        bo.shard = s;
        bo.num_shards = 2;
        assert_int_equal(pd_s2vt_batches_create(ds, &bo, &other), PD_OK);
        assert_int_equal(pd_s2vt_batches_per_epoch(other), K / 2);
        collect(other, K / 2, B, W, shard[s]);
        pd_s2vt_batches_destroy(other);
    }
    for (int b = 0; b < K; b++)
        assert_memory_equal(shard[b % 2] + (b / 2) * B * W, epoch0 + b * B * W, B * W * sizeof(int32_t));
    pd_s2vt_batches_destroy(it);
    pd_s2vt_destroy(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_model_against_reference),
        cmocka_unit_test(test_all_targets_ignored),
        cmocka_unit_test(test_paper_parameter_count),
        cmocka_unit_test(test_learns_synthetic_captions),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_malformed_files_rejected),
        cmocka_unit_test(test_batch_layout),
        cmocka_unit_test(test_batch_order_seek_and_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
