/* CPU kernels: 2-D convolution (NCHW, stride, padding, dilation, groups) as
 * im2col/col2im plus one sgemm per chunk of images and group. The column
 * matrix of a chunk of nb images holds all groups: rows (c, r, s), columns
 * (image, p, q), so group g's operand is the contiguous row block
 * [g*Cg*R*S, (g+1)*Cg*R*S) with leading dimension nb*P*Q; chunks of several
 * images (small feature maps) give sgemm a wider operand, and their outputs
 * and output gradients pass through a [K, nb*P*Q] staging matrix. A 1x1,
 * stride-1, unpadded convolution takes one image per chunk and uses the
 * image itself as its column matrix.
 *
 * Threading: with at least as many images as threads, the threads split the
 * chunks in one parallel region per call, each with its own column and
 * staging matrices in the device scratch buffer and sequential products (the
 * filter gradient: one partial sum per thread, added in thread order, so a
 * run is reproducible for a thread count). With fewer images the chunks run
 * in sequence and im2col, col2im and sgemm split each one. */
#include "config.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/pd_cpu.h"

/* Below this many column elements a single thread is faster. */
#define CONV_PARALLEL_MIN 32768
/* Images are gathered into one chunk while its column matrix stays below
 * this many floats (256 KiB, within a core's L2 cache). */
#define CONV_CHUNK_FLOATS 65536
/* Threads take whole chunks only while their scratch stays below this many
 * floats (64 MiB): large images (VGG at 224x224 on many cores) are split
 * inside instead. */
#define CONV_THREAD_SCRATCH_MAX ((int64_t)1 << 24)

typedef struct conv_geom {
    int64_t n, c, h, w;   /* input */
    int64_t k, p, q;      /* output channels and spatial size */
    int64_t cg, kg;       /* input and output channels per group */
    int64_t crs;          /* rows of one group's column block: Cg*R*S */
    int64_t rows;         /* rows of one image's column matrix: C*R*S */
    int64_t pq;           /* columns of the column matrix */
    bool direct;          /* the image is its own column matrix */
    const pd_conv2d_desc *d;
} conv_geom;

/* The geometry of a convolution whose arguments pd_kernel_check_conv2d_*
 * accepted. */
static void conv_geometry(const pd_conv2d_desc *d, const pd_conv2d_dims *dims, conv_geom *g)
{
    g->n = dims->n;
    g->c = dims->c;
    g->h = dims->h;
    g->w = dims->w;
    g->k = dims->k;
    g->p = dims->p;
    g->q = dims->q;
    g->cg = g->c / d->groups;
    g->kg = g->k / d->groups;
    g->crs = g->cg * d->kernel_h * d->kernel_w;
    g->rows = g->c * d->kernel_h * d->kernel_w;
    g->pq = g->p * g->q;
    g->direct = d->kernel_h == 1 && d->kernel_w == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
                d->pad_w == 0;
    g->d = d;
}

