//===- Build.cpp - kernels generated, step programs compiled and linked ---===//

#include "moe/Codegen/Toolchain.h"
#include "moe/Driver/Driver.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::driver;

namespace {


Error writeFile(StringRef path, StringRef text) {
  return writeOutput(path, [&](raw_ostream &os) { os << text; });
}

/// Writes the programs' C++ (and their parts) into `buildDir`; returns
/// the files to compile.
Expected<std::vector<std::string>> writePrograms(const std::vector<Program> &programs,
                                                 StringRef buildDir) {
  std::vector<std::string> cpps;
  for (const Program &p : programs) {
    SmallString<256> cpp(buildDir);
    sys::path::append(cpp, p.file);
    if (Error e = writeFile(cpp, p.text))
      return std::move(e);
    cpps.push_back(std::string(cpp));
    for (size_t u = 0; u < p.units.size(); ++u) {
      SmallString<256> unit(buildDir);
      sys::path::append(unit, sys::path::stem(p.file) + ".part" + Twine(u) + ".cpp");
      if (Error e = writeFile(unit, p.units[u]))
        return std::move(e);
      cpps.push_back(std::string(unit));
    }
  }
  return cpps;
}

moec::codegen::ToolchainOptions toolchainOptions(const CompileOptions &options,
                                                 StringRef generator) {
  const BackendOptions &backend = options.backend;
  moec::codegen::ToolchainOptions toolchain;
  toolchain.generator = generator.str();
  toolchain.verbose = options.verbose;
  toolchain.cacheDir = backend.noKernelCache ? "" : moec::codegen::defaultKernelCache();
  toolchain.backend = backend.target;
  toolchain.backendOptions = backend.targetOptions;
  toolchain.hostTarget = backend.hostTarget;
  toolchain.jobs = backend.jobs;
  return toolchain;
}

} // namespace

Error moec::driver::writeOutput(StringRef path, function_ref<void(raw_ostream &)> text) {
  std::string message;
  auto file = mlir::openOutputFile(path.empty() ? StringRef("-") : path, &message);
  if (!file)
    return createStringError(message);
  text(file->os());
  file->keep();
  return Error::success();
}

Error moec::driver::buildTrainer(const std::vector<Program> &programs,
                                 const nlohmann::json &manifest, const CompileOptions &options,
                                 StringRef generator) {
  codegen::KernelCalls calls;
  for (const Program &p : programs)
    calls.append(p.calls);
  std::optional<Stage> kernelStage(std::in_place, "kernels", options.verbose);
  // Into <o>/kernels for --emit=kernels, next to the executable
  // (<o>.build/kernels) otherwise.
  SmallString<256> buildDir(options.output);
  if (options.emit == Emit::Exe)
    buildDir += ".build";
  SmallString<256> dir(buildDir), manifestPath(buildDir);
  sys::path::append(dir, "kernels");
  sys::path::append(manifestPath, "kernels.json");
  if (std::error_code ec = sys::fs::create_directories(dir))
    return createStringError(Twine("cannot create ") + dir + ": " + ec.message());
  codegen::ToolchainOptions toolchain = toolchainOptions(options, generator);
  if (!sys::fs::can_execute(toolchain.generator))
    return createStringError("moe-halide-gen not found next to moec (" + toolchain.generator + ")");
  if (Error e = codegen::generateKernels(calls, dir, toolchain))
    return e;
  if (Error e = writeFile(manifestPath, manifest.dump(2) + "\n"))
    return e;
  if (options.emit == Emit::Kernels)
    return Error::success();
  kernelStage.reset();

  Stage link("link", options.verbose);
  Expected<std::vector<std::string>> cpps = writePrograms(programs, buildDir);
  if (!cpps)
    return cpps.takeError();
  // A partitioned binary also runs under mpirun, one rank per process.
  auto grid = programs.front().module->getAttrOfType<mlir::moe::GridAttr>(
      mlir::moe::MoEDialect::kGridAttrName);
  bool mpi = grid && grid.getNumRanks() > 1;
  if (Error e = codegen::linkTrainer(*cpps, dir, calls, options.output, mpi, toolchain))
    return e;
  if (options.verbose)
    errs() << "moec: wrote " << options.output << "\n";
  return Error::success();
}
