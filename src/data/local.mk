noinst_LTLIBRARIES += src/data/libpd_data.la
src_data_libpd_data_la_SOURCES = \
	src/data/idx.c \
	src/data/batches.c \
	src/data/loader.c \
	src/data/cifar10.c \
	src/data/imagenet.c \
	src/data/jpeg.c \
	src/data/synthetic.c \
	src/data/s2vt_data.c
src_data_libpd_data_la_CPPFLAGS = $(AM_CPPFLAGS) $(TURBOJPEG_CPPFLAGS)
src_data_libpd_data_la_LIBADD = $(ZLIB_LDFLAGS) $(ZLIB_LIBS) $(TURBOJPEG_LDFLAGS) $(TURBOJPEG_LIBS)
