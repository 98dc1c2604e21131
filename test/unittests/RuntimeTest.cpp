//===- RuntimeTest.cpp - data loading and checkpoints of the runtime ------===//
//
// Its own binary: the runtime links no MLIR.
//
//===----------------------------------------------------------------------===//

#include "moert/Checkpoint.h"
#include "moert/Data.h"
#include "moert/Program.h"
#include "moert/ScratchPool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert;

namespace {

/// A fresh temporary directory for one test.
class RuntimeTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/moert-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string write(const std::string &name, const std::string &bytes) {
    std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::string read(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static std::vector<std::string> files(const std::string &path) {
    std::vector<std::string> names;
    DIR *d = opendir(path.c_str());
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.')
        names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir;
};

std::vector<int32_t> allTokens(const TokenStream &s) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < s.size(); ++i)
    v.push_back(s[i]);
  return v;
}

TEST_F(RuntimeTest, TextIsBytesAndBinIsLittleEndianUint16) {
  TokenStream text, bin;
  std::string error;
  ASSERT_TRUE(loadTokens(write("a.txt", "Hi\n\xff"), DataFormat::Auto, text, error)) << error;
  EXPECT_EQ(allTokens(text), (std::vector<int32_t>{'H', 'i', '\n', 255}));
  EXPECT_EQ(text.maxToken, 255);
  ASSERT_TRUE(loadTokens(write("a.bin", std::string("\x01\x00\xff\xff\x34\x12", 6)),
                         DataFormat::Auto, bin, error))
      << error;
  EXPECT_EQ(allTokens(bin), (std::vector<int32_t>{1, 65535, 0x1234}));
  EXPECT_EQ(bin.maxToken, 65535);
  EXPECT_EQ(bin.bytes(), 6u); // stored as in the file, not widened
}

TEST_F(RuntimeTest, Uint32TokensAreLittleEndianAndCheckedForRange) {
  TokenStream t;
  std::string error;
  ASSERT_TRUE(loadTokens(write("a.u32", std::string("\x01\x00\x00\x00\x70\x11\x01\x00", 8)),
                         DataFormat::Bin32, t, error))
      << error;
  EXPECT_EQ(allTokens(t), (std::vector<int32_t>{1, 70000}));
  EXPECT_EQ(t.maxToken, 70000);
  EXPECT_TRUE(t.wide());
  EXPECT_FALSE(loadTokens(write("b.u32", "abcdef"), DataFormat::Bin32, t, error));
  EXPECT_EQ(error, dir + "/b.u32: a uint32 token file holds 4 bytes per token, but its size (6 "
                         "bytes) is not a multiple of 4");
  EXPECT_FALSE(
      loadTokens(write("c.u32", std::string("\x00\x00\x00\x80", 4)), DataFormat::Bin32, t, error));
  EXPECT_EQ(error, dir + "/c.u32: token 0 is 2147483648, past any vocabulary (2^31 - 1)");
}

TEST_F(RuntimeTest, BadDataFilesAreClearErrors) {
  TokenStream t;
  std::string error;
  EXPECT_FALSE(loadTokens(dir + "/missing.txt", DataFormat::Auto, t, error));
  EXPECT_EQ(error, dir + "/missing.txt: cannot read data file: No such file or directory");
  EXPECT_FALSE(loadTokens(write("empty.txt", ""), DataFormat::Auto, t, error));
  EXPECT_EQ(error, dir + "/empty.txt: the data file is empty");
  EXPECT_FALSE(loadTokens(write("odd.bin", "abc"), DataFormat::Auto, t, error));
  EXPECT_EQ(error, dir + "/odd.bin: a .bin token file holds uint16 tokens, but "
                         "its size (3 bytes) is odd");
  EXPECT_FALSE(loadTokens(dir, DataFormat::Auto, t, error));
  EXPECT_EQ(error, dir + ": cannot read data file: it is a directory");
}

TEST_F(RuntimeTest, SamplingIsSeededShiftedAndResumable) {
  TokenStream tokens; // 1000 uint16 tokens 0..999
  tokens.width = 2;
  for (int i = 0; i < 1000; ++i) {
    tokens.raw.push_back(static_cast<uint8_t>(i & 255));
    tokens.raw.push_back(static_cast<uint8_t>(i >> 8));
  }
  size_t split = trainSplitEnd(tokens.size(), 0.1);
  EXPECT_EQ(split, 900u);
  BatchSampler a(tokens, 0, split, 4, 16, 42), b(tokens, 0, split, 4, 16, 42),
      c(tokens, 0, split, 4, 16, 43);
  std::string error;
  ASSERT_TRUE(a.valid(error)) << error;
  std::vector<int32_t> in1, tg1, in2, tg2, in3, tg3;
  a.next(in1, tg1);
  b.next(in2, tg2);
  c.next(in3, tg3);
  EXPECT_EQ(in1, in2);
  EXPECT_NE(in1, in3);
  for (size_t i = 0; i < in1.size(); ++i) {
    EXPECT_EQ(tg1[i], in1[i] + 1);                  // targets are the next token
    EXPECT_LT(tg1[i], static_cast<int32_t>(split)); // stays in the train split
  }
  // Resuming at a position continues the same sequence of batches.
  for (int i = 0; i < 5; ++i)
    a.next(in1, tg1);
  BatchSampler resumed(tokens, 0, split, 4, 16, 42);
  resumed.setPosition(5);
  resumed.next(in2, tg2);
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(a.position(), 6u);
}

TEST_F(RuntimeTest, TooLittleDataIsAnError) {
  TokenStream tokens;
  tokens.raw.assign(10, 'a');
  BatchSampler s(tokens, 0, 10, 1, 16, 1);
  std::string error;
  EXPECT_FALSE(s.valid(error));
  EXPECT_EQ(error, "the data range has 10 tokens; one window needs seq_len + 1 = 17");
}

// moert_place_slots by its definition: 4 experts of 3 slots each, order
// [2, 0, 3, 1]: expert 2's slots
// move to position 0, expert 0's to position 1, and so on; dropped stays
// dropped; counts follow the order.
TEST_F(RuntimeTest, PlaceSlotsMovesSlotsToThePlacementOrder) {
  const int32_t order[] = {2, 0, 3, 1};
  const int32_t pos[] = {1, 3, 0, 2};
  const int64_t block = 3;
  std::vector<int32_t> in = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1};
  const int32_t counts[] = {5, 6, 7, 8};
  std::vector<int32_t> out(in.size(), 99);
  int32_t placed[4];
  ASSERT_EQ(moert_place_slots(nullptr, out.data(), in.data(), static_cast<int64_t>(in.size()),
                              placed, counts, 4, order, 4, block),
            0);
  for (size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(out[i], in[i] < 0 ? -1 : pos[in[i] / block] * block + in[i] % block) << i;
  for (int p = 0; p < 4; ++p)
    EXPECT_EQ(placed[p], counts[order[p]]);
}

// moert_widen (an f16 or bf16 model's logits for sampling): every one of the
// 65536 f16 bit patterns (normal, subnormal, zero, inf; NaN stays NaN) as
// the compiler's _Float16 converts it, and bf16 as the top half of an f32.
TEST_F(RuntimeTest, WidenIsExactForEveryHalfAndBFloat16) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = static_cast<uint16_t>(i);
  std::vector<float> f16(65536), bf16(65536);
  moert_widen(f16.data(), all.data(), 65536, 0);
  moert_widen(bf16.data(), all.data(), 65536, 1);
  for (uint32_t i = 0; i < 65536; ++i) {
    _Float16 h;
    std::memcpy(&h, &all[i], 2);
    float want = static_cast<float>(h);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(f16[i])) << std::hex << i;
    else
      EXPECT_EQ(f16[i], want) << std::hex << i;
    uint32_t bits;
    std::memcpy(&bits, &bf16[i], 4);
    EXPECT_EQ(bits, i << 16) << std::hex << i;
  }
  uint16_t out[5] = {};
  moert_fill_half(out, 4, 0x3f80); // bf16 1.0; the fifth stays
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[3], 0x3f80);
  EXPECT_EQ(out[4], 0);
}

