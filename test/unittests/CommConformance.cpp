//===- CommConformance.cpp - checks every communicator backend passes -----===//

#include "CommConformance.h"

#include <cmath>
#include <numeric>

namespace {

struct Checker {
  moert_comm *comm;
  int rank, size;
  std::vector<int32_t> all;
  std::vector<std::string> failures;

  explicit Checker(moert_comm *c)
      : comm(c), rank(moert_comm_rank(c)), size(moert_comm_size(c)), all(size) {
    std::iota(all.begin(), all.end(), 0);
  }

  void check(bool ok, const std::string &what) {
    if (!ok)
      failures.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  /// A collective's result code: 0, else its error is a failure.
  bool ran(int rc, const char *what) {
    check(rc == 0, std::string(what) + " failed: " + moert_comm_error(comm));
    return rc == 0;
  }

  void allReduce() {
    const int count = 257;
    std::vector<float> data(count);
    for (int k = 0; k < count; ++k)
      data[k] = static_cast<float>(rank) + static_cast<float>(k) / 8;
    int64_t before = moert_comm_bytes(comm, MOERT_ALL_REDUCE);
    moert_buffer b = moert_host_buffer(data.data(), count * 4);
    if (!ran(moert_all_reduce_buffer(comm, &b, all.data(), size), "all_reduce"))
      return;
    for (int k = 0; k < count; ++k) {
      float want = 0;
      for (int r = 0; r < size; ++r)
        want += static_cast<float>(r) + static_cast<float>(k) / 8;
      check(std::fabs(data[k] - want) <= 1e-5f * std::fabs(want),
            "all_reduce[" + std::to_string(k) + "] = " + std::to_string(data[k]) + ", want " +
                std::to_string(want));
    }
    check(moert_comm_bytes(comm, MOERT_ALL_REDUCE) - before == 2 * (size - 1) * count * 4 / size,
          "all_reduce byte counter");
  }

  /// Rank r sends r + j + 1 bytes of 'a' + r to rank j.
  void allToAll() {
    std::vector<int64_t> sendBytes(size), recvBytes(size);
    std::string send, want;
    for (int j = 0; j < size; ++j) {
      sendBytes[j] = rank + j + 1;
      recvBytes[j] = j + rank + 1;
      send += std::string(sendBytes[j], static_cast<char>('a' + rank));
      want += std::string(recvBytes[j], static_cast<char>('a' + j));
    }
    std::string recv(want.size(), '?');
    moert_buffer s = moert_host_buffer(send.data(), static_cast<int64_t>(send.size()));
    moert_buffer r = moert_host_buffer(recv.data(), static_cast<int64_t>(recv.size()));
    if (ran(moert_all_to_all_v_buffer(comm, &s, sendBytes.data(), &r, recvBytes.data(), all.data(),
                                      size),
            "all_to_all_v"))
      check(recv == want, "all_to_all_v received " + recv + ", want " + want);
  }

  /// all_gather over `group`: each member's rank, in member order.
  void allGather(const std::vector<int32_t> &group, const char *what) {
    int32_t mine = 10 * rank;
    std::vector<int32_t> got(size, -1);
    moert_buffer s = moert_host_buffer(&mine, 4), r = moert_host_buffer(got.data(), 4 * size);
    if (!ran(moert_all_gather_buffer(comm, &s, &r, group.data(), size), what))
      return;
    for (int j = 0; j < size; ++j)
      check(got[j] == 10 * group[j],
            std::string(what) + "[" + std::to_string(j) + "] = " + std::to_string(got[j]));
  }

  /// Chunk j of rank r holds r + j (2 floats): rank j gets sum_r (r + j).
  void reduceScatter() {
    std::vector<float> chunks(2 * size), part(2, -1.0f);
    for (int j = 0; j < size; ++j)
      chunks[2 * j] = chunks[2 * j + 1] = static_cast<float>(rank + j);
    moert_buffer s = moert_host_buffer(chunks.data(), 8 * size),
                 r = moert_host_buffer(part.data(), 8);
    if (!ran(moert_reduce_scatter_buffer(comm, &s, &r, all.data(), size), "reduce_scatter"))
      return;
    float want = static_cast<float>(size * (size - 1) / 2 + size * rank);
    check(part[0] == want && part[1] == want,
          "reduce_scatter got " + std::to_string(part[0]) + ", want " + std::to_string(want));
  }

  void broadcast() {
    double value = rank == size - 1 ? 3.25 : 0;
    moert_buffer b = moert_host_buffer(&value, sizeof value);
    if (ran(moert_broadcast_buffer(comm, &b, size - 1, all.data(), size), "broadcast"))
      check(value == 3.25, "broadcast got " + std::to_string(value));
  }

  /// A receive buffer of the wrong size fails on the caller before any
  /// communication, naming the sizes.
  void sizeMismatch() {
    int32_t mine = 0, got[1];
    moert_buffer s = moert_host_buffer(&mine, 4), r = moert_host_buffer(got, 3);
    check(moert_all_gather_buffer(comm, &s, &r, all.data(), size) != 0,
          "all_gather into a short buffer succeeded");
    std::string want = "rank " + std::to_string(rank) +
                       ": all_gather: the receive buffer holds 3 " + "bytes where " +
                       std::to_string(4 * size) + " are expected";
    check(moert_comm_error(comm) == want, std::string("error ") + moert_comm_error(comm));
  }
};

} // namespace

std::vector<std::string> moert::test::checkCollectives(moert_comm *comm) {
  Checker c(comm);
  c.allReduce();
  c.allToAll();
  c.allGather(c.all, "all_gather");
  c.allGather(std::vector<int32_t>(c.all.rbegin(), c.all.rend()), "reverse-ordered all_gather");
  c.reduceScatter();
  c.broadcast();
  c.sizeMismatch();
  c.ran(moert_barrier(comm, c.all.data(), c.size), "barrier");
  return c.failures;
}
