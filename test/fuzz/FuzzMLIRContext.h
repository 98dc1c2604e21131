//===- FuzzMLIRContext.h - the MLIR context of the IR fuzzers ---*- C++ -*-===//
//
// One context for a whole fuzzing run (creating one per input would dwarf
// the work under test), with the dialects moe-opt registers. Include it in
// one translation unit per fuzzer binary.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_FUZZ_FUZZMLIRCONTEXT_H
#define MOEC_TEST_FUZZ_FUZZMLIRCONTEXT_H

#include "moe/InitAllDialects.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>

// The MLIR headers compiled here poison and unpoison their allocators'
// memory for ASan, but libMLIR.so (not instrumented) does not: manual
// poisoning is switched off, which leaves ASan's own checks in place.
extern "C" const char *__asan_default_options() { return "allow_user_poisoning=0"; }

namespace moec::fuzz {

/// The last diagnostic the context reported (most inputs are expected to
/// fail; nothing is printed).
inline std::string lastDiagnostic;

inline mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    mlir::moe::registerAllDialects(registry);
    auto *c = new mlir::MLIRContext(registry, mlir::MLIRContext::Threading::DISABLED);
    c->loadAllAvailableDialects();
    c->getDiagEngine().registerHandler([](mlir::Diagnostic &d) { lastDiagnostic = d.str(); });
    return c;
  }();
  return *ctx;
}

} // namespace moec::fuzz

#endif // MOEC_TEST_FUZZ_FUZZMLIRCONTEXT_H
