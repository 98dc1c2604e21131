//===- CommConformance.h - checks every communicator backend passes -------===//
//
// One rank's share of the collectives of moert/Comm.h through the buffer
// API (moert_*_buffer, host buffers), checked against serial references
// every rank computes itself: CommTest runs it on the backends that hold
// their ranks in one process (threads), MpiCommTest on MPI processes, so
// every backend passes the same checks. Every rank of `comm` must call it.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_COMMCONFORMANCE_H
#define MOEC_TEST_COMMCONFORMANCE_H

#include "moert/Comm.h"

#include <string>
#include <vector>

namespace moert::test {

/// Runs the collectives on every rank of `comm`; the failed checks, each
/// naming the rank and what differed (empty: all passed).
std::vector<std::string> checkCollectives(moert_comm *comm);

} // namespace moert::test

#endif // MOEC_TEST_COMMCONFORMANCE_H
