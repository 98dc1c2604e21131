//===- Shards.h - a rank's blocks and the full tensors ----------*- C++ -*-===//
//
// Conversions between a rank's block of a parameter (or of a moment) and
// the full tensor: expert shards over ep (the placement's rows), tensor-
// parallel slices over tp, ZeRO shards of the moments. Checkpoints hold full
// tensors, so any grid resumes them; local steps' --save-replicas writes
// them too. The gathers are collectives: every rank of the group calls them.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_SHARDS_H
#define MOERT_LIB_TRAINER_SHARDS_H

#include "Rank.h"

#include "moert/Checkpoint.h"

namespace moert::trainer {

/// Parameters and AdamW moments as full tensors (NAME, NAME.adam_m,
/// NAME.adam_v): expert shards gathered over their ep group.
void gatherParameters(Rank &r, moert::TensorMap &tensors);
/// The shape of parameter `i`'s full tensor.
std::vector<int64_t> fullShape(const Rank &r, int i);
/// Parameter `i`'s full tensor (a collective: every rank calls it).
std::vector<float> gatherParameter(Rank &r, int i);
/// The full tensor of parameter `i` (or of one of its moments) from this
/// rank's block `local`.
std::vector<float> gatherFull(Rank &r, const moert::AlignedFloats &local, int i);
/// This rank's block of parameter `i` from the full tensor `full`: the rows
/// rowsOf gives it (zeros at empty positions).
void keepRows(const Rank &r, const float *full, moert::AlignedFloats &local, int i);
/// ZeRO: the rank's whole block of a moment (its group's shards gathered),
/// and the rank's shard of it kept.
moert::AlignedFloats gatherZero(Rank &r, const moert::AlignedFloats &shard, int i);
void keepZero(const Rank &r, const moert::AlignedFloats &block, moert::AlignedFloats &shard, int i);
/// Tensor parallelism: this tp rank's slice of the rank's block with the
/// tp dimension whole (`full`), and that block gathered over tp.
void sliceTp(const Rank &r, const float *full, moert::AlignedFloats &slice, int i);
moert::AlignedFloats gatherTp(Rank &r, const moert::AlignedFloats &slice, int i);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_SHARDS_H
