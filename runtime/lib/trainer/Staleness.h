//===- Staleness.h - delayed gradient all-reduces (--staleness) -*- C++ -*-===//
//
// --staleness 1: after the synchronous start (--sync-steps), each step
// applies the previous step's background all-reduces, corrected by the
// change of the rank's own gradient (moert_context.inputs.staleness). Each rank's
// corrected gradient is its own, so the ranks agree on stopping when one
// rank's gradient norm is not finite.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_STALENESS_H
#define MOERT_LIB_TRAINER_STALENESS_H

#include "Component.h"

namespace moert::trainer {

class Staleness : public Component {
public:
  using Component::Component;
  void configure() override;
  void beforeStep(StepState &st) override;
  void afterStep(StepState &st) override;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_STALENESS_H
