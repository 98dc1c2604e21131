//===- BuildModelTest.cpp - build a training step through the C++ API -----===//
//
// Builds one MoE layer's forward step with OpBuilder, the way the frontend
// will, and checks that it verifies, infers the right types and round-trips
// through the textual form.
//
//===----------------------------------------------------------------------===//

#include "TestUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace mlir::moe;
using moe_test::MoETest;

namespace {

class BuildModelTest : public MoETest {
protected:
  /// Declares a parameter and returns a get_param of it inside the function.
  Value param(OpBuilder &moduleBuilder, OpBuilder &body, StringRef name, ArrayRef<int64_t> shape,
              InitAttr init) {
    auto type = RankedTensorType::get(shape, Float32Type::get(&context));
    ParamOp::create(moduleBuilder, loc, name, type, init);
    return GetParamOp::create(body, loc, type, FlatSymbolRefAttr::get(&context, name));
  }

  Location loc = UnknownLoc::get(&context);
};

TEST_F(BuildModelTest, OneMoELayerVerifiesAndRoundTrips) {
  const int64_t batch = 2, seq = 8, vocab = 64, d = 16, experts = 4, k = 2, width = 32;
  OpBuilder b(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  (*module)->setAttr(MoEDialect::kGridAttrName, GridAttr::get(&context, 1, 2, 1, ArrayAttr()));
  OpBuilder top = OpBuilder::atBlockEnd(module->getBody());

  auto ids = RankedTensorType::get({batch, seq}, b.getI32Type());
  auto fnType = b.getFunctionType({ids, ids}, {RankedTensorType::get({}, b.getF32Type())});
  auto fn = func::FuncOp::create(top, loc, "train_step", fnType);
  fn.setArgAttr(0, MoEDialect::kInputAttrName, b.getStringAttr("tokens"));
  fn.setArgAttr(1, MoEDialect::kInputAttrName, b.getStringAttr("targets"));
  OpBuilder body = OpBuilder::atBlockEnd(fn.addEntryBlock());

  auto normal = InitAttr::get(&context, InitKind::normal, 0.02);
  Value table = param(top, body, "emb", {vocab, d}, normal);
  Value x = EmbeddingOp::create(body, loc, fn.getArgument(0), table);
  Value wr = param(top, body, "router", {d, experts}, normal);
  auto router = RouterOp::create(body, loc, Scoring::softmax, x, wr,
                                 /*bias=*/Value(), k);
  router.setRenormalize(true);
  router.setCapacityFactorAttr(b.getF32FloatAttr(1.25f));
  int64_t capacity = (batch * seq * k * 5 + 4 * experts - 1) / (4 * experts);
  Value buf = DispatchOp::create(body, loc, x, router.getExperts(), experts, capacity);
  Value up = param(top, body, "up", {experts, d, width}, normal);
  Value down = param(top, body, "down", {experts, width, d}, normal);
  Value gate = param(top, body, "gate", {experts, d, width}, normal);
  auto ffn = ExpertFFNOp::create(body, loc, buf.getType(), Activation::swiglu, buf, up, down, gate, Value(),
                                 PlacementAttr::get(&context, {0, 1, 2, 3}, {2, 2}));
  Value y = CombineOp::create(body, loc, ffn.getResult(), router.getGates(), router.getExperts());
  Value head = param(top, body, "head", {d, vocab}, normal);
  Value logits = LinearOp::create(body, loc, y, head);
  Value ce = CrossEntropyOp::create(body, loc, logits, fn.getArgument(1));
  Value loss = AddOp::create(body, loc, ce, router.getAuxLoss());
  func::ReturnOp::create(body, loc, loss);

  ASSERT_TRUE(succeeded(verify(*module))) << (errors.empty() ? "" : errors[0]);
  EXPECT_TRUE(errors.empty());

  // Inferred types.
  EXPECT_EQ(cast<RankedTensorType>(x.getType()).getShape(), ArrayRef<int64_t>({batch, seq, d}));
  EXPECT_EQ(cast<RankedTensorType>(buf.getType()).getShape(), ArrayRef<int64_t>({experts, 10, d}));
  EXPECT_EQ(cast<RankedTensorType>(router.getExperts().getType()).getElementType(), b.getI32Type());
  EXPECT_EQ(router.getNumExperts(), experts);
  EXPECT_EQ(cast<RankedTensorType>(logits.getType()).getShape(),
            ArrayRef<int64_t>({batch, seq, vocab}));

  // Round trip through text gives the same text.
  std::string text = moe_test::print(*module);
  OwningOpRef<ModuleOp> reparsed = parse(text);
  ASSERT_TRUE(reparsed) << (errors.empty() ? "" : errors[0]);
  EXPECT_EQ(moe_test::print(*reparsed), text);
  EXPECT_NE(text.find("moe.router softmax"), std::string::npos);
  EXPECT_NE(text.find("capacity_factor = 1.250000e+00 : f32"), std::string::npos);
  EXPECT_NE(text.find("#moe.placement<[[0, 1], [2, 3]]>"), std::string::npos);
}

TEST_F(BuildModelTest, EnclosingGridIsFoundFromNestedOps) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
    module attributes {moe.grid = #moe.grid<dp = 2, ep = 4, tp = 2>} {
      func.func @f(%g: tensor<8x16xf32>) -> tensor<8x16xf32> {
        %0 = moe.all_reduce sum %g over [dp, ep] : tensor<8x16xf32>
        return %0 : tensor<8x16xf32>
      }
    })mlir");
  ASSERT_TRUE(module);
  AllReduceOp op;
  module->walk([&](AllReduceOp found) { op = found; });
  ASSERT_TRUE(op);
  GridAttr grid = getEnclosingGrid(op);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid.getNumRanks(), 16);
  EXPECT_EQ(grid.getGroupSize(op.getAxes().getValue()), 8);
}

} // namespace
