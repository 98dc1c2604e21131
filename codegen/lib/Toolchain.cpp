//===- Toolchain.cpp - generated kernels and the linked trainer -----------===//

#include "moe/Codegen/Toolchain.h"

#include "moe/Dialect/MoE/MoEOps.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

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
  if (auto bufferPlan = module->getAttrOfType<mlir::moe::BufferPlanAttr>(
          mlir::moe::MoEDialect::kBufferPlanAttrName))
    plan = {{"activation_bytes", bufferPlan.getActivationBytes()},
            {"gradient_bytes", bufferPlan.getGradientBytes()},
            {"parameter_bytes", bufferPlan.getParameterBytes()},
            {"optimizer_state_bytes", bufferPlan.getOptimizerStateBytes()},
            {"total_bytes", bufferPlan.getTotalBytes()},
            {"num_kernels", bufferPlan.getNumKernels()},
            {"num_launches", bufferPlan.getNumLaunches()},
            {"alignment", bufferPlan.getAlignment()}};
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

std::string moec::codegen::defaultKernelCache() {
  if (const char *dir = std::getenv("MOEC_KERNEL_CACHE"))
    return StringRef(dir) == "none" ? "" : dir;
  SmallString<256> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    path = xdg;
  else if (const char *home = std::getenv("HOME"); home && *home)
    sys::path::append(path, home, ".cache");
  else
    return "";
  sys::path::append(path, "moec", "kernels");
  return std::string(path);
}

namespace {

/// Serialises the -v lines of concurrent jobs.
std::mutex verboseLock;

void say(const ToolchainOptions &options, const Twine &line) {
  if (!options.verbose)
    return;
  std::lock_guard<std::mutex> lock(verboseLock);
  errs() << "moec: " << line << "\n";
}

/// Runs `work(i)` for i in [0, n) on up to `jobs` threads (0: one per
/// hardware thread, at most 8: a generator process takes a few hundred MB),
/// each taking the next index; returns the first failure in index order.
Error forEachJob(size_t n, unsigned jobs, llvm::function_ref<Error(size_t)> work) {
  size_t width = jobs ? jobs : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  width = std::min(width, n);
  std::vector<std::string> failures(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < n;)
      if (Error e = work(i))
        failures[i] = toString(std::move(e));
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < width; ++t)
    threads.emplace_back(worker);
  worker();
  for (std::thread &t : threads)
    t.join();
  for (const std::string &f : failures)
    if (!f.empty())
      return createStringError(inconvertibleErrorCode(), f);
  return Error::success();
}

/// The cache entry of one generator invocation: a hash of the arguments
/// and of the generator binary's identity.
std::string cacheKey(StringRef generator, ArrayRef<std::string> args) {
  std::string key = generator.str();
  sys::fs::file_status status;
  if (!sys::fs::status(generator, status))
    key += "|" + std::to_string(status.getSize()) + "|" +
           std::to_string(sys::toTimeT(status.getLastModificationTime()));
  for (const std::string &a : args)
    key += "|" + a;
  // The GPU contraction schedule under trial (codegen/generators/GpuSchedule.h).
  if (const char *variant = std::getenv("MOEC_GPU_CONTRACTION"))
    key += "|MOEC_GPU_CONTRACTION=" + std::string(variant);
  return llvm::utohexstr(xxh3_64bits(key), /*LowerCase=*/true, /*Width=*/16);
}

/// Copies `files` from `from` to `to`; false when one is missing.
bool copyAll(StringRef from, StringRef to, ArrayRef<std::string> files) {
  for (const std::string &f : files) {
    SmallString<256> src(from), dst(to);
    sys::path::append(src, f);
    sys::path::append(dst, f);
    if (sys::fs::copy_file(src, dst))
      return false;
  }
  return true;
}