// Uneven and replicated: 3 experts of 4 slots on 6 positions [0, 1, -1 | 1,
// 2, -1]. A replicated expert's valid slots (its count capped at the block)
// are cut into runs, one per replica, that even the ranks' finish times;
// empty positions count 0.
TEST_F(RuntimeTest, ChunkPositionsLaysTheBlocksOutChunkByChunk) {
  // 2 ranks of 4 positions, 2 chunks of 2: position q 4 + j 2 + l goes to
  // block j 4 + q 2 + l, so rank 0's positions 2, 3 follow rank 1's 4, 5.
  const int64_t block = 3;
  std::vector<int32_t> slots = {0, 2 * 3 + 1, 4 * 3 + 2, 7 * 3, -1};
  int32_t counts[8] = {10, 11, 12, 13, 14, 15, 16, 17};
  ASSERT_EQ(moert_chunk_positions(slots.data(), static_cast<int64_t>(slots.size()), counts, 8,
                                  block, 2, 2),
            0);
  EXPECT_EQ(slots, (std::vector<int32_t>{0, 4 * 3 + 1, 2 * 3 + 2, 7 * 3, -1}));
  const int32_t moved[] = {10, 11, 14, 15, 12, 13, 16, 17};
  for (int b = 0; b < 8; ++b)
    EXPECT_EQ(counts[b], moved[b]) << b;
  // One chunk changes nothing; positions that do not cut evenly are an error.
  ASSERT_EQ(moert_chunk_positions(slots.data(), 5, counts, 8, block, 2, 1), 0);
  EXPECT_EQ(counts[2], 14);
  EXPECT_NE(moert_chunk_positions(slots.data(), 5, counts, 8, block, 3, 2), 0);
}

