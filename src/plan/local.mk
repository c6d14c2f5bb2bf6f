# The partitioner: planning graph, antichain states, the two cost models'
# dynamic programs, plan files.
noinst_LTLIBRARIES += src/plan/libpd_plan.la
noinst_HEADERS += src/plan/plan_int.h src/plan/default_dp.h
src_plan_libpd_plan_la_SOURCES = \
	src/plan/plan.c \
	src/plan/levels.c \
	src/plan/plan_graph.c \
	src/plan/plan_coarsen.c \
	src/plan/antichain.c \
	src/plan/stages.c \
	src/plan/in_flight.c \
	src/plan/pipedream_dp.c \
	src/plan/default_dp.c \
	src/plan/default_exact.c \
	src/plan/default_levels.c \
	src/plan/default_cost.c \
	src/plan/plan_file.c \
	src/plan/plan_print.c
src_plan_libpd_plan_la_LIBADD = $(JANSSON_LDFLAGS) $(JANSSON_LIBS)
