//===- ThreadComm.cpp - collectives between ranks that are threads --------===//
//
// Ranks share the process: a collective is a rendezvous. Every member posts
// its buffers, waits until all members have posted, reads the others'
// buffers directly (results in member order, so every member computes the
// same bits), then waits until all members are done reading before anyone
// reuses its buffers. Both waits are bounded by the timeout.
//
//===----------------------------------------------------------------------===//

#include "moert/Comm.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

const char *kNames[] = {"all_reduce", "all_to_all_v", "all_gather",
                        "reduce_scatter", "broadcast", "barrier"};

struct Posting {
  const void *in = nullptr;
  void *out = nullptr;
  const int64_t *sendBytes = nullptr;
  int64_t count = 0;
  int root = -1;
  bool posted = false;
};

struct Op {
  int kind = -1;
  std::vector<Posting> members;
  int arrived = 0, departed = 0, released = 0;
};

struct World {
  int size;
  std::chrono::duration<double> timeout;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::string, Op> ops;
};

std::string groupText(const int32_t *group, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::to_string(group[i]);
  return s + "]";
}

} // namespace

struct moert_comm {
  World *world = nullptr;
  int rank = 0;
  std::map<std::string, uint64_t> sequence; ///< per group: collectives so far
  std::string error;
  int64_t bytes[MOERT_NUM_COLLECTIVES] = {};
};

namespace {

/// A collective in progress for the calling member.
class Collective {
public:
  Collective(moert_comm *comm, int kind, const int32_t *group, int n)
      : comm(comm), world(*comm->world), kind(kind), group(group), n(n) {}

  /// Checks the group; finds the caller's index.
  bool validate() {
    if (n < 1 || !group)
      return fail("an empty group");
    std::vector<int32_t> seen(group, group + n);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
      return fail("group " + groupText(group, n) + " names a rank twice");
    if (seen.front() < 0 || seen.back() >= world.size)
      return fail("group " + groupText(group, n) + " names a rank outside [0, " +
                  std::to_string(world.size) + ")");
    for (int i = 0; i < n; ++i)
      if (group[i] == comm->rank)
        index = i;
    if (index < 0)
      return fail("rank " + std::to_string(comm->rank) + " is not in group " +
                  groupText(group, n));
    return true;
  }

  /// Posts the caller's buffers and waits for every member.
  bool arrive(const Posting &mine) {
    std::unique_lock<std::mutex> lock(world.mutex);
    std::string groupKey = groupText(group, n);
    uint64_t seq = comm->sequence[groupKey]++;
    key = groupKey + "#" + std::to_string(seq);
    op = &world.ops[key];
    if (op->members.empty()) {
      op->members.resize(n);
      op->kind = kind;
    }
    if (op->kind != kind)
      return fail("collective #" + std::to_string(seq) + " on group " + groupKey +
                  ": this rank called " + kNames[kind] + " but another member called " +
                  kNames[op->kind]);
    op->members[index] = mine;
    op->members[index].posted = true;
    ++op->arrived;
    world.cv.notify_all();
    if (!world.cv.wait_for(lock, world.timeout, [&] { return op->arrived == n; })) {
      std::string missing;
      for (int i = 0; i < n; ++i)
        if (!op->members[i].posted)
          missing += (missing.empty() ? "" : ", ") + std::to_string(group[i]);
      return fail(std::string(kNames[kind]) + " #" + std::to_string(seq) +
                  " on group " + groupKey + " timed out after " +
                  std::to_string(world.timeout.count()) + " s: rank(s) " + missing +
                  " did not arrive");
    }
    return true;
  }

  /// Waits until every member has finished reading the others' buffers.
  bool depart() {
    std::unique_lock<std::mutex> lock(world.mutex);
    ++op->departed;
    world.cv.notify_all();
    if (!world.cv.wait_for(lock, world.timeout, [&] { return op->departed == n; }))
      return fail(std::string(kNames[kind]) + " on group " + groupText(group, n) +
                  " timed out while members finished reading");
    if (++op->released == n)
      world.ops.erase(key);
    return true;
  }

