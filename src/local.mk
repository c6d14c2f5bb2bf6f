# libpipedream: the convenience libraries of every module, linked once.
lib_LTLIBRARIES += src/libpipedream.la
src_libpipedream_la_SOURCES =
nodist_EXTRA_src_libpipedream_la_SOURCES = dummy.c
src_libpipedream_la_LIBADD = \
	src/runtime/libpd_runtime.la \
	src/sched/libpd_sched.la \
	src/plan/libpd_plan.la \
	slurm/libpd_slurm.la \
	src/profile/libpd_profile.la \
	src/models/libpd_models.la \
	src/data/libpd_data.la \
	src/graph/libpd_graph.la \
	kernels/libpd_kernels.la \
	topology/libpd_topology.la \
	transport/libpd_transport.la \
	src/core/libpd_core.la \
	$(OPENMP_CFLAGS)
src_libpipedream_la_LDFLAGS = -version-info 0:0:0 -no-undefined
