//===- CpuTargetTest.cpp - kernel targets from CPU features, checked ------===//
//
// moert/CpuTarget.h's table of what each Halide 14 x86 feature makes LLVM
// emit, checked against LLVM's own CPU tables (LLVM 22's: Halide 14 passes
// the same CPU names to LLVM 14); its cpuid detection against LLVM's host
// detection; and the targets it derives for real CPUs.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/HostTarget.h"
#include "moert/CpuTarget.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <gtest/gtest.h>

#include <cstdlib>

using moert::CpuFeatures;

namespace {

/// `cpu`'s features and `attributes`, with every feature they imply, as
/// LLVM's tables say, less the ones no CPU is checked for.
CpuFeatures llvmFeatures(llvm::StringRef cpu, const std::vector<std::string> &attributes) {
  llvm::StringMap<bool> all;
  auto enable = [&](llvm::StringRef f) {
    all[f] = true;
    llvm::X86::updateImpliedFeatures(f, true, all);
  };
  if (!cpu.empty()) {
    llvm::SmallVector<llvm::StringRef, 64> listed;
    llvm::X86::getFeaturesForCPU(cpu, listed, /*NeedPlus=*/false);
    EXPECT_FALSE(listed.empty()) << "LLVM does not know CPU " << cpu.str();
    for (llvm::StringRef f : listed)
      enable(f);
  }
  for (const std::string &f : attributes)
    enable(f);
  CpuFeatures out;
  for (const auto &entry : all)
    if (entry.second)
      out.insert(entry.first().str());
  for (const std::string &f : moert::uncheckedX86Features())
    out.erase(f);
  return out;
}

std::string join(const CpuFeatures &features) {
  return llvm::join(features.begin(), features.end(), " ");
}

std::string targetOf(llvm::StringRef spec) {
  llvm::Expected<std::string> target = moec::codegen::resolveHostTarget(spec);
  if (!target)
    return "error: " + llvm::toString(target.takeError());
  return *target;
}

} // namespace

TEST(CpuTargetTest, EachHalideFeatureNeedsWhatLLVMTurnsOn) {
  ASSERT_EQ(moert::halideX86Features().size(), 11u); // every x86 feature of Halide 14
  for (const moert::HalideX86Feature &f : moert::halideX86Features()) {
    CpuFeatures needs(f.needs.begin(), f.needs.end());
    EXPECT_EQ(join(needs), join(llvmFeatures(f.llvmCpu, f.attributes))) << f.name;
    EXPECT_FALSE(needs.empty()) << f.name;
  }
}

