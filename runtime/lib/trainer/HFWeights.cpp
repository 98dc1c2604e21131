//===- HFWeights.cpp - HuggingFace weights in and out ---------------------===//

#include "HFWeights.h"
#include "HFNames.h"
#include "Shards.h"

#include "moert/HFCheckpoint.h"

#include "moe/Frontend/HFConfig.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

using namespace moert::trainer;
using moec::frontend::DiagnosticList;
using moec::frontend::JsonDoc;
using moec::frontend::ModelSpec;

namespace {

/// The model the binary was compiled for (moert_program.model_json).
struct CompiledModel {
  ModelSpec spec;
  nlohmann::json hfConfig; ///< null unless compiled from a config.json
};

CompiledModel compiledModel(const Rank &r, const std::string &flag) {
  if (!r.binary.model_json)
    die(flag + ": the binary holds no model description (it was compiled from IR without "
               "moe.model); compile it from a model JSON or a config.json");
  nlohmann::json model = nlohmann::json::parse(r.binary.model_json, nullptr, false);
  DiagnosticList diags;
  std::optional<ModelSpec> spec;
  if (model.is_object() && model.contains("spec"))
    if (std::unique_ptr<JsonDoc> doc = JsonDoc::parse("moe.model", model["spec"].dump(), diags))
      spec = moec::frontend::readModelJson(std::move(doc), diags);
  if (!spec)
    die(flag + ": the binary's model description does not read back: " + diags.str());
  return {*spec, model.value("hf_config", nlohmann::json())};
}

std::string join(const std::vector<std::string> &items, const std::string &separator) {
  std::string out;
  for (const std::string &item : items)
    out += (out.empty() ? "" : separator) + item;
  return out;
}

/// Imports `config` (from `where`) for the compiled model's training shape;
/// dies unless it describes `compiled` exactly, with a family that has
/// weight names. Returns its model_type.
std::string checkConfig(const Rank &r, const CompiledModel &compiled,
                        std::shared_ptr<const JsonDoc> doc, const std::string &where) {
  DiagnosticList diags;
  moec::frontend::HFImportOptions options;
  options.seqLen = r.prog.seq_len;
  options.batchSize = r.globalBatch;
  options.dtype = compiled.spec.dtype;
  std::vector<std::string> notModelled;
  options.notModelled = &notModelled;
  std::optional<ModelSpec> spec = moec::frontend::importHFConfig(doc, options, diags);
  if (!spec) {
    std::string errors;
    for (const auto &d : diags.all())
      if (d.kind == moec::frontend::Diagnostic::Kind::Error)
        errors += "\n" + d.str();
    die(where + " is not a config.json MoEC imports:" + errors);
  }
  std::string family = doc->root().value("model_type", "");
  if (!hasHFNames(family))
    die(where + ": MoEC has no weight names for model_type \"" + family +
        "\" (it has for mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3)");
  if (!notModelled.empty())
    die(where + ": MoEC does not reproduce this " + family +
        " model exactly, so its weights would compute another function: " +
        join(notModelled, "; "));
  std::vector<std::string> differences =
      moec::frontend::architectureDifferences(compiled.spec, *spec);
  if (!differences.empty())
    die(where + " describes another model than the one this binary was compiled for (" +
        join(differences, "; ") + "); compile the config with moec");
  return family;
}

/// The part of a full tensor one rank needs: [lo, hi) in each dimension
/// (its tensor-parallel slice; every expert row of a stacked tensor, the
/// rows themselves chosen apart).
struct Box {
  std::vector<int64_t> lo, hi;
};

Box boxOf(const Rank &r, int i, const std::vector<int64_t> &shape) {
  const moert_param_info &p = r.prog.params[i];
  Box box{std::vector<int64_t>(shape.size(), 0), shape};
  if (p.tp_dim >= 0 && p.tp_dim < static_cast<int>(shape.size())) {
    int64_t extent = p.shape[p.tp_dim], t = r.rank % r.tp;
    box.lo[p.tp_dim] = t * extent;
    box.hi[p.tp_dim] = (t + 1) * extent;
  }
  return box;
}

/// Fills the box [lo, hi) of `dst` (row-major `shape`, at most 2-D) from
/// HF tensor `t`, its transpose when `transposed` (column j from HF row
/// rows[j] when `rows` is not empty): contiguous runs of the HF tensor only.
void readBox(moert::HFCheckpointReader &reader, const moert::HFTensor &t,
             const std::vector<int64_t> &shape, bool transposed, const std::vector<int64_t> &lo,
             const std::vector<int64_t> &hi, float *dst, const std::vector<int64_t> &rows = {}) {
  if (shape.size() == 1) {
    reader.read(t, lo[0], hi[0] - lo[0], dst + lo[0]);
    return;
  }
  if (shape.size() != 2) { // (no such parameter today) the whole tensor
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    reader.read(t, 0, n, dst);
    return;
  }
  int64_t a = shape[0], b = shape[1];
  if (!transposed) {
    for (int64_t row = lo[0]; row < hi[0]; ++row)
      reader.read(t, row * b + lo[1], hi[1] - lo[1], dst + row * b + lo[1]);
    return;
  }
  // MoEC [a, b] from HF [b, a]: HF rows lo[1]..hi[1], columns lo[0]..hi[0].
  std::vector<float> run(static_cast<size_t>(hi[0] - lo[0]));
  for (int64_t j = lo[1]; j < hi[1]; ++j) {
    int64_t hfRow = rows.empty() ? j : rows[static_cast<size_t>(j)];
    reader.read(t, hfRow * a + lo[0], hi[0] - lo[0], run.data());
    for (int64_t row = lo[0]; row < hi[0]; ++row)
      dst[row * b + j] = run[row - lo[0]];
  }
}

/// `out` (the full tensor, row-major `shape`) from the HF tensors of
/// `source`, within `box` only (elsewhere zero), and of a stacked tensor
/// only the rows in `rows` (a rank's experts).
void assemble(moert::HFCheckpointReader &reader, const HFSource &source,
              const std::vector<int64_t> &shape, const Box &box, const std::set<int64_t> &rows,
              std::vector<float> &out) {
  if (!source.stacked) {
    readBox(reader, *reader.find(source.names[0]), shape, source.transposed, box.lo, box.hi,
            out.data(), source.rows);
    return;
  }
  std::vector<int64_t> piece(shape.begin() + 1, shape.end());
  std::vector<int64_t> lo(box.lo.begin() + 1, box.lo.end()), hi(box.hi.begin() + 1, box.hi.end());
  int64_t size = static_cast<int64_t>(out.size()) / shape[0];
  for (int64_t k = 0; k < shape[0]; ++k)
    if (rows.count(k) && k >= box.lo[0] && k < box.hi[0])
      readBox(reader, *reader.find(source.names[k]), piece, source.transposed, lo, hi,
              out.data() + k * size);
}

/// The HF shape of piece `k` of `source` for the MoEC full tensor `shape`.
std::vector<int64_t> hfShape(const HFSource &source, std::vector<int64_t> shape) {
  if (!source.rows.empty()) // some rows of an HF [rows, in] tensor
    return {source.hfRows, shape[0]};
  if (source.stacked)
    shape.erase(shape.begin());
  if (source.transposed && shape.size() == 2)
    std::swap(shape[0], shape[1]);
  return shape;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// The HF tensors of every parameter, checked against the checkpoint: each
/// present with its shape, and none left over.
std::vector<HFSource> matchTensors(const Rank &r, const moert::HFCheckpointReader &reader,
                                   const std::string &family, const ModelSpec &spec, bool tied,
                                   const std::string &dir) {
  std::vector<HFSource> sources;
  std::set<std::string> used;
  for (int i = 0; i < r.prog.num_params; ++i) {
    std::string name = r.prog.params[i].name;
    std::vector<int64_t> shape = fullShape(r, i);
    std::optional<HFSource> source = hfSourceOf(family, name, shape, spec);
    if (!source)
      die(dir + ": MoEC parameter '" + name + "' has no tensor in " + family + " checkpoints");
    if (name == "lm_head" && !reader.find(source->names[0]) && tied)
      source->names[0] = "model.embed_tokens.weight"; // tie_word_embeddings
    std::vector<int64_t> want = hfShape(*source, shape);
    for (const std::string &hf : source->names) {
      const moert::HFTensor *t = reader.find(hf);
      if (!t)
        die(dir + ": tensor '" + hf + "' (for MoEC's " + name + ") is missing");
      if (t->shape != want)
        die(dir + ": tensor '" + hf + "' has shape " + shapeText(t->shape) + ", the model needs " +
            shapeText(want) + " (for MoEC's " + name + ")");
      used.insert(hf);
    }
    sources.push_back(std::move(*source));
  }
  for (const auto &[name, t] : reader.tensors())
    if (!used.count(name) && !isHFBuffer(name))
      die(dir + ": tensor '" + name + "' (" + t.file +
          ") is not part of the model this binary was compiled for");
  return sources;
}

/// Megabytes, one decimal.
std::string mb(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1e6);
  return text;
}

} // namespace

