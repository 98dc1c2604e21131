//===- HFCheckpointTest.cpp - HuggingFace safetensors in and out ----------===//

#include "moert/Checkpoint.h"
#include "moert/HFCheckpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert;

namespace {

std::string freshDir(const char *name) {
  std::string dir = ::testing::TempDir() + "/hfckpt-" + name + "-" + std::to_string(getpid());
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<HFTensorOut> sample() {
  std::vector<HFTensorOut> out;
  for (int t = 0; t < 5; ++t) {
    HFTensorOut x{"t" + std::to_string(t), {3, 4}, std::vector<float>(12)};
    for (int i = 0; i < 12; ++i)
      x.data[i] = 0.37f * static_cast<float>(t * 12 + i) - 3.0f;
    out.push_back(x);
  }
  return out;
}

} // namespace

// Shards of at most the given size, their index, and every element read
// back in each dtype; a later single-file export removes the shards.
TEST(HFCheckpointTest, ShardsRoundTripAndStaleFilesGo) {
  std::string dir = freshDir("shards");
  std::vector<HFTensorOut> tensors = sample();
  std::string error;
  for (HFDtype dtype : {HFDtype::F32, HFDtype::BF16, HFDtype::F16}) {
    // 12 elements x 4 bytes: two f32 tensors per 100-byte shard.
    ASSERT_TRUE(writeHFCheckpoint(dir, tensors, dtype, 100, error)) << error;
    size_t shards = dtype == HFDtype::F32 ? 3 : 2;
    EXPECT_TRUE(exists(dir + "/model.safetensors.index.json"));
    EXPECT_FALSE(exists(dir + "/model.safetensors"));
    char last[64];
    std::snprintf(last, sizeof last, "/model-%05zu-of-%05zu.safetensors", shards, shards);
    EXPECT_TRUE(exists(dir + last)) << last;
    HFCheckpointReader reader;
    ASSERT_TRUE(reader.open(dir, error)) << error;
    ASSERT_EQ(reader.tensors().size(), tensors.size());
    for (const HFTensorOut &t : tensors) {
      const HFTensor *got = reader.find(t.name);
      ASSERT_NE(got, nullptr) << t.name;
      EXPECT_EQ(got->dtype, dtype);
      EXPECT_EQ(got->shape, t.shape);
      std::vector<float> values(12);
      reader.read(*got, 0, 12, values.data());
      for (int i = 0; i < 12; ++i) {
        float want = dtype == HFDtype::F32    ? t.data[i]
                     : dtype == HFDtype::BF16 ? bf16ToFloat(floatToBF16(t.data[i]))
                                              : halfToFloat(floatToHalf(t.data[i]));
        EXPECT_EQ(values[i], want) << t.name << "[" << i << "]";
      }
    }
    EXPECT_EQ(reader.bytesRead(), tensors.size() * 12 * bytesOf(dtype));
    EXPECT_EQ(reader.totalBytes(), reader.bytesRead());
  }
  ASSERT_TRUE(writeHFCheckpoint(dir, tensors, HFDtype::F32, 1 << 20, error)) << error;
  EXPECT_TRUE(exists(dir + "/model.safetensors"));
  EXPECT_FALSE(exists(dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(exists(dir + "/model-00001-of-00003.safetensors"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

// A slice reads only its elements and counts only their bytes.
TEST(HFCheckpointTest, PartialReadsCountTheirBytes) {
  std::string dir = freshDir("partial");
  std::string error;
  ASSERT_TRUE(writeHFCheckpoint(dir, sample(), HFDtype::BF16, 1 << 20, error)) << error;
  HFCheckpointReader reader;
  ASSERT_TRUE(reader.open(dir, error)) << error;
  float three[3];
  reader.read(*reader.find("t2"), 5, 3, three);
  EXPECT_EQ(three[0], bf16ToFloat(floatToBF16(0.37f * 29 - 3.0f)));
  EXPECT_EQ(reader.bytesRead(), 6u);
  std::system(("rm -rf '" + dir + "'").c_str());
}

// Malformed directories and files are errors naming what is wrong.
TEST(HFCheckpointTest, BadInputIsNamed) {
  std::string dir = freshDir("bad"), error;
  HFCheckpointReader none;
  EXPECT_FALSE(none.open(dir, error));
  EXPECT_NE(error.find("not a directory"), std::string::npos) << error;
  ::mkdir(dir.c_str(), 0755);
  HFCheckpointReader empty;
  EXPECT_FALSE(empty.open(dir, error));
  EXPECT_NE(error.find("holds neither model.safetensors nor"), std::string::npos) << error;

  auto expectError = [&](const std::string &header, const std::string &data,
                         const std::string &message) {
    std::ofstream f(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    f.write(reinterpret_cast<const char *>(&n), 8);
    f << header << data;
    f.close();
    HFCheckpointReader reader;
    std::string why;
    EXPECT_FALSE(reader.open(dir, why)) << header;
    EXPECT_NE(why.find(message), std::string::npos) << why;
  };
  expectError("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", "ab",
              "tensor 'w': dtype \"F8_E4M3\" is not supported (F32, BF16, F16)");
  expectError("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "abcd",
              "data_offsets [0, 8] outside the data (4 bytes)");
  expectError("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", "abcd",
              "tensor 'w': 4 bytes of data for 3 BF16 elements");
  expectError("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "abcd",
              "tensor 'w': bad dimension -1");
  expectError("[1, 2]", "", "the safetensors header is not a JSON object");
  ::unlink((dir + "/model.safetensors").c_str());
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": {\"w\": \"../x\"}}";
  HFCheckpointReader escape;
  EXPECT_FALSE(escape.open(dir, error));
  EXPECT_NE(error.find("expected a file name in"), std::string::npos) << error;
  std::system(("rm -rf '" + dir + "'").c_str());
}
