//===- CpuTarget.cpp - does this CPU run the kernels' Halide target? ------===//

#include "CpuTarget.h"

#include <algorithm>
#include <sstream>

std::vector<std::string> moert::cpuFeaturesOf(const std::string &halideTarget) {
  std::vector<std::string> parts;
  std::stringstream in(halideTarget);
  for (std::string part; std::getline(in, part, '-');)
    parts.push_back(part);
  std::vector<std::string> out;
  if (parts.empty() || parts[0] != "x86")
    return out;
  auto need = [&](std::initializer_list<const char *> names) {
    for (const char *n : names)
      if (std::find(out.begin(), out.end(), n) == out.end())
        out.push_back(n);
  };
  // Halide 14's x86 features (Target::Feature) and what each implies.
  for (size_t i = 3; i < parts.size(); ++i) {
    const std::string &f = parts[i];
    if (f == "sse41")
      need({"sse4.1"});
    else if (f == "avx")
      need({"avx"});
    else if (f == "avx2")
      need({"avx2"});
    else if (f == "fma")
      need({"fma"});
    else if (f == "fma4")
      need({"fma4"});
    else if (f == "avx512")
      need({"avx512f", "avx512cd"});
    else if (f == "avx512_knl")
      need({"avx512f", "avx512cd", "avx512er", "avx512pf"});
    else if (f == "avx512_skylake")
      need({"avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq"});
    else if (f == "avx512_cannonlake")
      need({"avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq", "avx512ifma", "avx512vbmi"});
    else if (f == "avx512_sapphirerapids")
      need({"avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq", "avx512ifma", "avx512vbmi",
            "avx512vnni"});
  }
  return out;
}

bool moert::cpuHas(const std::string &feature) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define MOERT_CPU(name)                                                                            \
  if (feature == name)                                                                             \
    return __builtin_cpu_supports(name);
  MOERT_CPU("sse4.1")
  MOERT_CPU("avx")
  MOERT_CPU("avx2")
  MOERT_CPU("fma")
  MOERT_CPU("fma4")
  MOERT_CPU("avx512f")
  MOERT_CPU("avx512cd")
  MOERT_CPU("avx512er")
  MOERT_CPU("avx512pf")
  MOERT_CPU("avx512vl")
  MOERT_CPU("avx512bw")
  MOERT_CPU("avx512dq")
  MOERT_CPU("avx512ifma")
  MOERT_CPU("avx512vbmi")
  MOERT_CPU("avx512vnni")
#undef MOERT_CPU
#endif
  (void)feature;
  return false;
}

std::string moert::missingCpuFeatures(const std::string &halideTarget) {
  std::string missing;
  for (const std::string &f : cpuFeaturesOf(halideTarget))
    if (!cpuHas(f))
      missing += (missing.empty() ? "" : ", ") + f;
  return missing;
}
