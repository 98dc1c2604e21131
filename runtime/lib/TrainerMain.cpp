//===- TrainerMain.cpp - main() of generated training binaries ------------===//
//
//   ./tiny-train --data corpus.txt --steps 300 [--seed S] [--metrics m.jsonl]
//                [--checkpoint DIR [--resume]] [--val-fraction F]
//                [--eval-every N] [--sample N [--prompt TEXT]]
//
// Reads the command line (TrainerOptions.cpp) and the corpus, then runs the
// training (Trainer.h: parameters, AdamW moments and the planned arenas,
// initialised from the seed as the reference interpreter does; batches, the
// generated step, progress, metrics, checkpoints, and text sampled at the
// end) on one rank, or on the compiled grid's ranks through the
// communicator backend --comm names (moert/CommBackend.h: threads, or this
// process's rank under mpirun).
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "TrainerOptions.h"

#include "HalideRuntime.h"
#include "moert/BlasCore.h"
#include "moert/Comm.h"
#include "moert/CommBackend.h"
#include "moert/CpuTarget.h"
#include "moert/Data.h"
#include "moert/Program.h"
#include "moert/ScratchPool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <malloc.h>
#include <new>
#include <string>
#include <unistd.h>

using namespace moert::trainer;

namespace {

/// Resident bytes now (Linux /proc; 0 where unavailable).
long long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(statm >> size >> resident))
    return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

/// A /proc/meminfo field in bytes (0 where unavailable).
long long memInfo(const char *field) {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  long long kb = 0;
  std::string unit;
  while (meminfo >> name >> kb) {
    std::getline(meminfo, unit);
    if (name == std::string(field) + ":")
      return kb * 1024;
  }
  return 0;
}

/// Before anything large is allocated: the plan's memory for the ranks this
/// process holds against --max-memory (default: the machine's memory).
/// More than is available now but less than the machine holds is a warning.
void checkMemory(const Options &o, int ranksHere, const moert::TokenStream &data) {
  // The largest of the ranks' programs (unequal token shares: one each).
  long long perRank = 0;
  for (int r = 0; r < std::max(moec_program.grid_dp * moec_program.grid_ep, 1); ++r) {
    const moert_program &prog = programOf(r);
    long long bytes = prog.activation_bytes + prog.gradient_bytes + prog.planned_scratch_bytes +
                      prog.accumulator_bytes;
    for (int i = 0; i < prog.num_params; ++i)
      bytes += stateBytes(prog.params[i]);
    perRank = std::max(perRank, bytes);
  }
  long long need = perRank * ranksHere + static_cast<long long>(data.bytes());
  long long total = memInfo("MemTotal"), available = memInfo("MemAvailable");
  long long limit = o.maxMemoryGB > 0 ? static_cast<long long>(o.maxMemoryGB * 1e9) : total;
  auto gb = [](long long bytes) {
    char text[32];
    if (bytes >= 1000000000)
      std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
    else
      std::snprintf(text, sizeof text, "%.2f MB", bytes / 1e6);
    return std::string(text);
  };
  std::string what = gb(need) + " (" + gb(perRank) + " of planned buffers and kernel scratch" +
                     (ranksHere > 1 ? " per rank x " + std::to_string(ranksHere) + " ranks" : "") +
                     ", " + gb(static_cast<long long>(data.bytes())) + " of data)";
  if (limit > 0 && need > limit)
    die("the training step needs " + what + ", more than " +
        (o.maxMemoryGB > 0 ? "--max-memory " + gb(limit) : "this machine's " + gb(limit)) +
        ": use a smaller model, batch or sequence, or more ranks over more machines");
  if (available > 0 && need > available)
    std::fprintf(stderr, "warning: the training step needs %s; %s is available now\n", what.c_str(),
                 gb(available).c_str());
}

/// Reads --data into `data`, checks it against the model, and returns the
/// end of the training split.
size_t loadCorpus(const Options &o, uint64_t seed, moert::TokenStream &data) {
  const moert_program &prog = moec_program;
  std::string error;
  if (!moert::loadTokens(o.data, o.dataFormat, data, error))
    die(error);
  if (data.maxToken >= prog.vocab)
    die(o.data + ": token id " + std::to_string(data.maxToken) +
        " does not fit the model's vocabulary (" + std::to_string(prog.vocab) + ")");
  if (o.evalOnly) { // every window of the file, no split
    if (data.size() < static_cast<size_t>(prog.seq_len) + 1)
      die(o.data + ": " + std::to_string(data.size()) + " tokens, fewer than one window of " +
          std::to_string(prog.seq_len + 1) + " (seq_len + 1) to evaluate");
    return data.size();
  }
  size_t split = moert::trainSplitEnd(data.size(), o.valFraction);
  moert::BatchSampler check(data, 0, split, prog.batch, prog.seq_len, seed);
  if (!check.valid(error))
    die(o.data + ": " + error);
  return split;
}

