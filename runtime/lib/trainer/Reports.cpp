//===- Reports.cpp - communication, kernel and memory reports -------------===//
//
// Reports.h: each step's bytes against the program's analytical volume,
// and at the end the communication, the kernel profile and the peak memory
// against the plan.
//
//===----------------------------------------------------------------------===//

#include "Reports.h"

#include "moert/DeviceCopies.h"
#include "moert/ScratchPool.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <sys/resource.h>

using namespace moert::trainer;

/// Bytes this rank sent to ranks of other nodes so far, every collective
/// (compressed ones included).
static int64_t interNodeBytes(const Rank &r) {
  int64_t sum = 0;
  for (int k = 0; r.comm && k < MOERT_NUM_COLLECTIVES; ++k)
    sum += moert_comm_inter_node_bytes(r.comm, k);
  return sum;
}

/// The communicator's and the codecs' byte counters before the step.
void Communication::beforeStep(StepState &) {
  ByteCounters &c = before;
  for (int k = 0; k < 4; ++k)
    c.sent[k] = r.comm ? moert_comm_bytes(r.comm, k) : 0;
  std::copy(r.ctx.runtime.codec_sent, r.ctx.runtime.codec_sent + MOERT_NUM_COLLECTIVES,
            c.codecSent);
  c.codecPlain = r.ctx.runtime.codec_uncompressed;
  c.interNode = interNodeBytes(r);
}

/// The bytes this rank sent in step `s` (from the counters `before` it):
/// per collective (Comm.h counters), without what compressed all-reduces
/// sent, which is counted on its own against the codecs' formula. The
/// metrics put them next to the program's analytical volume; the last
/// step's are reported at the end (onFinish).
void Communication::acceptStep(StepState &st) {
  long long s = st.step;
  StepBytes &b = bytes;
  int64_t codecBy[MOERT_NUM_COLLECTIVES];
  b.codecSent = 0;
  for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
    b.codecSent += codecBy[k] = r.ctx.runtime.codec_sent[k] - before.codecSent[k];
  b.codecPlain = r.ctx.runtime.codec_uncompressed - before.codecPlain;
  // All-reduces, all-to-alls, and ZeRO's all-gathers and reduce-scatters
  // (enum moert_collective order), each without what codecs sent.
  for (int k = 0; k < 4; ++k)
    b.sent[k] = r.comm ? moert_comm_bytes(r.comm, k) - before.sent[k] - codecBy[k] : 0;
  std::copy(b.sent, b.sent + 4, lastSent);
  b.interNode = interNodeBytes(r) - before.interNode;
  // Compressed all-reduces: bytes sent, what uncompressed ones would have
  // sent, and the codecs' formula (nothing compressed in the warm-up).
  b.codecExpected = s < r.prog.codec_warmup_steps ? 0 : r.prog.step_codec_bytes;
  if (b.codecSent)
    lastCodec[0] = b.codecSent, lastCodec[1] = b.codecPlain;
}

/// The step's bytes per collective next to the program's analytical
/// volume; ZeRO's reduce-scatters and all-gathers only when the program has
/// them.
void Communication::report(const StepState &, nlohmann::json *line) {
  if (!line)
    return;
  int64_t analytical[4] = {r.prog.step_comm_bytes[MOERT_ALL_REDUCE] + r.replicaSumBytes(),
                           r.prog.step_comm_bytes[MOERT_ALL_TO_ALL],
                           r.prog.step_comm_bytes[MOERT_ALL_GATHER],
                           r.prog.step_comm_bytes[MOERT_REDUCE_SCATTER]};
  auto commBytes = [&](const int64_t *sent) {
    nlohmann::json out = {{"all_reduce", sent[0]}, {"all_to_all", sent[1]}};
    if (analytical[2] || analytical[3])
      out["all_gather"] = sent[2], out["reduce_scatter"] = sent[3];
    return out;
  };
  (*line)["comm_bytes"] = commBytes(bytes.sent);
  (*line)["comm_bytes_analytical"] = commBytes(analytical);
  (*line)["comm_bytes_ragged_bound"] = r.prog.step_ragged_bound;
  (*line)["comm_bytes_inter_node"] = bytes.interNode;
  (*line)["codec_bytes"] = {{"sent", bytes.codecSent},
                            {"uncompressed", bytes.codecPlain},
                            {"expected", bytes.codecExpected}};
}

