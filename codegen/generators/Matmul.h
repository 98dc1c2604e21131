//===- Matmul.h - the register-blocked matmul schedule generators share ---===//
//
// Every contraction of the generators is written in one form:
//
//   acc(i, j[, e]) = 0;  acc(i, j[, e]) += A(k, j[, e]) * B(i, k[, e])
//
// with B contiguous in i (vectorised) and A broadcast. A consumer `out`
// (pure, reading acc at the same point, plus an epilogue) is tiled into
// (tileI x tileJ) blocks held in registers; the k loop runs outermost inside
// a block, so each step is tileI/vec vector loads of B, tileJ broadcasts of
// A and (tileI/vec * tileJ) fused multiply-adds. Blocks (and groups, when
// the contraction is batched per expert) run in parallel. Operands that are
// not contiguous in i are transposed once into scratch by the caller.
//
// Schedules only: the algorithms stay in each generator's generate().
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_MATMUL_H
#define MOEC_CODEGEN_MATMUL_H

#include "Halide.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

namespace moec_codegen {

using namespace Halide;

/// Defines acc(args) = 0; acc(args) += a * b over `k`.
inline void defineContraction(Func acc, const std::vector<Var> &args, RDom k,
                              Expr product) {
  std::vector<Expr> lhs(args.begin(), args.end());
  acc(lhs) = 0.0f;
  acc(lhs) += product;
}

/// Schedules `out` (dimensions i, j[, e]) as register blocks of
/// (2 vec x up to 6) with every `accs` computed per block; `vec` is the target's
/// f32 vector width. `root`: compute `out` at root (an intermediate; outputs
/// are root already). `extentI`/`extentJ` are the loop extents: a block
/// never exceeds them, so small shapes take smaller blocks.
inline void scheduleMatmul(Func out, std::initializer_list<Func> accs, Var i,
                           Var j, int extentI, int extentJ, int extentK, int vec,
                           const Var *group, bool root) {
  if (root)
    out.compute_root();
  // Blocks divide the extents exactly (no tails to guard): the widest
  // vector multiple, and the most rows up to 6 (12 accumulators + 2 loads +
  // 1 broadcast fit AVX2's 16 registers).
  int tileI = extentI % (2 * vec) == 0 ? 2 * vec : extentI % vec == 0 ? vec : 0;
  int tileJ = 1;
  for (int t = std::min(extentJ, 6); t > 1 && tileJ == 1; --t)
    if (extentJ % t == 0)
      tileJ = t;
  Var io("io"), jo("jo"), ii("ii"), ji("ji"), ioo("ioo"), ioi("ioi"), t("t");
  if (tileI == 0) {
    // Not a multiple of the vector width: no blocking, parallel over rows.
    if (group)
      out.parallel(*group);
    else
      out.parallel(j);
    for (Func acc : accs)
      acc.compute_at(out, j);
    return;
  }
  // Columns in panels of B that stay in cache (about 128 KiB: k x panel
  // floats) while every row block sweeps them; the panel divides extentI.
  int blocks = extentI / tileI, panel = 1;
  for (int p = blocks; p >= 1; --p)
    if (blocks % p == 0 && (long)p * tileI * extentK * 4 <= 128 * 1024) {
      panel = p;
      break;
    }
  out.tile(i, j, io, jo, ii, ji, tileI, tileJ)
      .split(io, ioo, ioi, panel)
      .reorder(ii, ji, ioi, jo, ioo)
      .vectorize(ii, vec)
      .unroll(ii)
      .unroll(ji)
      .parallel(jo);
  for (Func acc : accs) {
    acc.compute_at(out, ioi).vectorize(i, vec).unroll(i).unroll(j);
    for (int u = 0; u < acc.num_update_definitions(); ++u)
      acc.update(u)
          .reorder(i, j, acc.rvars(u)[0])
          .vectorize(i, vec)
          .unroll(i)
          .unroll(j);
  }
}

} // namespace moec_codegen

#endif // MOEC_CODEGEN_MATMUL_H
