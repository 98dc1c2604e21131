//===- HostTarget.cpp - the Halide target of the kernels' CPU side --------===//

#include "moe/Codegen/HostTarget.h"
#include "moe/Codegen/TargetBackend.h"

#include "moert/CpuTarget.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <optional>

using namespace llvm;

namespace {


/// The features of one CPU of a --host-target list, in CpuTarget's names.
Expected<moert::CpuFeatures> cpuFeatures(StringRef name) {
  if (name == "host")
    return moert::hostCpuFeatures();
  if (X86::parseArchX86(name, /*Only64Bit=*/true) == X86::CK_None) {
    SmallVector<StringRef, 64> known;
    X86::fillValidCPUArchList(known, /*Only64Bit=*/true);
    std::optional<StringRef> near;
    unsigned best = 3;
    for (StringRef k : known)
      if (unsigned d = name.edit_distance(k, true, best); d < best)
        best = d, near = k;
    return createStringError("--host-target: unknown CPU '" + name + "'" +
                (near ? "; did you mean '" + *near + "'?" : Twine("")) +
                " (expected host, an x86-64 level such as x86-64-v3, an LLVM CPU name such as "
                "znver4, or a Halide target such as x86-64-linux-avx-avx2-f16c-fma-sse41)");
  }
  SmallVector<StringRef, 64> listed;
  X86::getFeaturesForCPU(name, listed, /*NeedPlus=*/false);
  StringMap<bool> all;
  for (StringRef f : listed) {
    all[f] = true;
    X86::updateImpliedFeatures(f, true, all);
  }
  moert::CpuFeatures out;
  for (const auto &entry : all)
    if (entry.second)
      out.insert(entry.first().str());
  return out;
}

} // namespace

Expected<std::string> moec::codegen::resolveHostTarget(StringRef spec) {
  if (spec.contains('-') && Regex("^[a-z0-9_]+-[0-9]+-[a-z]+(-|$)").match(spec)) {
    if (!Regex("^(x86-64|x86-32|arm-64|arm-32|riscv-64|powerpc-64)-linux(-[a-z0-9_]+)*$")
             .match(spec))
      return createStringError("--host-target " + spec +
                  ": expected a Halide target arch-bits-os[-features], e.g. "
                  "x86-64-linux-avx-avx2-f16c-fma-sse41");
    if (targetInHalideTarget(spec))
      return createStringError("--host-target names the CPU's features only; the device is --target");
    return spec.str();
  }
  if (spec.trim() == "host")
    return moert::resolveHostTarget("host"); // Halide's own detection off x86
  SmallVector<StringRef> names;
  spec.split(names, ',', -1, /*KeepEmpty=*/false);
  if (names.empty())
    return createStringError("--host-target: give host, a CPU name or a Halide target");
  std::optional<moert::CpuFeatures> common;
  for (StringRef name : names) {
    Expected<moert::CpuFeatures> features = cpuFeatures(name.trim());
    if (!features)
      return features.takeError();
    if (!common) {
      common = std::move(*features);
      continue;
    }
    moert::CpuFeatures both;
    for (const std::string &f : *common)
      if (features->count(f))
        both.insert(f);
    common = std::move(both);
  }
  return moert::halideTargetFor(*common);
}
