/* The peer of a transport test case: another process that runs one of the
 * case's "child" functions. For the socket backends it is forked; in an MPI
 * job of two ranks (the mpi backend) it is a thread of rank 1, which rank 0
 * tells which child to run: function pointers differ between processes, so
 * children are named by their index in the table given to tp_peer_init().
 * Parent and child also talk out of band (a byte to synchronise, or an
 * address). Failures in a child print and end its process (_exit(1)); an
 * MPI job then aborts, which fails the test run. */
#ifndef PD_TEST_TRANSPORT_PEER_H
#define PD_TEST_TRANSPORT_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <pipedream/transport.h>

typedef void (*tp_child_fn)(const char *address, long arg);

/* The children a case may start (needed in MPI mode only). */
void tp_peer_init(const tp_child_fn *children, int n);

/* Starts child(address, arg) in a new peer and returns its handle (the pid
 * when forked). `parent_only` (nullable) is closed in a forked child, which
 * must not keep the parent's slots. */
pid_t tp_peer_start(tp_child_fn child, const char *address, long arg, pd_channel *parent_only);

/* Waits for the peer's child to return; asserts that it succeeded. */
void tp_peer_finish(pid_t peer);

/* Out of band, parent side: `len` bytes to or from the peer. */
void tp_peer_send(pid_t peer, const void *buf, size_t len);
void tp_peer_recv(pid_t peer, void *buf, size_t len);

/* Out of band, child side: to or from the parent. */
void tp_child_send(const void *buf, size_t len);
void tp_child_recv(void *buf, size_t len);

/* Whether peers are MPI ranks (after tp_peer_mpi_begin() returned true). */
bool tp_peer_mpi(void);

/* Whether this process was started by mpirun. */
bool tp_peer_under_mpirun(void);

/* Under mpirun: initialises MPI (MPI_THREAD_MULTIPLE, two ranks), gives
 * rank 0's token to rank 1 and returns true on rank 0, which runs the
 * cases and then calls tp_peer_mpi_end(); rank 1 runs the children rank 0
 * starts until then, finalises MPI and returns false. */
bool tp_peer_mpi_begin(pd_transport_token *token);
void tp_peer_mpi_end(void);

#endif
