//===- TracingTest.cpp - emulated devices and the Chrome trace ------------===//

#include "TrainerTestProgram.h"
#include "Trace.h"
#include "trainer/Tracing.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class TracingTest : public RankTest {};

TEST_F(TracingTest, ASlowerDeviceWaitsForItsComputeStretched) {
  o.rankSpeeds = {0.25};
  Rank &r = boundRank();
  Tracing tracing(r);
  tracing.configure();
  EXPECT_DOUBLE_EQ(r.ctx.run.compute_slowdown, 3.0);
}

TEST_F(TracingTest, OneSpeedPerRankOrOneForAll) {
  o.rankSpeeds = {1.0, 0.5};
  Rank &r = boundRank();
  Tracing tracing(r);
  EXPECT_EXIT(tracing.configure(), testing::ExitedWithCode(1), "gives 2 speeds for 1 ranks");
}

TEST_F(TracingTest, TheRankEventsBecomeOneChromeTrace) {
  o.trace = dir + "/run.json";
  Rank &r = boundRank();
  Tracing tracing(r);
  tracing.onStart();
  ASSERT_NE(r.ctx.run.trace, nullptr);
  r.ctx.run.trace->add(moert::TraceLane::Step, "step 1", moert::nowSeconds(), moert::nowSeconds());
  testing::internal::CaptureStdout();
  tracing.onFinish({1, false});
  EXPECT_NE(testing::internal::GetCapturedStdout().find("(1 ranks)"), std::string::npos);
  EXPECT_EQ(r.ctx.run.trace, nullptr);
  std::string json = read(o.trace);
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("step 1"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::accept(json));
}

TEST_F(TracingTest, TheTraceFolderIsCheckedBeforeTraining) {
  o.trace = dir + "/no/such/t.json";
  Rank &r = boundRank();
  Tracing tracing(r);
  EXPECT_EXIT(tracing.onStart(), testing::ExitedWithCode(1), "is not a writable directory");
}

} // namespace
