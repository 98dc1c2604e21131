//===- GenMain.cpp - moe-halide-gen's main: Halide's, with "host" resolved ===//
//
// Halide 14's host detection names a CPU by family: an AMD Zen 4/5 (AVX-512
// with VNNI and BF16) becomes avx512_sapphirerapids, and LLVM then emits
// Sapphire Rapids' AVX512-FP16 instructions, which those CPUs lack. Every
// target=host... argument is therefore replaced by the target of this CPU's
// real features (moert/CpuTarget.h) before Halide's generator main sees it,
// so the build's own kernels (the kernel tests', the Halide runtime) and
// moec's run on the machine that made them.
//
//===----------------------------------------------------------------------===//

#include "moert/CpuTarget.h"

#include "Halide.h"

#include <string>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string &arg : args) {
    if (arg.rfind("target=", 0) != 0)
      continue;
    // A multi-target list is comma-separated.
    std::string out = "target=", list = arg.substr(7);
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find(',', start);
      if (end == std::string::npos)
        end = list.size();
      out += (start ? "," : "") + moert::resolveHostTarget(list.substr(start, end - start));
      start = end + 1;
    }
    arg = out;
  }
  std::vector<char *> argvOut;
  for (std::string &arg : args)
    argvOut.push_back(arg.data());
  argvOut.push_back(nullptr);
  return Halide::Internal::generate_filter_main(argc, argvOut.data(), std::cerr);
}