static int thread_index(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* This thread's share [*lo, *hi) of [0, n) in the current parallel region. */
static void thread_share(int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t threads = 1;
#ifdef _OPENMP
    threads = omp_get_num_threads();
#endif
    *lo = n * thread_index() / threads;
    *hi = n * (thread_index() + 1) / threads;
}

/* Output columns q whose input column q*stride + iw0 lies in [0, width):
 * the half-open range [*lo, *hi) within [0, q_count). */
static void valid_columns(int64_t iw0, int stride, int64_t width, int64_t q_count, int64_t *lo, int64_t *hi)
{
    int64_t first = iw0 >= 0 ? 0 : (-iw0 + stride - 1) / stride;
    int64_t end = width - 1 - iw0 < 0 ? 0 : (width - 1 - iw0) / stride + 1;

    *hi = end < q_count ? end : q_count;
    *lo = first < *hi ? first : *hi;
}

/* Where kernel tap (r, s) reads the input: the output rows [p_lo, p_hi) and
 * columns [q_lo, q_hi) whose input position lies inside it, input row
 * p*stride_h + ih0 and column q*stride_w + iw0. */
typedef struct conv_tap {
    int64_t ih0, iw0;
    int64_t p_lo, p_hi, q_lo, q_hi;
} conv_tap;

static conv_tap tap_at(const conv_geom *g, int64_t r, int64_t s)
{
    const pd_conv2d_desc *d = g->d;
    conv_tap t = {.ih0 = r * d->dilation_h - d->pad_h, .iw0 = s * d->dilation_w - d->pad_w};

    valid_columns(t.ih0, d->stride_h, g->h, g->p, &t.p_lo, &t.p_hi);
    valid_columns(t.iw0, d->stride_w, g->w, g->q, &t.q_lo, &t.q_hi);
    if (t.q_lo == t.q_hi) /* no column inside: no row either */
        t.p_hi = t.p_lo;
    return t;
}

/* Whether, at stride 1 with output rows as wide as the input's, the valid
 * entries of a tap's column-matrix row are one run of the input plane
 * (broken only by the out-of-range columns at the row ends). */
static bool rows_contiguous(const conv_geom *g)
{
    return g->d->stride_h == 1 && g->d->stride_w == 1 && g->q == g->w;
}

/* Column-matrix row (c, r, s) of tap t from input plane c, to dst [P*Q]. */
static void im2col_row(const conv_geom *g, const conv_tap *t, const float *plane, float *restrict dst)
{
    const int64_t q_count = g->q, sw = g->d->stride_w;

    if (t->p_lo > 0) /* (most taps have no rows to clear: skip the calls) */
        memset(dst, 0, (size_t)(t->p_lo * q_count) * sizeof(float));
    if (t->p_hi < g->p)
        memset(dst + t->p_hi * q_count, 0, (size_t)((g->p - t->p_hi) * q_count) * sizeof(float));
    if (t->p_hi == t->p_lo)
        return;
    if (rows_contiguous(g)) {
        /* One copy from the first valid entry to the last; then the entries
         * outside [q_lo, q_hi) of each row, which it filled from the
         * neighbouring input rows, are cleared. */
        const int64_t start = t->p_lo * q_count + t->q_lo;
        const int64_t span = (t->p_hi - t->p_lo - 1) * q_count + (t->q_hi - t->q_lo);
        memcpy(dst + start, plane + (t->p_lo + t->ih0) * g->w + t->q_lo + t->iw0, (size_t)span * sizeof(float));
        for (int64_t p = t->p_lo; p < t->p_hi; p++) {
            float *row = dst + p * q_count;
            for (int64_t q = 0; q < t->q_lo; q++)
                row[q] = 0.0f;
            for (int64_t q = t->q_hi; q < q_count; q++)
                row[q] = 0.0f;
        }
        return;
    }
    for (int64_t p = t->p_lo; p < t->p_hi; p++) {
        float *row = dst + p * q_count;
        const float *restrict src = plane + (p * g->d->stride_h + t->ih0) * g->w + t->iw0;
        for (int64_t q = 0; q < t->q_lo; q++)
            row[q] = 0.0f;
        for (int64_t q = t->q_lo; q < t->q_hi; q++)
            row[q] = src[q * sw];
        for (int64_t q = t->q_hi; q < q_count; q++)
            row[q] = 0.0f;
    }
}

/* One image and its column matrix [C*R*S, P*Q] (leading dimension ld):
 * im2col reads x [C,H,W] into col, col2im adds col into dx [C,H,W]. */
typedef struct conv_image {
    const conv_geom *g;
    const float *x;
    float *col;
    int64_t ld;
    float *dx;
} conv_image;

/* Runs `pass` over the image's channels [0, C), split across threads when
 * `split_inside` and the image is large; threads own whole channels, so
 * no two write the same element. */
typedef void (*channel_pass)(const conv_image *im, int64_t c_lo, int64_t c_hi);

static void over_channels(const conv_image *im, channel_pass pass, bool split_inside)
{
    const conv_geom *g = im->g;

    if (split_inside && g->rows * g->pq > CONV_PARALLEL_MIN) {
#pragma omp parallel
        {
            int64_t lo, hi;
            thread_share(g->c, &lo, &hi);
            pass(im, lo, hi);
        }
        return;
    }
    pass(im, 0, g->c);
}

/* Rows (c, r, s) for channels [c_lo, c_hi) of the image's column matrix;
 * each tap's geometry once. */
static void im2col_channels(const conv_image *im, int64_t c_lo, int64_t c_hi)
{
    const conv_geom *g = im->g;
    const float *x = im->x;
    float *col = im->col;
    const int64_t kh = g->d->kernel_h, kw = g->d->kernel_w, ld = im->ld;

    for (int64_t r = 0; r < kh; r++)
        for (int64_t s = 0; s < kw; s++) {
            const conv_tap t = tap_at(g, r, s);
            for (int64_t c = c_lo; c < c_hi; c++)
                im2col_row(g, &t, x + c * g->h * g->w, col + ((c * kh + r) * kw + s) * ld);
        }
}

/* One image's column matrix. */
static void im2col(const conv_geom *g, const float *x, float *col, int64_t ld, bool split_inside)
{
    const conv_image im = {.g = g, .x = x, .col = col, .ld = ld};

    over_channels(&im, im2col_channels, split_inside);
}

/* dst += src over n elements, vectorised. */
static void add_row(float *restrict dst, const float *restrict src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Channels [c_lo, c_hi) of the image's dx: each input element the sum of
 * the column-matrix entries taken from it, added tap by tap in (r, s)
 * order. With rows_contiguous, a tap's rows are added as one run, after its
 * entries outside [q_lo, q_hi) are set to 0 (they fall on the neighbouring
 * input rows, which then gain + 0). */
static void col2im_channels(const conv_image *im, int64_t c_lo, int64_t c_hi)
{
    const conv_geom *g = im->g;
    float *col = im->col, *dx = im->dx;
    const int64_t kh = g->d->kernel_h, kw = g->d->kernel_w, sw = g->d->stride_w, plane = g->h * g->w, ld = im->ld;
    const bool contiguous = rows_contiguous(g);

    memset(dx + c_lo * plane, 0, (size_t)((c_hi - c_lo) * plane) * sizeof(float));
    for (int64_t r = 0; r < kh; r++)
        for (int64_t s = 0; s < kw; s++) {
            const conv_tap t = tap_at(g, r, s);
            if (t.p_hi == t.p_lo)
                continue;
            for (int64_t c = c_lo; c < c_hi; c++) {
                float *src = col + ((c * kh + r) * kw + s) * ld;
                if (contiguous) {
                    const int64_t start = t.p_lo * g->q + t.q_lo;
                    for (int64_t p = t.p_lo; p < t.p_hi; p++) {
                        for (int64_t q = 0; q < t.q_lo; q++)
                            src[p * g->q + q] = 0.0f;
                        for (int64_t q = t.q_hi; q < g->q; q++)
                            src[p * g->q + q] = 0.0f;
                    }
                    add_row(dx + c * plane + (t.p_lo + t.ih0) * g->w + t.q_lo + t.iw0, src + start,
                            (t.p_hi - t.p_lo - 1) * g->q + (t.q_hi - t.q_lo));
                    continue;
                }
                for (int64_t p = t.p_lo; p < t.p_hi; p++) {
                    float *dst = dx + c * plane + (p * g->d->stride_h + t.ih0) * g->w + t.iw0;
                    if (sw == 1)
                        add_row(dst + t.q_lo, src + p * g->q + t.q_lo, t.q_hi - t.q_lo);
                    else
                        for (int64_t q = t.q_lo; q < t.q_hi; q++)
                            dst[q * sw] += src[p * g->q + q];
                }
            }
        }
}

/* One image's dx from its column gradient. */
static void col2im(const conv_geom *g, float *col, int64_t ld, float *dx, bool split_inside)
{
    const conv_image im = {.g = g, .col = col, .ld = ld, .dx = dx};

    over_channels(&im, col2im_channels, split_inside);
}

/* How a minibatch is cut into chunks of whole images (chunk i: images
 * [n*i/chunks, n*(i+1)/chunks)) and the chunks into threads, and each
 * thread's scratch: a column matrix and, for chunks of several images, a
 * staging matrix [K, images*P*Q]. */
typedef struct conv_split {
    int64_t chunks;
    int64_t most;         /* images in the largest chunk */
    int threads;          /* threads over the chunks; 1: in sequence, each split inside */
    int64_t col, staging; /* floats per thread */
} conv_split;

/* Splits g's minibatch for `threads` threads (1: in sequence). */
static conv_split split_for(const conv_geom *g, int threads)
{
    conv_split sp = {.threads = threads};
    int64_t fit = g->direct ? 1 : CONV_CHUNK_FLOATS / (g->rows * g->pq);

    if (fit < 1)
        fit = 1;
    sp.chunks = (g->n + fit - 1) / fit;
    if (threads > 1) { /* a whole number of chunks per thread */
        sp.chunks = (sp.chunks + threads - 1) / threads * threads;
        if (sp.chunks > g->n)
            sp.chunks = g->n;
    }
    sp.most = sp.chunks ? (g->n + sp.chunks - 1) / sp.chunks : 0;
    sp.col = g->direct ? 0 : g->rows * sp.most * g->pq;
    sp.staging = sp.most > 1 ? g->k * sp.most * g->pq : 0;
    return sp;
}

/* Threads take chunks when there are images for each and their scratch,
 * with `extra` more floats per thread but the first, stays within
 * CONV_THREAD_SCRATCH_MAX; else the chunks run in sequence. */
static conv_split split_batch(const conv_geom *g, int64_t extra)
{
    int threads = 1;

#ifdef _OPENMP
    if (!omp_in_parallel())
        threads = omp_get_max_threads();
#endif
    if (threads > 1 && g->n >= threads) {
        conv_split sp = split_for(g, threads);
        if (threads * (sp.col + sp.staging) + (threads - 1) * extra <= CONV_THREAD_SCRATCH_MAX)
            return sp;
    }
    return split_for(g, 1);
}

/* The scratch buffer: per thread a column and a staging matrix, then
 * `extra` floats per thread but the first (the filter gradient's partial
 * sums). */
static pd_status split_scratch(pd_device *dev, const conv_split *sp, int64_t extra, float **out)
{
    int64_t floats = sp->threads * (sp->col + sp->staging) + (sp->threads - 1) * extra;

    return pd_cpu_scratch(dev, (size_t)(floats > 0 ? floats : 1) * sizeof(float), out);
}

/* staging [K, nb*P*Q] <- dy [nb, K, P*Q] (from dy's image `first`). */
static void gather_images(const conv_geom *g, const float *dy, int64_t first, int64_t nb, float *staging)
{
    int64_t ld = nb * g->pq;

    for (int64_t j = 0; j < nb; j++)
        for (int64_t k = 0; k < g->k; k++)
            memcpy(staging + k * ld + j * g->pq, dy + ((first + j) * g->k + k) * g->pq, (size_t)g->pq * sizeof(float));
}

/* The column matrix of images [first, first+nb) of x: col, or the image
 * itself for a direct convolution. */
static const float *chunk_columns(const conv_geom *g, const float *x, int64_t first, int64_t nb, float *col,
                                  bool split_inside)
{
    const int64_t image = g->c * g->h * g->w;

    if (g->direct)
        return x + first * image;
    for (int64_t j = 0; j < nb; j++)
        im2col(g, x + (first + j) * image, col + j * g->pq, nb * g->pq, split_inside);
    return col;
}

typedef struct conv_operands {
    const conv_geom *g;
    const conv_split *sp;
    const float *x, *w, *bias, *dy;
    float *y, *dx;
    float *scratch;
} conv_operands;

/* Chunk i on scratch slot `thread`: its images [first, first + nb), the
 * leading dimension of its matrices, and the slot's column and staging
 * matrices. */
typedef struct conv_chunk {
    int64_t first, nb, ld;
    float *col, *staging;
} conv_chunk;

static conv_chunk chunk_at(const conv_operands *o, int64_t i, int thread)
{
    const conv_geom *g = o->g;
    conv_chunk ch = {.first = g->n * i / o->sp->chunks, .col = o->scratch + thread * (o->sp->col + o->sp->staging)};

    ch.nb = g->n * (i + 1) / o->sp->chunks - ch.first;
    ch.ld = ch.nb * g->pq;
    ch.staging = ch.col + o->sp->col;
    return ch;
}

/* The chunk's dy as a [K, nb*P*Q] matrix: dy itself for one image, else
 * gathered into the staging matrix. */
static const float *chunk_grads(const conv_operands *o, const conv_chunk *ch)
{
    if (ch->nb == 1)
        return o->dy + ch->first * o->g->k * o->g->pq;
    gather_images(o->g, o->dy, ch->first, ch->nb, ch->staging);
    return ch->staging;
}

/* The per-chunk passes below run chunk i on scratch slot `thread`;
 * `split_inside` (chunks in sequence, no enclosing parallel region) lets
 * im2col, col2im and sgemm split the chunk across threads. */

/* y for chunk i: y_g [Kg, nb*PQ] = w_g [Kg,CgRS] col_g [CgRS, nb*PQ] + bias,
 * straight into y for one image, else through the staging matrix. */
static void forward_chunk(const conv_operands *o, int64_t i, int thread, bool split_inside)
{
    const conv_geom *g = o->g;
    const conv_chunk ch = chunk_at(o, i, thread);
    const int64_t first = ch.first, nb = ch.nb, ld = ch.ld;
    const float *cols = chunk_columns(g, o->x, first, nb, ch.col, split_inside);
    float *staging = ch.staging, *out = nb == 1 ? o->y + first * g->k * g->pq : staging;

    if (nb == 1 && o->bias)
        for (int64_t k = 0; k < g->k; k++)
#pragma omp simd
            for (int64_t e = 0; e < g->pq; e++)
                out[k * g->pq + e] = o->bias[k];
    for (int grp = 0; grp < g->d->groups; grp++)
        pd_cpu_gemm_checked(false, false, g->kg, ld, g->crs, 1.0f, o->w + grp * g->kg * g->crs, g->crs,
                            cols + grp * g->crs * ld, ld, nb == 1 && o->bias ? 1.0f : 0.0f, out + grp * g->kg * ld,
                            ld);
    if (nb == 1)
        return;
    for (int64_t j = 0; j < nb; j++)
        for (int64_t k = 0; k < g->k; k++) {
            float *dst = o->y + ((first + j) * g->k + k) * g->pq;
            const float *src = staging + k * ld + j * g->pq;
            const float b = o->bias ? o->bias[k] : 0.0f;
#pragma omp simd
            for (int64_t e = 0; e < g->pq; e++)
                dst[e] = src[e] + b;
        }
}

/* dx for chunk i: col_g [CgRS, nb*PQ] = w_g^T dy_g [Kg, nb*PQ], then col2im
 * per image (a direct convolution's col is dx itself). */
static void backward_data_chunk(const conv_operands *o, int64_t i, int thread, bool split_inside)
{
    const conv_geom *g = o->g;
    const conv_chunk ch = chunk_at(o, i, thread);
    const int64_t image = g->c * g->h * g->w, first = ch.first, nb = ch.nb, ld = ch.ld;
    float *col = ch.col, *target = g->direct ? o->dx + first * image : col;
    const float *grads = chunk_grads(o, &ch);

    for (int grp = 0; grp < g->d->groups; grp++)
        pd_cpu_gemm_checked(true, false, g->crs, ld, g->kg, 1.0f, o->w + grp * g->kg * g->crs, g->crs,
                            grads + grp * g->kg * ld, ld, 0.0f, target + grp * g->crs * ld, ld);
    if (!g->direct)
        for (int64_t j = 0; j < nb; j++)
            col2im(g, col + j * g->pq, ld, o->dx + (first + j) * image, split_inside);
}

/* dw for chunk i: acc_g [Kg,CgRS] = beta acc_g + dy_g [Kg, nb*PQ] col_g^T. */
static void backward_filter_chunk(const conv_operands *o, int64_t i, int thread, bool split_inside, float *acc,
                                  float beta)
{
    const conv_geom *g = o->g;
    const conv_chunk ch = chunk_at(o, i, thread);
    const int64_t ld = ch.ld;
    const float *cols = chunk_columns(g, o->x, ch.first, ch.nb, ch.col, split_inside);
    const float *grads = chunk_grads(o, &ch);

    for (int grp = 0; grp < g->d->groups; grp++)
        pd_cpu_gemm_checked(false, true, g->kg, g->crs, ld, 1.0f, grads + grp * g->kg * ld, ld,
                            cols + grp * g->crs * ld, ld, beta, acc + grp * g->kg * g->crs, g->crs);
}

/* Runs `pass` over every chunk: in sequence, each split inside, or the
 * chunks across the split's threads. */
typedef void (*chunk_pass)(const conv_operands *o, int64_t i, int thread, bool split_inside);

static void run_chunks(const conv_operands *o, chunk_pass pass)
{
    if (o->sp->threads == 1) {
        for (int64_t i = 0; i < o->sp->chunks; i++)
            pass(o, i, 0, true);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(o->sp->threads)
    for (int64_t i = 0; i < o->sp->chunks; i++)
        pass(o, i, thread_index(), false);
}

/* Checks the largest product of each kind a chunk runs (smaller chunks are
 * covered) and readies BLAS, so that the products cannot fail in threads. */
static pd_status prepare_products(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                                  int64_t lda, const float *scratch, int64_t ldb, int64_t ldc)
{
    bool empty;

    return pd_cpu_gemm_prepare(trans_a, trans_b, m, n, k, a, lda, scratch, ldb, scratch, ldc, &empty);
}

pd_status pd_cpu_conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                const pd_tensor *bias, pd_tensor *y)
{
    pd_conv2d_dims dims;
    conv_geom g;
    float *scratch;

    PD_CHECK(pd_kernel_check_conv2d_forward(desc, x, w, bias, y, &dims));
    conv_geometry(desc, &dims, &g);
    const conv_split sp = split_batch(&g, 0);
    if (sp.chunks == 0)
        return PD_OK;
    PD_CHECK(split_scratch(dev, &sp, 0, &scratch));
    const int64_t ld = sp.most * g.pq;
    PD_CHECK(prepare_products(false, false, g.kg, ld, g.crs, w->data, g.crs, scratch, ld, ld));

    const conv_operands o = {&g, &sp, x->data, w->data, bias ? bias->data : NULL, NULL, y->data, NULL, scratch};
    run_chunks(&o, forward_chunk);
    return PD_OK;
}

pd_status pd_cpu_conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                      const pd_tensor *w, pd_tensor *dx)
{
    pd_conv2d_dims dims;
    conv_geom g;
    float *scratch;

    PD_CHECK(pd_kernel_check_conv2d_backward_data(desc, dy, w, dx, &dims));
    conv_geometry(desc, &dims, &g);
    const conv_split sp = split_batch(&g, 0);
    if (sp.chunks == 0)
        return PD_OK;
    PD_CHECK(split_scratch(dev, &sp, 0, &scratch));
    const int64_t ld = sp.most * g.pq;
    PD_CHECK(prepare_products(true, false, g.crs, ld, g.kg, w->data, g.crs, scratch, ld, ld));

    const conv_operands o = {&g, &sp, NULL, w->data, NULL, dy->data, NULL, dx->data, scratch};
    run_chunks(&o, backward_data_chunk);
    return PD_OK;
}

/* The bias gradient of output channel k: dy summed over images and
 * positions, in double (four running sums, added at the end). */
static float bias_gradient(const conv_geom *g, const float *dy, int64_t k)
{
    double sums[4] = {0.0, 0.0, 0.0, 0.0};

    for (int64_t n = 0; n < g->n; n++) {
        const float *plane = dy + (n * g->k + k) * g->pq;
        int64_t i = 0;
        for (; i + 4 <= g->pq; i += 4)
            for (int j = 0; j < 4; j++)
                sums[j] += plane[i + j];
        for (; i < g->pq; i++)
            sums[i & 3] += plane[i];
    }
    return (float)((sums[0] + sums[1]) + (sums[2] + sums[3]));
}

/* The chunks of a filter gradient split across threads: thread t sums its
 * chunks into dw (t = 0) or its partial buffer, then the partials are added
 * into dw in thread order, and the bias gradient is computed, in the same
 * region. */
static void backward_filter_threads(const conv_operands *o, float *dw, int64_t dw_floats, float *dbias)
{
    float *partials = o->scratch + o->sp->threads * (o->sp->col + o->sp->staging);

#pragma omp parallel num_threads(o->sp->threads)
    {
        int t = thread_index(), nt = 1;
#ifdef _OPENMP
        nt = omp_get_num_threads();
#endif
        float *acc = t == 0 ? dw : partials + (t - 1) * dw_floats;
        int64_t first, end;

        thread_share(o->sp->chunks, &first, &end);

        for (int64_t i = first; i < end; i++)
            backward_filter_chunk(o, i, t, false, acc, i == first ? 0.0f : 1.0f);
        if (first == end)
            memset(acc, 0, (size_t)dw_floats * sizeof(float));
#pragma omp barrier
#pragma omp for simd schedule(static)
        for (int64_t e = 0; e < dw_floats; e++) {
            float total = dw[e];
            for (int u = 1; u < nt; u++)
                total += partials[(u - 1) * dw_floats + e];
            dw[e] = total;
        }
        if (dbias) {
#pragma omp for schedule(static)
            for (int64_t k = 0; k < o->g->k; k++)
                dbias[k] = bias_gradient(o->g, o->dy, k);
        }
    }
}

pd_status pd_cpu_conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                        const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias)
{
    pd_conv2d_dims dims;
    conv_geom g;
    float *scratch;

    PD_CHECK(pd_kernel_check_conv2d_backward_filter(desc, x, dy, dw, dbias, &dims));
    conv_geometry(desc, &dims, &g);
    const int64_t dw_floats = pd_tensor_numel(dw);
    const conv_split sp = split_batch(&g, dw_floats);
    float *grad_w = dw->data, *grad_b = dbias ? dbias->data : NULL;

    if (sp.chunks == 0) {
        memset(grad_w, 0, pd_tensor_nbytes(dw));
        if (grad_b)
            memset(grad_b, 0, pd_tensor_nbytes(dbias));
        return PD_OK;
    }
    PD_CHECK(split_scratch(dev, &sp, dw_floats, &scratch));
    const int64_t ld = sp.most * g.pq;
    PD_CHECK(prepare_products(false, true, g.kg, g.crs, ld, scratch, ld, scratch, ld, g.crs));

    const conv_operands o = {&g, &sp, x->data, NULL, NULL, dy->data, NULL, NULL, scratch};
    if (sp.threads > 1) {
        backward_filter_threads(&o, grad_w, dw_floats, grad_b);
        return PD_OK;
    }
    for (int64_t i = 0; i < sp.chunks; i++)
        backward_filter_chunk(&o, i, 0, true, grad_w, i == 0 ? 0.0f : 1.0f);
    if (grad_b) {
#pragma omp parallel for schedule(static) if (g.n * g.k * g.pq > CONV_PARALLEL_MIN)
        for (int64_t k = 0; k < g.k; k++)
            grad_b[k] = bias_gradient(&g, dy->data, k);
    }
    return PD_OK;
}
