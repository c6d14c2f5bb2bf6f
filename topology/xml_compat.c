/* Reading hwloc 3 XML with hwloc 2: the format differs, for what the
 * topology module reads, only in the version attribute and in OS device
 * types, which hwloc 3 writes as a bit mask (storage 1, memory 2, GPU 4,
 * co-processor 8, network 16, OpenFabrics 32, DMA 64; an InfiniBand device
 * is 48, a CUDA device 12) and hwloc 2 as an enumeration. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "topology/topo_int.h"

/* The hwloc 2 type of a hwloc 3 mask: the most specific bit wins. */
static int osdev_type_v2(unsigned long mask)
{
    if (mask & 32)
        return HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (mask & 8)
        return HWLOC_OBJ_OSDEV_COPROC;
    if (mask & 4)
        return HWLOC_OBJ_OSDEV_GPU;
    if (mask & 16)
        return HWLOC_OBJ_OSDEV_NETWORK;
    if (mask & 64)
        return HWLOC_OBJ_OSDEV_DMA;
    return HWLOC_OBJ_OSDEV_BLOCK;
}

pd_status pd_topo_xml_compat(const char *xml, size_t size, const char *path, char **out, size_t *out_size)
{
    static const char v3[] = "<topology version=\"3.", attr[] = "osdev_type=\"";
    const char *root = strstr(xml, v3);
    size_t used = 0;
    char *buf;

    /* Rewritten, a value never grows: "48" becomes "3". */
    if (!(buf = malloc(size + 1)))
        return PD_ERROR(PD_ENOMEM, "%s: out of memory", path);
    if (!root) {
        memcpy(buf, xml, size);
        buf[size] = '\0';
        *out = buf;
        *out_size = size;
        return PD_OK;
    }
    for (const char *p = xml; p < xml + size;) {
        const char *hit = strstr(p, p <= root ? v3 : attr);
        if (!hit) {
            memcpy(buf + used, p, (size_t)(xml + size - p));
            used += (size_t)(xml + size - p);
            break;
        }
        if (hit == root) {
            size_t n = (size_t)(hit - p);
            memcpy(buf + used, p, n);
            used += n;
            memcpy(buf + used, "<topology version=\"2.", sizeof(v3) - 1);
            used += sizeof(v3) - 1;
            p = hit + sizeof(v3) - 1;
            continue;
        }
        char *end;
        const char *value = hit + sizeof(attr) - 1;
        unsigned long mask = strtoul(value, &end, 10);
        if (end == value || *end != '"') {
            free(buf);
            return PD_ERROR(PD_EFORMAT, "%s: not a valid hwloc XML topology (bad osdev_type)", path);
        }
        size_t n = (size_t)(value - p);
        memcpy(buf + used, p, n);
        used += n;
        used += (size_t)snprintf(buf + used, 4, "%d", osdev_type_v2(mask));
        p = end;
    }
    buf[used] = '\0';
    *out = buf;
    *out_size = used;
    return PD_OK;
}
