//===- JsonDoc.h - JSON with source positions -------------------*- C++ -*-===//
//
// nlohmann/json parses; JsonDoc adds what it lacks: the line and column where
// every value and key starts, addressed by JSON pointer, so that errors and
// MLIR locations point at the element a user wrote. It also rejects duplicate
// keys, which nlohmann would silently collapse.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_JSONDOC_H
#define MOE_FRONTEND_JSONDOC_H

#include "moe/Frontend/Diagnostics.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

namespace moec::frontend {

class JsonDoc {
public:
  /// Limits on what a description may be: arrays and objects nested at
  /// most this deep (a model or cluster file needs a handful of levels), and
  /// at most this many bytes. Both are errors with a position, not a crash.
  static constexpr size_t kMaxDepth = 64;
  static constexpr long long kMaxBytes = 64ll << 20;

  /// Parses `text` read from `file`. On a syntax error, a duplicate key or a
  /// number out of range, reports it with its position and returns null.
  static std::unique_ptr<JsonDoc> parse(std::string file, const std::string &text,
                                        DiagnosticList &diags);

  /// Reads and parses `path`; an unreadable file, one that is not a regular
  /// file (a directory, a FIFO) and one over kMaxBytes are errors.
  static std::unique_ptr<JsonDoc> load(const std::string &path, DiagnosticList &diags);

  const nlohmann::json &root() const { return rootValue; }
  const std::string &file() const { return fileName; }

  /// Where the value at `pointer` starts (its nearest existing ancestor when
  /// the pointer names nothing, e.g. a missing field).
  SourcePos valuePos(const std::string &pointer) const;
  /// Where the key of the member at `pointer` starts (its value position for
  /// array elements and the root).
  SourcePos keyPos(const std::string &pointer) const;

  /// A copy whose root object has `members` set (added or replaced): the
  /// other values keep their positions; a set member points at its key in
  /// this document when it had one, else at the root.
  std::unique_ptr<JsonDoc> withMembers(const nlohmann::json &members) const;

  /// `pointer` + "/" + escaped `key` (RFC 6901).
  static std::string child(const std::string &pointer, const std::string &key);

private:
  struct Entry {
    SourcePos key, value;
  };
  std::string fileName;
  nlohmann::json rootValue;
  std::map<std::string, Entry> positions;

  friend class PositionScanner;
};

} // namespace moec::frontend

#endif // MOE_FRONTEND_JSONDOC_H