TEST_F(RuntimeTest, PlaceSlotsSplitsAReplicatedExpertsSlotsByTheRanksTimes) {
  const int32_t order[] = {0, 1, -1, 1, 2, -1};
  const int64_t block = 4;
  std::vector<int32_t> in = {0, 3, 4, 5, 6, 7, 8, 11, -1};
  const int32_t counts[] = {2, 7, 1};
  std::vector<int32_t> out(in.size(), 99);
  int32_t placed[6];
  // One rank (no context): both replicas are on it, each takes half.
  ASSERT_EQ(moert_place_slots(nullptr, out.data(), in.data(), static_cast<int64_t>(in.size()),
                              placed, counts, 3, order, 6, block),
            0);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 3, 4, 5, 12, 13, 16, 19, -1}));
  const int32_t halves[] = {2, 2, 0, 2, 1, 0};
  for (int p = 0; p < 6; ++p)
    EXPECT_EQ(placed[p], halves[p]) << p;
  // Two ep ranks, the second at half speed: rank 0 holds expert 0 (2 slots,
  // time 2), rank 1 expert 2 (1 slot at half speed, time 2); expert 1's 4
  // slots raise both to 14/3: 8/3 and 4/3, whole 3 and 1 (the larger
  // remainder first).
  const double speeds[] = {1.0, 0.5};
  moert_context ctx{};
  ctx.run.ep = 2;
  ctx.run.ep_speeds = speeds;
  ASSERT_EQ(moert_place_slots(&ctx, out.data(), in.data(), static_cast<int64_t>(in.size()), placed,
                              counts, 3, order, 6, block),
            0);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 3, 4, 5, 6, 12, 16, 19, -1}));
  const int32_t bySpeed[] = {2, 3, 0, 1, 1, 0};
  for (int p = 0; p < 6; ++p)
    EXPECT_EQ(placed[p], bySpeed[p]) << p;
  // At equal speeds rank 1 (time 1) takes 2.5 and rank 0 (time 2) 1.5:
  // whole 2 and 2 (the first replica on ties).
  ctx.run.ep_speeds = nullptr;
  ASSERT_EQ(moert_place_slots(&ctx, out.data(), in.data(), static_cast<int64_t>(in.size()), placed,
                              counts, 3, order, 6, block),
            0);
  EXPECT_EQ(placed[1], 2);
  EXPECT_EQ(placed[3], 2);
  // An order naming an expert out of range is an error, not a crash; so is
  // a slot of an expert the order leaves out (expert 2, counted).
  const int32_t bad[] = {0, 1, 2, 3, -1, -1};
  EXPECT_NE(moert_place_slots(nullptr, out.data(), in.data(), static_cast<int64_t>(in.size()),
                              placed, counts, 3, bad, 6, block),
            0);
  const int32_t missing[] = {0, 1, -1, 1, -1, -1};
  EXPECT_NE(moert_place_slots(&ctx, out.data(), in.data(), static_cast<int64_t>(in.size()), placed,
                              counts, 3, missing, 6, block),
            0);
}

