noinst_LTLIBRARIES += src/core/libpd_core.la
src_core_libpd_core_la_SOURCES = \
	src/core/status.c \
	src/core/log.c \
	src/core/dtype.c \
	src/core/tensor.c \
	src/core/rng.c \
	src/core/atomic_file.c \
	src/core/json.c \
	src/core/safetensors.c \
	src/core/units.c \
	src/core/pd_units.h \
	src/core/pd_rng.h \
	src/core/pd_atomic_file.h
src_core_libpd_core_la_LIBADD = $(JANSSON_LDFLAGS) $(JANSSON_LIBS)
