/* Random numbers that are identical on every backend: a counter-based hash
 * (SplitMix64 finaliser) of (seed, index), so the i-th dropout decision of a
 * minibatch is the same on the CPU and the GPU and can be recomputed in the
 * backward pass instead of stored. Also a small sequential host generator for
 * parameter initialisation. Usable from C and CUDA. */
#ifndef PD_RNG_H
#define PD_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define PD_HOST_DEVICE __host__ __device__
#else
#define PD_HOST_DEVICE
#endif

/* SplitMix64 finaliser: a bijective 64-bit mix with full avalanche. */
static inline PD_HOST_DEVICE uint64_t pd_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A uniform float in [0, 1) from (seed, index), 24 bits of resolution. */
static inline PD_HOST_DEVICE float pd_rng_uniform(uint64_t seed, uint64_t index)
{
    uint64_t z = pd_rng_mix64(seed ^ pd_rng_mix64(index + 0x9e3779b97f4a7c15ULL));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* The seed of one (graph seed, layer, minibatch) triple. */
static inline PD_HOST_DEVICE uint64_t pd_rng_derive(uint64_t seed, uint64_t layer, uint64_t minibatch)
{
    return pd_rng_mix64(pd_rng_mix64(seed + layer * 0x9e3779b97f4a7c15ULL) ^ minibatch);
}

#ifndef __CUDACC__
/* A sequential host generator (SplitMix64 stream). */
typedef struct pd_rng {
    uint64_t state;
} pd_rng;

static inline void pd_rng_init(pd_rng *r, uint64_t seed) { r->state = seed; }

static inline uint64_t pd_rng_next(pd_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return pd_rng_mix64(r->state);
}

/* Uniform in [lo, hi). */
static inline float pd_rng_range(pd_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)(pd_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal (Box-Muller). */
float pd_rng_normal(pd_rng *r);
#endif

#endif
