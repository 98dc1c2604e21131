//===- ObjectReader.h - schema checks over one JSON object ------*- C++ -*-===//
//
// Reads the fields of one JSON object with type and range checks, reporting
// each problem with its JSON pointer, the bad value and what is allowed, at
// the position of the element. finish() reports the fields nobody read as
// unknown, with a did-you-mean suggestion.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_OBJECTREADER_H
#define MOE_FRONTEND_OBJECTREADER_H

#include "moe/Frontend/JsonDoc.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace moec::frontend {

/// The largest model dimension (d_model, ffn and head sizes) a model file
/// may declare: 2^24, far beyond any model and small enough that products
/// of two dimensions stay exact in int64 and f32 shapes.
constexpr int64_t kMaxDim = int64_t(1) << 24;

class ObjectReader {
public:
  /// Reads the object at `pointer` of `doc`; reports an error (and reads
  /// nothing) when the value there is not an object.
  ObjectReader(const JsonDoc &doc, DiagnosticList &diags, std::string pointer);

  bool valid() const { return object != nullptr; }
  const std::string &pointer() const { return ptr; }
  bool has(const std::string &key) const;
  /// True when `key` is present with the value null.
  bool isNull(const std::string &key) const;
  /// Pointer of a field of this object.
  std::string at(const std::string &key) const { return JsonDoc::child(ptr, key); }

  /// Integer field in [min, max]; absent gives `fallback` (an error when
  /// `fallback` is nullopt, i.e. the field is required).
  int64_t getInt(const std::string &key, std::optional<int64_t> fallback, int64_t min, int64_t max);
  /// Number field in (0, max] that the IR stores as an f32 attribute whose
  /// op requires it > 0: a positive number below the smallest normal float
  /// (it would become 0 or a denormal in the step) is an error too.
  double getPositiveF32(const std::string &key, std::optional<double> fallback, double max);
  /// Number field in [min, max] (`minExclusive` makes the lower bound open).
  double getNumber(const std::string &key, std::optional<double> fallback, double min, double max,
                   bool minExclusive = false);
  /// Optional number: nullopt when absent or null.
  std::optional<double> getOptionalNumber(const std::string &key, double min, double max,
                                          bool minExclusive);
  bool getBool(const std::string &key, bool fallback);
  /// String field that must be one of `allowed` (any string when empty).
  std::string getString(const std::string &key, std::optional<std::string> fallback,
                        const std::vector<std::string> &allowed = {});
  /// Marks `key` as read without reading it (nested objects read elsewhere).
  void claim(const std::string &key) { seen.insert(key); }

  /// Error at a field's value.
  void error(const std::string &key, const std::string &message);
  /// Reports every field not read as unknown. `known` lists the accepted
  /// names for suggestions (defaults to those read).
  void finish(const std::vector<std::string> &known = {});

  /// Fields present in the object that nobody read, in document order.
  std::vector<std::string> unread() const;

  /// `value` as JSON text, shortened for messages.
  static std::string show(const nlohmann::json &value);

  /// Element `i` of the array at key `key`, read as a layer index in [0,
  /// numLayers); anything else is an error at its position.
  std::optional<int64_t> layerIndex(const std::string &key, size_t i, int64_t numLayers);

private:
  const nlohmann::json *field(const std::string &key);
  void typeError(const std::string &key, const char *expected);

  const JsonDoc &doc;
  DiagnosticList &diags;
  std::string ptr;
  const nlohmann::json *object = nullptr;
  std::set<std::string> seen;
};

} // namespace moec::frontend

#endif // MOE_FRONTEND_OBJECTREADER_H
