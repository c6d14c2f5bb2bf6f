# PD_MPI
# ------
# --with-mpi[=DIR]: MPI for launch and collectives.  Flags come from, in order:
# MPI_CFLAGS/MPI_LIBS set by the user, `mpicc --showme` (Open MPI) or
# `mpicc -show` (MPICH), then pkg-config ompi-c / mpich.
AC_DEFUN([PD_MPI], [
AC_ARG_WITH([mpi],
  [AS_HELP_STRING([--with-mpi@<:@=DIR@:>@], [MPI library (optional, auto-detected; or set MPI_CFLAGS and MPI_LIBS)])],
  [pd_with_mpi=$withval], [pd_with_mpi=check])
AC_ARG_VAR([MPI_CFLAGS], [C compiler flags for MPI, overriding mpicc's])
AC_ARG_VAR([MPI_LIBS], [linker flags for MPI, overriding mpicc's])
pd_have_mpi=no
AS_IF([test "x$pd_with_mpi" != xno], [
  AS_IF([test -z "$MPI_LIBS"], [
    AS_CASE([$pd_with_mpi],
      [yes|check], [AC_PATH_PROG([MPICC], [mpicc])],
      [AC_PATH_PROG([MPICC], [mpicc], [], [$pd_with_mpi/bin])])
    AS_IF([test -n "$MPICC"], [
      AS_IF([MPI_CFLAGS=$($MPICC --showme:compile 2>/dev/null) && MPI_LIBS=$($MPICC --showme:link 2>/dev/null)], [],
            [pd_mpi_show=$($MPICC -show 2>/dev/null)
             MPI_CFLAGS=$(echo "$pd_mpi_show" | tr ' ' '\n' | grep '^-I' | tr '\n' ' ')
             MPI_LIBS=$(echo "$pd_mpi_show" | tr ' ' '\n' | grep -E '^-(L|l|Wl)' | tr '\n' ' ')])],
      [PKG_CHECK_MODULES([MPI], [ompi-c], [], [PKG_CHECK_MODULES([MPI], [mpich], [], [:])])])
  ])
  pd_save_CPPFLAGS=$CPPFLAGS; pd_save_LIBS=$LIBS
  CPPFLAGS="$MPI_CFLAGS $CPPFLAGS"; LIBS="$MPI_LIBS $LIBS"
  AC_MSG_CHECKING([whether an MPI program links])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[MPI_Init(0, 0); MPI_Finalize();]])],
    [pd_have_mpi=yes], [pd_have_mpi=no])
  AC_MSG_RESULT([$pd_have_mpi])
  CPPFLAGS=$pd_save_CPPFLAGS; LIBS=$pd_save_LIBS
  AS_IF([test "x$pd_have_mpi" = xno && test "x$pd_with_mpi" != xcheck],
    [AC_MSG_ERROR([--with-mpi was given but no working MPI was found (set MPI_CFLAGS and MPI_LIBS?)])])
])
AS_IF([test "x$pd_have_mpi" = xyes], [AC_DEFINE([HAVE_MPI], [1], [Define to 1 if MPI is available])],
      [MPI_CFLAGS=; MPI_LIBS=])
AM_CONDITIONAL([HAVE_MPI], [test "x$pd_have_mpi" = xyes])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
])
