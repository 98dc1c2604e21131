//===- Diagnostics.cpp - errors and warnings of the frontend --------------===//

#include "moe/Frontend/Diagnostics.h"

#include <algorithm>
#include <sstream>

using namespace moec::frontend;

std::string Diagnostic::str() const {
  std::ostringstream os;
  os << file;
  if (pos.line)
    os << ":" << pos.line << ":" << pos.col;
  os << (kind == Kind::Error ? ": error: " : ": warning: ") << message;
  return os.str();
}

void DiagnosticList::error(const std::string &file, SourcePos pos, std::string message) {
  list.push_back({Diagnostic::Kind::Error, file, pos, std::move(message)});
  ++numErrors;
}

void DiagnosticList::warning(const std::string &file, SourcePos pos, std::string message) {
  list.push_back({Diagnostic::Kind::Warning, file, pos, std::move(message)});
}

std::string DiagnosticList::str() const {
  std::string out;
  for (const Diagnostic &d : list)
    out += d.str() + "\n";
  return out;
}

/// Levenshtein distance, case-insensitive.
static size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string moec::frontend::closestMatch(const std::string &word,
                                         const std::vector<std::string> &candidates) {
  std::string best;
  const size_t threshold = std::max<size_t>(2, word.size() / 3) + 1;
  size_t bestDistance = threshold;
  for (const std::string &candidate : candidates) {
    size_t d = editDistance(word, candidate);
    // A candidate that contains the word (or vice versa) is a likely match,
    // though not a better one than a closer spelling.
    if ((candidate.find(word) != std::string::npos || word.find(candidate) != std::string::npos) &&
        std::min(word.size(), candidate.size()) >= 3)
      d = std::min(d, threshold - 1);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}

DiagnosticList DiagnosticList::warningsAsErrors() const {
  DiagnosticList strict;
  for (const Diagnostic &d : list)
    strict.error(d.file, d.pos,
                 d.kind == Diagnostic::Kind::Warning ? d.message + " [-Werror]" : d.message);
  return strict;
}
