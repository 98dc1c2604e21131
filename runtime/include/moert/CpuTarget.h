//===- CpuTarget.h - the x86 features a kernel target needs and a CPU has -===//
//
// Generated kernels are compiled for one Halide target; run on a CPU without
// the instructions that target lets LLVM emit, they die of an illegal
// instruction. Halide 14 turns each of its x86 target features into an LLVM
// CPU (-mcpu) and attributes (-mattr), and a CPU name brings every feature of
// that CPU: `avx512_sapphirerapids` gives LLVM Sapphire Rapids, AVX512-FP16
// included, which AMD Zen 4/5 lack although Halide's own host detection
// names them so. This file holds, for every Halide x86 feature, the LLVM
// features it turns on (test/unittests/CpuTargetTest.cpp checks the table
// against LLVM's own CPU tables), reads this CPU's features with cpuid, and
// derives a Halide target from a CPU's features, never from a family name.
// It depends on nothing: the runtime checks a binary's CPU with it, moec and
// moe-halide-gen choose the kernels' target with it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_CPUTARGET_H
#define MOERT_CPUTARGET_H

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace moert {

/// A set of LLVM x86 feature names ("avx2", "avx512f", "avx512fp16", ...).
using CpuFeatures = std::set<std::string>;

/// A Halide 14 x86 target feature and what it makes LLVM emit.
struct HalideX86Feature {
  /// Halide's name ("avx2").
  const char *name;
  /// The LLVM CPU Halide 14 passes as -mcpu when this is the target's best
  /// feature (empty: it does not choose the CPU).
  const char *llvmCpu;
  /// The LLVM attributes Halide 14 adds for it (-mattr, without '+').
  std::vector<std::string> attributes;
  /// What a CPU needs to run its code: llvmCpu's and attributes' LLVM
  /// features with the features they imply, less the x86-64 baseline and
  /// uncheckedX86Features().
  std::vector<std::string> needs;
};

/// Every x86 feature of Halide 14's Target, lowest first.
const std::vector<HalideX86Feature> &halideX86Features();

/// LLVM features that the LLVM CPUs above bring but that no generated kernel
/// executes, so no CPU is refused for lacking them: system instructions
/// (SGX, XSAVE*, FSGSBASE, PKU, cache-line writeback, ...) and instructions
/// LLVM emits only for their intrinsics, which Halide's kernels do not call
/// (AES, SHA, PCLMUL, ADX, RDRAND, RDSEED, CRC32, PREFETCHW).
const std::vector<std::string> &uncheckedX86Features();

/// The LLVM features (the ones some HalideX86Feature::needs names) of
/// this CPU, read with cpuid and the OS's enabled register state (xgetbv);
/// empty off x86.
CpuFeatures detectCpuFeatures();

/// detectCpuFeatures(), restricted to an x86-64 level when the environment
/// sets MOERT_ASSUME_CPU to one (x86-64, x86-64-v2, -v3, -v4): to build and
/// test for a baseline CPU on a larger one. It never adds a feature.
CpuFeatures hostCpuFeatures();

/// The features of an x86-64 micro-architecture level ("x86-64",
/// "x86-64-v2", "x86-64-v3", "x86-64-v4"; the psABI's), in the names `needs`
/// uses; nullopt for another name.
std::optional<CpuFeatures> x86LevelFeatures(const std::string &level);

/// The Halide target of an x86-64 Linux CPU with `cpu`'s features:
/// "x86-64-linux" plus every Halide feature whose `needs` `cpu` holds.
std::string halideTargetFor(const CpuFeatures &cpu);

/// `halideTarget` with a leading "host" (Halide's own detection) replaced
/// by halideTargetFor(hostCpuFeatures()); any other target unchanged.
std::string resolveHostTarget(const std::string &halideTarget);

/// The x86 features of a Halide target string (arch-bits-os-feature-...)
/// that Halide 14 knows; empty for other architectures.
std::vector<std::string> halideX86FeaturesOf(const std::string &halideTarget);

/// The LLVM features the x86 features of `halideTarget` need (the union of
/// `needs`), sorted; empty for other architectures.
std::vector<std::string> cpuFeaturesOf(const std::string &halideTarget);

/// cpuFeaturesOf(halideTarget) that `cpu` lacks, comma-separated; empty
/// when it has them all.
std::string missingCpuFeatures(const std::string &halideTarget, const CpuFeatures &cpu);

/// missingCpuFeatures against this CPU (hostCpuFeatures()).
std::string missingCpuFeatures(const std::string &halideTarget);

} // namespace moert

#endif // MOERT_CPUTARGET_H
