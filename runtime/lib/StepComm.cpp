//===- StepComm.cpp - the collectives a partitioned step calls ------------===//
//
// Grid groups, and moe.all_reduce / moe.all_to_all / a sharded global norm
// over them, on top of moert/Comm.h. On one rank (no communicator, groups of
// one) they are local copies, so a one-rank program needs no communicator.
//
//===----------------------------------------------------------------------===//

#include "../comm/CommImpl.h"
#include "CopyBytes.h"
#include "StepReduce.h"
#include "Placement.h"
#include "Staging.h"
#include "Trace.h"
#include "moert/Codecs.h"
#include "moert/Comm.h"
#include "moert/Program.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

extern "C" int moert_grid_group(const moert_context *ctx, int axes, int32_t *members) {
  int dp = std::max(ctx->run.dp, 1), ep = std::max(ctx->run.ep, 1), tp = std::max(ctx->run.tp, 1);
  int t = ctx->run.rank % tp, e = ctx->run.rank / tp % ep, d = ctx->run.rank / tp / ep;
  int n = 0;
  for (int di = 0; di < dp; ++di)
    for (int ei = 0; ei < ep; ++ei)
      for (int ti = 0; ti < tp; ++ti) {
        if ((!(axes & MOERT_AXIS_DP) && di != d) || (!(axes & MOERT_AXIS_EP) && ei != e) ||
            (!(axes & MOERT_AXIS_TP) && ti != t))
          continue;
        members[n++] = (di * ep + ei) * tp + ti;
      }
  return n;
}

extern "C" void moert_step_end_compute(moert_context *ctx) {
  if (ctx->runtime.step_mark <= 0)
    return;
  double now = moert::nowSeconds();
  if (ctx->run.trace)
    ctx->run.trace->add(moert::TraceLane::Compute, "compute", ctx->runtime.step_mark, now);
  if (ctx->run.compute_slowdown > 0 && now > ctx->runtime.step_mark) {
    double waited = now;
    moert::waitUntil(now + (now - ctx->runtime.step_mark) * ctx->run.compute_slowdown);
    now = moert::nowSeconds();
    if (ctx->run.trace)
      ctx->run.trace->add(moert::TraceLane::Compute, "emulated slowdown", waited, now);
  }
  ctx->runtime.step_mark = now;
}

thread_local int moert::CommTimer::depth = 0;

namespace {
using moert::CommTimer;

std::vector<int32_t> groupOf(const moert_context *ctx, int axes) {
  std::vector<int32_t> members(std::max(ctx->run.dp, 1) * std::max(ctx->run.ep, 1) *
                               std::max(ctx->run.tp, 1));
  members.resize(moert_grid_group(ctx, axes, members.data()));
  return members;
}

/// Copies a [outer, extent, inner] block: `rows` runs of `run` floats.
struct Layout {
  int64_t outer = 1, extent = 1, inner = 1;
};
Layout around(const int64_t *shape, int rank, int dim) {
  Layout l;
  for (int i = 0; i < dim; ++i)
    l.outer *= shape[i];
  l.extent = shape[dim];
  for (int i = dim + 1; i < rank; ++i)
    l.inner *= shape[i];
  return l;
}
moert::CodecSpec specOf(const moert_codec *c);

/// Sends segment q of `send` (sendElems[q] floats, consecutive) to member q
/// and receives recvElems[q] floats from each into `recv`, compressed on the
/// wire by `codec` (fp16, bf16, int8; null: raw floats).
int exchangeSegments(moert_comm *comm, const std::vector<int32_t> &group, const float *send,
                     const std::vector<int64_t> &sendElems, float *recv,
                     const std::vector<int64_t> &recvElems, const moert_codec *codec) {
  int64_t p = static_cast<int64_t>(group.size());
  if (p == 1) {
    moert::copyBytes(recv, send, static_cast<size_t>(sendElems[0]) * 4);
    if (codec) { // the same rounding as a remote chunk
      moert::CodecSpec spec = specOf(codec);
      moert::CodecState none;
      std::vector<uint8_t> bytes;
      moert::encode(spec, send, sendElems[0], bytes, none);
      moert::decode(spec, bytes.data(), sendElems[0], recv);
    }
    return 0;
  }
  if (!comm)
    return 1;
  std::vector<int64_t> sendBytes(p), recvBytes(p);
  if (!codec) {
    for (int64_t q = 0; q < p; ++q)
      sendBytes[q] = sendElems[q] * 4, recvBytes[q] = recvElems[q] * 4;
    return moert_all_to_all_v(comm, send, sendBytes.data(), recv, recvBytes.data(), group.data(),
                              static_cast<int>(p));
  }
  moert::CodecSpec spec = specOf(codec);
  moert::CodecState none;
  std::vector<uint8_t> wire, piece;
  for (int64_t q = 0; q < p; ++q) {
    moert::encode(spec, send, sendElems[q], piece, none);
    wire.insert(wire.end(), piece.begin(), piece.end());
    sendBytes[q] = static_cast<int64_t>(piece.size());
    recvBytes[q] = moert::encodedBytes(spec, recvElems[q]);
    send += sendElems[q];
  }
  int64_t total = 0;
  for (int64_t b : recvBytes)
    total += b;
  std::vector<uint8_t> got(static_cast<size_t>(total));
  if (int rc = moert_all_to_all_v(comm, wire.data(), sendBytes.data(), got.data(), recvBytes.data(),
                                  group.data(), static_cast<int>(p)))
    return rc;
  const uint8_t *from = got.data();
  for (int64_t q = 0; q < p; ++q) {
    moert::decode(spec, from, recvElems[q], recv);
    from += recvBytes[q];
    recv += recvElems[q];
  }
  return 0;
}

} // namespace

