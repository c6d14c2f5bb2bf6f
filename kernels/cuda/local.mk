# CUDA sources go through nvcc under libtool (config/nvcc-lt.sh); the host
# side of the backend is plain C against the CUDA runtime API.
EXTRA_DIST += \
	kernels/cuda/pd_cuda.h \
	kernels/cuda/cuda_device.c \
	kernels/cuda/elementwise.cu \
	kernels/cuda/optimizer.cu
kernels_libpd_kernels_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
if HAVE_CUDA
kernels_libpd_kernels_la_SOURCES += \
	kernels/cuda/pd_cuda.h \
	kernels/cuda/cuda_device.c \
	kernels/cuda/elementwise.cu \
	kernels/cuda/optimizer.cu
kernels_libpd_kernels_la_LIBADD += $(CUDA_LDFLAGS) $(CUDA_LIBS)
if HAVE_CUBLAS
kernels_libpd_kernels_la_CPPFLAGS += $(CUBLAS_CPPFLAGS)
kernels_libpd_kernels_la_LIBADD += $(CUBLAS_LDFLAGS) $(CUBLAS_LIBS)
endif
endif

SUFFIXES += .cu
NVCC_ALLFLAGS = $(NVCCFLAGS) -O3 -std=c++17 $(DEFS) $(DEFAULT_INCLUDES) \
	$(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(CUBLAS_CPPFLAGS) $(CPPFLAGS)
.cu.lo:
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/config/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALLFLAGS) -c $<
