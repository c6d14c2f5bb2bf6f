/* The per-epoch sample order and the per-sample random seed: both pure
 * functions of their arguments, which is what makes every loader
 * deterministic and resumable at any minibatch. */
#include "config.h"

#include "core/pd_rng.h"
#include "data/pd_data_int.h"

/* A uniform integer in [0, n) without modulo bias. */
static uint64_t uniform_below(pd_rng *rng, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;

    do
        x = pd_rng_next(rng);
    while (x >= limit);
    return x % n;
}

void pd_data_epoch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch)
{
    pd_rng rng;

    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    pd_rng_init(&rng, pd_rng_mix64(seed) ^ pd_rng_mix64((uint64_t)epoch + 1));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)uniform_below(&rng, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

uint64_t pd_data_sample_seed(uint64_t seed, int64_t epoch, int64_t index)
{
    /* Distinct from the order's stream: the constant keeps (seed, epoch)
     * here from reproducing the shuffle's generator state. */
    uint64_t z = pd_rng_mix64(seed ^ 0x6a09e667f3bcc909ULL);
    z = pd_rng_mix64(z ^ pd_rng_mix64((uint64_t)epoch + 0x9e3779b97f4a7c15ULL));
    return pd_rng_mix64(z ^ pd_rng_mix64((uint64_t)index + 0x3c6ef372fe94f82bULL));
}
