/* Quantities written with units in files and on the command line:
 * bandwidths ("25Gb/s", "12.5GB/s", "900 MB/s") and their printing. */
#ifndef PD_UNITS_H
#define PD_UNITS_H

#include <stddef.h>

#include <pipedream/status.h>

/* Parses a bandwidth: a positive finite number followed by an optional unit
 * among B/s, KB/s, MB/s, GB/s, TB/s (bytes, powers of 1000) and b/s, Kb/s,
 * Mb/s, Gb/s, Tb/s (bits; 8 bits a byte); no unit means bytes/s. One space
 * may separate number and unit; the unit's case matters only for the b/B.
 * *bytes_per_s is set only on success. PD_EINVAL names `what` and the text. */
pd_status pd_bandwidth_parse(const char *text, const char *what, double *bytes_per_s);

/* Writes `bytes_per_s` as "12.5 GB/s" (bytes, the largest power-of-1000
 * unit keeping the number >= 1, up to 4 significant digits) into buf, which
 * it returns. */
char *pd_bandwidth_format(double bytes_per_s, char *buf, size_t size);

#endif
