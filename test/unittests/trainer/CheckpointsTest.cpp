//===- CheckpointsTest.cpp - writing and resuming checkpoints -------------===//

#include "TrainerTestProgram.h"
#include "trainer/Checkpoints.h"
#include "trainer/LossScaling.h"

#include <fstream>

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class CheckpointsTest : public RankTest {
protected:
  /// The rank's components for checkpoints: loss scaling and checkpoints.
  void components(Rank &r) {
    all.clear();
    all.push_back(std::make_unique<LossScaling>(r));
    all.push_back(std::make_unique<Checkpoints>(r, all));
  }
  Checkpoints &checkpoints() { return static_cast<Checkpoints &>(*all.back()); }
  Components all;
};

TEST_F(CheckpointsTest, AResumedRankHoldsWhatWasSaved) {
  o.checkpoint = dir + "/ckpt";
  moert_program f16 = fakeProgram();
  f16.loss_scale = 64;
  Rank &r = boundRank(f16);
  components(r);
  for (auto &c : all)
    c->configure();
  r.params[0][4] = 1.25f;
  r.moments[1][2] = 0.5f;
  std::vector<int32_t> tokens, targets;
  r.sampler.next(tokens, targets); // the data position moves
  testing::internal::CaptureStdout();
  checkpoints().onStart();
  checkpoints().write(3);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("checkpoint written to"),
            std::string::npos);
  size_t position = r.sampler.position();

  o.resume = true;
  Rank &back = makeRank(f16);
  back.initialiseParameters();
  components(back);
  testing::internal::CaptureStdout();
  resumeRun(back, all);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("at step 3"), std::string::npos);
  back.bindContext();
  for (auto &c : all)
    c->configure();
  EXPECT_EQ(back.firstStep, 3);
  EXPECT_EQ(back.params[0][4], 1.25f);
  EXPECT_EQ(back.moments[1][2], 0.5f);
  EXPECT_EQ(back.sampler.position(), position);
  StepState next;
  for (auto &c : all)
    c->beforeStep(next);
  EXPECT_EQ(next.inputs.loss_scale, 64.0f); // LossScaling's state
}

TEST_F(CheckpointsTest, ANonFiniteStateIsNotSaved) {
  o.checkpoint = dir + "/ckpt";
  Rank &r = boundRank();
  components(r);
  r.params[0][0] = std::nanf("");
  EXPECT_EXIT(checkpoints().write(1), testing::ExitedWithCode(1), "holds a non-finite value");
}

TEST_F(CheckpointsTest, TheCheckpointMustBeADirectory) {
  o.checkpoint = dir + "/file";
  std::ofstream(o.checkpoint) << "x";
  Rank &r = boundRank();
  components(r);
  EXPECT_EXIT(checkpoints().onStart(), testing::ExitedWithCode(1), "must be a directory");
}

TEST_F(CheckpointsTest, AStoppedRunSavesItsStep) {
  Rank &r = boundRank();
  components(r);
  testing::internal::CaptureStdout();
  checkpoints().onFinish({4, true});
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("after step 4"), std::string::npos);
  EXPECT_NE(out.find("no --checkpoint: nothing saved"), std::string::npos);
}

} // namespace
