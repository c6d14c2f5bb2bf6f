# PD_LIB_OPTION(NAME, DESCRIPTION, HEADER, LIBRARIES, FUNCTION, REQUIRED, [EXTRA-LIBS], [PROLOGUE])
# ------------------------------------------------------------------------------
# Adds --with-NAME[=DIR] / --without-NAME and probes HEADER and FUNCTION in the
# first of the space-separated LIBRARIES that links (e.g. "openblas cblas").
# DIR adds DIR/include and DIR/lib64 or DIR/lib.  REQUIRED is "yes" or "no":
# a required library that is missing or disabled stops configure; an optional
# one is simply left out unless the user asked for it with --with-NAME.
# Sets and substitutes NAME_CPPFLAGS, NAME_LDFLAGS, NAME_LIBS, defines HAVE_NAME
# (PROLOGUE: includes HEADER needs before it) and the automake conditional HAVE_NAME; pd_have_NAME is "yes" or "no".
AC_DEFUN([PD_LIB_OPTION], [
m4_pushdef([UP], m4_translit([$1], [-a-z], [_A-Z]))
m4_pushdef([VAR], m4_translit([$1], [-], [_]))
AC_ARG_WITH([$1],
  [AS_HELP_STRING([--with-$1@<:@=DIR@:>@], [$2 ]m4_if([$6], [yes], [[(required)]], [[(optional, auto-detected)]]))],
  [pd_with_[]VAR=$withval], [pd_with_[]VAR=check])
pd_have_[]VAR=no
UP[]_CPPFLAGS=
UP[]_LDFLAGS=
UP[]_LIBS=
AS_IF([test "x$pd_with_[]VAR" = xno],
  [AS_IF([test "x$6" = xyes], [AC_MSG_ERROR([$1 is required and cannot be disabled])])],
  [
   AS_IF([test "x$pd_with_[]VAR" != xyes && test "x$pd_with_[]VAR" != xcheck],
     [UP[]_CPPFLAGS="-I$pd_with_[]VAR/include"
      AS_IF([test -d "$pd_with_[]VAR/lib64"],
            [UP[]_LDFLAGS="-L$pd_with_[]VAR/lib64 -Wl,-rpath,$pd_with_[]VAR/lib64"],
            [UP[]_LDFLAGS="-L$pd_with_[]VAR/lib -Wl,-rpath,$pd_with_[]VAR/lib"])])
   pd_save_CPPFLAGS=$CPPFLAGS; pd_save_LDFLAGS=$LDFLAGS; pd_save_LIBS=$LIBS
   CPPFLAGS="$UP[]_CPPFLAGS $CPPFLAGS"; LDFLAGS="$UP[]_LDFLAGS $LDFLAGS"
   AC_CHECK_HEADER([$3], [
     for pd_lib in $4; do
       AS_VAR_PUSHDEF([pd_cache], [pd_cv_lib_$1_${pd_lib}])
       AC_CACHE_CHECK([for $5 in -l$pd_lib], [pd_cache], [
         LIBS="-l$pd_lib $7 $pd_save_LIBS"
         AC_LINK_IFELSE([AC_LANG_CALL([], [$5])], [AS_VAR_SET([pd_cache], [yes])], [AS_VAR_SET([pd_cache], [no])])])
       AS_VAR_IF([pd_cache], [yes], [UP[]_LIBS="-l$pd_lib $7"; pd_have_[]VAR=yes])
       AS_VAR_POPDEF([pd_cache])
       AS_IF([test "x$pd_have_[]VAR" = xyes], [break])
     done], [], [AC_INCLUDES_DEFAULT
$8])
   CPPFLAGS=$pd_save_CPPFLAGS; LDFLAGS=$pd_save_LDFLAGS; LIBS=$pd_save_LIBS
   AS_IF([test "x$pd_have_[]VAR" = xno],
     [AS_IF([test "x$6" = xyes],
        [AC_MSG_ERROR([$1 is required: $3 or -l{$4} not found (install it or pass --with-$1=DIR)])],
      [test "x$pd_with_[]VAR" != xcheck],
        [AC_MSG_ERROR([--with-$1 was given but $3 or -l{$4} was not found])])])
  ])
AS_IF([test "x$pd_have_[]VAR" = xyes], [AC_DEFINE([HAVE_]UP, [1], [Define to 1 if $1 is available])])
AM_CONDITIONAL([HAVE_]UP, [test "x$pd_have_[]VAR" = xyes])
AC_SUBST(UP[_CPPFLAGS])
AC_SUBST(UP[_LDFLAGS])
AC_SUBST(UP[_LIBS])
m4_popdef([VAR])
m4_popdef([UP])
])
