//===- AttentionMath.cpp - the interpreter's causal attention -------------===//

#include "AttentionMath.h"

#include <algorithm>
#include <cmath>

using namespace moec::reference;
using Vec = std::vector<double>;

namespace {

/// Causal probabilities of query head h at (b, i) over keys j <= i.
Vec probs(const Vec &q, const Vec &k, const AttentionDims &a, int64_t b, int64_t h, int64_t i) {
  int64_t g = h / (a.heads / a.kvHeads), d = a.qkDim;
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double *qi = &q[((b * a.seq + i) * a.heads + h) * d];
  Vec p(i + 1);
  double mx = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) {
    const double *kj = &k[((b * a.seq + j) * a.kvHeads + g) * d];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += qi[c] * kj[c];
    p[j] = dot * scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0;
  for (double &v : p)
    sum += (v = std::exp(v - mx));
  for (double &v : p)
    v /= sum;
  return p;
}

} // namespace

Vec moec::reference::attend(const Vec &q, const Vec &k, const Vec &v, const AttentionDims &a) {
  Vec y(static_cast<size_t>(a.batch * a.seq * a.heads * a.vDim), 0.0);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.seq; ++i) {
        Vec p = probs(q, k, a, b, h, i);
        int64_t g = h / (a.heads / a.kvHeads);
        double *yi = &y[((b * a.seq + i) * a.heads + h) * a.vDim];
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < a.vDim; ++c)
            yi[c] += p[j] * v[((b * a.seq + j) * a.kvHeads + g) * a.vDim + c];
      }
  return y;
}

void moec::reference::attendGrad(const Vec &q, const Vec &k, const Vec &v, const Vec &dout,
                                 const AttentionDims &a, Vec &dq, Vec &dk, Vec &dv) {
  double scale = 1.0 / std::sqrt(static_cast<double>(a.qkDim));
  int64_t d = a.qkDim;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.seq; ++i) {
        Vec p = probs(q, k, a, b, h, i);
        int64_t g = h / (a.heads / a.kvHeads);
        const double *doi = &dout[((b * a.seq + i) * a.heads + h) * a.vDim];
        Vec dp(i + 1);
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          int64_t vj = ((b * a.seq + j) * a.kvHeads + g) * a.vDim;
          for (int64_t c = 0; c < a.vDim; ++c) {
            dp[j] += doi[c] * v[vj + c];
            dv[vj + c] += p[j] * doi[c];
          }
          dot += p[j] * dp[j];
        }
        int64_t qi = ((b * a.seq + i) * a.heads + h) * d;
        for (int64_t j = 0; j <= i; ++j) {
          double ds = p[j] * (dp[j] - dot) * scale;
          int64_t kj = ((b * a.seq + j) * a.kvHeads + g) * d;
          for (int64_t c = 0; c < d; ++c) {
            dq[qi + c] += ds * k[kj + c];
            dk[kj + c] += ds * q[qi + c];
          }
        }
      }
}

void moec::reference::rotate(Vec &x, int64_t batch, int64_t seq, int64_t heads, int64_t stride,
                             int64_t offset, int64_t width, double theta, bool inverse) {
  int64_t half = width / 2;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        double *v = &x[((b * seq + s) * heads + h) * stride + offset];
        for (int64_t i = 0; i < half; ++i) {
          double angle = static_cast<double>(s) * std::pow(theta, -2.0 * i / width);
          double c = std::cos(angle), sn = inverse ? -std::sin(angle) : std::sin(angle);
          double x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * sn;
          v[i + half] = x2 * c + x1 * sn;
        }
      }
}

Vec moec::reference::ropedAttend(Vec q, Vec k, const Vec &v, const AttentionDims &a,
                                 std::optional<double> theta) {
  if (theta) {
    rotate(q, a.batch, a.seq, a.heads, a.qkDim, 0, a.qkDim, *theta, false);
    rotate(k, a.batch, a.seq, a.kvHeads, a.qkDim, 0, a.qkDim, *theta, false);
  }
  return attend(q, k, v, a);
}

