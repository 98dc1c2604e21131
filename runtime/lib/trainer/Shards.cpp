//===- Shards.cpp - a rank's blocks and the full tensors ------------------===//
//
// Shards.h: expert rows over ep, tensor-parallel slices over tp, ZeRO
// shards of the moments.
//
//===----------------------------------------------------------------------===//

#include "Shards.h"

#include <algorithm>

using namespace moert::trainer;

/// Parameters and moments as full tensors: expert shards are gathered over
/// their ep group (in ep order), so any grid can resume from the checkpoint.
std::vector<int64_t> moert::trainer::fullShape(const Rank &r, int i) {
  const moert_param_info &p = r.prog.params[i];
  std::vector<int64_t> shape(p.shape, p.shape + p.rank);
  if (p.tp_dim > 0)
    shape[p.tp_dim] *= r.tp;
  if (p.rank > 0)
    shape[0] = r.fullRows(i);
  return shape;
}

std::vector<float> moert::trainer::gatherParameter(Rank &r, int i) {
  const moert_param_info &p = r.prog.params[i];
  moert::AlignedFloats block = p.zero_parts > 1 ? moert::AlignedFloats(r.params[i].begin(),
                                                                       r.params[i].begin() + numel(p))
                                                : r.params[i];
  if (p.tp_dim >= 0)
    block = gatherTp(r, block, i);
  return gatherFull(r, block, i);
}

void moert::trainer::gatherParameters(Rank &r, moert::TensorMap &tensors) {
  for (int i = 0; i < r.prog.num_params; ++i) {
    const moert_param_info &p = r.prog.params[i];
    std::vector<int64_t> shape = fullShape(r, i);
    // ZeRO: the parameter without its tail, the moments' shards gathered;
    // tensor parallelism: the slices gathered; then the expert blocks.
    auto whole = [&](moert::AlignedFloats block) {
      if (p.tp_dim >= 0)
        block = gatherTp(r, block, i);
      return gatherFull(r, block, i);
    };
    bool zero = p.zero_parts > 1;
    tensors[p.name] = {shape, whole(zero ? moert::AlignedFloats(r.params[i].begin(),
                                                                r.params[i].begin() + numel(p))
                                         : r.params[i])};
    if (p.adamw)
      for (auto [suffix, k] : {std::pair<const char *, int>{".adam_m", 0}, {".adam_v", 1}})
        tensors[std::string(p.name) + suffix] = {
            shape, whole(zero ? gatherZero(r, r.moments[2 * i + k], i) : r.moments[2 * i + k])};
  }
}

/// The full tensor of parameter `i` (or of one of its moments) from this
/// rank's block: expert shards are gathered over the ep group and each
/// rank's rows put in their places.
std::vector<float> moert::trainer::gatherFull(Rank &r, const moert::AlignedFloats &local, int i) {
  const moert_param_info &p = r.prog.params[i];
  int parts = std::max(p.shard_parts, 1);
  if (parts == 1)
    return std::vector<float>(local.begin(), local.end());
  size_t rowSize = local.size() / static_cast<size_t>(p.shape[0]);
  std::vector<float> out(rowSize * static_cast<size_t>(r.fullRows(i)));
  std::vector<int32_t> epGroup(r.ep);
  int epSize = moert_grid_group(&r.ctx, MOERT_AXIS_EP, epGroup.data());
  std::vector<float> blocks(local.size() * parts);
  if (moert_all_gather(r.comm, local.data(), static_cast<int64_t>(local.size() * sizeof(float)),
                       blocks.data(), epGroup.data(), epSize) != 0)
    r.commError("gathering expert shards");
  // Replicas hold the same rows; empty positions (-1) none.
  for (int e = 0; e < parts; ++e) {
    std::vector<int64_t> rows = r.rowsOf(i, e);
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j] >= 0)
        std::copy_n(blocks.begin() + (e * rows.size() + j) * rowSize, rowSize,
                    out.begin() + rows[j] * rowSize);
  }
  return out;
}

