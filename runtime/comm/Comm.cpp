//===- Comm.cpp - the communicator C ABI over its backends ----------------===//

#include "CommImpl.h"
#include "../lib/CopyBytes.h"
#include "../lib/Staging.h"
#include "../lib/Trace.h"

#include <algorithm>
#include <vector>

std::string moert::groupText(const int32_t *group, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i)
    s += (i ? ", " : "") + std::to_string(group[i]);
  return s + "]";
}

namespace {

/// The caller's index in a valid group, or -1 with comm->error set.
int validate(moert_comm *comm, const int32_t *group, int n) {
  auto fail = [&](const std::string &m) {
    comm->error = "rank " + std::to_string(comm->rank) + ": " + m;
    return -1;
  };
  if (n < 1 || !group)
    return fail("an empty group");
  std::vector<int32_t> seen(group, group + n);
  std::sort(seen.begin(), seen.end());
  std::string text = moert::groupText(group, n);
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
    return fail("group " + text + " names a rank twice");
  if (seen.front() < 0 || seen.back() >= comm->size)
    return fail("group " + text + " names a rank outside [0, " + std::to_string(comm->size) + ")");
  for (int i = 0; i < n; ++i)
    if (group[i] == comm->rank)
      return i;
  return fail("rank " + std::to_string(comm->rank) + " is not in group " + text);
}

/// Finishes a backend call: prefixes the error with the rank.
int finish(moert_comm *comm, bool ok) {
  if (ok)
    return 0;
  comm->error = "rank " + std::to_string(comm->rank) + ": " + comm->error;
  return 1;
}

/// What a collective puts on the wire: `bytes` in `messages` sequential
/// messages, of which `interBytes` in `interMessages` to other nodes;
/// `intraBytes` within the node when it is not bytes - interBytes (an
/// all-to-all's larger direction can differ between the two links).
struct Wire {
  double bytes = 0;
  int messages = 0;
  double interBytes = 0;
  int interMessages = 0;
  double intraBytes = -1;
};

/// The emulated links' time for `w` (moert_comm_emulate_link, and
/// moert_comm_emulate_inter_node for its inter-node part). Transfers of a
/// rank's communicator and its duplicates share the link: each starts when
/// the previous one ends.
void emulateLink(const moert_comm *comm, const Wire &w) {
  moert::EmulatedLink &link = *comm->link;
  double seconds = 0, end;
  {
    std::lock_guard<std::mutex> lock(link.mutex);
    bool intra = link.bytesPerSecond > 0, inter = link.interBytesPerSecond > 0;
    if (!intra && !inter)
      return;
    if (!inter) // one link for every byte
      seconds = w.bytes / link.bytesPerSecond + w.messages * link.latency;
    else {
      if (intra)
        seconds =
            (w.intraBytes >= 0 ? w.intraBytes : w.bytes - w.interBytes) / link.bytesPerSecond +
            (w.messages - w.interMessages) * link.latency;
      seconds += w.interBytes / link.interBytesPerSecond + w.interMessages * link.interLatency;
    }
    if (seconds <= 0)
      return;
    double now = moert::nowSeconds();
    end = std::max(now, link.busyUntil) + seconds;
    link.busyUntil = end;
  }
  moert::waitUntil(end);
}

/// Whether global rank `other` runs on another node than this rank.
bool remote(const moert_comm *comm, int32_t other) {
  const std::vector<int32_t> &of = comm->nodes->of;
  return !of.empty() && of[other] != of[comm->rank];
}

/// The members of `group` on other nodes than this rank.
int remoteMembers(const moert_comm *comm, const int32_t *group, int n) {
  int count = 0;
  for (int j = 0; j < n; ++j)
    count += remote(comm, group[j]) ? 1 : 0;
  return count;
}

/// A ring all-reduce of `count` floats over `group` from member `index`:
/// 2 (n - 1) messages of count / n floats to the next member, across nodes
/// when that member is on another node. Counts the bytes sent.
Wire ringAllReduce(moert_comm *comm, int64_t count, const int32_t *group, int n, int index) {
  Wire w;
  w.bytes = 2.0 * (n - 1) * count * 4 / n;
  w.messages = 2 * (n - 1);
  comm->bytes[MOERT_ALL_REDUCE] += 2 * (n - 1) * count * 4 / n;
  if (n > 1 && remote(comm, group[(index + 1) % n])) {
    w.interBytes = w.bytes, w.interMessages = w.messages;
    comm->interNodeBytes[MOERT_ALL_REDUCE] += 2 * (n - 1) * count * 4 / n;
  }
  return w;
}

/// ceil(log2 n): the rounds of a tree broadcast or a dissemination barrier.
int treeRounds(int n) {
  int rounds = 0;
  while ((1 << rounds) < n)
    ++rounds;
  return rounds;
}

} // namespace

