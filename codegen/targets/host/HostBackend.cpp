//===- HostBackend.cpp - kernels on the host CPU (the default target) -----===//
//
// Halide's x86-64/ARM back end with each generator's CPU schedule, for the
// Halide target moec resolves --host-target into (moe/Codegen/HostTarget.h).
// The step's arenas are host memory; large contractions may call OpenBLAS.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/TargetBackend.h"

using namespace llvm;

namespace {

class HostBackend final : public moec::codegen::TargetBackend {
public:
  StringRef name() const override { return "host"; }
  StringRef description() const override { return "the host CPU (default)"; }
  std::string halideFeatures(const moec::codegen::TargetOptionValues &) const override {
    return "";
  }
  StringRef deviceInterface() const override { return ""; }
  ArrayRef<StringRef> preludeIncludes() const override { return {}; }
  // A cache line: every vector load of a planned buffer is aligned.
  int64_t bufferAlignment() const override { return 64; }
  bool deviceNorm() const override { return false; }
  bool sixteenBitFloats() const override { return true; }
  bool blasGemm() const override { return true; }
  bool expertChunks() const override { return true; }
};

} // namespace

namespace moec::codegen {

/// Called by registerAllTargets (TargetRegistry.cpp).
void registerHostTarget() {
  static const HostBackend backend;
  registerTarget(backend);
}

} // namespace moec::codegen
