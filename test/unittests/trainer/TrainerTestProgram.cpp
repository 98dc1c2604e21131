//===- TrainerTestProgram.cpp - a step program without the compiler -------===//

#include "TrainerTestProgram.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

using namespace moert::trainer;
using namespace moert::trainer::test;

int moert::trainer::test::evalCalls = 0;
int moert::trainer::test::staleOutputs = 0;

namespace {

const moert_param_info kParams[] = {
    {"w", 2, {4, 3}, MOERT_INIT_NORMAL, 0.02, 1, 1, nullptr, -1, 1, 0, -1}};

/// Step s: w -= 0.01 (AdamW's moments count the steps), loss 5 - 0.1 s.
int fakeTrain(moert_context *ctx, const int32_t *, const int32_t *, int32_t step, float *loss) {
  const moert_step_outputs &out = ctx->outputs;
  if (out.grad_norm != 0 || out.lr != 0 || out.skip_update != 0 || out.comm_seconds != 0 ||
      out.async_seconds != 0 || out.async_wait_seconds != 0)
    ++staleOutputs;
  for (int j = 0; j < 12; ++j) {
    ctx->run.params[0][j] -= 0.01f;
    ctx->run.moments[0][j] += 1.0f;
  }
  ctx->outputs.grad_norm = 1.0f;
  ctx->outputs.lr = 1e-3f;
  *loss = 5.0f - 0.1f * static_cast<float>(step);
  return 0;
}

/// The loss is the call count; each position's logits make its token's
/// successor certain.
int fakeEval(moert_context *, const int32_t *tokens, const int32_t *, float *loss, float *logits) {
  *loss = static_cast<float>(evalCalls++);
  if (logits)
    for (int64_t p = 0; p < 8; ++p)
      for (int64_t v = 0; v < kVocab; ++v)
        logits[p * kVocab + v] = v == (tokens[p] + 1) % kVocab ? 50.0f : 0.0f;
  return 0;
}

moert_program makeFake() {
  moert_program p{};
  p.abi_version = MOERT_ABI_VERSION;
  p.num_params = 1;
  p.params = kParams;
  p.activation_bytes = 64;
  p.gradient_bytes = 64;
  p.batch = 2;
  p.seq_len = 4;
  p.vocab = kVocab;
  p.train_step = fakeTrain;
  p.eval_step = fakeEval;
  p.grid_dp = p.grid_ep = p.grid_tp = 1;
  return p;
}

} // namespace

extern "C" const moert_program moec_program = makeFake();

const moert_program &moert::trainer::test::fakeProgram() { return moec_program; }

void RankTest::SetUp() {
  char pattern[] = "/tmp/moert-trainer-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  dir = pattern;
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "the quick brown fox jumps over the lazy dog. ";
  data.raw.assign(text.begin(), text.end());
  data.maxToken = 127;
  o.progress = false;
  o.data = "corpus.txt"; // (the text above: a run with data trains)
  evalCalls = 0;
}

void RankTest::TearDown() {
  rank.reset();
  std::string cmd = "rm -rf '" + dir + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

Rank &RankTest::makeRank(const moert_program &program) {
  size_t split = data.size() - static_cast<size_t>(data.size() * o.valFraction);
  shared = std::make_unique<Shared>(Shared{o, data, split, 7, 0, true});
  rank = std::make_unique<Rank>(*shared, nullptr, program);
  return *rank;
}

Rank &RankTest::boundRank(const moert_program &program) {
  Rank &r = makeRank(program);
  r.initialiseParameters();
  r.bindContext();
  r.startBackground();
  return r;
}

std::string RankTest::read(const std::string &path) const {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
