/* Antialiased bilinear resampling of a box of an 8-bit image: the filter of
 * PIL's BILINEAR (a triangle of radius 1, stretched by the scale factor when
 * shrinking so every source pixel contributes), computed separably: the
 * source rows the box needs are resampled horizontally into float rows, then
 * each output row is a weighted sum of those. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "data/pd_data_int.h"

/* Grows a buffer to hold `need` elements of `size` bytes. */
static pd_status grow(void **buf, size_t *cap, size_t need, size_t size)
{
    void *p;

    if (need <= *cap)
        return PD_OK;
    if (!(p = realloc(*buf, need * size)))
        return PD_ERROR(PD_ENOMEM, "resample: out of host memory for %zu scratch elements", need);
    *buf = p;
    *cap = need;
    return PD_OK;
}

/* The most taps one output pixel can have along an axis. */
static int max_taps(double len, int out)
{
    double scale = len / out, support = scale > 1 ? scale : 1;
    return (int)ceil(2 * support) + 2;
}

/* For each output position o in [0, out): the first source index, the tap
 * count and `taps` weights summing to 1, for source positions [in0, in0+len)
 * of an axis of `in` pixels. */
static void axis_coeffs(double in0, double len, int in, int out, int taps, int *spans, float *weights)
{
    const double scale = len / out, filter = scale > 1 ? scale : 1, support = filter;

    for (int o = 0; o < out; o++) {
        const double center = in0 + (o + 0.5) * scale;
        float *w = weights + (size_t)o * taps;
        int lo = (int)floor(center - support + 0.5), hi = (int)floor(center + support + 0.5);
        double total = 0;

        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        if (hi - lo > taps)
            hi = lo + taps;
        for (int k = 0; k < taps; k++) {
            double x = fabs((lo + k + 0.5 - center) / filter);
            w[k] = k < hi - lo && x < 1 ? (float)(1 - x) : 0.0f;
            total += w[k];
        }
        if (!(total > 0)) {
            /* The box lies outside the image here: take the nearest pixel. */
            lo = center < 0 ? 0 : center >= in ? in - 1 : (int)center;
            hi = lo + 1;
            w[0] = 1;
            total = 1;
        }
        spans[2 * o] = lo;
        spans[2 * o + 1] = hi - lo;
        for (int k = 0; k < taps; k++)
            w[k] = (float)(w[k] / total);
    }
}

pd_status pd_resample_box(pd_resample_scratch *s, const uint8_t *pixels, int h, int w, double x0, double y0,
                          double bw, double bh, bool flip, const pd_sample_geometry *g, float *image)
{
    const int H = g->height, W = g->width, C = g->channels;
    const int tx = max_taps(bw, W), ty = max_taps(bh, H);

    PD_CHECK(grow((void **)&s->spans, &s->spans_cap, 2 * ((size_t)W + H), sizeof(*s->spans)));
    PD_CHECK(grow((void **)&s->weights, &s->weights_cap, (size_t)W * tx + (size_t)H * ty, sizeof(*s->weights)));
    int *xspan = s->spans, *yspan = s->spans + 2 * W;
    float *xw = s->weights, *yw = s->weights + (size_t)W * tx;
    axis_coeffs(x0, bw, w, W, tx, xspan, xw);
    axis_coeffs(y0, bh, h, H, ty, yspan, yw);

    /* The source rows any output row reads. */
    int row_lo = yspan[0], row_hi = yspan[0] + yspan[1];
    for (int y = 1; y < H; y++) {
        if (yspan[2 * y] < row_lo)
            row_lo = yspan[2 * y];
        if (yspan[2 * y] + yspan[2 * y + 1] > row_hi)
            row_hi = yspan[2 * y] + yspan[2 * y + 1];
    }
    const size_t row_floats = (size_t)W * C;
    PD_CHECK(grow((void **)&s->rows, &s->rows_cap, (size_t)(row_hi - row_lo + 1) * row_floats, sizeof(*s->rows)));

    for (int r = row_lo; r < row_hi; r++) {
        const uint8_t *src = pixels + (size_t)r * w * C;
        float *dst = s->rows + (size_t)(r - row_lo) * row_floats;
        for (int x = 0; x < W; x++) {
            const int first = xspan[2 * x], n = xspan[2 * x + 1];
            const float *wt = xw + (size_t)x * tx;
            if (C == 3) { /* the common case, all channels in one sweep */
                const uint8_t *p = src + (size_t)first * 3;
                float a0 = 0, a1 = 0, a2 = 0;
                for (int k = 0; k < n; k++, p += 3) {
                    a0 += wt[k] * p[0];
                    a1 += wt[k] * p[1];
                    a2 += wt[k] * p[2];
                }
                dst[(size_t)x * 3] = a0;
                dst[(size_t)x * 3 + 1] = a1;
                dst[(size_t)x * 3 + 2] = a2;
                continue;
            }
            for (int c = 0; c < C; c++) {
                const uint8_t *p = src + (size_t)first * C + c;
                float acc = 0;
                for (int k = 0; k < n; k++)
                    acc += wt[k] * p[(size_t)k * C];
                dst[(size_t)x * C + c] = acc;
            }
        }
    }

    float scale[3], shift[3];
    for (int c = 0; c < C; c++) {
        scale[c] = 1.0f / (255.0f * g->std[c]);
        shift[c] = g->mean[c] / g->std[c];
    }
    /* Vertical pass: whole rows at a time (contiguous, vectorisable), the
     * last row of `rows` scratch holding the sum. */
    float *acc = s->rows + (size_t)(row_hi - row_lo) * row_floats;
    for (int y = 0; y < H; y++) {
        const int first = yspan[2 * y], n = yspan[2 * y + 1];
        const float *wt = yw + (size_t)y * ty;
        for (size_t i = 0; i < row_floats; i++)
            acc[i] = 0;
        for (int k = 0; k < n; k++) {
            const float *src = s->rows + (size_t)(first + k - row_lo) * row_floats, wk = wt[k];
            for (size_t i = 0; i < row_floats; i++)
                acc[i] += wk * src[i];
        }
        for (int c = 0; c < C; c++) {
            float *dst = image + ((size_t)c * H + y) * W;
            for (int x = 0; x < W; x++)
                dst[flip ? W - 1 - x : x] = acc[(size_t)x * C + c] * scale[c] - shift[c];
        }
    }
    return PD_OK;
}

void pd_resample_scratch_free(pd_resample_scratch *s)
{
    free(s->rows);
    free(s->spans);
    free(s->weights);
    s->rows = NULL;
    s->spans = NULL;
    s->weights = NULL;
    s->rows_cap = s->spans_cap = s->weights_cap = 0;
}
