//===- TrainerOptions.h - the command line of training binaries -*- C++ -*-===//
//
// The options of generated training binaries (`--help` lists them) and the
// error exit every unit of the trainer shares. Internal to libmoert_main.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINEROPTIONS_H
#define MOERT_LIB_TRAINEROPTIONS_H

#include "moert/Codecs.h"
#include "moert/Data.h"

#include <optional>
#include <string>
#include <vector>

namespace moert::trainer {

struct Options {
  int ranks = 0;          ///< 0: the grid the binary was compiled for
  double timeout = 120.0; ///< seconds a collective may wait for a peer
  std::string comm;       ///< --comm: a backend's name (moert/CommBackend.h); "": the default
  std::string data, metrics, checkpoint;
  long long steps = 100;
  bool stepsGiven = false;                                ///< --steps on the command line
  moert::DataFormat dataFormat = moert::DataFormat::Auto; ///< --data-format
  long long evalEvery = 0;                                ///< 0: evaluate at the end only
  long long evalBatches = 4;                              ///< validation batches per evaluation
  long long seed = -1;
  bool resume = false;
  long long checkpointEvery = 0; ///< 0: a checkpoint at the end only
  long long keepCheckpoints = 1; ///< step-N copies kept besides the latest (1: none)
  double valFraction = 0.1;
  long long sample = 0; ///< tokens to generate after training
  std::string prompt;
  bool hasPrompt = false;
  std::string tokenizer; ///< --tokenizer: a SentencePiece model for the prompt and sample
  double temperature = 0.8;
  long long topK = 0;           ///< 0: sample from the whole vocabulary
  bool progress = true;         ///< a progress bar when stdout is a terminal
  double maxMemoryGB = 0;       ///< 0: the machine's memory
  long long rebalanceEvery = 0; ///< 0: experts stay where the plan put them
  /// --emulate-link GBPS[,LATENCY_US]: bytes/s and seconds (0: off).
  double linkBytesPerSecond = 0, linkLatency = 0;
  /// --emulate-inter-node: the link between nodes (0: none of its own).
  double interBytesPerSecond = 0, interLatency = 0;
  /// --ranks-per-node (0: ranks on one host share a node, by host name).
  int ranksPerNode = 0;
  /// --emulate-cluster S,...: each rank's relative compute speed in (0, 1]
  /// (one value: every rank's); empty: off.
  std::vector<double> rankSpeeds;
  int threads = 0;             ///< --threads N: kernel threads (0: the machine's cores)
  bool commPriority = true;    ///< --comm-priority: all-to-alls before background all-reduces
  int staleness = 0;           ///< --staleness: steps a background all-reduce may be late
  std::string trace;           ///< --trace FILE: a Chrome trace of every rank
  bool profileKernels = false; ///< --profile-kernels: each device kernel's time
  /// --local-steps H (0: synchronous), DiLoCo's outer optimiser.
  long long localSteps = 0;
  long long syncSteps = 0; ///< --sync-steps N: synchronous before local steps
  double outerLr = 0.7, outerMomentum = 0.9;
  /// --outer-codec fp16|bf16|int8[:block]: the outer all-reduce's codec.
  std::optional<moert::CodecSpec> outerCodec;
  /// --save-replicas DIR: before each outer step, every data replica's
  /// parameters and AdamW moments as DIR/step-N-replica-D.safetensors.
  std::string saveReplicas;
  /// --loss-scale S (0: the program's, 65536 for f16 models) and
  /// --loss-scale-window N: dynamic loss scaling's initial scale, and the
  /// overflow-free steps after which it doubles.
  double lossScale = 0;
  long long lossScaleWindow = 2000;
  /// The learning-rate schedule's values at run time (unset: the compiled
  /// ones, moert_program.lr_schedule): --lr, --min-lr, --warmup-steps,
  /// --total-steps, --lr-schedule cosine|linear|constant (enum
  /// moert_lr_schedule).
  std::optional<double> lr, minLr;
  std::optional<long long> warmupSteps, totalSteps;
  std::optional<int> lrKind;
  /// --eval-only: the loss over --data's consecutive windows, no training.
  bool evalOnly = false;
  /// --init-hf DIR: parameters from a HuggingFace checkpoint directory;
  /// --export-hf DIR: one written at the end, in --export-dtype
  /// (f32|bf16|f16; empty: the model's), shards of at most
  /// --export-shard-mb megabytes.
  std::string initHF, exportHF, exportDtype;
  long long exportShardMB = 5000;
  /// Whether any of the schedule's flags was given.
  bool scheduleGiven() const { return lr || minLr || warmupSteps || totalSteps || lrKind; }
};

/// The names of --lr-schedule (and of checkpoints' lr_schedule.schedule):
/// "cosine", "linear", "constant" for enum moert_lr_schedule, and back
/// (nullopt: not a schedule's name).
const char *scheduleName(int kind);
std::optional<int> scheduleKind(const std::string &name);

/// The signal (SIGINT, SIGTERM) that asked the run to stop, or 0. Set by the
/// handler main() installs; the training loop saves and stops at the next
/// step boundary. A second signal ends the process at once.
int stopSignal();
void installStopHandlers();

/// Prints "error: MESSAGE" on stderr and exits with status 1.
[[noreturn]] void die(const std::string &message);

/// `text` as an integer >= `min`, or an error naming `flag`.
long long parseInt(const std::string &flag, const char *text, long long min);

/// The command line; exits with status 0 after `--help`, and through die()
/// on a bad option.
Options parseOptions(int argc, char **argv);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINEROPTIONS_H
