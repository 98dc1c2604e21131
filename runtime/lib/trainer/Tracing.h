//===- Tracing.h - emulated links and devices, the Chrome trace -*- C++ -*-===//
//
// --emulate-link and --emulate-cluster make a run on one machine behave as
// on a slower network or on devices of unequal speed (moert/Comm.h,
// moert_context.run.compute_slowdown); --trace FILE records what every rank did
// when (Trace.h: the step program's compute and collectives, the loop's
// steps) and writes it, gathered to the lead rank, as one Chrome trace.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_TRACING_H
#define MOERT_LIB_TRAINER_TRACING_H

#include "../Trace.h"
#include "Component.h"

namespace moert::trainer {

class Tracing : public Component {
public:
  using Component::Component;
  void configure() override;
  /// --trace: checks the file's folder; time 0 is a barrier every rank
  /// leaves together.
  void onStart() override;
  /// After the run's checkpoint: every rank's events to the lead, written
  /// as one file (a warning if it cannot be, never a lost run).
  void onFinish(const RunEnd &end) override;

private:
  void placeOnNodes();
  /// --trace: this rank's events, and the time every rank agreed on as 0.
  std::unique_ptr<moert_trace> trace;
  double traceOrigin = 0;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_TRACING_H
