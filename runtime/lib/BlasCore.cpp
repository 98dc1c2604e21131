//===- BlasCore.cpp - OpenBLAS kernels for CPUs it does not recognise -----===//
//
// OpenBLAS picks its kernels once, in a constructor that runs before main,
// from the CPU's family and model. A release older than the CPU (Debian's
// 0.3.21 on Intel's Emerald Rapids, model 207) falls back to its generic
// Prescott kernels: SSE3, a quarter of the AVX-512 kernels' speed on the
// same core (34 against 130 GFLOP/s single-threaded, measured on that CPU).
// The kernels are chosen from OPENBLAS_CORETYPE only at load time, so when
// the chosen core is weaker than the instruction sets this CPU reports and
// the user did not choose one, the binary executes itself again with
// OPENBLAS_CORETYPE naming the best core the CPU supports. A user's
// OPENBLAS_CORETYPE is always kept (set it to keep OpenBLAS's own choice).
//
//===----------------------------------------------------------------------===//

#include "moert/BlasCore.h"
#include "moert/CpuTarget.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <strings.h>
#include <unistd.h>

extern "C" char *openblas_get_corename(void);

namespace {

/// OpenBLAS's x86 core names by instruction-set level (0: below AVX).
int levelOf(const char *core) {
  static const struct {
    const char *name;
    int level;
  } cores[] = {{"prescott", 0},    {"core2", 0},         {"penryn", 0},     {"dunnington", 0},
               {"nehalem", 0},     {"atom", 0},          {"barcelona", 0},  {"bobcat", 0},
               {"sandybridge", 1}, {"bulldozer", 1},     {"piledriver", 1}, {"steamroller", 1},
               {"excavator", 1},   {"haswell", 2},       {"zen", 2},        {"skylakex", 3},
               {"cooperlake", 4},  {"sapphirerapids", 4}};
  for (const auto &c : cores)
    if (strcasecmp(core, c.name) == 0)
      return c.level;
  return -1; // not an x86 core OpenBLAS names here: leave it
}

/// The best OpenBLAS core this CPU executes, and its level: from the same
/// features the kernels' check reads (moert/CpuTarget.h), so
/// MOERT_ASSUME_CPU=x86-64-v3 also keeps OpenBLAS to AVX2.
const char *bestCore(int &level) {
  moert::CpuFeatures cpu = moert::hostCpuFeatures();
  auto has = [&](std::initializer_list<const char *> names) {
    for (const char *n : names)
      if (!cpu.count(n))
        return false;
    return true;
  };
  if (has({"avx512bf16", "avx512bw", "avx512vl"}))
    return level = 4, "Cooperlake";
  if (has({"avx512f", "avx512bw", "avx512vl", "avx512dq"}))
    return level = 3, "SkylakeX";
  if (has({"avx2", "fma"}))
    return level = 2, "Haswell";
  if (has({"avx"}))
    return level = 1, "Sandybridge";
  return level = 0, nullptr;
}

} // namespace

void moert::selectBlasCore(char **argv) {
#if defined(__x86_64__)
  // A user's choice stands (an empty one is no choice: OpenBLAS ignores it).
  if (const char *chosen = std::getenv("OPENBLAS_CORETYPE"); chosen && *chosen)
    return;
  const char *core = openblas_get_corename();
  int have = core ? levelOf(core) : -1;
  int level = 0;
  const char *best = bestCore(level);
  if (have < 0 || !best || level <= have)
    return;
  // Started through the dynamic loader (ld.so ./binary ...), the executable
  // is the loader, which would not take this binary's arguments.
  char exe[4096];
  ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  bool loader = length > 0 && (exe[length] = '\0', std::strstr(exe, "/ld-linux") != nullptr);
  if (!loader && setenv("OPENBLAS_CORETYPE", best, 1) == 0)
    execv("/proc/self/exe", argv);
  // No re-execution (no /proc, or the loader): train with the kernels
  // OpenBLAS chose.
  std::fprintf(stderr,
               "note: OpenBLAS chose its %s kernels on a CPU that runs %s's; set "
               "OPENBLAS_CORETYPE=%s for faster GEMMs\n",
               core, best, best);
  unsetenv("OPENBLAS_CORETYPE");
#else
  (void)argv;
#endif
}
