//===- Toolchain.cpp - generated kernels and the linked trainer -----------===//

#include "moe/Codegen/Toolchain.h"

#include "moe/Dialect/MoE/MoEOps.h"

#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::codegen;

nlohmann::json moec::codegen::kernelManifest(mlir::ModuleOp module, const KernelCalls &calls) {
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto &[name, call] : calls.all()) {
    nlohmann::json entry = {{"family", call.row->family.str()}};
    if (call.generator.empty())
      entry["runtime"] = call.runtimeRoutine;
    else
      entry["generator"] = call.generator, entry["params"] = call.params,
      entry["scratch_bytes"] = call.scratchBytes;
    kernels[name] = entry;
  }
  nlohmann::json plan = nlohmann::json::object();
  if (auto dict =
          module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kBufferPlanAttrName))
    for (auto entry : dict)
      if (auto i = dyn_cast<mlir::IntegerAttr>(entry.getValue()))
        plan[entry.getName().str()] = i.getInt();
  plan["kernel_scratch_bytes"] = calls.scratchBytes();
  return {{"buffer_plan", plan}, {"kernels", kernels}};
}

static Error run(StringRef program, ArrayRef<std::string> args, const Twine &what) {
  SmallVector<StringRef> refs(args.begin(), args.end());
  std::string error;
  int rc = sys::ExecuteAndWait(program, refs, std::nullopt, {}, 0, 0, &error);
  if (rc == 0)
    return Error::success();
  return createStringError(inconvertibleErrorCode(),
                           what + ": " + (error.empty() ? "exit " + std::to_string(rc) : error));
}

Error moec::codegen::generateKernels(const KernelCalls &calls, StringRef dir,
                                     const ToolchainOptions &options) {
  const std::string &gen = options.generator;
  for (const auto &[name, call] : calls.all()) {
    if (call.generator.empty())
      continue;
    std::vector<std::string> args = {gen,
                                     "-g",
                                     call.generator,
                                     "-f",
                                     name,
                                     "-o",
                                     dir.str(),
                                     "-e",
                                     "static_library,c_header",
                                     "target=host-no_runtime"};
    args.insert(args.end(), call.params.begin(), call.params.end());
    if (options.verbose)
      errs() << "moec: generating " << name << " (" << call.generator << ")\n";
    if (Error e =
            run(gen, args, "moe-halide-gen failed on kernel " + name + " (" + call.generator + ")"))
      return e;
  }
  // The Halide runtime, once per binary.
  return run(gen,
             {gen, "-r", "halide_runtime", "-o", dir.str(), "-e", "static_library", "target=host"},
             "moe-halide-gen failed to emit the Halide runtime");
}

Error moec::codegen::linkTrainer(StringRef stepProgram, StringRef dir, const KernelCalls &calls,
                                 StringRef output, bool mpi, const ToolchainOptions &options) {
  std::string cxx = MOEC_CXX;
  std::vector<std::string> args = {cxx,
                                   "-O2",
                                   "-std=c++20",
                                   stepProgram.str(),
                                   "-I" + dir.str(),
                                   "-I" MOEC_RUNTIME_INCLUDE,
                                   "-I" MOEC_HALIDE_INCLUDE,
                                   "-o",
                                   output.str()};
  for (const auto &[name, call] : calls.all())
    if (!call.generator.empty())
      args.push_back((dir + "/" + name + ".a").str());
  args.push_back((dir + "/halide_runtime.a").str());
  args.push_back(MOEC_RUNTIME_MAIN_LIB);
#ifdef MOEC_RUNTIME_MPI_LIB
  // A partitioned binary also runs under mpirun, one rank per process.
  if (mpi) {
    // The trainer refers to the MPI backend weakly: pull it in whole.
    args.push_back("-Wl,--whole-archive");
    args.push_back(MOEC_RUNTIME_MPI_LIB);
    args.push_back("-Wl,--no-whole-archive");
    SmallVector<StringRef> libs;
    StringRef(MOEC_MPI_LIBS).split(libs, ';', -1, false);
    for (StringRef lib : libs)
      args.push_back(lib.str());
  }
#else
  (void)mpi;
#endif
  args.push_back(MOEC_RUNTIME_LIB);
  args.push_back(MOEC_OPENBLAS_LIB); // the kernels' extern GEMMs
  args.push_back("-lpthread");
  args.push_back("-ldl");
  auto cxxPath = sys::findProgramByName(cxx);
  if (!cxxPath)
    return createStringError(inconvertibleErrorCode(), "C++ compiler '" + cxx + "' not found");
  if (options.verbose)
    errs() << "moec: compiling " << stepProgram << "\n";
  return run(*cxxPath, args, "compiling the step program failed (" + stepProgram + ")");
}
