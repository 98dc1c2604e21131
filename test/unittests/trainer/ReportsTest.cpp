//===- ReportsTest.cpp - communication, kernel and memory reports ---------===//

#include "TrainerTestProgram.h"
#include "trainer/Reports.h"
#include "trainer/StepMetrics.h"

#include "moert/DeviceCopies.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class ReportsTest : public RankTest {};

TEST_F(ReportsTest, AStepsBytesStandNextToTheAnalyticalVolume) {
  static moert_program p; // outlives the rank, which TearDown ends
  p = fakeProgram();
  p.step_comm_bytes[MOERT_ALL_REDUCE] = 96;
  p.step_codec_bytes = 10;
  p.codec_warmup_steps = 2;
  Rank &r = boundRank(p);
  Communication communication(r);
  for (long long s : {0, 2}) {
    StepState st;
    st.step = s;
    communication.beforeStep(st);
    r.ctx.runtime.codec_sent[MOERT_ALL_REDUCE] += 4; // a compressed all-reduce
    r.ctx.runtime.codec_uncompressed += 16;
    communication.acceptStep(st);
    nlohmann::json line = nlohmann::json::object();
    communication.report(st, &line);
    EXPECT_EQ(line["comm_bytes_analytical"]["all_reduce"], 96);
    EXPECT_FALSE(line["comm_bytes"].contains("all_gather")); // no ZeRO
    EXPECT_EQ(line["codec_bytes"]["sent"], 4);
    EXPECT_EQ(line["codec_bytes"]["uncompressed"], 16);
    EXPECT_EQ(line["codec_bytes"]["expected"], s < 2 ? 0 : 10); // the warm-up
  }
  communication.report(StepState{}, nullptr); // without --metrics: nothing
}

TEST_F(ReportsTest, KernelsAreProfiledFromTheSecondStep) {
  o.profileKernels = true;
  o.metrics = dir + "/m.jsonl";
  Rank &r = boundRank();
  r.openMetrics();
  KernelProfile profile(r);
  for (long long s = 0; s < 3; ++s) {
    StepState st;
    st.step = s;
    st.seconds = 0.5;
    profile.beforeStep(st);
    EXPECT_EQ(moert_kernel_profile_enabled(), s > 0 ? 1 : 0);
    profile.afterStep(st);
    EXPECT_EQ(moert_kernel_profile_enabled(), 0);
    profile.acceptStep(st);
  }
  testing::internal::CaptureStdout();
  profile.onFinish({3, false});
  EXPECT_NE(testing::internal::GetCapturedStdout().find("kernel profile: 2 steps after the first"),
            std::string::npos);
  r.metrics->flush();
  nlohmann::json line = nlohmann::json::parse(read(o.metrics));
  EXPECT_EQ(line["steps"], 2);
  EXPECT_DOUBLE_EQ(line["step_seconds"].get<double>(), 1.0);
}

TEST_F(ReportsTest, MemoryIsReportedAgainstThePlan) {
  o.metrics = dir + "/m.jsonl";
  Rank &r = boundRank();
  r.openMetrics();
  MemoryReport memory(r);
  testing::internal::CaptureStdout();
  memory.onFinish({1, false});
  EXPECT_NE(testing::internal::GetCapturedStdout().find("memory: peak resident"),
            std::string::npos);
  r.metrics->flush();
  nlohmann::json line = nlohmann::json::parse(read(o.metrics));
  // The arenas and w with its two moments: 64 + 64 + 4 x 3 x 12.
  EXPECT_EQ(line["planned_bytes"], 64 + 64 + 144);
  EXPECT_EQ(line["data_bytes"], static_cast<long long>(data.bytes()));
}

TEST_F(ReportsTest, ParameterGroupsFollowTheFrontendsNames) {
  EXPECT_STREQ(parameterGroup("tok_emb"), "embedding");
  EXPECT_STREQ(parameterGroup("l0.experts.up"), "experts");
  EXPECT_STREQ(parameterGroup("l1.shared.down"), "shared_experts");
  EXPECT_STREQ(parameterGroup("l1.router"), "router");
  EXPECT_STREQ(parameterGroup("l1.norm1"), "norms");
  EXPECT_STREQ(parameterGroup("l2.wq"), "attention");
  EXPECT_STREQ(parameterGroup("l2.w1"), "dense_ffn");
}

TEST_F(ReportsTest, ExpertCountsSplitByLayer) {
  static moert_program p; // outlives the rank, which TearDown ends
  p = fakeProgram();
  static const int32_t experts[2] = {2, 3};
  p.num_moe_layers = 2;
  p.layer_experts = experts;
  Rank &r = makeRank(p);
  EXPECT_EQ(expertTokens(r, {1, 2, 3, 4, 5}).dump(), "[[1,2],[3,4,5]]");
  r.droppedSlots = {3, 4};
  EXPECT_EQ(gatherLoad(r, 0), 7); // one rank: its own
}

} // namespace
