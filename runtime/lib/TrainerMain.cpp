//===- TrainerMain.cpp - main() of generated training binaries ------------===//
//
//   ./tiny-train --data corpus.txt --steps 300 [--seed S] [--metrics m.jsonl]
//                [--checkpoint DIR [--resume]] [--val-fraction F]
//                [--eval-every N] [--sample N [--prompt TEXT]]
//
// Owns parameters, AdamW moments and the planned arenas, initialises the
// parameters from the seed (the same generator and order as the reference
// interpreter), draws batches, runs the generated step, reports progress and
// writes metrics and checkpoints, and samples text at the end.
//
//===----------------------------------------------------------------------===//

#include "moert/Aligned.h"
#include "moert/Checkpoint.h"
#include "moert/Codecs.h"
#include "moert/Comm.h"
#include "moert/Data.h"
#include "moert/MpiComm.h"
#include "moert/Program.h"
#include "moert/ScratchPool.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <memory>
#include <random>
#include <sys/resource.h>
#include <unistd.h>
#include <string>
#include <vector>

extern "C" const moert_program moec_program;

// The MPI backend, when the binary links libmoert_mpi (weak: a binary
// without it runs ranks as threads only).
extern "C" {
int moert_mpi_launched(void) __attribute__((weak));
moert_comm *moert_mpi_init(int *argc, char ***argv, double timeout_seconds)
    __attribute__((weak));
void moert_mpi_finalize(moert_comm *comm) __attribute__((weak));
}

