//===- FFNBench.cpp - grouped expert FFN kernels against OpenBLAS sgemm ---===//
//
// For each shape (experts E, capacity C, width D, hidden F), side by side in
// one process, alternating: our generated SwiGLU expert FFN forward +
// backward kernels in both forms (Halide-scheduled contractions, and
// OpenBLAS extern stages with the activations in Halide, `blas=true`, what
// `moec --gemm=auto` picks for these shapes), and OpenBLAS sgemm running
// the same nine GEMMs per
// expert (forward: x Wg, x Wu, h Wd; backward: dy Wd^T, h^T dy, dhu Wu^T,
// dhg Wg^T, x^T dhu, x^T dhg). GFLOP/s counts those nine GEMMs for both;
// our kernels also apply the activation and its derivative, OpenBLAS does
// not. As in a compiled training step, the forward saves the pre-activations
// (x Wg, x Wu) and the backward reads them. Medians over the repetitions. Both use the same number
// of threads (argument 1, default: all cores). Kernel scratch comes from the
// runtime's pool, as in generated training binaries.
//
// Then the routed rows only (`moe-routed-rows`, what a compiled step runs):
// each expert holds tokens in its first count_e slots, balanced (80% of C
// each, capacity factor 1.25) or collapsed (a few experts full, most nearly
// empty: 36% of the slots), and our OpenBLAS form with the counts runs
// against OpenBLAS alone on the same routed rows (nine GEMMs per expert,
// m = count_e), and against our form that computes every slot.
//
//===----------------------------------------------------------------------===//

#include "HalideBuffer.h"
#include "HalideRuntime.h"
#include "moert/BlasCore.h"
#include "moert/ScratchPool.h"
#include "bench_ffn_medium.h"
#include "bench_ffn_medium_blas.h"
#include "bench_ffn_medium_blas_grad.h"
#include "bench_ffn_medium_grad.h"
#include "bench_ffn_medium_routed.h"
#include "bench_ffn_medium_routed_grad.h"
#include "bench_ffn_small.h"
#include "bench_ffn_small_blas.h"
#include "bench_ffn_small_blas_grad.h"
#include "bench_ffn_small_grad.h"
#include "bench_ffn_small_routed.h"
#include "bench_ffn_small_routed_grad.h"
#include "bench_ffn_tiny.h"
#include "bench_ffn_tiny_blas.h"
#include "bench_ffn_tiny_blas_grad.h"
#include "bench_ffn_tiny_grad.h"
#include "bench_ffn_tiny_routed.h"
#include "bench_ffn_tiny_routed_grad.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

using Halide::Runtime::Buffer;

