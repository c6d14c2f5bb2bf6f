/* The host generator's normal distribution. */
#include "config.h"

#include <math.h>

#include "core/pd_rng.h"

float pd_rng_normal(pd_rng *r)
{
    /* Box-Muller; u1 in (0, 1] so the log is finite. */
    float u1 = 1.0f - pd_rng_range(r, 0.0f, 1.0f);
    float u2 = pd_rng_range(r, 0.0f, 1.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}