/// In a replica-local step (moert_context.inputs.replica_local), a reduction over
/// the dp axis stays within the data replica: dp leaves the axes and a sum
/// becomes dp times the replica's own (its estimate). True when it did.
static bool withinReplica(const moert_context *ctx, int &axes, int mean, double &scale) {
  if (!ctx->inputs.replica_local || !(axes & MOERT_AXIS_DP))
    return false;
  axes &= ~MOERT_AXIS_DP;
  if (!mean)
    scale *= ctx->run.dp;
  return true;
}

int moert::reduceBucket(moert_comm *comm, const int32_t *group, int groupSize, int n,
                        float *const *outs, const float *const *ins, const int64_t *counts,
                        int mean, double scale) {
  // Each element is the same sum (member order) times the same factor,
  // whether its tensor travels alone or in a bucket: bucketing never
  // changes a bit.
  double factor = scale / (mean ? static_cast<double>(groupSize) : 1.0);
  if (groupSize > 1) {
    if (!comm)
      return 1;
    std::vector<moert::Segment> segments(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t)
      segments[t] = {ins[t], outs[t], counts[t]};
    return moert::allReduceSegments(comm, segments.data(), n, factor, group, groupSize);
  }
  // A group of one: one pass, the copy and the scale together.
  for (int t = 0; t < n; ++t) {
    if (factor == 1.0) {
      if (outs[t] != ins[t])
        moert::copyBytes(outs[t], ins[t], static_cast<size_t>(counts[t]) * sizeof(float));
      continue;
    }
    float *out = outs[t];
    const float *in = ins[t];
    if (float f = static_cast<float>(factor); static_cast<double>(f) == factor) {
      // The same bits in float: a product of two floats is exact in double,
      // so rounding it once to float is the float product (and vectorises).
      for (int64_t i = 0; i < counts[t]; ++i)
        out[i] = in[i] * f;
    } else {
      for (int64_t i = 0; i < counts[t]; ++i)
        out[i] = static_cast<float>(in[i] * factor);
    }
  }
  return 0;
}

int moert::bucketGroup(const moert_context *ctx, int &axes, int mean, double &scale,
                       std::vector<int32_t> &group) {
  withinReplica(ctx, axes, mean, scale);
  group = groupOf(ctx, axes);
  return static_cast<int>(group.size());
}

extern "C" int moert_step_all_reduce(moert_context *ctx, float *out, const float *in, int64_t count,
                                     int axes, int mean, double scale) {
  CommTimer timer(ctx, "all_reduce");
  std::vector<int32_t> group;
  int p = moert::bucketGroup(ctx, axes, mean, scale, group);
  return moert::reduceBucket(ctx->run.comm, group.data(), p, 1, &out, &in, &count, mean, scale);
}

/// The calling rank's index among the members of `group`.
static int64_t memberIndex(const moert_context *ctx, const std::vector<int32_t> &group) {
  return std::find(group.begin(), group.end(), ctx->run.rank) - group.begin();
}

extern "C" int64_t moert_step_shard_offset(const moert_context *ctx, int axes, int64_t shard) {
  return memberIndex(ctx, groupOf(ctx, axes)) * shard;
}

extern "C" void moert_step_shard_slice(const moert_context *ctx, float *out, const float *in,
                                       int64_t count, int64_t shard, int axes) {
  int64_t first = std::min(moert_step_shard_offset(ctx, axes, shard), count);
  int64_t valid = std::min(shard, count - first);
  moert::copyBytes(out, in + first, static_cast<size_t>(valid) * sizeof(float));
  std::fill(out + valid, out + shard, 0.0f);
}

