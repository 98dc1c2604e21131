//===- SamplingTest.cpp - text sampling -----------------------------------===//

#include "TrainerTestProgram.h"
#include "trainer/Sampling.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class SamplingTest : public RankTest {};

TEST_F(SamplingTest, ContinuesThePromptOneTokenAtATime) {
  o.sample = 3;
  o.prompt = "a";
  o.hasPrompt = true;
  o.metrics = dir + "/m.jsonl";
  Rank &r = boundRank();
  r.openMetrics();
  Sampling sampling(r);
  sampling.configure();
  testing::internal::CaptureStdout();
  sampling.onFinish({1, false}); // each token's successor is certain
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("sample (3 tokens, temperature 0.8):\nabcd\n"), std::string::npos) << out;
  r.metrics->flush();
  EXPECT_EQ(read(o.metrics), "{\"sample\":[98,99,100],\"sample_prompt\":[97]}\n");
}

TEST_F(SamplingTest, WithoutTrainingItSamplesAlone) {
  o.sample = 2;
  o.prompt = "x";
  o.hasPrompt = true;
  Rank &r = boundRank();
  Sampling sampling(r);
  testing::internal::CaptureStdout();
  sampling.withoutTraining();
  EXPECT_NE(testing::internal::GetCapturedStdout().find("xyz"), std::string::npos);
  testing::internal::CaptureStdout();
  sampling.onFinish({1, true}); // not after a stopped run
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST_F(SamplingTest, APromptOutsideTheVocabularyIsAnError) {
  o.sample = 1;
  o.prompt = "\xc3\xa9";
  o.hasPrompt = true;
  Rank &r = boundRank();
  Sampling sampling(r);
  EXPECT_EXIT(sampling.configure(), testing::ExitedWithCode(1), "does not fit the vocabulary");
}

} // namespace