namespace {

using B = halide_buffer_t *;
using Kernel = int (*)(B, B, B, B, B, B, B, B);
using GradKernel = int (*)(B, B, B, B, B, B, B, B, B, B, B, B);

struct Shape {
  const char *name;
  int E, C, D, F;
  Kernel fwd, blasFwd;
  GradKernel bwd, blasBwd;
  Kernel routedFwd;
  GradKernel routedBwd;
};

double seconds(const std::function<void()> &fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Buffer<float> random3(int a, int b, int c, std::mt19937 &rng) {
  Buffer<float> buf(a, b, c);
  std::normal_distribution<float> n(0.0f, 0.1f);
  buf.for_each_value([&](float &v) { v = n(rng); });
  return buf;
}

void sgemm(bool ta, bool tb, int m, int n, int k, const float *a, const float *b, float *c,
           float beta) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

} // namespace

int main(int argc, char **argv) {
  // OpenBLAS's best kernels for this CPU, as in a training binary.
  moert::selectBlasCore(argv);
  int threads = argc > 1 ? std::atoi(argv[1]) : (int)std::thread::hardware_concurrency();
  int reps = argc > 2 ? std::atoi(argv[2]) : 15;
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "usage: %s [threads] [repetitions]\n", argv[0]);
    return 1;
  }
  halide_set_num_threads(threads);
  // Scratch from the runtime's pool, as in a generated training binary.
  halide_set_custom_malloc([](void *, size_t size) { return moert_scratch_alloc(size); });
  halide_set_custom_free([](void *, void *ptr) { moert_scratch_free(ptr); });
  moert_scratch_set_limit(int64_t(1) << 30);
  openblas_set_num_threads(threads);
  Shape shapes[] = {
      {"tiny (examples/models/tiny.json)", 4, 320, 64, 128, bench_ffn_tiny, bench_ffn_tiny_blas,
       bench_ffn_tiny_grad, bench_ffn_tiny_blas_grad, bench_ffn_tiny_routed,
       bench_ffn_tiny_routed_grad},
      {"small (examples/models/small.json)", 8, 1280, 256, 512, bench_ffn_small,
       bench_ffn_small_blas, bench_ffn_small_grad, bench_ffn_small_blas_grad,
       bench_ffn_small_routed, bench_ffn_small_routed_grad},
      {"medium", 8, 1024, 512, 1024, bench_ffn_medium, bench_ffn_medium_blas, bench_ffn_medium_grad,
       bench_ffn_medium_blas_grad, bench_ffn_medium_routed, bench_ffn_medium_routed_grad},
  };
  std::printf("{\"threads\": %d, \"repetitions\": %d, \"results\": [\n", threads, reps);
  bool first = true;
  for (const Shape &s : shapes) {
    std::mt19937 rng(1);
    const int E = s.E, C = s.C, D = s.D, F = s.F;
    Buffer<float> x = random3(D, C, E, rng), up = random3(F, D, E, rng),
                  gate = random3(F, D, E, rng), down = random3(D, F, E, rng),
                  dy = random3(D, C, E, rng);
    Buffer<float> y(D, C, E), dx(D, C, E), dup(F, D, E), dgate(F, D, E), ddown(D, F, E),
        preUp(F, C, E), preGate(F, C, E);
    // OpenBLAS side: the same operands, row-major per expert.
    std::vector<float> hu(size_t(C) * F), hg(size_t(C) * F), h(size_t(C) * F), yb(size_t(C) * D),
        dh(size_t(C) * F), dxb(size_t(C) * D), dwu(size_t(D) * F), dwg(size_t(D) * F),
        dwd(size_t(F) * D);
    // One of our forward / backward kernel pairs on these operands (`rows`:
    // the routed counts, or the unit dummy of a kernel without them).
    int32_t noRows[1] = {0};
    std::vector<int32_t> counts(E, C);
    Buffer<int32_t> dummy(noRows, 1), rows(counts.data(), E);
    auto forward = [&](Kernel k, Buffer<int32_t> *r = nullptr) {
      return [&, k, r] {
        if (k(x, up, down, gate, r ? *r : dummy, y, preUp, preGate))
          std::abort();
      };
    };
    auto backward = [&](GradKernel k, Buffer<int32_t> *r = nullptr) {
      return [&, k, r] {
        if (k(x, up, down, gate, dy, preUp, preGate, r ? *r : dummy, dx, dup, ddown, dgate))
          std::abort();
      };
    };
    auto oursFwd = forward(s.fwd), externFwd = forward(s.blasFwd);
    auto oursBwd = backward(s.bwd), externBwd = backward(s.blasBwd);
    // (Our extern stages set OpenBLAS to one thread per task.)
    // OpenBLAS alone over the first m_e rows of each expert (all of them,
    // or the routed counts).
    bool routedOnly = false;
    auto m = [&](int e) { return routedOnly ? counts[e] : C; };
    auto blasFwd = [&] {
      openblas_set_num_threads(threads);
      for (int e = 0; e < E; ++e) {
        const int M = m(e); // rows computed
        const float *xe = x.data() + size_t(e) * C * D, *wu = up.data() + size_t(e) * D * F,
                    *wg = gate.data() + size_t(e) * D * F, *wd = down.data() + size_t(e) * F * D;
        sgemm(false, false, M, F, D, xe, wg, hg.data(), 0);
        sgemm(false, false, M, F, D, xe, wu, hu.data(), 0);
        sgemm(false, false, M, D, F, h.data(), wd, yb.data(), 0);
      }
    };
    auto blasBwd = [&] {
      openblas_set_num_threads(threads);
      for (int e = 0; e < E; ++e) {
        const int M = m(e); // rows computed
        const float *xe = x.data() + size_t(e) * C * D, *wu = up.data() + size_t(e) * D * F,
                    *wg = gate.data() + size_t(e) * D * F, *wd = down.data() + size_t(e) * F * D,
                    *dye = dy.data() + size_t(e) * C * D;
        sgemm(false, true, M, F, D, dye, wd, dh.data(), 0);
        sgemm(true, false, F, D, M, h.data(), dye, dwd.data(), 0);
        sgemm(false, true, M, D, F, hu.data(), wu, dxb.data(), 0);
        sgemm(false, true, M, D, F, hg.data(), wg, dxb.data(), 1);
        sgemm(true, false, D, F, M, xe, hu.data(), dwu.data(), 0);
        sgemm(true, false, D, F, M, xe, hg.data(), dwg.data(), 0);
      }
    };
    oursFwd();
    oursBwd();
    externFwd();
    externBwd();
    blasFwd();
    blasBwd();
    std::vector<double> oF, oB, xF, xB, bF, bB, oT, xT, bT;
    for (int r = 0; r < reps; ++r) {
      // OpenBLAS's idle threads spin for about 2^28 cycles (its
      // THREAD_TIMEOUT) after a call and would take the cores from ours:
      // let them go to sleep first (no training step runs beside BLAS),
      // then warm each side's caches and threads with one untimed call.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      oursFwd();
      oursBwd();
      oF.push_back(seconds(oursFwd));
      oB.push_back(seconds(oursBwd));
      externFwd();
      externBwd();
      xF.push_back(seconds(externFwd));
      xB.push_back(seconds(externBwd));
      blasFwd();
      blasBwd();
      bF.push_back(seconds(blasFwd));
      bB.push_back(seconds(blasBwd));
      oT.push_back(oF.back() + oB.back());
      xT.push_back(xF.back() + xB.back());
      bT.push_back(bF.back() + bB.back());
    }
    double gemm = 2.0 * E * double(C) * D * F; // one of the nine GEMMs
    auto g = [&](double n, const std::vector<double> &t) { return n * gemm / median(t) / 1e9; };
    std::printf("%s  {\"shape\": \"%s\", \"E\": %d, \"C\": %d, \"D\": %d, \"F\": %d, "
                "\"ours_gflops\": %.1f, \"ours_extern_blas_gflops\": %.1f, "
                "\"openblas_gflops\": %.1f, \"ratio\": %.3f, \"extern_blas_ratio\": %.3f, "
                "\"forward\": [%.1f, %.1f, %.1f], \"backward\": [%.1f, %.1f, %.1f]",
                first ? "" : ",\n", s.name, E, C, D, F, g(9, oT), g(9, xT), g(9, bT),
                g(9, oT) / g(9, bT), g(9, xT) / g(9, bT), g(3, oF), g(3, xF), g(3, bF), g(6, oB),
                g(6, xB), g(6, bB));
    // Routed rows only, in two routing regimes.
    struct Regime {
      const char *name;
      std::vector<double> fill; // per expert, cycled
    } regimes[] = {{"balanced", {0.8}}, {"collapsed", {1.0, 1.0, 0.3, 0.1, 0.0, 0.2, 0.05, 0.25}}};
    std::printf(", \"routed\": [");
    for (const Regime &regime : regimes) {
      int64_t routedRows = 0;
      for (int e = 0; e < E; ++e) {
        counts[e] = static_cast<int32_t>(C * regime.fill[e % regime.fill.size()]);
        routedRows += counts[e];
      }
      // Empty slots are zero, as moe.permute leaves them.
      for (int e = 0; e < E; ++e)
        for (int c = counts[e]; c < C; ++c)
          for (int k = 0; k < D; ++k)
            x(k, c, e) = dy(k, c, e) = 0.0f;
      auto routedFwd = forward(s.routedFwd, &rows);
      auto routedBwd = backward(s.routedBwd, &rows);
      std::vector<double> rT, dT, bRT;
      for (int r = 0; r < reps; ++r) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        routedFwd();
        routedBwd();
        rT.push_back(seconds(routedFwd) + seconds(routedBwd));
        externFwd();
        externBwd();
        dT.push_back(seconds(externFwd) + seconds(externBwd));
        routedOnly = true;
        blasFwd();
        blasBwd();
        bRT.push_back(seconds(blasFwd) + seconds(blasBwd));
        routedOnly = false;
      }
      double work = 9 * 2.0 * double(routedRows) * D * F / 1e9; // the nine GEMMs, routed rows
      std::printf("%s{\"regime\": \"%s\", \"routed_fraction\": %.3f, "
                  "\"ours_routed_gflops\": %.1f, \"openblas_routed_gflops\": %.1f, "
                  "\"ratio\": %.3f, \"ours_routed_ms\": %.3f, \"ours_every_slot_ms\": %.3f, "
                  "\"openblas_routed_ms\": %.3f}",
                  &regime == regimes ? "" : ", ", regime.name, double(routedRows) / (E * C),
                  work / median(rT), work / median(bRT), median(bRT) / median(rT), 1e3 * median(rT),
                  1e3 * median(dT), 1e3 * median(bRT));
    }
    std::printf("]}");
    std::fflush(stdout);
    first = false;
  }
  std::printf("\n]}\n");
  return 0;
}
