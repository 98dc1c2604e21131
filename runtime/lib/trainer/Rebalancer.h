//===- Rebalancer.h - moving hot experts between ranks ----------*- C++ -*-===//
//
// Online rebalancing (--rebalance-every N): a moving average of each
// expert's kept token-slots, and every N steps, per MoE layer, a new
// placement of its positions where the predicted gain beats the cost of
// moving the rows (Rebalancer.cpp states the rule; docs/Partitioning.md).
// Each step's metrics line carries each layer's balancedness.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_REBALANCER_H
#define MOERT_LIB_TRAINER_REBALANCER_H

#include "Component.h"

#include <deque>

namespace moert::trainer {

class Rebalancer : public Component {
public:
  using Component::Component;
  void configure() override;
  void onStart() override;
  void report(const StepState &st, nlohmann::json *line) override;
  void endOfStep(const StepState &st) override;

  /// Each MoE layer's balancedness in the last step under the placement in
  /// force (1: even).
  nlohmann::json balancedness() const;

private:
  /// Adds step `s`'s loads to the window; every --rebalance-every steps,
  /// moves the experts of the layers where the rule says it pays.
  void rebalance(long long s, double stepSeconds);
  void migrate(int layer, std::vector<int32_t> order);
  double expertShare(double topK) const;

  /// The load monitor: each expert's kept token-slots (moving average),
  /// the last N steps' kept token-slots, the steps and this rank's step
  /// seconds since the last rebalancing, and the last migration's measured
  /// seconds per byte (-1: none yet).
  std::vector<double> loadWindow;
  std::deque<std::vector<int32_t>> recentLoads;
  long long windowSteps = 0;
  double windowSeconds = 0, secondsPerByte = -1;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_REBALANCER_H
