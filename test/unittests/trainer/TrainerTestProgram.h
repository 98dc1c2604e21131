//===- TrainerTestProgram.h - a step program without the compiler -*- C++ -*-===//
//
// What the trainer's unit tests run instead of a generated step program:
// one parameter `w` [4, 3], a training step that moves it by a fixed
// amount and reports a loss falling by 0.1 a step, and an evaluation step
// that returns its call count as the loss and, for sampling, logits that
// make each token's successor certain. The test binary's moec_program is
// this program; a test that needs another copies and changes it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TEST_TRAINERTESTPROGRAM_H
#define MOERT_TEST_TRAINERTESTPROGRAM_H

#include "trainer/Component.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace moert::trainer::test {

/// The vocabulary of the fake program (text bytes below 128).
constexpr int64_t kVocab = 128;
/// Evaluation steps run so far (the next evaluation's loss).
extern int evalCalls;
/// Training steps whose outputs (moert_context.outputs) held something
/// other than zeros when the step began.
extern int staleOutputs;
/// The fake program (the binary's moec_program).
const moert_program &fakeProgram();

/// A rank of a test: options, a corpus of text, and the Rank over
/// `program` on one rank (no communicator), with a temporary directory.
class RankTest : public ::testing::Test {
protected:
  void SetUp() override;
  void TearDown() override;
  /// The rank over `program` (fakeProgram() by default) with the options
  /// as set so far.
  Rank &makeRank(const moert_program &program = fakeProgram());
  /// makeRank, parameters from the seed and the context bound.
  Rank &boundRank(const moert_program &program = fakeProgram());
  std::string read(const std::string &path) const;

  Options o;
  moert::TokenStream data;
  std::unique_ptr<Shared> shared;
  std::unique_ptr<Rank> rank;
  std::string dir;
};

} // namespace moert::trainer::test

#endif // MOERT_TEST_TRAINERTESTPROGRAM_H
