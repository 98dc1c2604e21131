//===- GpuSchedule.h - the schedule of every GPU kernel ---------*- C++ -*-===//
//
// On a GPU target (OpenCL, CUDA) every generator's schedule() declares its
// shapes and then calls scheduleForGpu instead of its CPU schedule. One rule
// for every family, from the pipeline's own structure:
// - outputs, and intermediates with update definitions (reductions,
//   scatters, scans; the anonymous sum()s included), are computed at root
//   on the device; other intermediates are inlined into their consumers;
// - each stage's pure dimensions map to the device grid: the innermost two
//   tiled 16 x 16 over threads (one: 64 threads), every block index fused
//   into one block dimension; reduction domains loop inside each thread,
//   each sum in one fixed order (no atomics: results are deterministic);
// - an update without a pure dimension (a scan, a total) runs on one
//   device thread.
// Every split guards its tail, so any shape is valid. A generator may
// schedule its contractions with scheduleContractionForGpu instead
// (shared-memory tiles; the linear layers and FFNs do), and split a long
// sum over tokens with gpuChunkSum (the norms' and router's weight
// gradients do); the others are plain, one output element per thread.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_GPUSCHEDULE_H
#define MOEC_CODEGEN_GPUSCHEDULE_H

#include "Halide.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace moec_codegen {

namespace gpu_detail {

/// Maps `dims` (innermost first) of one stage onto blocks and threads: the
/// innermost one or two tiled over threads, every block index fused into
/// one block dimension (CUDA allows 2^31 - 1 blocks along x, 65535 along y
/// and z).
template <typename S> void mapToGrid(S stage, const std::vector<Halide::Var> &dims) {
  using namespace Halide;
  const TailStrategy guard = TailStrategy::GuardWithIf;
  if (dims.empty()) {
    stage.gpu_single_thread();
    return;
  }
  const int tiled = dims.size() == 1 ? 1 : 2, width = tiled == 1 ? 64 : 16;
  std::vector<Var> threads;
  std::vector<VarOrRVar> order;
  Var blocks;
  for (int i = 0; i < tiled; ++i) {
    Var b(dims[i].name() + "_b"), t(dims[i].name() + "_t");
    stage.split(dims[i], b, t, width, guard);
    threads.push_back(t);
    if (i == 0) {
      blocks = b;
    } else {
      Var fused(blocks.name() + "_" + b.name());
      stage.reorder(threads[0], threads[1], blocks, b);
      stage.fuse(blocks, b, fused);
      blocks = fused;
    }
  }
  for (size_t i = tiled; i < dims.size(); ++i) {
    Var fused(blocks.name() + "_" + dims[i].name());
    stage.fuse(blocks, dims[i], fused);
    blocks = fused;
  }
  if (tiled == 1)
    stage.gpu_blocks(blocks).gpu_threads(threads[0]);
  else
    stage.gpu_blocks(blocks).gpu_threads(threads[0], threads[1]);
}

} // namespace gpu_detail

/// A pure stage computed at root on the device, its `dims` (innermost
/// first) mapped onto the grid as scheduleForGpu maps every stage.
inline void computeRootOnGpu(Halide::Func f, const std::vector<Halide::Var> &dims) {
  f.compute_root();
  gpu_detail::mapToGrid(f, dims);
}

/// Rows per chunk of gpuChunkSum.
constexpr int kGpuChunkRows = 64;

/// The chunks of gpuChunkSum over `rows` rows.
inline int gpuChunks(int rows) { return (rows + kGpuChunkRows - 1) / kGpuChunkRows; }

/// The sum of term(row) over chunk `k`'s rows (kGpuChunkRows of them, the
/// last chunk's past `rows` adding 0): a long sum over tokens split so that
/// scheduleForGpu gives each chunk its own device thread; the consumer
/// then adds the gpuChunks(rows) chunks in order (deterministic, without
/// atomics).
template <typename Term> Halide::Expr gpuChunkSum(Halide::Expr k, int rows, Term term) {
  using namespace Halide;
  RDom r(0, kGpuChunkRows);
  Expr row = k * kGpuChunkRows + r;
  return sum(select(row < rows, term(min(row, rows - 1)), 0.0f));
}

