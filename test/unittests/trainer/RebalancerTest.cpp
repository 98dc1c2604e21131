//===- RebalancerTest.cpp - the load monitor's balancedness and checks ----===//

#include "TrainerTestProgram.h"
#include "trainer/Rebalancer.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class RebalancerTest : public RankTest {
protected:
  /// One MoE layer of 4 experts over ep = 2 (this rank's view of it).
  moert_program moe() {
    moert_program p = fakeProgram();
    p.num_moe_layers = 1;
    p.layer_experts = kExperts;
    p.grid_ep = 2;
    return p;
  }
  static constexpr int32_t kExperts[1] = {4};
  moert_program program;
};

TEST_F(RebalancerTest, BalancednessIsTheMeanRankLoadOverTheMost) {
  program = moe();
  Rank &r = makeRank(program);
  r.expertOrder = {{0, 1, 2, 3}};
  r.keptCounts = {10, 10, 0, 0};
  r.epSpeedTable = {1.0, 1.0};
  Rebalancer rebalancer(r);
  // Rank 0 holds experts 0 and 1 (20 slots), rank 1 none: 10 / 20.
  EXPECT_DOUBLE_EQ(rebalancer.balancedness()[0].get<double>(), 0.5);
  r.expertOrder = {{0, 2, 1, 3}};
  nlohmann::json line = nlohmann::json::object();
  rebalancer.report(StepState{}, &line);
  EXPECT_DOUBLE_EQ(line["balancedness"][0].get<double>(), 1.0);
  // A rank twice as fast finishes twice the load as soon.
  r.expertOrder = {{0, 1, 2, 3}};
  r.keptCounts = {10, 10, 5, 5};
  r.epSpeedTable = {2.0, 1.0};
  EXPECT_DOUBLE_EQ(rebalancer.balancedness()[0].get<double>(), 1.0);
}

TEST_F(RebalancerTest, NeedsExpertParallelRanks) {
  o.rebalanceEvery = 5;
  Rank &r = makeRank();
  Rebalancer rebalancer(r);
  EXPECT_EXIT(rebalancer.onStart(), testing::ExitedWithCode(1), "this binary has ep = 1");
}

TEST_F(RebalancerTest, NeedsAMovablePlacement) {
  o.rebalanceEvery = 5;
  program = moe();
  Rank &r = makeRank(program);
  Rebalancer rebalancer(r);
  EXPECT_EXIT(rebalancer.onStart(), testing::ExitedWithCode(1), "placement is fixed");
}

TEST_F(RebalancerTest, OffItOnlyReports) {
  program = moe();
  Rank &r = makeRank(program);
  r.expertOrder = {{0, 1, 2, 3}};
  r.keptCounts = {1, 1, 1, 1};
  r.epSpeedTable = {1.0, 1.0};
  Rebalancer rebalancer(r);
  rebalancer.onStart();
  StepState st;
  st.step = 0;
  rebalancer.endOfStep(st); // no window, no collective on one rank
  EXPECT_EQ(r.expertOrder[0], (std::vector<int32_t>{0, 1, 2, 3}));
}

} // namespace
