# Transport: RDMA-shaped channels over verbs, shm, tcp and MPI.
noinst_LTLIBRARIES += transport/libpd_transport.la
transport_libpd_transport_la_SOURCES = \
	transport/transport_int.h \
	transport/channel.c \
	transport/unsupported.c \
	transport/header.c \
	transport/ring.c \
	transport/token.c \
	transport/handshake.c \
	transport/shm.c \
	transport/tcp.c \
	transport/set.c \
	transport/spin.c \
	transport/slots.c
# MPI_Isend/MPI_Irecv between ranks of one job.
if HAVE_MPI
transport_libpd_transport_la_SOURCES += transport/mpi.c
endif
# RDMA: RC queue pairs over libibverbs, set up through librdmacm.
if HAVE_VERBS
if HAVE_RDMACM
transport_libpd_transport_la_SOURCES += transport/verbs_int.h transport/verbs.c transport/verbs_conn.c \
	transport/verbs_data.c transport/verbs_addr.c transport/verbs_device.c
endif
endif
transport_libpd_transport_la_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS) $(VERBS_CPPFLAGS) $(RDMACM_CPPFLAGS)
transport_libpd_transport_la_LIBADD = $(MPI_LIBS) $(RDMACM_LDFLAGS) $(RDMACM_LIBS) $(VERBS_LDFLAGS) $(VERBS_LIBS)