/// Schedules every stage of `pipeline` (a generator's get_pipeline()) for
/// the target's GPU as the header comment says.
inline void scheduleForGpu(Halide::Pipeline pipeline) {
  using namespace Halide;
  std::vector<Func> outputs = pipeline.outputs();
  std::set<std::string> outputNames;
  std::map<std::string, Internal::Function> env;
  for (Func f : outputs) {
    outputNames.insert(f.name());
    std::map<std::string, Internal::Function> calls = Internal::find_transitive_calls(f.function());
    env.insert(calls.begin(), calls.end());
  }
  for (auto &[name, fn] : env) {
    bool output = outputNames.count(name) > 0;
    if (!output && !fn.has_update_definition())
      continue; // inlined
    Func f(fn);
    if (!output)
      f.compute_root();
    std::vector<Var> pure;
    for (const std::string &a : fn.args())
      pure.emplace_back(a);
    gpu_detail::mapToGrid(f, pure);
    // An update's pure dimensions: the arguments that are the pure
    // definition's variable at the same position.
    for (size_t u = 0; u < fn.updates().size(); ++u) {
      std::vector<Var> dims;
      const std::vector<Expr> &lhs = fn.updates()[u].args();
      for (size_t i = 0; i < lhs.size() && i < fn.args().size(); ++i)
        if (const auto *v = lhs[i].as<Internal::Variable>(); v && v->name == fn.args()[i])
          dims.emplace_back(v->name);
      gpu_detail::mapToGrid(f.update(static_cast<int>(u)), dims);
    }
  }
}

/// A contraction's schedule with shared-memory tiles: `out`(n, m) reads
/// `prod`(n, m), whose update u adds the sum over its reduction variable k
/// of a(k, m) b(n, k), where `tiles`[u] are that update's a and b as Funcs
/// whose first two variables the sum reads (their element conversions, or
/// wrappers: Func::in). With `batch` (one variable, such as the expert of a
/// grouped contraction), out(n, m, batch): its batch index is one more
/// block dimension, and a tile's third variable is the block's batch index.
/// Each block computes a 16 x 16 tile of `out`, one element per thread;
/// each sum runs over k in steps of 16, and each step first loads the 16 x
/// 16 tiles of a and b it reads into shared memory, one element per thread,
/// so each element of a and b is read from device memory once per block
/// instead of once per output. Every split guards its tail.
inline void scheduleContractionForGpu(Halide::Func out, Halide::Var n, Halide::Var m,
                                      Halide::Func prod,
                                      const std::vector<std::vector<Halide::Func>> &tiles,
                                      const std::vector<Halide::Var> &batch = {}) {
  using namespace Halide;
  const int tile = 16;
  const TailStrategy guard = TailStrategy::GuardWithIf;
  // Under trial, not yet measured on a GPU (docs/Targets.md): with
  // MOEC_GPU_CONTRACTION=registers when the kernel is generated, each
  // thread accumulates a 4 x 4 block of outputs in registers, reading both
  // operands through the caches (a block of 16 x 4 threads covers 64 x 16
  // outputs); registers8: 8 x 4 per thread, 128 x 32 per block of 16 x 8.
  // Each output's sum runs over k in the same order, so the results are
  // the shared-memory schedule's, bit for bit.
  const std::string variant =
      std::getenv("MOEC_GPU_CONTRACTION") ? std::getenv("MOEC_GPU_CONTRACTION") : "shared";
  if (variant != "shared" && variant != "registers" && variant != "registers8") {
    std::fprintf(stderr, "MOEC_GPU_CONTRACTION=%s: expected shared, registers or registers8\n",
                 variant.c_str());
    std::exit(1);
  }
  if (variant != "shared") {
    const bool big = variant == "registers8";
    Var ni("ni"), mi("mi"), nii("nii"), mii("mii");
    out.tile(n, m, ni, mi, big ? 128 : 64, big ? 32 : 16, guard)
        .tile(ni, mi, nii, mii, big ? 8 : 4, 4, guard)
        .unroll(nii)
        .unroll(mii)
        .gpu_blocks(n, m)
        .gpu_threads(ni, mi);
    if (!batch.empty())
      out.gpu_blocks(batch[0]);
    prod.compute_at(out, ni).unroll(n).unroll(m);
    for (size_t u = 0; u < tiles.size(); ++u) {
      RVar k = prod.rvars(static_cast<int>(u))[0];
      prod.update(static_cast<int>(u)).reorder(n, m, k).unroll(n).unroll(m);
    }
    return;
  }
  Var nb("nb"), mb("mb"), nt("nt"), mt("mt");
  out.gpu_tile(n, m, nb, mb, nt, mt, tile, tile, guard);
  if (!batch.empty())
    out.gpu_blocks(batch[0]);
  prod.compute_at(out, nb).gpu_threads(n, m);
  for (size_t u = 0; u < tiles.size(); ++u) {
    RVar k = prod.rvars(static_cast<int>(u))[0];
    RVar ko("ko" + std::to_string(u)), ki("ki" + std::to_string(u));
    prod.update(static_cast<int>(u))
        .split(k, ko, ki, tile, guard)
        .reorder(ki, n, m, ko)
        .gpu_threads(n, m);
    for (Func t : tiles[u]) {
      std::vector<Var> args = t.args();
      t.compute_at(prod, ko).gpu_threads(args[0], args[1]); // ko's name is this update's
    }
  }
}

} // namespace moec_codegen

#endif // MOEC_CODEGEN_GPUSCHEDULE_H
