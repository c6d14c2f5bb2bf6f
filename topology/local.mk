# Topology: hwloc discovery, bandwidth hierarchy, cluster files.
noinst_LTLIBRARIES += topology/libpd_topology.la
topology_libpd_topology_la_SOURCES = \
	topology/topo_int.h \
	topology/discover.c \
	topology/xml_compat.c \
	topology/nic_rate.c \
	topology/paths.c \
	topology/levels.c \
	topology/print.c \
	topology/topo_json.c \
	topology/cluster.c \
	topology/cluster_ranks.c \
	topology/bind.c
topology_libpd_topology_la_CPPFLAGS = $(AM_CPPFLAGS) $(VERBS_CPPFLAGS) $(MPI_CFLAGS)
topology_libpd_topology_la_LIBADD = $(HWLOC_LDFLAGS) $(HWLOC_LIBS) $(JANSSON_LDFLAGS) $(JANSSON_LIBS) \
	$(VERBS_LDFLAGS) $(VERBS_LIBS) $(MPI_LIBS)
# Gathering the nodes of an MPI job into a cluster (a stub without MPI).
if HAVE_MPI
topology_libpd_topology_la_SOURCES += topology/gather.c
else
topology_libpd_topology_la_SOURCES += topology/gather_none.c
endif

# Cluster files: the paper's clusters and modern nodes, for plan and simulate.
clustersdir = $(pkgdatadir)/clusters
dist_clusters_DATA = \
	topology/clusters/cluster-a.cluster.json \
	topology/clusters/cluster-b.cluster.json \
	topology/clusters/cluster-c.cluster.json \
	topology/clusters/dgx2.cluster.json \
	topology/clusters/h200-ndr.cluster.json

# Golden tests: real machines' hwloc XML (hwloc's test files, BSD licence in
# COPYING.hwloc) and what `pipedream topo --xml` prints for each.
EXTRA_DIST += \
	tests/topology/COPYING.hwloc \
	tests/topology/24em64t-2n6c2t-pci.xml \
	tests/topology/24em64t-2n6c2t-pci.expected \
	tests/topology/32em64t-2n8c2t-pci-wholeio.xml \
	tests/topology/32em64t-2n8c2t-pci-wholeio.expected \
	tests/topology/40intel64-2g2n4c+pcilocality.xml \
	tests/topology/40intel64-2g2n4c+pcilocality.expected \
	tests/topology/96em64t-4n4d3ca2co-pci.xml \
	tests/topology/96em64t-4n4d3ca2co-pci.expected \
	tests/topology/nvidiaDGX2.xml \
	tests/topology/nvidiaDGX2.expected