void moec::reference::ropedAttendGrad(Vec q, Vec k, const Vec &v, const Vec &dout,
                                      const AttentionDims &a, std::optional<double> theta, Vec &dq,
                                      Vec &dk, Vec &dv) {
  if (theta) {
    rotate(q, a.batch, a.seq, a.heads, a.qkDim, 0, a.qkDim, *theta, false);
    rotate(k, a.batch, a.seq, a.kvHeads, a.qkDim, 0, a.qkDim, *theta, false);
  }
  attendGrad(q, k, v, dout, a, dq, dk, dv);
  if (theta) { // undo the rotation on the gradients of q and k
    rotate(dq, a.batch, a.seq, a.heads, a.qkDim, 0, a.qkDim, *theta, true);
    rotate(dk, a.batch, a.seq, a.kvHeads, a.qkDim, 0, a.qkDim, *theta, true);
  }
}

namespace {

/// Latent attention's queries and per-head keys [B, S, H, dn + dr], their
/// rotary parts rotated: the keys are each head's content key followed by
/// the shared rotary key.
void assemble(const Vec &q, const Vec &k, const Vec &kRope, const LatentDims &a,
              std::optional<double> theta, Vec &qFull, Vec &kFull) {
  int64_t dn = a.contentDim, dr = a.ropeDim, w = dn + dr;
  qFull = q;
  kFull.assign(static_cast<size_t>(a.batch * a.seq * a.heads * w), 0.0);
  for (int64_t t = 0; t < a.batch * a.seq; ++t)
    for (int64_t h = 0; h < a.heads; ++h) {
      std::copy_n(&k[(t * a.heads + h) * dn], dn, &kFull[(t * a.heads + h) * w]);
      std::copy_n(&kRope[t * dr], dr, &kFull[(t * a.heads + h) * w + dn]);
    }
  if (theta) {
    rotate(qFull, a.batch, a.seq, a.heads, w, dn, dr, *theta, false);
    rotate(kFull, a.batch, a.seq, a.heads, w, dn, dr, *theta, false);
  }
}

} // namespace

Vec moec::reference::latentAttend(const Vec &q, const Vec &k, const Vec &kRope, const Vec &v,
                                  const LatentDims &a, std::optional<double> theta) {
  Vec qFull, kFull;
  assemble(q, k, kRope, a, theta, qFull, kFull);
  return attend(qFull, kFull, v, a.attention());
}

void moec::reference::latentAttendGrad(const Vec &q, const Vec &k, const Vec &kRope, const Vec &v,
                                       const Vec &dout, const LatentDims &a,
                                       std::optional<double> theta, Vec &dq, Vec &dk, Vec &dkRope,
                                       Vec &dv) {
  Vec qFull, kFull;
  assemble(q, k, kRope, a, theta, qFull, kFull);
  int64_t dn = a.contentDim, dr = a.ropeDim, w = dn + dr;
  Vec dkFull(kFull.size(), 0.0);
  dq.assign(q.size(), 0.0);
  dv.assign(v.size(), 0.0);
  attendGrad(qFull, kFull, v, dout, a.attention(), dq, dkFull, dv);
  if (theta) {
    rotate(dq, a.batch, a.seq, a.heads, w, dn, dr, *theta, true);
    rotate(dkFull, a.batch, a.seq, a.heads, w, dn, dr, *theta, true);
  }
  dk.assign(k.size(), 0.0);
  dkRope.assign(kRope.size(), 0.0);
  for (int64_t t = 0; t < a.batch * a.seq; ++t)
    for (int64_t h = 0; h < a.heads; ++h) {
      const double *g = &dkFull[(t * a.heads + h) * w];
      std::copy_n(g, dn, &dk[(t * a.heads + h) * dn]);
      for (int64_t c = 0; c < dr; ++c)
        dkRope[t * dr + c] += g[dn + c];
    }
}
