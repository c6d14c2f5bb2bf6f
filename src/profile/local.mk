noinst_LTLIBRARIES += src/profile/libpd_profile.la
src_profile_libpd_profile_la_SOURCES = \
	src/profile/profile.c \
	src/profile/measure.c \
	src/profile/profile_json.c \
	src/profile/graph_txt.c
