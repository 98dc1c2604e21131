//===- Reports.h - communication, kernel and memory reports -----*- C++ -*-===//
//
// What the run measures about itself: each step's bytes per collective
// against the program's analytical volume (metrics) and the last step's at
// the end (Communication); --profile-kernels' time per kernel family
// (KernelProfile); the peak resident memory against the plan
// (MemoryReport). Three components, because the end of a run reports them
// around the evaluation and the sample.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_REPORTS_H
#define MOERT_LIB_TRAINER_REPORTS_H

#include "Component.h"

namespace moert::trainer {

class Communication : public Component {
public:
  using Component::Component;
  void beforeStep(StepState &st) override;
  void acceptStep(StepState &st) override;
  void report(const StepState &st, nlohmann::json *line) override;
  void onFinish(const RunEnd &end) override;

private:
  /// The communicator's and the codecs' byte counters at the step's start.
  struct ByteCounters {
    int64_t sent[4]; ///< all_reduce, all_to_all, all_gather, reduce_scatter (Comm.h)
    int64_t codecSent[MOERT_NUM_COLLECTIVES];
    int64_t codecPlain;
    int64_t interNode; ///< sent to ranks of other nodes, every collective
  } before{};
  /// What the step sent: per collective without the compressed
  /// all-reduces, and those on their own (bytes, what uncompressed ones
  /// would have sent, the codecs' formula).
  struct StepBytes {
    int64_t sent[4];
    int64_t codecSent, codecPlain, codecExpected;
    int64_t interNode;
  } bytes{};
  /// The last step's bytes (all_reduce, all_to_all, all_gather,
  /// reduce_scatter) and compressed bytes (sent, uncompressed).
  int64_t lastSent[4] = {0, 0, 0, 0}, lastCodec[2] = {0, 0};
};

class KernelProfile : public Component {
public:
  using Component::Component;
  void beforeStep(StepState &st) override;
  void afterStep(StepState &st) override;
  void acceptStep(StepState &st) override;
  void onFinish(const RunEnd &end) override;

private:
  bool profiled = false; ///< this step's kernels are profiled
  /// The profiled steps' seconds and count.
  double profiledSeconds = 0;
  long long profiledSteps = 0;
};

class MemoryReport : public Component {
public:
  using Component::Component;
  void onFinish(const RunEnd &end) override;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_REPORTS_H
