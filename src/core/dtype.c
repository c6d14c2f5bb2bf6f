/* Element types: sizes, names and host conversions (bf16/f16 round to
 * nearest even, as PyTorch and CUDA do). */
#include "config.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include <pipedream/tensor.h>

static const struct {
    const char *name;
    const char *safetensors_name;
    size_t size;
} dtype_info[PD_DTYPE_COUNT] = {
    [PD_F32] = {"f32", "F32", 4}, [PD_BF16] = {"bf16", "BF16", 2}, [PD_F16] = {"f16", "F16", 2},
    [PD_I32] = {"i32", "I32", 4}, [PD_U8] = {"u8", "U8", 1},
};

size_t pd_dtype_size(pd_dtype dtype) { return (unsigned)dtype < PD_DTYPE_COUNT ? dtype_info[dtype].size : 0; }

const char *pd_dtype_name(pd_dtype dtype)
{
    return (unsigned)dtype < PD_DTYPE_COUNT ? dtype_info[dtype].name : "invalid";
}

pd_status pd_dtype_parse(const char *name, pd_dtype *out)
{
    for (int i = 0; i < PD_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0 || strcmp(name, dtype_info[i].safetensors_name) == 0) {
            *out = (pd_dtype)i;
            return PD_OK;
        }
    }
    return PD_ERROR(PD_ENOTFOUND, "unknown dtype '%s' (expected f32, bf16, f16, i32 or u8)", name);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40); /* keep it a quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exponent = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mantissa = u & 0x7fffff;

    if (((u >> 23) & 0xff) == 0xff) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00 | (mantissa ? 0x200 : 0));
    if (exponent >= 31) /* overflow rounds to inf */
        return (uint16_t)(sign | 0x7c00);
    if (exponent <= 0) { /* subnormal or zero */
        if (exponent < -10)
            return (uint16_t)sign;
        mantissa |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exponent);
        uint32_t half = mantissa >> shift;
        uint32_t rest = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exponent << 10) | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
        half++; /* may carry into the exponent, which is right */
    return (uint16_t)half;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff;

    if (exponent == 0x1f)
        return f32_from_bits(sign | 0x7f800000 | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0)
            return f32_from_bits(sign);
        float value = ldexpf((float)mantissa, -24);
        return sign ? -value : value;
    }
    return f32_from_bits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

static float load_as_f32(pd_dtype dtype, const void *src, size_t i)
{
    switch (dtype) {
    case PD_F32: return ((const float *)src)[i];
    case PD_BF16: return bf16_to_f32(((const uint16_t *)src)[i]);
    case PD_F16: return f16_to_f32(((const uint16_t *)src)[i]);
    case PD_I32: return (float)((const int32_t *)src)[i];
    case PD_U8: return (float)((const uint8_t *)src)[i];
    }
    return 0.0f;
}

static void store_from_f32(pd_dtype dtype, void *dst, size_t i, float value)
{
    switch (dtype) {
    case PD_F32: ((float *)dst)[i] = value; break;
    case PD_BF16: ((uint16_t *)dst)[i] = f32_to_bf16(value); break;
    case PD_F16: ((uint16_t *)dst)[i] = f32_to_f16(value); break;
    case PD_I32: ((int32_t *)dst)[i] = (int32_t)lrintf(value); break;
    case PD_U8: ((uint8_t *)dst)[i] = (uint8_t)fminf(fmaxf(lrintf(value), 0.0f), 255.0f); break;
    }
}

pd_status pd_dtype_convert(pd_dtype dst_dtype, void *dst, pd_dtype src_dtype, const void *src, size_t n)
{
    if ((unsigned)dst_dtype >= PD_DTYPE_COUNT || (unsigned)src_dtype >= PD_DTYPE_COUNT)
        return PD_ERROR(PD_EINVAL, "pd_dtype_convert: invalid dtype %d -> %d", (int)src_dtype, (int)dst_dtype);
    if (dst_dtype == src_dtype) {
        memmove(dst, src, n * pd_dtype_size(src_dtype));
        return PD_OK;
    }
    for (size_t i = 0; i < n; i++)
        store_from_f32(dst_dtype, dst, i, load_as_f32(src_dtype, src, i));
    return PD_OK;
}
