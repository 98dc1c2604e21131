//===- ClusterFuzzer.cpp - libFuzzer target: the cluster JSON reader ------===//
//
// Bytes as a cluster description (`moec --cluster`, `moe-translate
// --cluster`): nodes, device kinds, presets and links.
//
//===----------------------------------------------------------------------===//

#include "FuzzContract.h"

#include "moe/Frontend/ClusterSpec.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  DiagnosticList diags;
  std::shared_ptr<const JsonDoc> doc = JsonDoc::parse(
      "cluster.json", std::string(reinterpret_cast<const char *>(data), size), diags);
  moec::fuzz::checkReader(doc != nullptr, diags, "JsonDoc::parse");
  if (!doc)
    return 0;
  moec::fuzz::checkReader(readClusterJson(doc, diags).has_value(), diags, "readClusterJson");
  return 0;
}
