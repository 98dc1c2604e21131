//===- StepPreludeTest.cpp - the header every step program starts with ----===//
//
// moert/StepPrelude.h compiled as a step program includes it (alone in
// this binary, so its handlers are the ones installed): kernel errors reach
// its handler instead of aborting, kernel scratch comes from moert's pool,
// and views are dense with extents innermost first.
//
//===----------------------------------------------------------------------===//

#include "moert/StepPrelude.h"

#include <gtest/gtest.h>

#include <string>

TEST(StepPrelude, KernelErrorsAreReportedNotAborted) {
  testing::internal::CaptureStderr();
  halide_error(nullptr, "bad shape");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "kernel error: bad shape\n");
}

TEST(StepPrelude, KernelScratchComesFromThePool) {
  moert_scratch_reset_peak();
  int64_t before = moert_scratch_peak();
  void *p = halide_malloc(nullptr, 1 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(moert_scratch_peak() - before, 1 << 20);
  halide_free(nullptr, p);
}

TEST(StepPrelude, ViewsAreDenseInnermostFirst) {
  float data[2 * 3 * 4] = {};
  View v = view(data, f32, {4, 3, 2});
  EXPECT_EQ(v.b.host, reinterpret_cast<uint8_t *>(data));
  EXPECT_EQ(v.b.dimensions, 3);
  EXPECT_EQ(v.b.type, f32);
  EXPECT_EQ(v.d[0].extent, 4);
  EXPECT_EQ(v.d[1].stride, 4);
  EXPECT_EQ(v.d[2].stride, 12);
  EXPECT_EQ(v.d[2].extent, 2);
  EXPECT_EQ(v.b.dim, v.d);
  View scalar = view(data, bf16, {});
  EXPECT_EQ(scalar.b.dimensions, 0);
  EXPECT_EQ(scalar.b.type.bits, 16);
}
