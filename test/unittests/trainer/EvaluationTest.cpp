//===- EvaluationTest.cpp - the validation loss ---------------------------===//

#include "TrainerTestProgram.h"
#include "trainer/Evaluation.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class EvaluationTest : public RankTest {};

TEST_F(EvaluationTest, TheMeanOverTheHeldOutBatches) {
  o.evalBatches = 4;
  o.metrics = dir + "/m.jsonl";
  Rank &r = boundRank();
  r.openMetrics();
  Evaluation evaluation(r);
  evaluation.onStart();
  testing::internal::CaptureStdout();
  // The fake evaluation step's losses are 0, 1, 2, 3.
  EXPECT_DOUBLE_EQ(evaluation.evaluate(10), 1.5);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("step    10  validation loss 1.5000"),
            std::string::npos);
  r.metrics->flush();
  EXPECT_EQ(read(o.metrics), "{\"step\":10,\"val_loss\":1.5}\n");
}

TEST_F(EvaluationTest, EveryNStepsAndAtTheEndOnly) {
  o.evalBatches = 1;
  o.evalEvery = 2;
  o.steps = 4;
  Rank &r = boundRank();
  Evaluation evaluation(r);
  evaluation.onStart();
  testing::internal::CaptureStdout();
  for (long long s = 0; s < 4; ++s) {
    StepState st;
    st.step = s;
    evaluation.endOfStep(st);
  }
  EXPECT_EQ(evalCalls, 1); // after step 2; step 4 is the end's
  evaluation.onFinish({4, false});
  EXPECT_EQ(evalCalls, 2);
  evaluation.onFinish({3, true}); // a stopped run is not evaluated
  EXPECT_EQ(evalCalls, 2);
  testing::internal::GetCapturedStdout();
}

TEST_F(EvaluationTest, AValidationSplitTooSmallIsAnError) {
  o.valFraction = 0.001;
  Rank &r = boundRank();
  Evaluation evaluation(r);
  EXPECT_EXIT(evaluation.onStart(), testing::ExitedWithCode(1), "validation split");
}

} // namespace
