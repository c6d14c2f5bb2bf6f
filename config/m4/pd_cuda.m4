# PD_CUDA
# -------
# --with-cuda[=DIR]: the CUDA toolkit (nvcc and cudart).  Default: look for
# nvcc on PATH, then in /usr/local/cuda.  --with-cuda-arch=LIST picks the
# compute capabilities (default 90: sm_90 code plus compute_90 PTX so newer
# GPUs can JIT it).  When CUDA is on, cuDNN, cuBLAS and NCCL are probed with
# the toolkit's include and library paths (each with its own --with-X).
AC_DEFUN([PD_CUDA], [
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit: nvcc and cudart (optional, auto-detected)])],
  [pd_with_cuda=$withval], [pd_with_cuda=check])
AC_ARG_WITH([cuda-arch],
  [AS_HELP_STRING([--with-cuda-arch=LIST], [comma-separated compute capabilities to build for (default: 90)])],
  [pd_cuda_arch=$withval], [pd_cuda_arch=90])
pd_have_cuda=no
NVCC=
CUDA_CPPFLAGS=
CUDA_LDFLAGS=
CUDA_LIBS=
NVCCFLAGS=
AS_IF([test "x$pd_with_cuda" != xno], [
  AS_CASE([$pd_with_cuda],
    [yes|check], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])],
    [AS_IF([test -x "$pd_with_cuda/bin/nvcc"], [NVCC="$pd_with_cuda/bin/nvcc"])])
  AS_IF([test -n "$NVCC"], [
    pd_cuda_home=$(dirname "$(dirname "$NVCC")")
    CUDA_CPPFLAGS="-I$pd_cuda_home/include"
    for pd_dir in "$pd_cuda_home/lib64" "$pd_cuda_home/lib" "$pd_cuda_home/targets/x86_64-linux/lib"; do
      AS_IF([test -d "$pd_dir"], [CUDA_LDFLAGS="-L$pd_dir -Wl,-rpath,$pd_dir"; break])
    done
    pd_save_CPPFLAGS=$CPPFLAGS; pd_save_LDFLAGS=$LDFLAGS; pd_save_LIBS=$LIBS
    CPPFLAGS="$CUDA_CPPFLAGS $CPPFLAGS"; LDFLAGS="$CUDA_LDFLAGS $LDFLAGS"
    AC_CHECK_HEADER([cuda_runtime_api.h], [
      AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [pd_have_cuda=yes; CUDA_LIBS="-lcudart -lstdc++"])])
    CPPFLAGS=$pd_save_CPPFLAGS; LDFLAGS=$pd_save_LDFLAGS; LIBS=$pd_save_LIBS
  ])
  AS_IF([test "x$pd_have_cuda" = xno && test "x$pd_with_cuda" != xcheck],
    [AC_MSG_ERROR([--with-cuda was given but nvcc, cuda_runtime_api.h or libcudart was not found])])
])
AS_IF([test "x$pd_have_cuda" = xyes], [
  for pd_cc in $(echo "$pd_cuda_arch" | tr ',' ' '); do
    AS_CASE([$pd_cc], [*[[!0-9a]]*|""], [AC_MSG_ERROR([--with-cuda-arch: '$pd_cc' is not a compute capability like 90])])
    NVCCFLAGS="$NVCCFLAGS -gencode arch=compute_$pd_cc,code=sm_$pd_cc"
    pd_cuda_last=$pd_cc
  done
  NVCCFLAGS="$NVCCFLAGS -gencode arch=compute_$pd_cuda_last,code=compute_$pd_cuda_last"
  AC_DEFINE([HAVE_CUDA], [1], [Define to 1 to build the CUDA backend])
])
AM_CONDITIONAL([HAVE_CUDA], [test "x$pd_have_cuda" = xyes])
AC_SUBST([NVCC])
AC_SUBST([NVCCFLAGS])
AC_SUBST([CUDA_CPPFLAGS])
AC_SUBST([CUDA_LDFLAGS])
AC_SUBST([CUDA_LIBS])

dnl The CUDA libraries live beside the toolkit; probe them with its paths.
pd_save_CPPFLAGS=$CPPFLAGS; pd_save_LDFLAGS=$LDFLAGS
CPPFLAGS="$CUDA_CPPFLAGS $CPPFLAGS"; LDFLAGS="$CUDA_LDFLAGS $LDFLAGS"
AS_IF([test "x$pd_have_cuda" = xyes], [pd_cuda_dep=check], [pd_cuda_dep=no])
AS_IF([test "x$pd_have_cuda" = xno], [with_cudnn=${with_cudnn:-no}; with_cublas=${with_cublas:-no}; with_nccl=${with_nccl:-no}])
PD_LIB_OPTION([cudnn], [cuDNN for convolutions on the GPU], [cudnn.h], [cudnn], [cudnnCreate], [no], [$CUDA_LIBS])
PD_LIB_OPTION([cublas], [cuBLAS for matrix products on the GPU], [cublas_v2.h], [cublas], [cublasCreate_v2], [no], [$CUDA_LIBS])
PD_LIB_OPTION([nccl], [NCCL for gradient all-reduce among GPU replicas], [nccl.h], [nccl], [ncclGetVersion], [no], [$CUDA_LIBS])
CPPFLAGS=$pd_save_CPPFLAGS; LDFLAGS=$pd_save_LDFLAGS
])
