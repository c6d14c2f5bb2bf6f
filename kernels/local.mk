noinst_LTLIBRARIES += kernels/libpd_kernels.la
kernels_libpd_kernels_la_SOURCES = \
	kernels/pd_kernels_int.h \
	kernels/checks.c \
	kernels/unsupported.c \
	kernels/device.c \
	kernels/pd_caching_alloc.h \
	kernels/caching_alloc.c \
	kernels/cpu/pd_cpu.h \
	kernels/cpu/cpu_device.c \
	kernels/cpu/elementwise.c \
	kernels/cpu/gemm.c \
	kernels/cpu/conv2d.c \
	kernels/cpu/linear.c \
	kernels/cpu/pool2d.c \
	kernels/cpu/batchnorm.c \
	kernels/cpu/lrn.c \
	kernels/cpu/dropout.c \
	kernels/cpu/softmax_cross_entropy.c \
	kernels/cpu/concat.c \
	kernels/cpu/embedding.c \
	kernels/cpu/lstm_cell.c \
	kernels/cpu/optimizer.c
kernels_libpd_kernels_la_LIBADD = $(OPENBLAS_LDFLAGS) $(OPENBLAS_LIBS)

include kernels/cuda/local.mk
