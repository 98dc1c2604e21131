//===- CommImpl.h - the communicator backends' interface --------*- C++ -*-===//
//
// moert_comm is a C++ object behind the C ABI of moert/Comm.h: Comm.cpp
// checks groups and counts bytes once for all backends, then calls the
// backend (ThreadComm.cpp, MpiComm.cpp). `index` is the caller's position
// in the group; groups are validated before a backend sees them. Backends'
// buffers are host memory: CommBuffers.cpp stages device buffers first.
// moert/CommBackend.h's table (CommRegistry.cpp) says how a backend starts
// its ranks.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_COMMIMPL_H
#define MOERT_COMMIMPL_H

#include "moert/Comm.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moert {
/// The emulated link of a rank (moert_comm_emulate_link), shared by its
/// communicator and their duplicates: one link, so their transfers queue.
struct EmulatedLink {
  std::mutex mutex;
  double bytesPerSecond = 0, latency = 0;
  /// Between nodes (moert_comm_emulate_inter_node); 0: the link above.
  double interBytesPerSecond = 0, interLatency = 0;
  double busyUntil = 0; ///< steady-clock seconds when the last transfer ends
};

/// The node of every rank (moert_comm_set_nodes), shared by a
/// communicator and its duplicates; empty: one node.
struct NodeMap {
  std::vector<int32_t> of;
};
} // namespace moert

namespace moert {
/// A tensor of a segmented all-reduce: read `in`, write `out` (may alias).
struct Segment {
  const float *in;
  float *out;
  int64_t count;
};
} // namespace moert

struct moert_comm {
  virtual ~moert_comm() = default;

  int rank = 0, size = 1;
  std::string error;
  int64_t bytes[MOERT_NUM_COLLECTIVES] = {};
  /// Of those, the bytes sent to ranks of other nodes.
  int64_t interNodeBytes[MOERT_NUM_COLLECTIVES] = {};
  std::shared_ptr<moert::EmulatedLink> link = std::make_shared<moert::EmulatedLink>();
  std::shared_ptr<moert::NodeMap> nodes = std::make_shared<moert::NodeMap>();

  /// A communicator over the same ranks whose collectives never match this
  /// one's (moert_comm_dup), or null when the backend cannot run two at
  /// once; it shares the emulated link.
  virtual moert_comm *duplicate() { return nullptr; }

  /// Backends return false after setting `error` (without the rank prefix).
  virtual bool allReduce(float *data, int64_t count, const int32_t *group, int n, int index) = 0;
  /// out = (sum over members of in, member order) x factor, for the
  /// concatenation of `segments` (the same counts on every member); the
  /// default packs them into one allReduce.
  virtual bool allReduceSegments(const moert::Segment *segments, int numSegments, double factor,
                                 const int32_t *group, int n, int index);
  virtual bool allToAllV(const void *send, const int64_t *sendBytes, void *recv,
                         const int64_t *recvBytes, const int32_t *group, int n, int index) = 0;
  virtual bool allGather(const void *send, int64_t bytes, void *recv, const int32_t *group, int n,
                         int index) = 0;
  virtual bool reduceScatter(const float *send, float *recv, int64_t count, const int32_t *group,
                             int n, int index) = 0;
  virtual bool broadcast(void *data, int64_t bytes, int rootIndex, const int32_t *group, int n,
                         int index) = 0;
  virtual bool barrier(const int32_t *group, int n, int index) = 0;
};

struct moert_comm_backend;

namespace moert {
/// "[0, 2, 3]".
std::string groupText(const int32_t *group, int n);
/// The threads backend (ThreadComm.cpp), the registry's first
/// (CommRegistry.cpp).
const moert_comm_backend &threadsBackend();
/// moert_all_reduce_f32 of several tensors at once, each scaled by
/// `factor` after the sum (in double, rounded to float): one message, the
/// bytes of their total, no packing on backends that can avoid it.
int allReduceSegments(moert_comm *comm, const Segment *segments, int numSegments, double factor,
                      const int32_t *group, int n);
} // namespace moert

#endif // MOERT_COMMIMPL_H
