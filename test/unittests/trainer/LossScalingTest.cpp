//===- LossScalingTest.cpp - dynamic loss scaling -------------------------===//

#include "TrainerTestProgram.h"
#include "trainer/LossScaling.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class LossScalingTest : public RankTest {
protected:
  moert_program f16() {
    moert_program p = fakeProgram();
    p.loss_scale = 8;
    return p;
  }
  /// The scale the component gives the next step's inputs.
  static float inputScale(LossScaling &ls) {
    StepState st;
    ls.beforeStep(st);
    return st.inputs.loss_scale;
  }
  /// A step that overflowed (`overflow`) or not, through the hooks.
  StepState step(LossScaling &ls, long long s, bool overflow) {
    StepState st;
    st.step = s;
    ls.beforeStep(st);
    rank->ctx.outputs.skip_update = overflow;
    st.badNorm = overflow; // an overflow's norm is not finite
    ls.afterStep(st);
    if (!st.badNorm)
      ls.acceptStep(st);
    return st;
  }
  moert_program program;
};

TEST_F(LossScalingTest, OverflowHalvesAndAWindowWithoutDoubles) {
  o.lossScaleWindow = 2;
  program = f16();
  Rank &r = boundRank(program);
  LossScaling ls(r);
  ls.configure();
  EXPECT_EQ(inputScale(ls), 8.0f);
  StepState st = step(ls, 0, true);
  EXPECT_TRUE(st.skipped);
  EXPECT_FALSE(st.badNorm); // skipped, not diverged
  EXPECT_EQ(st.lossScale, 8.0f);
  EXPECT_EQ(inputScale(ls), 4.0f);
  EXPECT_EQ(ls.skipped(), 1);
  step(ls, 1, false);
  EXPECT_EQ(inputScale(ls), 4.0f);
  step(ls, 2, false);
  EXPECT_EQ(inputScale(ls), 8.0f);
  nlohmann::json line = nlohmann::json::object();
  testing::internal::CaptureStdout();
  ls.report(st, &line);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("update skipped, scale 8"),
            std::string::npos);
  EXPECT_EQ(line["loss_scale"], 8.0);
  EXPECT_EQ(line["skipped"], true);
}

TEST_F(LossScalingTest, TheScaleAndItsWindowResume) {
  o.lossScaleWindow = 3;
  program = f16();
  Rank &r = boundRank(program);
  LossScaling ls(r);
  ls.configure();
  step(ls, 0, true);
  step(ls, 1, false);
  CheckpointData saved;
  ls.save(saved);
  EXPECT_EQ(saved.state["loss_scale"]["scale"], 4.0);
  EXPECT_EQ(saved.state["loss_scale"]["good_steps"], 1);
  LossScaling resumed(r);
  resumed.restore(saved);
  resumed.configure();
  EXPECT_EQ(inputScale(resumed), 4.0f);
  step(resumed, 2, false);
  step(resumed, 3, false); // the window's third good step
  EXPECT_EQ(inputScale(resumed), 8.0f);
}

TEST_F(LossScalingTest, AProgramWithoutScalingHasNone) {
  Rank &r = boundRank();
  LossScaling ls(r);
  ls.configure();
  EXPECT_EQ(inputScale(ls), 0.0f);
  CheckpointData saved;
  ls.save(saved);
  EXPECT_FALSE(saved.state.contains("loss_scale"));
  o.lossScale = 4;
  EXPECT_EXIT(ls.configure(), testing::ExitedWithCode(1), "does not scale its loss");
}

TEST_F(LossScalingTest, OverflowAtScaleOneStopsTheRun) {
  o.lossScale = 1;
  program = f16();
  Rank &r = boundRank(program);
  LossScaling ls(r);
  ls.configure();
  EXPECT_EXIT(step(ls, 0, true), testing::ExitedWithCode(1), "not finite even at loss scale 1");
}

TEST_F(LossScalingTest, ABadCheckpointStateIsAnError) {
  Rank &r = boundRank();
  LossScaling ls(r);
  CheckpointData saved;
  saved.state["loss_scale"] = {{"scale", 0.5}, {"good_steps", 0}};
  EXPECT_EXIT(ls.restore(saved), testing::ExitedWithCode(1), "loss_scale: expected");
}

} // namespace
