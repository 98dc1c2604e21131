//===- moe-opt.cpp - the moe optimiser driver -----------------------------===//
//
// Parses moe IR, runs passes, prints the result. Registers the moe dialect,
// the upstream dialects moe IR uses, and (as they arrive) every moe pass.
//
//===----------------------------------------------------------------------===//

#include "moe/InitAllDialects.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  // Generic cleanups users run between moe passes.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::moe::registerMoEPasses();
  mlir::moe::registerMoEPipelines();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "MoEC optimiser driver\n", registry));
}
