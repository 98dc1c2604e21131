//===- HostTarget.h - the Halide target of the kernels' CPU side -*- C++ -*-===//
//
// moec --host-target: which CPU the generated kernels (and the host side of
// device kernels) run on, turned into a Halide target from that CPU's
// features, never from a family name (runtime/include/moert/CpuTarget.h).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_HOSTTARGET_H
#define MOE_CODEGEN_HOSTTARGET_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace moec::codegen {

/// The Halide target for `spec`:
/// - "host": this CPU's features, as cpuid reports them;
/// - an x86-64 level or an LLVM CPU name (x86-64-v3, x86-64-v4, znver4,
///   sapphirerapids, ...): that CPU's features, from LLVM's tables;
/// - several of these, comma-separated: the features all of them have (the
///   target of a cluster of mixed CPUs);
/// - a Halide target string (arch-bits-os[-features]), taken as given.
/// An unknown CPU name or a malformed target is an error that says what is
/// accepted.
llvm::Expected<std::string> resolveHostTarget(llvm::StringRef spec);

} // namespace moec::codegen

#endif // MOE_CODEGEN_HOSTTARGET_H
