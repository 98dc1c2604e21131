//===- TrainerEval.cpp - validation loss and text sampling ----------------===//
//
// Both run the step program's evaluation step (the forward loss, no
// update) on every rank: the validation loss over the same held-out windows
// at every evaluation, and --sample, which continues --prompt one token at
// a time, drawn by the lead rank and broadcast to the others.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace moert::trainer;

namespace {

/// The prompt as token ids: bytes of text, or comma-separated ids for
/// token (.bin) data.
std::vector<int32_t> promptTokens(const Options &o, const moert::TokenStream &data, int64_t vocab) {
  std::vector<int32_t> ids;
  std::string text = o.hasPrompt ? o.prompt : data.wide() ? "0" : "\n";
  if (!data.wide()) {
    ids.assign(text.begin(), text.end());
    for (int32_t &t : ids)
      t &= 0xff;
  } else {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t comma = std::min(text.find(',', pos), text.size());
      std::string item = text.substr(pos, comma - pos);
      ids.push_back(static_cast<int32_t>(parseInt("--prompt (token ids)", item.c_str(), 0)));
      pos = comma + 1;
    }
  }
  if (ids.empty())
    die("--prompt is empty: give at least one token");
  for (int32_t t : ids)
    if (t >= vocab)
      die("--prompt: token id " + std::to_string(t) + " does not fit the vocabulary (" +
          std::to_string(vocab) + ")");
  return ids;
}

/// Draws one token from `logits` at `temperature`, among the `topK` most
/// likely (all when 0).
int32_t drawToken(const float *logits, int64_t vocab, double temperature, long long topK,
                  std::mt19937_64 &rng) {
  std::vector<std::pair<float, int32_t>> order(vocab);
  for (int64_t v = 0; v < vocab; ++v)
    order[v] = {logits[v], static_cast<int32_t>(v)};
  int64_t keep = topK > 0 && topK < vocab ? topK : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [](auto &a, auto &b) { return a.first > b.first; });
  std::vector<double> weights(keep);
  for (int64_t i = 0; i < keep; ++i)
    weights[i] = std::exp((order[i].first - order[0].first) / temperature);
  std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
  return order[pick(rng)].second;
}

} // namespace

/// The mean validation loss over --eval-batches held-out batches after
/// `step` steps; the lead rank prints it and writes it to the metrics.
double Trainer::evaluate(long long step) {
  valSampler.setPosition(0);
  std::vector<int32_t> in, tg;
  double total = 0;
  for (long long b = 0; b < o.evalBatches; ++b) {
    valSampler.next(in, tg);
    float loss = 0;
    if (prog.eval_step(&ctx, aligned(mine(in), inA), aligned(mine(tg), tgA), &loss, nullptr) != 0)
      commError("evaluation failed in a kernel or collective");
    total += loss;
  }
  double mean = total / o.evalBatches;
  if (!lead)
    return mean;
  if (bar)
    std::printf("\r\033[K");
  std::printf("step %5lld  validation loss %.4f (%lld x %lld held-out tokens)\n", step, mean,
              (long long)o.evalBatches, (long long)(globalBatch * prog.seq_len));
  if (metrics)
    writeMetrics({{"step", step}, {"val_loss", mean}});
  return mean;
}

/// --sample: --sample tokens continuing the prompt. Row 0 holds the context
/// (the last seq_len tokens); positions after it cannot influence it
/// (causal attention) and come later in routing priority. The other rows
/// hold held-out text, so the experts see a typical load.
void Trainer::checkSampling() const {
  if (o.sample <= 0)
    return;
  if (!prog.eval_step)
    die("--sample: this binary has no evaluation step to sample from");
  promptTokens(o, data, prog.vocab);
}

void Trainer::sampleText() {
  const std::vector<int32_t> prompt = promptTokens(o, data, prog.vocab);
  std::vector<int32_t> context = prompt, in, tg;
  std::mt19937_64 rng(sh.seed + 2);
  moert::AlignedFloats logits(static_cast<size_t>(prog.batch * prog.seq_len * prog.vocab));
  std::string error;
  if (data.size() == 0) {
    // No data (sampling from a checkpoint): the other rows are token 0.
    in.assign(static_cast<size_t>(globalBatch * prog.seq_len), 0);
    tg = in;
  } else {
    bool heldOut =
        moert::BatchSampler(data, sh.split, data.size(), globalBatch, prog.seq_len, sh.seed + 3)
            .valid(error);
    moert::BatchSampler filler(data, heldOut ? sh.split : 0, data.size(), globalBatch, prog.seq_len,
                               sh.seed + 3);
    filler.next(in, tg);
  }
  std::vector<int32_t> generated;
  for (long long i = 0; i < o.sample; ++i) {
    int32_t next = sampleNext(context, in, tg, logits, rng);
    context.push_back(next);
    generated.push_back(next);
  }
  if (lead)
    printSample(prompt, context, generated);
}

/// The token after `context`, from the evaluation step's logits at its last
/// position. Row 0 of the global batch is row 0 of rank 0: it draws the
/// token and tells the others.
int32_t Trainer::sampleNext(const std::vector<int32_t> &context, std::vector<int32_t> &in,
                            const std::vector<int32_t> &tg, moert::AlignedFloats &logits,
                            std::mt19937_64 &rng) {
  size_t n = std::min<size_t>(context.size(), static_cast<size_t>(prog.seq_len));
  std::copy(context.end() - n, context.end(), in.begin());
  std::fill(in.begin() + n, in.begin() + prog.seq_len, 0);
  float loss = 0;
  if (prog.eval_step(&ctx, aligned(mine(in), inA), aligned(mine(tg), tgA), &loss,
                     lead ? logits.data() : nullptr) != 0)
    commError("sampling failed in a kernel or collective");
  int32_t next =
      lead ? drawToken(logits.data() + (n - 1) * prog.vocab, prog.vocab, o.temperature, o.topK, rng)
           : 0;
  if (ranks > 1) {
    std::vector<int32_t> all(ranks);
    int size = moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, all.data());
    if (moert_broadcast(comm, &next, sizeof next, 0, all.data(), size) != 0)
      commError("sampling: broadcasting the next token");
  }
  return next;
}

/// The sample (lead rank): text with unprintable bytes as '?', or the
/// prompt's and the generated token ids for token data; and its metrics.
void Trainer::printSample(const std::vector<int32_t> &prompt, const std::vector<int32_t> &context,
                          const std::vector<int32_t> &generated) {
  std::printf("sample (%lld tokens, temperature %g%s):\n", o.sample, o.temperature,
              o.topK ? (", top-k " + std::to_string(o.topK)).c_str() : "");
  if (!data.wide()) {
    std::string out;
    for (int32_t t : context) // the prompt, then the generated tokens
      out += (t < 32 && t != '\n' && t != '\t') || t == 127 ? '?' : static_cast<char>(t);
    std::printf("%s\n", out.c_str());
  } else {
    for (int32_t t : prompt)
      std::printf("%d ", t);
    std::printf("|");
    for (int32_t t : generated)
      std::printf(" %d", t);
    std::printf("\n");
  }
  if (metrics)
    writeMetrics({{"sample_prompt", prompt}, {"sample", generated}});
}
