//===- LearningRateTest.cpp - the learning-rate schedule at run time ------===//

#include "TrainerTestProgram.h"
#include "trainer/LearningRate.h"

#include "moec/contract/Abi.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class LearningRateTest : public RankTest {
protected:
  /// The fake program with a compiled schedule: 0.01, 4 warm-up steps,
  /// cosine to 0.001 at step 20.
  moert_program scheduled() {
    moert_program p = fakeProgram();
    p.lr_schedule = &compiled;
    return p;
  }
  moert_lr_schedule_config compiled{0.01, 0.001, 4, 20, MOERT_LR_COSINE};
  moert_program program;
};

TEST_F(LearningRateTest, TheCompiledScheduleUnlessAFlagChangesIt) {
  program = scheduled();
  o.steps = 20; // the compiled schedule's length: nothing to fit
  Rank &r = boundRank(program);
  LearningRate lr(r);
  lr.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.lr, 0.01);
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 20);

  o.lr = 0.02;
  o.warmupSteps = 0;
  o.lrKind = MOERT_LR_LINEAR;
  LearningRate changed(r);
  changed.configure();
  const moert_lr_schedule_config &s = r.ctx.run.lr_schedule;
  EXPECT_EQ(s.lr, 0.02);
  EXPECT_EQ(s.min_lr, 0.001); // (not given: the compiled value)
  EXPECT_EQ(s.warmup_steps, 0);
  EXPECT_EQ(s.kind, MOERT_LR_LINEAR);
  // Linear from 0.02 at t = 0 to 0.001 at t = 20: t = 10 is the middle.
  EXPECT_FLOAT_EQ(moert_lr_schedule(9, s.lr, s.min_lr, s.warmup_steps, s.total_steps, s.kind),
                  0.0105f);
}

TEST_F(LearningRateTest, ACheckpointKeepsTheRunsSchedule) {
  program = scheduled();
  o.lr = 0.05;
  o.totalSteps = 30;
  Rank &r = boundRank(program);
  LearningRate first(r);
  first.configure();
  CheckpointData saved;
  first.save(saved);
  EXPECT_EQ(saved.state["lr_schedule"]["lr"], 0.05);
  EXPECT_EQ(saved.state["lr_schedule"]["total_steps"], 30);
  EXPECT_EQ(saved.state["lr_schedule"]["schedule"], "cosine");

  o.lr.reset();
  o.totalSteps.reset();
  LearningRate resumed(r);
  resumed.restore(saved);
  resumed.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.lr, 0.05);
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 30);

  saved.state["lr_schedule"]["warmup_steps"] = 31;
  LearningRate bad(r);
  EXPECT_EXIT(bad.restore(saved), testing::ExitedWithCode(1), "state: lr_schedule: expected");
}

TEST_F(LearningRateTest, InconsistentFlagsAndAProgramWithoutOneAreErrors) {
  program = scheduled();
  o.minLr = 0.5;
  Rank &r = boundRank(program);
  LearningRate lr(r);
  EXPECT_EXIT(lr.configure(), testing::ExitedWithCode(1),
              "the minimum learning rate 0.500000 exceeds the learning rate 0.010000");
  o.minLr.reset();
  o.warmupSteps = 25;
  o.totalSteps = 20;
  EXPECT_EXIT(lr.configure(), testing::ExitedWithCode(1), "the warm-up \\(25 steps\\) exceeds");
  o.totalSteps.reset();

  o.warmupSteps.reset();
  o.lr = 0.1;
  Rank &plain = boundRank(fakeProgram());
  LearningRate none(plain);
  EXPECT_EXIT(none.configure(), testing::ExitedWithCode(1), "no learning-rate schedule");
}

TEST_F(LearningRateTest, FitsTheScheduleToTheRunUnlessTotalStepsFixesIt) {
  program = scheduled();
  o.steps = 50; // 4 warm-up steps of 20 -> 10 of 50, the decay ending at 50
  Rank &r = boundRank(program);
  LearningRate fitted(r);
  fitted.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 50);
  EXPECT_EQ(r.ctx.run.lr_schedule.warmup_steps, 10);
  EXPECT_EQ(moert_fit_warmup(4, 20, 3), 1); // 0.6, rounded
  EXPECT_EQ(moert_fit_warmup(1, 300, 40), 1); // a warm-up stays
  EXPECT_EQ(moert_fit_warmup(0, 20, 50), 0);
  EXPECT_EQ(moert_fit_warmup(int64_t(1) << 40, int64_t(1) << 41, 1000000), 500000); // no overflow
  // --warmup-steps sets the warm-up; the length still follows the run.
  o.warmupSteps = 7;
  LearningRate warm(r);
  warm.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.warmup_steps, 7);
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 50);
  o.warmupSteps.reset();
  // --total-steps fixes the length; the warm-up keeps its share of it.
  o.totalSteps = 30;
  LearningRate fixed(r);
  fixed.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 30);
  EXPECT_EQ(r.ctx.run.lr_schedule.warmup_steps, 6);
  CheckpointData saved;
  fixed.save(saved);
  EXPECT_EQ(saved.state["lr_schedule"]["fit_to_run"], false);
  o.totalSteps.reset();
  // Resumed, a schedule stays as the checkpoint has it, fixed or fitted to
  // its run, whatever --steps says (the steps taken keep their rates);
  // --total-steps refits it, the warm-up keeping its compiled share.
  LearningRate keeps(r);
  keeps.restore(saved);
  keeps.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 30);
  fitted.configure(); // (the context holds the last configured schedule)
  fitted.save(saved);
  EXPECT_EQ(saved.state["lr_schedule"]["fit_to_run"], true);
  o.steps = 60;
  LearningRate stays(r);
  stays.restore(saved);
  stays.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 50);
  EXPECT_EQ(r.ctx.run.lr_schedule.warmup_steps, 10);
  o.totalSteps = 60;
  LearningRate refits(r);
  refits.restore(saved);
  refits.configure();
  EXPECT_EQ(r.ctx.run.lr_schedule.total_steps, 60);
  EXPECT_EQ(r.ctx.run.lr_schedule.warmup_steps, 12);
  o.totalSteps.reset();
  saved.state["lr_schedule"]["warmup_from"] = {5, 2};
  LearningRate bad(r);
  EXPECT_EXIT(bad.restore(saved), testing::ExitedWithCode(1), "state: lr_schedule: expected");
}

TEST_F(LearningRateTest, WarnsWhenTheRunEndsInsideTheWarmUpOrBeforeTheDecay) {
  program = scheduled();
  o.steps = 3;
  o.totalSteps = 20; // fixed: the run does not fit it
  Rank &r = boundRank(program);
  LearningRate lr(r);
  lr.configure();
  testing::internal::CaptureStderr();
  lr.onStart();
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "this run of 3 steps ends inside the learning-rate warm-up (4 steps): its last "
                "learning rate is 0.0075"),
            std::string::npos);
  o.steps = 20;
  testing::internal::CaptureStderr();
  lr.onStart();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

} // namespace
