//===- Codecs.cpp - compression of collective payloads --------------------===//

#include "CopyBytes.h"
#include "../comm/HostStaging.h"
#include "moert/Codecs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

using namespace moert;

namespace {

int64_t topkCount(double ratio, int64_t n) { return moert_topk_count(ratio, n); }

template <typename T> void put(std::vector<uint8_t> &out, size_t &at, T value) {
  moert::copyBytes(out.data() + at, &value, sizeof(T));
  at += sizeof(T);
}

template <typename T> T get(const uint8_t *bytes, size_t &at) {
  T value;
  moert::copyBytes(&value, bytes + at, sizeof(T));
  at += sizeof(T);
  return value;
}

} // namespace

std::vector<float> moert::withResidual(const CodecSpec &spec, const float *data, int64_t n,
                                       CodecState &state) {
  std::vector<float> y(data, data + n);
  if (spec.errorFeedback) {
    if (static_cast<int64_t>(state.residual.size()) != n)
      state.residual.assign(n, 0.0f);
    for (int64_t i = 0; i < n; ++i)
      y[i] += state.residual[i];
  }
  return y;
}

int64_t moert::powerRank(const CodecSpec &spec, int64_t rows, int64_t cols) {
  return moert_powersgd_rank(spec.rank, rows, cols);
}

void moert::powerStart(CodecState &state, int64_t cols, int64_t r) {
  if (static_cast<int64_t>(state.q.size()) == cols * r)
    return;
  std::mt19937_64 rng(state.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  state.q.resize(cols * r);
  for (float &v : state.q)
    v = normal(rng);
}

std::vector<float> moert::powerLeft(const std::vector<float> &m, const std::vector<float> &q,
                                    int64_t rows, int64_t cols, int64_t r) {
  std::vector<float> p(rows * r, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < r; ++j)
        p[i * r + j] += m[i * cols + c] * q[c * r + j];
  return p;
}

std::vector<float> moert::powerRight(const std::vector<float> &m, const std::vector<float> &p,
                                     int64_t rows, int64_t cols, int64_t r) {
  std::vector<float> q(cols * r, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < r; ++j)
        q[c * r + j] += m[i * cols + c] * p[i * r + j];
  return q;
}

namespace {

/// Keeps what was not sent for the next step.
void keepResidual(const CodecSpec &spec, const std::vector<float> &y, const float *sent,
                  CodecState &state) {
  if (!spec.errorFeedback)
    return;
  for (size_t i = 0; i < y.size(); ++i)
    state.residual[i] = y[i] - sent[i];
}

} // namespace

/// Modified Gram-Schmidt, each projection done twice ("twice is enough":
/// one pass in float leaves a dependent column's remainder far from
/// orthogonal). A column that is dependent on the previous ones within f32
/// precision (its remainder under kDependent of its norm: the gradient's
/// rank is below the codec's, as for an expert few tokens reached) becomes
/// zero instead of normalised rounding noise, so P P^T stays a projection.
void moert::orthonormaliseColumns(std::vector<float> &p, int64_t rows, int64_t r) {
  constexpr double kDependent = 1e-4;
  auto norm = [&](int64_t j) {
    double sum = 0;
    for (int64_t i = 0; i < rows; ++i)
      sum += double(p[i * r + j]) * p[i * r + j];
    return std::sqrt(sum);
  };
  for (int64_t j = 0; j < r; ++j) {
    double before = norm(j);
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < rows; ++i)
          dot += double(p[i * r + j]) * p[i * r + k];
        for (int64_t i = 0; i < rows; ++i)
          p[i * r + j] -= static_cast<float>(dot * p[i * r + k]);
      }
    double after = norm(j);
    bool independent = after > 1e-30 && after > kDependent * before;
    for (int64_t i = 0; i < rows; ++i)
      p[i * r + j] = independent ? static_cast<float>(p[i * r + j] / after) : 0.0f;
  }
}

