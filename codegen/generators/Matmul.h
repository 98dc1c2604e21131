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
// Long contractions (the weight gradients, which contract over every token
// or capacity slot) are k-blocked instead: one strip of B over the whole k
// no longer stays in cache, so k is split into chunks of at most 256 and the
// accumulator lives in memory between chunks (each block loads it into
// registers once per chunk), as GotoBLAS's kc blocking does.
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
inline void defineContraction(Func acc, const std::vector<Var> &args, RDom k, Expr product) {
  std::vector<Expr> lhs(args.begin(), args.end());
  acc(lhs) = 0.0f;
  acc(lhs) += product;
}

/// The k chunk of a k-blocked contraction, or 0 to keep k whole: k-blocked
/// when one block's strip of B over the whole k exceeds 64 KiB while a
/// chunk of A (extentJ x kc) still fits in 512 KiB of L2 (measured on Zen 3
/// for the FFN's and linear layers' shapes: weight gradients went from
/// 0.25-0.59 to 0.57-0.86 of OpenBLAS; the forward shapes, whose A is
/// every token, were faster whole).
inline int kChunk(int tileI, int extentJ, int extentK) {
  if ((long)tileI * extentK * 4 < 64 * 1024)
    return 0;
  for (int kc = 256; kc >= 64; --kc)
    if (extentK % kc == 0 && (long)extentJ * kc * 4 <= 512 * 1024)
      return kc;
  return 0;
}

/// Row blocks per column panel: the most that divide `blocks` while the
/// panel of B (tileI x k floats per block) stays within 128 KiB.
inline int panelBlocks(int blocks, int tileI, int k) {
  for (int p = blocks; p > 1; --p)
    if (blocks % p == 0 && (long)p * tileI * k * 4 <= 128 * 1024)
      return p;
  return 1;
}

/// Schedules `out` (dimensions i, j[, e]) as register blocks of
/// (2 vec x up to 6) with every `accs` computed per block; `vec` is the target's
/// f32 vector width. `root`: compute `out` at root (an intermediate; outputs
/// are root already). `extentI`/`extentJ` are the loop extents: a block
/// never exceeds them, so small shapes take smaller blocks.
inline void scheduleMatmul(Func out, std::initializer_list<Func> accs, Var i, Var j, int extentI,
                           int extentJ, int extentK, int vec, const Var *group, bool root,
                           int groups = 1) {
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
  Func only = *accs.begin();
  int kc = tileI == 0 || accs.size() != 1 || only.num_update_definitions() != 1
               ? 0
               : kChunk(tileI, extentJ, extentK);
  if (kc) {
    // k-blocked: the accumulator spans a whole group in memory; per k
    // chunk, column panels of B (in L2) are swept by the row blocks, each
    // keeping its (tileI x tileJ) block in registers over the chunk.
    // Parallel over groups when there are enough of them, else over the
    // column blocks within each chunk.
    bool overGroups = group && groups >= 4;
    if (overGroups)
      out.parallel(*group);
    else
      out.parallel(j);
    out.vectorize(i, vec);
    if (group)
      only.compute_at(out, *group);
    else
      only.compute_root();
    only.vectorize(i, vec);
    int panel = panelBlocks(extentI / tileI, tileI, kc);
    RVar ko("ko"), ki("ki");
    Stage update = only.update(0);
    update.split(only.rvars(0)[0], ko, ki, kc)
        .tile(i, j, io, jo, ii, ji, tileI, tileJ)
        .split(io, ioo, ioi, panel)
        .reorder(ii, ji, ki, ioi, jo, ioo, ko)
        .vectorize(ii, vec)
        .unroll(ii)
        .unroll(ji);
    if (!overGroups)
      update.parallel(jo);
    return;
  }
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
  // Columns in panels of B that stay in cache while every row block
  // sweeps them.
  int panel = panelBlocks(extentI / tileI, tileI, extentK);
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
      acc.update(u).reorder(i, j, acc.rvars(u)[0]).vectorize(i, vec).unroll(i).unroll(j);
  }
}

