//===- LocalStepsTest.cpp - DiLoCo's inner and outer steps ----------------===//

#include "TrainerTestProgram.h"
#include "trainer/LocalSteps.h"

#include <vector>

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class LocalStepsTest : public RankTest {
protected:
  /// Step s through the hooks, the parameter moved by -1 in between.
  void step(LocalSteps &ls, long long s) {
    StepState st;
    st.step = s;
    ls.beforeStep(st);
    EXPECT_EQ(st.inputs.replica_local, s >= o.syncSteps ? 1 : 0);
    // The step's inputs only: the context outside a step stays global.
    EXPECT_EQ(rank->ctx.inputs.replica_local, 0);
    for (float &w : rank->params[0])
      w -= 1.0f;
    ls.afterStep(st);
  }
};

TEST_F(LocalStepsTest, TheOuterStepIsNesterovOnTheMeanDelta) {
  o.localSteps = 2;
  o.outerLr = 0.5;
  o.outerMomentum = 0.5;
  Rank &r = boundRank();
  LocalSteps ls(r);
  ls.configure();
  testing::internal::CaptureStdout();
  ls.onStart();
  EXPECT_NE(testing::internal::GetCapturedStdout().find("local steps: 2 per outer step"),
            std::string::npos);
  std::vector<float> start(r.params[0].begin(), r.params[0].end());
  step(ls, 0);
  EXPECT_FLOAT_EQ(r.params[0][0], start[0] - 1); // inside the window
  step(ls, 1);
  // Delta = 2 (one replica: the mean); v = 2; start -= 0.5 (2 + 0.5 x 2).
  for (size_t j = 0; j < start.size(); ++j)
    EXPECT_FLOAT_EQ(r.params[0][j], start[j] - 1.5f);
  EXPECT_FLOAT_EQ(ls.momentum(0)[0], 2.0f);
  step(ls, 2);
  step(ls, 3);
  // Delta = 2 again; v = 0.5 x 2 + 2 = 3; start -= 0.5 (2 + 0.5 x 3).
  EXPECT_FLOAT_EQ(r.params[0][0], start[0] - 1.5f - 1.75f);
}

TEST_F(LocalStepsTest, ARunEndingInsideAWindowTakesTheOuterStep) {
  o.localSteps = 4;
  o.outerLr = 1;
  o.outerMomentum = 0;
  Rank &r = boundRank();
  LocalSteps ls(r);
  testing::internal::CaptureStdout();
  ls.onStart();
  testing::internal::GetCapturedStdout();
  std::vector<float> start(r.params[0].begin(), r.params[0].end());
  step(ls, 0);
  step(ls, 1);
  EXPECT_FLOAT_EQ(r.params[0][0], start[0] - 2); // no outer step yet
  ls.onFinish({2, false});
  // Plain averaging: the mean of one replica's parameters.
  EXPECT_FLOAT_EQ(r.params[0][0], start[0] - 2);
  EXPECT_FLOAT_EQ(ls.momentum(0)[0], 2.0f);
}

TEST_F(LocalStepsTest, TheMomentumIsCheckpointed) {
  o.localSteps = 1;
  o.outerLr = 0.5;
  o.outerMomentum = 0.9;
  Rank &r = boundRank();
  LocalSteps ls(r);
  testing::internal::CaptureStdout();
  ls.onStart();
  step(ls, 0);
  testing::internal::GetCapturedStdout();
  CheckpointData saved;
  saved.tensors["w"] = {{4, 3}, std::vector<float>(12, 0.0f)};
  ls.save(saved);
  ASSERT_TRUE(saved.tensors.count("w.outer_v"));
  EXPECT_EQ(saved.tensors["w.outer_v"].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_FLOAT_EQ(saved.tensors["w.outer_v"].data[5], 1.0f);
  LocalSteps resumed(r);
  resumed.restore(saved);
  EXPECT_FLOAT_EQ(resumed.momentum(0)[5], 1.0f);
}

TEST_F(LocalStepsTest, CheckpointsFallOnOuterSteps) {
  o.localSteps = 3;
  o.checkpointEvery = 4;
  Rank &r = boundRank();
  LocalSteps ls(r);
  EXPECT_EXIT(ls.onStart(), testing::ExitedWithCode(1), "must be a multiple of --local-steps 3");
}

} // namespace
