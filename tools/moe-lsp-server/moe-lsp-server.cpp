//===- moe-lsp-server.cpp - a language server for moe IR ------------------===//
//
// MLIR's language server with the moe dialect (and the upstream dialects moe
// IR uses) registered: editors get diagnostics from the verifiers,
// go-to-definition, hover and document symbols for .mlir files holding moe
// IR. docs/EditorSetup.md says how to point an editor at it.
//
//===----------------------------------------------------------------------===//

#include "moe/InitAllDialects.h"
#include "moe/Transforms/ToolOptions.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-lsp-server/MlirLspServerMain.h"

int main(int argc, char **argv) {
  // --help lists the server's options, not LLVM's back ends'.
  mlir::moe::hideOptionsRegisteredBeforeMain();
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  return mlir::failed(mlir::MlirLspServerMain(argc, argv, registry)) ? 1 : 0;
}
