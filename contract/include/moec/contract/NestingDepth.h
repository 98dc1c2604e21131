//===- NestingDepth.h - how deep a text nests, without recursion -*- C++ -*-===//
//
// Parsers that recurse once per nested bracket overflow their stack on
// input nested deep enough: nlohmann/json's dump and comparison (and the
// frontend's position scanner) after a million levels, MLIR's parser after
// a few tens of thousands of `(` (found by the fuzzers). Every reader of
// user text scans it with this first and refuses what nests deeper than any
// real input does: the frontend's JSON descriptions and the runtime's
// checkpoints (kJsonNesting), moe-opt and the mlir fuzzer (kMlirNesting).
//
// One scanner, parameterised by its bracket set, `//` comments and `->`.
// Plain C++17, header only, no dependencies: the runtime (no MLIR/LLVM), the
// compiler and the fuzz harnesses (built apart) include it alike.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONTRACT_NESTINGDEPTH_H
#define MOEC_CONTRACT_NESTINGDEPTH_H

#include <cstddef>
#include <optional>
#include <string_view>

namespace moec::contract {

/// What counts as a bracket in a text. Brackets inside `"..."` string
/// literals (with `\` escapes) never count.
struct NestingSyntax {
  /// The opening brackets and, at the same index, their closing ones. A
  /// closing bracket of any kind closes one level: the scan measures depth,
  /// the parser reports mismatches.
  std::string_view open, close;
  /// `//` starts a comment to the end of the line.
  bool lineComments;
  /// `->` is an arrow, not a closing `>`.
  bool arrows;
};

/// JSON: `{` and `[`; no comments.
inline constexpr NestingSyntax kJsonNesting{"{[", "}]", false, false};
/// MLIR text: `(`, `[`, `{` and `<`, `//` comments, `->` arrows.
inline constexpr NestingSyntax kMlirNesting{"([{<", ")]}>", true, true};

/// The deepest bracket nesting the moe tools (moe-opt, the mlir fuzzer)
/// parse as MLIR.
inline constexpr size_t kMaxMlirNesting = 256;

/// Where a text first nests too deep.
struct TooDeep {
  size_t offset;   ///< of the bracket, from 0
  unsigned line;   ///< from 1
  unsigned column; ///< from 1, in bytes
};

/// The first opening bracket of `text` nested deeper than `maxDepth` under
/// `syntax`, or nullopt when there is none. A closing bracket without an
/// opening one counts as nothing (the parser reports it). Iterative, so any
/// input is safe to scan.
inline std::optional<TooDeep> findTooDeep(std::string_view text, size_t maxDepth,
                                          const NestingSyntax &syntax) {
  size_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (syntax.lineComments && c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n')
        ++i;
    } else if (syntax.open.find(c) != std::string_view::npos) {
      if (++depth <= maxDepth)
        continue;
      TooDeep at{i, 1, 1};
      for (size_t j = 0; j < i; ++j) {
        if (text[j] == '\n') {
          ++at.line;
          at.column = 1;
        } else {
          ++at.column;
        }
      }
      return at;
    } else if (syntax.close.find(c) != std::string_view::npos) {
      if (c == '>' && syntax.arrows && i > 0 && text[i - 1] == '-')
        continue;
      if (depth > 0)
        --depth;
    }
  }
  return std::nullopt;
}

} // namespace moec::contract

#endif // MOEC_CONTRACT_NESTINGDEPTH_H
