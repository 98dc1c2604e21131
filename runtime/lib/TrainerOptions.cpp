//===- TrainerOptions.cpp - the command line of training binaries ---------===//

#include "TrainerOptions.h"

#include "moec/contract/Abi.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <sys/stat.h>

using namespace moert::trainer;

namespace {
std::atomic<int> requestedStop{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

void onStopSignal(int signo) {
  // The second signal does not wait for the step to end.
  if (requestedStop.exchange(signo) != 0) {
    std::signal(signo, SIG_DFL);
    std::raise(signo);
  }
}
} // namespace

int moert::trainer::stopSignal() { return requestedStop.load(); }

void moert::trainer::installStopHandlers() {
  struct sigaction action = {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  for (int signo : {SIGINT, SIGTERM})
    sigaction(signo, &action, nullptr);
}

[[noreturn]] void moert::trainer::die(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  // Not std::exit: with ranks as threads, the other ranks and their
  // background engines still run, and the static destructors std::exit runs
  // (staging buffers, the thread communicator) would pull their state from
  // under them (a segfault after a collective timed out). What is written
  // (metrics lines, checkpoints) is flushed or complete already.
  std::fflush(nullptr);
  std::_Exit(1);
}

long long moert::trainer::parseInt(const std::string &flag, const char *text, long long min) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (!*text || *end || errno || v < min)
    die(flag + " expects an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return v;
}

namespace {

/// `text` as a number that `inRange` accepts, or the error "`expects`, got
/// 'TEXT'". An empty text reads as 0 when `emptyIsZero`.
double parseReal(const char *text, bool emptyIsZero, bool (*inRange)(double), const char *expects) {
  char *end = nullptr;
  double v = std::strtod(text, &end);
  if ((!emptyIsZero && !*text) || *end || !inRange(v))
    die(std::string(expects) + ", got '" + text + "'");
  return v;
}

/// A comma-separated list of numbers that `inRange` accepts.
std::vector<double> parseList(const char *text, bool (*inRange)(double), const char *expects) {
  std::vector<double> out;
  std::string all = text;
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = std::min(all.find(',', pos), all.size());
    out.push_back(parseReal(all.substr(pos, comma - pos).c_str(), false, inRange, expects));
    pos = comma + 1;
  }
  return out;
}

[[noreturn]] void printUsage(const char *program) {
  std::printf("usage: %s --data FILE [--data-format text|u16|u32] [--steps N] [--seed S]\n"
              "          [--metrics FILE]\n"
              "       %s --checkpoint DIR --resume --sample N [--prompt TEXT]  (no training)\n"
              "       %s --data FILE --eval-only [--init-hf DIR | --checkpoint DIR --resume]\n"
              "          [--checkpoint DIR [--resume] [--checkpoint-every N]\n"
              "           [--keep-checkpoints K]]\n"
              "          [--val-fraction F]\n"
              "          [--eval-every N] [--eval-batches B]\n"
              "          [--sample N [--prompt TEXT] [--temperature T] [--top-k K]]\n"
              "          [--tokenizer M.model]\n"
              "          [--threads N] [--no-progress] [--ranks N] [--comm-timeout S]\n"
              "          [--comm threads|mpi] [--max-memory GB] [--rebalance-every N]\n"
              "          [--trace FILE] [--profile-kernels]\n"
              "          [--emulate-link GBPS[,LATENCY_US]] [--ranks-per-node K]\n"
              "          [--emulate-inter-node GBPS[,LATENCY_US]]\n"
              "          [--emulate-cluster SPEED,...] [--comm-priority all-to-all|fifo]\n"
              "          [--staleness 0|1] [--loss-scale S] [--loss-scale-window N]\n"
              "          [--lr LR] [--min-lr LR] [--warmup-steps N] [--total-steps N]\n"
              "          [--lr-schedule cosine|linear|constant]\n"
              "          [--init-hf DIR] [--export-hf DIR [--export-dtype f32|bf16|f16]\n"
              "           [--export-shard-mb N]]\n"
              "          [--local-steps H [--outer-lr LR] [--outer-momentum MU]\n"
              "           [--sync-steps N] [--outer-codec fp16|bf16|int8[:block]]\n"
              "           [--save-replicas DIR]]\n"
              "       %s --version  (the MoEC release, grid and kernel target it was built for)\n"
              "  --data       raw text (one token per byte) or a .bin file of uint16 tokens\n"
              "  --data-format text|u16|u32  how --data stores tokens (default: u16 for\n"
              "               .bin, text otherwise; u32: little-endian uint32 token ids)\n"
              "  --sample N   generate N tokens after training, from --prompt (text;\n"
              "               comma-separated token ids for .bin data; default: newline);\n"
              "               without --data, from the --resume checkpoint only (the prompt\n"
              "               is text for byte vocabularies, <= 256, else token ids)\n"
              "  --tokenizer M.model  a SentencePiece model (moe-tokenize's): --prompt is\n"
              "               text it encodes (default: a line's start), and the sample is\n"
              "               printed decoded\n"
              "  --checkpoint DIR  written at the end, every N steps with\n"
              "               --checkpoint-every N, and on SIGINT or SIGTERM (then exit);\n"
              "               --keep-checkpoints K also keeps the last K saves as\n"
              "               DIR/step-N.safetensors; a DIR that holds a checkpoint\n"
              "               needs --resume (a fresh run would write over it)\n"
              "  --eval-only  no training: the mean next-token cross entropy over --data's\n"
              "               consecutive windows of seq_len targets from its start\n"
              "               (eval_loss, with eval_tokens in the metrics)\n"
              "  --init-hf DIR  start from a HuggingFace checkpoint (config.json and\n"
              "               model.safetensors, or shards with their index) of the model\n"
              "               the binary was compiled for; each rank reads its slices\n"
              "  --export-hf DIR  at the end, config.json and safetensors under the\n"
              "               family's names (a model compiled from MoEC JSON: mixtral),\n"
              "               in the model's precision or --export-dtype; shards of at\n"
              "               most --export-shard-mb megabytes (default 5000)\n"
              "  --max-memory GB  refuse to start when the plan needs more (default: the\n"
              "               machine's memory)\n"
              "  --threads N  the kernels' threads, shared by the process's ranks\n"
              "               (default: every core); 1: each rank computes on its own\n"
              "               thread, as separate devices do\n"
              "  --ranks N    ranks of a binary compiled with moec --ranks run as threads\n"
              "               (the compiled grid; under mpirun, one rank per process)\n"
              "  --comm NAME  the communicator: threads (every rank in this process) or\n"
              "               mpi (one rank per process under mpirun), where linked;\n"
              "               default: mpi under mpirun, else threads\n"
              "  --rebalance-every N  every N steps, move experts between the ep ranks\n"
              "               when the measured load says it pays (expert parallelism)\n"
              "  --trace FILE  a Chrome trace (Perfetto) of every rank's compute,\n"
              "               collectives and steps\n"
              "  --profile-kernels  the training steps' time in each kernel family\n"
              "               (device binaries wait for the device around each\n"
              "               kernel: slower steps)\n"
              "  --emulate-link GBPS[,LATENCY_US]  each collective also takes its bytes\n"
              "               over GBPS gigabytes/s plus LATENCY_US per message\n"
              "  --ranks-per-node K  ranks r of node r / K (default: the ranks of one\n"
              "               host share a node); the metrics count the bytes each\n"
              "               rank sends to other nodes (comm_bytes_inter_node)\n"
              "  --emulate-inter-node GBPS[,LATENCY_US]  the bytes to other nodes take\n"
              "               this link instead (--emulate-link: the rest)\n"
              "  --emulate-cluster SPEED,...  rank r computes at SPEED_r in (0, 1] of\n"
              "               this machine (waits (1/SPEED - 1) x its compute); one\n"
              "               value: every rank\n"
              "  --comm-priority all-to-all|fifo  background gradient all-reduces\n"
              "               wait while a dispatch or combine all-to-all runs (default),\n"
              "               or run as soon as started\n"
              "  --staleness 1  delayed gradients: each step applies the previous\n"
              "               step's all-reduced gradients, so their all-reduces overlap\n"
              "               a whole step, each rank correcting them by the change of\n"
              "               its own; --sync-steps N trains the first N synchronously\n"
              "  --local-steps H  data replicas take H steps on their own batches, then\n"
              "               average their parameter deltas through an outer Nesterov\n"
              "               step (DiLoCo; --outer-lr 0.7, --outer-momentum 0.9);\n"
              "               --sync-steps N trains the first N steps synchronously;\n"
              "               --outer-codec compresses the outer all-reduce;\n"
              "               --save-replicas DIR writes each replica's parameters\n"
              "               and moments before each outer step\n"
              "               (DIR/step-N-replica-D.safetensors)\n"
              "  --lr, --min-lr, --warmup-steps, --total-steps, --lr-schedule  the\n"
              "               learning-rate schedule (default: the model's, compiled\n"
              "               in, fitted to the run: the decay ends at --steps\n"
              "               unless --total-steps, the warm-up keeps its share\n"
              "               unless --warmup-steps; a warning when the run ends\n"
              "               inside the warm-up, or before or after --total-steps)\n"
              "  --loss-scale S  f16 models: the initial dynamic loss scale (default\n"
              "               65536); a step whose gradients overflow is skipped and\n"
              "               halves it, --loss-scale-window N (default 2000) steps\n"
              "               without one double it\n",
              program, program, program, program);
  std::exit(0);
}

} // namespace

const char *moert::trainer::scheduleName(int kind) {
  return kind == MOERT_LR_COSINE ? "cosine" : kind == MOERT_LR_LINEAR ? "linear" : "constant";
}

std::optional<int> moert::trainer::scheduleKind(const std::string &name) {
  for (int kind : {MOERT_LR_COSINE, MOERT_LR_LINEAR, MOERT_LR_CONSTANT})
    if (name == scheduleName(kind))
      return kind;
  return std::nullopt;
}

Options moert::trainer::parseOptions(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data")
      o.data = value();
    else if (a == "--data-format") {
      std::string f = value();
      if (f == "text")
        o.dataFormat = moert::DataFormat::Text;
      else if (f == "u16")
        o.dataFormat = moert::DataFormat::Bin;
      else if (f == "u32")
        o.dataFormat = moert::DataFormat::Bin32;
      else
        die("--data-format expects text, u16 or u32, got '" + f + "'");
    } else if (a == "--steps") {
      o.steps = parseInt(a, value(), 1);
      o.stepsGiven = true;
    } else if (a == "--seed")
      o.seed = parseInt(a, value(), 0);
    else if (a == "--metrics")
      o.metrics = value();
    else if (a == "--checkpoint")
      o.checkpoint = value();
    else if (a == "--resume")
      o.resume = true;
    else if (a == "--checkpoint-every")
      o.checkpointEvery = parseInt(a, value(), 1);
    else if (a == "--rebalance-every")
      o.rebalanceEvery = parseInt(a, value(), 1);
    else if (a == "--keep-checkpoints")
      o.keepCheckpoints = parseInt(a, value(), 1);
    else if (a == "--val-fraction")
      o.valFraction = parseReal(
          value(), true, [](double v) { return v >= 0 && v < 1; },
          "--val-fraction expects a number in [0, 1)");
    else if (a == "--eval-every")
      o.evalEvery = parseInt(a, value(), 1);
    else if (a == "--eval-batches")
      o.evalBatches = parseInt(a, value(), 1);
    else if (a == "--sample")
      o.sample = parseInt(a, value(), 0);
    else if (a == "--prompt") {
      o.prompt = value();
      o.hasPrompt = true;
    } else if (a == "--tokenizer")
      o.tokenizer = value();
    else if (a == "--temperature")
      o.temperature = parseReal(
          value(), false, [](double v) { return v > 0 && v <= 100; },
          "--temperature expects a number in (0, 100]");
    else if (a == "--top-k")
      o.topK = parseInt(a, value(), 0);
    else if (a == "--no-progress")
      o.progress = false;
    else if (a == "--comm")
      o.comm = value();
    else if (a == "--ranks")
      o.ranks = static_cast<int>(parseInt(a, value(), 1));
    else if (a == "--max-memory")
      o.maxMemoryGB = parseReal(
          value(), false, [](double v) { return v > 0 && v <= 1e9; },
          "--max-memory expects gigabytes in (0, 1e9]");
    else if (a == "--comm-timeout")
      o.timeout = parseReal(
          value(), false, [](double v) { return v > 0 && v <= 86400; },
          "--comm-timeout expects seconds in (0, 86400]");
    else if (a == "--local-steps")
      o.localSteps = parseInt(a, value(), 1);
    else if (a == "--outer-codec") {
      std::string text = value(), error;
      moert::CodecSpec spec;
      if (!moert::parseCodec(text, spec, error))
        die("--outer-codec: " + error);
      if (spec.kind != moert::CodecKind::FP16 && spec.kind != moert::CodecKind::BF16 &&
          spec.kind != moert::CodecKind::Int8)
        die("--outer-codec expects fp16, bf16 or int8[:block] (an element-wise codec), got '" +
            text + "'");
      o.outerCodec = spec;
    } else if (a == "--sync-steps")
      o.syncSteps = parseInt(a, value(), 0);
    else if (a == "--save-replicas")
      o.saveReplicas = value();
    else if (a == "--outer-lr")
      o.outerLr = parseReal(
          value(), false, [](double v) { return v > 0 && v <= 10; },
          "--outer-lr expects a number in (0, 10]");
    else if (a == "--outer-momentum")
      o.outerMomentum = parseReal(
          value(), false, [](double v) { return v >= 0 && v < 1; },
          "--outer-momentum expects a number in [0, 1)");
    else if (a == "--lr")
      o.lr = parseReal(
          value(), false, [](double v) { return v > 0 && v <= 10; },
          "--lr expects a number in (0, 10]");
    else if (a == "--min-lr")
      o.minLr = parseReal(
          value(), false, [](double v) { return v >= 0 && v <= 10; },
          "--min-lr expects a number in [0, 10]");
    else if (a == "--warmup-steps")
      o.warmupSteps = parseInt(a, value(), 0);
    else if (a == "--total-steps")
      o.totalSteps = parseInt(a, value(), 1);
    else if (a == "--lr-schedule") {
      std::string k = value();
      o.lrKind = scheduleKind(k);
      if (!o.lrKind)
        die("--lr-schedule expects cosine, linear or constant, got '" + k + "'");
    } else if (a == "--eval-only")
      o.evalOnly = true;
    else if (a == "--init-hf")
      o.initHF = value();
    else if (a == "--export-hf")
      o.exportHF = value();
    else if (a == "--export-dtype") {
      o.exportDtype = value();
      if (o.exportDtype != "f32" && o.exportDtype != "bf16" && o.exportDtype != "f16")
        die("--export-dtype expects f32, bf16 or f16, got '" + o.exportDtype + "'");
    } else if (a == "--export-shard-mb")
      o.exportShardMB = parseInt(a, value(), 1);
    else if (a == "--trace")
      o.trace = value();
    else if (a == "--profile-kernels")
      o.profileKernels = true;
    else if (a == "--emulate-link" || a == "--emulate-inter-node") {
      std::string expects = a + " expects GBPS[,LATENCY_US], numbers in (0, 1e6]";
      std::vector<double> link = parseList(
          value(), [](double v) { return v > 0 && v <= 1e6; }, expects.c_str());
      if (link.size() > 2)
        die(a + " expects GBPS[,LATENCY_US], got " + std::to_string(link.size()) + " numbers");
      bool inter = a == "--emulate-inter-node";
      (inter ? o.interBytesPerSecond : o.linkBytesPerSecond) = link[0] * 1e9;
      (inter ? o.interLatency : o.linkLatency) = link.size() > 1 ? link[1] * 1e-6 : 0;
    } else if (a == "--ranks-per-node") {
      o.ranksPerNode = static_cast<int>(std::min<long long>(parseInt(a, value(), 1), 1 << 30));
    } else if (a == "--loss-scale") {
      o.lossScale = parseReal(
          value(), false, [](double v) { return v >= 1 && v <= 1e30; },
          "--loss-scale expects a number in [1, 1e30]");
    } else if (a == "--loss-scale-window") {
      o.lossScaleWindow = parseInt(a, value(), 1);
    } else if (a == "--staleness") {
      std::string v = value();
      if (v != "0" && v != "1")
        die("--staleness expects 0 or 1 (steps a gradient may be late), got '" + v + "'");
      o.staleness = v == "1";
    } else if (a == "--comm-priority") {
      std::string v = value();
      if (v != "all-to-all" && v != "fifo")
        die("--comm-priority expects all-to-all or fifo, got '" + v + "'");
      o.commPriority = v == "all-to-all";
    } else if (a == "--emulate-cluster")
      o.rankSpeeds = parseList(
          value(), [](double v) { return v > 0 && v <= 1; },
          "--emulate-cluster expects relative speeds in (0, 1], comma-separated");
    else if (a == "--threads") {
      // The kernels' thread pool reads HL_NUM_THREADS when it starts.
      const char *v = value();
      o.threads = static_cast<int>(std::min(parseInt(a, v, 1), 1LL << 20));
      setenv("HL_NUM_THREADS", v, 1);
    } else if (a == "--help" || a == "-h")
      printUsage(argv[0]);
    else
      die("unknown option '" + a + "' (see --help)");
  }
  // Without data the binary samples from a checkpoint and trains nothing.
  bool weights = o.resume || !o.initHF.empty();
  if (o.data.empty() && !(weights && (o.sample > 0 || !o.exportHF.empty())))
    die("--data FILE is required (raw text, or a .bin file of uint16 tokens); to sample from or "
        "export a checkpoint without training, give --checkpoint DIR --resume (or --init-hf "
        "DIR) with --sample N or --export-hf DIR");
  if (o.evalOnly && o.data.empty())
    die("--eval-only evaluates --data FILE");
  if (o.evalOnly && o.stepsGiven)
    die("--eval-only trains no steps; leave out --steps");
  if (o.evalOnly && !o.checkpoint.empty() && !o.resume)
    die("--eval-only writes no checkpoint; give --resume to evaluate the one in " + o.checkpoint);
  if (!o.initHF.empty() && o.resume)
    die("--init-hf and --resume both set the parameters; give one");
  if ((!o.exportDtype.empty() || o.exportShardMB != 5000) && o.exportHF.empty())
    die("--export-dtype and --export-shard-mb go with --export-hf DIR");
  if (o.data.empty() && o.stepsGiven)
    die("--steps trains, which needs --data FILE");
  if (o.resume && o.checkpoint.empty())
    die("--resume needs --checkpoint DIR");
  if (o.checkpointEvery && o.checkpoint.empty())
    die("--checkpoint-every needs --checkpoint DIR");
  if ((o.outerLr != 0.7 || o.outerMomentum != 0.9 || o.outerCodec || !o.saveReplicas.empty()) &&
      o.localSteps == 0)
    die("--outer-lr, --outer-momentum, --outer-codec and --save-replicas go with --local-steps H");
  if (o.syncSteps > 0 && o.localSteps == 0 && o.staleness == 0)
    die("--sync-steps goes with --local-steps H or --staleness 1");
  if (o.keepCheckpoints > 1 && o.checkpoint.empty())
    die("--keep-checkpoints needs --checkpoint DIR");
  // A fresh run's first save would replace the weights a checkpoint in DIR
  // holds (a forgotten --resume loses the whole run): refuse before any
  // step, as training libraries refuse a non-empty output directory.
  if (!o.checkpoint.empty() && !o.resume && !o.data.empty() && !o.evalOnly)
    for (const char *file : {"tensors.safetensors", "state.json"})
      if (struct stat st; ::stat((o.checkpoint + "/" + file).c_str(), &st) == 0)
        die(o.checkpoint + " holds a checkpoint (" + file +
            "): give --resume to continue it, or remove it or choose another --checkpoint "
            "directory to start over");
  return o;
}