/// A parallel loop run in order on the calling thread.
int serialParFor(void *context, halide_task_t task, int min, int size, uint8_t *closure) {
  for (int i = min; i < min + size; ++i)
    if (int rc = task(context, i, closure))
      return rc;
  return 0;
}

/// A launcher's process count (mpirun, srun, other PMI launchers), or 0.
int launcherProcesses() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
    if (const char *v = std::getenv(name))
      return std::atoi(v);
  return 0;
}

/// The backend --comm names (default: the launcher's, else threads); an
/// unknown name is an error listing the linked ones.
const moert_comm_backend &chooseBackend(const std::string &name) {
  if (name.empty())
    return *moert_comm_backend_default();
  if (const moert_comm_backend *b = moert_comm_backend_named(name.c_str()))
    return *b;
  die("--comm " + name +
      ": this binary has no such communicator (it has: " + moert_comm_backend_names() + ")");
}

/// Several processes of a binary that cannot talk to each other would each
/// run the whole job into the same metrics and checkpoint files.
void refuseForeignLauncher(int ranks, const moert_comm_backend &backend) {
  int processes = launcherProcesses();
  if (processes <= 1 || (ranks > 1 && backend.rank_per_process))
    return;
  std::string started =
      "started as " + std::to_string(processes) + " processes (mpirun or a PMI launcher), but ";
  const moert_comm_backend *perProcess = nullptr;
  for (int i = 0; const moert_comm_backend *b = moert_comm_backend_at(i); ++i)
    if (b->rank_per_process && !perProcess)
      perProcess = b;
  if (ranks > 1 && perProcess)
    die(started + "--comm " + backend.name + " holds every rank in one process: run it without " +
        "the launcher, or with --comm " + perProcess->name);
  die(started +
      (ranks == 1 ? std::string("this binary was compiled for one rank")
                  : "this binary was linked without MPI") +
      ": run it without the launcher, or recompile with moec --ranks " + std::to_string(processes));
}

/// Runs the compiled grid's ranks through `backend`: this process's under
/// mpirun, or all of them as threads. Returns the exit status.
int launchBackend(const moert_comm_backend &backend, Shared &shared, int ranks, int &argc,
                  char **&argv) {
  char error[512] = "";
  moert_comm *comm = nullptr;
  if (backend.init && !(comm = backend.init(&argc, &argv, shared.o.timeout, error, sizeof error)))
    die(std::string(backend.name) + ": " + (error[0] ? error : "initialisation failed"));
  int rc = backend.run(
      comm, ranks, shared.o.timeout,
      [](moert_comm *c, void *user) { return trainRank(*static_cast<Shared *>(user), c); }, &shared,
      error, sizeof error);
  if (rc < 0)
    die(error);
  if (backend.finalize)
    backend.finalize(comm);
  return rc;
}

/// Runs the compiled grid's ranks: one, or all of them through `backend`.
/// Returns the exit status.
int launchRanks(const moert_comm_backend &backend, Shared &shared, int ranks, int &argc,
                char **&argv) {
  const moert_program &prog = moec_program;
  if (ranks <= 1)
    return trainRank(shared, nullptr);
  if (backend.rank_per_process)
    return launchBackend(backend, shared, ranks, argc, argv);
  std::string shares; // unequal token shares: sequences per data replica
  for (int r = 0; prog.replica_batches && r < prog.grid_dp * prog.grid_ep; ++r)
    shares += (r ? " + " : ", token shares ") + std::to_string(prog.replica_batches[r]);
  if (prog.grid_tp > 1)
    std::printf("ranks: %d threads (dp %d x ep %d x tp %d)%s\n", ranks, prog.grid_dp, prog.grid_ep,
                prog.grid_tp, shares.c_str());
  else
    std::printf("ranks: %d threads (dp %d x ep %d)%s\n", ranks, prog.grid_dp, prog.grid_ep,
                shares.c_str());
  int rc = launchBackend(backend, shared, ranks, argc, argv);
  // Ranks stopped by a signal saved and return 128 + signal, as one rank does.
  if (rc != 0 && stopSignal())
    return 128 + stopSignal();
  return rc == 0 ? 0 : 1;
}

