//===- CodecTest.cpp - the compression codecs of moert --------------------===//
//
// Every codec: the bytes `encode` writes equal its size formula exactly, and
// its round-trip error stays within what the format allows. Error feedback:
// what is not sent in one step is sent later, so the running sums of what
// was sent and of the inputs stay within one step's residual.
//
//===----------------------------------------------------------------------===//

#include "moert/Codecs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace moert;

namespace {

std::vector<float> randomData(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

std::vector<float> roundTrip(const CodecSpec &spec, const std::vector<float> &x, CodecState &state,
                             int64_t rows = 0, int64_t cols = 0) {
  std::vector<uint8_t> bytes;
  encode(spec, x.data(), static_cast<int64_t>(x.size()), bytes, state, rows, cols);
  EXPECT_EQ(static_cast<int64_t>(bytes.size()),
            encodedBytes(spec, static_cast<int64_t>(x.size()), rows, cols));
  std::vector<float> y(x.size());
  decode(spec, bytes.data(), static_cast<int64_t>(x.size()), y.data(), rows, cols);
  return y;
}

CodecSpec parsed(const std::string &text) {
  CodecSpec spec;
  std::string error;
  EXPECT_TRUE(parseCodec(text, spec, error)) << error;
  return spec;
}

TEST(CodecTest, HalfAndBFloat16RoundToNearestEven) {
  // Values a half holds exactly come back exactly (normal and subnormal).
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f,
                  -3.0517578e-05f, 1000.5f})
    EXPECT_EQ(halfToFloat(floatToHalf(v)), v) << v;
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);           // rounds up to infinity
  EXPECT_EQ(floatToHalf(5.9604645e-08f), 0x0001);     // smallest subnormal
  EXPECT_EQ(floatToHalf(2.9802322e-08f), 0x0000);     // halfway to zero: even
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00); // halfway: even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(INFINITY))));
  EXPECT_EQ(floatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBF16(1.0f + 1.0f / 256), 0x3f80); // halfway: even
  EXPECT_EQ(floatToBF16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(NAN))));
}

TEST(CodecTest, HalfPrecisionRoundTrips) {
  std::vector<float> x = randomData(1000, 1);
  CodecState state;
  for (const char *name : {"fp16", "bf16"}) {
    CodecSpec spec = parsed(name);
    std::vector<float> y = roundTrip(spec, x, state);
    double bound = spec.kind == CodecKind::FP16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), bound * std::fabs(x[i]) + 1e-7) << name << " " << i;
    EXPECT_EQ(encodedBytes(spec, 1000), 2000);
  }
}

TEST(CodecTest, Int8PerBlockScales) {
  std::vector<float> x = randomData(1000, 2, 3.0f);
  x[5] = 40.0f; // an outlier only costs its own block
  CodecState state;
  CodecSpec spec = parsed("int8:128");
  EXPECT_EQ(spec.blockSize, 128);
  EXPECT_EQ(encodedBytes(spec, 1000), 1000 + 4 * 8);
  std::vector<float> y = roundTrip(spec, x, state);
  for (int64_t b = 0; b < 8; ++b) {
    float peak = 0;
    for (int64_t i = b * 128; i < std::min<int64_t>(1000, (b + 1) * 128); ++i)
      peak = std::max(peak, std::fabs(x[i]));
    for (int64_t i = b * 128; i < std::min<int64_t>(1000, (b + 1) * 128); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), peak / 127 / 2 * 1.0001) << i;
  }
  // An all-zero block decodes to zeros.
  std::vector<float> zeros(300, 0.0f);
  for (float v : roundTrip(spec, zeros, state))
    EXPECT_EQ(v, 0.0f);
  // 3.9x reduction of a gradient all-reduce payload at the default block.
  EXPECT_GE(4.0 * 1e6 / encodedBytes(parsed("int8"), 1000000), 3.9);
}

TEST(CodecTest, TopKKeepsTheLargestAndFeedsBackTheRest) {
  int64_t n = 10000;
  CodecSpec spec = parsed("topk:0.01");
  EXPECT_EQ(encodedBytes(spec, n), 8 * 100);     // indices included
  EXPECT_EQ(encodedBytes(spec, 10099), 8 * 100); // at most the ratio
  EXPECT_EQ(encodedBytes(spec, 50), 8);          // at least one
  EXPECT_GE(4.0 * n / encodedBytes(spec, n), 50.0);
  std::vector<float> x = randomData(n, 3);
  CodecState state;
  std::vector<float> y = roundTrip(spec, x, state);
  int64_t kept = 0;
  float smallestKept = INFINITY, largestDropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] != 0) {
      ++kept;
      EXPECT_EQ(y[i], x[i]);
      smallestKept = std::min(smallestKept, std::fabs(x[i]));
    } else {
      largestDropped = std::max(largestDropped, std::fabs(x[i]));
    }
  }
  EXPECT_EQ(kept, 100);
  EXPECT_GE(smallestKept, largestDropped);
  // Error feedback: the residual is exactly what was not sent.
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(state.residual[i], x[i] - y[i]);
  // Over many steps everything is sent: sum(sent) = sum(inputs) - residual.
  std::vector<double> sentSum(y.begin(), y.end()), inSum(x.begin(), x.end());
  for (int step = 0; step < 200; ++step) {
    std::vector<float> g = randomData(n, 100 + step, 0.1f);
    std::vector<float> s = roundTrip(spec, g, state);
    for (int64_t i = 0; i < n; ++i)
      sentSum[i] += s[i], inSum[i] += g[i];
  }
  for (int64_t i = 0; i < n; i += 97)
    EXPECT_NEAR(sentSum[i] + state.residual[i], inSum[i], 1e-3);
}

