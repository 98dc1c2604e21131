//===- NestingDepth.h - refuse IR nested past what a parser can recurse --===//
//
// MLIR's parser recurses once per nested bracket: a few tens of thousands
// of `(` overflow its stack (found by the mlir fuzzer). Tools that parse
// user IR check the text first and refuse anything nested deeper than any
// real module is, with the position of the bracket that goes too deep.
// Header-only: moe-opt and the fuzz harness (built apart) share it.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SUPPORT_NESTINGDEPTH_H
#define MOE_SUPPORT_NESTINGDEPTH_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <utility>

namespace mlir::moe {

/// The deepest bracket nesting moe tools parse.
constexpr unsigned kMaxNesting = 256;

/// The (line, column), from 1, of the first `(`, `[`, `{` or `<` nested
/// deeper than `limit` in `source`, outside string literals and `//`
/// comments (`->` is not a bracket); nullopt when there is none. A closing
/// bracket without an opening one counts as nothing (the parser reports it).
inline std::optional<std::pair<unsigned, unsigned>> findDeepNesting(llvm::StringRef source,
                                                                    unsigned limit = kMaxNesting) {
  unsigned depth = 0, line = 1, column = 0;
  bool inString = false;
  for (size_t i = 0; i < source.size(); ++i) {
    char c = source[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      continue;
    }
    if (inString) {
      if (c == '\\')
        ++i, ++column;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '/' && i + 1 < source.size() && source[i + 1] == '/') {
      while (i + 1 < source.size() && source[i + 1] != '\n')
        ++i;
    } else if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > limit)
        return std::make_pair(line, column);
    } else if (c == ')' || c == ']' || c == '}' || (c == '>' && (i == 0 || source[i - 1] != '-'))) {
      if (depth > 0)
        --depth;
    }
  }
  return std::nullopt;
}

} // namespace mlir::moe

#endif // MOE_SUPPORT_NESTINGDEPTH_H
