/* CPU kernels: one LSTM time step on pre-activation gates in PyTorch's order
 * (i, f, g, o) and its backward pass. The activated gates are kept (act) so
 * that the backward pass needs no transcendental but tanh(c). */
#include "config.h"

#include <math.h>

#include "kernels/cpu/pd_cpu.h"

/* Element counts below this are not worth waking threads for. */
#define LSTM_PARALLEL_ELEMS 32768

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

pd_status pd_cpu_lstm_cell_forward(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev, pd_tensor *act,
                                   pd_tensor *c, pd_tensor *h)
{
    pd_lstm_cell_dims d;

    PD_CHECK(pd_kernel_check_lstm_cell_forward(gates, c_prev, act, c, h, &d));
    const int64_t n = d.n, hid = d.hidden;

    const float *pre = gates->data, *cp = c_prev->data;
    float *a = act->data, *cell = c->data, *hidden = h->data;

#pragma omp parallel for schedule(static) if (n * hid > LSTM_PARALLEL_ELEMS)
    for (int64_t r = 0; r < n; r++) {
        const float *g = pre + r * 4 * hid;
        float *ar = a + r * 4 * hid;
        for (int64_t j = 0; j < hid; j++) {
            float ig = sigmoid(g[j]);
            float fg = sigmoid(g[hid + j]);
            float gg = tanhf(g[2 * hid + j]);
            float og = sigmoid(g[3 * hid + j]);
            float cn = fg * cp[r * hid + j] + ig * gg;
            ar[j] = ig;
            ar[hid + j] = fg;
            ar[2 * hid + j] = gg;
            ar[3 * hid + j] = og;
            cell[r * hid + j] = cn;
            hidden[r * hid + j] = og * tanhf(cn);
        }
    }
    return PD_OK;
}

pd_status pd_cpu_lstm_cell_backward(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev,
                                    const pd_tensor *c, const pd_tensor *dh, const pd_tensor *dc,
                                    pd_tensor *dgates, pd_tensor *dc_prev)
{
    pd_lstm_cell_dims d;

    PD_CHECK(pd_kernel_check_lstm_cell_backward(act, c_prev, c, dh, dc, dgates, dc_prev, &d));
    const int64_t n = d.n, hid = d.hidden;

    const float *a = act->data, *cp = c_prev->data, *cell = c->data, *gh = dh->data;
    const float *gc = dc ? dc->data : NULL;
    float *dg = dgates->data, *gcp = dc_prev->data;

#pragma omp parallel for schedule(static) if (n * hid > LSTM_PARALLEL_ELEMS)
    for (int64_t r = 0; r < n; r++) {
        const float *ar = a + r * 4 * hid;
        float *dr = dg + r * 4 * hid;
        for (int64_t j = 0; j < hid; j++) {
            int64_t e = r * hid + j;
            float ig = ar[j], fg = ar[hid + j], gg = ar[2 * hid + j], og = ar[3 * hid + j];
            float tc = tanhf(cell[e]);
            /* Gradient reaching c at this step: through h = o tanh(c) and from step t+1. */
            float dct = gh[e] * og * (1.0f - tc * tc) + (gc ? gc[e] : 0.0f);
            dr[j] = dct * gg * ig * (1.0f - ig);
            dr[hid + j] = dct * cp[e] * fg * (1.0f - fg);
            dr[2 * hid + j] = dct * ig * (1.0f - gg * gg);
            dr[3 * hid + j] = gh[e] * tc * og * (1.0f - og);
            gcp[e] = dct * fg;
        }
    }
    return PD_OK;
}
