//===- moec.cpp - the MoEC driver ------------------------------------------===//
//
//   moec examples/models/tiny.json [--cluster c.json] -o out/tiny --emit=kernels [-v]
//   moec model.mlir --load-pass-plugin lib.so --pass-after=ANCHOR=PASSES -o out/train
//
// A driver only: it parses the flags into the driver library's option
// structs (driver/include/moe/Driver/Options.h) and runs the library's
// phases (Driver.h): the frontend reads the model (and cluster) into moe
// IR, the training pipeline (passes/lib/Pipelines.cpp, the one moe-opt
// --moe-train-pipeline runs) lowers it to kernel specs and a buffer plan,
// and the back end (codegen/lib) generates the kernels, emits the step
// program and links the training executable. `--emit=mlir|plan|kernels|cpp`
// stops after a stage.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/HostTarget.h"
#include "moe/Driver/Driver.h"
#include "moe/InitAllDialects.h"
#include "moe/Transforms/PassPlugins.h"
#include "moe/Transforms/Passes.h"
#include "moec/contract/Abi.h"
#include "moert/CpuTarget.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::driver;

namespace {

int fail(const Twine &message) {
  errs() << "moec: error: " << message << "\n";
  return 1;
}

int fail(Error error) { return fail(toString(std::move(error))); }

/// moe-halide-gen beside this executable.
std::string generatorPath(const char *argv0) {
  std::string self = sys::fs::getMainExecutable(argv0, (void *)&generatorPath);
  SmallString<256> path(sys::path::parent_path(self));
  sys::path::append(path, "moe-halide-gen");
  return std::string(path);
}

/// Writes `text` to `path` ("-": stdout).
int writeTo(StringRef path, function_ref<void(raw_ostream &)> text) {
  if (Error e = moec::driver::writeOutput(path, text))
    return fail(std::move(e));
  return 0;
}

/// --print-host-target: the target and the CPU features it needs.
int printResolvedHostTarget(const std::string &hostTarget) {
  Expected<std::string> resolved = moec::codegen::resolveHostTarget(hostTarget);
  if (!resolved)
    return fail(resolved.takeError());
  std::vector<std::string> needs = moert::cpuFeaturesOf(*resolved);
  outs() << *resolved << "\n  needs: " << (needs.empty() ? "the x86-64 baseline" : "")
         << join(needs, " ") << "\n";
  return 0;
}

/// LLVM reads an unknown flag that starts with h (a typo such as --hf-tiny)
/// as -h, its alias of --help, grouped with other letters: the help and
/// exit 0, so a broken build script looked like a build. Only known
/// options pass.
bool checkCommandLine(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    StringRef arg(argv[i]);
    if (arg == "--")
      break;
    StringRef name = arg.ltrim('-').split('=').first;
    if (arg.starts_with("-") && name.starts_with("h") && name != "h" &&
        !cl::getRegisteredOptions().count(name)) {
      errs() << "moec: Unknown command line argument '" << arg << "'.  Try: 'moec --help'\n";
      return false;
    }
  }
  return true;
}

/// After the pipeline: the plan, the step programs, the kernels, the binary.
int emitAfterPipeline(mlir::ModuleOp module, mlir::ModuleOp source, const PlanReport &report,
                      const CompileOptions &options, const char *argv0) {
  mlir::FailureOr<moec::codegen::KernelCalls> calls =
      moec::codegen::KernelCalls::collect(module, options.backend.gemm);
  if (mlir::failed(calls))
    return 1;
  nlohmann::json manifest = kernelManifest(module, *calls, options);
  if (options.emit == Emit::Plan) {
    if (!report.json.is_null() && !report.json.is_discarded())
      manifest["sharding"] = report.json;
    return writeTo(options.output, [&](raw_ostream &os) { os << manifest.dump(2) << "\n"; });
  }
  if (mlir::failed(checkKernelExtents(module)))
    return 1;
  std::vector<Program> programs;
  if (mlir::failed(emitPrograms(module, source, *calls, options, programs)))
    return 1;
  if (options.emit == Emit::Cpp) {
    if (programs.size() > 1)
      errs() << "moec: note: replicas of other token shares run other step programs, not "
                "written by --emit=cpp (the executable's build folder has them)\n";
    return writeTo(options.output, [&](raw_ostream &os) { os << programs.front().text; });
  }
  if (Error e = buildTrainer(programs, manifest, options, generatorPath(argv0)))
    return fail(std::move(e));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // Plugins load before the flags are parsed (their passes' names and
  // options are then known); --load-pass-plugin stays in argv, recorded.
  std::vector<char *> unused;
  if (mlir::failed(mlir::moe::loadPassPlugins(argc, argv, "moec", unused)))
    return 1;
  // What --pass-before/--pass-after may name besides plugins' passes:
  // MoEC's own and the generic clean-ups (as moe-opt).
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::moe::registerMoEPasses();
  InitLLVM init(argc, argv);
  cl::OptionCategory category("moec options");
  CompileOptions options;
  OptionsBinder binder(category);
  options.bindOptions(binder);
  bool printHostTarget = false;
  binder.opt("print-host-target", printHostTarget,
             cl::desc("Print the Halide target --host-target resolves to and the CPU features "
                      "its kernels need, then exit (no model needed)"));
  binder.hideOtherOptions();
  if (!checkCommandLine(argc, argv))
    return 1;
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "moec (MoEC) " << MOEC_VERSION << "\n  step-program ABI " << MOERT_ABI_VERSION
       << "\n  built with LLVM/MLIR " << LLVM_VERSION_STRING << "\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "MoEC driver: a model description to a training step\n");
  if (printHostTarget)
    return printResolvedHostTarget(options.backend.hostTarget);
  if (Error e = resolveOptions(options, &binder))
    return fail(std::move(e));

  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  // Diagnostics as `file:line:col: error: message`, without the IR dump.
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler diagnostics(&context, printDiagnostic);
  mlir::OwningOpRef<mlir::ModuleOp> module = importModule(options, context);
  if (!module)
    return 1;
  if (Error e = applyTokenShares(*module, options))
    return fail(std::move(e));
  // Other token shares' programs start from the same input.
  mlir::OwningOpRef<mlir::ModuleOp> source = module->clone();
  PlanReport report;
  if (mlir::failed(runPipeline(*module, options, &report, /*replica=*/0)))
    return 1;
  if (options.emit == Emit::Mlir)
    return writeTo(options.output, [&](raw_ostream &os) { module->print(os); });
  return emitAfterPipeline(*module, *source, report, options, argv[0]);
}
