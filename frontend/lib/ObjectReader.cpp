//===- ObjectReader.cpp - schema checks over one JSON object --------------===//

#include "moe/Frontend/ObjectReader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

using namespace moec::frontend;
using nlohmann::json;

static std::string formatNumber(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

static const char *typeName(const json &value) {
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::string:
    return "a string";
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  case json::value_t::number_float:
    return "a number";
  default:
    return "an integer";
  }
}

ObjectReader::ObjectReader(const JsonDoc &doc, DiagnosticList &diags, std::string pointer)
    : doc(doc), diags(diags), ptr(std::move(pointer)) {
  const json &root = doc.root();
  const json *value = &root;
  if (!ptr.empty()) {
    json::json_pointer jp(ptr);
    value = root.contains(jp) ? &root.at(jp) : nullptr;
  }
  if (!value)
    return;
  if (!value->is_object()) {
    diags.error(doc.file(), doc.valuePos(ptr),
                (ptr.empty() ? std::string("document") : ptr) + ": expected an object, got " +
                    typeName(*value));
    return;
  }
  object = value;
}

std::optional<int64_t> ObjectReader::layerIndex(const std::string &key, size_t i,
                                                int64_t numLayers) {
  std::string at = this->at(key) + "/" + std::to_string(i);
  const json &value = object->at(key).at(i);
  if (value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < numLayers)
    return value.get<int64_t>();
  diags.error(doc.file(), doc.valuePos(at),
              at + ": " + show(value) + " is not a layer index (allowed: 0 to " +
                  std::to_string(numLayers - 1) + ")");
  return std::nullopt;
}

std::string ObjectReader::show(const json &value) {
  std::string text = value.dump();
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return text;
}

bool ObjectReader::has(const std::string &key) const {
  return object && object->contains(key) && !(*object)[key].is_null();
}

bool ObjectReader::isNull(const std::string &key) const {
  return object && object->contains(key) && (*object)[key].is_null();
}

const json *ObjectReader::field(const std::string &key) {
  seen.insert(key);
  if (!object)
    return nullptr;
  auto it = object->find(key);
  return it == object->end() ? nullptr : &*it;
}

void ObjectReader::error(const std::string &key, const std::string &message) {
  diags.error(doc.file(), doc.valuePos(at(key)), at(key) + ": " + message);
}

void ObjectReader::typeError(const std::string &key, const char *expected) {
  const json *value = field(key);
  error(key, std::string("expected ") + expected + ", got " + (value ? show(*value) : "nothing"));
}

int64_t ObjectReader::getInt(const std::string &key, std::optional<int64_t> fallback, int64_t min,
                             int64_t max) {
  const json *value = field(key);
  if (!value || value->is_null()) {
    if (!fallback && object)
      diags.error(doc.file(), doc.valuePos(ptr),
                  at(key) + ": required field is missing (an integer in [" + std::to_string(min) +
                      ", " + std::to_string(max) + "])");
    return fallback.value_or(min);
  }
  bool integral = value->is_number_integer() ||
                  (value->is_number_float() && std::isfinite(value->get<double>()) &&
                   value->get<double>() == std::floor(value->get<double>()) &&
                   std::fabs(value->get<double>()) < 9e15);
  if (!integral) {
    typeError(key, "an integer");
    return fallback.value_or(min);
  }
  // Unsigned values above INT64_MAX and floats beyond it are out of range.
  if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(max)) {
    error(key, show(*value) + " is out of range (allowed: " + std::to_string(min) + " to " +
                   std::to_string(max) + ")");
    return fallback.value_or(min);
  }
  int64_t v =
      value->is_number_float() ? static_cast<int64_t>(value->get<double>()) : value->get<int64_t>();
  if (v < min || v > max) {
    error(key, show(*value) + " is out of range (allowed: " + std::to_string(min) + " to " +
                   std::to_string(max) + ")");
    return fallback.value_or(min);
  }
  return v;
}

double ObjectReader::getNumber(const std::string &key, std::optional<double> fallback, double min,
                               double max, bool minExclusive) {
  const json *value = field(key);
  if (!value || value->is_null()) {
    if (!fallback && object)
      diags.error(doc.file(), doc.valuePos(ptr),
                  at(key) + ": required field is missing (a number)");
    return fallback.value_or(min);
  }
  if (!value->is_number()) {
    typeError(key, "a number");
    return fallback.value_or(min);
  }
  double v = value->get<double>();
  bool below = minExclusive ? !(v > min) : !(v >= min);
  if (below || !(v <= max)) {
    error(key, show(*value) + " is out of range (allowed: " + (minExclusive ? "> " : ">= ") +
                   formatNumber(min) + " and <= " + formatNumber(max) + ")");
    return fallback.value_or(minExclusive ? max : min);
  }
  return v;
}

double ObjectReader::getPositiveF32(const std::string &key, std::optional<double> fallback,
                                    double max) {
  double v = getNumber(key, fallback, 0.0, max, /*minExclusive=*/true);
  if (v > 0 && v < std::numeric_limits<float>::min()) {
    error(key, show(*field(key)) + " is below the smallest normal f32 (" +
                   formatNumber(std::numeric_limits<float>::min()) +
                   "): the step would compute with 0");
    return fallback.value_or(max);
  }
  return v;
}

std::optional<double> ObjectReader::getOptionalNumber(const std::string &key, double min,
                                                      double max, bool minExclusive) {
  if (!has(key)) {
    field(key);
    return std::nullopt;
  }
  return getNumber(key, 0.0, min, max, minExclusive);
}

bool ObjectReader::getBool(const std::string &key, bool fallback) {
  const json *value = field(key);
  if (!value || value->is_null())
    return fallback;
  if (!value->is_boolean()) {
    typeError(key, "true or false");
    return fallback;
  }
  return value->get<bool>();
}

std::string ObjectReader::getString(const std::string &key, std::optional<std::string> fallback,
                                    const std::vector<std::string> &allowed) {
  const json *value = field(key);
  std::string choices;
  for (const std::string &a : allowed)
    choices += (choices.empty() ? "" : ", ") + a;
  if (!value || value->is_null()) {
    if (!fallback && object)
      diags.error(doc.file(), doc.valuePos(ptr),
                  at(key) + ": required field is missing" +
                      (choices.empty() ? "" : " (one of: " + choices + ")"));
    return fallback.value_or("");
  }
  if (!value->is_string()) {
    typeError(key, "a string");
    return fallback.value_or("");
  }
  std::string v = value->get<std::string>();
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    std::string hint = closestMatch(v, allowed);
    error(key, show(*value) + " is not allowed (allowed: " + choices + ")" +
                   (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
    return fallback.value_or(allowed.front());
  }
  return v;
}

void ObjectReader::finish(const std::vector<std::string> &known) {
  if (!object)
    return;
  std::vector<std::string> names =
      known.empty() ? std::vector<std::string>(seen.begin(), seen.end()) : known;
  for (auto it = object->begin(); it != object->end(); ++it) {
    if (seen.count(it.key()))
      continue;
    std::string hint = closestMatch(it.key(), names);
    diags.error(doc.file(), doc.keyPos(at(it.key())),
                at(it.key()) + ": unknown field" +
                    (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
  }
}

std::vector<std::string> ObjectReader::unread() const {
  std::vector<std::string> names;
  if (object)
    for (auto it = object->begin(); it != object->end(); ++it)
      if (!seen.count(it.key()))
        names.push_back(it.key());
  return names;
}
