//===- ThreadComm.cpp - collectives between ranks that are threads --------===//
//
// Ranks share the process: a collective is a rendezvous. Every member posts
// its buffers, waits until all members have posted, reads the others'
// buffers directly (results in member order, so every member computes the
// same bits), then waits until all members are done reading before anyone
// reuses its buffers. An all-reduce splits the work: each member sums one
// chunk, and all copy every chunk after a third wait. Every wait is bounded
// by the timeout; a member that times out withdraws its buffers and fails
// the collective, and every other member, waiting or arriving later, fails
// with its message instead of reading buffers no one guards any more.
//
//===----------------------------------------------------------------------===//

#include "../CommImpl.h"
#include "../../lib/CopyBytes.h"
#include "../../lib/Staging.h"
#include "moert/CommBackend.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

using moert::groupText;

namespace {

const char *kNames[] = {"all_reduce",     "all_to_all_v", "all_gather",
                        "reduce_scatter", "broadcast",    "barrier"};

struct Posting {
  const void *in = nullptr;
  const int64_t *sendBytes = nullptr;
  int64_t count = 0;
  int root = -1;
  bool posted = false;
  float *scratch = nullptr;                 ///< all_reduce: the member's summed chunk
  const moert::Segment *segments = nullptr; ///< all_reduce: its tensors
  int numSegments = 0;
};

struct Op {
  int kind = -1;
  std::vector<Posting> members;
  int arrived = 0, halfway = 0, departed = 0, released = 0;
  /// A member gave up (timed out): the others fail too, with its message,
  /// instead of reading buffers it no longer guards.
  bool failed = false;
  std::string failure;
};

struct World {
  int size;
  std::chrono::duration<double> timeout;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::string, Op> ops;
};

class ThreadComm : public moert_comm {
public:
  ThreadComm(World &world, int r, int channel = 0) : world(world), channel(channel) {
    rank = r;
    size = world.size;
  }

  /// The same rendezvous table under another channel prefix: every rank's
  /// k-th duplicate has the same channel, so they match only each other.
  moert_comm *duplicate() override {
    return new ThreadComm(world, rank, ++duplicates * 1000 + channel);
  }

  /// One tensor in place: allReduceSegments' reduce-scatter and all-gather.
  bool allReduce(float *data, int64_t count, const int32_t *group, int n, int index) override {
    moert::Segment whole{data, data, count};
    return allReduceSegments(&whole, 1, 1.0, group, n, index);
  }

  /// Reduce-scatter, then all-gather, over the concatenation of the
  /// segments without packing it: member i sums chunk i of every member's
  /// inputs (in member order: the same bits everywhere) into its staging
  /// buffer, posted with its segments, and scales it; after all chunks are
  /// summed, each member copies every chunk into its own outputs.
  bool allReduceSegments(const moert::Segment *segments, int numSegments, double factor,
                         const int32_t *group, int n, int index) override {
    int64_t count = 0;
    for (int t = 0; t < numSegments; ++t)
      count += segments[t].count;
    float *sum = moert::staging<float>(moert::Slot::Sum, static_cast<size_t>(count));
    Rendezvous c(*this, MOERT_ALL_REDUCE, group, n, index);
    Posting mine{nullptr, nullptr, count, -1, false, sum};
    mine.segments = segments;
    mine.numSegments = numSegments;
    if (!c.arrive(mine))
      return false;
    bool ok = c.sameCount(count);
    for (int i = 0; ok && i < n; ++i) {
      const Posting &p = c.member(i);
      ok = p.numSegments == numSegments;
      for (int t = 0; ok && t < numSegments; ++t)
        ok = p.segments[t].count == segments[t].count;
    }
    // Visits [lo, hi) of the concatenation as (segment, offset, length).
    auto pieces = [&](int64_t lo, int64_t hi, auto &&visit) {
      int64_t start = 0;
      for (int t = 0; t < numSegments && start < hi; start += segments[t].count, ++t) {
        int64_t a = std::max(lo, start), b = std::min(hi, start + segments[t].count);
        if (a < b)
          visit(t, a - start, a, b - a);
      }
    };
    auto chunk = [&](int i) {
      return std::pair<int64_t, int64_t>(count * i / n, count * (i + 1) / n);
    };
    if (ok) {
      auto [lo, hi] = chunk(index);
      std::fill(sum + lo, sum + hi, 0.0f);
      for (int i = 0; i < n; ++i)
        pieces(lo, hi, [&](int t, int64_t off, int64_t at, int64_t len) {
          const float *in = c.member(i).segments[t].in + off;
          float *to = sum + at;
          for (int64_t k = 0; k < len; ++k)
            to[k] += in[k];
        });
      if (factor != 1.0)
        for (int64_t k = lo; k < hi; ++k)
          sum[k] = static_cast<float>(sum[k] * factor);
    }
    if (!c.halfway())
      return false;
    for (int i = 0; ok && i < n; ++i) {
      auto [lo, hi] = chunk(i);
      const float *from = c.member(i).scratch;
      pieces(lo, hi, [&](int t, int64_t off, int64_t at, int64_t len) {
        moert::copyBytes(segments[t].out + off, from + at, static_cast<size_t>(len) * 4);
      });
    }
    if (!c.depart())
      return false;
    if (!ok)
      return fail("all_reduce on group " + groupText(group, n) +
                  ": members passed different element counts");
    return true;
  }

