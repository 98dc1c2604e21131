//===- AttributesTest.cpp - moe attributes through the C++ API ------------===//

#include "TestUtils.h"

#include "mlir/AsmParser/AsmParser.h"

using namespace mlir;
using namespace mlir::moe;
using moe_test::MoETest;

namespace {

using AttributesTest = MoETest;

std::string printAttr(Attribute attr) {
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

TEST_F(AttributesTest, CodecPrintsOnlyItsParameters) {
  auto int8 = CodecAttr::get(&context, CodecKind::int8, /*blockSize=*/256);
  EXPECT_EQ(printAttr(int8), "#moe.codec<int8, block_size = 256>");
  EXPECT_TRUE(int8.isElementwise());
  auto topk = CodecAttr::get(&context, CodecKind::topk, 0, 0.01, 0, true);
  EXPECT_EQ(printAttr(topk), "#moe.codec<topk, ratio = 1.000000e-02, error_feedback>");
  EXPECT_FALSE(topk.isElementwise());
  EXPECT_DOUBLE_EQ(topk.getRatioValue(), 0.01);
  // Uniqued: the same parameters give the same attribute.
  EXPECT_EQ(topk, CodecAttr::get(&context, CodecKind::topk, 0, 0.01, 0, true));
  EXPECT_NE(topk, CodecAttr::get(&context, CodecKind::topk, 0, 0.02, 0, true));
}

TEST_F(AttributesTest, InvalidCodecIsRejectedWithAMessage) {
  auto emit = [&]() { return emitError(UnknownLoc::get(&context)); };
  EXPECT_FALSE(CodecAttr::getChecked(emit, &context, CodecKind::powersgd, int64_t{0}, APFloat(0.0),
                                     int64_t{0}, false));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "powersgd codec requires rank >= 1, got 0");
}

TEST_F(AttributesTest, ParsedAttributesReprint) {
  for (StringRef text : {"#moe.init<normal, scale = 2.000000e-02>", "#moe.init<ones>",
                         "#moe.grid<dp = 2, ep = 4, tp = 2>",
                         "#moe.grid<ep = 2, devices = [\"h100\", \"ascend910b\"]>",
                         "#moe.placement<[[0, 1, 2], [3], [3, 4]]>",
                         "#moe.codec<powersgd, rank = 4, error_feedback>", "#moe.codec<bf16>"}) {
    Attribute attr = parseAttribute(text, &context);
    ASSERT_TRUE(attr) << text.str();
    EXPECT_EQ(printAttr(attr), text.str());
  }
  EXPECT_TRUE(errors.empty());
}

TEST_F(AttributesTest, PlacementListsExpertsPerRank) {
  auto placement =
      cast<PlacementAttr>(parseAttribute("#moe.placement<[[0, 1, 2], [], [3, 1]]>", &context));
  ASSERT_EQ(placement.getNumRanks(), 3u);
  EXPECT_EQ(placement.getExpertsOf(0), ArrayRef<int64_t>({0, 1, 2}));
  EXPECT_TRUE(placement.getExpertsOf(1).empty());
  EXPECT_EQ(placement.getExpertsOf(2), ArrayRef<int64_t>({3, 1}));
}

TEST_F(AttributesTest, GridGroupSizes) {
  auto grid = GridAttr::get(&context, 2, 4, 3, ArrayAttr());
  Builder b(&context);
  auto axes = [&](std::initializer_list<StringRef> names) {
    SmallVector<Attribute> attrs;
    for (StringRef name : names)
      attrs.push_back(b.getStringAttr(name));
    return grid.getGroupSize(attrs);
  };
  EXPECT_EQ(grid.getNumRanks(), 24);
  EXPECT_EQ(axes({"dp"}), 2);
  EXPECT_EQ(axes({"ep"}), 4);
  EXPECT_EQ(axes({"dp", "ep"}), 8);
  EXPECT_EQ(axes({"ep", "tp"}), 12);
}

} // namespace
