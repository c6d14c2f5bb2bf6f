bin_PROGRAMS += src/cli/pipedream
src_cli_pipedream_SOURCES = \
	src/cli/pd_cli.h \
	src/cli/main.c \
	src/cli/inputs.c \
	src/cli/train.c \
	src/cli/train_pipeline.c \
	src/cli/models.c \
	src/cli/profile.c \
	src/cli/plan.c \
	src/cli/topo.c \
	src/cli/simulate.c \
	src/cli/bench_transport.c \
	src/cli/bench_step.c \
	src/cli/model_options.c \
	src/cli/transport_measure.h \
	src/cli/transport_measure.c \
	src/cli/topo_measure.c
src_cli_pipedream_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
src_cli_pipedream_LDADD = src/libpipedream.la $(JANSSON_LDFLAGS) $(JANSSON_LIBS) $(MPI_LIBS)
