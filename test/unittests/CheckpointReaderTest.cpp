//===- CheckpointReaderTest.cpp - the safetensors reader's range checks ---===//
//
// A safetensors file names each tensor's bytes by [begin, end) offsets into
// its data section. The reader (runtime/lib/Checkpoint.cpp, shared by
// decodeSafetensors and loadCheckpoint) rejects a file whose tensors share
// bytes: two parameters read from overlapping ranges would alias, and a
// crafted checkpoint could make one tensor's update show up in another.
// Ranges that only touch are fine: that is how every file is written.
//
//===----------------------------------------------------------------------===//

#include "moert/Checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace moert;

namespace {

/// One F32 tensor entry of a header: `elements` values at [begin, end).
nlohmann::json entry(uint64_t elements, uint64_t begin, uint64_t end) {
  return {{"dtype", "F32"}, {"shape", {elements}}, {"data_offsets", {begin, end}}};
}

/// A safetensors file: the header's length, the header, then `floats`
/// values 0, 1, 2, ... as the data section.
std::string file(const nlohmann::json &header, size_t floats) {
  std::string text = header.dump();
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  for (size_t i = 0; i < floats; ++i) {
    float v = static_cast<float>(i);
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
  }
  return out;
}

bool decode(const nlohmann::json &header, size_t floats, TensorMap &out, std::string &error) {
  return decodeSafetensors(file(header, floats), "f.safetensors", out, error);
}

TEST(CheckpointReader, RejectsOverlappingRanges) {
  // a: floats 0..3 (bytes [0, 16)), b: floats 2..5 (bytes [8, 24)).
  TensorMap out;
  std::string error;
  EXPECT_FALSE(decode({{"a", entry(4, 0, 16)}, {"b", entry(4, 8, 24)}}, 6, out, error));
  EXPECT_EQ(error, "f.safetensors: tensor data ranges overlap");
}

TEST(CheckpointReader, RejectsOneRangeInsideAnother) {
  TensorMap out;
  std::string error;
  EXPECT_FALSE(decode({{"a", entry(8, 0, 32)}, {"b", entry(2, 8, 16)}}, 8, out, error));
  EXPECT_EQ(error, "f.safetensors: tensor data ranges overlap");
}

TEST(CheckpointReader, RejectsTheSameRangeTwice) {
  TensorMap out;
  std::string error;
  EXPECT_FALSE(decode({{"a", entry(4, 0, 16)}, {"b", entry(4, 0, 16)}}, 4, out, error));
  EXPECT_EQ(error, "f.safetensors: tensor data ranges overlap");
}

TEST(CheckpointReader, RejectsAnOverlapBetweenTheLastTwoOfSeveral) {
  // Sorted by offset the overlap is between the second and third range, in
  // header (name) order between the first and the last tensor.
  TensorMap out;
  std::string error;
  EXPECT_FALSE(decode({{"a", entry(2, 28, 36)}, {"m", entry(4, 0, 16)}, {"z", entry(4, 16, 32)}},
                      9, out, error));
  EXPECT_EQ(error, "f.safetensors: tensor data ranges overlap");
}

TEST(CheckpointReader, AcceptsRangesThatTouch) {
  // The boundary case of the check: b begins where a ends.
  TensorMap out;
  std::string error;
  ASSERT_TRUE(decode({{"a", entry(4, 0, 16)}, {"b", entry(2, 16, 24)}}, 6, out, error)) << error;
  EXPECT_EQ(out.at("a").data, (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(out.at("b").data, (std::vector<float>{4, 5}));
  // Out of order in the file: b's bytes first.
  ASSERT_TRUE(decode({{"a", entry(4, 8, 24)}, {"b", entry(2, 0, 8)}}, 6, out, error)) << error;
  EXPECT_EQ(out.at("a").data, (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(out.at("b").data, (std::vector<float>{0, 1}));
}

TEST(CheckpointReader, ResumeRejectsACheckpointWithOverlappingRanges) {
  // The same check on the file path a resume reads (loadCheckpoint reads
  // each tensor straight from the file).
  char pattern[] = "/tmp/moert-ckpt-reader-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  std::string dir = pattern, path = dir + "/tensors.safetensors";
  {
    std::ofstream f(path, std::ios::binary);
    f << file({{"__metadata__", {{"moec.state", "{\"step\": 1}"}}},
               {"w", entry(4, 0, 16)},
               {"x", entry(4, 4, 20)}},
              5);
  }
  TensorMap tensors;
  nlohmann::json state;
  std::string error;
  EXPECT_FALSE(loadCheckpoint(dir, tensors, state, error));
  EXPECT_EQ(error, path + ": tensor data ranges overlap");
  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}

} // namespace
