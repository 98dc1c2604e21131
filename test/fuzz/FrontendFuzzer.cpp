//===- FrontendFuzzer.cpp - libFuzzer target over the JSON readers --------===//
//
// Feeds arbitrary bytes to every reader of user files: JSON with positions,
// the MoEC model schema, the HuggingFace importer, the cluster reader, and
// the runtime's safetensors checkpoint reader.
// Besides crashes, sanitizer reports and hangs, it checks the readers'
// contract: a reader that returns nothing has reported an error, and every
// error has a message.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ClusterSpec.h"
#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ModelSpec.h"
#include "moert/Checkpoint.h"

#include <cstdio>
#include <cstdlib>

using namespace moec::frontend;

static void check(bool ok, const DiagnosticList &diags, const char *reader) {
  if (!ok && !diags.hasErrors()) {
    std::fprintf(stderr, "%s rejected the input without an error\n", reader);
    std::abort();
  }
  for (const Diagnostic &d : diags.all())
    if (d.message.empty()) {
      std::fprintf(stderr, "%s reported an empty message\n", reader);
      std::abort();
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  {
    // The runtime's checkpoint reader takes the same bytes as a file.
    moert::TensorMap tensors;
    std::string error;
    if (!moert::decodeSafetensors(text, "fuzz.safetensors", tensors, error) && error.empty()) {
      std::fprintf(stderr, "decodeSafetensors failed without a message\n");
      std::abort();
    }
  }
  DiagnosticList parseDiags;
  std::shared_ptr<const JsonDoc> doc = JsonDoc::parse("fuzz.json", text, parseDiags);
  check(doc != nullptr, parseDiags, "JsonDoc::parse");
  if (!doc)
    return 0;
  {
    DiagnosticList diags;
    std::optional<ModelSpec> spec = readModelJson(doc, diags);
    check(spec.has_value(), diags, "readModelJson");
    if (spec)
      checkModelSpec(*spec, diags);
  }
  {
    DiagnosticList diags;
    HFImportOptions options;
    options.seqLen = 64;
    check(importHFConfig(doc, options, diags).has_value(), diags, "importHFConfig");
  }
  {
    DiagnosticList diags;
    check(readClusterJson(doc, diags).has_value(), diags, "readClusterJson");
  }
  return 0;
}