int moert::reduceScatterBucket(moert_comm *comm, const int32_t *group, int groupSize, int n,
                               float *const *outs, const float *const *ins, const int64_t *counts,
                               const int64_t *shards, int mean, double scale) {
  int64_t p = groupSize, total = 0;
  for (int i = 0; i < n; ++i)
    total += shards[i];
  // Member j's chunk: each tensor's elements [j S_i, (j + 1) S_i), zeros
  // past its end, one after another.
  float *send = moert::staging<float>(moert::Slot::Send, static_cast<size_t>(p * total)),
        *recv = moert::staging<float>(moert::Slot::Receive, static_cast<size_t>(total));
  for (int64_t j = 0; j < p; ++j) {
    float *chunk = send + j * total;
    for (int i = 0; i < n; ++i) {
      int64_t first = std::min(j * shards[i], counts[i]);
      int64_t valid = std::min(shards[i], counts[i] - first);
      moert::copyBytes(chunk, ins[i] + first, static_cast<size_t>(valid) * sizeof(float));
      std::fill(chunk + valid, chunk + shards[i], 0.0f);
      chunk += shards[i];
    }
  }
  if (p > 1 && moert_reduce_scatter_f32(comm, send, recv, total, group, groupSize))
    return 1;
  if (p == 1)
    recv = send;
  double factor = scale / (mean ? static_cast<double>(p) : 1.0);
  for (int i = 0; i < n; ++i) {
    for (int64_t k = 0; k < shards[i]; ++k)
      outs[i][k] = factor == 1.0 ? recv[k] : static_cast<float>(recv[k] * factor);
    recv += shards[i];
  }
  return 0;
}

extern "C" int moert_step_reduce_scatter(moert_context *ctx, int n, float *const *outs,
                                         const float *const *ins, const int64_t *counts,
                                         const int64_t *shards, int axes, int mean, double scale) {
  CommTimer timer(ctx, "reduce_scatter");
  std::vector<int32_t> group = groupOf(ctx, axes);
  return moert::reduceScatterBucket(ctx->run.comm, group.data(), static_cast<int>(group.size()), n,
                                    outs, ins, counts, shards, mean, scale);
}

extern "C" int moert_step_gather_params(moert_context *ctx, int n, float *const *params,
                                        const int64_t *shards, int axes) {
  CommTimer timer(ctx, "all_gather (parameters)");
  std::vector<int32_t> group = groupOf(ctx, axes);
  int64_t p = static_cast<int64_t>(group.size()), total = 0;
  int64_t index = memberIndex(ctx, group);
  for (int i = 0; i < n; ++i)
    total += shards[i];
  float *send = moert::staging<float>(moert::Slot::Send, static_cast<size_t>(total)),
        *recv = moert::staging<float>(moert::Slot::Receive, static_cast<size_t>(p * total));
  for (int i = 0, at = 0; i < n; at += shards[i++])
    moert::copyBytes(send + at, params[i] + index * shards[i],
                     static_cast<size_t>(shards[i]) * sizeof(float));
  if (moert_all_gather(ctx->run.comm, send, total * static_cast<int64_t>(sizeof(float)), recv,
                       group.data(), static_cast<int>(p)))
    return 1;
  // Member j's chunk holds its shard of each parameter; the padding past a
  // parameter's end arrives as the zeros every member keeps there.
  for (int64_t j = 0; j < p; ++j) {
    const float *chunk = recv + j * total;
    for (int i = 0; i < n; ++i) {
      moert::copyBytes(params[i] + j * shards[i], chunk,
                       static_cast<size_t>(shards[i]) * sizeof(float));
      chunk += shards[i];
    }
  }
  return 0;
}

extern "C" int moert_step_all_reduce_bucket(moert_context *ctx, int n, float *const *outs,
                                            const float *const *ins, const int64_t *counts,
                                            int axes, int mean, double scale) {
  CommTimer timer(ctx, "all_reduce (bucket)");
  std::vector<int32_t> group;
  int p = moert::bucketGroup(ctx, axes, mean, scale, group);
  return moert::reduceBucket(ctx->run.comm, group.data(), p, n, outs, ins, counts, mean, scale);
}

extern "C" int moert_step_all_to_all(moert_context *ctx, float *out, const float *in,
                                     const int64_t *shape, int rank, int split, int concat,
                                     int axes, const moert_codec *codec) {
  CommTimer timer(ctx, "all_to_all");
  std::vector<int32_t> group = groupOf(ctx, axes);
  int64_t p = static_cast<int64_t>(group.size());
  int64_t total = 1;
  for (int i = 0; i < rank; ++i)
    total *= shape[i];
  int64_t chunk = total / p;
  // Pack: chunk q = the q-th slice of `in` along `split`.
  float *send = moert::staging<float>(moert::Slot::Send, static_cast<size_t>(total)),
        *recv = moert::staging<float>(moert::Slot::Receive, static_cast<size_t>(total));
  Layout s = around(shape, rank, split);
  int64_t part = s.extent / p;
  for (int64_t q = 0; q < p; ++q)
    for (int64_t o = 0; o < s.outer; ++o)
      moert::copyBytes(&send[q * chunk + o * part * s.inner],
                       &in[(o * s.extent + q * part) * s.inner],
                       static_cast<size_t>(part * s.inner) * sizeof(float));
  std::vector<int64_t> elems(p, chunk);
  if (int rc = exchangeSegments(ctx->run.comm, group, send, elems, recv, elems, codec))
    return rc;
  // Unpack: the chunk from member q is the q-th slice of `out` along
  // `concat`; a chunk has the input's shape with `split` divided by p.
  std::vector<int64_t> chunkShape(shape, shape + rank), outShape(shape, shape + rank);
  chunkShape[split] /= p;
  outShape[split] /= p;
  outShape[concat] *= p;
  Layout c = around(chunkShape.data(), rank, concat);
  Layout o = around(outShape.data(), rank, concat);
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < c.outer; ++i)
      moert::copyBytes(&out[(i * o.extent + q * c.extent) * o.inner],
                       &recv[q * chunk + i * c.extent * c.inner],
                       static_cast<size_t>(c.extent * c.inner) * sizeof(float));
  return 0;
}