/// Runs the generator for `files` into `dir`, through the cache when one is
/// configured: a hit copies the files, a miss generates them and stores a
/// copy (written aside, then renamed into place, so concurrent compiles
/// never see half an entry).
Error generateCached(const ToolchainOptions &options, std::vector<std::string> args,
                     ArrayRef<std::string> files, StringRef dir, const Twine &what,
                     const Twine &name) {
  const std::string &gen = options.generator;
  SmallString<256> entry(options.cacheDir);
  if (!options.cacheDir.empty()) {
    sys::path::append(entry, cacheKey(gen, args));
    if (sys::fs::is_directory(entry)) {
      if (copyAll(entry, dir, files)) {
        say(options, "cached " + name);
        return Error::success();
      }
      sys::fs::remove_directories(entry); // damaged: replaced below
    }
  }
  say(options, "generating " + name);
  args.insert(args.begin() + 1, {"-o", dir.str()});
  if (Error e = run(gen, args, what))
    return e;
  if (options.cacheDir.empty())
    return Error::success();
  // Best effort: a cache that cannot be written only costs the next compile.
  SmallString<256> aside;
  if (!sys::fs::create_directories(options.cacheDir) &&
      !sys::fs::createUniqueDirectory(Twine(entry) + ".tmp", aside)) {
    if (copyAll(dir, aside, files) && !sys::fs::rename(aside, entry))
      return Error::success();
    sys::fs::remove_directories(aside);
  }
  return Error::success();
}

} // namespace

Error moec::codegen::generateKernels(const KernelCalls &calls, StringRef dir,
                                     const ToolchainOptions &options) {
  const std::string &gen = options.generator;
  // A device target adds its Halide back end's features (the generators
  // schedule for a GPU feature, codegen/generators/GpuSchedule.h).
  std::string target =
      halideTarget(options.targetBackend(), options.hostTarget, options.backendOptions);
  // One job per kernel, then the Halide runtime (once per binary); each a
  // process of its own, run side by side.
  struct Job {
    std::vector<std::string> args, files;
    std::string what, name;
  };
  std::vector<Job> jobs;
  for (const auto &[name, call] : calls.all()) {
    if (call.generator.empty())
      continue;
    std::vector<std::string> args = {gen,
                                     "-g",
                                     call.generator,
                                     "-f",
                                     name,
                                     "-e",
                                     "static_library,c_header",
                                     "target=" + target + "-no_runtime"};
    args.insert(args.end(), call.params.begin(), call.params.end());
    jobs.push_back({std::move(args),
                    {name + ".a", name + ".h"},
                    "moe-halide-gen failed on kernel " + name + " (" + call.generator + ")",
                    name + " (" + call.generator + ")"});
  }
  jobs.push_back({{gen, "-r", "halide_runtime", "-e", "static_library", "target=" + target},
                  {"halide_runtime.a"},
                  "moe-halide-gen failed to emit the Halide runtime",
                  "the Halide runtime"});
  return forEachJob(jobs.size(), options.jobs, [&](size_t i) {
    const Job &job = jobs[i];
    return generateCached(options, job.args, job.files, dir, job.what, job.name);
  });
}

namespace {

/// Where a step program finds the runtime's headers and libraries: under
/// the prefix of an installed moec (PREFIX/include, PREFIX/<libdir>/moec,
/// `cmake --install`), else in the build tree this moec was built in.
struct RuntimeFiles {
  std::string include, contractInclude, lib, cpuLib, mainLib, frontendSpecLib, mpiLib;
};

const RuntimeFiles &runtimeFiles() {
  static const RuntimeFiles files = [] {
    RuntimeFiles built = {MOEC_RUNTIME_INCLUDE,   MOEC_CONTRACT_INCLUDE,
                          MOEC_RUNTIME_LIB,       MOEC_RUNTIME_CPU_LIB,
                          MOEC_RUNTIME_MAIN_LIB,  MOEC_FRONTEND_SPEC_LIB,
#ifdef MOEC_RUNTIME_MPI_LIB
                          MOEC_RUNTIME_MPI_LIB
#else
                          ""
#endif
    };
    std::string self = sys::fs::getMainExecutable(nullptr, (void *)&runtimeFiles);
    SmallString<256> prefix(sys::path::parent_path(sys::path::parent_path(self)));
    SmallString<256> lib(prefix), include(prefix);
    if (sys::path::is_absolute(MOEC_INSTALL_LIBDIR)) // -DCMAKE_INSTALL_LIBDIR=/usr/lib64
      lib = MOEC_INSTALL_LIBDIR;
    sys::path::append(lib, sys::path::is_absolute(MOEC_INSTALL_LIBDIR) ? "" : MOEC_INSTALL_LIBDIR,
                      "moec");
    sys::path::append(include, "include");
    auto in = [&](StringRef dir, StringRef name) {
      SmallString<256> path(dir);
      sys::path::append(path, name);
      return std::string(path);
    };
    if (self.empty() || !sys::fs::exists(in(lib, "libmoert.a")) ||
        !sys::fs::exists(in(include, "moert/Program.h")))
      return built;
    return RuntimeFiles{std::string(include),
                        std::string(include),
                        in(lib, "libmoert.a"),
                        in(lib, "libmoert_cpu.a"),
                        in(lib, "libmoert_main.a"),
                        in(lib, "libMoEFrontendSpec.a"),
                        built.mpiLib.empty() ? "" : in(lib, "libmoert_mpi.a")};
  }();
  return files;
}

} // namespace

