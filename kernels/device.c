/* Opening devices by name over the backends compiled in; precision names. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/pd_kernels_int.h"

/* A device with its overlaid table, so pd_device.ops points into it. */
typedef struct device_handle {
    pd_device dev; /* first: pd_device * and device_handle * convert */
    pd_device_ops table;
    const pd_backend *backend;
} device_handle;

static const pd_backend *const backends[] = {
    &pd_backend_cpu,
#ifdef HAVE_CUDA
    &pd_backend_cuda,
#endif
};

static const char *const backend_names[] = {
    "cpu",
#ifdef HAVE_CUDA
    "cuda",
#endif
};

#define BACKEND_COUNT ((int)(sizeof(backends) / sizeof(backends[0])))

int pd_device_backends(const char *const **names)
{
    *names = backend_names;
    return BACKEND_COUNT;
}

static const char *const precision_names[] = {"f32", "tf32", "bf16"};

#define PRECISION_COUNT ((int)(sizeof(precision_names) / sizeof(precision_names[0])))

const char *pd_precision_name(pd_precision precision)
{
    return (int)precision >= 0 && (int)precision < PRECISION_COUNT ? precision_names[precision] : "unknown";
}

pd_status pd_precision_parse(const char *name, pd_precision *out)
{
    for (int i = 0; name && i < PRECISION_COUNT; i++) {
        if (strcmp(name, precision_names[i]) == 0) {
            *out = (pd_precision)i;
            return PD_OK;
        }
    }
    return PD_ERROR(PD_EINVAL, "unknown precision '%s' (expected f32, tf32 or bf16)", name ? name : "(null)");
}

static pd_status parse_device_name(const char *name, char *kind, size_t kind_size, int *ordinal)
{
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    char *end;

    if (len == 0 || len >= kind_size)
        return PD_ERROR(PD_EINVAL, "bad device name '%s' (expected cpu, cuda or cuda:N)", name);
    memcpy(kind, name, len);
    kind[len] = '\0';
    *ordinal = 0;
    if (colon) {
        long v = strtol(colon + 1, &end, 10);
        if (*end != '\0' || end == colon + 1 || v < 0 || v > 1024)
            return PD_ERROR(PD_EINVAL, "bad device ordinal in '%s' (expected cuda:N)", name);
        *ordinal = (int)v;
    }
    return PD_OK;
}

pd_status pd_device_open(const char *name, pd_device **out)
{
    char kind[32];
    int ordinal;
    device_handle *h;
    pd_status s;

    PD_CHECK(parse_device_name(name, kind, sizeof(kind), &ordinal));
    for (int i = 0; i < BACKEND_COUNT; i++) {
        if (strcmp(backends[i]->name, kind) != 0)
            continue;
        h = calloc(1, sizeof(*h));
        if (!h)
            return PD_ERROR(PD_ENOMEM, "device: out of host memory");
        h->backend = backends[i];
        s = backends[i]->open(ordinal, &h->dev);
        if (s != PD_OK) {
            free(h);
            return s;
        }
        pd_device_ops_overlay(&h->table, backends[i]->ops);
        h->dev.ops = &h->table;
        *out = &h->dev;
        return PD_OK;
    }
    if (strcmp(kind, "cuda") == 0)
        return PD_ERROR(PD_ENOTSUP, "device '%s': this build has no CUDA backend (configure --with-cuda)", name);
    return PD_ERROR(PD_ENOTFOUND, "unknown device '%s' (expected cpu, cuda or cuda:N)", name);
}

void pd_device_close(pd_device *dev)
{
    device_handle *h = (device_handle *)dev;

    if (!dev)
        return;
    h->backend->close(dev);
    free(h);
}
