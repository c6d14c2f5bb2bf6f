noinst_LTLIBRARIES += src/models/libpd_models.la
src_models_libpd_models_la_SOURCES = \
	src/models/models.c \
	src/models/builders.c \
	src/models/adaptive_pool.c \
	src/models/lenet.c \
	src/models/mlp.c \
	src/models/vgg16.c \
	src/models/alexnet.c \
	src/models/resnet50.c \
	src/models/inception_v3.c \
	src/models/s2vt.c
