# CUDA sources go through nvcc under libtool (config/nvcc-lt.sh); the host
# side of the backend is plain C against the CUDA runtime API. The backend's
# files (those needing cuDNN apart) are distributed always and compiled in a
# build with CUDA (and cuDNN).
PD_CUDA_SOURCES = \
	kernels/cuda/pd_cuda.h \
	kernels/cuda/cuda_device.c \
	kernels/cuda/dmabuf.c \
	kernels/cuda/ipc.c \
	kernels/cuda/rdma_flush.c \
	kernels/cuda/elementwise.cu \
	kernels/cuda/optimizer.cu \
	kernels/cuda/index_check.cu \
	kernels/cuda/linear.c \
	kernels/cuda/bias.cu \
	kernels/cuda/loss.cu \
	kernels/cuda/concat.cu \
	kernels/cuda/embedding.cu \
	kernels/cuda/lstm_cell.cu \
	kernels/cuda/pd_cuda_nn.h \
	kernels/cuda/pool.c \
	kernels/cuda/pool.cu \
	kernels/cuda/lrn.c \
	kernels/cuda/lrn.cu
PD_CUDNN_SOURCES = \
	kernels/cuda/cudnn_util.c \
	kernels/cuda/conv.c \
	kernels/cuda/batchnorm.c
EXTRA_DIST += $(PD_CUDA_SOURCES) $(PD_CUDNN_SOURCES)
kernels_libpd_kernels_la_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
if HAVE_CUDA
kernels_libpd_kernels_la_SOURCES += $(PD_CUDA_SOURCES)
kernels_libpd_kernels_la_LIBADD += $(CUDA_LDFLAGS) $(CUDA_LIBS)
if HAVE_CUBLAS
kernels_libpd_kernels_la_CPPFLAGS += $(CUBLAS_CPPFLAGS)
kernels_libpd_kernels_la_LIBADD += $(CUBLAS_LDFLAGS) $(CUBLAS_LIBS)
endif
if HAVE_CUDNN
kernels_libpd_kernels_la_SOURCES += $(PD_CUDNN_SOURCES)
kernels_libpd_kernels_la_CPPFLAGS += $(CUDNN_CPPFLAGS)
kernels_libpd_kernels_la_LIBADD += $(CUDNN_LDFLAGS) $(CUDNN_LIBS)
endif
endif

SUFFIXES += .cu
NVCC_ALLFLAGS = $(NVCCFLAGS) -O3 -std=c++17 $(DEFS) $(DEFAULT_INCLUDES) \
	$(AM_CPPFLAGS) $(CUDA_CPPFLAGS) $(CUBLAS_CPPFLAGS) $(CUDNN_CPPFLAGS) $(CPPFLAGS)
.cu.lo:
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/config/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALLFLAGS) -c $<