uint16_t moert::floatToHalf(float value) {
  uint32_t x;
  moert::copyBytes(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, mant = x & 0x7fffff;
  if (exp == 0xff) // infinity, or NaN (kept quiet)
    return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31)
    return static_cast<uint16_t>(sign | 0x7c00); // overflow: infinity
  if (e <= 0) {                                  // subnormal half, or zero
    if (e < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    int shift = 14 - e;
    uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13), rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half; // a carry into the exponent is still the right rounding
  return static_cast<uint16_t>(sign | half);
}

float moert::halfToFloat(uint16_t bits) {
  uint32_t sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1f, mant = bits & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float v;
  moert::copyBytes(&v, &x, 4);
  return v;
}

uint16_t moert::floatToBF16(float value) {
  uint32_t x;
  moert::copyBytes(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet
    return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float moert::bf16ToFloat(uint16_t bits) {
  uint32_t x = static_cast<uint32_t>(bits) << 16;
  float v;
  moert::copyBytes(&v, &x, 4);
  return v;
}

bool moert::parseCodec(const std::string &text, CodecSpec &spec, std::string &error) {
  size_t colon = text.find(':');
  std::string name = text.substr(0, colon);
  std::string arg = colon == std::string::npos ? "" : text.substr(colon + 1);
  spec = CodecSpec();
  // name, kind, its parameter ("" when none), the parameter's range, whether
  // it is an integer, and where it goes.
  struct Entry {
    const char *name;
    CodecKind kind;
    const char *label, *param;
    double lo, hi;
    bool integer;
    void (*set)(CodecSpec &, double);
  };
  static const Entry entries[] = {
      {"fp16", CodecKind::FP16, "", "", 0, 0, false, nullptr},
      {"bf16", CodecKind::BF16, "", "", 0, 0, false, nullptr},
      {"sign", CodecKind::Sign, "", "", 0, 0, false, nullptr},
      {"int8", CodecKind::Int8, "BLOCK", "a block size in [1, 16777216]", 1, 1 << 24, true,
       [](CodecSpec &s, double v) { s.blockSize = static_cast<int64_t>(v); }},
      {"topk", CodecKind::TopK, "RATIO", "a ratio in (0, 1]", 0, 1, false,
       [](CodecSpec &s, double v) { s.ratio = v; }},
      {"powersgd", CodecKind::PowerSGD, "RANK", "a rank in [1, 65536]", 1, 1 << 16, true,
       [](CodecSpec &s, double v) { s.rank = static_cast<int64_t>(v); }},
  };
  for (const Entry &e : entries) {
    if (name != e.name)
      continue;
    spec.kind = e.kind;
    if (arg.empty() && colon == std::string::npos)
      return true;
    if (!e.set) {
      error = "codec " + name + " takes no parameter, got '" + text + "'";
      return false;
    }
    char *end = nullptr;
    double v = std::strtod(arg.c_str(), &end);
    if (arg.empty() || *end || !(v > e.lo || (e.integer && v == e.lo)) || v > e.hi ||
        (e.integer && v != std::floor(v))) {
      error = "codec " + name + ":" + e.label + " needs " + e.param + ", got '" + arg + "'";
      return false;
    }
    e.set(spec, v);
    return true;
  }
  error = "unknown codec '" + text +
          "' (expected fp16, bf16, int8[:block], topk[:ratio], "
          "sign or powersgd[:rank])";
  return false;
}

int64_t moert::encodedBytes(const CodecSpec &spec, int64_t n, int64_t rows, int64_t cols) {
  return moert_codec_encoded_bytes(static_cast<int>(spec.kind), spec.blockSize, spec.ratio,
                                   spec.rank, n, rows, cols);
}

void moert::encode(const CodecSpec &spec, const float *data, int64_t n, std::vector<uint8_t> &out,
                   CodecState &state, int64_t rows, int64_t cols) {
  out.assign(static_cast<size_t>(encodedBytes(spec, n, rows, cols)), 0);
  size_t at = 0;
  switch (spec.kind) {
  case CodecKind::FP16:
  case CodecKind::BF16:
    for (int64_t i = 0; i < n; ++i)
      put<uint16_t>(out, at,
                    spec.kind == CodecKind::FP16 ? floatToHalf(data[i]) : floatToBF16(data[i]));
    return;
  case CodecKind::Int8: {
    // Scales first, then the values.
    int64_t blocks = (n + spec.blockSize - 1) / spec.blockSize;
    size_t values = 4 * static_cast<size_t>(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t lo = b * spec.blockSize, hi = std::min(n, lo + spec.blockSize);
      float peak = 0;
      for (int64_t i = lo; i < hi; ++i)
        peak = std::max(peak, std::fabs(data[i]));
      float scale = peak / 127.0f;
      put<float>(out, at, scale);
      for (int64_t i = lo; i < hi; ++i) {
        long q = scale > 0 ? std::lrint(data[i] / scale) : 0;
        out[values + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127L, 127L)));
      }
    }
    return;
  }
  case CodecKind::TopK: {
    std::vector<float> y = withResidual(spec, data, n, state);
    int64_t k = topkCount(spec.ratio, n);
    std::vector<int32_t> index(n);
    std::iota(index.begin(), index.end(), 0);
    // The k largest magnitudes (ties: the lower index), sent in index order.
    if (k > 0)
      std::nth_element(index.begin(), index.begin() + (k - 1), index.end(),
                       [&](int32_t a, int32_t b) {
                         float fa = std::fabs(y[a]), fb = std::fabs(y[b]);
                         return fa > fb || (fa == fb && a < b);
                       });
    std::sort(index.begin(), index.begin() + k);
    std::vector<float> sent(n, 0.0f);
    for (int64_t j = 0; j < k; ++j)
      put<int32_t>(out, at, index[j]);
    for (int64_t j = 0; j < k; ++j) {
      put<float>(out, at, y[index[j]]);
      sent[index[j]] = y[index[j]];
    }
    keepResidual(spec, y, sent.data(), state);
    return;
  }
  case CodecKind::Sign: {
    std::vector<float> y = withResidual(spec, data, n, state);
    double total = 0;
    for (float v : y)
      total += std::fabs(v);
    float scale = n ? static_cast<float>(total / n) : 0.0f;
    put<float>(out, at, scale);
    std::vector<float> sent(n);
    for (int64_t i = 0; i < n; ++i) {
      bool negative = y[i] < 0;
      if (negative)
        out[at + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
      sent[i] = negative ? -scale : scale;
    }
    keepResidual(spec, y, sent.data(), state);
    return;
  }
  case CodecKind::PowerSGD: {
    std::vector<float> m = withResidual(spec, data, n, state);
    int64_t r = powerRank(spec, rows, cols);
    powerStart(state, cols, r); // Q [cols, r]: the previous step's, or seeded
    std::vector<float> p = powerLeft(m, state.q, rows, cols, r);
    orthonormaliseColumns(p, rows, r);
    std::vector<float> q = powerRight(m, p, rows, cols, r);
    state.q = q;
    for (float v : p)
      put<float>(out, at, v);
    for (float v : q)
      put<float>(out, at, v);
    if (spec.errorFeedback) {
      std::vector<float> sent(n);
      decode(spec, out.data(), n, sent.data(), rows, cols);
      keepResidual(spec, m, sent.data(), state);
    }
    return;
  }
  }
}

void moert::decode(const CodecSpec &spec, const uint8_t *bytes, int64_t n, float *out, int64_t rows,
                   int64_t cols) {
  size_t at = 0;
  switch (spec.kind) {
  case CodecKind::FP16:
  case CodecKind::BF16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = get<uint16_t>(bytes, at);
      out[i] = spec.kind == CodecKind::FP16 ? halfToFloat(h) : bf16ToFloat(h);
    }
    return;
  case CodecKind::Int8: {
    int64_t blocks = (n + spec.blockSize - 1) / spec.blockSize;
    size_t values = 4 * static_cast<size_t>(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      float scale = get<float>(bytes, at);
      int64_t lo = b * spec.blockSize, hi = std::min(n, lo + spec.blockSize);
      for (int64_t i = lo; i < hi; ++i)
        out[i] = static_cast<int8_t>(bytes[values + i]) * scale;
    }
    return;
  }
  case CodecKind::TopK: {
    int64_t k = topkCount(spec.ratio, n);
    std::fill(out, out + n, 0.0f);
    size_t values = 4 * static_cast<size_t>(k);
    for (int64_t j = 0; j < k; ++j) {
      int32_t i = get<int32_t>(bytes, at);
      size_t v = values + 4 * static_cast<size_t>(j);
      if (i >= 0 && i < n)
        out[i] = get<float>(bytes, v);
    }
    return;
  }
  case CodecKind::Sign: {
    float scale = get<float>(bytes, at);
    for (int64_t i = 0; i < n; ++i)
      out[i] = (bytes[at + i / 8] >> (i % 8)) & 1 ? -scale : scale;
    return;
  }
  case CodecKind::PowerSGD: {
    int64_t r = powerRank(spec, rows, cols);
    const uint8_t *p = bytes, *q = bytes + 4 * rows * r;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < r; ++j) {
          float pv, qv;
          moert::copyBytes(&pv, p + 4 * (i * r + j), 4);
          moert::copyBytes(&qv, q + 4 * (c * r + j), 4);
          sum += double(pv) * qv;
        }
        out[i * cols + c] = static_cast<float>(sum);
      }
    return;
  }
  }
}