TEST(CodecTest, SignKeepsTheMeanMagnitude) {
  int64_t n = 1001;
  CodecSpec spec = parsed("sign");
  EXPECT_EQ(encodedBytes(spec, n), 4 + 126);
  EXPECT_GE(4.0 * 1e6 / encodedBytes(spec, 1000000), 20.0);
  std::vector<float> x = randomData(n, 4);
  CodecState state;
  std::vector<float> y = roundTrip(spec, x, state);
  double mean = 0;
  for (float v : x)
    mean += std::fabs(v) / n;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(std::fabs(y[i]), mean, 1e-5);
    EXPECT_EQ(y[i] < 0, x[i] < 0);
    EXPECT_FLOAT_EQ(state.residual[i], x[i] - y[i]);
  }
  // Without error feedback no residual is kept.
  CodecSpec plain = spec;
  plain.errorFeedback = false;
  CodecState none;
  roundTrip(plain, x, none);
  EXPECT_TRUE(none.residual.empty());
}

TEST(CodecTest, PowerSGDRecoversALowRankMatrixAndWarmStarts) {
  int64_t rows = 40, cols = 30, r = 2;
  // M = A B^T of rank 2.
  std::vector<float> a = randomData(rows * r, 5), b = randomData(cols * r, 6);
  std::vector<float> m(rows * cols, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = 0; j < r; ++j)
        m[i * cols + c] += a[i * r + j] * b[c * r + j];
  CodecSpec spec = parsed("powersgd:2");
  spec.errorFeedback = false;
  EXPECT_EQ(encodedBytes(spec, rows * cols, rows, cols), 4 * 2 * (40 + 30));
  CodecState state;
  std::vector<float> y = roundTrip(spec, m, state, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    EXPECT_NEAR(y[i], m[i], 1e-3f * (1 + std::fabs(m[i])));
  EXPECT_EQ(static_cast<int64_t>(state.q.size()), cols * r); // kept for the next step
  // A full-rank matrix: rank-4 approximations improve as Q warm-starts
  // (power iteration), and error feedback keeps the rest.
  std::vector<float> full = randomData(rows * cols, 7);
  CodecSpec four = parsed("powersgd:4");
  four.errorFeedback = false;
  CodecState warm;
  auto error = [&](const std::vector<float> &approx) {
    double e = 0;
    for (size_t i = 0; i < full.size(); ++i)
      e += (approx[i] - full[i]) * (approx[i] - full[i]);
    return e;
  };
  double first = error(roundTrip(four, full, warm, rows, cols));
  double later = first;
  for (int it = 0; it < 5; ++it)
    later = error(roundTrip(four, full, warm, rows, cols));
  EXPECT_LT(later, first);
  CodecSpec fed = parsed("powersgd:4");
  CodecState withResidual;
  std::vector<float> sent = roundTrip(fed, full, withResidual, rows, cols);
  for (size_t i = 0; i < full.size(); ++i)
    EXPECT_NEAR(withResidual.residual[i], full[i] - sent[i], 1e-5);
}

TEST(CodecTest, BadCodecNamesAreErrors) {
  CodecSpec spec;
  std::string error;
  EXPECT_FALSE(parseCodec("int4", spec, error));
  EXPECT_NE(error.find("unknown codec 'int4'"), std::string::npos) << error;
  EXPECT_FALSE(parseCodec("topk:0", spec, error));
  EXPECT_NE(error.find("ratio in (0, 1]"), std::string::npos) << error;
  EXPECT_FALSE(parseCodec("topk:2", spec, error));
  EXPECT_FALSE(parseCodec("int8:0", spec, error));
  EXPECT_FALSE(parseCodec("int8:12.5", spec, error));
  EXPECT_FALSE(parseCodec("powersgd:x", spec, error));
  EXPECT_FALSE(parseCodec("fp16:3", spec, error));
  EXPECT_TRUE(parseCodec("topk:0.001", spec, error));
  EXPECT_DOUBLE_EQ(spec.ratio, 0.001);
}

} // namespace
