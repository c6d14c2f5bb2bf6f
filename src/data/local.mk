noinst_LTLIBRARIES += src/data/libpd_data.la
src_data_libpd_data_la_SOURCES = \
	src/data/idx.c \
	src/data/batches.c
src_data_libpd_data_la_LIBADD = $(ZLIB_LDFLAGS) $(ZLIB_LIBS)
