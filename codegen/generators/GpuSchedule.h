//===- GpuSchedule.h - the schedule of every GPU kernel ---------*- C++ -*-===//
//
// On a GPU target (OpenCL, CUDA) every generator's schedule() declares its
// shapes and then calls scheduleForGpu instead of its CPU schedule. One rule
// for every family, from the pipeline's own structure:
// - outputs, and intermediates with update definitions (reductions,
//   scatters, scans; the anonymous sum()s included), are computed at root
//   on the device; other intermediates are inlined into their consumers;
// - each stage's pure dimensions map to the device grid: the innermost two
//   tiled 16 x 16 (one: 64 threads) over blocks and threads, the others
//   fused into a third block dimension; reduction domains loop inside each
//   thread, so every sum keeps the order the CPU schedule uses (no atomics:
//   results are deterministic);
// - an update without a pure dimension (a scan, a total) runs on one
//   device thread.
// Every split guards its tail, so any shape is valid. Contractions are
// plain (one output element per thread); shared-memory tiles for them are
// the next step.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_GPUSCHEDULE_H
#define MOEC_CODEGEN_GPUSCHEDULE_H

#include "Halide.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace moec_codegen {

namespace gpu_detail {

/// Maps `dims` (innermost first) of one stage onto blocks and threads.
template <typename S> void mapToGrid(S stage, const std::vector<Halide::Var> &dims) {
  using namespace Halide;
  const TailStrategy guard = TailStrategy::GuardWithIf;
  if (dims.empty()) {
    stage.gpu_single_thread();
    return;
  }
  const std::string n = dims[0].name();
  if (dims.size() == 1) {
    stage.gpu_tile(dims[0], Var(n + "_b"), Var(n + "_t"), 64, guard);
    return;
  }
  const std::string m = dims[1].name();
  stage.gpu_tile(dims[0], dims[1], Var(n + "_b"), Var(m + "_b"), Var(n + "_t"), Var(m + "_t"), 16,
                 16, guard);
  if (dims.size() == 2)
    return;
  Var outer = dims[2];
  for (size_t i = 3; i < dims.size(); ++i) {
    Var fused(outer.name() + "_" + dims[i].name());
    stage.fuse(outer, dims[i], fused);
    outer = fused;
  }
  stage.gpu_blocks(outer);
}

} // namespace gpu_detail

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

} // namespace moec_codegen

#endif // MOEC_CODEGEN_GPUSCHEDULE_H
