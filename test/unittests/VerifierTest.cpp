//===- VerifierTest.cpp - verifiers reached from the C++ API --------------===//
//
// IR built by code (the frontend, passes) goes through the same verifiers as
// parsed IR; a bad op is a diagnostic, never a crash.
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

class VerifierTest : public MoETest {
protected:
  /// A function taking `inputs`, with a builder at the end of its body.
  std::pair<func::FuncOp, OpBuilder> function(ArrayRef<Type> inputs) {
    OpBuilder top = OpBuilder::atBlockEnd(module->getBody());
    auto fn = func::FuncOp::create(top, loc, "f", FunctionType::get(&context, inputs, {}));
    return {fn, OpBuilder::atBlockEnd(fn.addEntryBlock())};
  }

  RankedTensorType f32(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(&context));
  }

  Location loc = UnknownLoc::get(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
};

TEST_F(VerifierTest, RouterTopKAboveExpertsIsAnError) {
  auto [fn, b] = function({f32({4, 8}), f32({8, 4})});
  RouterOp::create(b, loc, Scoring::sigmoid, fn.getArgument(0), fn.getArgument(1), Value(),
                   /*topK=*/6);
  func::ReturnOp::create(b, loc);
  EXPECT_TRUE(failed(verify(*module)));
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0], "'moe.router' op top_k (6) must be in [1, 4], the number of experts");
}

TEST_F(VerifierTest, CollectiveWithoutGridIsAnError) {
  auto [fn, b] = function({f32({8, 8})});
  Builder attrs(&context);
  AllReduceOp::create(b, loc, f32({8, 8}), Reduction::sum, fn.getArgument(0),
                      attrs.getStrArrayAttr({"dp"}), CodecAttr(), llvm::APFloat(1.0));
  func::ReturnOp::create(b, loc);
  EXPECT_TRUE(failed(verify(*module)));
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0], "'moe.all_reduce' op requires a 'moe.grid' attribute "
                       "on the enclosing module");
  // Attaching a grid makes the same IR valid.
  errors.clear();
  (*module)->setAttr(MoEDialect::kGridAttrName, GridAttr::get(&context, 2, 1, 1, ArrayAttr()));
  EXPECT_TRUE(succeeded(verify(*module)));
  EXPECT_TRUE(errors.empty());
}

TEST_F(VerifierTest, DispatchBuilderMakesVerifiableBuffers) {
  auto ids = RankedTensorType::get({3, 2}, IntegerType::get(&context, 32));
  auto [fn, b] = function({f32({3, 16}), ids});
  auto dispatch = DispatchOp::create(b, loc, fn.getArgument(0), fn.getArgument(1), /*numExperts=*/8,
                                     /*capacity=*/3);
  func::ReturnOp::create(b, loc);
  EXPECT_TRUE(succeeded(verify(*module)));
  EXPECT_EQ(cast<RankedTensorType>(dispatch.getType()).getShape(), ArrayRef<int64_t>({8, 3, 16}));
}

TEST_F(VerifierTest, ParseErrorsCarryLocations) {
  OwningOpRef<ModuleOp> bad = parse(R"mlir(
    func.func @f(%x: tensor<2x8xf32>, %g: tensor<3xf32>) {
      %0 = moe.rms_norm %x, %g : tensor<2x8xf32>, tensor<3xf32>
      return
    })mlir");
  EXPECT_FALSE(bad);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "'moe.rms_norm' op gamma's size (3) must divide x's last dimension (8): "
                       "the groups normalised");
}

} // namespace
