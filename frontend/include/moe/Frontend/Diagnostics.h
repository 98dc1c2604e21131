//===- Diagnostics.h - errors and warnings of the frontend ------*- C++ -*-===//
//
// The frontend's readers are plain C++ (no MLIR), so the runtime and the fuzz
// harness can use them; they report into a DiagnosticList that tools print as
// `file:line:col: error: /json/pointer: message`.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_DIAGNOSTICS_H
#define MOE_FRONTEND_DIAGNOSTICS_H

#include <string>
#include <vector>

namespace moec::frontend {

/// A 1-based position in a source file; line 0 means "unknown".
struct SourcePos {
  unsigned line = 0;
  unsigned col = 0;
};

struct Diagnostic {
  enum class Kind { Error, Warning };
  Kind kind = Kind::Error;
  std::string file;
  SourcePos pos;
  std::string message;

  /// `file:line:col: error: message`.
  std::string str() const;
};

class DiagnosticList {
public:
  void error(const std::string &file, SourcePos pos, std::string message);
  void warning(const std::string &file, SourcePos pos, std::string message);

  bool hasErrors() const { return numErrors > 0; }
  size_t errorCount() const { return static_cast<size_t>(numErrors); }
  const std::vector<Diagnostic> &all() const { return list; }
  /// Every diagnostic, one per line.
  std::string str() const;
  /// The same list with every warning an error, marked `[-Werror]`.
  DiagnosticList warningsAsErrors() const;

private:
  std::vector<Diagnostic> list;
  unsigned numErrors = 0;
};

/// The closest of `candidates` to `word` by edit distance, or "" when none is
/// close enough to be a likely typo.
std::string closestMatch(const std::string &word, const std::vector<std::string> &candidates);

} // namespace moec::frontend

#endif // MOE_FRONTEND_DIAGNOSTICS_H
