//===- ModelFuzzer.cpp - libFuzzer target: the model JSON reader ----------===//
//
// Bytes as a MoEC model description: JSON with positions, the schema reader
// and the consistency checks (what `moec MODEL.json` and
// `moe-translate --import-model` run first).
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"

#include "moe/Frontend/ModelSpec.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  DiagnosticList diags;
  std::shared_ptr<const JsonDoc> doc =
      JsonDoc::parse("fuzz.json", std::string(reinterpret_cast<const char *>(data), size), diags);
  moec::fuzz::checkReader(doc != nullptr, diags, "JsonDoc::parse");
  if (!doc)
    return 0;
  std::optional<ModelSpec> spec = readModelJson(doc, diags);
  moec::fuzz::checkReader(spec.has_value(), diags, "readModelJson");
  if (spec) {
    checkModelSpec(*spec, diags);
    moec::fuzz::checkReader(true, diags, "checkModelSpec");
  }
  return 0;
}
