/* The per-job token and the MAC that proves it (SipHash-2-4: a keyed
 * 64-bit PRF, enough against online guessing within one handshake). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "transport/transport_int.h"

pd_status pd_transport_token_parse(const char *hex, pd_transport_token *out)
{
    pd_transport_token t;

    if (!hex || strlen(hex) != 32)
        return PD_ERROR(PD_EINVAL, "job token: expected 32 hexadecimal digits");
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                   : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0)
                return PD_ERROR(PD_EINVAL, "job token: '%c' is not a hexadecimal digit", c);
            v = v * 16 + (unsigned)d;
        }
        t.bytes[i] = (uint8_t)v;
    }
    *out = t;
    return PD_OK;
}

pd_status pd_transport_token_generate(pd_transport_token *out)
{
    size_t got = 0;

    while (got < sizeof(out->bytes)) {
        ssize_t n = getrandom(out->bytes + got, sizeof(out->bytes) - got, 0);
        if (n < 0 && errno != EINTR)
            return PD_ERROR(PD_EIO, "job token: getrandom: %s", strerror(errno));
        if (n > 0)
            got += (size_t)n;
    }
    return PD_OK;
}

void pd_transport_token_format(const pd_transport_token *token, char hex[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", token->bytes[i]);
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                     \
    do {                                                                                                             \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                                    \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                       \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                       \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                                    \
    } while (0)

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint64_t pd_tp_siphash(const uint8_t key[16], const void *data, size_t len)
{
    const uint8_t *in = data;
    uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    uint64_t b = (uint64_t)len << 56;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        uint64_t m = load_le64(in + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t j = 0; i + j < len; j++)
        b |= (uint64_t)in[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