/// --version: what built this binary and what it was compiled for, before
/// any check (a binary refused on this CPU still says what it needs).
bool printVersion(int argc, char **argv) {
  if (std::none_of(argv + 1, argv + argc,
                   [](const char *a) { return std::strcmp(a, "--version") == 0; }))
    return false;
  const moert_program &p = moec_program;
  std::printf("%s: MoEC %s training binary, step-program ABI %d\n"
              "  grid: dp %d x ep %d x tp %d; per rank: batch %lld x seq_len %lld, vocab %lld\n"
              "  kernels: %s\n  communicators: %s\n",
              argv[0], MOEC_VERSION, p.abi_version, p.grid_dp, p.grid_ep, p.grid_tp,
              static_cast<long long>(p.batch), static_cast<long long>(p.seq_len),
              static_cast<long long>(p.vocab), p.kernel_target ? p.kernel_target() : "host",
              moert_comm_backend_names());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  if (printVersion(argc, argv))
    return 0;
  moert::selectBlasCore(argv);
  long long startResident = residentBytes();
  if (moec_program.abi_version != MOERT_ABI_VERSION) {
    std::fprintf(stderr,
                 "error: this step program was emitted for runtime ABI %d, but the runtime "
                 "is ABI %d: recompile the model with this moec\n",
                 moec_program.abi_version, MOERT_ABI_VERSION);
    return 2;
  }
  // Kernels compiled for features this CPU lacks would die of an illegal
  // instruction in the first step.
  if (moec_program.kernel_target) {
    std::string target = moec_program.kernel_target();
    if (std::string missing = moert::missingCpuFeatures(target); !missing.empty()) {
      std::fprintf(stderr,
                   "error: this binary's kernels were compiled for %s, and this CPU lacks %s: "
                   "compile the model again for this CPU (moec --host-target host, the "
                   "default, on this machine) or for what every machine it runs on has "
                   "(e.g. --host-target x86-64-v3)\n",
                   target.c_str(), missing.c_str());
      return 1;
    }
  }
  // A fixed mmap threshold: large blocks (arenas, kernel scratch) map and
  // unmap exactly, instead of glibc's adaptive threshold moving freed scratch
  // onto a heap that fragments and never shrinks.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  // Kernel scratch is reused across steps within the compiler's bound.
  moert_scratch_set_limit(
      moec_program.planned_scratch_bytes *
      std::max(1, moec_program.grid_dp * moec_program.grid_ep * moec_program.grid_tp));
  std::set_new_handler([] {
    std::fputs("error: out of memory (an allocation failed)\n", stderr); // no allocation
    std::fflush(nullptr);
    std::_Exit(1);
  });
  // Progress reaches a log file line by line, not when a buffer fills.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o = parseOptions(argc, argv);
  // Under mpirun (or another launcher) stdout is the launcher's pipe or
  // pseudo-terminal, forwarded to wherever mpirun's output goes (often a
  // log): progress lines, never the bar's escape codes.
  if (launcherProcesses() > 1)
    o.progress = false;
  // --threads 1: every parallel loop of the kernels (and of the OpenBLAS
  // stages) runs on the thread that calls it. Ranks as threads then each
  // compute on their own thread, as separate devices do: Halide's pool is
  // shared by the process, and a rank's thread waiting for its own loop
  // would run another rank's tasks, so neither rank's compute time would be
  // its own work (nor would --emulate-cluster slow the right work). The
  // generators use no async stages, so halide_do_parallel_tasks (left to
  // Halide) never runs.
  if (o.threads == 1)
    halide_set_custom_do_par_for(serialParFor);
  const moert_program &prog = moec_program;
  uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : prog.seed;

  moert::TokenStream data;
  size_t split = 0;
  if (!o.data.empty())
    split = loadCorpus(o, seed, data);
  else
    data.width =
        prog.vocab > 256 ? 4 : 1; // sampling only: the prompt is text for byte vocabularies
  int ranks = prog.grid_dp * prog.grid_ep * prog.grid_tp;
  if (o.ranks && o.ranks != ranks)
    die("--ranks " + std::to_string(o.ranks) + ": this binary was compiled for " +
        std::to_string(ranks) + (ranks == 1 ? " rank (dp " : " ranks (dp ") +
        std::to_string(prog.grid_dp) + " x ep " + std::to_string(prog.grid_ep) +
        "); recompile with moec --ranks");
  const moert_comm_backend &backend = chooseBackend(o.comm);
  refuseForeignLauncher(ranks, backend);
  bool perProcess = ranks > 1 && backend.rank_per_process;
  checkMemory(o, perProcess ? 1 : ranks, data);
  Shared shared{o, data, split, seed, startResident, ranks == 1 || perProcess};
  installStopHandlers();
  return launchRanks(backend, shared, ranks, argc, argv);
}
