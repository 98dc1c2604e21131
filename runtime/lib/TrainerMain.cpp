//===- TrainerMain.cpp - main() of generated training binaries ------------===//
//
//   ./tiny-train --data corpus.txt --steps 300 [--seed S] [--metrics m.jsonl]
//                [--checkpoint DIR [--resume]] [--val-fraction F]
//
// Owns parameters, AdamW moments and the planned arenas, initialises the
// parameters from the seed (the same generator and order as the reference
// interpreter), draws batches, runs the generated step, reports progress and
// writes metrics and checkpoints.
//
//===----------------------------------------------------------------------===//

#include "moert/Checkpoint.h"
#include "moert/Data.h"
#include "moert/Program.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sys/resource.h>
#include <string>
#include <vector>

extern "C" const moert_program moec_program;

namespace {

struct Options {
  std::string data, metrics, checkpoint;
  long long steps = 100;
  long long evalEvery = 0;   ///< 0: evaluate at the end only
  long long evalBatches = 4; ///< validation batches per evaluation
  long long seed = -1;
  bool resume = false;
  double valFraction = 0.1;
};

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(1);
}

long long parseInt(const std::string &flag, const char *text, long long min) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end || errno || v < min)
    die(flag + " expects an integer >= " + std::to_string(min) + ", got '" +
        text + "'");
  return v;
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data")
      o.data = value();
    else if (a == "--steps")
      o.steps = parseInt(a, value(), 1);
    else if (a == "--seed")
      o.seed = parseInt(a, value(), 0);
    else if (a == "--metrics")
      o.metrics = value();
    else if (a == "--checkpoint")
      o.checkpoint = value();
    else if (a == "--resume")
      o.resume = true;
    else if (a == "--val-fraction") {
      const char *v = value();
      char *end = nullptr;
      o.valFraction = std::strtod(v, &end);
      if (*end || !(o.valFraction >= 0 && o.valFraction < 1))
        die(std::string("--val-fraction expects a number in [0, 1), got '") + v + "'");
    } else if (a == "--eval-every")
      o.evalEvery = parseInt(a, value(), 1);
    else if (a == "--eval-batches")
      o.evalBatches = parseInt(a, value(), 1);
    else if (a == "--sample")
      die(a + " is not available yet: this binary has no sampling step");
    else if (a == "--help" || a == "-h") {
      std::printf("usage: %s --data FILE [--steps N] [--seed S] [--metrics FILE]\n"
                  "          [--checkpoint DIR [--resume]] [--val-fraction F]\n"
                  "          [--eval-every N] [--eval-batches B]\n",
                  argv[0]);
      std::exit(0);
    } else
      die("unknown option '" + a + "' (see --help)");
  }
  if (o.data.empty())
    die("--data FILE is required (raw text, or a .bin file of uint16 tokens)");
  if (o.resume && o.checkpoint.empty())
    die("--resume needs --checkpoint DIR");
  return o;
}

long long tokensPerStepFor(const moert_program &p) {
  return static_cast<long long>(p.batch * p.seq_len);
}

int64_t numel(const moert_param_info &p) {
  int64_t n = 1;
  for (int i = 0; i < p.rank; ++i)
    n *= p.shape[i];
  return n;
}