extern "C" int moert_step_all_to_all_ragged(moert_context *ctx, float *out, const float *in,
                                            const int64_t *shape, int split, int concat, int axes,
                                            const int32_t *counts, int32_t *recv,
                                            const moert_codec *codec) {
  CommTimer timer(ctx, "all_to_all (ragged)");
  return moert::raggedAllToAll(ctx, ctx->run.comm, out, in, shape, split, concat, axes, counts,
                               recv, codec);
}

int moert::raggedAllToAll(const moert_context *ctx, moert_comm *comm, float *out, const float *in,
                          const int64_t *shape, int split, int concat, int axes,
                          const int32_t *counts, int32_t *recv, const moert_codec *codec) {
  std::vector<int32_t> group = groupOf(ctx, axes);
  int64_t p = static_cast<int64_t>(group.size());
  auto found = std::find(group.begin(), group.end(), ctx->run.rank);
  if (found == group.end())
    return 1; // a context whose rank is outside its grid
  int me = static_cast<int>(found - group.begin());
  bool toOwners = split == 0 && concat == 1;
  if (!toOwners && !(split == 1 && concat == 0))
    return 1;
  // Blocks of C rows of D floats. Going to the owners, destination q gets
  // blocks e in [q * A/p, (q + 1) * A/p) of [A, C, D]; coming back, it gets
  // blocks (a, q) of [A, p * C, D] for every a.
  int64_t a = shape[0], d = shape[2];
  int64_t c = toOwners ? shape[1] : shape[1] / p;
  int64_t perDest = toOwners ? a / p : a;    // blocks sent to each member
  auto inBlock = [&](int64_t q, int64_t i) { // i-th block for member q
    return toOwners ? (q * perDest + i) : (i * p + q);
  };
  auto inRows = [&](int64_t block) { // offset in floats of a block of `in`
    return toOwners ? block * c * d : (block / p * p * c + block % p * c) * d;
  };
  auto outBlock = [&](int64_t q, int64_t i) { // i-th block from member q
    return toOwners ? (i * p + q) : (q * perDest + i);
  };
  auto outRows = [&](int64_t block) {
    return toOwners ? (block / p * p * c + block % p * c) * d : block * c * d;
  };
  // 1. Counts: member q gets the valid rows of its blocks.
  std::vector<int32_t> sendCounts(p * perDest), recvCounts(p * perDest);
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < perDest; ++i)
      sendCounts[q * perDest + i] =
          std::clamp<int32_t>(counts[inBlock(q, i)], 0, static_cast<int32_t>(c));
  std::vector<int64_t> countBytes(p, perDest * static_cast<int64_t>(sizeof(int32_t)));
  if (p > 1) {
    if (!comm)
      return 1;
    if (int rc = moert_all_to_all_v(comm, sendCounts.data(), countBytes.data(), recvCounts.data(),
                                    countBytes.data(), group.data(), static_cast<int>(p)))
      return rc;
  } else {
    recvCounts = sendCounts;
  }
  // 2. Rows: each member's valid rows, block after block.
  std::vector<int64_t> sendElems(p, 0), recvElems(p, 0);
  int64_t sendTotal = 0, recvTotal = 0;
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < perDest; ++i) {
      sendElems[q] += sendCounts[q * perDest + i] * d;
      recvElems[q] += recvCounts[q * perDest + i] * d;
    }
  for (int64_t q = 0; q < p; ++q) {
    sendTotal += sendElems[q];
    recvTotal += recvElems[q];
  }
  float *send = moert::staging<float>(moert::Slot::Send, static_cast<size_t>(sendTotal)),
        *got = moert::staging<float>(moert::Slot::Receive, static_cast<size_t>(recvTotal));
  float *cursor = send;
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < perDest; ++i) {
      int64_t n = sendCounts[q * perDest + i] * d;
      moert::copyBytes(cursor, in + inRows(inBlock(q, i)), static_cast<size_t>(n) * 4);
      cursor += n;
    }
  if (int rc = exchangeSegments(comm, group, send, sendElems, got, recvElems, codec))
    return rc;
  // 3. Unpack: valid rows, zeros after them.
  const float *from = got;
  for (int64_t q = 0; q < p; ++q)
    for (int64_t i = 0; i < perDest; ++i) {
      int64_t block = outBlock(q, i), n = recvCounts[q * perDest + i];
      float *to = out + outRows(block);
      moert::copyBytes(to, from, static_cast<size_t>(n * d) * 4);
      std::memset(to + n * d, 0, static_cast<size_t>((c - n) * d) * 4);
      from += n * d;
      recv[block] = static_cast<int32_t>(n);
    }
  (void)me;
  return 0;
}

