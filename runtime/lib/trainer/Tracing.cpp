//===- Tracing.cpp - emulated links and devices, the Chrome trace --------===//
//
// --emulate-link and --emulate-cluster make a run on one machine behave as
// on a slower network or on devices of unequal speed (moert/Comm.h,
// moert_context.run.compute_slowdown); --trace FILE writes what every rank did
// when (Trace.h), gathered to the lead rank.
//
//===----------------------------------------------------------------------===//

#include "Tracing.h"

#include "moert/Checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

using namespace moert::trainer;

void Tracing::configure() {
  if (!r.o.rankSpeeds.empty()) {
    if (r.o.rankSpeeds.size() != 1 && r.o.rankSpeeds.size() != static_cast<size_t>(r.ranks))
      die("--emulate-cluster gives " + std::to_string(r.o.rankSpeeds.size()) + " speeds for " +
          std::to_string(r.ranks) + " ranks (give one per rank, or one for all)");
    r.ctx.run.compute_slowdown = 1.0 / r.deviceSpeed(r.rank) - 1.0;
  }
  if (r.comm && r.o.linkBytesPerSecond > 0)
    moert_comm_emulate_link(r.comm, r.o.linkBytesPerSecond, r.o.linkLatency);
  if (r.comm)
    placeOnNodes();
  if (r.comm && r.o.interBytesPerSecond > 0)
    moert_comm_emulate_inter_node(r.comm, r.o.interBytesPerSecond, r.o.interLatency);
}

/// The node of every rank: rank / --ranks-per-node, else the ranks of one
/// host (by name, gathered over the communicator) share a node. The
/// communicator counts what crosses between nodes; the lead says where the
/// ranks are when there is more than one node.
void Tracing::placeOnNodes() {
  std::vector<int32_t> nodeOf(static_cast<size_t>(r.ranks));
  if (r.o.ranksPerNode > 0) {
    for (int k = 0; k < r.ranks; ++k)
      nodeOf[k] = k / r.o.ranksPerNode;
  } else {
    constexpr int kName = 256;
    char host[kName] = {};
    ::gethostname(host, kName - 1);
    std::vector<char> names(static_cast<size_t>(kName) * r.ranks);
    std::vector<int32_t> everyone(static_cast<size_t>(r.ranks));
    std::iota(everyone.begin(), everyone.end(), 0);
    if (moert_all_gather(r.comm, host, kName, names.data(), everyone.data(), r.ranks) != 0)
      r.commError("gathering the ranks' host names");
    std::vector<std::string> hosts;
    for (int k = 0; k < r.ranks; ++k) {
      std::string name(&names[static_cast<size_t>(k) * kName]);
      auto at = std::find(hosts.begin(), hosts.end(), name);
      nodeOf[k] = static_cast<int32_t>(at - hosts.begin());
      if (at == hosts.end())
        hosts.push_back(name);
    }
  }
  if (moert_comm_set_nodes(r.comm, nodeOf.data()) != 0)
    r.commError("placing the ranks on nodes");
  int nodes = *std::max_element(nodeOf.begin(), nodeOf.end()) + 1;
  if (r.lead && nodes > 1) {
    std::string where;
    for (int k = 0; k < r.ranks; ++k)
      where += (k ? " " : "") + std::to_string(nodeOf[k]);
    std::printf("nodes: %d (%s; node of each rank: %s)\n", nodes,
                r.o.ranksPerNode > 0 ? "--ranks-per-node" : "by host name", where.c_str());
  }
}

/// Every rank leaves a barrier at about the same time: that instant is
/// time 0 of every rank's events.
void Tracing::onStart() {
  if (r.o.trace.empty())
    return;
  // Checked before training: the file is written at the end.
  std::filesystem::path dir = std::filesystem::path(r.o.trace).parent_path();
  if (dir.empty())
    dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    die("--trace " + r.o.trace + ": " + dir.string() + " is not a writable directory");
  trace = std::make_unique<moert_trace>();
  trace->rank = r.rank;
  if (r.comm) {
    std::vector<int32_t> all(r.ranks);
    std::iota(all.begin(), all.end(), 0);
    if (moert_barrier(r.comm, all.data(), r.ranks) != 0)
      r.commError("--trace: the start barrier");
  }
  traceOrigin = moert::nowSeconds();
  r.ctx.run.trace = trace.get();
}

/// Sends every rank's events to the lead (their lengths gathered, then one
/// all-to-all in which only the lead receives), which writes one Chrome
/// trace file. After the run's checkpoint: a trace that cannot be written
/// is a warning, never a lost run.
void Tracing::onFinish(const RunEnd &) {
  if (!trace)
    return;
  r.ctx.run.trace = nullptr;
  std::string events = trace->chromeEvents(traceOrigin);
  std::vector<std::string> texts = {events};
  if (r.comm) {
    std::vector<int32_t> all(r.ranks);
    std::iota(all.begin(), all.end(), 0);
    int64_t length = static_cast<int64_t>(events.size());
    std::vector<int64_t> lengths(r.ranks);
    if (moert_all_gather(r.comm, &length, sizeof length, lengths.data(), all.data(), r.ranks) != 0)
      r.commError("--trace: gathering the events' sizes");
    std::vector<int64_t> sendBytes(r.ranks, 0), recvBytes(r.ranks, 0);
    sendBytes[0] = length;
    if (r.lead)
      recvBytes = lengths;
    std::string gathered(
        r.lead ? static_cast<size_t>(std::accumulate(lengths.begin(), lengths.end(), int64_t(0)))
               : 0,
        ' ');
    if (moert_all_to_all_v(r.comm, events.data(), sendBytes.data(), gathered.data(),
                           recvBytes.data(), all.data(), r.ranks) != 0)
      r.commError("--trace: gathering the events");
    texts.clear();
    size_t at = 0;
    for (int k = 0; r.lead && k < r.ranks; at += static_cast<size_t>(lengths[k]), ++k)
      texts.push_back(gathered.substr(at, static_cast<size_t>(lengths[k])));
  }
  if (!r.lead)
    return;
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t r = 0; r < texts.size(); ++r)
    out += (r ? ",\n" : "") + texts[r];
  out += "\n]}\n";
  std::string error;
  if (!moert::writeFileAtomic(r.o.trace, out, error)) {
    std::fprintf(stderr, "warning: --trace: %s: %s (the run itself is saved)\n", r.o.trace.c_str(),
                 error.c_str());
    return;
  }
  std::printf("trace: %s (%zu ranks%s)\n", r.o.trace.c_str(), texts.size(),
              trace->dropped ? ", the first events of each rank only" : "");
}
