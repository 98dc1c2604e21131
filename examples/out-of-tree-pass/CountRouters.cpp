//===- CountRouters.cpp - an out-of-tree pass over moe IR -----------------===//
//
// `moe-count-routers` prints how many routers (and their experts), fused
// gates and expert FFNs a module holds. It matches moe ops by type
// (dyn_cast<moe::RouterOp>), which works because the plugin and moe-opt share
// one copy of the dialect library. Loaded with
// `moe-opt --load-pass-plugin=MoECountRouters.so --moe-count-routers`.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

namespace {

struct CountRoutersPass
    : public mlir::PassWrapper<CountRoutersPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CountRoutersPass)

  llvm::StringRef getArgument() const final { return "moe-count-routers"; }
  llvm::StringRef getDescription() const final {
    return "Prints the routers, fused gates and expert FFNs of a module";
  }

  void runOnOperation() override {
    unsigned routers = 0, gates = 0, ffns = 0;
    int64_t experts = 0;
    getOperation().walk([&](mlir::Operation *op) {
      if (auto router = llvm::dyn_cast<mlir::moe::RouterOp>(op)) {
        ++routers;
        experts += router.getNumExperts();
      } else if (llvm::isa<mlir::moe::FusedGateOp>(op)) {
        ++gates;
      } else if (llvm::isa<mlir::moe::ExpertFFNOp>(op)) {
        ++ffns;
      }
    });
    llvm::outs() << "moe-count-routers: " << routers << " routers (" << experts
                 << " experts in all), " << gates << " fused gates, " << ffns << " expert FFNs\n";
  }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "MoECountRouters", LLVM_VERSION_STRING,
          [] { mlir::PassRegistration<CountRoutersPass>(); }};
}
