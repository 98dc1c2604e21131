//===- HFFuzzer.cpp - libFuzzer target: the HuggingFace config importer ---===//
//
// Bytes as a HuggingFace config.json (`moec --hf`, `moe-translate
// --import-hf-config`), imported with the default sequence length (from
// max_position_embeddings) or a given one, then checked as a model.
//
//===----------------------------------------------------------------------===//

#include "FuzzJson.h"

#include "moe/Frontend/HFConfig.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::shared_ptr<const JsonDoc> doc = moec::fuzz::parseJson("config.json", data, size);
  if (!doc)
    return 0;
  HFImportOptions options;
  // The input's length picks the import options, so both paths are fuzzed.
  options.seqLen = size % 2 ? 0 : 64;
  options.batchSize = size % 3 + 1;
  DiagnosticList diags;
  moec::fuzz::acceptedModel(importHFConfig(doc, options, diags), diags, "importHFConfig");
  return 0;
}