namespace {

struct Options {
  int ranks = 0;          ///< 0: the grid the binary was compiled for
  double timeout = 120.0; ///< seconds a collective may wait for a peer
  std::string data, metrics, checkpoint;
  long long steps = 100;
  long long evalEvery = 0;   ///< 0: evaluate at the end only
  long long evalBatches = 4; ///< validation batches per evaluation
  long long seed = -1;
  bool resume = false;
  double valFraction = 0.1;
  long long sample = 0; ///< tokens to generate after training
  std::string prompt;
  bool hasPrompt = false;
  double temperature = 0.8;
  long long topK = 0; ///< 0: sample from the whole vocabulary
  bool progress = true; ///< a progress bar when stdout is a terminal
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
      o.sample = parseInt(a, value(), 0);
    else if (a == "--prompt") {
      o.prompt = value();
      o.hasPrompt = true;
    } else if (a == "--temperature") {
      const char *v = value();
      char *end = nullptr;
      o.temperature = std::strtod(v, &end);
      if (!*v || *end || !(o.temperature > 0 && o.temperature <= 100))
        die(std::string("--temperature expects a number in (0, 100], got '") + v + "'");
    } else if (a == "--top-k")
      o.topK = parseInt(a, value(), 0);
    else if (a == "--no-progress")
      o.progress = false;
    else if (a == "--ranks")
      o.ranks = static_cast<int>(parseInt(a, value(), 1));
    else if (a == "--comm-timeout") {
      const char *v = value();
      char *end = nullptr;
      o.timeout = std::strtod(v, &end);
      if (!*v || *end || !(o.timeout > 0 && o.timeout <= 86400))
        die(std::string("--comm-timeout expects seconds in (0, 86400], got '") + v + "'");
    }
    else if (a == "--threads") {
      // The kernels' thread pool reads HL_NUM_THREADS when it starts.
      const char *v = value();
      parseInt(a, v, 1);
      setenv("HL_NUM_THREADS", v, 1);
    }
    else if (a == "--help" || a == "-h") {
      std::printf("usage: %s --data FILE [--steps N] [--seed S] [--metrics FILE]\n"
                  "          [--checkpoint DIR [--resume]] [--val-fraction F]\n"
                  "          [--eval-every N] [--eval-batches B]\n"
                  "          [--sample N [--prompt TEXT] [--temperature T] [--top-k K]]\n"
                  "          [--threads N] [--no-progress] [--ranks N] [--comm-timeout S]\n"
                  "  --data       raw text (one token per byte) or a .bin file of uint16 tokens\n"
                  "  --sample N   generate N tokens after training, from --prompt (text;\n"
                  "               comma-separated token ids for .bin data; default: newline)\n"
                  "  --ranks N    ranks of a binary compiled with moec --ranks run as threads\n"
                  "               (the compiled grid; under mpirun, one rank per process)\n",
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

/// The reference interpreter's initialisation, element for element: the
/// full tensors are drawn in order on every rank, and a shard keeps its
/// block (ep rank `epIndex`), so every grid starts from the same model.
void initialise(std::vector<moert::AlignedFloats> &params, uint64_t seed, int epIndex) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < moec_program.num_params; ++i) {
    const moert_param_info &p = moec_program.params[i];
    std::normal_distribution<double> normal(0.0, p.scale > 0 ? p.scale : 1.0);
    std::uniform_real_distribution<double> uniform(-p.scale, p.scale);
    size_t n = params[i].size(), parts = std::max(p.shard_parts, 1);
    size_t mine = parts > 1 ? static_cast<size_t>(epIndex) : 0;
    for (size_t j = 0; j < n * parts; ++j) {
      float v;
      switch (p.init) {
      case MOERT_INIT_ZEROS: v = 0; break;
      case MOERT_INIT_ONES: v = 1; break;
      case MOERT_INIT_NORMAL: v = static_cast<float>(normal(rng)); break;
      default: v = static_cast<float>(uniform(rng)); break;
      }
      if (j / n == mine)
        params[i][j % n] = v;
    }
  }
}

/// Resident bytes now (Linux /proc; 0 where unavailable).
long long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(statm >> size >> resident))
    return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

/// The prompt as token ids: bytes of text, or comma-separated ids for
/// token (.bin) data.
std::vector<int32_t> promptTokens(const Options &o, const moert::TokenStream &data,
                                  int64_t vocab) {
  std::vector<int32_t> ids;
  std::string text = o.hasPrompt ? o.prompt : data.wide ? "0" : "\n";
  if (!data.wide) {
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
int32_t drawToken(const float *logits, int64_t vocab, double temperature,
                  long long topK, std::mt19937_64 &rng) {
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

/// One terminal line, redrawn in place.
void drawProgress(long long done, long long total, float loss, double tps,
                  double elapsed) {
  const int width = 28;
  int filled = static_cast<int>(width * done / std::max(1LL, total));
  std::string bar(filled, '#');
  bar.resize(width, '.');
  double eta = done > 0 ? elapsed / done * (total - done) : 0;
  std::printf("\r\033[K[%s] %lld/%lld  loss %.4f  %.0f tok/s  eta %.0fs", bar.c_str(),
              done, total, loss, tps, eta);
  std::fflush(stdout);
}

/// What every rank reads: the options and the corpus.
struct Shared {
  const Options &o;
  const moert::TokenStream &data;
  size_t split;
  uint64_t seed;
  long long startResident;
};

} // namespace

/// The training loop of one rank (all of it on one rank).
static int trainRank(const Shared &sh, moert_comm *comm) {
  const Options &o = sh.o;
  const moert_program &prog = moec_program;
  const moert::TokenStream &data = sh.data;
  uint64_t seed = sh.seed;
  size_t split = sh.split;
  std::string error;
  int rank = comm ? moert_comm_rank(comm) : 0;
  int ranks = comm ? moert_comm_size(comm) : 1;
  int tp = std::max(prog.grid_tp, 1), ep = std::max(prog.grid_ep, 1);
  int replica = rank / tp, replicas = ranks / tp, epIndex = replica % ep;
  bool lead = rank == 0;
  // Every rank draws the global batch (the same windows) and keeps its
  // replica's rows.
  int64_t globalBatch = prog.batch * replicas;
  moert::BatchSampler sampler(data, 0, split, globalBatch, prog.seq_len, seed);
  std::vector<moert::AlignedFloats> params(prog.num_params), moments(2 * prog.num_params);
  for (int i = 0; i < prog.num_params; ++i) {
    params[i].resize(numel(prog.params[i]));
    if (prog.params[i].adamw) {
      moments[2 * i].assign(params[i].size(), 0.0f);
      moments[2 * i + 1].assign(params[i].size(), 0.0f);
    }
  }
  initialise(params, seed, epIndex);
  long long firstStep = 0;
  moert::CodecStates restoredCodec; // filled by --resume
  if (o.resume) {
    moert::TensorMap tensors;
    nlohmann::json state;
    if (!moert::loadCheckpoint(o.checkpoint, tensors, state, error))
      die(error);
    for (int i = 0; i < prog.num_params; ++i) {
      std::string name = prog.params[i].name;
      for (auto [suffix, target] :
           {std::pair<std::string, moert::AlignedFloats *>{"", &params[i]},
            {".adam_m", &moments[2 * i]}, {".adam_v", &moments[2 * i + 1]}}) {
        if (target->empty())
          continue;
        // Checkpoints hold full tensors: a shard reads its block, so a run
        // resumes on any grid.
        size_t parts = std::max(prog.params[i].shard_parts, 1), n = target->size();
        size_t block = parts > 1 ? static_cast<size_t>(epIndex) : 0;
        auto it = tensors.find(name + suffix);
        if (it == tensors.end() || it->second.data.size() != n * parts)
          die(o.checkpoint + ": tensor '" + name + suffix +
              "' is missing or has another size than the model's");
        target->assign(it->second.data.begin() + block * n,
                       it->second.data.begin() + (block + 1) * n);
      }
    }
    // Codec state, when the checkpoint has it for this many ranks.
    bool codecSkipped = false;
    for (auto &[name, tensor] : tensors) {
      if (name.rfind("codec.", 0) != 0)
        continue;
      size_t dot = name.find('.', 6);
      std::string what = dot == std::string::npos ? "" : name.substr(dot + 1);
      if (tensor.shape.size() != 2 || tensor.shape[0] != ranks ||
          (what != "residual" && what != "q")) {
        codecSkipped = true;
        continue;
      }
      int site = std::atoi(name.substr(6, dot - 6).c_str());
      int64_t n = tensor.shape[1];
      std::vector<float> mine(tensor.data.begin() + rank * n,
                              tensor.data.begin() + (rank + 1) * n);
      moert::CodecState &codec = restoredCodec[site];
      (what == "residual" ? codec.residual : codec.q) = std::move(mine);
    }
    if (codecSkipped && lead)
      std::printf("note: %s holds codec state for another number of ranks; error "
                  "feedback restarts from zero\n", o.checkpoint.c_str());
    if (!state.contains("step") || !state["step"].is_number_integer() ||
        !state.contains("data_position"))
      die(o.checkpoint + "/state.json: needs step and data_position");
    firstStep = state["step"].get<long long>();
    sampler.setPosition(state["data_position"].get<uint64_t>());
    if (lead)
      std::printf("resumed from %s at step %lld\n", o.checkpoint.c_str(), firstStep);
  }

  std::vector<float *> paramPtrs, momentPtrs;
  for (auto &p : params)
    paramPtrs.push_back(p.data());
  for (auto &m : moments)
    momentPtrs.push_back(m.empty() ? nullptr : m.data());
  moert::AlignedBytes act(prog.activation_bytes + 64), grad(prog.gradient_bytes + 64);
  int totalExperts = 0;
  for (int l = 0; l < prog.num_moe_layers; ++l)
    totalExperts += prog.layer_experts[l];
  std::vector<int32_t> expertCounts(totalExperts, 0),
      droppedSlots(std::max(prog.num_moe_layers, 1), 0);
  moert_context ctx{paramPtrs.data(), momentPtrs.data(), act.data(), grad.data(),
                    expertCounts.data(), droppedSlots.data(), comm, rank, prog.grid_dp, prog.grid_ep,
                    prog.grid_tp, nullptr, {0, 0, 0, 0, 0, 0}, 0};
  if (!restoredCodec.empty())
    moert::codecStates(&ctx) = std::move(restoredCodec);
  auto commError = [&](const std::string &what) {
    die(what + (comm ? std::string(": ") + moert_comm_error(comm) : std::string()));
  };
  // A rank's rows of a global batch.
  auto mine = [&](const std::vector<int32_t> &global) {
    int64_t rows = prog.batch * prog.seq_len;
    return std::vector<int32_t>(global.begin() + replica * rows,
                                global.begin() + (replica + 1) * rows);
  };
  // Token-slots routed past an expert's capacity in the last step.
  auto droppedTokens = [&]() {
    long long dropped = 0;
    for (int32_t n : droppedSlots)
      dropped += n;
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
  if (!o.metrics.empty() && lead) {
    metrics = std::make_unique<std::ofstream>(o.metrics, std::ios::app);
    if (!*metrics)
      die(o.metrics + ": cannot open the metrics file for writing");
  }
  if (lead)
    std::printf("training: %d parameters tensors, batch %lld x %lld tokens, steps %lld..%lld\n",
                prog.num_params, (long long)globalBatch, (long long)prog.seq_len,
                firstStep, o.steps - 1);
  // Validation: the same windows of the held-out split at every evaluation.
  bool canEval = prog.eval_step && o.valFraction > 0;
  moert::BatchSampler valSampler(data, split, data.size(),
                                 globalBatch, prog.seq_len, seed + 1);
  if (canEval && !valSampler.valid(error))
    die(o.data + ": validation split: " + error +
        " (use more data or a larger --val-fraction)");
  bool bar = lead && o.progress && isatty(fileno(stdout));
  // Token batches are copied into aligned buffers for the kernels.
  moert::AlignedInts inA, tgA;
  auto aligned = [](const std::vector<int32_t> &v, moert::AlignedInts &out) {
    out.assign(v.begin(), v.end());
    return static_cast<const int32_t *>(out.data());
  };
  auto evaluate = [&](long long step) {
    valSampler.setPosition(0);
    std::vector<int32_t> in, tg;
    double total = 0;
    for (long long b = 0; b < o.evalBatches; ++b) {
      valSampler.next(in, tg);
      float loss = 0;
      if (prog.eval_step(&ctx, aligned(mine(in), inA), aligned(mine(tg), tgA), &loss,
                         nullptr) != 0)
        commError("evaluation failed in a kernel or collective");
      total += loss;
    }
    double mean = total / o.evalBatches;
    if (!lead)
      return mean;
    if (bar)
      std::printf("\r\033[K");
    std::printf("step %5lld  validation loss %.4f (%lld x %lld held-out tokens)\n",
                step, mean, (long long)o.evalBatches, tokensPerStepFor(prog) * replicas);
    if (metrics)
      *metrics << nlohmann::json({{"step", step}, {"val_loss", mean}}).dump() << "\n"
               << std::flush;
    return mean;
  };
  std::vector<int32_t> tokens, targets;
  long long tokensPerStep = globalBatch * prog.seq_len;
  auto runStart = std::chrono::steady_clock::now();
  int64_t lastSent[2] = {0, 0}, lastCodec[2] = {0, 0};
  for (long long s = firstStep; s < o.steps; ++s) {
    sampler.next(tokens, targets);
    float loss = 0;
    int64_t sentBefore[2] = {comm ? moert_comm_bytes(comm, MOERT_ALL_REDUCE) : 0,
                             comm ? moert_comm_bytes(comm, MOERT_ALL_TO_ALL) : 0};
    int64_t codecBefore[MOERT_NUM_COLLECTIVES + 1];
    std::copy(ctx.codec_sent, ctx.codec_sent + MOERT_NUM_COLLECTIVES, codecBefore);
    codecBefore[MOERT_NUM_COLLECTIVES] = ctx.codec_uncompressed;
    auto start = std::chrono::steady_clock::now();
    int rc = prog.train_step(&ctx, aligned(mine(tokens), inA), aligned(mine(targets), tgA),
                             static_cast<int32_t>(s), &loss);
    auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - start).count();
    if (rc != 0)
      commError("step " + std::to_string(s) + " failed in a kernel or collective (code " +
                std::to_string(rc) + ")");
    if (!std::isfinite(loss))
      die("step " + std::to_string(s) + ": the loss is not finite");
    double tps = tokensPerStep / seconds;
    // Bytes this rank sent in the step, per collective (Comm.h counters),
    // without what compressed all-reduces sent (reported on their own).
    int64_t codecBy[MOERT_NUM_COLLECTIVES], codecSent = 0;
    for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
      codecSent += codecBy[k] = ctx.codec_sent[k] - codecBefore[k];
    int64_t codecPlain = ctx.codec_uncompressed - codecBefore[MOERT_NUM_COLLECTIVES];
    int64_t sent[2] = {comm ? moert_comm_bytes(comm, MOERT_ALL_REDUCE) - sentBefore[0] -
                                  codecBy[MOERT_ALL_REDUCE]
                            : 0,
                       comm ? moert_comm_bytes(comm, MOERT_ALL_TO_ALL) - sentBefore[1] -
                                  codecBy[MOERT_ALL_TO_ALL]
                            : 0};
    lastSent[0] = sent[0];
    lastSent[1] = sent[1];
    // Compressed all-reduces: bytes sent, what uncompressed ones would have
    // sent, and the codecs' formula (nothing compressed in the warm-up).
    int64_t codecExpected = s < prog.codec_warmup_steps ? 0 : prog.step_codec_bytes;
    if (codecSent)
      lastCodec[0] = codecSent, lastCodec[1] = codecPlain;
    long long dropped = droppedTokens();
    if (ranks > 1) {
      // Load metrics over the whole batch: every replica's counts and drops.
      std::vector<float> load(expertCounts.begin(), expertCounts.end());
      load.push_back(static_cast<float>(dropped));
      if (moert_step_all_reduce(&ctx, load.data(), load.data(),
                                static_cast<int64_t>(load.size()),
                                MOERT_AXIS_DP | MOERT_AXIS_EP, 0, 1.0) != 0)
        commError("step " + std::to_string(s) + ": load metrics");
      for (size_t e = 0; e < expertCounts.size(); ++e)
        expertCounts[e] = static_cast<int32_t>(load[e]);
      dropped = static_cast<long long>(load.back());
    }
    if (lead) {
    if (bar)
      drawProgress(s + 1 - firstStep, o.steps - firstStep, loss, tps,
                   std::chrono::duration<double>(now - runStart).count());
    if (s == firstStep || (s + 1) % 10 == 0 || s + 1 == o.steps) {
      if (bar)
        std::printf("\r\033[K");
      if (!bar || s == firstStep || (s + 1) % 100 == 0 || s + 1 == o.steps)
        std::printf("step %5lld/%lld  loss %.4f  %.0f tok/s  dropped %lld\n", s + 1,
                    o.steps, loss, tps, dropped);
    }
    if (metrics)
      *metrics << nlohmann::json({{"step", s + 1},
                                  {"loss", loss},
                                  {"tokens_per_s", tps},
                                  {"dropped_tokens", dropped},
                                  {"comm_bytes", {{"all_reduce", sent[0]},
                                                  {"all_to_all", sent[1]}}},
                                  {"comm_bytes_analytical",
                                   {{"all_reduce", prog.step_comm_bytes[MOERT_ALL_REDUCE]},
                                    {"all_to_all", prog.step_comm_bytes[MOERT_ALL_TO_ALL]}}},
                                  {"comm_bytes_ragged_bound", prog.step_ragged_bound},
                                  {"codec_bytes", {{"sent", codecSent},
                                                   {"uncompressed", codecPlain},
                                                   {"expected", codecExpected}}},
                                  {"expert_tokens", expertTokens()}})
                      .dump()
               << "\n" << std::flush;
    }
    if (canEval && o.evalEvery > 0 && (s + 1) % o.evalEvery == 0 && s + 1 != o.steps)
      evaluate(s + 1);
  }
  if (bar)
    std::printf("\r\033[K");
  if (lead && ranks > 1 && firstStep < o.steps) {
    if (prog.step_ragged_bound > 0)
      std::printf("communication per step and rank: all_to_all %lld bytes (ragged: at most "
                  "%lld with every expert's capacity full), all_reduce %lld bytes "
                  "(analytical: %lld)\n",
                  (long long)lastSent[1],
                  (long long)(prog.step_ragged_bound + prog.step_comm_bytes[MOERT_ALL_TO_ALL]),
                  (long long)lastSent[0], (long long)prog.step_comm_bytes[MOERT_ALL_REDUCE]);
    else
      std::printf("communication per step and rank: all_to_all %lld bytes, all_reduce %lld "
                  "bytes (analytical: %lld, %lld)\n",
                  (long long)lastSent[1], (long long)lastSent[0],
                  (long long)prog.step_comm_bytes[MOERT_ALL_TO_ALL],
                  (long long)prog.step_comm_bytes[MOERT_ALL_REDUCE]);
  }
  if (lead && lastCodec[0] > 0)
    std::printf("compressed all-reduces: %lld bytes per step and rank instead of %lld "
                "(%.1fx less; the codecs' formula: %lld)\n",
                (long long)lastCodec[0], (long long)lastCodec[1],
                double(lastCodec[1]) / double(lastCodec[0]), (long long)prog.step_codec_bytes);
  if (canEval)
    evaluate(o.steps);
  if (o.sample > 0) {
    if (!prog.eval_step)
      die("--sample: this binary has no evaluation step to sample from");
    // Row 0 holds the context (the last seq_len tokens); positions after it
    // cannot influence it (causal attention) and come later in routing
    // priority. The other rows hold held-out text, so the experts see a
    // typical load.
    const std::vector<int32_t> prompt = promptTokens(o, data, prog.vocab);
    std::vector<int32_t> context = prompt, in, tg;
    std::mt19937_64 rng(seed + 2);
    moert::AlignedFloats logits(static_cast<size_t>(prog.batch * prog.seq_len * prog.vocab));
    bool heldOut = moert::BatchSampler(data, split, data.size(), globalBatch,
                                       prog.seq_len, seed + 3).valid(error);
    moert::BatchSampler filler(data, heldOut ? split : 0, data.size(), globalBatch,
                               prog.seq_len, seed + 3);
    filler.next(in, tg);
    std::string text;
    std::vector<int32_t> generated;
    for (long long i = 0; i < o.sample; ++i) {
      size_t n = std::min<size_t>(context.size(), static_cast<size_t>(prog.seq_len));
      std::copy(context.end() - n, context.end(), in.begin());
      std::fill(in.begin() + n, in.begin() + prog.seq_len, 0);
      float loss = 0;
      // Row 0 of the global batch is row 0 of rank 0: it draws the token
      // and tells the others.
      if (prog.eval_step(&ctx, aligned(mine(in), inA), aligned(mine(tg), tgA), &loss,
                         lead ? logits.data() : nullptr) != 0)
        commError("sampling failed in a kernel or collective");
      int32_t next = lead ? drawToken(logits.data() + (n - 1) * prog.vocab, prog.vocab,
                                      o.temperature, o.topK, rng)
                          : 0;
      if (ranks > 1) {
        std::vector<int32_t> all(ranks);
        int size = moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP,
                                    all.data());
        if (moert_broadcast(comm, &next, sizeof next, 0, all.data(), size) != 0)
          commError("sampling: broadcasting the next token");
      }
      context.push_back(next);
      generated.push_back(next);
    }
    if (lead) {
    std::printf("sample (%lld tokens, temperature %g%s):\n", o.sample, o.temperature,
                o.topK ? (", top-k " + std::to_string(o.topK)).c_str() : "");
    if (!data.wide) {
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
      *metrics << nlohmann::json({{"sample_prompt", prompt}, {"sample", generated}}).dump()
               << "\n" << std::flush;
    }
  }
  // Memory: the peak resident set against the plan's prediction. The plan
  // covers every tensor buffer and bounds the kernels' scratch; the corpus
  // (as stored) is added to it, and the process's resident size before
  // main (code, shared libraries) is the baseline. Ranks as threads share
  // one process: the report is for one-rank runs.
  if (ranks == 1) {
    long long planned = prog.activation_bytes + prog.gradient_bytes;
    for (int i = 0; i < prog.num_params; ++i)
      planned += numel(prog.params[i]) * 4 * (prog.params[i].adamw ? 3 : 1);
    long long scratch = moert_scratch_peak();
    long long dataBytes = static_cast<long long>(data.bytes());
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    long long peak = static_cast<long long>(usage.ru_maxrss) * 1024;
    long long grown = peak - sh.startResident;
    long long predicted = planned + prog.planned_scratch_bytes + dataBytes;
    std::printf("memory: peak resident %.1f MB = %.1f MB at start (code, libraries) + "
                "%.1f MB (%+.0f%% of the %.1f MB predicted: %.1f MB planned buffers, "
                "%.1f MB kernel scratch bound, %.1f MB data); kernel scratch peak "
                "%.1f MB\n",
                peak / 1e6, sh.startResident / 1e6, grown / 1e6,
                predicted ? 100.0 * (grown - predicted) / predicted : 0.0,
                predicted / 1e6, planned / 1e6, prog.planned_scratch_bytes / 1e6,
                dataBytes / 1e6, scratch / 1e6);
    if (metrics)
      *metrics << nlohmann::json({{"peak_rss_bytes", peak},
                                  {"start_rss_bytes", sh.startResident},
                                  {"planned_bytes", planned},
                                  {"planned_scratch_bytes", prog.planned_scratch_bytes},
                                  {"data_bytes", dataBytes},
                                  {"kernel_scratch_bytes", scratch}})
                      .dump()
               << "\n" << std::flush;
  }
  if (!o.checkpoint.empty()) {
    // Full tensors: expert shards are gathered over their ep group (in ep
    // order), so any grid can resume from the checkpoint.
    std::vector<int32_t> epGroup(ep);
    int epSize = moert_grid_group(&ctx, MOERT_AXIS_EP, epGroup.data());
    auto full = [&](const moert::AlignedFloats &local, int parts) {
      std::vector<float> out(local.size() * parts);
      if (parts == 1)
        std::copy(local.begin(), local.end(), out.begin());
      else if (moert_all_gather(comm, local.data(),
                                static_cast<int64_t>(local.size() * sizeof(float)),
                                out.data(), epGroup.data(), epSize) != 0)
        commError("checkpoint: gathering expert shards");
      return out;
    };
    moert::TensorMap tensors;
    for (int i = 0; i < prog.num_params; ++i) {
      const moert_param_info &p = prog.params[i];
      int parts = std::max(p.shard_parts, 1);
      std::vector<int64_t> shape(p.shape, p.shape + p.rank);
      shape[0] *= parts;
      tensors[p.name] = {shape, full(params[i], parts)};
      if (p.adamw) {
        tensors[std::string(p.name) + ".adam_m"] = {shape, full(moments[2 * i], parts)};
        tensors[std::string(p.name) + ".adam_v"] = {shape, full(moments[2 * i + 1], parts)};
      }
    }
    // Codec state (error-feedback residuals, PowerSGD's Q) differs per
    // rank: [ranks, n] tensors, so a resume on the same grid continues
    // exactly.
    if (ranks > 1 && ctx.codec_states) {
      std::vector<int32_t> everyone(ranks);
      int size = moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP,
                                  everyone.data());
      for (auto &[site, codec] : moert::codecStates(&ctx))
        for (auto [suffix, values] :
             {std::pair<const char *, std::vector<float> *>{"residual", &codec.residual},
              {"q", &codec.q}}) {
          if (values->empty())
            continue;
          std::vector<float> all(values->size() * ranks);
          if (moert_all_gather(comm, values->data(),
                               static_cast<int64_t>(values->size() * sizeof(float)),
                               all.data(), everyone.data(), size) != 0)
            commError("checkpoint: gathering codec state");
          tensors["codec." + std::to_string(site) + "." + suffix] = {
              {ranks, static_cast<int64_t>(values->size())}, all};
        }
    }
    nlohmann::json state = {{"step", o.steps}, {"data_position", sampler.position()},
                            {"seed", seed},
                            {"grid", {{"dp", prog.grid_dp}, {"ep", prog.grid_ep},
                                      {"tp", prog.grid_tp}}}};
    if (lead) {
      if (!moert::saveCheckpoint(o.checkpoint, tensors, state, error))
        die(error);
      std::printf("checkpoint written to %s\n", o.checkpoint.c_str());
    }
  }
  moert_codec_states_free(&ctx);
  return 0;
}

int main(int argc, char **argv) {
  long long startResident = residentBytes();
  if (moec_program.abi_version != MOERT_ABI_VERSION) {
    std::fprintf(stderr,
                 "error: this step program was emitted for runtime ABI %d, but the runtime "
                 "is ABI %d: recompile the model with this moec\n",
                 moec_program.abi_version, MOERT_ABI_VERSION);
    return 2;
  }
  // A fixed mmap threshold: large blocks (arenas, kernel scratch) map and
  // unmap exactly, instead of glibc's adaptive threshold moving freed scratch
  // onto a heap that fragments and never shrinks.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  // Kernel scratch is reused across steps within the compiler's bound.
  moert_scratch_set_limit(moec_program.planned_scratch_bytes *
                          std::max(1, moec_program.grid_dp * moec_program.grid_ep *
                                          moec_program.grid_tp));
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
  size_t split = moert::trainSplitEnd(data.size(), o.valFraction);
  {
    moert::BatchSampler check(data, 0, split, prog.batch, prog.seq_len, seed);
    if (!check.valid(error))
      die(o.data + ": " + error);
  }
  Shared shared{o, data, split, seed, startResident};
  int ranks = prog.grid_dp * prog.grid_ep * prog.grid_tp;
  if (o.ranks && o.ranks != ranks)
    die("--ranks " + std::to_string(o.ranks) + ": this binary was compiled for " +
        std::to_string(ranks) + (ranks == 1 ? " rank (dp " : " ranks (dp ") + std::to_string(prog.grid_dp) + " x ep " +
        std::to_string(prog.grid_ep) + "); recompile with moec --ranks");
  if (ranks <= 1)
    return trainRank(shared, nullptr);
  if (moert_mpi_launched && moert_mpi_launched()) {
    moert_comm *comm = moert_mpi_init(&argc, &argv, o.timeout);
    if (!comm)
      die("MPI initialisation failed");
    if (moert_comm_size(comm) != ranks)
      die("mpirun started " + std::to_string(moert_comm_size(comm)) +
          " processes; this binary was compiled for " + std::to_string(ranks) + " ranks");
    int rc = trainRank(shared, comm);
    moert_mpi_finalize(comm);
    return rc;
  }
  std::printf("ranks: %d threads (dp %d x ep %d)\n", ranks, prog.grid_dp, prog.grid_ep);
  return moert_run_threads(
             ranks, o.timeout,
             [](moert_comm *comm, void *user) {
               return trainRank(*static_cast<Shared *>(user), comm);
             },
             &shared) == 0
             ? 0
             : 1;
}