/// The last step's bytes per rank against the program's analytical volume
/// (the ragged all_to_alls against their bound), and the compressed
/// all-reduces' against the codecs' formula.
void Communication::onFinish(const RunEnd &end) {
  if (end.stopped)
    return;
  if (r.lead && r.ranks > 1 && r.firstStep < r.o.steps) {
    if (r.prog.step_ragged_bound > 0)
      std::printf("communication per step and rank: all_to_all %lld bytes (ragged: at most "
                  "%lld with every expert's capacity full), all_reduce %lld bytes "
                  "(analytical: %lld)\n",
                  (long long)lastSent[1],
                  (long long)(r.prog.step_ragged_bound + r.prog.step_comm_bytes[MOERT_ALL_TO_ALL]),
                  (long long)lastSent[0],
                  (long long)(r.prog.step_comm_bytes[MOERT_ALL_REDUCE] + r.replicaSumBytes()));
    else
      std::printf("communication per step and rank: all_to_all %lld bytes, all_reduce %lld "
                  "bytes (analytical: %lld, %lld)\n",
                  (long long)lastSent[1], (long long)lastSent[0],
                  (long long)r.prog.step_comm_bytes[MOERT_ALL_TO_ALL],
                  (long long)(r.prog.step_comm_bytes[MOERT_ALL_REDUCE] + r.replicaSumBytes()));
  }
  if (r.lead && r.ranks > 1 && r.firstStep < r.o.steps &&
      (r.prog.step_comm_bytes[MOERT_REDUCE_SCATTER] || r.prog.step_comm_bytes[MOERT_ALL_GATHER]))
    std::printf("ZeRO per step and rank: reduce_scatter %lld bytes, all_gather %lld bytes "
                "(analytical: %lld, %lld)\n",
                (long long)lastSent[MOERT_REDUCE_SCATTER], (long long)lastSent[MOERT_ALL_GATHER],
                (long long)r.prog.step_comm_bytes[MOERT_REDUCE_SCATTER],
                (long long)r.prog.step_comm_bytes[MOERT_ALL_GATHER]);
  if (r.lead && lastCodec[0] > 0) {
    // A codec can send more than it replaces (PowerSGD at a rank near the
    // matrices' sides): then say so.
    bool more = lastCodec[0] > lastCodec[1];
    double ratio = more ? double(lastCodec[0]) / double(std::max<int64_t>(lastCodec[1], 1))
                        : double(lastCodec[1]) / double(lastCodec[0]);
    std::printf("compressed all-reduces: %lld bytes per step and rank instead of %lld "
                "(%.1fx %s; the codecs' formula: %lld)\n",
                (long long)lastCodec[0], (long long)lastCodec[1], ratio, more ? "more" : "less",
                (long long)r.prog.step_codec_bytes);
  }
}

/// The lead rank's step kernels from the second step (the first compiles
/// the device's kernels and allocates its arenas).
void KernelProfile::beforeStep(StepState &st) {
  profiled = r.o.profileKernels && r.lead && st.step > r.firstStep;
  moert_kernel_profile_enable(profiled);
}

void KernelProfile::afterStep(StepState &) { moert_kernel_profile_enable(0); }

void KernelProfile::acceptStep(StepState &st) {
  if (!profiled)
    return;
  profiledSeconds += st.seconds;
  ++profiledSteps;
}

/// --profile-kernels: the lead rank's training steps' device time per
/// kernel family (the kernels' names without their index), largest first,
/// against the steps' wall time (the steps' kernels only, so evaluations are
/// not counted). Ranks sharing one device (thread
/// ranks) wait for each other's kernels too, so there the times are upper
/// bounds.
void KernelProfile::onFinish(const RunEnd &end) {
  if (end.stopped || !r.lead || !r.o.profileKernels)
    return;
  struct Family {
    std::string name;
    long long calls = 0, kernels = 0;
    double seconds = 0;
  };
  std::vector<Family> families;
  const char *kernel = nullptr;
  int64_t calls = 0;
  double seconds = 0, total = 0;
  for (int i = 0; moert_kernel_profile_row(i, &kernel, &calls, &seconds); ++i) {
    std::string name = kernel;
    size_t cut = name.find_last_not_of("0123456789");
    if (cut != std::string::npos && cut + 1 < name.size() && name[cut] == '_')
      name.resize(cut);
    auto it = std::find_if(families.begin(), families.end(),
                           [&](const Family &f) { return f.name == name; });
    if (it == families.end())
      it = families.insert(families.end(), Family{name});
    it->calls += calls;
    it->kernels += 1;
    it->seconds += seconds;
    total += seconds;
  }
  std::sort(families.begin(), families.end(),
            [](const Family &a, const Family &b) { return a.seconds > b.seconds; });
  long long steps = std::max(profiledSteps, 1LL);
  std::printf(
      "kernel profile: %lld steps after the first, %.2f ms a step in %lld %skernel families "
      "(%.0f%% of the steps' %.2f ms; the rest is host code, copies and "
      "collectives)\n",
      profiledSteps, 1e3 * total / steps, (long long)families.size(),
      r.prog.device_sync ? "device " : "host ",
      profiledSeconds > 0 ? 100.0 * total / profiledSeconds : 0.0, 1e3 * profiledSeconds / steps);
  std::printf("  %-20s %8s %8s %12s %7s\n", "family", "kernels", "calls", "ms a step", "share");
  nlohmann::json rows = nlohmann::json::array();
  for (const Family &f : families) {
    std::printf("  %-20s %8lld %8lld %12.3f %6.1f%%\n", f.name.c_str(), f.kernels, f.calls / steps,
                1e3 * f.seconds / steps, total > 0 ? 100.0 * f.seconds / total : 0.0);
    rows.push_back(
        {{"family", f.name}, {"kernels", f.kernels}, {"calls", f.calls}, {"seconds", f.seconds}});
  }
  if (r.metrics)
    r.writeMetrics(
        {{"kernel_profile", rows}, {"steps", profiledSteps}, {"step_seconds", profiledSeconds}});
}

