//===- FuzzContract.h - what every fuzzed reader promises -------*- C++ -*-===//
//
// Besides crashes, sanitizer reports, hangs and leaks, which libFuzzer
// catches itself, each fuzzer checks the readers' contract: a reader that
// refuses its input has said why, and says it in words.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_FUZZ_FUZZCONTRACT_H
#define MOEC_TEST_FUZZ_FUZZCONTRACT_H

#include "moe/Frontend/Diagnostics.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moec::fuzz {

/// Stops the run: libFuzzer saves the input as a crash.
[[noreturn]] inline void broken(const std::string &what) {
  std::fprintf(stderr, "contract broken: %s\n", what.c_str());
  std::abort();
}

/// A frontend reader that returned nothing reported an error, and every
/// diagnostic has a message.
inline void checkReader(bool ok, const frontend::DiagnosticList &diags, const char *reader) {
  if (!ok && !diags.hasErrors())
    broken(std::string(reader) + " rejected the input without an error");
  for (const frontend::Diagnostic &d : diags.all())
    if (d.message.empty())
      broken(std::string(reader) + " reported an empty message");
}

/// A runtime reader that failed filled its error string.
inline void checkError(bool ok, const std::string &error, const char *reader) {
  if (!ok && error.empty())
    broken(std::string(reader) + " failed without a message");
}

} // namespace moec::fuzz

#endif // MOEC_TEST_FUZZ_FUZZCONTRACT_H