TEST_F(RuntimeTest, ScratchPoolReusesBlocksWithinItsLimit) {
  ASSERT_EQ(moert_scratch_set_limit(1 << 20), 0);
  void *a = moert_scratch_alloc(100000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 128, 0u);
  std::memset(a, 1, 100000);
  moert_scratch_free(a);
  // Any size fits where the freed block was: the region is one block again.
  void *b = moert_scratch_alloc(300000);
  EXPECT_EQ(a, b);
  void *d = moert_scratch_alloc(500000);
  ASSERT_NE(d, nullptr);
  EXPECT_GE(static_cast<char *>(d) - static_cast<char *>(b), 300000);
  // Past the region: the system allocator, still counted.
  void *c = moert_scratch_alloc(1 << 20);
  ASSERT_NE(c, nullptr);
  std::memset(c, 2, 1 << 20);
  EXPECT_GE(moert_scratch_peak(), (1 << 20) + 800000);
  // Not while blocks are out.
  EXPECT_EQ(moert_scratch_set_limit(1 << 21), -1);
  moert_scratch_free(c);
  moert_scratch_free(b);
  // Freed out of order, coalesced: the whole region is one block again.
  moert_scratch_free(d);
  void *e = moert_scratch_alloc((1 << 20) - 4096);
  EXPECT_EQ(e, a);
  moert_scratch_free(e);
  EXPECT_EQ(moert_scratch_set_limit(0), 0); // unmaps the region
  moert_scratch_free(nullptr);
  EXPECT_EQ(moert_scratch_alloc(SIZE_MAX - 10), nullptr); // no wrap-around
}

TEST_F(RuntimeTest, CheckpointsRoundTripAtomically) {
  TensorMap tensors;
  tensors["l0.wq"] = {{2, 3}, {1, 2, 3, 4, 5, 6}};
  tensors["l0.wq.adam_m"] = {{2, 3}, {0.5f, -1, 0, 0, 0, 1e-30f}};
  tensors["scalar"] = {{}, {7}};
  nlohmann::json state = {{"step", 120}, {"data_position", 120}, {"seed", 1234}};
  std::string error, ckpt = dir + "/ckpt";
  ASSERT_TRUE(saveCheckpoint(ckpt, tensors, state, error)) << error;
  // Overwriting leaves exactly the two files: no temporaries behind.
  state["step"] = 240;
  ASSERT_TRUE(saveCheckpoint(ckpt, tensors, state, error)) << error;
  EXPECT_EQ(files(ckpt), (std::vector<std::string>{"state.json", "tensors.safetensors"}));
  TensorMap back;
  nlohmann::json stateBack;
  ASSERT_TRUE(loadCheckpoint(ckpt, back, stateBack, error)) << error;
  EXPECT_EQ(stateBack["step"], 240);
  ASSERT_EQ(back.size(), 3u);
  for (const auto &[name, t] : tensors) {
    EXPECT_EQ(back[name].shape, t.shape) << name;
    EXPECT_EQ(back[name].data, t.data) << name;
  }
}

TEST_F(RuntimeTest, SafetensorsLayoutIsTheStandardOne) {
  TensorMap tensors;
  tensors["w"] = {{2}, {1.0f, 2.0f}};
  std::string bytes = encodeSafetensors(tensors);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(bytes.size(), 8 + n + 8);
}

TEST_F(RuntimeTest, CorruptCheckpointsAreRejectedWithReasons) {
  TensorMap tensors;
  tensors["w"] = {{2}, {1.0f, 2.0f}};
  std::string good = encodeSafetensors(tensors), error;
  TensorMap out;
  EXPECT_FALSE(decodeSafetensors(good.substr(0, 5), "f", out, error));
  EXPECT_EQ(error, "f: truncated: no safetensors header length");
  EXPECT_FALSE(decodeSafetensors(good.substr(0, good.size() - 4), "f", out, error));
  EXPECT_EQ(error, "f: tensor 'w': data_offsets [0, 8] outside the data (4 bytes)");
  std::string hugeHeader = good;
  hugeHeader[7] = '\x7f';
  EXPECT_FALSE(decodeSafetensors(hugeHeader, "f", out, error));
  EXPECT_NE(error.find("header length"), std::string::npos);
  std::string notJson = good;
  notJson[8] = '!';
  EXPECT_FALSE(decodeSafetensors(notJson, "f", out, error));
  EXPECT_EQ(error, "f: the header is not a JSON object");
  std::string f16 = good;
  size_t at = f16.find("F32");
  f16.replace(at, 3, "F16");
  EXPECT_FALSE(decodeSafetensors(f16, "f", out, error));
  EXPECT_EQ(error, "f: tensor 'w': dtype \"F16\" is not supported (F32 only)");
  // A pipe in place of the tensors file is refused, not waited on.
  std::string piped = dir + "/piped";
  ::mkdir(piped.c_str(), 0755);
  ASSERT_EQ(::mkfifo((piped + "/tensors.safetensors").c_str(), 0644), 0);
  nlohmann::json pipedState;
  EXPECT_FALSE(loadCheckpoint(piped, out, pipedState, error));
  EXPECT_EQ(error, piped + "/tensors.safetensors: cannot read: not a regular file");
  // A missing checkpoint directory names the file.
  nlohmann::json state;
  EXPECT_FALSE(loadCheckpoint(dir + "/none", out, state, error));
  EXPECT_EQ(error, dir + "/none/tensors.safetensors: cannot read: No such file or directory");
}

