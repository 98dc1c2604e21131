//===- moe-opt.cpp - the moe optimiser driver -----------------------------===//
//
// Parses moe IR, runs passes, prints the result. Registers the moe dialect,
// the upstream dialects moe IR uses, and (as they arrive) every moe pass.
//
//===----------------------------------------------------------------------===//

#include "moe/InitAllDialects.h"
#include "moe/Transforms/PassPlugins.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/ToolOptions.h"
#include "moe/Transforms/Pipelines.h"
#include "moec/contract/NestingDepth.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

int main(int argc, char **argv) {
  // --help lists MLIR's options, the passes and moe's own, not LLVM's
  // back ends' (--help-hidden still does).
  mlir::moe::hideOptionsRegisteredBeforeMain();
  // Pass plugins (--load-pass-plugin=LIB) load before the command line is
  // parsed, so that their passes are flags like moe's own (MlirOptMain alone
  // loads them too late for that: only --pass-pipeline would name them).
  std::vector<char *> args;
  if (mlir::failed(mlir::moe::loadPassPlugins(argc, argv, "moe-opt", args)))
    return 1;
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();

  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  // Generic cleanups users run between moe passes.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::moe::registerMoEPasses();
  mlir::moe::registerMoEPipelines();
  auto [input, output] =
      mlir::registerAndParseCLIOptions(argc, argv, "MoEC optimiser driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, input, output, registry));
  // The input is read here (stdin too) so that IR nested past what MLIR's
  // recursive parser survives is an error, not a stack overflow.
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> file = mlir::openInputFile(input, &error);
  if (!file) {
    llvm::errs() << "moe-opt: " << error << "\n";
    return 1;
  }
  using moec::contract::kMaxMlirNesting;
  if (auto deep = moec::contract::findTooDeep(file->getBuffer(), kMaxMlirNesting,
                                              moec::contract::kMlirNesting)) {
    llvm::errs() << (input == "-" ? "<stdin>" : input) << ":" << deep->line << ":" << deep->column
                 << ": error: brackets nested deeper than " << kMaxMlirNesting << " levels\n";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> out = mlir::openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "moe-opt: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(out->os(), std::move(file), registry, config)))
    return 1;
  out->keep();
  return 0;
}
