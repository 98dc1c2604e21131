//===- HFFuzzer.cpp - libFuzzer target: the HuggingFace config importer ---===//
//
// Bytes as a HuggingFace config.json (`moec --hf`, `moe-translate
// --import-hf-config`), imported with the default sequence length (from
// max_position_embeddings) or a given one, then checked as a model.
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"

#include "moe/Frontend/HFConfig.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  DiagnosticList diags;
  std::shared_ptr<const JsonDoc> doc =
      JsonDoc::parse("config.json", std::string(reinterpret_cast<const char *>(data), size), diags);
  moec::fuzz::checkReader(doc != nullptr, diags, "JsonDoc::parse");
  if (!doc)
    return 0;
  HFImportOptions options;
  // The input's length picks the import options, so both paths are fuzzed.
  options.seqLen = size % 2 ? 0 : 64;
  options.batchSize = size % 3 + 1;
  std::optional<ModelSpec> spec = importHFConfig(doc, options, diags);
  moec::fuzz::checkReader(spec.has_value(), diags, "importHFConfig");
  if (spec) {
    checkModelSpec(*spec, diags);
    moec::fuzz::checkReader(true, diags, "checkModelSpec");
  }
  return 0;
}
