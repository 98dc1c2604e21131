//===- KernelTestUtil.h - what every kernel test shares ---------*- C++ -*-===//
//
// Kernels are generated at build time by moe-halide-gen for a few shapes
// (the variants each test file declares in `// kernel:` lines: the tiled and the small-shape
// path of each schedule). Each test runs the same computation as a moe op in
// the reference interpreter (double precision) and compares; one file per
// generator file (<Generator>KernelTest.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TEST_KERNELTESTUTIL_H
#define MOEC_TEST_KERNELTESTUTIL_H

#include "HalideBuffer.h"
#include "Interpreter.h"
#include "KernelHeaders.h"

#include "KernelVariants.h"
#include "moe/InitAllDialects.h"
#include "moert/Aligned.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using Halide::Runtime::Buffer;
// Every buffer handed to a kernel is 64-byte aligned, as in generated
// binaries: Halide may use aligned vector loads and stores on them.
using Floats = moert::AlignedFloats;
using ::moec::reference::Interpreter;
using ::moec::reference::Tensor;

namespace kerneltest {

/// MoEKernelTestsOpenCL: the kernels run on an OpenCL device, whose kernels
/// do not check indices (docs/Targets.md).
#ifdef MOEC_KERNEL_TEST_DEVICE
inline constexpr bool kDevice = true;
#else
inline constexpr bool kDevice = false;
#endif

/// Kernel errors are recorded here instead of aborting the process (the
/// runtime installs the same kind of handler).
inline std::string lastError;
inline void recordError(void *, const char *message) { lastError = message; }
struct InstallHandler {
  InstallHandler() { halide_set_error_handler(recordError); }
};
inline InstallHandler installHandler;

inline Floats randomVector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Floats v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

inline Tensor tensorOf(const Floats &v, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(std::move(shape));
  t.data.assign(v.begin(), v.end());
  return t;
}

/// Runs `body` (ops over the arguments, returning its results) as @k in the
/// reference interpreter.
inline std::vector<Tensor> interpret(const std::string &signature, const std::string &body,
                                     const std::vector<Tensor> &args) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string source = "func.func @k" + signature + " {\n" + body + "\n}";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  EXPECT_TRUE(module) << source;
  if (!module)
    return {};
  Interpreter interp(*module);
  std::vector<Tensor> out;
  std::string error;
  EXPECT_TRUE(interp.run("k", args, out, error)) << error;
  return out;
}

/// The unit round-off of f32.
constexpr double kUnitRoundoff = 0x1p-24;

/// Headroom over the first-order bound below: the worst comparison in
/// these tests uses a third of the tolerance (AdamW's moments), most under
/// a tenth (MOEC_KERNEL_TOLERANCE_REPORT=1 prints each); a wrong kernel
/// fails (ToleranceCatchesWrongKernels).
constexpr double kToleranceSlack = 4;

/// The largest difference expectClose allows for element `i` of `want`:
/// a chain of f32 reductions of total length `chain` rounds each result by
/// at most chain * u times the magnitudes it summed (first order), and the
/// output's root mean square stands in for those magnitudes where the sum
/// cancelled.
inline double tolerance(const Tensor &want, size_t i, int chain, double rms) {
  return kToleranceSlack * chain * kUnitRoundoff * (std::fabs(want.data[i]) + rms);
}

inline double rootMeanSquare(const Tensor &t) {
  double sum = 0;
  for (double v : t.data)
    sum += v * v;
  return t.data.empty() ? 0 : std::sqrt(sum / static_cast<double>(t.data.size()));
}

/// f32 kernel output against the double-precision reference. `chain` is the
/// summed length of the reductions on the longest path from the inputs to
/// an output (a matmul of inner dimension k adds k, a softmax over n adds
/// n, an elementwise op adds 1). The tolerance is about 1e-5 relative for
/// chains of a few hundred: a wrong scale, or one element off by 0.1%, fails.
/// MOEC_KERNEL_TOLERANCE_REPORT=1 prints each comparison's worst
/// difference as a fraction of its tolerance.
inline void expectClose(const Floats &got, const Tensor &want, int chain) {
  ASSERT_EQ(got.size(), want.data.size());
  double rms = rootMeanSquare(want), worst = 0;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double diff = std::fabs(got[i] - want.data[i]), tol = tolerance(want, i, chain, rms);
    worst = std::max(worst, tol > 0 ? diff / tol : diff > 0 ? INFINITY : 0);
    if (!(diff <= tol) && bad++ == 0)
      first = i;
  }
  if (bad)
    ADD_FAILURE() << bad << " of " << got.size() << " elements beyond the tolerance (chain "
                  << chain << "); first: element " << first << ": " << got[first] << " vs "
                  << want.data[first] << ", difference " << std::fabs(got[first] - want.data[first])
                  << " > " << tolerance(want, first, chain, rms);
  if (std::getenv("MOEC_KERNEL_TOLERANCE_REPORT"))
    std::printf("tolerance used: %.3f (chain %d, %zu elements)\n", worst, chain, got.size());
}

/// A row-major [outer, inner] array as a Halide buffer (dim 0 innermost).
inline Buffer<float> view(Floats &v, int inner, int outer) {
  return Buffer<float>(v.data(), inner, outer);
}

inline std::string type2(int a, int b) {
  return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "xf32>";
}

inline std::string type3(int a, int b, int c) {
  return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "x" + std::to_string(c) +
         "xf32>";
}

} // namespace kerneltest

using namespace kerneltest;

#endif // MOEC_TEST_KERNELTESTUTIL_H
