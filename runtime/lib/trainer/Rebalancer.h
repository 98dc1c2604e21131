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
  void watch(double stepSeconds);
  /// A layer's new placement, and what the rule says of it.
  struct Proposal {
    std::vector<int32_t> order;
    int changing = 0;                      ///< expert copies that change rank
    bool pays = false;                     ///< gain > cost
    double oldBalance = 0, newBalance = 0; ///< over the window's steps
  };
  Proposal propose(int layer, size_t offset, double meanStep, double share) const;
  /// What one rebalancing moved: layers, expert copies, all-gathered bytes
  /// and seconds, each layer's balancedness before and predicted.
  struct Migration {
    std::vector<int> layers;
    int experts = 0;
    int64_t bytes = 0;
    double seconds = 0;
    std::vector<double> before, after;
  };
  void reportMigration(long long s, const Migration &done);
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