  bool allToAllV(const void *send, const int64_t *sendBytes, void *recv, const int64_t *recvBytes,
                 const int32_t *group, int n, int index) override {
    Rendezvous c(*this, MOERT_ALL_TO_ALL, group, n, index);
    if (!c.arrive({send, sendBytes, 0}))
      return false;
    std::string mismatch;
    int64_t offset = 0;
    for (int j = 0; j < n && mismatch.empty(); ++j) {
      const Posting &p = c.member(j);
      int64_t from = 0;
      for (int k = 0; k < index; ++k)
        from += p.sendBytes[k];
      int64_t length = p.sendBytes[index];
      if (length != recvBytes[j]) {
        mismatch = "rank " + std::to_string(group[j]) + " sends " + std::to_string(length) +
                   " bytes but " + std::to_string(recvBytes[j]) + " are expected";
        break;
      }
      moert::copyBytes(static_cast<char *>(recv) + offset, static_cast<const char *>(p.in) + from,
                       static_cast<size_t>(length));
      offset += length;
    }
    if (!c.depart())
      return false;
    if (!mismatch.empty())
      return fail("all_to_all_v on group " + groupText(group, n) + ": " + mismatch);
    return true;
  }

  bool allGather(const void *send, int64_t bytes, void *recv, const int32_t *group, int n,
                 int index) override {
    Rendezvous c(*this, MOERT_ALL_GATHER, group, n, index);
    if (!c.arrive({send, nullptr, bytes}))
      return false;
    bool ok = c.sameCount(bytes);
    for (int j = 0; ok && j < n; ++j)
      moert::copyBytes(static_cast<char *>(recv) + j * bytes, c.member(j).in,
                       static_cast<size_t>(bytes));
    if (!c.depart())
      return false;
    return ok ||
           fail("all_gather on group " + groupText(group, n) + ": members passed different sizes");
  }

  bool reduceScatter(const float *send, float *recv, int64_t count, const int32_t *group, int n,
                     int index) override {
    Rendezvous c(*this, MOERT_REDUCE_SCATTER, group, n, index);
    if (!c.arrive({send, nullptr, count}))
      return false;
    bool ok = c.sameCount(count);
    // Summed in member order into this thread's staging (no allocation per
    // call), copied out once every member has read the inputs.
    float *sum = moert::staging<float>(moert::Slot::Sum, ok ? static_cast<size_t>(count) : 0);
    if (ok)
      std::fill(sum, sum + count, 0.0f);
    for (int j = 0; ok && j < n; ++j) {
      const float *in = static_cast<const float *>(c.member(j).in) + index * count;
      for (int64_t k = 0; k < count; ++k)
        sum[k] += in[k];
    }
    if (!c.depart())
      return false;
    if (!ok)
      return fail("reduce_scatter on group " + groupText(group, n) +
                  ": members passed different element counts");
    moert::copyBytes(recv, sum, static_cast<size_t>(count) * sizeof(float));
    return true;
  }

  bool broadcast(void *data, int64_t bytes, int rootIndex, const int32_t *group, int n,
                 int index) override {
    Rendezvous c(*this, MOERT_BROADCAST, group, n, index);
    if (!c.arrive({data, nullptr, bytes, rootIndex}))
      return false;
    const Posting &root = c.member(rootIndex);
    bool ok = root.count == bytes && root.root == rootIndex;
    if (ok && index != rootIndex)
      moert::copyBytes(data, root.in, static_cast<size_t>(bytes));
    if (!c.depart())
      return false;
    return ok || fail("broadcast on group " + groupText(group, n) +
                      ": members disagree on the root or the size");
  }

  bool barrier(const int32_t *group, int n, int index) override {
    Rendezvous c(*this, MOERT_BARRIER, group, n, index);
    return c.arrive({}) && c.depart();
  }

private:
  bool fail(const std::string &message) {
    error = message;
    return false;
  }

  /// One collective in progress for the calling member.
  class Rendezvous {
  public:
    Rendezvous(ThreadComm &comm, int kind, const int32_t *group, int n, int index)
        : comm(comm), world(comm.world), kind(kind), group(group), n(n), index(index) {}