namespace {
using moert::replicaCounts;

/// This rank's index in its ep group (its block of a placement's positions).
int epIndexOf(const moert_context *ctx) {
  return ctx->run.rank / std::max(ctx->run.tp, 1) % std::max(ctx->run.ep, 1);
}

/// The sum of squares of `x[0, n)` in double, in 16 independent partial
/// sums (added in a fixed order, so the result is the same every run): one
/// accumulator's add latency per element made this loop a few percent of a
/// training step; independent lanes let the compiler vectorise it.
double sumOfSquares(const float *x, int64_t n) {
  constexpr int kLanes = 16;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k)
      lane[k] += double(x[i + k]) * x[i + k];
  for (int k = 0; i < n; ++i, ++k)
    lane[k] += double(x[i]) * x[i];
  double sum = 0;
  for (double v : lane)
    sum += v;
  return sum;
}
} // namespace

namespace {

/// moert_step_global_norm, or with `squares` its _squares form: `grads`
/// then hold sums of squares, which add as they are.
int globalNorm(moert_context *ctx, const float *const *grads, const int64_t *sizes,
               const unsigned char *sharded, const int64_t *copies, const int *param_of, int count,
               int axes, const int32_t *const *tables, const int32_t *positions,
               const int64_t *rows, bool squares, float *norm) {
  auto sumOf = [&](const float *x, int64_t n) {
    if (!squares)
      return sumOfSquares(x, n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      s += x[i];
    return s;
  };
  double replicated = 0, shards = 0;
  for (int i = 0; i < count; ++i) {
    double sum = 0;
    if (tables && tables[i]) {
      // Rows of a placement: an expert's replicas count once in all.
      std::vector<int32_t> replicas = replicaCounts(tables[i], positions[i]);
      int64_t rowSize = sizes[i] / rows[i], first = epIndexOf(ctx) * rows[i];
      for (int64_t j = 0; j < rows[i]; ++j) {
        int32_t e = first + j < positions[i] ? tables[i][first + j] : -1;
        if (e < 0)
          continue;
        sum += sumOf(grads[i] + j * rowSize, rowSize) / replicas[e];
      }
    } else {
      sum = sumOf(grads[i], sizes[i]);
    }
    if (ctx->buffers.grad_squares && param_of && param_of[i] >= 0)
      ctx->buffers.grad_squares[param_of[i]] = sum;
    if (sharded && sharded[i] && copies && copies[i] > 1)
      sum /= static_cast<double>(copies[i]); // every copy adds its share
    (sharded && sharded[i] ? shards : replicated) += sum;
  }
  if (sharded) {
    // Summed in member order as float pairs (hi, lo): more precision than one
    // float each, though the pairs add in float (within an ulp of the direct
    // norm) and a member's sum of squares must fit float's range (gradient
    // norms up to ~1e19).
    float part[2] = {static_cast<float>(shards),
                     static_cast<float>(shards - static_cast<float>(shards))};
    if (int rc = moert_step_all_reduce(ctx, part, part, 2, axes, 0, 1.0))
      return rc;
    shards = double(part[0]) + double(part[1]);
  }
  double total = replicated + shards;
  ctx->outputs.skip_update = 0;
  if (ctx->inputs.loss_scale > 0) {
    // Loss scaling: the gradients are loss_scale times the loss's; an
    // overflow (not finite) skips the update, else they are unscaled here
    // (at scale 1, nothing to divide).
    double inverse = 1.0 / ctx->inputs.loss_scale;
    total *= inverse * inverse;
    if (!std::isfinite(total)) {
      ctx->outputs.skip_update = 1;
    } else if (ctx->inputs.loss_scale != 1) {
      if (squares) { // the gradients are not here to divide
        std::fprintf(stderr, "moert: loss scaling needs the gradients on the host\n");
        return 1;
      }
      for (int i = 0; i < count; ++i) {
        auto *g = const_cast<float *>(grads[i]);
        for (int64_t j = 0; j < sizes[i]; ++j)
          g[j] = static_cast<float>(g[j] * inverse);
      }
      if (ctx->buffers.grad_squares && param_of)
        for (int i = 0; i < count; ++i)
          if (param_of[i] >= 0)
            ctx->buffers.grad_squares[param_of[i]] *= inverse * inverse;
    }
  }
  *norm = ctx->outputs.grad_norm = static_cast<float>(std::sqrt(total));
  return 0;
}

} // namespace

extern "C" int moert_step_global_norm(moert_context *ctx, const float *const *grads,
                                      const int64_t *sizes, const unsigned char *sharded,
                                      const int64_t *copies, const int *param_of, int count,
                                      int axes, const int32_t *const *tables,
                                      const int32_t *positions, const int64_t *rows, float *norm) {
  return globalNorm(ctx, grads, sizes, sharded, copies, param_of, count, axes, tables, positions,
                    rows, false, norm);
}

extern "C" int moert_step_global_norm_squares(moert_context *ctx, const float *const *sums,
                                              const int64_t *sizes, const unsigned char *sharded,
                                              const int64_t *copies, const int *param_of, int count,
                                              int axes, const int32_t *const *tables,
                                              const int32_t *positions, const int64_t *rows,
                                              float *norm) {
  return globalNorm(ctx, sums, sizes, sharded, copies, param_of, count, axes, tables, positions,
                    rows, true, norm);
}

extern "C" int moert_step_placed_runs(const moert_context *ctx, const int32_t *table,
                                      int32_t positions, int64_t rows, int64_t *runs) {
  int64_t first = epIndexOf(ctx) * rows;
  auto placed = [&](int64_t j) { return first + j < positions && table[first + j] >= 0; };
  int n = 0;
  for (int64_t j = 0; j < rows;) {
    if (!placed(j)) {
      ++j;
      continue;
    }
    int64_t k = j;
    while (k < rows && placed(k))
      ++k;
    runs[2 * n] = j;
    runs[2 * n + 1] = k - j;
    ++n;
    j = k;
  }
  return n;
}

extern "C" int64_t moert_replica_sum_bytes(const int32_t *table, int32_t positions, int64_t rowSize,
                                           int group) {
  int64_t replicated = 0;
  for (int32_t n : replicaCounts(table, positions))
    replicated += n > 1;
  return replicated ? moert_ring_all_reduce_bytes(replicated * rowSize, group) : 0;
}

extern "C" int moert_step_replica_sum(moert_context *ctx, float *out, const float *in, int64_t rows,
                                      int64_t rowSize, const int32_t *table, int32_t positions,
                                      int axes) {
  CommTimer timer(ctx, "replica_sum");
  std::vector<int32_t> group = groupOf(ctx, axes);
  if (static_cast<int64_t>(group.size()) * rows != positions) {
    std::fprintf(stderr,
                 "error: replica sum: %lld rows on each of %zu ranks do not cover the "
                 "placement's %d positions\n",
                 static_cast<long long>(rows), group.size(), positions);
    return 1;
  }
  int member =
      static_cast<int>(std::find(group.begin(), group.end(), ctx->run.rank) - group.begin());
  // Only the placed rows: nothing reads an empty position's gradient (the
  // norm and AdamW skip it).
  if (out != in)
    for (int64_t j = 0; j < rows; ++j)
      if (table[member * rows + j] >= 0)
        std::memcpy(out + j * rowSize, in + j * rowSize,
                    static_cast<size_t>(rowSize) * sizeof(float));
  // The replicated experts, each a row of the reduction buffer.
  std::vector<int32_t> replicas = replicaCounts(table, positions);
  std::vector<int64_t> slot(replicas.size(), -1);
  int64_t replicated = 0;
  for (size_t e = 0; e < replicas.size(); ++e)
    if (replicas[e] > 1)
      slot[e] = replicated++;
  if (replicated == 0)
    return 0;
  // The sums in this thread's staging buffer: a fresh one each call would
  // fault its pages in every step (a replicated expert's rows are large).
  size_t total = static_cast<size_t>(replicated * rowSize);
  float *sums = moert::staging<float>(moert::Slot::Replica, total);
  std::fill(sums, sums + total, 0.0f);
  for (int64_t j = 0; j < rows; ++j)
    if (int32_t e = table[member * rows + j]; e >= 0 && slot[e] >= 0)
      for (int64_t k = 0; k < rowSize; ++k)
        sums[slot[e] * rowSize + k] += out[j * rowSize + k];
  if (int rc = moert_step_all_reduce(ctx, sums, sums, static_cast<int64_t>(total), axes, 0, 1.0))
    return rc;
  for (int64_t j = 0; j < rows; ++j)
    if (int32_t e = table[member * rows + j]; e >= 0 && slot[e] >= 0)
      std::memcpy(out + j * rowSize, sums + slot[e] * rowSize,
                  static_cast<size_t>(rowSize) * sizeof(float));
  return 0;
}

bool moertMicroBatchLoads(moert_context *ctx, const float *bias, std::vector<int64_t> &load);

extern "C" int moert_step_balance_bias(moert_context *ctx, float *bias, int32_t experts,
                                       const int32_t *ids, int64_t count, double rate, int axes) {
  std::vector<int64_t> load(static_cast<size_t>(std::max(experts, 0)), 0);
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) {
      std::fprintf(stderr,
                   "error: the selection bias's load rule got expert index %d, outside "
                   "[0, %d)\n",
                   ids[i], experts);
      return 1;
    }
    ++load[ids[i]];
  }
  if (!moertMicroBatchLoads(ctx, bias, load))
    return 0; // not the last micro-batch: its counts wait for the step's
  if (axes && groupOf(ctx, axes).size() > 1) {
    // Summed exactly: each count as (count / 4096, count % 4096), both
    // integers a float holds exactly after summing over up to 4096 members
    // (the first up to 2^24 * 4096 token-slots per expert).
    std::vector<float> parts(2 * load.size());
    for (size_t e = 0; e < load.size(); ++e) {
      parts[2 * e] = static_cast<float>(load[e] >> 12);
      parts[2 * e + 1] = static_cast<float>(load[e] & 4095);
    }
    if (int rc = moert_step_all_reduce(ctx, parts.data(), parts.data(),
                                       static_cast<int64_t>(parts.size()), axes, 0, 1.0))
      return rc;
    for (size_t e = 0; e < load.size(); ++e)
      load[e] = (static_cast<int64_t>(parts[2 * e]) << 12) + static_cast<int64_t>(parts[2 * e + 1]);
  }
  int64_t total = 0;
  for (int64_t n : load)
    total += n;
  // sign(mean - load[e]) with mean = total / E, compared in integers.
  for (int32_t e = 0; e < experts; ++e) {
    int64_t gap = total - static_cast<int64_t>(experts) * load[e];
    if (gap != 0)
      bias[e] = static_cast<float>(double(bias[e]) + (gap > 0 ? rate : -rate));
  }
  return 0;
}

