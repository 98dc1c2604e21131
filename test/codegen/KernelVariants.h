//===- KernelVariants.h - the kernel variants the tests link ----*- C++ -*-===//
//
// Every moec_halide_kernel(...) of test/codegen/CMakeLists.txt: its name,
// generator and GeneratorParams (stated once, there), and its metadata.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_KERNELVARIANTS_H
#define MOEC_TEST_KERNELVARIANTS_H

#include "HalideRuntime.h"

#include <initializer_list>
#include <string>
#include <vector>

struct KernelVariant {
  const char *name;
  const char *generator;
  std::vector<std::string> params;
  const halide_filter_metadata_t *(*metadata)();
};

/// All variants.
const std::vector<KernelVariant> &kernelVariants();

/// Checks, when it goes out of scope, that the kernel scratch allocated
/// since it was made peaked within the largest scratch bound of `variants`
/// (moe/Codegen/ScratchBound.h): the bound the compiler plans the runtime's
/// scratch region with. Kernels allocate through moert's scratch pool.
class ScratchWithin {
public:
  explicit ScratchWithin(std::initializer_list<const char *> variants);
  ~ScratchWithin();

private:
  std::vector<const char *> variants;
};

#endif // MOEC_TEST_KERNELVARIANTS_H
