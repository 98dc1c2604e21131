//===- TrainerTrace.cpp - emulated links and devices, the Chrome trace ----===//
//
// --emulate-link and --emulate-cluster make a run on one machine behave as
// on a slower network or on devices of unequal speed (moert/Comm.h,
// moert_context.compute_slowdown); --trace FILE writes what every rank did
// when (Trace.h), gathered to the lead rank.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include <algorithm>
#include <cstring>
#include <numeric>

using namespace moert::trainer;

void Trainer::configureEmulation() {
  if (!o.rankSpeeds.empty()) {
    if (o.rankSpeeds.size() != 1 && o.rankSpeeds.size() != static_cast<size_t>(ranks))
      die("--emulate-cluster gives " + std::to_string(o.rankSpeeds.size()) + " speeds for " +
          std::to_string(ranks) + " ranks (give one per rank, or one for all)");
    double speed = o.rankSpeeds.size() == 1 ? o.rankSpeeds[0] : o.rankSpeeds[rank];
    ctx.compute_slowdown = 1.0 / speed - 1.0;
  }
  if (comm && o.linkBytesPerSecond > 0)
    moert_comm_emulate_link(comm, o.linkBytesPerSecond, o.linkLatency);
}

/// Every rank leaves a barrier at about the same time: that instant is
/// time 0 of every rank's events.
void Trainer::startTrace() {
  if (o.trace.empty())
    return;
  trace = std::make_unique<moert_trace>();
  trace->rank = rank;
  if (comm) {
    std::vector<int32_t> all(ranks);
    std::iota(all.begin(), all.end(), 0);
    if (moert_barrier(comm, all.data(), ranks) != 0)
      commError("--trace: the start barrier");
  }
  traceOrigin = moert::nowSeconds();
  ctx.trace = trace.get();
}

/// Gathers every rank's events (their lengths, then the texts padded to
/// the longest) and the lead writes one Chrome trace file.
void Trainer::writeTrace() {
  if (!trace)
    return;
  ctx.trace = nullptr;
  std::string mine = trace->chromeEvents(traceOrigin);
  std::vector<std::string> texts = {mine};
  if (comm) {
    std::vector<int32_t> all(ranks);
    std::iota(all.begin(), all.end(), 0);
    int64_t length = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lengths(ranks);
    if (moert_all_gather(comm, &length, sizeof length, lengths.data(), all.data(), ranks) != 0)
      commError("--trace: gathering the events' sizes");
    int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    mine.resize(static_cast<size_t>(longest), ' ');
    std::string gathered(static_cast<size_t>(longest) * ranks, ' ');
    if (moert_all_gather(comm, mine.data(), longest, gathered.data(), all.data(), ranks) != 0)
      commError("--trace: gathering the events");
    texts.clear();
    for (int r = 0; r < ranks; ++r)
      texts.push_back(
          gathered.substr(static_cast<size_t>(r * longest), static_cast<size_t>(lengths[r])));
  }
  if (!lead)
    return;
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t r = 0; r < texts.size(); ++r)
    out += (r ? ",\n" : "") + texts[r];
  out += "\n]}\n";
  std::string error;
  if (!moert::writeFileAtomic(o.trace, out, error))
    die(o.trace + ": " + error);
  std::printf("trace: %s (%zu ranks)\n", o.trace.c_str(), texts.size());
}