namespace {

moert::CodecSpec specOf(const moert_codec *c) {
  moert::CodecSpec s;
  s.kind = static_cast<moert::CodecKind>(c->kind);
  s.blockSize = std::max<int64_t>(c->block_size, 1);
  s.ratio = c->ratio;
  s.rank = std::max<int64_t>(c->rank, 1);
  s.errorFeedback = c->error_feedback != 0;
  return s;
}

using moert::CodecStates;

moert::CodecState &stateOf(moert_context *ctx, int site) { return moert::codecStates(ctx)[site]; }

std::vector<int64_t> sentBy(const moert_comm *comm) {
  std::vector<int64_t> sent(MOERT_NUM_COLLECTIVES, 0);
  for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
    sent[k] = comm ? moert_comm_bytes(comm, k) : 0;
  return sent;
}

/// Every member's `piece` (the same size on all), in member order.
int gatherPieces(moert_comm *comm, const std::vector<uint8_t> &piece,
                 const std::vector<int32_t> &group, std::vector<uint8_t> &all) {
  if (group.size() == 1) {
    all = piece;
    return 0;
  }
  all.resize(piece.size() * group.size());
  return moert_all_gather(comm, piece.data(), static_cast<int64_t>(piece.size()), all.data(),
                          group.data(), static_cast<int>(group.size()));
}

/// The compressed sum over `group` of every member's `in` into `out`.
int compressedSum(moert_context *ctx, float *out, const float *in, int64_t n,
                  const moert::CodecSpec &spec, moert::CodecState &state,
                  const std::vector<int32_t> &group, int me, int64_t rows, int64_t cols) {
  int64_t p = static_cast<int64_t>(group.size());
  int size = static_cast<int>(p);
  moert_comm *comm = ctx->run.comm;
  if (p > 1 && !comm)
    return 1;
  switch (spec.kind) {
  case moert::CodecKind::FP16:
  case moert::CodecKind::BF16:
  case moert::CodecKind::Int8: {
    // Reduce-scatter of encoded chunks, then all-gather of encoded sums.
    int64_t chunk = (n + p - 1) / p, bytes = moert::encodedBytes(spec, chunk);
    std::vector<float> padded(in, in + n);
    padded.resize(chunk * p, 0.0f);
    std::vector<uint8_t> send(bytes * p), recv(bytes * p), piece;
    moert::CodecState none;
    for (int64_t j = 0; j < p; ++j) {
      moert::encode(spec, padded.data() + j * chunk, chunk, piece, none);
      moert::copyBytes(send.data() + j * bytes, piece.data(), bytes);
    }
    std::vector<int64_t> counts(p, bytes);
    if (p > 1) {
      if (int rc = moert_all_to_all_v(comm, send.data(), counts.data(), recv.data(), counts.data(),
                                      group.data(), size))
        return rc;
    } else {
      recv = send;
    }
    std::vector<float> sum(chunk, 0.0f), part(chunk);
    for (int64_t j = 0; j < p; ++j) {
      moert::decode(spec, recv.data() + j * bytes, chunk, part.data());
      for (int64_t i = 0; i < chunk; ++i)
        sum[i] += part[i];
    }
    moert::encode(spec, sum.data(), chunk, piece, none);
    std::vector<uint8_t> all;
    if (int rc = gatherPieces(comm, piece, group, all))
      return rc;
    for (int64_t j = 0; j < p; ++j) {
      moert::decode(spec, all.data() + j * bytes, chunk, part.data());
      moert::copyBytes(out + j * chunk, part.data(),
                       static_cast<size_t>(std::max<int64_t>(0, std::min(chunk, n - j * chunk))) *
                           4);
    }
    return 0;
  }
  case moert::CodecKind::TopK:
  case moert::CodecKind::Sign: {
    // Every member's sparse or 1-bit encoding, summed in member order.
    std::vector<uint8_t> mine;
    moert::encode(spec, in, n, mine, state);
    int64_t bytes = static_cast<int64_t>(mine.size());
    std::vector<uint8_t> all;
    if (int rc = gatherPieces(comm, mine, group, all))
      return rc;
    std::vector<float> part(n);
    std::fill(out, out + n, 0.0f);
    for (int64_t j = 0; j < p; ++j) {
      moert::decode(spec, all.data() + j * bytes, n, part.data());
      for (int64_t i = 0; i < n; ++i)
        out[i] += part[i];
    }
    return 0;
  }
  case moert::CodecKind::PowerSGD: {
    int64_t r = moert::powerRank(spec, rows, cols);
    std::vector<float> m = moert::withResidual(spec, in, n, state);
    moert::powerStart(state, cols, r); // the same seeded start on every member
    std::vector<float> pm = moert::powerLeft(m, state.q, rows, cols, r);
    if (p > 1)
      if (int rc = moert_all_reduce_f32(comm, pm.data(), rows * r, group.data(), size))
        return rc;
    moert::orthonormaliseColumns(pm, rows, r);
    std::vector<float> qm = moert::powerRight(m, pm, rows, cols, r);
    if (p > 1)
      if (int rc = moert_all_reduce_f32(comm, qm.data(), cols * r, group.data(), size))
        return rc;
    // The sum is P Q^T; the warm start and the residual use the mean.
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        double v = 0;
        for (int64_t j = 0; j < r; ++j)
          v += double(pm[i * r + j]) * qm[c * r + j];
        out[i * cols + c] = static_cast<float>(v);
      }
    for (float &v : qm)
      v /= static_cast<float>(p);
    state.q = qm;
    if (spec.errorFeedback)
      for (int64_t i = 0; i < n; ++i)
        state.residual[i] = m[i] - out[i] / static_cast<float>(p);
    return 0;
  }
  }
  return 1;
}

} // namespace

