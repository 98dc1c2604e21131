//===- TrainerLoopTest.cpp - the step loop and its components' order ------===//

#include "Trainer.h"
#include "TrainerTestProgram.h"

#include <sstream>

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class TrainerLoopTest : public RankTest {
protected:
  /// The metrics file's lines, parsed.
  std::vector<nlohmann::json> lines() {
    std::vector<nlohmann::json> out;
    std::istringstream in(read(o.metrics));
    for (std::string line; std::getline(in, line);)
      out.push_back(nlohmann::json::parse(line));
    return out;
  }
};

TEST_F(TrainerLoopTest, TrainsThenTheComponentsFinishInOrder) {
  o.steps = 3;
  o.evalBatches = 2;
  o.metrics = dir + "/m.jsonl";
  o.checkpoint = dir + "/ckpt";
  makeRank(); // the options' split
  testing::internal::CaptureStdout();
  EXPECT_EQ(trainRank(*shared, nullptr), 0);
  std::string out = testing::internal::GetCapturedStdout();
  // The step lines, then the validation loss, the memory, the checkpoint.
  size_t step = out.find("step     3/3  loss 4.8000"), val = out.find("validation loss 0.5000"),
         memory = out.find("memory: peak"), saved = out.find("checkpoint written");
  EXPECT_NE(step, std::string::npos) << out;
  EXPECT_LT(step, val);
  EXPECT_LT(val, memory);
  EXPECT_LT(memory, saved);
  EXPECT_EQ(saved, out.rfind("checkpoint written")); // once: at the end
  std::vector<nlohmann::json> m = lines();
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0]["run"]["steps"], 3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(m[1 + s]["step"], s + 1);
    EXPECT_FLOAT_EQ(m[1 + s]["loss"].get<float>(), 5.0f - 0.1f * s);
    EXPECT_TRUE(m[1 + s].contains("comm_bytes"));   // Communication
    EXPECT_TRUE(m[1 + s].contains("balancedness")); // Rebalancer
    EXPECT_FALSE(m[1 + s].contains("loss_scale"));  // not an f16 model
  }
  EXPECT_EQ(m[4]["val_loss"], 0.5);
  EXPECT_TRUE(m[5].contains("peak_rss_bytes"));
}

TEST_F(TrainerLoopTest, EachStepsOutputsStartFromZero) {
  o.steps = 3;
  o.valFraction = 0;
  makeRank();
  staleOutputs = 0;
  testing::internal::CaptureStdout();
  EXPECT_EQ(trainRank(*shared, nullptr), 0);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(staleOutputs, 0); // the fake step leaves grad_norm 1 and lr 1e-3
}

TEST_F(TrainerLoopTest, AResumedRunContinuesAtItsStep) {
  o.steps = 2;
  o.checkpoint = dir + "/ckpt";
  o.valFraction = 0;
  makeRank();
  testing::internal::CaptureStdout();
  ASSERT_EQ(trainRank(*shared, nullptr), 0);
  o.steps = 4;
  o.resume = true;
  ASSERT_EQ(trainRank(*shared, nullptr), 0);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("resumed from"), std::string::npos);
  EXPECT_NE(out.find("steps 2..3"), std::string::npos) << out;
  EXPECT_NE(out.find("step     3/4  loss 4.8000"), std::string::npos) << out;
}

} // namespace
