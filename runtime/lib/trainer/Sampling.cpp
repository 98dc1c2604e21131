//===- Sampling.cpp - text sampling (--sample) ----------------------------===//
//
// --sample N continues --prompt one token at a time with the step
// program's evaluation step: the lead rank draws each token from the
// logits and broadcasts it to the others.
//
//===----------------------------------------------------------------------===//

#include "Sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace moert::trainer;

namespace {

/// The prompt as token ids: bytes of text, or comma-separated ids for
/// token (.bin) data.
std::vector<int32_t> idsOfPrompt(const Options &o, const moert::TokenStream &data) {
  std::vector<int32_t> ids;
  std::string text = o.hasPrompt ? o.prompt : data.wide() ? "0" : "\n";
  if (!data.wide()) {
    ids.assign(text.begin(), text.end());
    for (int32_t &t : ids)
      t &= 0xff;
    return ids;
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    ids.push_back(static_cast<int32_t>(parseInt("--prompt (token ids)", item.c_str(), 0)));
    pos = comma + 1;
  }
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

void Sampling::onFinish(const RunEnd &end) {
  if (!end.stopped && r.o.sample > 0)
    sampleText();
}

void Sampling::withoutTraining() {
  if (r.o.sample > 0)
    sampleText();
}

/// The prompt: --tokenizer's encoding of its text (without --prompt, the
/// end-of-sequence id, after which moe-tokenize's files start each line,
/// as text starts after a newline), else idsOfPrompt; every id in the
/// vocabulary.
std::vector<int32_t> Sampling::promptTokens() const {
  std::vector<int32_t> ids;
  if (!tokenizer.loaded())
    ids = idsOfPrompt(r.o, r.data);
  else if (r.o.hasPrompt)
    ids = tokenizer.encode(r.o.prompt);
  else if (tokenizer.eosId() >= 0) // as moe-tokenize ends each line: a line starts next
    ids = {tokenizer.eosId()};
  else if (tokenizer.bosId() >= 0)
    ids = {tokenizer.bosId()};
  else
    die("--tokenizer: " + r.o.tokenizer +
        " has no end- or beginning-of-sentence id to start a sample from: give --prompt TEXT");
  if (ids.empty())
    die("--prompt is empty: give at least one token");
  for (int32_t t : ids)
    if (t >= r.prog.vocab)
      die("--prompt: token id " + std::to_string(t) + " does not fit the vocabulary (" +
          std::to_string(r.prog.vocab) + ")");
  return ids;
}

/// --sample, --prompt and --tokenizer, checked before anything runs.
void Sampling::configure() {
  if (!r.o.tokenizer.empty()) {
    std::string error;
    if (!tokenizer.load(r.o.tokenizer, error))
      die("--tokenizer: " + error);
    if (!r.o.data.empty() && !r.data.wide())
      die("--tokenizer: " + r.o.data +
          " is text, one token per byte; train on moe-tokenize's "
          "token file to use the tokenizer's ids");
    if (r.data.maxToken >= tokenizer.vocabSize())
      die("--tokenizer: " + r.o.data + " holds token id " + std::to_string(r.data.maxToken) +
          ", outside " + r.o.tokenizer + "'s " + std::to_string(tokenizer.vocabSize()) +
          " ids: the data was made with another tokenizer");
    if (tokenizer.vocabSize() > r.prog.vocab)
      die("--tokenizer: " + r.o.tokenizer + " has " + std::to_string(tokenizer.vocabSize()) +
          " ids, more than the model's vocabulary (" + std::to_string(r.prog.vocab) + ")");
  }
  if (r.o.sample <= 0)
    return;
  if (!r.prog.eval_step)
    die("--sample: this binary has no evaluation step to sample from");
  promptTokens();
}

/// --sample tokens continuing the prompt. Row 0 holds the context (the
/// last seq_len tokens); positions after it cannot influence it (causal
/// attention) and come later in routing priority. The other rows hold
/// held-out text, so the experts see a typical load.
void Sampling::sampleText() {
  const std::vector<int32_t> prompt = promptTokens();
  std::vector<int32_t> context = prompt, in, tg;
  std::mt19937_64 rng(r.sh.seed + 2);
  moert::AlignedFloats logits(static_cast<size_t>(r.prog.batch * r.prog.seq_len * r.prog.vocab));
  std::string error;
  if (r.data.size() == 0) {
    // No data (sampling from a checkpoint): the other rows are token 0.
    in.assign(static_cast<size_t>(r.globalBatch * r.prog.seq_len), 0);
    tg = in;
  } else {
    bool heldOut = moert::BatchSampler(r.data, r.sh.split, r.data.size(), r.globalBatch,
                                       r.prog.seq_len, r.sh.seed + 3)
                       .valid(error);
    moert::BatchSampler filler(r.data, heldOut ? r.sh.split : 0, r.data.size(), r.globalBatch,
                               r.prog.seq_len, r.sh.seed + 3);
    filler.next(in, tg);
  }
  std::vector<int32_t> generated;
  for (long long i = 0; i < r.o.sample; ++i) {
    int32_t next = sampleNext(context, in, tg, logits, rng);
    context.push_back(next);
    generated.push_back(next);
  }
  if (r.lead)
    printSample(prompt, context, generated);
}

/// The token after `context`, from the evaluation step's logits at its last
/// position. Row 0 of the global batch is row 0 of rank 0: it draws the
/// token and tells the others.
int32_t Sampling::sampleNext(const std::vector<int32_t> &context, std::vector<int32_t> &in,
                             const std::vector<int32_t> &tg, moert::AlignedFloats &logits,
                             std::mt19937_64 &rng) {
  size_t n = std::min<size_t>(context.size(), static_cast<size_t>(r.prog.seq_len));
  std::copy(context.end() - n, context.end(), in.begin());
  std::fill(in.begin() + n, in.begin() + r.prog.seq_len, 0);
  float loss = 0;
  if (r.prog.eval_step(&r.ctx, r.aligned(r.mine(in), r.inA), r.aligned(r.mine(tg), r.tgA), &loss,
                       r.lead ? logits.data() : nullptr) != 0)
    r.commError("sampling failed in a kernel or collective");
  int32_t next = r.lead ? drawToken(logits.data() + (n - 1) * r.prog.vocab, r.prog.vocab,
                                    r.o.temperature, r.o.topK, rng)
                        : 0;
  if (r.ranks > 1) {
    std::vector<int32_t> all(r.ranks);
    int size = moert_grid_group(&r.ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, all.data());
    if (moert_broadcast(r.comm, &next, sizeof next, 0, all.data(), size) != 0)
      r.commError("sampling: broadcasting the next token");
  }
  return next;
}

/// The sample (lead rank): --tokenizer's decoding of it; text with
/// unprintable bytes as '?'; or the prompt's and the generated token ids
/// for token data. And its metrics.
void Sampling::printSample(const std::vector<int32_t> &prompt, const std::vector<int32_t> &context,
                           const std::vector<int32_t> &generated) {
  std::printf("sample (%lld tokens, temperature %g%s):\n", r.o.sample, r.o.temperature,
              r.o.topK ? (", top-k " + std::to_string(r.o.topK)).c_str() : "");
  if (tokenizer.loaded()) {
    std::printf("%s\n", tokenizer.decode(context).c_str());
  } else if (!r.data.wide()) {
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
  if (r.metrics)
    r.writeMetrics({{"sample_prompt", prompt}, {"sample", generated}});
}
