//===- PassPlugins.cpp - pass plugins named on a command line -------------===//

#include "moe/Transforms/PassPlugins.h"

#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

LogicalResult moe::loadPassPlugins(int argc, char **argv, StringRef tool,
                                   std::vector<char *> &rest, std::vector<std::string> *loaded) {
  rest.clear();
  for (int i = 0; i < argc; ++i) {
    StringRef arg = argv[i];
    std::string path;
    if (i > 0 && (arg.consume_front("--load-pass-plugin=") ||
                  arg.consume_front("-load-pass-plugin=")))
      path = arg.str();
    else if (i > 0 && (arg == "--load-pass-plugin" || arg == "-load-pass-plugin")) {
      if (i + 1 == argc) {
        llvm::errs() << tool << ": --load-pass-plugin needs a library path\n";
        return failure();
      }
      path = argv[++i];
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    llvm::Expected<PassPlugin> plugin = PassPlugin::load(path);
    if (!plugin) {
      llvm::errs() << tool << ": cannot load pass plugin '" << path
                   << "': " << llvm::toString(plugin.takeError()) << "\n";
      return failure();
    }
    plugin->registerPassRegistryCallbacks();
    if (loaded)
      loaded->push_back(path);
  }
  return success();
}
