//===- RefTrain.cpp - the reference interpreter as a trainer --------------===//
//
//   moe-ref-train model.json --data FILE --steps N [--seed S] [--val-fraction F]
//                 [--routing-groups G] [--dump DIR]
//
// Runs the same training as a binary built by moec -- same parameter
// initialisation, same batches, the learning-rate schedule fitted to the
// run as the binary's default -- in the reference interpreter (double
// precision), and prints {"step": s, "loss": l} per step: the oracle the
// driver tests compare generated binaries against. --dump DIR writes what an
// independent reference needs to recompute the first step's loss:
// DIR/params.safetensors (the initial parameters, rounded to f32, which the
// run then uses) and DIR/step1.json (the first batch's tokens and targets,
// its shape, and the loss the interpreter computed from them). With more
// than one step it writes the same for every later step K:
// DIR/params-stepK.safetensors, the parameters step K starts from (after
// the previous steps' updates, router biases included), exactly (F64, not
// rounded: the run goes on with them), and DIR/stepK.json.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"

#include "moe/Frontend/ModelToMLIR.h"
#include "moe/InitAllDialects.h"
#include "moe/Transforms/Pipelines.h"
#include "moert/Checkpoint.h"
#include "moert/Data.h"
#include "moec/contract/Abi.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>

using namespace moec::frontend;

/// A safetensors file of `params` in F64: what the interpreter holds,
/// exactly (moert's checkpoints are F32 only).
static std::string encodeF64(const std::map<std::string, moec::reference::Tensor> &params) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto &[name, t] : params) {
    uint64_t bytes = t.data.size() * sizeof(double);
    header[name] = {{"dtype", "F64"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  for (const auto &[name, t] : params)
    out.append(reinterpret_cast<const char *>(t.data.data()), t.data.size() * sizeof(double));
  return out;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: moe-ref-train model.json --data FILE --steps N [--seed S] [--routing-groups G]\n");
    return 2;
  }
  std::string model = argv[1], data, dump;
  long steps = 1, seed = -1, groups = 0;
  double valFraction = 0.1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--data")
      data = argv[i + 1];
    else if (flag == "--steps")
      steps = std::atol(argv[i + 1]);
    else if (flag == "--seed")
      seed = std::atol(argv[i + 1]);
    else if (flag == "--val-fraction")
      valFraction = std::atof(argv[i + 1]);
    else if (flag == "--routing-groups")
      groups = std::atol(argv[i + 1]);
    else if (flag == "--dump")
      dump = argv[i + 1];
  }
  DiagnosticList diags;
  std::optional<ModelSpec> spec;
  if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(model, diags))
    spec = readModelJson(doc, diags);
  if (!spec) {
    std::fprintf(stderr, "%s", diags.str().c_str());
    return 1;
  }
  // The training binary's default: the schedule fitted to the run.
  spec->optimizer.warmupSteps =
      moert_fit_warmup(spec->optimizer.warmupSteps, spec->optimizer.totalSteps, steps);
  spec->optimizer.totalSteps = std::max<int64_t>(steps, spec->optimizer.warmupSteps);
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = buildModule(*spec, context);
  mlir::PassManager pm(&context);
  mlir::moe::TrainPipelineOptions options;
  options.lower = false; // the interpreter runs the ops themselves
  options.routingGroups = groups;
  mlir::moe::buildTrainPipeline(pm, options);
  if (mlir::failed(pm.run(*module)))
    return 1;

  moert::TokenStream tokens;
  std::string error;
  if (!moert::loadTokens(data, moert::DataFormat::Auto, tokens, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  uint64_t s = seed >= 0 ? static_cast<uint64_t>(seed) : spec->seed;
  size_t split = moert::trainSplitEnd(tokens.size(), valFraction);
  moert::BatchSampler sampler(tokens, 0, split, spec->batchSize, spec->seqLen, s);
  moec::reference::Interpreter interp(*module);
  interp.initParams(s);
  if (!dump.empty()) {
    moert::TensorMap params;
    for (auto &[name, t] : interp.params) {
      for (double &v : t.data)
        v = static_cast<float>(v);
      params[name] = {t.shape, std::vector<float>(t.data.begin(), t.data.end())};
    }
    ::mkdir(dump.c_str(), 0755);
    if (!moert::writeFileAtomic(dump + "/params.safetensors", moert::encodeSafetensors(params),
                                error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
  }
  std::vector<int32_t> in, tg;
  for (long step = 0; step < steps; ++step) {
    sampler.next(in, tg);
    std::string suffix = "step" + std::to_string(step + 1);
    if (!dump.empty() && step > 0 &&
        !moert::writeFileAtomic(dump + "/params-" + suffix + ".safetensors",
                                encodeF64(interp.params), error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    std::vector<moec::reference::Tensor> out;
    if (!interp.run("train_step",
                    {moec::reference::Tensor::ids({spec->batchSize, spec->seqLen}, in),
                     moec::reference::Tensor::ids({spec->batchSize, spec->seqLen}, tg),
                     moec::reference::Tensor::ids({}, {static_cast<int32_t>(step)})},
                    out, error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    nlohmann::json line = {{"step", step + 1},
                           {"loss", out[0].data[0]},
                           {"grad_norm", interp.lastGlobalNorm},
                           {"aux_loss", nlohmann::json::array()},
                           {"z_loss", nlohmann::json::array()}};
    for (auto [balance, z] : interp.lastRouterLosses) {
      line["aux_loss"].push_back(balance);
      line["z_loss"].push_back(z);
    }
    std::printf("%s\n", line.dump().c_str());
    if (!dump.empty()) {
      nlohmann::json batch = {{"batch_size", spec->batchSize},
                              {"seq_len", spec->seqLen},
                              {"tokens", in},
                              {"targets", tg},
                              {"loss", out[0].data[0]}};
      if (!moert::writeFileAtomic(dump + "/" + suffix + ".json", batch.dump() + "\n", error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
      }
    }
  }
  return 0;
}
