//===- ScratchBound.cpp - the scratch one generated kernel may use --------===//

#include "moe/Codegen/ScratchBound.h"

#include <algorithm>
#include <cstdlib>

using namespace moec::codegen;

int64_t moec::codegen::paramValue(const std::vector<std::string> &params, const std::string &key) {
  std::string prefix = key + "=";
  for (const std::string &p : params) {
    if (p.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string text = p.substr(prefix.size());
    if (text == "true")
      return 1;
    char *end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    return !text.empty() && end && *end == 0 ? v : 0;
  }
  return 0;
}

int64_t moec::codegen::scratchBound(const std::string &g, const std::vector<std::string> &params) {
  auto v = [&](const char *key) { return paramValue(params, key); };
  int64_t elements = 0;
  if (g == "embedding") {
    elements = v("tokens"); // ids
  } else if (g == "embedding_grad") {
    elements = v("tokens") + v("vocab") * v("width"); // ids, accumulator
  } else if (g == "rms_norm_grad") {
    elements = v("rows"); // inverse norms
  } else if (g == "linear" && v("blas")) {
    // the product before the bias and residual epilogue
    elements = v("bias") || v("residual") ? v("rows") * v("out") : 0;
  } else if (g == "linear_grad") {
    // w^T, x^T, and dw's accumulator when its contraction over rows is
    // k-blocked (codegen/generators/Matmul.h; counted always, a bound);
    // nothing with OpenBLAS.
    elements = v("blas") ? 0 : 2 * v("in") * v("out") + v("rows") * v("in");
  } else if (g == "attention" || g == "attention_grad") {
    int64_t b = v("batch"), s = v("seq"), h = v("heads"), hk = v("kv_heads"), dh = v("head_dim");
    int64_t q = b * s * h * dh, k = b * s * hk * dh, probs = b * h * s * s;
    if (g == "attention")
      elements = q + 2 * k + probs + q; // qr, kr, kr^T, prob, out
    else                                // qr, kr, kr^T, v^T, prob, ds, dqr, dkr, dv
      elements = q + 3 * k + 2 * probs + q + 2 * k;
    elements += s * dh; // the rotary (cos, sin) table
  } else if (g == "ffn" || g == "ffn_grad") {
    int64_t e = v("groups"), c = v("rows"), d = v("width"), f = v("hidden");
    bool gated = std::find(params.begin(), params.end(), "activation=swiglu") != params.end();
    int64_t preacts = v("save") || v("saved") ? 0 : gated ? 2 : 1;
    if (v("blas") && g == "ffn")
      elements = (1 + preacts) * e * c * f; // h, recomputed pre-activations
    else if (v("blas"))                     // dh, h, dhu (and dhg), recomputed pre-activations
      elements = ((gated ? 4 : 3) + preacts) * e * c * f;
    else if (g == "ffn")
      elements = e * c * f; // h
    else                    // down^T, up^T, gate^T, x^T, (h, dhu, dhg), h^T, and one weight
                            // gradient's per-group accumulators when k-blocked (a bound)
      elements = (gated ? 4 : 3) * e * d * f + e * c * d + (gated ? 4 : 3) * e * c * f;
  } else if (g == "cross_entropy") {
    elements = 2 * v("tokens"); // log-sum-exp, target logits
  } else if (g == "cross_entropy_grad") {
    elements = v("tokens"); // target ids
  }
  // Per block, the pool's 128-byte header and rounding to 128 bytes
  // (runtime/lib/ScratchPool.cpp) and Halide's padding of heap allocations
  // (a few vectors): 512 bytes for each of up to 16 intermediates.
  constexpr int64_t kBlockSlack = 512, kMaxBlocks = 16;
  return 4 * elements + kBlockSlack * kMaxBlocks;
}