    /// Posts the caller's buffers and waits for every member.
    bool arrive(Posting mine) {
      std::unique_lock<std::mutex> lock(world.mutex);
      std::string groupKey = groupText(group, n);
      uint64_t seq = comm.sequence[groupKey]++;
      key = std::to_string(comm.channel) + ":" + groupKey + "#" + std::to_string(seq);
      op = &world.ops[key];
      if (op->members.empty()) {
        op->members.resize(n);
        op->kind = kind;
      }
      if (op->kind != kind)
        return comm.fail("collective #" + std::to_string(seq) + " on group " + groupKey +
                         ": this rank called " + kNames[kind] + " but another member called " +
                         kNames[op->kind]);
      if (op->failed)
        return comm.fail(op->failure);
      mine.posted = true;
      op->members[index] = mine;
      ++op->arrived;
      world.cv.notify_all();
      if (!world.cv.wait_for(lock, world.timeout, [&] { return op->arrived == n || op->failed; })) {
        std::string missing;
        for (int i = 0; i < n; ++i)
          if (!op->members[i].posted)
            missing += (missing.empty() ? "" : ", ") + std::to_string(group[i]);
        // Withdraw: a member arriving later must not read these buffers.
        op->members[index].posted = false;
        --op->arrived;
        return giveUp(std::string(kNames[kind]) + " #" + std::to_string(seq) + " on group " +
                      groupKey + " timed out after " + std::to_string(world.timeout.count()) +
                      " s: rank(s) " + missing + " did not arrive");
      }
      if (op->failed)
        return comm.fail(op->failure);
      return true;
    }

    /// Waits until every member has passed this point (all_reduce: summed
    /// its chunk).
    bool halfway() {
      std::unique_lock<std::mutex> lock(world.mutex);
      ++op->halfway;
      world.cv.notify_all();
      if (!world.cv.wait_for(lock, world.timeout, [&] { return op->halfway == n || op->failed; }))
        return giveUp(std::string(kNames[kind]) + " on group " + groupText(group, n) +
                      " timed out while members summed their chunks");
      if (op->failed)
        return comm.fail(op->failure);
      return true;
    }

    /// Waits until every member has finished reading the others' buffers.
    bool depart() {
      std::unique_lock<std::mutex> lock(world.mutex);
      ++op->departed;
      world.cv.notify_all();
      if (!world.cv.wait_for(lock, world.timeout, [&] { return op->departed == n || op->failed; }))
        return giveUp(std::string(kNames[kind]) + " on group " + groupText(group, n) +
                      " timed out while members finished reading");
      if (op->failed)
        return comm.fail(op->failure);
      if (++op->released == n)
        world.ops.erase(key);
      return true;
    }

    /// This member timed out: the collective fails for every member with
    /// `message` (the caller holds the world's lock).
    bool giveUp(const std::string &message) {
      op->failed = true;
      op->failure = message;
      world.cv.notify_all();
      return comm.fail(message);
    }

    bool sameCount(int64_t count) const {
      for (int i = 0; i < n; ++i)
        if (op->members[i].count != count)
          return false;
      return true;
    }

    const Posting &member(int i) const { return op->members[i]; }

  private:
    ThreadComm &comm;
    World &world;
    int kind;
    const int32_t *group;
    int n, index;
    Op *op = nullptr;
    std::string key;
  };

  World &world;
  int channel;                              ///< 0, or a duplicate's (see duplicate())
  int duplicates = 0;                       ///< made from this one so far
  std::map<std::string, uint64_t> sequence; ///< per group: collectives so far
};

} // namespace

extern "C" int moert_run_threads(int ranks, double timeoutSeconds,
                                 int (*fn)(moert_comm *comm, void *user), void *user) {
  if (ranks < 1 || !(timeoutSeconds > 0))
    return 1;
  World world;
  world.size = ranks;
  world.timeout = std::chrono::duration<double>(timeoutSeconds);
  std::vector<ThreadComm> comms;
  comms.reserve(ranks);
  for (int r = 0; r < ranks; ++r)
    comms.emplace_back(world, r);
  std::vector<int> results(ranks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] { results[r] = fn(&comms[r], user); });
  for (std::thread &t : threads)
    t.join();
  for (int r : results)
    if (r != 0)
      return r;
  return 0;
}

namespace {
int runThreads(moert_comm *, int ranks, double timeoutSeconds, int (*fn)(moert_comm *, void *),
               void *user, char *error, size_t errorSize) {
  if (ranks < 1 || !(timeoutSeconds > 0)) {
    std::snprintf(error, errorSize, "threads: %d ranks with a timeout of %g s", ranks,
                  timeoutSeconds);
    return -1;
  }
  return moert_run_threads(ranks, timeoutSeconds, fn, user);
}
} // namespace

const moert_comm_backend &moert::threadsBackend() {
  static const moert_comm_backend backend = {"threads", 0, nullptr, nullptr, runThreads, nullptr};
  return backend;
}