void moert::trainer::loadHFWeights(Rank &r) {
  const std::string &dir = r.o.initHF;
  CompiledModel compiled = compiledModel(r, "--init-hf");
  DiagnosticList diags;
  std::string configPath = dir + "/config.json";
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(configPath, diags);
  if (!doc)
    die(diags.str());
  std::string family = checkConfig(r, compiled, doc, configPath);
  moert::HFCheckpointReader reader;
  std::string error;
  if (!reader.open(dir, error))
    die(error);
  bool tied = doc->root().value("tie_word_embeddings", false);
  std::vector<HFSource> sources = matchTensors(r, reader, family, compiled.spec, tied, dir);
  for (int i = 0; i < r.prog.num_params; ++i) {
    const moert_param_info &p = r.prog.params[i];
    std::vector<int64_t> shape = fullShape(r, i);
    int64_t total = 1;
    for (int64_t d : shape)
      total *= d;
    std::vector<int64_t> mine = r.rowsOf(i, r.epIndex);
    std::set<int64_t> rows(mine.begin(), mine.end());
    std::vector<float> full(static_cast<size_t>(total), 0.0f);
    assemble(reader, sources[i], shape, boxOf(r, i, shape), rows, full);
    moert::AlignedFloats block(static_cast<size_t>(numel(p) * (p.tp_dim >= 0 ? r.tp : 1)));
    keepRows(r, full.data(), block, i);
    if (p.tp_dim >= 0) {
      moert::AlignedFloats slice(static_cast<size_t>(numel(p)));
      sliceTp(r, block.data(), slice, i);
      block = std::move(slice);
    }
    std::copy(block.begin(), block.end(), r.params[i].begin());
  }
  // What each rank read, for the lead to print (every rank, in rank order).
  std::vector<int32_t> everyone(static_cast<size_t>(r.ranks));
  for (int k = 0; k < r.ranks; ++k)
    everyone[k] = k;
  double mine = static_cast<double>(reader.bytesRead());
  std::vector<double> read(static_cast<size_t>(r.ranks), mine);
  if (r.ranks > 1 &&
      moert_all_gather(r.comm, &mine, sizeof(double), read.data(), everyone.data(), r.ranks) != 0)
    r.commError("--init-hf: gathering the bytes each rank read");
  if (!r.lead)
    return;
  std::vector<std::string> perRank;
  double total = static_cast<double>(std::max<uint64_t>(reader.totalBytes(), 1));
  for (double bytes : read)
    perRank.push_back(std::to_string(static_cast<int>(100.0 * bytes / total + 0.5)) + "%");
  std::printf("initialised from %s (%s, %zu tensors, %s MB); each rank read %s of it\n",
              dir.c_str(), family.c_str(), reader.tensors().size(), mb(reader.totalBytes()).c_str(),
              join(perRank, " ").c_str());
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

namespace {

/// A Mixtral config.json for a model compiled from MoEC's JSON.
nlohmann::json mixtralConfig(const ModelSpec &s) {
  const moec::frontend::MoESettings &m =
      s.layers.empty() ? moec::frontend::MoESettings() : s.layers.front().moe;
  nlohmann::json c = {{"model_type", "mixtral"},
                      {"architectures", {"MixtralForCausalLM"}},
                      {"vocab_size", s.vocabSize},
                      {"hidden_size", s.dModel},
                      {"intermediate_size", m.expertFfnDim},
                      {"num_hidden_layers", s.layers.size()},
                      {"num_attention_heads", s.numHeads},
                      {"num_key_value_heads", s.numKvHeads},
                      {"head_dim", s.headDim},
                      {"num_local_experts", m.numExperts},
                      {"num_experts_per_tok", m.topK},
                      {"router_aux_loss_coef", m.auxLossCoef},
                      {"rms_norm_eps", s.normEps},
                      {"rope_theta", s.ropeTheta ? *s.ropeTheta : 0.0},
                      {"max_position_embeddings", s.seqLen},
                      {"initializer_range", s.initStd},
                      {"hidden_act", "silu"}};
  if (!s.ropeTheta)
    c.erase("rope_theta");
  return c;
}

/// --export-dtype; else the torch_dtype of the config.json the model came
/// from (its published precision); else the model's.
moert::HFDtype exportDtype(const Rank &r, const CompiledModel &model) {
  std::string name = r.o.exportDtype;
  if (name.empty() && model.hfConfig.is_object()) {
    std::string torch = model.hfConfig.value("torch_dtype", "");
    name = torch == "bfloat16"  ? "bf16"
           : torch == "float16" ? "f16"
           : torch == "float32" ? "f32"
                                : "";
  }
  if (name.empty())
    name = model.spec.dtype;
  return name == "bf16"  ? moert::HFDtype::BF16
         : name == "f16" ? moert::HFDtype::F16
                         : moert::HFDtype::F32;
}

} // namespace

/// Before any step: the export has a family that holds the model exactly.
void HFExport::configure() {
  if (r.o.exportHF.empty())
    return;
  CompiledModel compiled = compiledModel(r, "--export-hf");
  config = compiled.hfConfig.is_object() ? compiled.hfConfig : mixtralConfig(compiled.spec);
  std::string where = compiled.hfConfig.is_object()
                          ? "--export-hf: the config.json this binary was compiled from"
                          : "--export-hf: as a HuggingFace mixtral model, the model";
  DiagnosticList diags;
  std::unique_ptr<JsonDoc> doc = JsonDoc::parse("config.json", config.dump(), diags);
  if (!doc)
    die(where + ": " + diags.str());
  family = checkConfig(r, compiled, std::move(doc), where);
  dtype = exportDtype(r, compiled);
  spec = compiled.spec;
}

void HFExport::onFinish(const RunEnd &end) {
  if (r.o.exportHF.empty())
    return;
  if (end.stopped) {
    if (r.lead)
      std::printf("stopped: nothing exported to %s\n", r.o.exportHF.c_str());
    return;
  }
  write();
}

void HFExport::withoutTraining() {
  if (!r.o.exportHF.empty())
    write();
}

/// Every rank gathers the full tensors; the lead writes them and config.json.
void HFExport::write() {
  r.deviceSync();
  std::vector<moert::HFTensorOut> out;
  std::map<std::string, size_t> fused; // HF tensors several parameters fill
  for (int i = 0; i < r.prog.num_params; ++i) {
    std::vector<float> full = gatherParameter(r, i);
    if (!r.lead)
      continue;
    std::vector<int64_t> shape = fullShape(r, i);
    std::optional<HFSource> source = hfSourceOf(family, r.prog.params[i].name, shape, spec);
    std::vector<int64_t> piece = hfShape(*source, shape);
    if (!source->rows.empty()) { // HF [hfRows, in] rows from MoEC [in, out] columns
      auto [it, fresh] = fused.insert({source->names[0], out.size()});
      if (fresh)
        out.push_back({source->names[0], piece,
                       std::vector<float>(static_cast<size_t>(piece[0] * piece[1]), 0.0f)});
      std::vector<float> &data = out[it->second].data;
      for (int64_t o = 0; o < shape[1]; ++o)
        for (int64_t in = 0; in < shape[0]; ++in)
          data[source->rows[o] * shape[0] + in] = full[in * shape[1] + o];
      continue;
    }
    int64_t size = 1;
    for (int64_t d : piece)
      size *= d;
    for (size_t k = 0; k < source->names.size(); ++k) {
      const float *src = full.data() + static_cast<int64_t>(k) * size;
      moert::HFTensorOut t{source->names[k], piece, std::vector<float>(src, src + size)};
      if (source->transposed && piece.size() == 2) // HF [b, a] from MoEC [a, b]
        for (int64_t i2 = 0; i2 < piece[1]; ++i2)
          for (int64_t j = 0; j < piece[0]; ++j)
            t.data[j * piece[1] + i2] = src[i2 * piece[0] + j];
      out.push_back(std::move(t));
    }
  }
  if (!r.lead)
    return;
  std::string error;
  uint64_t shard = static_cast<uint64_t>(r.o.exportShardMB) * 1000000;
  if (!moert::writeHFCheckpoint(r.o.exportHF, out, dtype, shard, error))
    die("--export-hf: " + error);
  nlohmann::json c = config;
  c["torch_dtype"] = moert::torchName(dtype);
  c["tie_word_embeddings"] = false; // MoEC trains lm_head apart from the embedding
  if (!moert::writeFileAtomic(r.o.exportHF + "/config.json", c.dump(2) + "\n", error))
    die("--export-hf: " + error);
  uint64_t bytes = 0;
  for (const auto &t : out)
    bytes += t.data.size() * moert::bytesOf(dtype);
  std::printf("exported to %s (%s, %zu tensors in %s, %s MB)\n", r.o.exportHF.c_str(),
              family.c_str(), out.size(), moert::torchName(dtype), mb(bytes).c_str());
}
