//===- DeviceArenaTest.cpp - arenas resident on a device ------------------===//
//
// The device layer of moert/Device.h on the device of the kernel tests
// (OpenCL: PoCL in CI; CUDA: MoEKernelTestsCUDA), with a real kernel (add_k, z = a + b): a kernel's
// arguments are crops of the arena's device copy, and bytes cross between
// host and device only where the other side changed them. The counts are
// moert_device_copied's, the metrics' device_copy_bytes.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "add_k.h"
#ifdef MOEC_KERNEL_TEST_CUDA
#include "HalideRuntimeCuda.h"
#define DEVICE_INTERFACE halide_cuda_device_interface()
#define DEVICE_API "cuda"
#else
#include "HalideRuntimeOpenCL.h"
#define DEVICE_INTERFACE halide_opencl_device_interface()
#define DEVICE_API "opencl"
#endif
#include "moert/Device.h"

#include <cstring>

namespace {

constexpr int kN = 40;              // floats per tensor
constexpr int64_t kStride = 512;    // the plan's device alignment
constexpr int64_t kBytes = 4 * kN;  // bytes per tensor
constexpr int64_t kArena = 4 * 512; // a, b, z, and a misaligned spare

struct Copied {
  int64_t toDevice, toHost;
};

Copied copied() {
  int64_t bytes[2];
  moert_device_copied(bytes);
  return {bytes[0], bytes[1]};
}

class DeviceArenaTest : public ::testing::Test {
protected:
  void SetUp() override {
    arena.assign(kArena / 4, 0.0f);
    ctx.run.activations = reinterpret_cast<char *>(arena.data());
    ASSERT_EQ(moert_device_attach(&ctx, DEVICE_INTERFACE, DEVICE_API, nullptr, 0, kArena, 0), 0);
    copied(); // reset
  }
  void TearDown() override { moert_device_free(&ctx); }

  float *at(int64_t offset) { return arena.data() + offset / 4; }

  /// z = a + b on the device, each a crop of the arena (or staged).
  int add(float *a, float *b, float *z) {
    Buffer<float> ba(a, kN), bb(b, kN), bz(z, kN);
    halide_buffer_t *const bufs[] = {ba.raw_buffer(), bb.raw_buffer(), bz.raw_buffer()};
    if (int rc = moert_device_call(&ctx, add_k_device_metadata(), bufs, 3))
      return rc;
    int rc = add_k_device(bufs[0], bufs[1], bufs[2]);
    return moert_device_called(&ctx, rc, bufs, 3);
  }

