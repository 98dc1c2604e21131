//===- DriverTest.cpp - the driver library called without flags ----------===//
//
// A caller that fills the option structs itself (no command line) gets
// what moec gets: the checks, the import, the pipeline, the programs.
//
//===----------------------------------------------------------------------===//

#include "moe/Driver/Driver.h"
#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/InitAllDialects.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace moec::driver;

namespace {

std::string micro() { return std::string(MOEC_SOURCE_DIR) + "/test/Driver/Inputs/micro.json"; }

std::string errorOf(CompileOptions &options) {
  llvm::Error e = resolveOptions(options);
  return e ? llvm::toString(std::move(e)) : "";
}

TEST(Driver, ChecksFlagCombinations) {
  CompileOptions options;
  options.import.model = micro();
  options.emit = Emit::Mlir;
  options.compress.grad = "int8";
  EXPECT_NE(errorOf(options).find("compress the collectives of a partitioned step"),
            std::string::npos);
  options.parallel.ranks = 2;
  EXPECT_EQ(errorOf(options), "");
  options.backend.target = moec::codegen::lookupTarget("opencl");
  options.backend.gemm = moec::codegen::Gemm::Blas;
  EXPECT_EQ(
      errorOf(options),
      "--gemm=blas calls OpenBLAS on the host: with --target=opencl give --gemm=halide or auto");
}

TEST(Driver, DataParallelDegreeMakesTheGrid) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  CompileOptions options;
  options.import.model = micro();
  options.emit = Emit::Cpp;
  options.parallel.ranks = 4;
  options.parallel.dp = 2;
  ASSERT_EQ(errorOf(options), "");
  mlir::OwningOpRef<mlir::ModuleOp> module = importModule(options, context);
  ASSERT_TRUE(module);
  mlir::OwningOpRef<mlir::ModuleOp> source = module->clone();
  ASSERT_TRUE(mlir::succeeded(runPipeline(*module, options, nullptr)));
  auto grid = (*module)->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid.getDp(), 2);
  EXPECT_EQ(grid.getEp(), 2);
  auto calls = moec::codegen::KernelCalls::collect(*module, options.backend.gemm);
  ASSERT_TRUE(mlir::succeeded(calls));
  std::vector<Program> programs;
  ASSERT_TRUE(mlir::succeeded(emitPrograms(*module, *source, *calls, options, programs)));
  ASSERT_EQ(programs.size(), 1u);
  EXPECT_NE(programs.front().text.find("moec_program"), std::string::npos);
}

TEST(Driver, DegreesThatDoNotMakeTheRanksFailInThePipeline) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str();
    return mlir::success();
  });
  CompileOptions options;
  options.import.model = micro();
  options.emit = Emit::Mlir;
  options.parallel.ranks = 4;
  options.parallel.dp = 4;
  options.parallel.tp = 2;
  ASSERT_EQ(errorOf(options), "");
  mlir::OwningOpRef<mlir::ModuleOp> module = importModule(options, context);
  ASSERT_TRUE(module);
  EXPECT_TRUE(mlir::failed(runPipeline(*module, options, nullptr)));
  EXPECT_EQ(diagnostics, "moe-make-grid: dp 4 x tp 2 does not make ranks 4");
}

} // namespace
