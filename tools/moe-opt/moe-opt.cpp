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
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

int main(int argc, char **argv) {
  // Pass plugins (--load-pass-plugin=LIB) load before the command line is
  // parsed, so that their passes are flags like moe's own (MlirOptMain alone
  // loads them too late for that: only --pass-pipeline would name them).
  std::vector<char *> args;
  for (int i = 0; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    std::string path;
    if (arg.consume_front("--load-pass-plugin=") || arg.consume_front("-load-pass-plugin="))
      path = arg.str();
    else if ((arg == "--load-pass-plugin" || arg == "-load-pass-plugin") && i + 1 < argc)
      path = argv[++i];
    else {
      args.push_back(argv[i]);
      continue;
    }
    llvm::Expected<mlir::PassPlugin> plugin = mlir::PassPlugin::load(path);
    if (!plugin) {
      llvm::errs() << "moe-opt: cannot load pass plugin '" << path
                   << "': " << llvm::toString(plugin.takeError()) << "\n";
      return 1;
    }
    plugin->registerPassRegistryCallbacks();
  }
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();

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
