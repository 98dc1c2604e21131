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
#include <filesystem>
#include <numeric>

#include <unistd.h>

using namespace moert::trainer;

/// Rank `r`'s relative device speed: --emulate-cluster's (one for all, or
/// one per rank), 1 without it.
double Trainer::deviceSpeed(int r) const {
  if (o.rankSpeeds.empty())
    return 1.0;
  return o.rankSpeeds.size() == 1 ? o.rankSpeeds[0] : o.rankSpeeds[r];
}

void Trainer::configureEmulation() {
  if (!o.rankSpeeds.empty()) {
    if (o.rankSpeeds.size() != 1 && o.rankSpeeds.size() != static_cast<size_t>(ranks))
      die("--emulate-cluster gives " + std::to_string(o.rankSpeeds.size()) + " speeds for " +
          std::to_string(ranks) + " ranks (give one per rank, or one for all)");
    ctx.compute_slowdown = 1.0 / deviceSpeed(rank) - 1.0;
  }
  // The ep ranks' speeds, read by the step (replicated experts' slots split
  // by them) and by the rebalancer.
  epSpeedTable = epSpeeds();
  ctx.ep_speeds = epSpeedTable.data();
  if (comm && o.linkBytesPerSecond > 0)
    moert_comm_emulate_link(comm, o.linkBytesPerSecond, o.linkLatency);
  ctx.async_yield = o.commPriority;
  // The background channel now, not inside the first step (under MPI its
  // communicator is a collective over every rank).
  if (comm && prog.async_buckets > 0)
    moert_async_init(&ctx);
  bool zero = false;
  for (int i = 0; i < prog.num_params; ++i)
    zero = zero || prog.params[i].zero_parts > 1;
  if (tp > 1 && o.localSteps > 0)
    die("--local-steps with tensor parallelism (moec --tp) is not supported yet");
  if (tp > 1 && o.rebalanceEvery > 0)
    die("--rebalance-every with tensor parallelism (moec --tp) is not supported yet: the "
        "migration moves whole expert rows");
  // Unequal token shares weigh each replica's gradient by its share: the
  // replica-local and delayed forms take a rank's own gradient for the
  // replicas' mean.
  if (moec_program.replica_batches && o.localSteps > 0)
    die("--local-steps with unequal token shares (moec --token-shares or a mixed cluster) is "
        "not supported yet: the outer step would average the replicas' deltas equally");
  if (moec_program.replica_batches && o.staleness > 0)
    die("--staleness with unequal token shares (moec --token-shares or a mixed cluster) is not "
        "supported yet: the correction takes a rank's own weighted gradient for the mean");
  if (moec_program.loss_scale > 0 && o.staleness > 0)
    die("--staleness with a loss-scaled (f16) binary is not supported: a delayed sum would mix "
        "two steps' loss scales");
  if (zero && o.staleness > 0)
    die("--staleness with a ZeRO binary (moec --zero) is not supported: the reduce-scatters "
        "are not delayed");
  if (zero && o.localSteps > 0)
    die("--local-steps with a ZeRO binary (moec --zero) is not supported: the inner steps "
        "would update shards that no all-gather puts back together");
  if (zero && o.rebalanceEvery > 0)
    die("--rebalance-every with a ZeRO binary (moec --zero) is not supported: the AdamW "
        "moments are sharded over the data replicas and would not move with the experts");
  if (o.staleness > 0) {
    if (!prog.async_buckets)
      die("--staleness delays the step's background all-reduces, and this binary has none "
          "(compiled for one rank, or with moec --schedule=blocking)");
    if (o.localSteps > 0)
      die("--staleness with --local-steps is not supported: local steps reduce nothing over dp");
    if (o.rebalanceEvery > 0)
      die("--staleness with --rebalance-every is not supported: a delayed expert gradient would "
          "land on the expert's old position");
    if (lead)
      std::printf("delayed gradients: from step %lld, each step applies the previous step's "
                  "all-reduced gradients, corrected by the change of the rank's own (%d "
                  "buckets)\n",
                  o.syncSteps + 1, prog.async_buckets);
    if (lead && o.resume)
      std::printf("note: resuming with delayed gradients is not exact: the data replicas' "
                  "parameters differed, the checkpoint holds the lead's, and the reductions "
                  "in flight at the save are not in it\n");
  }
}

/// Every rank leaves a barrier at about the same time: that instant is
/// time 0 of every rank's events.
void Trainer::startTrace() {
  if (o.trace.empty())
    return;
  // Checked before training: the file is written at the end.
  std::filesystem::path dir = std::filesystem::path(o.trace).parent_path();
  if (dir.empty())
    dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    die("--trace " + o.trace + ": " + dir.string() + " is not a writable directory");
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

/// Sends every rank's events to the lead (their lengths gathered, then one
/// all-to-all in which only the lead receives), which writes one Chrome
/// trace file. After the run's checkpoint: a trace that cannot be written
/// is a warning, never a lost run.
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
    std::vector<int64_t> sendBytes(ranks, 0), recvBytes(ranks, 0);
    sendBytes[0] = length;
    if (lead)
      recvBytes = lengths;
    std::string gathered(
        lead ? static_cast<size_t>(std::accumulate(lengths.begin(), lengths.end(), int64_t(0))) : 0,
        ' ');
    if (moert_all_to_all_v(comm, mine.data(), sendBytes.data(), gathered.data(), recvBytes.data(),
                           all.data(), ranks) != 0)
      commError("--trace: gathering the events");
    texts.clear();
    size_t at = 0;
    for (int r = 0; lead && r < ranks; at += static_cast<size_t>(lengths[r]), ++r)
      texts.push_back(gathered.substr(at, static_cast<size_t>(lengths[r])));
  }
  if (!lead)
    return;
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t r = 0; r < texts.size(); ++r)
    out += (r ? ",\n" : "") + texts[r];
  out += "\n]}\n";
  std::string error;
  if (!moert::writeFileAtomic(o.trace, out, error)) {
    std::fprintf(stderr, "warning: --trace: %s: %s (the run itself is saved)\n", o.trace.c_str(),
                 error.c_str());
    return;
  }
  std::printf("trace: %s (%zu ranks%s)\n", o.trace.c_str(), texts.size(),
              trace->dropped ? ", the first events of each rank only" : "");
}