namespace {

/// Checks that a codec's floats and encoded bytes have the sizes it needs.
bool codecSizes(const CodecSpec &spec, int64_t floatBytes, int64_t encoded, int64_t rows,
                int64_t cols, std::string &error) {
  if (floatBytes < 0 || floatBytes % 4) {
    error = std::to_string(floatBytes) + " bytes are not a whole number of floats";
    return false;
  }
  int64_t want = encodedBytes(spec, floatBytes / 4, rows, cols);
  if (encoded != want)
    error = "the encoded buffer holds " + std::to_string(encoded) + " bytes where " +
            std::to_string(want) + " are expected";
  return encoded == want;
}

} // namespace

bool moert::encodeBuffer(const CodecSpec &spec, const moert_buffer &data, const moert_buffer &out,
                         CodecState &state, std::string &error, int64_t rows, int64_t cols) {
  if (!codecSizes(spec, data.bytes, out.bytes, rows, cols, error))
    return false;
  HostStaging in, to;
  if (!in.open(data, true, error) || !to.open(out, false, error))
    return false;
  std::vector<uint8_t> encoded;
  encode(spec, static_cast<const float *>(in.data()), data.bytes / 4, encoded, state, rows, cols);
  copyBytes(to.data(), encoded.data(), encoded.size());
  return to.close(true, error);
}

bool moert::decodeBuffer(const CodecSpec &spec, const moert_buffer &bytes, const moert_buffer &out,
                         std::string &error, int64_t rows, int64_t cols) {
  if (!codecSizes(spec, out.bytes, bytes.bytes, rows, cols, error))
    return false;
  HostStaging in, to;
  if (!in.open(bytes, true, error) || !to.open(out, false, error))
    return false;
  decode(spec, static_cast<const uint8_t *>(in.data()), out.bytes / 4,
         static_cast<float *>(to.data()), rows, cols);
  return to.close(true, error);
}
