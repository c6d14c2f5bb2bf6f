noinst_LTLIBRARIES += src/runtime/libpd_runtime.la
src_runtime_libpd_runtime_la_SOURCES = \
	src/runtime/checkpoint.c \
	src/runtime/lr_schedule.c \
	src/runtime/trainer.c
src_runtime_libpd_runtime_la_LIBADD = $(ZLIB_LDFLAGS) $(ZLIB_LIBS) $(JANSSON_LDFLAGS) $(JANSSON_LIBS)