bool moert_comm::allReduceSegments(const moert::Segment *segments, int numSegments, double factor,
                                   const int32_t *group, int n, int index) {
  int64_t total = 0;
  for (int s = 0; s < numSegments; ++s)
    total += segments[s].count;
  bool packed = numSegments != 1 || segments[0].in != segments[0].out;
  float *data = packed ? moert::staging<float>(moert::Slot::Bucket, static_cast<size_t>(total))
                       : segments[0].out;
  for (int64_t s = 0, at = 0; packed && s < numSegments; at += segments[s].count, ++s)
    moert::copyBytes(data + at, segments[s].in, static_cast<size_t>(segments[s].count) * 4);
  if (!allReduce(data, total, group, n, index))
    return false;
  if (factor != 1.0)
    for (int64_t i = 0; i < total; ++i)
      data[i] = static_cast<float>(data[i] * factor);
  for (int64_t s = 0, at = 0; packed && s < numSegments; at += segments[s].count, ++s)
    moert::copyBytes(segments[s].out, data + at, static_cast<size_t>(segments[s].count) * 4);
  return true;
}

int moert::allReduceSegments(moert_comm *comm, const Segment *segments, int numSegments,
                             double factor, const int32_t *group, int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->allReduceSegments(segments, numSegments, factor, group, n, i)))
    return 1;
  int64_t count = 0;
  for (int s = 0; s < numSegments; ++s)
    count += segments[s].count;
  Wire w = ringAllReduce(comm, count, group, n, i);
  if (n > 1)
    emulateLink(comm, w);
  return 0;
}

extern "C" {

int moert_comm_rank(const moert_comm *comm) { return comm->rank; }
void moert_comm_emulate_link(moert_comm *comm, double bytesPerSecond, double latencySeconds) {
  std::lock_guard<std::mutex> lock(comm->link->mutex);
  comm->link->bytesPerSecond = bytesPerSecond;
  comm->link->latency = latencySeconds;
}
void moert_comm_emulate_inter_node(moert_comm *comm, double bytesPerSecond, double latencySeconds) {
  std::lock_guard<std::mutex> lock(comm->link->mutex);
  comm->link->interBytesPerSecond = bytesPerSecond;
  comm->link->interLatency = latencySeconds;
}
int moert_comm_set_nodes(moert_comm *comm, const int32_t *nodeOf) {
  if (!nodeOf) {
    comm->nodes->of.clear();
    return 0;
  }
  for (int r = 0; r < comm->size; ++r)
    if (nodeOf[r] < 0) {
      comm->error = "rank " + std::to_string(comm->rank) + ": rank " + std::to_string(r) +
                    " is placed on node " + std::to_string(nodeOf[r]) + " (nodes are >= 0)";
      return 1;
    }
  comm->nodes->of.assign(nodeOf, nodeOf + comm->size);
  return 0;
}
int64_t moert_comm_inter_node_bytes(const moert_comm *comm, int collective) {
  return collective >= 0 && collective < MOERT_NUM_COLLECTIVES ? comm->interNodeBytes[collective]
                                                               : 0;
}
moert_comm *moert_comm_dup(moert_comm *comm) {
  moert_comm *copy = comm->duplicate();
  if (copy) {
    copy->link = comm->link;
    copy->nodes = comm->nodes;
  }
  return copy;
}
void moert_comm_free(moert_comm *comm) { delete comm; }
int moert_comm_size(const moert_comm *comm) { return comm->size; }
const char *moert_comm_error(const moert_comm *comm) { return comm->error.c_str(); }
int64_t moert_comm_bytes(const moert_comm *comm, int collective) {
  return collective >= 0 && collective < MOERT_NUM_COLLECTIVES ? comm->bytes[collective] : 0;
}

int moert_all_reduce_f32(moert_comm *comm, float *data, int64_t count, const int32_t *group,
                         int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->allReduce(data, count, group, n, i)))
    return 1;
  Wire w = ringAllReduce(comm, count, group, n, i);
  if (n > 1)
    emulateLink(comm, w);
  return 0;
}