TEST_F(RuntimeTest, ACheckpointNeverMixesSteps) {
  TensorMap step40, step100;
  step40["w"] = {{2}, {4.0f, 0.0f}};
  step100["w"] = {{2}, {10.0f, 0.0f}};
  std::string error, ckpt = dir + "/mixed", old = dir + "/old";
  ASSERT_TRUE(saveCheckpoint(old, step40, {{"step", 40}, {"data_position", 40}}, error)) << error;
  ASSERT_TRUE(saveCheckpoint(ckpt, step100, {{"step", 100}, {"data_position", 100}}, error));
  // A save killed between its two renames: the new tensors beside the old
  // state.json. The tensors' own state wins, and the reader says so.
  std::ifstream in(old + "/state.json");
  std::string oldState((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(ckpt + "/state.json") << oldState;
  TensorMap back;
  nlohmann::json state;
  std::string note;
  ASSERT_TRUE(loadCheckpoint(ckpt, back, state, error, &note)) << error;
  EXPECT_EQ(state["step"], 100);
  EXPECT_EQ(back["w"].data[0], 10.0f);
  EXPECT_NE(note.find("does not match the state saved with the tensors"), std::string::npos)
      << note;
  // state.json lost, or garbage: the same.
  std::ofstream(ckpt + "/state.json") << "{\"step\": ";
  ASSERT_TRUE(loadCheckpoint(ckpt, back, state, error, &note)) << error;
  EXPECT_EQ(state["step"], 100);
  std::remove((ckpt + "/state.json").c_str());
  note.clear();
  ASSERT_TRUE(loadCheckpoint(ckpt, back, state, error, &note)) << error;
  EXPECT_NE(note.find("is missing"), std::string::npos) << note;
  // A checkpoint whose tensors carry no state (an older writer) reads
  // state.json.
  std::ofstream(ckpt + "/tensors.safetensors") << encodeSafetensors(step100);
  std::ofstream(ckpt + "/state.json") << "{\"step\": 7}";
  ASSERT_TRUE(loadCheckpoint(ckpt, back, state, error)) << error;
  EXPECT_EQ(state["step"], 7);
  // Metadata that is not a map of strings is an error, not a crash.
  TensorMap w;
  w["w"] = {{1}, {1.0f}};
  std::string bytes = encodeSafetensors(w, {{"moec.state", "x"}});
  bytes.replace(bytes.find("\"x\""), 3, "[1]");
  EXPECT_FALSE(decodeSafetensors(bytes, "f", back, error));
  EXPECT_EQ(error, "f: __metadata__ 'moec.state' is not a string");
}

TEST_F(RuntimeTest, KilledSavesLeaveNoTemporariesBehind) {
  TensorMap tensors;
  tensors["w"] = {{1}, {1.0f}};
  std::string error, ckpt = dir + "/tmps";
  ASSERT_TRUE(saveCheckpoint(ckpt, tensors, {{"step", 1}, {"data_position", 1}}, error));
  // What a save killed mid-write leaves: a temporary of a process that is
  // gone (pid 2^22 + 1 exceeds Linux's pid_max) and of this one.
  std::ofstream(ckpt + "/tensors.safetensors.tmp.4194305") << "partial";
  std::ofstream(ckpt + "/state.json.tmp." + std::to_string(getpid())) << "partial";
  ASSERT_TRUE(saveCheckpoint(ckpt, tensors, {{"step", 2}, {"data_position", 2}}, error));
  EXPECT_EQ(files(ckpt), (std::vector<std::string>{"state.json", "tensors.safetensors"}));
}

TEST_F(RuntimeTest, KeepCheckpointsKeepsTheLastKSaves) {
  TensorMap tensors;
  std::string error, ckpt = dir + "/keep";
  for (long long step : {2, 4, 6, 8}) {
    tensors["w"] = {{1}, {static_cast<float>(step)}};
    ASSERT_TRUE(saveCheckpoint(ckpt, tensors, {{"step", step}, {"data_position", step}}, error, 2))
        << error;
  }
  EXPECT_EQ(files(ckpt),
            (std::vector<std::string>{"state.json", "step-000000000006.safetensors",
                                      "step-000000000008.safetensors", "tensors.safetensors"}));
  // A kept save is a whole checkpoint: copied over the latest, it loads as
  // its own step (the stale state.json is noticed and ignored).
  std::ifstream in(ckpt + "/step-000000000006.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(ckpt + "/tensors.safetensors", std::ios::binary) << bytes;
  TensorMap back;
  nlohmann::json state;
  ASSERT_TRUE(loadCheckpoint(ckpt, back, state, error)) << error;
  EXPECT_EQ(state["step"], 6);
  EXPECT_EQ(back["w"].data[0], 6.0f);
}

TEST_F(RuntimeTest, DeeplyNestedCheckpointJsonIsAnErrorNotAStackOverflow) {
  // nlohmann/json's dump and comparison recurse per level: 10^6 levels
  // would overflow the stack, so the reader refuses them before parsing.
  std::string deep = "{\"step\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  TensorMap tensors, back;
  tensors["w"] = {{1}, {1.0f}};
  std::string error, ckpt = dir + "/deep";
  ASSERT_TRUE(saveCheckpoint(ckpt, tensors, {{"step", 1}, {"data_position", 1}}, error));
  std::ofstream(ckpt + "/tensors.safetensors")
      << encodeSafetensors(tensors, {{"moec.state", deep}});
  nlohmann::json state;
  EXPECT_FALSE(loadCheckpoint(ckpt, back, state, error));
  EXPECT_EQ(error, ckpt + "/tensors.safetensors: the recorded state (moec.state) nests deeper "
                          "than 64 levels");
  // The same in state.json beside tensors without a recorded state.
  std::ofstream(ckpt + "/tensors.safetensors") << encodeSafetensors(tensors);
  std::ofstream(ckpt + "/state.json") << deep;
  EXPECT_FALSE(loadCheckpoint(ckpt, back, state, error));
  EXPECT_EQ(error, ckpt + "/state.json nests deeper than 64 levels");
  // And in the safetensors header itself; brackets inside strings do not count.
  std::string header = "{\"a[[[\": " + std::string(70, '[') + std::string(70, ']') + "}";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  EXPECT_FALSE(decodeSafetensors(bytes + header, "f", back, error));
  EXPECT_EQ(error, "f: the header nests deeper than 64 levels");
  header = "{\"__metadata__\": {\"k\": \"" + std::string(100, '[') + "\"}}";
  bytes[0] = static_cast<char>(header.size());
  EXPECT_TRUE(decodeSafetensors(bytes + header, "f", back, error)) << error;
}

TEST_F(RuntimeTest, EveryResumeStateValueIsChecked) {
  ResumeState resume;
  std::string error;
  EXPECT_TRUE(
      readResumeState({{"step", 40}, {"data_position", 41}, {"seed", 3}}, "s", 3, resume, error));
  EXPECT_EQ(resume.step, 40);
  EXPECT_EQ(resume.dataPosition, 41u);
  EXPECT_FALSE(readResumeState({{"step", -1}, {"data_position", 0}}, "s", 0, resume, error));
  EXPECT_EQ(error, "s: \"step\" must be an integer >= 0, got -1");
  EXPECT_FALSE(readResumeState({{"step", 1}, {"data_position", "x"}}, "s", 0, resume, error));
  EXPECT_EQ(error, "s: \"data_position\" must be an integer >= 0, got \"x\"");
  EXPECT_FALSE(readResumeState({{"step", 1}, {"data_position", std::string(100, 'y')}}, "s", 0,
                               resume, error));
  EXPECT_EQ(error,
            "s: \"data_position\" must be an integer >= 0, got \"" + std::string(56, 'y') + "...");
  EXPECT_FALSE(
      readResumeState({{"step", 1}, {"data_position", 0}, {"seed", 4}}, "s", 3, resume, error));
  EXPECT_EQ(error, "s: written with seed 4, this run uses 3 (pass --seed to continue it)");
  EXPECT_FALSE(readResumeState(nlohmann::json::object(), "s", 0, resume, error));
  EXPECT_EQ(error, "s: \"step\" must be an integer >= 0, got null");
}

} // namespace

// A Halide target's x86 features as the CPU checks the trainer makes before
// the first step (an illegal instruction otherwise); other architectures
// and the "host" target need none.