  std::vector<float> arena;
  moert_context ctx = {};
};

TEST_F(DeviceArenaTest, OnlyWhatTheOtherSideChangedCrosses) {
  float *a = at(0), *b = at(kStride), *z = at(2 * kStride);
  for (int i = 0; i < kN; ++i)
    a[i] = static_cast<float>(i), b[i] = 0.5f * static_cast<float>(i);
  moert_device_wrote(&ctx, a, kBytes);
  moert_device_wrote(&ctx, b, kBytes);
  ASSERT_EQ(add(a, b, z), 0);
  // Every byte starts host-newer: the inputs go to the device, z stays there.
  Copied c = copied();
  EXPECT_EQ(c.toDevice, 2 * kBytes);
  EXPECT_EQ(c.toHost, 0);
  EXPECT_EQ(z[3], 0.0f) << "z was copied to the host unasked";
  ASSERT_EQ(moert_device_host(&ctx, z, kBytes), 0);
  EXPECT_EQ(copied().toHost, kBytes);
  for (int i = 0; i < kN; ++i)
    ASSERT_EQ(z[i], 1.5f * static_cast<float>(i)) << i;
  // Reading it again, or running the kernel again, copies nothing.
  ASSERT_EQ(moert_device_host(&ctx, z, kBytes), 0);
  ASSERT_EQ(add(a, b, z), 0);
  c = copied();
  EXPECT_EQ(c.toDevice, 0);
  EXPECT_EQ(c.toHost, 0);
  // The host changes 10 elements of a: those 40 bytes go, nothing else.
  for (int i = 0; i < 10; ++i)
    a[i] = 100.0f;
  moert_device_wrote(&ctx, a, 40);
  ASSERT_EQ(add(a, b, z), 0);
  EXPECT_EQ(copied().toDevice, 40);
  // Host code reading part of z fetches that part; the rest follows later.
  ASSERT_EQ(moert_device_host(&ctx, z + 8, 8), 0);
  EXPECT_EQ(copied().toHost, 8);
  EXPECT_EQ(z[8], 100.0f + 4.0f);
  EXPECT_EQ(z[0], 0.0f) << "only the bytes asked for came back";
  ASSERT_EQ(moert_device_sync(&ctx), 0);
  EXPECT_EQ(copied().toHost, kBytes - 8);
  EXPECT_EQ(z[0], 100.0f);
  EXPECT_EQ(z[kN - 1], 1.5f * (kN - 1));
}

TEST_F(DeviceArenaTest, AnArgumentOutsideTheArenasIsStaged) {
  // An output outside the arenas (as tokens and metric buffers on the
  // stack are): it travels with the call; the inputs are crops.
  float *a = at(0), *b = at(kStride);
  std::vector<float> z(kN, 0.0f);
  for (int i = 0; i < kN; ++i)
    a[i] = 1.0f, b[i] = static_cast<float>(i);
  ASSERT_EQ(add(a, b, z.data()), 0);
  Copied c = copied();
  EXPECT_EQ(c.toDevice, 2 * kBytes);
  EXPECT_EQ(c.toHost, kBytes); // the staged output, back at once
  for (int i = 0; i < kN; ++i)
    ASSERT_EQ(z[i], 1.0f + static_cast<float>(i)) << i;
}

#ifndef MOEC_KERNEL_TEST_CUDA
TEST_F(DeviceArenaTest, AnArgumentACropCannotTakeIsStaged) {
  // 64 bytes past an aligned offset: OpenCL sub-buffers need the device's
  // base alignment, so this argument travels with the call.
  float *a = at(0), *b = at(kStride), *z = at(3 * kStride + 64);
  for (int i = 0; i < kN; ++i)
    a[i] = 1.0f, b[i] = static_cast<float>(i);
  ASSERT_EQ(add(a, b, z), 0);
  Copied c = copied();
  EXPECT_EQ(c.toDevice, 2 * kBytes);
  EXPECT_EQ(c.toHost, kBytes); // the staged output, back at once
  for (int i = 0; i < kN; ++i)
    ASSERT_EQ(z[i], 1.0f + static_cast<float>(i)) << i;
  // A staged input reads the host copy: first the device-newer bytes it
  // overlaps come back (y's last 24 floats), then it goes with the call.
  float *y = at(2 * kStride), *shifted = y + 16;
  ASSERT_EQ(add(a, b, y), 0); // y is a crop: device-newer
  copied();
  ASSERT_EQ(add(shifted, b, z), 0);
  c = copied();
  EXPECT_EQ(c.toDevice, kBytes);        // the staged input
  EXPECT_EQ(c.toHost, 4 * 24 + kBytes); // y's overlap, then z
  for (int i = 0; i < kN; ++i) {
    float in = i < 24 ? 1.0f + static_cast<float>(16 + i) : 0.0f;
    ASSERT_EQ(z[i], in + static_cast<float>(i)) << i;
  }
}
#else
TEST_F(DeviceArenaTest, ACudaCropTakesAnyOffset) {
  // CUDA crops are plain device pointers: 64 bytes past an aligned offset,
  // and a view overlapping a device-newer result, stay on the device.
  float *a = at(0), *b = at(kStride), *y = at(2 * kStride), *z = at(3 * kStride + 64);
  for (int i = 0; i < kN; ++i)
    a[i] = 1.0f, b[i] = static_cast<float>(i);
  ASSERT_EQ(add(a, b, y), 0);
  copied();
  ASSERT_EQ(add(y + 16, b, z), 0);
  Copied c = copied();
  EXPECT_EQ(c.toDevice, 4 * 16); // the input's 16 floats past y, host-newer
  EXPECT_EQ(c.toHost, 0);
  ASSERT_EQ(moert_device_host(&ctx, z, kBytes), 0);
  EXPECT_EQ(copied().toHost, kBytes);
  for (int i = 0; i < kN; ++i) {
    float in = i < 24 ? 1.0f + static_cast<float>(16 + i) : 0.0f;
    ASSERT_EQ(z[i], in + static_cast<float>(i)) << i;
  }
}
#endif

TEST_F(DeviceArenaTest, TheTrainerTakesTheStateBackAndReturnsIt) {
  float *a = at(0), *b = at(kStride), *z = at(2 * kStride);
  for (int i = 0; i < kN; ++i)
    a[i] = 2.0f, b[i] = 3.0f;
  ASSERT_EQ(add(a, b, z), 0);
  copied();
  // A checkpoint: every device-newer byte to the host, once.
  ASSERT_EQ(moert_device_sync(&ctx), 0);
  EXPECT_EQ(copied().toHost, kBytes);
  EXPECT_EQ(z[0], 5.0f);
  // A migration rewrote the state: all of it goes to the device when read.
  for (int i = 0; i < kN; ++i)
    a[i] = -1.0f;
  moert_device_wrote_all(&ctx);
  ASSERT_EQ(add(a, b, z), 0);
  EXPECT_EQ(copied().toDevice, 2 * kBytes);
  ASSERT_EQ(moert_device_host(&ctx, z, kBytes), 0);
  EXPECT_EQ(z[0], 2.0f);
}

} // namespace
