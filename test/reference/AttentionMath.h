//===- AttentionMath.h - the interpreter's causal attention -----*- C++ -*-===//
//
// Double-precision causal attention for the reference interpreter: plain
// multi-head (grouped-query) attention and DeepSeek's latent attention
// (moe.attention, moe.latent_attention and their gradients), written as
// loops over the definitions in the ops' descriptions.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_REFERENCE_ATTENTIONMATH_H
#define MOE_REFERENCE_ATTENTIONMATH_H

#include <cstdint>
#include <optional>
#include <vector>

namespace moec::reference {

/// q [B, S, H, dqk], k [B, S, KV, dqk], v [B, S, KV, dv] (row-major, heads
/// packed in the last dimension as the ops lay them out).
struct AttentionDims {
  int64_t batch, seq, heads, kvHeads, qkDim, vDim;
};

/// Causal softmax(q k^T / sqrt(dqk)) v per head: [B, S, H, dv]. Query head
/// h reads key/value head h / (H / KV). q and k are already rotated.
std::vector<double> attend(const std::vector<double> &q, const std::vector<double> &k,
                           const std::vector<double> &v, const AttentionDims &a);

/// The gradients of `attend` for `dout` [B, S, H, dv]: dq, dk (of the
/// rotated q and k) and dv, accumulated into zeroed vectors of their shapes.
void attendGrad(const std::vector<double> &q, const std::vector<double> &k,
                const std::vector<double> &v, const std::vector<double> &dout,
                const AttentionDims &a, std::vector<double> &dq, std::vector<double> &dk,
                std::vector<double> &dv);

/// Rotates (or, with `inverse`, un-rotates) columns [offset, offset + width)
/// of every head vector of `x` [B, S, heads, stride] by the rotary embedding
/// of its position (rotate-half over `width`, base `theta`).
void rotate(std::vector<double> &x, int64_t batch, int64_t seq, int64_t heads, int64_t stride,
            int64_t offset, int64_t width, double theta, bool inverse);

/// moe.attention: q and k rotated (all of each head) when `theta` is set,
/// then attend. The gradient's outputs are zeroed vectors of q's, k's and
/// v's sizes; dq and dk come back un-rotated.
std::vector<double> ropedAttend(std::vector<double> q, std::vector<double> k,
                                const std::vector<double> &v, const AttentionDims &a,
                                std::optional<double> theta);
void ropedAttendGrad(std::vector<double> q, std::vector<double> k, const std::vector<double> &v,
                     const std::vector<double> &dout, const AttentionDims &a,
                     std::optional<double> theta, std::vector<double> &dq, std::vector<double> &dk,
                     std::vector<double> &dv);

/// Latent attention's operands (moe.latent_attention): q [B, S, H (dn +
/// dr)], k [B, S, H dn], kRope [B, S, dr], v [B, S, H dv].
struct LatentDims {
  int64_t batch, seq, heads, contentDim, ropeDim, vDim;
  AttentionDims attention() const { return {batch, seq, heads, heads, contentDim + ropeDim, vDim}; }
};

std::vector<double> latentAttend(const std::vector<double> &q, const std::vector<double> &k,
                                 const std::vector<double> &kRope, const std::vector<double> &v,
                                 const LatentDims &a, std::optional<double> theta);

/// The gradients of latentAttend: dk_rope sums the heads' rotary key
/// gradients. The outputs are resized and overwritten.
void latentAttendGrad(const std::vector<double> &q, const std::vector<double> &k,
                      const std::vector<double> &kRope, const std::vector<double> &v,
                      const std::vector<double> &dout, const LatentDims &a,
                      std::optional<double> theta, std::vector<double> &dq, std::vector<double> &dk,
                      std::vector<double> &dkRope, std::vector<double> &dv);

} // namespace moec::reference

#endif // MOE_REFERENCE_ATTENTIONMATH_H
