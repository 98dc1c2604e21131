//===- KernelTest.cpp - generated Halide kernels against plain references -===//
//
// Kernels are generated at build time by moe-halide-gen for a few shapes,
// both the tiled path and the small-shape path of each schedule, and must
// match straightforward double-precision loops.
//
//===----------------------------------------------------------------------===//

#include "HalideBuffer.h"
#include "linear_small.h"
#include "linear_tiled.h"
#include "linear_grad_small.h"
#include "linear_grad_tiled.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using Halide::Runtime::Buffer;

namespace {

/// Kernel errors are recorded here instead of aborting the process (the
/// runtime installs the same kind of handler).
std::string lastError;
void recordError(void *, const char *message) { lastError = message; }
struct InstallHandler {
  InstallHandler() { halide_set_error_handler(recordError); }
} installHandler;

std::vector<float> randomVector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// A row-major [outer, inner] array as a Halide buffer (dim 0 innermost).
Buffer<float> view(std::vector<float> &v, int inner, int outer) {
  return Buffer<float>(v.data(), inner, outer);
}

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 int reduction) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * reduction * (1.0 + std::fabs(want[i])))
        << "element " << i;
}

/// Runs a linear kernel of shape (m, k, n) and checks it.
template <typename Kernel>
void checkLinear(Kernel kernel, int m, int k, int n, bool bias, bool residual) {
  auto x = randomVector(m * k, 1), w = randomVector(k * n, 2),
       b = randomVector(bias ? n : 1, 3), r = randomVector(residual ? m * n : 1, 4);
  std::vector<float> y(m * n, NAN);
  auto bx = view(x, k, m), bw = view(w, n, k), by = view(y, n, m);
  Buffer<float> bb(b.data(), (int)b.size());
  auto br = residual ? view(r, n, m) : view(r, 1, 1);
  ASSERT_EQ(kernel(bx, bw, bb, br, by), 0);
  std::vector<double> want(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = bias ? b[j] : 0.0;
      for (int l = 0; l < k; ++l)
        s += double(x[i * k + l]) * w[l * n + j];
      want[i * n + j] = s + (residual ? r[i * n + j] : 0.0);
    }
  expectClose(y, want, k);
}

TEST(HalideKernelTest, LinearTiledWithBiasAndResidual) {
  checkLinear(linear_tiled, 8, 16, 24, true, true);
}

TEST(HalideKernelTest, LinearSmallShape) {
  checkLinear(linear_small, 3, 5, 6, false, false);
}

template <typename Kernel>
void checkLinearGrad(Kernel kernel, int m, int k, int n) {
  auto x = randomVector(m * k, 5), w = randomVector(k * n, 6),
       dy = randomVector(m * n, 7);
  std::vector<float> dx(m * k, NAN), dw(k * n, NAN);
  auto bx = view(x, k, m), bw = view(w, n, k), bdy = view(dy, n, m),
       bdx = view(dx, k, m), bdw = view(dw, n, k);
  ASSERT_EQ(kernel(bx, bw, bdy, bdx, bdw), 0);
  std::vector<double> wantDx(m * k), wantDw(k * n);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l)
      for (int j = 0; j < n; ++j) {
        wantDx[i * k + l] += double(dy[i * n + j]) * w[l * n + j];
        wantDw[l * n + j] += double(x[i * k + l]) * dy[i * n + j];
      }
  expectClose(dx, wantDx, n);
  expectClose(dw, wantDw, m);
}

TEST(HalideKernelTest, LinearGradTiled) { checkLinearGrad(linear_grad_tiled, 8, 16, 24); }
TEST(HalideKernelTest, LinearGradSmallShape) { checkLinearGrad(linear_grad_small, 3, 5, 7); }

TEST(HalideKernelTest, WrongShapesAreErrorsNotCrashes) {
  // linear_small is specialised to x [3, 5]; a [4, 5] input is refused.
  std::vector<float> x(4 * 5), w(5 * 6), b(1), r(1), y(3 * 6);
  Buffer<float> bx(x.data(), 5, 4), bw(w.data(), 6, 5), bb(b.data(), 1),
      br(r.data(), 1, 1), by(y.data(), 6, 3);
  lastError.clear();
  EXPECT_NE(linear_small(bx, bw, bb, br, by), 0);
  EXPECT_NE(lastError.find("x"), std::string::npos) << lastError;
}

} // namespace
