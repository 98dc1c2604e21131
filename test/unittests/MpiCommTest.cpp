//===- MpiCommTest.cpp - the MPI communicator under mpirun ----------------===//
//
// Run as `mpiexec -n N MoEMpiCommTest` (ctest does, with N = 2 and 3): the
// checks every backend passes (CommConformance.h, as CommTest.cpp runs
// them on threads) over MPI processes: the collectives through the buffer
// API and its host forms, against serial references computed on every
// rank, byte counters included; and the backend table under mpirun (mpi
// registered and the default).
// Prints one line per rank; exits non-zero on the first mismatch.
//
//===----------------------------------------------------------------------===//

#include "CommConformance.h"
#include "moert/CommBackend.h"
#include "moert/MpiComm.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

static int failures = 0;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "rank %d: check failed: %s: ", rank, #cond);                            \
      std::fprintf(stderr, __VA_ARGS__);                                                           \
      std::fprintf(stderr, "\n");                                                                  \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  bool deadPeer = argc > 1 && std::strcmp(argv[1], "--dead-peer") == 0;
  moert_comm *comm = moert_mpi_init(&argc, &argv, deadPeer ? 1.0 : 30.0);
  int rank = moert_comm_rank(comm), size = moert_comm_size(comm);
  std::vector<int32_t> all(size);
  std::iota(all.begin(), all.end(), 0);
  if (deadPeer) {
    // The last rank never joins: the others report a timeout naming the
    // collective and the group, then end the job.
    if (rank == size - 1) {
      std::this_thread::sleep_for(std::chrono::seconds(20));
      return 0;
    }
    float x = 1;
    if (moert_all_reduce_f32(comm, &x, 1, all.data(), size) != 0) {
      std::fprintf(stderr, "error: %s\n", moert_comm_error(comm));
      moert_mpi_abort(3);
    }
    return 0;
  }

  // The backend table: linking the library registered "mpi", and under
  // mpiexec it is the default.
  const moert_comm_backend *mpi = moert_comm_backend_named("mpi");
  CHECK(mpi && mpi->rank_per_process && mpi->launched && mpi->launched(), "mpi backend");
  CHECK(moert_comm_backend_default() == mpi, "default backend %s",
        moert_comm_backend_default()->name);
  CHECK(std::string(moert_comm_backend_names()) == "threads, mpi", "backends %s",
        moert_comm_backend_names());
  for (const std::string &failure : moert::test::checkCollectives(comm))
    CHECK(false, "%s", failure.c_str());

  std::printf("rank %d of %d: %s\n", rank, size, failures ? "FAILED" : "ok");
  moert_mpi_finalize(comm);
  return failures ? 1 : 0;
}
