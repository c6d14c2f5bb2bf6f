/* Pixel placement shared by the in-memory sources (IDX, CIFAR-10): padding,
 * channel replication, shifts and mirroring in one pass, normalising through
 * the geometry's per-channel tables. */
#include "config.h"

#include "data/pd_data_int.h"

void pd_source_put_planar_u8(const uint8_t *pixels, int channels, int h, int w, const pd_sample_geometry *g,
                             int dy, int dx, bool flip, float *image)
{
    const int H = g->height, W = g->width;
    const int top = (H - h) / 2 + dy, left = (W - w) / 2 + dx;

    for (int c = 0; c < g->channels; c++) {
        const uint8_t *plane = pixels + (size_t)(channels == 1 ? 0 : c) * h * w;
        const float *table = g->table[c];
        const float zero = table[0];

        for (int y = 0; y < H; y++) {
            float *dst = image + ((size_t)c * H + y) * W;
            int sy = y - top;

            if (sy < 0 || sy >= h) {
                for (int x = 0; x < W; x++)
                    dst[x] = zero;
                continue;
            }
            const uint8_t *row = plane + (size_t)sy * w;
            for (int x = 0; x < W; x++) {
                int sx = (flip ? W - 1 - x : x) - left;
                dst[x] = sx >= 0 && sx < w ? table[row[sx]] : zero;
            }
        }
    }
}

pd_status pd_source_no_prepare(void *state, const pd_sample_geometry *g)
{
    (void)state;
    (void)g;
    return PD_OK;
}

pd_status pd_source_no_worker(void *state, void **worker)
{
    (void)state;
    *worker = NULL;
    return PD_OK;
}

void pd_source_no_worker_destroy(void *worker) { (void)worker; }
