//===- CommDeviceTest.cpp - collectives on OpenCL device buffers ----------===//
//
// moert_*_buffer with buffers in OpenCL device memory (PoCL in CI), ranks
// as threads: the threads backend stages them through host memory
// (HostStaging.h) with the device interface's copies. Each rank's input
// lives on the device only (its host copy is overwritten with NaN after
// the upload, and the result is checked after copying the device copy
// back), against a serial host computation. The binary links the Halide
// runtime for OpenCL (moe-halide-gen -r, as the device kernel tests).
// Without an OpenCL platform the tests are skipped, saying so; with one,
// any device failure fails them. The codecs' buffer forms are staged the
// same way and are checked here too.
//
//===----------------------------------------------------------------------===//

#include "HalideRuntime.h"
#include "HalideRuntimeOpenCL.h"
#include "moert/Codecs.h"
#include "moert/Comm.h"
#include "moert/DeviceCopies.h"

#include <gtest/gtest.h>

#include <cmath>
#include <dlfcn.h>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

namespace {

const halide_device_interface_t *openCL() { return halide_opencl_device_interface(); }

/// Floats on the OpenCL device; the host copy is only the transfer's.
class DeviceFloats {
public:
  explicit DeviceFloats(int64_t count) : host(static_cast<size_t>(count), 0.0f) {
    buf.host = reinterpret_cast<uint8_t *>(host.data());
    buf.type = halide_type_t(halide_type_float, 32);
    buf.dimensions = 1;
    dim = halide_dimension_t(0, static_cast<int32_t>(count), 1);
    buf.dim = &dim;
  }
  ~DeviceFloats() {
    if (buf.device)
      openCL()->device_free(nullptr, &buf);
  }
  /// Allocates on the device and uploads `values`; the host copy then
  /// holds NaN, so a result read from it would show.
  int upload(const std::vector<float> &values) {
    host = values;
    buf.flags = halide_buffer_flag_host_dirty;
    if (int rc = openCL()->copy_to_device(nullptr, &buf, openCL()))
      return rc;
    std::fill(host.begin(), host.end(), std::nanf(""));
    return 0;
  }
  int allocate() {
    int rc = openCL()->device_malloc(nullptr, &buf, openCL());
    std::fill(host.begin(), host.end(), std::nanf(""));
    return rc;
  }
  /// The device copy, copied back (the collective marked it device-dirty).
  std::vector<float> download() {
    EXPECT_TRUE(buf.flags & halide_buffer_flag_device_dirty) << "the result is not on the device";
    EXPECT_EQ(openCL()->copy_to_host(nullptr, &buf), 0);
    return host;
  }
  moert_buffer buffer() { return moert_device_buffer(&buf, static_cast<int64_t>(host.size()) * 4); }

private:
  std::vector<float> host;
  halide_buffer_t buf{};
  halide_dimension_t dim;
};

/// OpenCL platforms the ICD loader finds (0 without a loader): asked
/// directly, so that only their absence skips the tests.
uint32_t openCLPlatforms() {
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return 0;
  using GetPlatforms = int32_t (*)(uint32_t, void *, uint32_t *);
  auto get = reinterpret_cast<GetPlatforms>(dlsym(lib, "clGetPlatformIDs"));
  uint32_t n = 0;
  if (!get || get(0, nullptr, &n) != 0)
    n = 0;
  return n;
}

/// Rank r's values: r + k / 8.
std::vector<float> valuesOf(int rank, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    v[k] = static_cast<float>(rank) + static_cast<float>(k) / 8;
  return v;
}

/// Runs body(comm) on `ranks` threads; every rank must return 0.
void onRanks(int ranks, const std::function<int(moert_comm *)> &body) {
  struct Run {
    const std::function<int(moert_comm *)> *body;
    std::mutex mutex;
    std::vector<std::string> errors;
  } run{&body, {}, {}};
  int rc = moert_run_threads(
      ranks, 30.0,
      [](moert_comm *comm, void *user) {
        auto *r = static_cast<Run *>(user);
        int result = (*r->body)(comm);
        if (result) {
          std::lock_guard<std::mutex> lock(r->mutex);
          r->errors.push_back(moert_comm_error(comm));
        }
        return result;
      },
      &run);
  EXPECT_EQ(rc, 0) << (run.errors.empty() ? "" : run.errors[0]);
}

class OpenCLTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (openCLPlatforms() == 0)
      GTEST_SKIP() << "no OpenCL platform (clGetPlatformIDs finds none)";
  }
};

