//===- MpiCommTest.cpp - the MPI communicator under mpirun ----------------===//
//
// Run as `mpiexec -n N MoEMpiCommTest` (ctest does, with N = 2 and 3): the
// same collectives as CommTest.cpp over MPI processes, checked against
// serial references computed on every rank, byte counters included.
// Prints one line per rank; exits non-zero on the first mismatch.
//
//===----------------------------------------------------------------------===//

#include "moert/MpiComm.h"

#include <chrono>
#include <cmath>
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

  // all_reduce: every rank contributes rank + k / 8.
  const int count = 257;
  std::vector<float> data(count);
  for (int k = 0; k < count; ++k)
    data[k] = static_cast<float>(rank) + static_cast<float>(k) / 8;
  CHECK(moert_all_reduce_f32(comm, data.data(), count, all.data(), size) == 0, "%s",
        moert_comm_error(comm));
  for (int k = 0; k < count; ++k) {
    float want = 0;
    for (int r = 0; r < size; ++r)
      want += static_cast<float>(r) + static_cast<float>(k) / 8;
    CHECK(std::fabs(data[k] - want) <= 1e-5f * std::fabs(want), "k=%d got %g want %g", k, data[k],
          want);
  }
  CHECK(moert_comm_bytes(comm, MOERT_ALL_REDUCE) == 2 * (size - 1) * count * 4 / size, "bytes %lld",
        (long long)moert_comm_bytes(comm, MOERT_ALL_REDUCE));

  // Ragged all-to-all: rank r sends r + j + 1 bytes of 'a' + r to rank j.
  std::vector<int64_t> sendBytes(size), recvBytes(size);
  std::string send, want;
  for (int j = 0; j < size; ++j) {
    sendBytes[j] = rank + j + 1;
    recvBytes[j] = j + rank + 1;
    send += std::string(sendBytes[j], static_cast<char>('a' + rank));
    want += std::string(recvBytes[j], static_cast<char>('a' + j));
  }
  std::string recv(want.size(), '?');
  CHECK(moert_all_to_all_v(comm, send.data(), sendBytes.data(), &recv[0], recvBytes.data(),
                           all.data(), size) == 0,
        "%s", moert_comm_error(comm));
  CHECK(recv == want, "got %s want %s", recv.c_str(), want.c_str());

  // all_gather, reduce_scatter, broadcast, barrier.
  int32_t mine = 10 * rank;
  std::vector<int32_t> gathered(size);
  CHECK(moert_all_gather(comm, &mine, sizeof mine, gathered.data(), all.data(), size) == 0, "%s",
        moert_comm_error(comm));
  for (int r = 0; r < size; ++r)
    CHECK(gathered[r] == 10 * r, "gathered[%d] = %d", r, gathered[r]);
  std::vector<float> chunks(2 * size), part(2);
  for (int j = 0; j < size; ++j)
    chunks[2 * j] = chunks[2 * j + 1] = static_cast<float>(rank + j);
  CHECK(moert_reduce_scatter_f32(comm, chunks.data(), part.data(), 2, all.data(), size) == 0, "%s",
        moert_comm_error(comm));
  float sumWant = static_cast<float>(size * (size - 1) / 2 + size * rank);
  CHECK(part[0] == sumWant && part[1] == sumWant, "got %g want %g", part[0], sumWant);
  double value = rank == size - 1 ? 3.25 : 0;
  CHECK(moert_broadcast(comm, &value, sizeof value, size - 1, all.data(), size) == 0, "%s",
        moert_comm_error(comm));
  CHECK(value == 3.25, "broadcast got %g", value);

  // A sub-group in reverse order: members' chunks follow the group order.
  std::vector<int32_t> reversed(all.rbegin(), all.rend());
  std::vector<int32_t> order(size);
  CHECK(moert_all_gather(comm, &rank, sizeof rank, order.data(), reversed.data(), size) == 0, "%s",
        moert_comm_error(comm));
  CHECK(order == reversed, "reverse-ordered gather");
  CHECK(moert_barrier(comm, all.data(), size) == 0, "%s", moert_comm_error(comm));

  std::printf("rank %d of %d: %s\n", rank, size, failures ? "FAILED" : "ok");
  moert_mpi_finalize(comm);
  return failures ? 1 : 0;
}
