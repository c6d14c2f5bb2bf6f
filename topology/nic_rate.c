/* The live rate of a NIC. An OpenFabrics device's active port rate comes
 * from libibverbs (width x lane speed of each active port, the fastest
 * port) where the build has it, else from sysfs's ports/N/rate; a plain
 * interface's from sysfs's Ethernet speed. XML topologies carry neither. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_VERBS
#include <infiniband/verbs.h>
#endif

#include "topology/topo_int.h"

#ifdef HAVE_VERBS
/* Gb/s of one lane (ibv_port_attr.active_speed, the IBTA data rates). */
static double lane_gbit(uint8_t speed)
{
    switch (speed) {
    case 1: return 2.5;   /* SDR */
    case 2: return 5.0;   /* DDR */
    case 4: return 10.0;  /* QDR */
    case 8: return 10.0;  /* FDR10 */
    case 16: return 14.0; /* FDR */
    case 32: return 25.0; /* EDR */
    case 64: return 50.0; /* HDR */
    case 128: return 100.0; /* NDR */
    default: return 0;
    }
}

static int lanes(uint8_t width)
{
    switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
    }
}

static double verbs_rate(const char *name)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    double best = 0;

    for (int i = 0; list && list[i]; i++) {
        struct ibv_context *ctx;
        struct ibv_device_attr dev;
        if (strcmp(ibv_get_device_name(list[i]), name) != 0 || !(ctx = ibv_open_device(list[i])))
            continue;
        if (ibv_query_device(ctx, &dev) == 0)
            for (int p = 1; p <= dev.phys_port_cnt; p++) {
                struct ibv_port_attr port;
                if (ibv_query_port(ctx, (uint8_t)p, &port) == 0 && port.state == IBV_PORT_ACTIVE) {
                    double gbit = lanes(port.active_width) * lane_gbit(port.active_speed);
                    if (gbit > best)
                        best = gbit;
                }
            }
        ibv_close_device(ctx);
    }
    if (list)
        ibv_free_device_list(list);
    return best * 1e9 / 8.0;
}
#endif

/* The first number of a one-line sysfs file, or 0. */
static double read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    double v = 0;

    if (f) {
        if (fscanf(f, "%lf", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

bool pd_topo_nic_live_rate(pd_topo_nic *nic)
{
    char path[256];
    double v;

    if (nic->rdma) {
#ifdef HAVE_VERBS
        if ((v = verbs_rate(nic->name)) > 0) {
            nic->bytes_per_s = v;
            PD_TOPO_SET(nic->source, "verbs");
            return true;
        }
#endif
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/rate", nic->name); /* "100 Gb/sec (4X EDR)" */
        if ((v = read_number(path)) > 0) {
            nic->bytes_per_s = v * 1e9 / 8.0;
            PD_TOPO_SET(nic->source, "sysfs");
            return true;
        }
    }
    for (const char *p = nic->netdevs; *p; p += strspn(p, " ")) {
        int n = (int)strcspn(p, " ");
        snprintf(path, sizeof(path), "/sys/class/net/%.*s/speed", n, p); /* Mb/s; -1 unknown */
        if ((v = read_number(path)) > 0) {
            nic->bytes_per_s = v * 1e6 / 8.0;
            PD_TOPO_SET(nic->source, "sysfs");
            return true;
        }
        p += n;
    }
    return false;
}
