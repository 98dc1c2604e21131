//===- JsonDepth.h - how deep a JSON text nests, without recursion -*- C++ -*-===//
//
// nlohmann/json's parser is iterative, but its dump and comparison (and
// the frontend's position scanner) recurse once per level, so a document
// nested a million levels deep overflows the stack after it parsed. Every
// reader of user JSON (the frontend's descriptions, the runtime's
// checkpoints) scans with this first. Plain C++, header only.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_JSONDEPTH_H
#define MOERT_JSONDEPTH_H

#include <cstddef>
#include <string>

namespace moert {

/// The offset of the first '[' or '{' of `text` nested deeper than
/// `maxDepth`, or std::string::npos. Brackets inside strings do not count.
inline size_t jsonTooDeepAt(const std::string &text, size_t maxDepth) {
  size_t depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      if (++depth > maxDepth)
        return i;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::string::npos;
}

} // namespace moert

#endif // MOERT_JSONDEPTH_H