Error moec::codegen::linkTrainer(ArrayRef<std::string> stepPrograms, StringRef dir,
                                 const KernelCalls &calls, StringRef output, bool mpi,
                                 const ToolchainOptions &options) {
  std::string cxx = MOEC_CXX;
  const RuntimeFiles &files = runtimeFiles();
  say(options, "runtime libraries: " + sys::path::parent_path(files.lib));
  // -O1: a step program is calls into kernels and the runtime (which are
  // compiled already), with a few short loops; -O2 took twice as long to
  // compile (a 32-layer model's: 20 s at -O1, 49 s at -O2, in parts of 150
  // ops) for no measurable step time.
  std::vector<std::string> compile = {cxx,
                                      "-O1",
                                      "-std=c++20",
                                      "-I" + dir.str(),
                                      "-I" + files.include,
                                      "-I" + files.contractInclude,
                                      "-I" MOEC_HALIDE_INCLUDE};
  const TargetBackend &backend = options.targetBackend();
  for (std::string &flag : backend.compileFlags(options.backendOptions))
    compile.push_back(std::move(flag));
  auto cxxPath = sys::findProgramByName(cxx);
  if (!cxxPath)
    return createStringError(inconvertibleErrorCode(), "C++ compiler '" + cxx + "' not found");
  // Several files (the parts of a long step in units of their own, the
  // programs of a mixed cluster's replicas) compile side by side into
  // objects, then link; one compiles and links in one command.
  std::vector<std::string> args = {cxx};
  if (stepPrograms.size() > 1) {
    std::vector<std::string> objects;
    for (const std::string &cpp : stepPrograms)
      objects.push_back(cpp + ".o");
    if (Error e = forEachJob(stepPrograms.size(), options.jobs, [&](size_t i) {
          std::vector<std::string> one = compile;
          one.insert(one.end(), {"-c", stepPrograms[i], "-o", objects[i]});
          say(options, "compiling " + stepPrograms[i]);
          return run(*cxxPath, one, "compiling the step program failed (" + stepPrograms[i] + ")");
        }))
      return e;
    args.insert(args.end(), objects.begin(), objects.end());
  } else {
    args = compile;
    args.insert(args.end(), stepPrograms.begin(), stepPrograms.end());
  }
  args.insert(args.end(), {"-o", output.str()});
  for (const auto &[name, call] : calls.all())
    if (!call.generator.empty())
      args.push_back((dir + "/" + name + ".a").str());
  args.push_back((dir + "/halide_runtime.a").str());
  args.push_back(files.mainLib);
  args.push_back(files.frontendSpecLib); // the config.json reader of --init-hf
#ifdef MOEC_RUNTIME_MPI_LIB
  // A partitioned binary also runs under mpirun, one rank per process.
  if (mpi) {
    // The MPI backend registers itself (moert/CommBackend.h) from a static
    // initialiser that nothing refers to: pull it in whole.
    args.push_back("-Wl,--whole-archive");
    args.push_back(files.mpiLib);
    args.push_back("-Wl,--no-whole-archive");
    SmallVector<StringRef> libs;
    StringRef(MOEC_MPI_LIBS).split(libs, ';', -1, false);
    for (StringRef lib : libs)
      args.push_back(lib.str());
  }
#else
  (void)mpi;
#endif
  args.push_back(files.lib);
  for (std::string &flag : backend.linkFlags(options.backendOptions))
    args.push_back(std::move(flag));
  args.push_back(files.cpuLib);
  args.push_back(MOEC_OPENBLAS_LIB);      // the kernels' extern GEMMs
  args.push_back(MOEC_SENTENCEPIECE_LIB); // --tokenizer
  args.push_back("-lpthread");
  args.push_back("-ldl");
  say(options,
      (stepPrograms.size() > 1 ? "linking " : "compiling ") + llvm::join(stepPrograms, " "));
  return run(*cxxPath, args,
             (stepPrograms.size() > 1 ? "linking the step programs failed ("
                                      : "compiling the step program failed (") +
                 llvm::join(stepPrograms, " ") + ")");
}