  bool fail(const std::string &message) {
    comm->error = "rank " + std::to_string(comm->rank) + ": " + message;
    return false;
  }

  const Posting &member(int i) const { return op->members[i]; }

  moert_comm *comm;
  World &world;
  int kind;
  const int32_t *group;
  int n;
  int index = -1;
  Op *op = nullptr;
  std::string key;
};

} // namespace

extern "C" {

int moert_comm_rank(const moert_comm *comm) { return comm->rank; }
int moert_comm_size(const moert_comm *comm) { return comm->world->size; }
const char *moert_comm_error(const moert_comm *comm) { return comm->error.c_str(); }
int64_t moert_comm_bytes(const moert_comm *comm, int collective) {
  return collective >= 0 && collective < MOERT_NUM_COLLECTIVES ? comm->bytes[collective]
                                                               : 0;
}

int moert_all_reduce_f32(moert_comm *comm, float *data, int64_t count,
                         const int32_t *group, int n) {
  Collective c(comm, MOERT_ALL_REDUCE, group, n);
  Posting mine;
  mine.in = data;
  mine.count = count;
  if (!c.validate() || !c.arrive(mine))
    return 1;
  bool ok = true;
  for (int i = 0; i < n; ++i)
    ok &= c.member(i).count == count;
  std::vector<float> sum(ok ? static_cast<size_t>(count) : 0, 0.0f);
  if (ok)
    for (int i = 0; i < n; ++i) { // member order: the same bits everywhere
      const float *in = static_cast<const float *>(c.member(i).in);
      for (int64_t k = 0; k < count; ++k)
        sum[k] += in[k];
    }
  if (!c.depart())
    return 1;
  if (!ok)
    return c.fail("all_reduce on group " + groupText(group, n) +
                  ": members passed different element counts"),
           1;
  std::memcpy(data, sum.data(), static_cast<size_t>(count) * sizeof(float));
  comm->bytes[MOERT_ALL_REDUCE] += 2 * (n - 1) * count * 4 / n;
  return 0;
}

int moert_all_to_all_v(moert_comm *comm, const void *send, const int64_t *sendBytes,
                       void *recv, const int64_t *recvBytes, const int32_t *group,
                       int n) {
  Collective c(comm, MOERT_ALL_TO_ALL, group, n);
  Posting mine;
  mine.in = send;
  mine.sendBytes = sendBytes;
  if (!c.validate() || !c.arrive(mine))
    return 1;
  std::string mismatch;
  int64_t offset = 0;
  for (int j = 0; j < n; ++j) {
    const Posting &p = c.member(j);
    int64_t from = 0;
    for (int k = 0; k < c.index; ++k)
      from += p.sendBytes[k];
    int64_t length = p.sendBytes[c.index];
    if (length != recvBytes[j]) {
      mismatch = "rank " + std::to_string(group[j]) + " sends " + std::to_string(length) +
                 " bytes but " + std::to_string(recvBytes[j]) + " are expected";
      break;
    }
    std::memcpy(static_cast<char *>(recv) + offset,
                static_cast<const char *>(p.in) + from, static_cast<size_t>(length));
    offset += length;
  }
  if (!c.depart())
    return 1;
  if (!mismatch.empty())
    return c.fail("all_to_all_v on group " + groupText(group, n) + ": " + mismatch), 1;
  for (int j = 0; j < n; ++j)
    if (j != c.index)
      comm->bytes[MOERT_ALL_TO_ALL] += sendBytes[j];
  return 0;
}

int moert_all_gather(moert_comm *comm, const void *send, int64_t bytes, void *recv,
                     const int32_t *group, int n) {
  Collective c(comm, MOERT_ALL_GATHER, group, n);
  Posting mine;
  mine.in = send;
  mine.count = bytes;
  if (!c.validate() || !c.arrive(mine))
    return 1;
  bool ok = true;
  for (int j = 0; j < n; ++j)
    ok &= c.member(j).count == bytes;
  if (ok)
    for (int j = 0; j < n; ++j)
      std::memcpy(static_cast<char *>(recv) + j * bytes, c.member(j).in,
                  static_cast<size_t>(bytes));
  if (!c.depart())
    return 1;
  if (!ok)
    return c.fail("all_gather on group " + groupText(group, n) +
                  ": members passed different sizes"),
           1;
  comm->bytes[MOERT_ALL_GATHER] += bytes * (n - 1);
  return 0;
}

int moert_reduce_scatter_f32(moert_comm *comm, const float *send, float *recv,
                             int64_t count, const int32_t *group, int n) {
  Collective c(comm, MOERT_REDUCE_SCATTER, group, n);
  Posting mine;
  mine.in = send;
  mine.count = count;
  if (!c.validate() || !c.arrive(mine))
    return 1;
  bool ok = true;
  for (int j = 0; j < n; ++j)
    ok &= c.member(j).count == count;
  std::vector<float> sum(ok ? static_cast<size_t>(count) : 0, 0.0f);
  if (ok)
    for (int j = 0; j < n; ++j) {
      const float *in = static_cast<const float *>(c.member(j).in) + c.index * count;
      for (int64_t k = 0; k < count; ++k)
        sum[k] += in[k];
    }
  if (!c.depart())
    return 1;
  if (!ok)
    return c.fail("reduce_scatter on group " + groupText(group, n) +
                  ": members passed different element counts"),
           1;
  std::memcpy(recv, sum.data(), static_cast<size_t>(count) * sizeof(float));
  comm->bytes[MOERT_REDUCE_SCATTER] += (n - 1) * count * 4;
  return 0;
}

int moert_broadcast(moert_comm *comm, void *data, int64_t bytes, int root,
                    const int32_t *group, int n) {
  Collective c(comm, MOERT_BROADCAST, group, n);
  Posting mine;
  mine.in = data;
  mine.count = bytes;
  mine.root = root;
  if (!c.validate())
    return 1;
  int rootIndex = -1;
  for (int i = 0; i < n; ++i)
    if (group[i] == root)
      rootIndex = i;
  if (rootIndex < 0)
    return c.fail("broadcast root " + std::to_string(root) + " is not in group " +
                  groupText(group, n)),
           1;
  if (!c.arrive(mine))
    return 1;
  bool ok = c.member(rootIndex).count == bytes && c.member(rootIndex).root == root;
  if (ok && c.index != rootIndex)
    std::memcpy(data, c.member(rootIndex).in, static_cast<size_t>(bytes));
  if (!c.depart())
    return 1;
  if (!ok)
    return c.fail("broadcast on group " + groupText(group, n) +
                  ": members disagree on the root or the size"),
           1;
  if (c.index == rootIndex)
    comm->bytes[MOERT_BROADCAST] += bytes * (n - 1);
  return 0;
}

int moert_barrier(moert_comm *comm, const int32_t *group, int n) {
  Collective c(comm, MOERT_BARRIER, group, n);
  if (!c.validate() || !c.arrive(Posting()) || !c.depart())
    return 1;
  return 0;
}

int moert_run_threads(int ranks, double timeoutSeconds,
                      int (*fn)(moert_comm *comm, void *user), void *user) {
  if (ranks < 1 || !(timeoutSeconds > 0))
    return 1;
  World world;
  world.size = ranks;
  world.timeout = std::chrono::duration<double>(timeoutSeconds);
  std::vector<moert_comm> comms(ranks);
  std::vector<int> results(ranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    comms[r].world = &world;
    comms[r].rank = r;
    threads.emplace_back([&, r] { results[r] = fn(&comms[r], user); });
  }
  for (std::thread &t : threads)
    t.join();
  for (int r : results)
    if (r != 0)
      return r;
  return 0;
}

} // extern "C"
