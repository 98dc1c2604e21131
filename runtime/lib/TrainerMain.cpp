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
// end) on one rank, on the compiled grid's ranks as threads, or on this
// process's rank under mpirun.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "TrainerOptions.h"

#include "HalideRuntime.h"
#include "moert/BlasCore.h"
#include "moert/Comm.h"
#include "moert/CpuTarget.h"
#include "moert/Data.h"
#include "moert/MpiComm.h"
#include "moert/Program.h"
#include "moert/ScratchPool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <malloc.h>
#include <new>
#include <string>
#include <unistd.h>

// The MPI backend, when the binary links libmoert_mpi (weak: a binary
// without it runs ranks as threads only).
extern "C" {
int moert_mpi_launched(void) __attribute__((weak));
moert_comm *moert_mpi_init(int *argc, char ***argv, double timeout_seconds) __attribute__((weak));
void moert_mpi_finalize(moert_comm *comm) __attribute__((weak));
}

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
    long long bytes = prog.activation_bytes + prog.gradient_bytes + prog.planned_scratch_bytes;
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

/// Several processes of a binary that cannot talk to each other would each
/// run the whole job into the same metrics and checkpoint files.
void refuseForeignLauncher(int ranks) {
  int processes = launcherProcesses();
  if (processes <= 1)
    return;
  bool mpi = moert_mpi_launched != nullptr;
  if (ranks == 1 || !mpi)
    die("started as " + std::to_string(processes) + " processes (mpirun or a PMI launcher), but " +
        (ranks == 1 ? std::string("this binary was compiled for one rank")
                    : "this binary was linked without MPI") +
        ": run it without the launcher, or recompile with moec --ranks " +
        std::to_string(processes));
}

/// Runs the compiled grid's ranks: one, this process's under mpirun, or all
/// of them as threads. Returns the exit status.
int launchRanks(Shared &shared, int ranks, int &argc, char **&argv) {
  const moert_program &prog = moec_program;
  if (ranks <= 1)
    return trainRank(shared, nullptr);
  if (moert_mpi_launched && moert_mpi_launched()) {
    moert_comm *comm = moert_mpi_init(&argc, &argv, shared.o.timeout);
    if (!comm)
      die("MPI initialisation failed");
    if (moert_comm_size(comm) != ranks)
      die("mpirun started " + std::to_string(moert_comm_size(comm)) +
          " processes; this binary was compiled for " + std::to_string(ranks) + " ranks");
    int rc = trainRank(shared, comm);
    moert_mpi_finalize(comm);
    return rc;
  }
  std::string shares; // unequal token shares: sequences per data replica
  for (int r = 0; prog.replica_batches && r < prog.grid_dp * prog.grid_ep; ++r)
    shares += (r ? " + " : ", token shares ") + std::to_string(prog.replica_batches[r]);
  if (prog.grid_tp > 1)
    std::printf("ranks: %d threads (dp %d x ep %d x tp %d)%s\n", ranks, prog.grid_dp, prog.grid_ep,
                prog.grid_tp, shares.c_str());
  else
    std::printf("ranks: %d threads (dp %d x ep %d)%s\n", ranks, prog.grid_dp, prog.grid_ep,
                shares.c_str());
  int rc = moert_run_threads(
      ranks, shared.o.timeout,
      [](moert_comm *comm, void *user) { return trainRank(*static_cast<Shared *>(user), comm); },
      &shared);
  // Ranks stopped by a signal saved and return 128 + signal, as one rank does.
  if (rc != 0 && stopSignal())
    return 128 + stopSignal();
  return rc == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
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
  refuseForeignLauncher(ranks);
  bool mpi = ranks > 1 && moert_mpi_launched && moert_mpi_launched();
  checkMemory(o, mpi ? 1 : ranks, data);
  Shared shared{o, data, split, seed, startResident, ranks == 1 || mpi};
  installStopHandlers();
  return launchRanks(shared, ranks, argc, argv);
}