int moert_all_to_all_v(moert_comm *comm, const void *send, const int64_t *sendBytes, void *recv,
                       const int64_t *recvBytes, const int32_t *group, int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->allToAllV(send, sendBytes, recv, recvBytes, group, n, i)))
    return 1;
  double sent = 0, received = 0, interSent = 0, interReceived = 0;
  Wire w;
  for (int j = 0; j < n; ++j)
    if (j != i) {
      comm->bytes[MOERT_ALL_TO_ALL] += sendBytes[j];
      sent += sendBytes[j];
      received += recvBytes[j];
      if (remote(comm, group[j])) {
        comm->interNodeBytes[MOERT_ALL_TO_ALL] += sendBytes[j];
        interSent += sendBytes[j];
        interReceived += recvBytes[j];
        ++w.interMessages;
      }
    }
  w.bytes = std::max(sent, received), w.messages = n - 1;
  w.interBytes = std::max(interSent, interReceived);
  w.intraBytes = std::max(sent - interSent, received - interReceived);
  if (n > 1)
    emulateLink(comm, w);
  return 0;
}

int moert_all_gather(moert_comm *comm, const void *send, int64_t bytes, void *recv,
                     const int32_t *group, int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->allGather(send, bytes, recv, group, n, i)))
    return 1;
  int far = remoteMembers(comm, group, n);
  comm->bytes[MOERT_ALL_GATHER] += bytes * (n - 1);
  comm->interNodeBytes[MOERT_ALL_GATHER] += bytes * far;
  if (n > 1)
    emulateLink(
        comm, {static_cast<double>(bytes) * (n - 1), n - 1, static_cast<double>(bytes) * far, far});
  return 0;
}

int moert_reduce_scatter_f32(moert_comm *comm, const float *send, float *recv, int64_t count,
                             const int32_t *group, int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->reduceScatter(send, recv, count, group, n, i)))
    return 1;
  int far = remoteMembers(comm, group, n);
  comm->bytes[MOERT_REDUCE_SCATTER] += (n - 1) * count * 4;
  comm->interNodeBytes[MOERT_REDUCE_SCATTER] += far * count * 4;
  if (n > 1)
    emulateLink(comm, {static_cast<double>(n - 1) * count * 4, n - 1,
                       static_cast<double>(far) * count * 4, far});
  return 0;
}

int moert_broadcast(moert_comm *comm, void *data, int64_t bytes, int root, const int32_t *group,
                    int n) {
  int i = validate(comm, group, n);
  if (i < 0)
    return 1;
  int rootIndex = -1;
  for (int j = 0; j < n; ++j)
    if (group[j] == root)
      rootIndex = j;
  if (rootIndex < 0) {
    comm->error = "rank " + std::to_string(comm->rank) + ": broadcast root " +
                  std::to_string(root) + " is not in group " + moert::groupText(group, n);
    return 1;
  }
  if (finish(comm, comm->broadcast(data, bytes, rootIndex, group, n, i)))
    return 1;
  int far = remoteMembers(comm, group, n);
  if (i == rootIndex) {
    comm->bytes[MOERT_BROADCAST] += bytes * (n - 1);
    comm->interNodeBytes[MOERT_BROADCAST] += bytes * far;
  }
  if (n > 1)
    emulateLink(comm, {static_cast<double>(bytes), treeRounds(n),
                       far ? static_cast<double>(bytes) : 0, far ? treeRounds(n) : 0});
  return 0;
}

int moert_barrier(moert_comm *comm, const int32_t *group, int n) {
  int i = validate(comm, group, n);
  if (i < 0 || finish(comm, comm->barrier(group, n, i)))
    return 1;
  if (n > 1)
    emulateLink(comm, {0, treeRounds(n), 0, remoteMembers(comm, group, n) ? treeRounds(n) : 0});
  return 0;
}

} // extern "C"
