bin_PROGRAMS += src/cli/pipedream
src_cli_pipedream_SOURCES = \
	src/cli/pd_cli.h \
	src/cli/main.c \
	src/cli/train.c \
	src/cli/models.c \
	src/cli/profile.c
src_cli_pipedream_LDADD = src/libpipedream.la $(JANSSON_LDFLAGS) $(JANSSON_LIBS)
