# Schedules: per-rank action lists, the deadlock checker, the simulator.
noinst_LTLIBRARIES += src/sched/libpd_sched.la
noinst_HEADERS += src/sched/sched_int.h
src_sched_libpd_sched_la_SOURCES = \
	src/sched/sched.c \
	src/sched/emit.c \
	src/sched/generate.c \
	src/sched/gen_1f1b.c \
	src/sched/gen_2bw.c \
	src/sched/warmup.c \
	src/sched/gen_gpipe.c \
	src/sched/gen_dp.c \
	src/sched/check.c \
	src/sched/costs.c \
	src/sched/links.c \
	src/sched/memory.c \
	src/sched/simulate.c \
	src/sched/result_print.c \
	src/sched/trace.c \
	src/sched/plot.c \
	src/sched/baselines.c
src_sched_libpd_sched_la_LIBADD = $(JANSSON_LDFLAGS) $(JANSSON_LIBS)