TEST(CpuTargetTest, LevelsAreLLVMs) {
  for (const char *level : {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"}) {
    std::optional<CpuFeatures> features = moert::x86LevelFeatures(level);
    ASSERT_TRUE(features) << level;
    EXPECT_EQ(join(*features), join(llvmFeatures(level, {}))) << level;
  }
  EXPECT_FALSE(moert::x86LevelFeatures("x86-64-v5"));
  EXPECT_FALSE(moert::x86LevelFeatures("haswell"));
}

TEST(CpuTargetTest, CpuidReadsWhatLLVMReads) {
  // Every feature some target needs, as this machine's cpuid and XCR0 say,
  // against LLVM's host detection (features LLVM 22 no longer knows, the
  // Xeon Phi's avx512er/pf, are absent from its map).
  CpuFeatures detected = moert::detectCpuFeatures();
  llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  for (const moert::HalideX86Feature &f : moert::halideX86Features())
    for (const std::string &name : f.needs)
      if (auto it = host.find(name); it != host.end()) {
        EXPECT_EQ(detected.count(name) > 0, it->second) << name;
      }
}

TEST(CpuTargetTest, TargetsFromRealCpus) {
  const std::string zen4 = "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-avx512_skylake-"
                           "avx512_cannonlake";
  // AMD Zen 4/5: AVX-512 with VNNI and BF16 but no AVX512-FP16, so no
  // Sapphire Rapids (Halide's own host detection names them so: SIGILL).
  EXPECT_EQ(targetOf("znver4"), zen4);
  EXPECT_EQ(targetOf("znver5"), zen4);
  EXPECT_EQ(targetOf("sapphirerapids"), zen4 + "-avx512_sapphirerapids");
  EXPECT_EQ(targetOf("znver3"), "x86-64-linux-sse41-avx-avx2-fma-f16c");
  EXPECT_EQ(targetOf("bdver2"), "x86-64-linux-sse41-avx-fma-fma4-f16c");
  EXPECT_EQ(targetOf("x86-64"), "x86-64-linux");
  EXPECT_EQ(targetOf("x86-64-v2"), "x86-64-linux-sse41");
  EXPECT_EQ(targetOf("x86-64-v3"), "x86-64-linux-sse41-avx-avx2-fma-f16c");
  EXPECT_EQ(targetOf("x86-64-v4"),
            "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-avx512_skylake");
  EXPECT_EQ(targetOf("knl"), "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512");
  // A mixed cluster: what every CPU of it has.
  EXPECT_EQ(targetOf("znver4,sapphirerapids"), zen4);
  EXPECT_EQ(targetOf("znver4, znver3"), targetOf("znver3"));
  EXPECT_EQ(targetOf("host,x86-64-v2"), "x86-64-linux-sse41");
  // The host's target is its cpuid's, and it runs what it makes.
  std::string host = targetOf("host");
  EXPECT_EQ(host, moert::halideTargetFor(moert::hostCpuFeatures()));
  EXPECT_EQ(moert::missingCpuFeatures(host), "");
}

TEST(CpuTargetTest, BadHostTargetsAreErrors) {
  EXPECT_EQ(targetOf("znver9"),
            "error: --host-target: unknown CPU 'znver9'; did you mean 'znver1'? (expected "
            "host, an x86-64 level such as x86-64-v3, an LLVM CPU name such as znver4, or a "
            "Halide target such as x86-64-linux-avx-avx2-f16c-fma-sse41)");
  EXPECT_EQ(targetOf("x86-64-linux-avx2-cuda"),
            "error: --host-target names the CPU's features only; the device is --target");
  EXPECT_EQ(targetOf("x86-64-windows-avx2"),
            "error: --host-target x86-64-windows-avx2: expected a Halide target "
            "arch-bits-os[-features], e.g. x86-64-linux-avx-avx2-f16c-fma-sse41");
  EXPECT_EQ(targetOf(","), "error: --host-target: give host, a CPU name or a Halide target");
  // A Halide target is taken as given.
  EXPECT_EQ(targetOf("x86-64-linux-avx-avx2-f16c-fma-sse41"),
            "x86-64-linux-avx-avx2-f16c-fma-sse41");
  EXPECT_EQ(targetOf("arm-64-linux-arm_dot_prod"), "arm-64-linux-arm_dot_prod");
}

TEST(CpuTargetTest, EveryFeatureIsRefusedOnACpuWithoutIt) {
  // A binary built for any Halide x86 feature names, on a baseline x86-64
  // CPU, every LLVM feature it needs; on a CPU with exactly those, none.
  for (const moert::HalideX86Feature &f : moert::halideX86Features()) {
    std::string target = std::string("x86-64-linux-") + f.name + "-no_runtime";
    CpuFeatures needs(f.needs.begin(), f.needs.end());
    EXPECT_EQ(moert::missingCpuFeatures(target, CpuFeatures()),
              llvm::join(needs.begin(), needs.end(), ", "))
        << f.name;
    EXPECT_EQ(moert::missingCpuFeatures(target, needs), "") << f.name;
  }
  // The SIGILL of record: Sapphire Rapids kernels on a Zen 5.
  llvm::Expected<std::string> zen5 = moec::codegen::resolveHostTarget("znver5");
  ASSERT_TRUE(bool(zen5));
  CpuFeatures zen5Features = llvmFeatures("znver5", {});
  EXPECT_EQ(moert::missingCpuFeatures("x86-64-linux-avx512_sapphirerapids", zen5Features),
            "amx-bf16, amx-int8, amx-tile, avx512fp16");
  EXPECT_EQ(moert::missingCpuFeatures(*zen5, zen5Features), "");
  // Other architectures and names that are not x86 features need nothing.
  EXPECT_EQ(moert::cpuFeaturesOf("arm-64-linux-arm_dot_prod"), std::vector<std::string>());
  EXPECT_EQ(moert::cpuFeaturesOf("x86-64-linux-no_runtime-cuda-cuda_capability_80"),
            std::vector<std::string>());
  EXPECT_EQ(moert::halideX86FeaturesOf("x86-64-linux-avx-cuda-f16c-no_runtime"),
            (std::vector<std::string>{"avx", "f16c"}));
}

TEST(CpuTargetTest, AssumedLevelOnlyRemovesFeatures) {
  CpuFeatures all = moert::detectCpuFeatures();
  ::setenv("MOERT_ASSUME_CPU", "x86-64-v2", 1);
  CpuFeatures v2 = moert::hostCpuFeatures();
  ::setenv("MOERT_ASSUME_CPU", "no-such-level", 1);
  CpuFeatures unknown = moert::hostCpuFeatures();
  ::unsetenv("MOERT_ASSUME_CPU");
  CpuFeatures level = *moert::x86LevelFeatures("x86-64-v2");
  for (const std::string &f : v2)
    EXPECT_TRUE(level.count(f) && all.count(f)) << f;
  for (const std::string &f : level)
    EXPECT_EQ(v2.count(f), all.count(f)) << f;
  EXPECT_TRUE(unknown.empty());
  EXPECT_EQ(moert::hostCpuFeatures(), all);
}
