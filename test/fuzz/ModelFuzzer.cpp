//===- ModelFuzzer.cpp - libFuzzer target: the model JSON reader ----------===//
//
// Bytes as a MoEC model description: JSON with positions, the schema reader
// and the consistency checks (what `moec MODEL.json` and
// `moe-translate --import-model` run first).
//
//===----------------------------------------------------------------------===//

#include "FuzzJson.h"

#include "moe/Frontend/ModelSpec.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (std::shared_ptr<const JsonDoc> doc = moec::fuzz::parseJson("fuzz.json", data, size)) {
    DiagnosticList diags;
    moec::fuzz::acceptedModel(readModelJson(doc, diags), diags, "readModelJson");
  }
  return 0;
}
