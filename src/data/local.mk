noinst_LTLIBRARIES += src/data/libpd_data.la
src_data_libpd_data_la_SOURCES = \
	src/data/pd_data_int.h \
	src/data/idx.c \
	src/data/order.c \
	src/data/batches.c \
	src/data/loader.c \
	src/data/regular_file.c \
	src/data/pixels.c \
	src/data/resample.c \
	src/data/mnist.c \
	src/data/cifar10.c \
	src/data/imagenet.c \
	src/data/jpeg.c \
	src/data/synthetic.c \
	src/data/s2vt_data.c
src_data_libpd_data_la_CPPFLAGS = $(AM_CPPFLAGS) $(TURBOJPEG_CPPFLAGS)
src_data_libpd_data_la_LIBADD = $(ZLIB_LDFLAGS) $(ZLIB_LIBS) $(TURBOJPEG_LDFLAGS) $(TURBOJPEG_LIBS)
