//===- FuzzJson.h - what the JSON fuzzers share ------------------*- C++ -*-===//
//
// The fuzzed bytes as a JSON document, and a model description read from
// it (by the MoEC or the HuggingFace reader) checked as the tools check it,
// each with the readers' contract (FuzzContract.h) enforced.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_FUZZ_FUZZJSON_H
#define MOEC_TEST_FUZZ_FUZZJSON_H

#include "FuzzContract.h"

#include "moe/Frontend/JsonDoc.h"
#include "moe/Frontend/ModelSpec.h"

#include <cstdint>
#include <memory>
#include <optional>

namespace moec::fuzz {

/// `data` parsed as the JSON file `name`, or null (with an error) when it
/// is not JSON.
inline std::shared_ptr<const frontend::JsonDoc> parseJson(const char *name, const uint8_t *data,
                                                          size_t size) {
  frontend::DiagnosticList diags;
  std::shared_ptr<const frontend::JsonDoc> doc = frontend::JsonDoc::parse(
      name, std::string(reinterpret_cast<const char *>(data), size), diags);
  checkReader(doc != nullptr, diags, "JsonDoc::parse");
  return doc;
}

/// What `reader` returned, checked with checkModelSpec as the tools do;
/// true when the tools would go on to build it (no error at all).
inline bool acceptedModel(const std::optional<frontend::ModelSpec> &spec,
                          frontend::DiagnosticList &diags, const char *reader) {
  checkReader(spec.has_value(), diags, reader);
  if (!spec)
    return false;
  checkModelSpec(*spec, diags);
  checkReader(true, diags, "checkModelSpec");
  return !diags.hasErrors();
}

} // namespace moec::fuzz

#endif // MOEC_TEST_FUZZ_FUZZJSON_H
