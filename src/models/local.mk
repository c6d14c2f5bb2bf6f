noinst_LTLIBRARIES += src/models/libpd_models.la
src_models_libpd_models_la_SOURCES = \
	src/models/models.c \
	src/models/lenet.c
