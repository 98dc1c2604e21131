/*===- MpiComm.h - the MPI communicator backend --------------------------===*
 *
 * Ranks as MPI processes (libmoert_mpi, built when MPI is found): the
 * backend "mpi" of moert/CommBackend.h, registered when the library's
 * object is linked. A binary started by mpirun detects it
 * (moert_mpi_launched) and runs one rank per process; started alone it is
 * one rank.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOERT_MPICOMM_H
#define MOERT_MPICOMM_H

#include "moert/Comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Non-zero when the process was started by mpirun / a PMI launcher. */
int moert_mpi_launched(void);
/* Initialises MPI and returns the world communicator. */
moert_comm *moert_mpi_init(int *argc, char ***argv, double timeout_seconds);
void moert_mpi_finalize(moert_comm *comm);
/* Adds the backend "mpi" to moert/CommBackend.h's table (done at load by
 * the library; calling it again changes nothing). */
void moert_mpi_register(void);
/* Ends every rank of the job (after an error that leaves peers waiting). */
void moert_mpi_abort(int code);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_MPICOMM_H */