/// The reference interpreter's initialisation, element for element.
void initialise(std::vector<std::vector<float>> &params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < moec_program.num_params; ++i) {
    const moert_param_info &p = moec_program.params[i];
    std::normal_distribution<double> normal(0.0, p.scale > 0 ? p.scale : 1.0);
    std::uniform_real_distribution<double> uniform(-p.scale, p.scale);
    for (float &v : params[i]) {
      switch (p.init) {
      case MOERT_INIT_ZEROS: v = 0; break;
      case MOERT_INIT_ONES: v = 1; break;
      case MOERT_INIT_NORMAL: v = static_cast<float>(normal(rng)); break;
      default: v = static_cast<float>(uniform(rng)); break;
      }
    }
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  const moert_program &prog = moec_program;
  uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : prog.seed;

  moert::TokenStream data;
  std::string error;
  if (!moert::loadTokens(o.data, moert::DataFormat::Auto, data, error))
    die(error);
  if (data.maxToken >= prog.vocab)
    die(o.data + ": token id " + std::to_string(data.maxToken) +
        " does not fit the model's vocabulary (" + std::to_string(prog.vocab) + ")");
  size_t split = moert::trainSplitEnd(data.tokens.size(), o.valFraction);
  moert::BatchSampler sampler(data.tokens, 0, split, prog.batch, prog.seq_len, seed);
  if (!sampler.valid(error))
    die(o.data + ": " + error);

  std::vector<std::vector<float>> params(prog.num_params), moments(2 * prog.num_params);
  for (int i = 0; i < prog.num_params; ++i) {
    params[i].resize(numel(prog.params[i]));
    if (prog.params[i].adamw) {
      moments[2 * i].assign(params[i].size(), 0.0f);
      moments[2 * i + 1].assign(params[i].size(), 0.0f);
    }
  }
  initialise(params, seed);
  long long firstStep = 0;
  if (o.resume) {
    moert::TensorMap tensors;
    nlohmann::json state;
    if (!moert::loadCheckpoint(o.checkpoint, tensors, state, error))
      die(error);
    for (int i = 0; i < prog.num_params; ++i) {
      std::string name = prog.params[i].name;
      for (auto [suffix, target] :
           {std::pair<std::string, std::vector<float> *>{"", &params[i]},
            {".adam_m", &moments[2 * i]}, {".adam_v", &moments[2 * i + 1]}}) {
        if (target->empty())
          continue;
        auto it = tensors.find(name + suffix);
        if (it == tensors.end() || it->second.data.size() != target->size())
          die(o.checkpoint + ": tensor '" + name + suffix +
              "' is missing or has another size than the model's");
        *target = it->second.data;
      }
    }
    if (!state.contains("step") || !state["step"].is_number_integer() ||
        !state.contains("data_position"))
      die(o.checkpoint + "/state.json: needs step and data_position");
    firstStep = state["step"].get<long long>();
    sampler.setPosition(state["data_position"].get<uint64_t>());
    std::printf("resumed from %s at step %lld\n", o.checkpoint.c_str(), firstStep);
  }

  std::vector<float *> paramPtrs, momentPtrs;
  for (auto &p : params)
    paramPtrs.push_back(p.data());
  for (auto &m : moments)
    momentPtrs.push_back(m.empty() ? nullptr : m.data());
  std::unique_ptr<char[]> act(new char[prog.activation_bytes + 64]),
      grad(new char[prog.gradient_bytes + 64]);
  int totalExperts = 0;
  for (int l = 0; l < prog.num_moe_layers; ++l)
    totalExperts += prog.layer_experts[l];
  std::vector<int32_t> expertCounts(totalExperts, 0);
  moert_context ctx{paramPtrs.data(), momentPtrs.data(), act.get(), grad.get(),
                    expertCounts.data()};
  // Token-slots routed past an expert's capacity in the last step.
  auto droppedTokens = [&]() {
    long long dropped = 0;
    const int32_t *counts = expertCounts.data();
    for (int l = 0; l < prog.num_moe_layers; ++l) {
      for (int e = 0; e < prog.layer_experts[l]; ++e)
        dropped += std::max(0, counts[e] - prog.layer_capacity[l]);
      counts += prog.layer_experts[l];
    }
    return dropped;
  };
  auto expertTokens = [&]() {
    nlohmann::json layers = nlohmann::json::array();
    const int32_t *counts = expertCounts.data();
    for (int l = 0; l < prog.num_moe_layers; ++l) {
      layers.push_back(std::vector<int32_t>(counts, counts + prog.layer_experts[l]));
      counts += prog.layer_experts[l];
    }
    return layers;
  };

  std::unique_ptr<std::ofstream> metrics;
  if (!o.metrics.empty()) {
    metrics = std::make_unique<std::ofstream>(o.metrics, std::ios::app);
    if (!*metrics)
      die(o.metrics + ": cannot open the metrics file for writing");
  }
  std::printf("training: %d parameters tensors, batch %lld x %lld tokens, steps %lld..%lld\n",
              prog.num_params, (long long)prog.batch, (long long)prog.seq_len,
              firstStep, o.steps - 1);
  // Validation: the same windows of the held-out split at every evaluation.
  bool canEval = prog.eval_step && o.valFraction > 0;
  moert::BatchSampler valSampler(data.tokens, split, data.tokens.size(),
                                 prog.batch, prog.seq_len, seed + 1);
  if (canEval && !valSampler.valid(error))
    die(o.data + ": validation split: " + error +
        " (use more data or a larger --val-fraction)");
  auto evaluate = [&](long long step) {
    valSampler.setPosition(0);
    std::vector<int32_t> in, tg;
    double total = 0;
    for (long long b = 0; b < o.evalBatches; ++b) {
      valSampler.next(in, tg);
      float loss = 0;
      if (prog.eval_step(&ctx, in.data(), tg.data(), &loss) != 0)
        die("evaluation failed in a kernel");
      total += loss;
    }
    double mean = total / o.evalBatches;
    std::printf("step %5lld  validation loss %.4f (%lld x %lld held-out tokens)\n",
                step, mean, (long long)o.evalBatches, tokensPerStepFor(prog));
    if (metrics)
      *metrics << nlohmann::json({{"step", step}, {"val_loss", mean}}).dump() << "\n"
               << std::flush;
    return mean;
  };
  std::vector<int32_t> tokens, targets;
  long long tokensPerStep = prog.batch * prog.seq_len;
  for (long long s = firstStep; s < o.steps; ++s) {
    sampler.next(tokens, targets);
    float loss = 0;
    auto start = std::chrono::steady_clock::now();
    int rc = prog.train_step(&ctx, tokens.data(), targets.data(),
                             static_cast<int32_t>(s), &loss);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rc != 0)
      die("step " + std::to_string(s) + " failed in a kernel (code " + std::to_string(rc) + ")");
    if (!std::isfinite(loss))
      die("step " + std::to_string(s) + ": the loss is not finite");
    double tps = tokensPerStep / seconds;
    long long dropped = droppedTokens();
    if (s == firstStep || (s + 1) % 10 == 0 || s + 1 == o.steps)
      std::printf("step %5lld/%lld  loss %.4f  %.0f tok/s  dropped %lld\n", s + 1,
                  o.steps, loss, tps, dropped);
    if (metrics)
      *metrics << nlohmann::json({{"step", s + 1},
                                  {"loss", loss},
                                  {"tokens_per_s", tps},
                                  {"dropped_tokens", dropped},
                                  {"expert_tokens", expertTokens()}})
                      .dump()
               << "\n" << std::flush;
    if (canEval && o.evalEvery > 0 && (s + 1) % o.evalEvery == 0 && s + 1 != o.steps)
      evaluate(s + 1);
  }
  if (canEval)
    evaluate(o.steps);
  // Memory: measured peak resident set against the plan's prediction.
  {
    long long planned = prog.activation_bytes + prog.gradient_bytes;
    for (int i = 0; i < prog.num_params; ++i)
      planned += numel(prog.params[i]) * 4 * (prog.params[i].adamw ? 3 : 1);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    long long peak = static_cast<long long>(usage.ru_maxrss) * 1024;
    std::printf("memory: peak resident %.1f MB; planned buffers %.1f MB "
                "(parameters, moments, activations, gradients; the rest is code, "
                "data and the C++ runtime)\n",
                peak / 1e6, planned / 1e6);
    if (metrics)
      *metrics << nlohmann::json({{"peak_rss_bytes", peak}, {"planned_bytes", planned}}).dump()
               << "\n" << std::flush;
  }
  if (!o.checkpoint.empty()) {
    moert::TensorMap tensors;
    for (int i = 0; i < prog.num_params; ++i) {
      const moert_param_info &p = prog.params[i];
      std::vector<int64_t> shape(p.shape, p.shape + p.rank);
      tensors[p.name] = {shape, params[i]};
      if (p.adamw) {
        tensors[std::string(p.name) + ".adam_m"] = {shape, moments[2 * i]};
        tensors[std::string(p.name) + ".adam_v"] = {shape, moments[2 * i + 1]};
      }
    }
    nlohmann::json state = {{"step", o.steps}, {"data_position", sampler.position()},
                            {"seed", seed}};
    if (!moert::saveCheckpoint(o.checkpoint, tensors, state, error))
      die(error);
    std::printf("checkpoint written to %s\n", o.checkpoint.c_str());
  }
  return 0;
}
