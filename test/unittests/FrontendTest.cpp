//===- FrontendTest.cpp - the frontend's readers through the C++ API ------===//

#include "moe/Frontend/ClusterSpec.h"
#include "moe/Frontend/ModelSpec.h"
#include "moe/Frontend/ModelToMLIR.h"

#include <gtest/gtest.h>

using namespace moec::frontend;

namespace {

TEST(JsonDocTest, RemembersWhereValuesAndKeysStart) {
  DiagnosticList diags;
  auto doc = JsonDoc::parse("t.json",
                            "{\n  \"a\": {\"b/c\": [1,\n    true]},\n"
                            "  \"d~\": \"x\"\n}\n",
                            diags);
  ASSERT_TRUE(doc) << diags.str();
  EXPECT_EQ(doc->valuePos("").line, 1u);
  EXPECT_EQ(doc->keyPos("/a").line, 2u);
  EXPECT_EQ(doc->keyPos("/a").col, 3u);
  EXPECT_EQ(doc->valuePos("/a").col, 8u);
  // RFC 6901 escapes: "/" is ~1, "~" is ~0.
  EXPECT_EQ(doc->valuePos("/a/b~1c/1").line, 3u);
  EXPECT_EQ(doc->valuePos("/a/b~1c/1").col, 5u);
  EXPECT_EQ(doc->keyPos("/d~0").line, 4u);
  // A missing member falls back to its nearest existing ancestor.
  EXPECT_EQ(doc->valuePos("/a/missing").col, 8u);
  EXPECT_EQ(JsonDoc::child("/x", "a/b~"), "/x/a~1b~0");
}

TEST(JsonDocTest, DuplicateKeysAndSyntaxErrorsAreReported) {
  DiagnosticList diags;
  EXPECT_FALSE(JsonDoc::parse("t.json", "{\"a\": 1, \"a\": 2}", diags));
  ASSERT_EQ(diags.all().size(), 1u);
  EXPECT_EQ(diags.all()[0].str(), "t.json:1:10: error: /a: duplicate key \"a\"");
  DiagnosticList syntax;
  EXPECT_FALSE(JsonDoc::parse("t.json", "{\"a\": [1, 2}", syntax));
  ASSERT_TRUE(syntax.hasErrors());
  EXPECT_NE(syntax.str().find("malformed JSON"), std::string::npos);
}

TEST(DiagnosticsTest, SuggestsCloseNamesOnly) {
  std::vector<std::string> fields = {"num_experts", "top_k", "n_layers", "layers"};
  EXPECT_EQ(closestMatch("topk", fields), "top_k");
  EXPECT_EQ(closestMatch("num_layers", fields), "n_layers");
  EXPECT_EQ(closestMatch("num_expert", fields), "num_experts");
  EXPECT_EQ(closestMatch("colour", fields), "");
}

TEST(ModelSpecTest, ReadsDefaultsAndOverrides) {
  DiagnosticList diags;
  auto doc = JsonDoc::parse("m.json", R"({
    "vocab_size": 100, "d_model": 32, "n_layers": 3, "n_heads": 4,
    "seq_len": 8, "batch_size": 2,
    "moe": {"num_experts": 4, "expert_ffn_dim": 64, "capacity_factor": null,
            "dense_layers": [0]},
    "layers": {"2": {"top_k": 1, "router_scoring": "sigmoid"}}
  })",
                            diags);
  ASSERT_TRUE(doc);
  std::optional<ModelSpec> spec = readModelJson(std::move(doc), diags);
  ASSERT_TRUE(spec) << diags.str();
  EXPECT_EQ(spec->numKvHeads, 4);
  EXPECT_EQ(spec->headDim, 8);
  EXPECT_EQ(spec->ffnDim, 128);
  ASSERT_EQ(spec->layers.size(), 3u);
  EXPECT_TRUE(spec->layers[0].dense);
  EXPECT_FALSE(spec->layers[1].dense);
  EXPECT_EQ(spec->layers[1].moe.topK, 2);
  EXPECT_FALSE(spec->layers[1].moe.capacityFactor); // null: dropless
  EXPECT_EQ(spec->layers[2].moe.topK, 1);
  EXPECT_EQ(spec->layers[2].moe.scoring, "sigmoid");
  EXPECT_EQ(spec->layers[2].ptr, "/layers/2");
  // Dropless: one slot per token.
  EXPECT_EQ(expertCapacity(spec->layers[1].moe, spec->numTokens()), 16);
}

TEST(ModelSpecTest, CapacityRoundsUpAndIsCappedAtTheTokenCount) {
  MoESettings m;
  m.numExperts = 8;
  m.topK = 2;
  m.capacityFactor = 1.25;
  EXPECT_EQ(expertCapacity(m, 100), 32); // ceil(1.25 * 100 * 2 / 8) = 31.25
  m.capacityFactor = 100.0;
  EXPECT_EQ(expertCapacity(m, 100), 100);
  m.capacityFactor = 1e-9;
  EXPECT_EQ(expertCapacity(m, 100), 1);
}

TEST(ClusterSpecTest, PresetsAreCompleteAndMixedClustersCount) {
  for (const moec::frontend::DeviceKind &kind : devicePresets()) {
    EXPECT_GT(kind.flopsF32, 0) << kind.name;
    EXPECT_GE(kind.flopsBF16, kind.flopsF32) << kind.name;
    EXPECT_GT(kind.memoryBytes, 0) << kind.name;
    EXPECT_GT(kind.memoryBandwidth, 0) << kind.name;
    EXPECT_GT(kind.intraNode.bandwidth, 0) << kind.name;
    EXPECT_FALSE(kind.source.empty()) << kind.name;
  }
  DiagnosticList diags;
  auto doc = JsonDoc::parse("c.json", R"({"nodes": [
      {"count": 2, "device": "h100"},
      {"count": 3, "device": "ascend-910b", "devices_per_node": 4}]})",
                            diags);
  ASSERT_TRUE(doc);
  std::optional<ClusterSpec> c = readClusterJson(std::move(doc), diags);
  ASSERT_TRUE(c) << diags.str();
  EXPECT_EQ(c->numNodes(), 5);
  EXPECT_EQ(c->numDevices(), 2 * 8 + 3 * 4);
  EXPECT_EQ(c->kinds.size(), 2u);
  // The inter-node link defaults to the slowest NIC in use (Ascend 200GE).
  EXPECT_DOUBLE_EQ(c->interNode.bandwidth, 25e9);
}

} // namespace
