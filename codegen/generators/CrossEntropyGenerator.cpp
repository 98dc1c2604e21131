//===- CrossEntropyGenerator.cpp - Halide generators of cross_entropy -----===//
//
// `cross_entropy`:      loss = mean_t (logsumexp(l[t, :]) - l[t, target[t]])
// `cross_entropy_grad`: dl[t, v] = (softmax(l[t, :])[v] - [v == target[t]]) dloss / T
// Targets outside [0, vocab) make the kernel fail with an error.
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;
using moec_codegen::checkedIndex;
using moec_codegen::constrainDense;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

/// logsumexp per row, with the row maximum subtracted for stability. The
/// maximum is computed once per row, before the sum (`scheduleRowMax`):
/// left inline, the sum's loop would recompute it for every element, a
/// vocab x vocab loop per token.
struct LogSumExp {
  Func max, lse;
};
LogSumExp logSumExp(Func logits, int vocab, const char *name) {
  Var t;
  RDom c(0, vocab);
  Func mx(std::string(name) + "_max"), lse(name);
  mx(t) = maximum(logits(c, t));
  lse(t) = mx(t) + log(sum(exp(logits(c, t) - mx(t))));
  return {mx, lse};
}

/// The CPU schedule of a row's maximum: once per row `t` of `lse`.
void scheduleRowMax(LogSumExp &l, Var t) { l.max.compute_at(l.lse, t); }

/// 16-bit logits: each token's row widened to f32 once, vectorised, at
/// `consumer`'s token loop `t` (on the stack, vocab floats), so the row's
/// reductions do not convert element by element (a scalar f16 conversion
/// is a call into Halide's runtime). f32 logits are read in place.
/// 16-bit logits only: `vocab` floats per token row, up to 2^19.
void stageRows(Func logitsF, Func consumer, Var t, int vocab) {
  if (vocab > (1 << 19)) // more than 2 MB of a worker thread's stack
    return;
  Var c = logitsF.args()[0];
  logitsF.compute_at(consumer, t).store_in(MemoryType::Stack);
  if (vocab >= 16)
    logitsF.vectorize(c, 16, TailStrategy::GuardWithIf);
}

class CrossEntropy : public moec_codegen::MoEGenerator<CrossEntropy> {
public:
  GeneratorParam<int> tokens{"tokens", 1};
  GeneratorParam<int> vocab{"vocab", 1};
  /// Weighs the mean (a data replica's share of the batch, moe.cross_entropy).
  GeneratorParam<double> scale{"scale", 1.0};

  Input<Buffer<void, 2>> logits{"logits"};
  Input<Buffer<int32_t, 1>> targets{"targets"};
  Output<Buffer<float, 0>> loss{"loss"};

  LogSumExp lse;
  Func target{"target"}, logitsF;

  void configure() { storage(logits); }

  void generate() {
    Var t;
    logitsF = widened(logits);
    lse = logSumExp(logitsF, vocab, "lse");
    target(t) = checkedIndex(get_target(), targets(t), 0, vocab, "target out of range:");
    RDom r(0, tokens);
    // (The target logits: one element per token, read directly.)
    Expr total = sum(lse.lse(r) - cast<float>(logits(clamp(target(r), 0, vocab - 1), r)));
    // A weighted mean folds its weight into one factor, scale / tokens: a
    // replica's (its share x replicas / batch) / its tokens is the same for
    // every replica, so each scales its tokens as the batch mean does.
    loss() = scale == 1.0 ? total / (float)(int)tokens
                          : total * (float)((double)scale / (double)(int)tokens);
  }

  void schedule() {
    constrainDense(logits, {vocab, tokens});
    targets.dim(0).set_bounds(0, tokens);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    // Rows in parallel, 8 to a task; the maximum and a 16-bit row's staging
    // at each row (`row`), so the stack holds one row.
    Var rows("rows"), row("row");
    lse.lse.compute_root().split(lse.lse.args()[0], rows, row, 8, TailStrategy::GuardWithIf);
    lse.lse.parallel(rows);
    scheduleRowMax(lse, row);
    target.compute_root();
    if (!isF32(logits))
      stageRows(logitsF, lse.lse, row, vocab);
  }
};

class CrossEntropyGrad : public moec_codegen::MoEGenerator<CrossEntropyGrad> {
public:
  GeneratorParam<int> tokens{"tokens", 1};
  GeneratorParam<int> vocab{"vocab", 1};
  GeneratorParam<double> scale{"scale", 1.0};

  Input<Buffer<void, 2>> logits{"logits"};
  Input<Buffer<int32_t, 1>> targets{"targets"};
  Input<Buffer<float, 0>> dloss{"dloss"};
  Output<Buffer<void, 2>> dlogits{"dlogits"};

  Var v{"v"}, t{"t"};
  LogSumExp lse;
  Func target{"target"}, logitsF;

  void configure() { storage(logits, dlogits); }

  void generate() {
    logitsF = widened(logits);
    lse = logSumExp(logitsF, vocab, "lse");
    target(t) = checkedIndex(get_target(), targets(t), 0, vocab, "target out of range:");
    Expr onehot = select(v == target(t), 1.0f, 0.0f);
    Expr diff = exp(logitsF(v, t) - lse.lse(t)) - onehot;
    dlogits(v, t) = narrowed(
        dlogits, scale == 1.0 ? diff * dloss() / (float)(int)tokens
                              : diff * (dloss() * (float)((double)scale / (double)(int)tokens)));
  }

  void schedule() {
    constrainDense(logits, {vocab, tokens});
    targets.dim(0).set_bounds(0, tokens);
    constrainDense(dlogits, {vocab, tokens});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    target.compute_root();
    lse.lse.compute_at(dlogits, t);
    scheduleRowMax(lse, lse.lse.args()[0]);
    dlogits.parallel(t);
    if (vocab >= vec)
      dlogits.vectorize(v, vec, TailStrategy::GuardWithIf);
    if (!isF32(logits))
      stageRows(logitsF, dlogits, t, vocab);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CrossEntropy, cross_entropy)
HALIDE_REGISTER_GENERATOR(CrossEntropyGrad, cross_entropy_grad)