/// The peak resident set against the plan's prediction. The plan covers
/// every tensor buffer and bounds the kernels' scratch; the corpus (as
/// stored) is added to it, and the process's resident size before main
/// (code, shared libraries) is the baseline. With several ranks every rank
/// takes part: the lead's metrics line carries each rank's planned bytes and
/// peak resident memory (ranks as threads share one process, whose peak each
/// of them reports; the printed comparison is for one rank per process).
void MemoryReport::onFinish(const RunEnd &end) {
  if (end.stopped)
    return;
  long long planned = r.prog.activation_bytes + r.prog.gradient_bytes + r.prog.accumulator_bytes;
  for (int i = 0; i < r.prog.num_params; ++i)
    planned += stateBytes(r.prog.params[i]);
  long long scratch = moert_scratch_peak();
  long long dataBytes = static_cast<long long>(r.data.bytes());
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  long long peak = static_cast<long long>(usage.ru_maxrss) * 1024;
  long long grown = peak - r.sh.startResident;
  long long predicted = planned + r.prog.planned_scratch_bytes + dataBytes;
  if (r.sh.processPerRank)
    std::printf("%smemory: peak resident %.1f MB = %.1f MB at start (code, libraries) + "
                "%.1f MB (%+.0f%% of the %.1f MB predicted: %.1f MB planned buffers, "
                "%.1f MB kernel scratch bound, %.1f MB data); kernel scratch peak "
                "%.1f MB\n",
                r.ranks > 1 ? ("rank " + std::to_string(r.rank) + " ").c_str() : "", peak / 1e6,
                r.sh.startResident / 1e6, grown / 1e6,
                predicted ? 100.0 * (grown - predicted) / predicted : 0.0, predicted / 1e6,
                planned / 1e6, r.prog.planned_scratch_bytes / 1e6, dataBytes / 1e6, scratch / 1e6);
  // Each rank's plan and peak, in rank order.
  std::vector<int64_t> own = {planned, peak}, all(2 * static_cast<size_t>(r.ranks));
  if (r.ranks > 1) {
    std::vector<int32_t> everyone(r.ranks);
    int size =
        moert_grid_group(&r.ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, everyone.data());
    if (moert_all_gather(r.comm, own.data(), static_cast<int64_t>(own.size() * sizeof(int64_t)),
                         all.data(), everyone.data(), size) != 0)
      r.commError("gathering the ranks' memory");
  } else {
    all = own;
  }
  if (r.lead && !r.sh.processPerRank) {
    long long most = 0;
    for (int k = 0; k < r.ranks; ++k)
      most = std::max<long long>(most, all[2 * k]);
    std::printf("memory: peak resident %.1f MB for the process's %d thread ranks = %.1f MB at "
                "start + %.1f MB; planned buffers per rank up to %.1f MB\n",
                peak / 1e6, r.ranks, r.sh.startResident / 1e6, grown / 1e6, most / 1e6);
  }
  if (r.metrics && r.lead) { // a rank's own metrics file is the lead's
    nlohmann::json line = {
        {"peak_rss_bytes", peak},   {"start_rss_bytes", r.sh.startResident},
        {"planned_bytes", planned}, {"planned_scratch_bytes", r.prog.planned_scratch_bytes},
        {"data_bytes", dataBytes},  {"kernel_scratch_bytes", scratch}};
    if (r.ranks > 1) {
      std::vector<int64_t> plans, peaks;
      for (int k = 0; k < r.ranks; ++k) {
        plans.push_back(all[2 * k]);
        peaks.push_back(all[2 * k + 1]);
      }
      line["rank_planned_bytes"] = plans;
      line["rank_peak_rss_bytes"] = peaks;
      line["rank_processes"] = r.sh.processPerRank;
    }
    r.writeMetrics(line);
  }
}