moert::AlignedFloats moert::trainer::gatherZero(Rank &r, const moert::AlignedFloats &shard, int i) {
  const moert_param_info &p = r.prog.params[i];
  std::vector<int32_t> group(r.ranks);
  int size = moert_grid_group(&r.ctx, p.zero_axes, group.data());
  moert::AlignedFloats all(shard.size() * static_cast<size_t>(size));
  if (moert_all_gather(r.comm, shard.data(), static_cast<int64_t>(shard.size() * sizeof(float)),
                       all.data(), group.data(), size) != 0)
    r.commError("gathering ZeRO shards");
  all.resize(static_cast<size_t>(numel(p)));
  return all;
}

/// [outer, extent, inner] around parameter `i`'s tp dimension (its slice).
static void aroundTp(const moert_param_info &p, int64_t &outer, int64_t &extent, int64_t &inner) {
  outer = 1, inner = 1, extent = p.shape[p.tp_dim];
  for (int d = 0; d < p.tp_dim; ++d)
    outer *= p.shape[d];
  for (int d = p.tp_dim + 1; d < p.rank; ++d)
    inner *= p.shape[d];
}

void moert::trainer::sliceTp(const Rank &r, const float *full, moert::AlignedFloats &slice, int i) {
  const moert_param_info &p = r.prog.params[i];
  int64_t outer, extent, inner, t = r.rank % r.tp;
  aroundTp(p, outer, extent, inner);
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(full + (o * r.tp + t) * extent * inner, extent * inner,
                slice.begin() + o * extent * inner);
}

moert::AlignedFloats moert::trainer::gatherTp(Rank &r, const moert::AlignedFloats &slice, int i) {
  const moert_param_info &p = r.prog.params[i];
  std::vector<int32_t> group(r.ranks);
  int size = moert_grid_group(&r.ctx, MOERT_AXIS_TP, group.data());
  moert::AlignedFloats all(slice.size() * static_cast<size_t>(size)), full(all.size());
  if (moert_all_gather(r.comm, slice.data(), static_cast<int64_t>(slice.size() * sizeof(float)),
                       all.data(), group.data(), size) != 0)
    r.commError("gathering tensor-parallel slices");
  int64_t outer, extent, inner;
  aroundTp(p, outer, extent, inner);
  for (int t = 0; t < size; ++t)
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(all.begin() + t * slice.size() + o * extent * inner, extent * inner,
                  full.begin() + (o * size + t) * extent * inner);
  return full;
}

void moert::trainer::keepZero(const Rank &r, const moert::AlignedFloats &block,
                              moert::AlignedFloats &shard, int i) {
  const moert_param_info &p = r.prog.params[i];
  // The grid coordinates only (this may run before the context is bound).
  moert_context grid = {};
  grid.run.rank = r.rank, grid.run.dp = r.prog.grid_dp, grid.run.ep = r.ep, grid.run.tp = r.tp;
  int64_t offset = moert_step_shard_offset(&grid, p.zero_axes, zeroShard(p));
  for (size_t j = 0; j < shard.size(); ++j) {
    size_t at = static_cast<size_t>(offset) + j;
    shard[j] = at < block.size() ? block[at] : 0.0f;
  }
}

/// This rank's block of parameter `i` (or of a moment) from the full
/// tensor `full`: the rows rowsOf gives it (zeros at empty positions).
void moert::trainer::keepRows(const Rank &r, const float *full, moert::AlignedFloats &local,
                              int i) {
  std::vector<int64_t> rows = r.rowsOf(i, r.epIndex);
  size_t rowSize = local.size() / rows.size();
  for (size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] >= 0)
      std::copy_n(full + rows[j] * rowSize, rowSize, local.begin() + j * rowSize);
    else
      std::fill_n(local.begin() + j * rowSize, rowSize, 0.0f);
  }
}
