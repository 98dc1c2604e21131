//===- BufferPlan.h - the step's tensors in two arenas ----------*- C++ -*-===//
//
// The buffer plan of moe-lower-to-kernels, also redone by moe-schedule
// after it moves collectives: every tensor of a step gets an offset in the
// activation arena (0) or the gradient arena (1, the gradients the
// optimiser reads), so that tensors alive at the same time never overlap.
// A value is alive from the op defining it to its last use; a `moe.wait`'s
// results are its operands' buffers, and an async all-reduce reads its
// input until its wait.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_LIB_BUFFERPLAN_H
#define MOE_TRANSFORMS_LIB_BUFFERPLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {

/// Arena peaks over the functions planned so far, and the optimiser state
/// (two moments per updated parameter) summed over them.
struct BufferPeaks {
  int64_t activation = 0, gradient = 0, state = 0;
};

/// Plans `fn`'s tensors: sets `buffers` on launches and `moe.buffers` on
/// other ops with results (arena, offset, bytes per result).
/// Every buffer's offset is a multiple of `alignment` bytes.
void planBuffers(func::FuncOp fn, BufferPeaks &peaks, int64_t alignment);

/// Plans `fns` again after a pass moved or added collectives, and updates
/// the module's buffer plan summary (its arena peaks and total).
void replanBuffers(ModuleOp module, ArrayRef<func::FuncOp> fns);

/// The functions of `module` with a body (the steps a pass rewrites).
SmallVector<func::FuncOp> stepFunctions(ModuleOp module);

/// One past the largest `moe.bucket` id in `module` (0 when none): the
/// first id a pass may give a new background collective.
int64_t nextBucketId(ModuleOp module);

/// Bytes of a tensor value's type (0 for non-tensors).
int64_t tensorBytes(Type type);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_LIB_BUFFERPLAN_H