class CommDeviceTest : public OpenCLTest, public ::testing::WithParamInterface<int> {};

TEST_P(CommDeviceTest, AllReduceOfDeviceBuffersIsTheHostSum) {
  const int ranks = GetParam();
  const int64_t count = 1000;
  std::vector<float> want(count, 0.0f); // the threads backend sums in member order
  for (int r = 0; r < ranks; ++r)
    for (int64_t k = 0; k < count; ++k)
      want[k] += valuesOf(r, count)[k];
  std::vector<std::vector<float>> got(ranks);
  std::vector<int32_t> all(ranks);
  std::iota(all.begin(), all.end(), 0);
  onRanks(ranks, [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    DeviceFloats data(count);
    if (data.upload(valuesOf(r, count)))
      return 1;
    int64_t before[2];
    moert_device_copied(before);
    moert_buffer b = data.buffer();
    if (int rc = moert_all_reduce_buffer(comm, &b, all.data(), ranks))
      return rc;
    int64_t copied[2];
    moert_device_copied(copied); // staged: down before, up after
    EXPECT_EQ(copied[0], count * 4);
    EXPECT_EQ(copied[1], count * 4);
    got[r] = data.download();
    return 0;
  });
  for (int r = 0; r < ranks; ++r)
    EXPECT_EQ(std::memcmp(got[r].data(), want.data(), count * 4), 0) << "rank " << r;
}

TEST_P(CommDeviceTest, AllGatherBetweenDeviceAndHostBuffers) {
  const int ranks = GetParam();
  const int64_t count = 37;
  std::vector<float> want;
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> v = valuesOf(r, count);
    want.insert(want.end(), v.begin(), v.end());
  }
  std::vector<std::vector<float>> onDevice(ranks), onHost(ranks);
  std::vector<int32_t> all(ranks);
  std::iota(all.begin(), all.end(), 0);
  onRanks(ranks, [&](moert_comm *comm) {
    int r = moert_comm_rank(comm);
    DeviceFloats send(count), recv(count * ranks);
    if (send.upload(valuesOf(r, count)) || recv.allocate())
      return 1;
    moert_buffer s = send.buffer(), d = recv.buffer();
    // Device to device, then device to host.
    if (int rc = moert_all_gather_buffer(comm, &s, &d, all.data(), ranks))
      return rc;
    onDevice[r] = recv.download();
    onHost[r].assign(count * ranks, -1.0f);
    moert_buffer h = moert_host_buffer(onHost[r].data(), count * ranks * 4);
    return moert_all_gather_buffer(comm, &s, &h, all.data(), ranks);
  });
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(onDevice[r], want) << "rank " << r;
    EXPECT_EQ(onHost[r], want) << "rank " << r;
  }
}

// The codecs' buffer forms: int8 from device floats into device bytes,
// and back into device floats, give the host forms' bytes and values.
TEST_F(OpenCLTest, CodecsEncodeAndDecodeDeviceBuffers) {
  const int64_t count = 300;
  moert::CodecSpec spec;
  std::string error;
  ASSERT_TRUE(moert::parseCodec("int8:64", spec, error)) << error;
  std::vector<float> x = valuesOf(2, count);
  moert::CodecState hostState, deviceState;
  std::vector<uint8_t> want;
  moert::encode(spec, x.data(), count, want, hostState);
  std::vector<float> wantDecoded(count);
  moert::decode(spec, want.data(), count, wantDecoded.data());

  int64_t encoded = moert::encodedBytes(spec, count);
  ASSERT_EQ(encoded % 4, 0);
  DeviceFloats floats(count), bytes(encoded / 4), decoded(count);
  ASSERT_EQ(floats.upload(x), 0);
  ASSERT_EQ(bytes.allocate(), 0);
  ASSERT_EQ(decoded.allocate(), 0);
  moert_buffer in = floats.buffer(), wire = bytes.buffer(), out = decoded.buffer();
  ASSERT_TRUE(moert::encodeBuffer(spec, in, wire, deviceState, error)) << error;
  ASSERT_TRUE(moert::decodeBuffer(spec, wire, out, error)) << error;
  std::vector<float> wireWords = bytes.download();
  EXPECT_EQ(std::memcmp(wireWords.data(), want.data(), static_cast<size_t>(encoded)), 0);
  EXPECT_EQ(decoded.download(), wantDecoded);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommDeviceTest, ::testing::Values(2, 3),
                         [](const auto &info) { return std::to_string(info.param) + "ranks"; });

} // namespace
