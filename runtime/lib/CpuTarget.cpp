//===- CpuTarget.cpp - the x86 features a kernel target needs and a CPU has ===//

#include "moert/CpuTarget.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

using moert::CpuFeatures;
using moert::HalideX86Feature;

const std::vector<HalideX86Feature> &moert::halideX86Features() {
  // Halide 14 (CodeGen_X86::mcpu_target and mattrs): -mcpu is the CPU of the
  // target's best feature, sapphirerapids > cannonlake > skylake-avx512 >
  // knl > haswell (avx2) > corei7-avx (avx) > penryn (sse41) > k8; -mattr
  // adds the attributes below. `needs` is derived from LLVM's tables and
  // checked against them (test/unittests/CpuTargetTest.cpp).
  static const std::vector<HalideX86Feature> table = {
      {"sse41", "penryn", {}, {"cx16", "sahf", "sse3", "sse4.1", "ssse3"}},
      {"avx",
       "corei7-avx",
       {},
       {"avx", "cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"avx2",
       "haswell",
       {},
       {"avx", "avx2", "bmi", "bmi2", "cx16", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sahf",
        "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"fma", "", {"fma"}, {"avx", "fma", "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"fma4", "", {"fma4"}, {"avx", "fma4", "sse3", "sse4.1", "sse4.2", "sse4a", "ssse3"}},
      {"f16c", "", {"f16c"}, {"avx", "f16c", "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"avx512",
       "",
       {"avx512f", "avx512cd"},
       {"avx", "avx2", "avx512cd", "avx512f", "f16c", "fma", "sse3", "sse4.1", "sse4.2",
        "ssse3"}},
      {"avx512_knl",
       "knl",
       {"avx512f", "avx512cd", "avx512pf", "avx512er"},
       {"avx", "avx2", "avx512cd", "avx512er", "avx512f", "avx512pf", "bmi", "bmi2", "cx16",
        "f16c", "fma", "lzcnt", "movbe", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"avx512_skylake",
       "skylake-avx512",
       {"avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq"},
       {"avx", "avx2", "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl", "bmi", "bmi2",
        "cx16", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2",
        "ssse3"}},
      {"avx512_cannonlake",
       "cannonlake",
       {"avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq", "avx512ifma", "avx512vbmi"},
       {"avx", "avx2", "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512ifma", "avx512vbmi",
        "avx512vl", "bmi", "bmi2", "cx16", "f16c", "fma", "lzcnt", "movbe", "popcnt", "sahf",
        "sse3", "sse4.1", "sse4.2", "ssse3"}},
      {"avx512_sapphirerapids",
       "sapphirerapids",
       {"avx512bf16", "avx512vnni", "amx-int8", "amx-bf16"},
       {"amx-bf16", "amx-int8",     "amx-tile",        "avx",        "avx2",     "avx512bf16",
        "avx512bitalg", "avx512bw", "avx512cd",        "avx512dq",   "avx512f",  "avx512fp16",
        "avx512ifma",   "avx512vbmi", "avx512vbmi2",   "avx512vl",   "avx512vnni",
        "avx512vpopcntdq", "avxvnni", "bmi",           "bmi2",       "cx16",     "f16c",
        "fma",          "gfni",     "lzcnt",           "movbe",      "popcnt",   "sahf",
        "sse3",         "sse4.1",   "sse4.2",          "ssse3",      "vaes",     "vpclmulqdq"}},
  };
  return table;
}

const std::vector<std::string> &moert::uncheckedX86Features() {
  static const std::vector<std::string> names = {
      // The x86-64 baseline: every x86-64 CPU has it.
      "64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2", "x87",
      // System instructions (enclaves, context save, segment bases, page
      // and cache maintenance, user interrupts, tracing, shadow stacks):
      // an operating system's, never a kernel's.
      "cldemote", "clflushopt", "clwb", "enqcmd", "fsgsbase", "invpcid", "movdir64b", "movdiri",
      "pconfig", "pku", "ptwrite", "rdpid", "serialize", "sgx", "shstk", "tsxldtrk", "uintr",
      "waitpkg", "wbnoinvd", "xsave", "xsavec", "xsaveopt", "xsaves",
      // Emitted by LLVM for their intrinsics only, which Halide 14's x86
      // code generation does not call (its prefetches are read prefetches).
      "adx", "aes", "crc32", "pclmul", "prfchw", "rdrnd", "rdseed", "sha"};
  return names;
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d))
    return Regs();
  return r;
}

unsigned long long xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
#endif

} // namespace

CpuFeatures moert::detectCpuFeatures() {
  CpuFeatures out;
#if defined(__x86_64__) || defined(__i386__)
  auto bit = [](unsigned reg, int n) { return (reg >> n) & 1u; };
  unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  unsigned maxExt = __get_cpuid_max(0x80000000, nullptr);
  Regs l1 = cpuid(1);
  Regs l7 = maxLeaf >= 7 ? cpuid(7) : Regs();
  Regs l7s1 = maxLeaf >= 7 && l7.a >= 1 ? cpuid(7, 1) : Regs();
  Regs ext = maxExt >= 0x80000001 ? cpuid(0x80000001) : Regs();
  // Register state the OS saves (XCR0): the wider registers are usable
  // only when it saves them, whatever cpuid says of the instructions (as
  // LLVM's host detection decides).
  unsigned long long state = bit(l1.c, 27) ? xcr0() : 0; // OSXSAVE
  bool avxState = (state & 0x6) == 0x6;
  bool avx512State = avxState && (state & 0xe0) == 0xe0;
  bool amxState = (state & 0x60000) == 0x60000;
  auto add = [&](const char *name, bool has) {
    if (has)
      out.insert(name);
  };
  add("sse3", bit(l1.c, 0));
  add("ssse3", bit(l1.c, 9));
  add("fma", bit(l1.c, 12) && avxState);
  add("cx16", bit(l1.c, 13));
  add("sse4.1", bit(l1.c, 19));
  add("sse4.2", bit(l1.c, 20));
  add("movbe", bit(l1.c, 22));
  add("popcnt", bit(l1.c, 23));
  add("avx", bit(l1.c, 28) && avxState);
  add("f16c", bit(l1.c, 29) && avxState);
  add("sahf", bit(ext.c, 0));
  add("lzcnt", bit(ext.c, 5));
  add("sse4a", bit(ext.c, 6));
  add("fma4", bit(ext.c, 16) && avxState);
  add("bmi", bit(l7.b, 3));
  add("avx2", bit(l7.b, 5) && avxState);
  add("bmi2", bit(l7.b, 8));
  add("avx512f", bit(l7.b, 16) && avx512State);
  add("avx512dq", bit(l7.b, 17) && avx512State);
  add("avx512ifma", bit(l7.b, 21) && avx512State);
  add("avx512pf", bit(l7.b, 26) && avx512State);
  add("avx512er", bit(l7.b, 27) && avx512State);
  add("avx512cd", bit(l7.b, 28) && avx512State);
  add("avx512bw", bit(l7.b, 30) && avx512State);
  add("avx512vl", bit(l7.b, 31) && avx512State);
  add("avx512vbmi", bit(l7.c, 1) && avx512State);
  add("avx512vbmi2", bit(l7.c, 6) && avx512State);
  add("gfni", bit(l7.c, 8));
  add("vaes", bit(l7.c, 9) && avxState);
  add("vpclmulqdq", bit(l7.c, 10) && avxState);
  add("avx512vnni", bit(l7.c, 11) && avx512State);
  add("avx512bitalg", bit(l7.c, 12) && avx512State);
  add("avx512vpopcntdq", bit(l7.c, 14) && avx512State);
  add("amx-bf16", bit(l7.d, 22) && amxState);
  add("avx512fp16", bit(l7.d, 23) && avx512State);
  add("amx-tile", bit(l7.d, 24) && amxState);
  add("amx-int8", bit(l7.d, 25) && amxState);
  add("avxvnni", bit(l7s1.a, 4) && avxState);
  add("avx512bf16", bit(l7s1.a, 5) && avx512State);
#endif
  return out;
}

std::optional<CpuFeatures> moert::x86LevelFeatures(const std::string &level) {
  // The x86-64 psABI's levels (checked against LLVM's x86-64-vN CPUs).
  CpuFeatures out;
  if (level == "x86-64")
    return out;
  out = {"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"};
  if (level == "x86-64-v2")
    return out;
  out.insert({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"});
  if (level == "x86-64-v3")
    return out;
  out.insert({"avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"});
  if (level == "x86-64-v4")
    return out;
  return std::nullopt;
}

CpuFeatures moert::hostCpuFeatures() {
  CpuFeatures cpu = detectCpuFeatures();
  const char *assume = std::getenv("MOERT_ASSUME_CPU");
  if (!assume || !*assume)
    return cpu;
  // An unknown level assumes the baseline: the check stays on the safe side.
  CpuFeatures level = x86LevelFeatures(assume).value_or(CpuFeatures());
  CpuFeatures both;
  for (const std::string &f : cpu)
    if (level.count(f))
      both.insert(f);
  return both;
}

std::string moert::halideTargetFor(const CpuFeatures &cpu) {
  std::string target = "x86-64-linux";
  for (const HalideX86Feature &f : halideX86Features())
    if (std::all_of(f.needs.begin(), f.needs.end(),
                    [&](const std::string &n) { return cpu.count(n) > 0; }))
      target += std::string("-") + f.name;
  return target;
}

std::string moert::resolveHostTarget(const std::string &halideTarget) {
  if (halideTarget != "host" && halideTarget.rfind("host-", 0) != 0)
    return halideTarget;
#if defined(__x86_64__)
  return halideTargetFor(hostCpuFeatures()) + halideTarget.substr(4);
#else
  return halideTarget; // Halide's own detection off x86
#endif
}

std::vector<std::string> moert::halideX86FeaturesOf(const std::string &halideTarget) {
  std::vector<std::string> parts;
  std::stringstream in(halideTarget);
  for (std::string part; std::getline(in, part, '-');)
    parts.push_back(part);
  std::vector<std::string> out;
  if (parts.size() < 3 || parts[0] != "x86")
    return out;
  for (size_t i = 3; i < parts.size(); ++i)
    for (const HalideX86Feature &f : halideX86Features())
      if (parts[i] == f.name)
        out.push_back(f.name);
  return out;
}

std::vector<std::string> moert::cpuFeaturesOf(const std::string &halideTarget) {
  std::set<std::string> need;
  for (const std::string &name : halideX86FeaturesOf(halideTarget))
    for (const HalideX86Feature &f : halideX86Features())
      if (name == f.name)
        need.insert(f.needs.begin(), f.needs.end());
  return {need.begin(), need.end()};
}

std::string moert::missingCpuFeatures(const std::string &halideTarget, const CpuFeatures &cpu) {
  std::string missing;
  for (const std::string &f : cpuFeaturesOf(halideTarget))
    if (!cpu.count(f))
      missing += (missing.empty() ? "" : ", ") + f;
  return missing;
}

std::string moert::missingCpuFeatures(const std::string &halideTarget) {
  return missingCpuFeatures(halideTarget, hostCpuFeatures());
}
