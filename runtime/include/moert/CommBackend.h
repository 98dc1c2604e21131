/*===- CommBackend.h - communicator backends chosen by name ---------------===*
 *
 * The communicator backends a binary holds, in a table the binary fills at
 * start-up and the trainer's --comm NAME chooses from (default: the first
 * backend whose launcher started this process, e.g. mpi under mpirun, else
 * threads). `threads` (comm/threads/) is always there; every other backend
 * registers itself with moert_comm_register_backend: libmoert_mpi does it
 * in moert_mpi_register, which a static initialiser of its object calls
 * when the binary links it (moec links it whole). docs/AddingACommunicator.md
 * lists what a new backend (NCCL, a vendor CCL) adds.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_COMMBACKEND_H
#define MOERT_COMMBACKEND_H

#include "moert/Comm.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moert_comm_backend {
  /* What --comm calls it: "threads", "mpi". */
  const char *name;
  /* 1: each process holds one rank and a launcher starts one process per
   * rank (mpi); 0: one process holds every rank (threads). */
  int rank_per_process;
  /* Non-zero when this process was started by the backend's launcher
   * (environment detection); null: it has none. */
  int (*launched)(void);
  /* Starts the backend in this process (MPI_Init) and returns a
   * communicator of its ranks with `timeout_seconds` per collective, or
   * null after writing the reason into error[error_size]; null for a
   * backend whose ranks are threads of `run`. */
  moert_comm *(*init)(int *argc, char ***argv, double timeout_seconds, char *error,
                      size_t error_size);
  /* Runs fn(comm, user) for each of `ranks` ranks: with `init`, fn on
   * this process's rank of `comm` (its size must equal `ranks`); without,
   * on `ranks` threads (moert_run_threads). Returns 0 when every rank
   * returned 0, else a rank's non-zero result; -1 after writing into
   * error[error_size] when the ranks could not start. */
  int (*run)(moert_comm *comm, int ranks, double timeout_seconds,
             int (*fn)(moert_comm *comm, void *user), void *user, char *error, size_t error_size);
  /* Frees init's communicator and ends the backend (MPI_Finalize); null
   * without init. */
  void (*finalize)(moert_comm *comm);
} moert_comm_backend;

/* Adds `backend` (kept by pointer; a name registered again replaces the
 * first). */
void moert_comm_register_backend(const moert_comm_backend *backend);
/* The backend called `name`, or null. */
const moert_comm_backend *moert_comm_backend_named(const char *name);
/* The i-th registered backend (threads first), or null past the last. */
const moert_comm_backend *moert_comm_backend_at(int i);
/* The first backend whose launcher started this process, else threads. */
const moert_comm_backend *moert_comm_backend_default(void);
/* "threads, mpi": the registered names (valid until the next call). */
const char *moert_comm_backend_names(void);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_COMMBACKEND_H */
