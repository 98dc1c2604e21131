//===- ClusterFuzzer.cpp - libFuzzer target: the cluster JSON reader ------===//
//
// Bytes as a cluster description (`moec --cluster`, `moe-translate
// --cluster`): nodes, device kinds, presets and links.
//
//===----------------------------------------------------------------------===//

#include "FuzzJson.h"

#include "moe/Frontend/ClusterSpec.h"

using namespace moec::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (std::shared_ptr<const JsonDoc> doc = moec::fuzz::parseJson("cluster.json", data, size)) {
    DiagnosticList diags;
    moec::fuzz::checkReader(readClusterJson(doc, diags).has_value(), diags, "readClusterJson");
  }
  return 0;
}