/// Schedules `fn`, a transposed copy of an operand (`inner` its first,
/// contiguous dimension, `outer` the source's contiguous one), at root in
/// (vec x vec) tiles: vector loads along the source's rows, shuffled into
/// vector stores, instead of one gather per output vector (measured 2x
/// faster on a 512 x 1280 x 8 transpose). Parallel over `group` when given,
/// else over tile rows.
inline void scheduleTranspose(Func fn, Var inner, Var outer, int extentInner, int extentOuter,
                              int vec, const Var *group) {
  fn.compute_root();
  Var io("io"), oo("oo"), ii("ii"), oi("oi");
  if (extentInner % vec == 0 && extentOuter % vec == 0) {
    fn.tile(inner, outer, io, oo, ii, oi, vec, vec).vectorize(ii).unroll(oi);
    fn.parallel(group ? *group : oo);
    return;
  }
  fn.parallel(group ? *group : outer);
  if (extentInner >= vec)
    fn.vectorize(inner, vec, TailStrategy::GuardWithIf);
}

/// One operand of an extern GEMM: a buffer or a root Func, as a (columns,
/// rows[, groups]) row-major matrix, transposed or not.
struct GemmOperand {
  ExternFuncArgument value;
  bool trans = false;
};

/// The routed rows of a dispatch buffer an extern GEMM reads or writes
/// (moe.expert_ffn's `rows`: `segments` segments per group, `count` =
/// groups x segments entries), and which of the product's dimensions runs
/// over the buffer's slots: out's rows (`SlotsAreRows`: the other rows are
/// zeroed; `RoutedRowsOnly`: left unwritten, for an intermediate or a saved
/// output only routed rows of which are read) or the contraction (`SlotsAreK`: only
/// routed rows are summed). `segments` 0: every row counts.
struct GemmRows {
  enum Mode { SlotsAreRows = 0, SlotsAreK = 1, RoutedRowsOnly = 2 };
  ExternFuncArgument rows;
  int segments = 0, count = 0;
};

/// Defines `f` as the extern stage `symbol` (with `_rows` appended and the
/// routed rows' arguments after `params` when `routed` has segments).
inline Func defineGemm(const std::string &name, const std::string &symbol,
                       std::vector<ExternFuncArgument> params, const std::vector<Var> &args,
                       const GemmRows &routed, GemmRows::Mode mode) {
  Func f(name);
  bool rows = routed.segments > 0;
  if (rows)
    params.insert(params.end(),
                  {routed.rows, Expr(routed.segments), Expr(routed.count), Expr((int)mode)});
  f.define_extern(rows ? symbol + "_rows" : symbol, params, Float(32), args);
  return f;
}

/// `name`(args) = op(a) op(b) [+ op(a2) op(b2)], contracting over `k`
/// (`k2`), computed by OpenBLAS through the runtime's extern stages
/// (runtime/lib/Gemm.cpp: `moert_gemm`, `moert_gemm2`, and their `_rows`
/// forms over routed rows only), batched over the third of `args` when
/// there is one. Func operands must be computed at root.
inline Func externGemm(const std::string &name, const std::vector<Var> &args, GemmOperand a,
                       GemmOperand b, int k, const GemmRows &routed = {},
                       GemmRows::Mode mode = GemmRows::SlotsAreRows) {
  return defineGemm(name, "moert_gemm",
                    {a.value, b.value, Expr(k), Expr((int)a.trans), Expr((int)b.trans)}, args,
                    routed, mode);
}
inline Func externGemm2(const std::string &name, const std::vector<Var> &args, GemmOperand a,
                        GemmOperand b, int k, GemmOperand a2, GemmOperand b2, int k2,
                        const GemmRows &routed = {}, GemmRows::Mode mode = GemmRows::SlotsAreRows) {
  return defineGemm(name, "moert_gemm2",
                    {a.value, b.value, a2.value, b2.value, Expr(k), Expr(k2), Expr((int)a.trans),
                     Expr((int)b.trans), Expr((int)a2.trans), Expr((int)b2.trans)},
                    args, routed, mode);
}

/// Schedules an elementwise Func over (i, j[, e]) at root: vectorised over
/// i, parallel over rows (and groups).
inline void scheduleElementwise(Func fn, Var i, Var j, int extentI, int vec, const Var *group) {
  fn.compute_root();
  if (extentI >= vec)
    fn.vectorize(i, vec, TailStrategy::GuardWithIf);
  if (group)
    fn.parallel(*group);
  fn.parallel(j, 8, TailStrategy::GuardWithIf);
}

} // namespace moec_codegen

#endif // MOEC_CODEGEN_MATMUL_H
