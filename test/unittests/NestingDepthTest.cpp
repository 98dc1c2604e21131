//===- NestingDepthTest.cpp - the contract's one nesting-depth scanner ----===//
//
// moec/contract/NestingDepth.h in both of its modes: JSON (the frontend's
// descriptions, the runtime's checkpoints) and MLIR text (moe-opt, the mlir
// fuzzer). Built into the runtime's tests: the scanner needs no MLIR.
//
//===----------------------------------------------------------------------===//

#include "moec/contract/NestingDepth.h"

#include <gtest/gtest.h>

#include <string>

using namespace moec::contract;

namespace {

/// "line:column@offset" of the first too-deep bracket, or "none".
std::string where(const std::string &text, size_t maxDepth, const NestingSyntax &syntax) {
  std::optional<TooDeep> deep = findTooDeep(text, maxDepth, syntax);
  if (!deep)
    return "none";
  return std::to_string(deep->line) + ":" + std::to_string(deep->column) + "@" +
         std::to_string(deep->offset);
}

TEST(NestingDepthTest, JsonLimitIsInclusive) {
  EXPECT_EQ(where("[[1]]", 2, kJsonNesting), "none");
  EXPECT_EQ(where("[{\"a\": [1]}]", 2, kJsonNesting), "1:8@7");
  EXPECT_EQ(where("", 0, kJsonNesting), "none");
  EXPECT_EQ(where("1", 0, kJsonNesting), "none");
  EXPECT_EQ(where("{}", 0, kJsonNesting), "1:1@0");
}

TEST(NestingDepthTest, JsonDepthFallsAfterClosing) {
  // Siblings never add up, and a stray closer does not go below zero.
  EXPECT_EQ(where("[[],[],[[]]]", 3, kJsonNesting), "none");
  EXPECT_EQ(where("]]]][[", 1, kJsonNesting), "1:6@5");
}

TEST(NestingDepthTest, JsonStringsDoNotCount) {
  // Brackets in strings, an escaped quote and an escaped backslash before
  // the closing quote: the scan leaves the string where JSON does.
  EXPECT_EQ(where(R"({"k": "[[[{{{"})", 1, kJsonNesting), "none");
  EXPECT_EQ(where(R"({"k": "\"[[["})", 1, kJsonNesting), "none");
  EXPECT_EQ(where(R"({"k": "\\", "v": [1]})", 1, kJsonNesting), "1:18@17");
}

TEST(NestingDepthTest, JsonHasNoCommentsArrowsOrAngles) {
  // `//` is not a comment, `<` is no bracket, `->]` closes a level.
  EXPECT_EQ(where("[ // [\n]", 1, kJsonNesting), "1:6@5");
  EXPECT_EQ(where("[<<<]", 1, kJsonNesting), "none");
  EXPECT_EQ(where("[[->]]", 2, kJsonNesting), "none");
  EXPECT_EQ(where("[[->][", 2, kJsonNesting), "none");
  EXPECT_EQ(where("[[->][[", 2, kJsonNesting), "1:7@6");
}

TEST(NestingDepthTest, JsonPositionOnALaterLine) {
  EXPECT_EQ(where("{\n  \"a\": [\n    [1]\n  ]\n}", 2, kJsonNesting), "3:5@15");
}

TEST(NestingDepthTest, MlirCountsEveryBracketKind) {
  EXPECT_EQ(where("([{<x>}])", 4, kMlirNesting), "none");
  EXPECT_EQ(where("([{<x>}])", 3, kMlirNesting), "1:4@3");
  EXPECT_EQ(where("%e = moe.get_param" + std::string(300, '('), kMaxMlirNesting, kMlirNesting),
            "1:275@274");
}

TEST(NestingDepthTest, MlirArrowIsNotABracket) {
  // `->` would otherwise close the `(` and hide the third level.
  EXPECT_EQ(where("((->(", 2, kMlirNesting), "1:5@4");
  EXPECT_EQ(where("(() -> ())", 2, kMlirNesting), "none");
  EXPECT_EQ(where("<<>>", 2, kMlirNesting), "none");
  EXPECT_EQ(where("<<>><", 1, kMlirNesting), "1:2@1");
}

TEST(NestingDepthTest, MlirCommentsRunToTheLineEnd) {
  EXPECT_EQ(where("// ((((((\n(", 1, kMlirNesting), "none");
  EXPECT_EQ(where("( // ))))\n(", 1, kMlirNesting), "2:1@10");
  // A single `/` starts no comment.
  EXPECT_EQ(where("(/(", 1, kMlirNesting), "1:3@2");
}

TEST(NestingDepthTest, MlirStringsDoNotCount) {
  EXPECT_EQ(where(R"(f() {s = "[[[[ \" // ((( "} ())", 2, kMlirNesting), "none");
  EXPECT_EQ(where(R"({s = "\\" ([)", 2, kMlirNesting), "1:12@11");
  // `//` in a string is no comment: what follows it on the line counts.
  EXPECT_EQ(where(R"("//" (((()", 3, kMlirNesting), "1:9@8");
}

TEST(NestingDepthTest, MlirPositionCountsLinesAndBytes) {
  std::string text = "module {\n  func.func @f() -> () {\n    %0 = \"x\"() : () -> ((i32))\n";
  EXPECT_EQ(where(text, 3, kMlirNesting), "3:25@58");
  EXPECT_EQ(where(text, 4, kMlirNesting), "none");
}

} // namespace
