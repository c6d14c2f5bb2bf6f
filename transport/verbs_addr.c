/* Where a verbs channel listens: the address the caller names (the
 * runtime passes that of the NIC the topology put next to the rank), or
 * the first active RDMA port's. Everything is read from sysfs, so that
 * listening opens no device: a process that forks after listening leaves
 * its child no device context to trip over. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/verbs_int.h"

#define SYSFS_IB "/sys/class/infiniband"

static bool read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    bool ok = f && fgets(buf, (int)size, f);

    if (f)
        fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

static bool is_loopback(const char *host)
{
    struct in_addr a;

    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* The lowest-indexed IPv4-mapped GID of a port (RoCE v1/v2 GIDs carry the
 * interface addresses; InfiniBand GIDs never are IPv4-mapped). */
static bool gid_address(const char *port_dir, char *ip, size_t size)
{
    char path[1400], text[64];
    long best = -1;
    struct in6_addr best_gid;
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "%s/gids", port_dir);
    d = opendir(path);
    if (!d)
        return false;
    while ((e = readdir(d))) {
        struct in6_addr gid;
        char *end;
        long index = strtol(e->d_name, &end, 10);

        if (*end || end == e->d_name || (best >= 0 && index >= best))
            continue;
        snprintf(path, sizeof(path), "%s/gids/%s", port_dir, e->d_name);
        if (read_line(path, text, sizeof(text)) && inet_pton(AF_INET6, text, &gid) == 1 &&
            IN6_IS_ADDR_V4MAPPED(&gid)) {
            best = index;
            best_gid = gid;
        }
    }
    closedir(d);
    if (best < 0)
        return false;
    return inet_ntop(AF_INET, &best_gid.s6_addr[12], ip, (socklen_t)size) != NULL;
}

/* The first IPv4 address of a network interface of the device (IPoIB). */
static bool netdev_address(const char *dev, char *ip, size_t size)
{
    char path[512];
    struct ifaddrs *list, *i;
    bool found = false;
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), SYSFS_IB "/%s/device/net", dev);
    d = opendir(path);
    if (!d)
        return false;
    if (getifaddrs(&list) != 0) {
        closedir(d);
        return false;
    }
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        for (i = list; i && !found; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                strcmp(i->ifa_name, e->d_name) == 0)
                found = inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, ip,
                                  (socklen_t)size) != NULL;
    }
    freeifaddrs(list);
    closedir(d);
    return found;
}

pd_status pd_vb_find_address(const char *host, char *ip, size_t size)
{
    DIR *devs;
    struct dirent *dev;
    bool found = false;

    if (host && !is_loopback(host)) {
        snprintf(ip, size, "%s", host);
        return PD_OK;
    }
    devs = opendir(SYSFS_IB);
    if (!devs)
        return PD_ERROR(PD_ENOTFOUND, "verbs: no RDMA device here (no " SYSFS_IB ")");
    while (!found && (dev = readdir(devs))) {
        char ports[300], port_dir[600], state_path[620], state[64];
        DIR *pd;
        struct dirent *port;

        if (dev->d_name[0] == '.')
            continue;
        snprintf(ports, sizeof(ports), SYSFS_IB "/%s/ports", dev->d_name);
        pd = opendir(ports);
        if (!pd)
            continue;
        while (!found && (port = readdir(pd))) {
            if (port->d_name[0] == '.')
                continue;
            snprintf(port_dir, sizeof(port_dir), "%s/%s", ports, port->d_name);
            snprintf(state_path, sizeof(state_path), "%s/state", port_dir);
            if (!read_line(state_path, state, sizeof(state)) || !strstr(state, "ACTIVE"))
                continue;
            found = gid_address(port_dir, ip, size) || netdev_address(dev->d_name, ip, size);
        }
        closedir(pd);
    }
    closedir(devs);
    if (!found)
        return PD_ERROR(PD_ENOTFOUND, "verbs: no active RDMA port with an IPv4 address (" SYSFS_IB ")");
    return PD_OK;
}
