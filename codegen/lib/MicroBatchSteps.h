//===- MicroBatchSteps.h - what a micro-batched step runs once --*- C++ -*-===//
//
// A step of M micro-batches (moe.micro_batches, moe-micro-batches) runs the
// lowered training step once per micro-batch; what acts on the summed
// gradients (their collectives, the global norm, the learning rate, the
// optimiser, ZeRO's gathers) runs once, in the last. This analysis says
// which ops those are and which gradients are summed before them.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_LIB_MICROBATCHSTEPS_H
#define MOEC_CODEGEN_LIB_MICROBATCHSTEPS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace moec::codegen {

struct MicroBatchSteps {
  /// Ops run once per step, in the last micro-batch: gradient
  /// collectives, the optimiser and everything that reads their results.
  llvm::DenseSet<mlir::Operation *> once;
  /// The gradients the once ops read as each micro-batch computes them,
  /// in step order, with their offsets (floats) in the accumulator: each is
  /// summed over the micro-batches right after it is computed and, in the
  /// last, replaced by the mean (moert_step_accumulate).
  llvm::MapVector<mlir::Value, int64_t> accumulated;
  int64_t accumulatorFloats = 0;

  /// The analysis of lowered training step `step` (planned buffers). Fails,
  /// with an error at the op, when a once op reads a per-micro-batch value
  /// that is not an f32 gradient, or a per-micro-batch op reads a gradient
  /// a once op reads too (it would see the mean in the last micro-batch).
  static mlir::FailureOr<MicroBatchSteps> analyse(mlir::func::FuncOp step);
};

} // namespace moec::codegen

#endif // MOEC_CODEGEN_LIB_MICROBATCHSTEPS_H
