noinst_LTLIBRARIES += src/runtime/libpd_runtime.la
src_runtime_libpd_runtime_la_SOURCES = \
	src/runtime/checkpoint.c \
	src/runtime/lr_schedule.c \
	src/runtime/trainer.c \
	src/runtime/weight_ring.c \
	src/runtime/pd_runtime_int.h \
	src/runtime/bootstrap.c \
	src/runtime/binding.c \
	src/runtime/stage.c \
	src/runtime/versions.c \
	src/runtime/executor.c \
	src/runtime/pipeline.c \
	src/runtime/segments.c \
	src/runtime/run.c \
	src/runtime/progress.c \
	src/runtime/progress_thread.c \
	src/runtime/pipeline_checkpoint.c \
	src/runtime/flight.c \
	src/runtime/watchdog.c \
	src/runtime/autoplan.c
src_runtime_libpd_runtime_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
src_runtime_libpd_runtime_la_LIBADD = $(ZLIB_LDFLAGS) $(ZLIB_LIBS) $(JANSSON_LDFLAGS) $(JANSSON_LIBS) $(MPI_LIBS)