extern "C" int moert_step_all_reduce_codec(moert_context *ctx, float *out, const float *in,
                                           int64_t count, int axes, int mean, double scale,
                                           const moert_codec *codec, int site, int64_t rows,
                                           int64_t cols) {
  CommTimer timer(ctx, "all_reduce (compressed)");
  if (withinReplica(ctx, axes, mean, scale)) // what is left is not compressed
    return moert_step_all_reduce(ctx, out, in, count, axes, mean, scale);
  std::vector<int32_t> group = groupOf(ctx, axes);
  auto found = std::find(group.begin(), group.end(), ctx->run.rank);
  if (found == group.end())
    return 1; // a context whose rank is outside its grid
  int me = static_cast<int>(found - group.begin());
  int64_t p = static_cast<int64_t>(group.size());
  moert::CodecSpec spec = specOf(codec);
  if (spec.kind == moert::CodecKind::PowerSGD && rows * cols != count) {
    rows = count;
    cols = 1;
  }
  std::vector<int64_t> before = sentBy(ctx->run.comm);
  std::vector<float> result(count);
  if (int rc = compressedSum(ctx, result.data(), in, count, spec, stateOf(ctx, site), group, me,
                             rows, cols))
    return rc;
  std::vector<int64_t> after = sentBy(ctx->run.comm);
  for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
    ctx->runtime.codec_sent[k] += after[k] - before[k];
  ctx->runtime.codec_uncompressed += p > 1 ? 2 * (p - 1) * count * 4 / p : 0;
  double factor = scale / (mean ? static_cast<double>(p) : 1.0);
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(result[i] * factor);
  return 0;
}

moert::CodecStates &moert::codecStates(moert_context *ctx) {
  if (!ctx->runtime.codec_states)
    ctx->runtime.codec_states = new CodecStates();
  return *static_cast<CodecStates *>(ctx->runtime.codec_states);
}

extern "C" void moert_codec_states_free(moert_context *ctx) {
  delete static_cast<CodecStates *>(ctx->runtime.codec_states);
  ctx->runtime.codec_states = nullptr;
}
