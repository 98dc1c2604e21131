//===- Trainer.cpp - set-up, the training loop and the reports ------------===//
//
// A rank's set-up (initialisation from the seed, element for element as the
// reference interpreter does it; the planned arenas and the step program's
// context), the training loop (one step, the bytes it sent against the
// program's analytical volume, the expert loads over the whole batch,
// progress and metrics) and the reports at the end (communication, the
// peak memory against the plan). Trainer.h lists the other units.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "Placement.h"

#include "ParamSizes.h"

#include "moert/DeviceCopies.h"
#include "moert/ScratchPool.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <sys/resource.h>
#include <unistd.h>

using namespace moert::trainer;

int moert::trainer::trainRank(const Shared &sh, moert_comm *comm) {
  Trainer trainer(sh, comm);
  return trainer.run();
}

int64_t moert::trainer::numel(const moert_param_info &p) { return moert::paramElements(p); }

int64_t moert::trainer::zeroShard(const moert_param_info &p) { return moert::zeroShardElements(p); }

int64_t moert::trainer::stateBytes(const moert_param_info &p) {
  return 4 * (moert::paramBufferElements(p) + (p.adamw ? 2 * zeroShard(p) : 0));
}

/// The program data replica `replica` runs: its own with unequal token
/// shares, else the binary's.
const moert_program &moert::trainer::programOf(int replica) {
  if (moec_program.replica_programs && replica >= 0)
    return *moec_program.replica_programs[replica];
  return moec_program;
}

/// Sequences of the global batch before replica `replica`'s (`replicas`: all).
int64_t moert::trainer::batchBefore(int replica) {
  int64_t before = 0;
  for (int r = 0; r < replica; ++r)
    before += moec_program.replica_batches ? moec_program.replica_batches[r] : moec_program.batch;
  return before;
}

namespace {

/// The reference interpreter's initialisation, element for element: the
/// full tensors are drawn in order on every rank, and a shard keeps its
/// rows (`rowsOf`), so every grid starts from the same model.
void initialise(std::vector<moert::AlignedFloats> &params, uint64_t seed,
                const std::function<std::vector<int64_t>(int)> &rowsOf,
                const std::function<int64_t(int)> &fullRows) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < moec_program.num_params; ++i) {
    const moert_param_info &p = moec_program.params[i];
    std::normal_distribution<double> normal(0.0, p.scale > 0 ? p.scale : 1.0);
    std::uniform_real_distribution<double> uniform(-p.scale, p.scale);
    size_t n = params[i].size();
    std::vector<int64_t> rows = rowsOf(i);
    size_t rowSize = n / rows.size(), full = static_cast<size_t>(fullRows(i));
    // The full tensor's row -> this block's rows (none: another rank's; an
    // empty position, -1, stays zero).
    std::vector<std::vector<int64_t>> localOf(full);
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j] >= 0)
        localOf[rows[j]].push_back(static_cast<int64_t>(j));
    for (size_t j = 0; j < full * rowSize; ++j) {
      float v;
      switch (p.init) {
      case MOERT_INIT_ZEROS:
        v = 0;
        break;
      case MOERT_INIT_ONES:
        v = 1;
        break;
      case MOERT_INIT_NORMAL:
        v = static_cast<float>(normal(rng));
        break;
      default:
        v = static_cast<float>(uniform(rng));
        break;
      }
      for (int64_t row : localOf[j / rowSize])
        params[i][row * rowSize + j % rowSize] = v;
    }
  }
}

/// One terminal line, redrawn in place.
void drawProgress(long long done, long long total, float loss, double tps, double elapsed) {
  const int width = 28;
  int filled = static_cast<int>(width * done / std::max(1LL, total));
  std::string bar(filled, '#');
  bar.resize(width, '.');
  double eta = done > 0 ? elapsed / done * (total - done) : 0;
  std::printf("\r\033[K[%s] %lld/%lld  loss %.4f  %.0f tok/s  eta %.0fs", bar.c_str(), done, total,
              loss, tps, eta);
  std::fflush(stdout);
}

} // namespace

//===----------------------------------------------------------------------===//
// Set-up
//===----------------------------------------------------------------------===//

Trainer::Trainer(const Shared &sh, moert_comm *comm)
    : sh(sh), o(sh.o),
      prog(programOf(comm ? moert_comm_rank(comm) / std::max(moec_program.grid_tp, 1) : 0)),
      data(sh.data), comm(comm), rank(comm ? moert_comm_rank(comm) : 0),
      ranks(comm ? moert_comm_size(comm) : 1), tp(std::max(prog.grid_tp, 1)),
      ep(std::max(prog.grid_ep, 1)), replica(rank / tp), replicas(ranks / tp),
      epIndex(replica % ep), lead(rank == 0), globalBatch(batchBefore(replicas)),
      sampler(data, 0, sh.split, globalBatch, prog.seq_len, sh.seed),
      valSampler(data, sh.split, data.size(), globalBatch, prog.seq_len, sh.seed + 1) {
  initialiseParameters();
  moert::CodecStates restored; // filled by --resume
  if (o.resume)
    restored = resumeFromCheckpoint();
  bindContext(std::move(restored));
}

Trainer::~Trainer() {
  moert_async_free(&ctx); // finishes what is queued, before the arenas go
  moert_codec_states_free(&ctx);
  if (prog.device_free)
    prog.device_free(&ctx);
}

void Trainer::deviceSync() {
  if (prog.device_sync && prog.device_sync(&ctx))
    die("rank " + std::to_string(rank) + ": the device state could not be read back");
}

void Trainer::deviceWrote() {
  if (prog.device_wrote)
    prog.device_wrote(&ctx);
}

void Trainer::initialiseParameters() {
  params.resize(prog.num_params);
  moments.resize(2 * prog.num_params);
  for (int i = 0; i < prog.num_params; ++i) {
    params[i].resize(numel(prog.params[i]));
    if (prog.params[i].adamw) {
      moments[2 * i].assign(zeroShard(prog.params[i]), 0.0f);
      moments[2 * i + 1].assign(zeroShard(prog.params[i]), 0.0f);
    }
  }
  // Each MoE layer's placement starts as the program's: its weights'
  // shard_rows (pinned, uneven, replicated experts) or expert order.
  expertOrder.resize(std::max(prog.num_moe_layers, 0));
  for (int l = 0; l < prog.num_moe_layers; ++l)
    for (int32_t e = 0; e < prog.layer_experts[l]; ++e)
      expertOrder[l].push_back(e);
  for (int i = 0; i < prog.num_params; ++i) {
    const moert_param_info &p = prog.params[i];
    if (p.shard_layer < 0)
      continue;
    if (p.shard_layer >= prog.num_moe_layers ||
        p.shape[0] * std::max(p.shard_parts, 1) != positionsOf(p.shard_layer) ||
        (!p.shard_rows && positionsOf(p.shard_layer) != prog.layer_experts[p.shard_layer]))
      die(std::string("the step program's placement of '") + p.name + "' does not fit its layer");
    if (p.shard_rows)
      expertOrder[p.shard_layer].assign(p.shard_rows, p.shard_rows + positionsOf(p.shard_layer));
  }
  // Replicas where the program asked for them: replicated experts in its
  // placement, or spare positions beyond those that pad uneven expert
  // counts (moec --redundant-experts). A mixed cluster's uneven counts
  // alone leave the slower ranks empty positions, but a replica costs its
  // rank a position's AdamW update, gradient sum and weight-gradient writes
  // every step, which the token-slots do not show (docs/Partitioning.md).
  replicaRoom.assign(expertOrder.size(), false);
  for (size_t l = 0; l < expertOrder.size(); ++l) {
    const std::vector<int32_t> &order = expertOrder[l];
    if (!prog.layer_replicas || !prog.layer_replicas[l] || ep < 1)
      continue;
    size_t local = order.size() / static_cast<size_t>(ep), most = 0;
    for (int r = 0; r < ep; ++r)
      most = std::max<size_t>(most, std::count_if(order.begin() + r * local,
                                                  order.begin() + (r + 1) * local,
                                                  [](int32_t e) { return e >= 0; }));
    std::vector<int32_t> copies = moert::replicaCounts(order.data(), order.size());
    replicaRoom[l] =
        most < local || std::any_of(copies.begin(), copies.end(), [](int32_t n) { return n > 1; });
  }
  // Tensor-parallel slices start as their whole tensors (the rank's block of
  // them), then keep their tp rank's slice.
  for (int i = 0; i < prog.num_params; ++i)
    if (prog.params[i].tp_dim >= 0)
      params[i].resize(params[i].size() * tp);
  initialise(
      params, sh.seed, [&](int i) { return rowsOf(i, epIndex); },
      [&](int i) { return fullRows(i); });
  for (int i = 0; i < prog.num_params; ++i)
    if (prog.params[i].tp_dim >= 0) {
      moert::AlignedFloats slice(static_cast<size_t>(numel(prog.params[i])));
      sliceTp(params[i].data(), slice, i);
      params[i] = std::move(slice);
    }
  // ZeRO: room for every rank's shard (the tail past the tensor stays 0).
  for (int i = 0; i < prog.num_params; ++i)
    if (prog.params[i].zero_parts > 1)
      params[i].resize(prog.params[i].zero_parts * zeroShard(prog.params[i]), 0.0f);
}

int32_t Trainer::positionsOf(int layer) const {
  return prog.layer_positions ? prog.layer_positions[layer] : prog.layer_experts[layer];
}

int64_t Trainer::fullRows(int i) const {
  const moert_param_info &p = prog.params[i];
  if (p.shard_layer >= 0 && p.shard_layer < prog.num_moe_layers)
    return prog.layer_experts[p.shard_layer];
  return localRows(p) * std::max(p.shard_parts, 1);
}

int64_t Trainer::localRows(const moert_param_info &p) const {
  // A tensor-parallel slice along dimension 0 is a tp-th of the rows.
  return p.rank > 0 ? p.shape[0] * (p.tp_dim == 0 ? tp : 1) : 1;
}

std::vector<int64_t> Trainer::rowsOf(int i, int e) const {
  const moert_param_info &p = prog.params[i];
  int64_t local = localRows(p);
  int parts = std::max(p.shard_parts, 1);
  std::vector<int64_t> rows(static_cast<size_t>(local));
  // Rank e's positions [e local, (e+1) local) in its layer's placement,
  // the program's fixed rows, or the contiguous block.
  const int32_t *table = nullptr;
  if (parts > 1 && p.shard_layer >= 0 && p.shard_layer < static_cast<int>(expertOrder.size()))
    table = expertOrder[p.shard_layer].data();
  else if (parts > 1)
    table = p.shard_rows;
  int64_t first = parts > 1 ? e * local : 0;
  for (int64_t j = 0; j < local; ++j)
    rows[j] = table ? table[first + j] : first + j;
  return rows;
}

int64_t Trainer::replicaSumBytes() const {
  int64_t bytes = 0;
  for (int i = 0; i < prog.num_params; ++i) {
    const moert_param_info &p = prog.params[i];
    int l = p.shard_layer;
    if (l < 0 || !p.adamw || !prog.layer_replicas || !prog.layer_replicas[l])
      continue;
    bytes += moert_replica_sum_bytes(expertOrder[l].data(), positionsOf(l),
                                     static_cast<int64_t>(numel(p) / p.shape[0]), ep);
  }
  return bytes;
}

/// The arenas, the expert counters and the context the step program runs
/// in, with the codec state a checkpoint restored.
void Trainer::bindContext(moert::CodecStates restored) {
  for (auto &p : params)
    paramPtrs.push_back(p.data());
  for (auto &m : moments)
    momentPtrs.push_back(m.empty() ? nullptr : m.data());
  act = moert::AlignedBytes(prog.activation_bytes + 64);
  grad = moert::AlignedBytes(prog.gradient_bytes + 64);
  int totalExperts = 0;
  for (int l = 0; l < prog.num_moe_layers; ++l)
    totalExperts += prog.layer_experts[l];
  expertCounts.assign(totalExperts, 0);
  keptCounts.assign(totalExperts, 0);
  droppedSlots.assign(std::max(prog.num_moe_layers, 1), 0);
  ctx = moert_context{paramPtrs.data(),
                      momentPtrs.data(),
                      act.data(),
                      grad.data(),
                      expertCounts.data(),
                      droppedSlots.data(),
                      keptCounts.data(),
                      comm,
                      rank,
                      prog.grid_dp,
                      prog.grid_ep,
                      prog.grid_tp,
                      nullptr,
                      {0, 0, 0, 0, 0, 0},
                      0};
  for (auto &order : expertOrder)
    orderPtrs.push_back(order.data());
  ctx.expert_order = orderPtrs.empty() ? nullptr : orderPtrs.data();
  // Per-parameter gradient squares for the metrics' grad_norm_groups (every
  // rank: they are summed over the ranks).
  if (!o.metrics.empty()) {
    gradSquares.assign(prog.num_params, 0.0);
    ctx.grad_squares = gradSquares.data();
    routerLosses.assign(2 * std::max(prog.num_moe_layers, 1), 0.0f);
    ctx.router_losses = routerLosses.data();
  }
  if (!restored.empty())
    moert::codecStates(&ctx) = std::move(restored);
  if (o.lossScale > 0 && prog.loss_scale == 0)
    die("--loss-scale: this program does not scale its loss (only f16 models do)");
  if (prog.loss_scale == 0)
    lossScale = 0; // (a checkpoint of an f16 model resumed by another)
  else if (o.lossScale > 0)
    lossScale = static_cast<float>(o.lossScale);
  else if (lossScale == 0) // (else the checkpoint's)
    lossScale = static_cast<float>(prog.loss_scale);
  ctx.loss_scale = lossScale;
  configureEmulation();
}

/// After step `s`: an overflow halves the scale (the step updated nothing),
/// --loss-scale-window steps without one double it (PyTorch's GradScaler).
void Trainer::updateLossScale(long long s, bool overflow) {
  if (lossScale == 0)
    return;
  if (overflow) {
    ++skippedSteps;
    goodSteps = 0;
    lossScale *= 0.5f;
    if (lossScale < 1.0f)
      die("step " + std::to_string(s) +
          ": the gradients are not finite even at loss scale 1 (they overflow f16 unscaled)");
  } else if (++goodSteps >= o.lossScaleWindow) {
    goodSteps = 0;
    lossScale = std::min(lossScale * 2.0f, 1e30f);
  }
  ctx.loss_scale = lossScale;
}

void Trainer::openMetrics() {
  if (o.metrics.empty() || !lead)
    return;
  metrics = std::make_unique<std::ofstream>(o.metrics, std::ios::app);
  if (!*metrics)
    die(o.metrics + ": cannot open the metrics file for writing");
}

void Trainer::checkValidationSplit() {
  std::string error;
  canEval = prog.eval_step && o.valFraction > 0;
  if (canEval && !valSampler.valid(error))
    die(o.data + ": validation split: " + error + " (use more data or a larger --val-fraction)");
}

int Trainer::run() {
  openMetrics();
  checkSampling();
  if (o.data.empty()) {
    // Sampling from the checkpoint only: nothing trains, nothing is saved.
    if (lead)
      std::printf("sampling from %s (step %lld), without training\n", o.checkpoint.c_str(),
                  firstStep);
    sampleText();
    return 0;
  }
  checkValidationSplit();
  checkCheckpointPath();
  checkRebalance();
  checkLocalSteps();
  if (lead)
    std::printf("training: %d parameters tensors, batch %lld x %lld tokens, steps %lld..%lld\n",
                prog.num_params, (long long)globalBatch, (long long)prog.seq_len, firstStep,
                o.steps - 1);
  bar = lead && o.progress && isatty(fileno(stdout));
  writeRunLine();
  startTrace();
  long long reached = trainLoop();
  // Local steps: the replicas agree again before anything reads the model.
  if (o.localSteps > 0 && reached > firstStep && reached % o.localSteps != 0)
    outerStep(reached - 1, true);
  if (reached < o.steps) {
    int signo = stopSignal();
    if (lead)
      std::printf("stopped by %s after step %lld\n", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                  reached);
    if (!o.checkpoint.empty())
      saveCheckpoint(reached);
    else if (lead)
      std::printf("no --checkpoint: nothing saved\n");
    writeTrace();
    return 128 + (signo ? signo : SIGINT);
  }
  reportCommunication();
  if (lead && o.profileKernels)
    reportKernelProfile();
  if (canEval)
    evaluate(o.steps);
  if (o.sample > 0)
    sampleText();
  // Every rank: the metrics line gathers each rank's plan and peak.
  reportMemory();
  if (!o.checkpoint.empty())
    saveCheckpoint(o.steps);
  writeTrace();
  return 0;
}

//===----------------------------------------------------------------------===//
// The training loop
//===----------------------------------------------------------------------===//

long long Trainer::trainLoop() {
  auto runStart = std::chrono::steady_clock::now();
  for (long long s = firstStep; s < o.steps; ++s) {
    ByteCounters before = byteCounters();
    StepResult result = runStep(s);
    StepBytes bytes = accountCommunication(before, s);
    result.groupNorms = gradientGroupNorms(s);
    long long dropped = gatherLoad(s);
    if (lead)
      reportStep(s, result, bytes, dropped, runStart);
    rebalance(s, result.seconds);
    if (canEval && o.evalEvery > 0 && (s + 1) % o.evalEvery == 0 && s + 1 != o.steps)
      evaluate(s + 1);
    if (o.checkpointEvery > 0 && (s + 1) % o.checkpointEvery == 0 && s + 1 != o.steps)
      saveCheckpoint(s + 1);
    if (stopRequested(s) && s + 1 != o.steps) {
      if (bar)
        std::printf("\r\033[K");
      return s + 1;
    }
  }
  if (bar)
    std::printf("\r\033[K");
  return o.steps;
}

bool Trainer::stopRequested(long long s) {
  float stop = stopSignal() ? 1.0f : 0.0f;
  if (ranks > 1 &&
      moert_step_all_reduce(&ctx, &stop, &stop, 1, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 0,
                            1.0) != 0)
    commError("step " + std::to_string(s) + ": agreeing to stop");
  return stop > 0;
}

/// Draws step `s`'s batch and runs the step program's training step.
Trainer::StepResult Trainer::runStep(long long s) {
  sampler.next(tokens, targets);
  float loss = 0;
  ctx.comm_seconds = ctx.async_seconds = ctx.async_wait_seconds = 0;
  auto start = std::chrono::steady_clock::now();
  double stepStart = 0;
  if (ctx.compute_slowdown > 0 || trace)
    ctx.step_mark = stepStart = moert::nowSeconds();
  // Local steps: the dp all-reduces stay in the replica.
  ctx.replica_local = o.localSteps > 0 && s >= o.syncSteps;
  // Delayed gradients after the synchronous start.
  ctx.staleness = s >= o.syncSteps ? o.staleness : 0;
  // --profile-kernels: the lead rank's step kernels from the second step
  // (the first compiles the device's kernels and allocates its arenas).
  const bool profiled = o.profileKernels && lead && s > firstStep;
  int64_t copied[2];
  moert_device_copied(copied); // from the step's start (evaluations run between)
  moert_kernel_profile_enable(profiled);
  int rc = prog.train_step(&ctx, aligned(mine(tokens), inA), aligned(mine(targets), tgA),
                           static_cast<int32_t>(s), &loss);
  moert_kernel_profile_enable(0);
  moert_device_copied(copied);
  if (ctx.step_mark > 0) {
    moert_step_end_compute(&ctx); // the compute after the last collective
    ctx.step_mark = 0;
    if (trace)
      trace->add(moert::TraceLane::Step, "step " + std::to_string(s + 1), stepStart,
                 moert::nowSeconds());
  }
  bool local = ctx.replica_local, delayed = ctx.staleness > 0;
  ctx.replica_local = ctx.staleness = 0; // evaluations are neither
  bool overflow = ctx.skip_update != 0;  // loss scaling: skipped, not diverged
  float scale = lossScale;
  ctx.skip_update = 0;
  bool badNorm = !std::isfinite(ctx.grad_norm) && !overflow; // a replica's own in local steps
  if (local && rc == 0)
    loss = replicaMean(loss, badNorm, s);
  if (delayed && rc == 0 && ranks > 1) {
    // Each rank's corrected gradient is its own: every rank stops if one
    // rank's norm is not finite.
    float bad = badNorm ? 1.0f : 0.0f;
    if (moert_step_all_reduce(&ctx, &bad, &bad, 1, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 0,
                              1.0) != 0)
      commError("step " + std::to_string(s) + ": agreeing on the gradient norm");
    badNorm = bad > 0;
  }
  if (rc == 0)
    outerStep(s, false);
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - start).count();
  double commSeconds = std::min(ctx.comm_seconds, seconds);
  if (profiled) {
    profiledSeconds += seconds;
    ++profiledSteps;
  }
  if (rc != 0)
    commError("step " + std::to_string(s) + " failed in a kernel or collective (code " +
              std::to_string(rc) + ")");
  if (!std::isfinite(loss))
    die("step " + std::to_string(s) + ": the loss is not finite");
  if (badNorm)
    die("step " + std::to_string(s) + ": the gradient norm is not finite");
  updateLossScale(s, overflow);
  long long tokensPerStep = globalBatch * prog.seq_len;
  return {loss,
          ctx.grad_norm,
          ctx.lr,
          nullptr,
          tokensPerStep / seconds,
          now,
          seconds,
          commSeconds,
          ctx.async_seconds,
          ctx.async_wait_seconds,
          {copied[0], copied[1]},
          overflow,
          scale};
}

Trainer::ByteCounters Trainer::byteCounters() const {
  ByteCounters c;
  for (int k = 0; k < 4; ++k)
    c.sent[k] = comm ? moert_comm_bytes(comm, k) : 0;
  std::copy(ctx.codec_sent, ctx.codec_sent + MOERT_NUM_COLLECTIVES, c.codecSent);
  c.codecPlain = ctx.codec_uncompressed;
  return c;
}

/// The bytes this rank sent in step `s` (from the counters `before` it):
/// per collective (Comm.h counters), without what compressed all-reduces
/// sent, which is counted on its own against the codecs' formula. The
/// metrics put them next to the program's analytical volume; the last
/// step's are reported at the end (reportCommunication).
Trainer::StepBytes Trainer::accountCommunication(const ByteCounters &before, long long s) {
  StepBytes b;
  int64_t codecBy[MOERT_NUM_COLLECTIVES];
  b.codecSent = 0;
  for (int k = 0; k < MOERT_NUM_COLLECTIVES; ++k)
    b.codecSent += codecBy[k] = ctx.codec_sent[k] - before.codecSent[k];
  b.codecPlain = ctx.codec_uncompressed - before.codecPlain;
  // All-reduces, all-to-alls, and ZeRO's all-gathers and reduce-scatters
  // (enum moert_collective order), each without what codecs sent.
  for (int k = 0; k < 4; ++k)
    b.sent[k] = comm ? moert_comm_bytes(comm, k) - before.sent[k] - codecBy[k] : 0;
  std::copy(b.sent, b.sent + 4, lastSent);
  // Compressed all-reduces: bytes sent, what uncompressed ones would have
  // sent, and the codecs' formula (nothing compressed in the warm-up).
  b.codecExpected = s < prog.codec_warmup_steps ? 0 : prog.step_codec_bytes;
  if (b.codecSent)
    lastCodec[0] = b.codecSent, lastCodec[1] = b.codecPlain;
  return b;
}

/// The group of a parameter for grad_norm_groups, from the names the
/// frontend gives (l<i>.wq, l<i>.experts.up, tok_emb, ...).
static const char *parameterGroup(const std::string &name) {
  auto has = [&](const char *part) { return name.find(part) != std::string::npos; };
  if (name == "tok_emb" || name == "lm_head")
    return "embedding";
  if (has(".experts."))
    return "experts";
  if (has(".shared."))
    return "shared_experts";
  if (has("router"))
    return "router";
  if (has("norm"))
    return "norms";
  for (const char *w : {".wq", ".wk", ".wv", ".wo"})
    if (name.size() > 3 && name.compare(name.size() - 3, 3, w) == 0)
      return "attention";
  return "dense_ffn";
}

/// The gradient norm of each parameter group in step `s` (before clipping),
/// over the whole model: an expert shard's block counts once per ep rank,
/// a replicated parameter once. Empty without --metrics.
nlohmann::json Trainer::gradientGroupNorms(long long s) {
  if (gradSquares.empty())
    return nullptr;
  int dpIndex = replica / ep;
  std::vector<float> squares(gradSquares.size());
  for (size_t i = 0; i < squares.size(); ++i) {
    // A piece counts on the ranks at coordinate 0 of every axis that does
    // not divide it: ZeRO's group, the expert split (ep), the
    // tensor-parallel slice (tp).
    const moert_param_info &p = prog.params[i];
    int divided = p.zero_parts > 1 ? p.zero_axes : 0;
    if (p.shard_parts > 1)
      divided |= MOERT_AXIS_EP;
    if (p.tp_dim >= 0)
      divided |= MOERT_AXIS_TP;
    bool counts = ((divided & MOERT_AXIS_DP) || dpIndex == 0) &&
                  ((divided & MOERT_AXIS_EP) || epIndex == 0) &&
                  ((divided & MOERT_AXIS_TP) || rank % tp == 0);
    squares[i] = counts ? static_cast<float>(gradSquares[i]) : 0.0f;
  }
  if (ranks > 1 && moert_step_all_reduce(
                       &ctx, squares.data(), squares.data(), static_cast<int64_t>(squares.size()),
                       MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 0, 1.0) != 0)
    commError("step " + std::to_string(s) + ": gradient norms");
  std::map<std::string, double> groups;
  for (size_t i = 0; i < squares.size(); ++i)
    if (prog.params[i].adamw)
      groups[parameterGroup(prog.params[i].name)] += squares[i];
  nlohmann::json out = nlohmann::json::object();
  for (auto &[group, sum] : groups)
    out[group] = std::sqrt(sum);
  return out;
}

/// Token-slots routed past an expert's capacity in step `s`; with several
/// ranks, the load metrics cover the whole batch: every replica's counts
/// (summed into expertCounts) and drops, and the router losses (averaged:
/// each rank's are the means over its share of the routing groups, weighted
/// by that share).
long long Trainer::gatherLoad(long long s) {
  long long dropped = 0;
  for (int32_t n : droppedSlots)
    dropped += n;
  if (ranks > 1) {
    std::vector<float> load(expertCounts.begin(), expertCounts.end());
    load.insert(load.end(), keptCounts.begin(), keptCounts.end());
    for (float l : routerLosses)
      load.push_back(moec_program.replica_batches
                         ? l * static_cast<float>(static_cast<double>(prog.batch) / globalBatch)
                         : l / static_cast<float>(prog.grid_dp * prog.grid_ep));
    load.push_back(static_cast<float>(dropped));
    if (moert_step_all_reduce(&ctx, load.data(), load.data(), static_cast<int64_t>(load.size()),
                              MOERT_AXIS_DP | MOERT_AXIS_EP, 0, 1.0) != 0)
      commError("step " + std::to_string(s) + ": load metrics");
    size_t n = expertCounts.size();
    for (size_t e = 0; e < n; ++e) {
      expertCounts[e] = static_cast<int32_t>(load[e]);
      keptCounts[e] = static_cast<int32_t>(load[n + e]);
    }
    std::copy_n(load.begin() + 2 * n, routerLosses.size(), routerLosses.begin());
    dropped = static_cast<long long>(load.back());
  }
  return dropped;
}

/// Progress (lead rank): the bar on a terminal, a line every 10 steps (100
/// under the bar), and the step's metrics.
void Trainer::reportStep(long long s, const StepResult &r, const StepBytes &b, long long dropped,
                         std::chrono::steady_clock::time_point runStart) {
  if (bar)
    drawProgress(s + 1 - firstStep, o.steps - firstStep, r.loss, r.tokensPerSecond,
                 std::chrono::duration<double>(r.end - runStart).count());
  if (s == firstStep || (s + 1) % 10 == 0 || s + 1 == o.steps) {
    if (bar)
      std::printf("\r\033[K");
    if (!bar || s == firstStep || (s + 1) % 100 == 0 || s + 1 == o.steps)
      std::printf("step %5lld/%lld  loss %.4f  %.0f tok/s  dropped %lld\n", s + 1, o.steps, r.loss,
                  r.tokensPerSecond, dropped);
  }
  if (r.skipped && skippedSteps <= 10) {
    if (bar)
      std::printf("\r\033[K");
    std::printf("step %5lld: gradients overflow f16 at loss scale %g: update skipped, scale %g%s\n",
                s + 1, r.lossScale, lossScale,
                skippedSteps == 10 ? " (further skips: the metrics' loss_scale)" : "");
  }
  // Bytes per collective; ZeRO's reduce-scatters and all-gathers only when
  // the program has them.
  int64_t analytical[4] = {prog.step_comm_bytes[MOERT_ALL_REDUCE] + replicaSumBytes(),
                           prog.step_comm_bytes[MOERT_ALL_TO_ALL],
                           prog.step_comm_bytes[MOERT_ALL_GATHER],
                           prog.step_comm_bytes[MOERT_REDUCE_SCATTER]};
  auto commBytes = [&](const int64_t *bytes) {
    nlohmann::json out = {{"all_reduce", bytes[0]}, {"all_to_all", bytes[1]}};
    if (analytical[2] || analytical[3])
      out["all_gather"] = bytes[2], out["reduce_scatter"] = bytes[3];
    return out;
  };
  if (metrics) {
    nlohmann::json line = {
        {"step", s + 1},
        {"loss", r.loss},
        {"lr", r.lr},
        {"grad_norm", r.gradNorm},
        {"grad_norm_groups", r.groupNorms},
        {"tokens_per_s", r.tokensPerSecond},
        {"step_seconds", r.seconds},
        {"comm_seconds", r.commSeconds},
        {"background_comm_seconds", r.backgroundSeconds},
        {"background_wait_seconds", r.backgroundWaitSeconds},
        {"dropped_tokens", dropped},
        {"comm_bytes", commBytes(b.sent)},
        {"comm_bytes_analytical", commBytes(analytical)},
        {"comm_bytes_ragged_bound", prog.step_ragged_bound},
        {"codec_bytes",
         {{"sent", b.codecSent}, {"uncompressed", b.codecPlain}, {"expected", b.codecExpected}}},
        {"expert_tokens", expertTokens(expertCounts)},
        {"expert_kept_tokens", expertTokens(keptCounts)},
        {"aux_loss", routerLoss(0)},
        {"z_loss", routerLoss(1)},
        {"balancedness", balancedness()},
        {"device_copy_bytes", {{"to_device", r.deviceCopies[0]}, {"to_host", r.deviceCopies[1]}}}};
    if (r.lossScale > 0) { // f16 models
      line["loss_scale"] = r.lossScale;
      line["skipped"] = r.skipped;
    }
    writeMetrics(line);
  }
}

/// What the per-layer arrays of the step lines refer to, and the run's
/// shape: one line at the start of each training run (a resumed run adds
/// its own).
void Trainer::writeRunLine() {
  if (!metrics)
    return;
  nlohmann::json layers = nlohmann::json::array(), experts = nlohmann::json::array();
  for (int l = 0; l < prog.num_moe_layers; ++l) {
    layers.push_back(prog.layer_names && prog.layer_names[l] ? prog.layer_names[l]
                                                             : "moe" + std::to_string(l));
    experts.push_back(prog.layer_experts[l]);
  }
  writeMetrics({{"run",
                 {{"first_step", firstStep + 1},
                  {"steps", o.steps},
                  {"ranks", ranks},
                  {"grid", {{"dp", prog.grid_dp}, {"ep", prog.grid_ep}, {"tp", prog.grid_tp}}},
                  {"global_batch", globalBatch},
                  {"token_shares", tokenShares()},
                  {"seq_len", prog.seq_len},
                  {"moe_layers", layers},
                  {"experts", experts}}}});
}

/// Sequences of the global batch per data replica.
nlohmann::json Trainer::tokenShares() const {
  nlohmann::json shares = nlohmann::json::array();
  for (int r = 0; r < replicas; ++r)
    shares.push_back(batchBefore(r + 1) - batchBefore(r));
  return shares;
}

/// The last step's unweighted balancing (`part` 0) or z-loss (1) per MoE
/// layer.
nlohmann::json Trainer::routerLoss(int part) const {
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < prog.num_moe_layers; ++l)
    layers.push_back(routerLosses[2 * l + part]);
  return layers;
}

/// The last step's token-slots per expert (`expertCounts` or
/// `keptCounts`), one array per MoE layer.
nlohmann::json Trainer::expertTokens(const std::vector<int32_t> &perExpert) const {
  nlohmann::json layers = nlohmann::json::array();
  const int32_t *counts = perExpert.data();
  for (int l = 0; l < prog.num_moe_layers; ++l) {
    layers.push_back(std::vector<int32_t>(counts, counts + prog.layer_experts[l]));
    counts += prog.layer_experts[l];
  }
  return layers;
}

//===----------------------------------------------------------------------===//
// Reports at the end
//===----------------------------------------------------------------------===//

/// The last step's bytes per rank against the program's analytical volume
/// (the ragged all_to_alls against their bound), and the compressed
/// all-reduces' against the codecs' formula.
void Trainer::reportCommunication() const {
  if (lead && ranks > 1 && firstStep < o.steps) {
    if (prog.step_ragged_bound > 0)
      std::printf("communication per step and rank: all_to_all %lld bytes (ragged: at most "
                  "%lld with every expert's capacity full), all_reduce %lld bytes "
                  "(analytical: %lld)\n",
                  (long long)lastSent[1],
                  (long long)(prog.step_ragged_bound + prog.step_comm_bytes[MOERT_ALL_TO_ALL]),
                  (long long)lastSent[0],
                  (long long)(prog.step_comm_bytes[MOERT_ALL_REDUCE] + replicaSumBytes()));
    else
      std::printf("communication per step and rank: all_to_all %lld bytes, all_reduce %lld "
                  "bytes (analytical: %lld, %lld)\n",
                  (long long)lastSent[1], (long long)lastSent[0],
                  (long long)prog.step_comm_bytes[MOERT_ALL_TO_ALL],
                  (long long)(prog.step_comm_bytes[MOERT_ALL_REDUCE] + replicaSumBytes()));
  }
  if (lead && ranks > 1 && firstStep < o.steps &&
      (prog.step_comm_bytes[MOERT_REDUCE_SCATTER] || prog.step_comm_bytes[MOERT_ALL_GATHER]))
    std::printf("ZeRO per step and rank: reduce_scatter %lld bytes, all_gather %lld bytes "
                "(analytical: %lld, %lld)\n",
                (long long)lastSent[MOERT_REDUCE_SCATTER], (long long)lastSent[MOERT_ALL_GATHER],
                (long long)prog.step_comm_bytes[MOERT_REDUCE_SCATTER],
                (long long)prog.step_comm_bytes[MOERT_ALL_GATHER]);
  if (lead && lastCodec[0] > 0) {
    // A codec can send more than it replaces (PowerSGD at a rank near the
    // matrices' sides): then say so.
    bool more = lastCodec[0] > lastCodec[1];
    double ratio = more ? double(lastCodec[0]) / double(std::max<int64_t>(lastCodec[1], 1))
                        : double(lastCodec[1]) / double(lastCodec[0]);
    std::printf("compressed all-reduces: %lld bytes per step and rank instead of %lld "
                "(%.1fx %s; the codecs' formula: %lld)\n",
                (long long)lastCodec[0], (long long)lastCodec[1], ratio, more ? "more" : "less",
                (long long)prog.step_codec_bytes);
  }
}

/// --profile-kernels: the lead rank's training steps' device time per
/// kernel family (the kernels' names without their index), largest first,
/// against the steps' wall time (runStep profiles its step call only, so
/// evaluations are not counted). Ranks sharing one device (thread
/// ranks) wait for each other's kernels too, so there the times are upper
/// bounds.
void Trainer::reportKernelProfile() {
  struct Family {
    std::string name;
    long long calls = 0, kernels = 0;
    double seconds = 0;
  };
  std::vector<Family> families;
  const char *kernel = nullptr;
  int64_t calls = 0;
  double seconds = 0, total = 0;
  for (int i = 0; moert_kernel_profile_row(i, &kernel, &calls, &seconds); ++i) {
    std::string name = kernel;
    size_t cut = name.find_last_not_of("0123456789");
    if (cut != std::string::npos && cut + 1 < name.size() && name[cut] == '_')
      name.resize(cut);
    auto it = std::find_if(families.begin(), families.end(),
                           [&](const Family &f) { return f.name == name; });
    if (it == families.end())
      it = families.insert(families.end(), Family{name});
    it->calls += calls;
    it->kernels += 1;
    it->seconds += seconds;
    total += seconds;
  }
  std::sort(families.begin(), families.end(),
            [](const Family &a, const Family &b) { return a.seconds > b.seconds; });
  long long steps = std::max(profiledSteps, 1LL);
  std::printf(
      "kernel profile: %lld steps after the first, %.2f ms a step in %lld %skernel families "
      "(%.0f%% of the steps' %.2f ms; the rest is host code, copies and "
      "collectives)\n",
      profiledSteps, 1e3 * total / steps, (long long)families.size(),
      prog.device_sync ? "device " : "host ",
      profiledSeconds > 0 ? 100.0 * total / profiledSeconds : 0.0, 1e3 * profiledSeconds / steps);
  std::printf("  %-20s %8s %8s %12s %7s\n", "family", "kernels", "calls", "ms a step", "share");
  nlohmann::json rows = nlohmann::json::array();
  for (const Family &f : families) {
    std::printf("  %-20s %8lld %8lld %12.3f %6.1f%%\n", f.name.c_str(), f.kernels, f.calls / steps,
                1e3 * f.seconds / steps, total > 0 ? 100.0 * f.seconds / total : 0.0);
    rows.push_back(
        {{"family", f.name}, {"kernels", f.kernels}, {"calls", f.calls}, {"seconds", f.seconds}});
  }
  if (metrics)
    writeMetrics(
        {{"kernel_profile", rows}, {"steps", profiledSteps}, {"step_seconds", profiledSeconds}});
}

/// The peak resident set against the plan's prediction. The plan covers
/// every tensor buffer and bounds the kernels' scratch; the corpus (as
/// stored) is added to it, and the process's resident size before main
/// (code, shared libraries) is the baseline. With several ranks every rank
/// takes part: the lead's metrics line carries each rank's planned bytes and
/// peak resident memory (ranks as threads share one process, whose peak each
/// of them reports; the printed comparison is for one rank per process).
void Trainer::reportMemory() {
  long long planned = prog.activation_bytes + prog.gradient_bytes;
  for (int i = 0; i < prog.num_params; ++i)
    planned += stateBytes(prog.params[i]);
  long long scratch = moert_scratch_peak();
  long long dataBytes = static_cast<long long>(data.bytes());
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  long long peak = static_cast<long long>(usage.ru_maxrss) * 1024;
  long long grown = peak - sh.startResident;
  long long predicted = planned + prog.planned_scratch_bytes + dataBytes;
  if (sh.processPerRank)
    std::printf("%smemory: peak resident %.1f MB = %.1f MB at start (code, libraries) + "
                "%.1f MB (%+.0f%% of the %.1f MB predicted: %.1f MB planned buffers, "
                "%.1f MB kernel scratch bound, %.1f MB data); kernel scratch peak "
                "%.1f MB\n",
                ranks > 1 ? ("rank " + std::to_string(rank) + " ").c_str() : "", peak / 1e6,
                sh.startResident / 1e6, grown / 1e6,
                predicted ? 100.0 * (grown - predicted) / predicted : 0.0, predicted / 1e6,
                planned / 1e6, prog.planned_scratch_bytes / 1e6, dataBytes / 1e6, scratch / 1e6);
  // Each rank's plan and peak, in rank order.
  std::vector<int64_t> mine = {planned, peak}, all(2 * static_cast<size_t>(ranks));
  if (ranks > 1) {
    std::vector<int32_t> everyone(ranks);
    int size =
        moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, everyone.data());
    if (moert_all_gather(comm, mine.data(), static_cast<int64_t>(mine.size() * sizeof(int64_t)),
                         all.data(), everyone.data(), size) != 0)
      commError("gathering the ranks' memory");
  } else {
    all = mine;
  }
  if (lead && !sh.processPerRank) {
    long long most = 0;
    for (int r = 0; r < ranks; ++r)
      most = std::max<long long>(most, all[2 * r]);
    std::printf("memory: peak resident %.1f MB for the process's %d thread ranks = %.1f MB at "
                "start + %.1f MB; planned buffers per rank up to %.1f MB\n",
                peak / 1e6, ranks, sh.startResident / 1e6, grown / 1e6, most / 1e6);
  }
  if (metrics && lead) { // a rank's own metrics file is the lead's
    nlohmann::json line = {{"peak_rss_bytes", peak},
                           {"start_rss_bytes", sh.startResident},
                           {"planned_bytes", planned},
                           {"planned_scratch_bytes", prog.planned_scratch_bytes},
                           {"data_bytes", dataBytes},
                           {"kernel_scratch_bytes", scratch}};
    if (ranks > 1) {
      std::vector<int64_t> plans, peaks;
      for (int r = 0; r < ranks; ++r) {
        plans.push_back(all[2 * r]);
        peaks.push_back(all[2 * r + 1]);
      }
      line["rank_planned_bytes"] = plans;
      line["rank_peak_rss_bytes"] = peaks;
      line["rank_processes"] = sh.processPerRank;
    }
    writeMetrics(line);
  }
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

void Trainer::commError(const std::string &what) const {
  die(what + (comm ? std::string(": ") + moert_comm_error(comm) : std::string()));
}

std::vector<int32_t> Trainer::mine(const std::vector<int32_t> &global) const {
  int64_t rows = prog.batch * prog.seq_len, first = batchBefore(replica) * prog.seq_len;
  return std::vector<int32_t>(global.begin() + first, global.begin() + first + rows);
}

const int32_t *Trainer::aligned(const std::vector<int32_t> &v, moert::AlignedInts &out) {
  out.assign(v.begin(), v.end());
  return static_cast<const int32_t *>(out.data());
}

void Trainer::writeMetrics(const nlohmann::json &line) {
  *metrics << line.dump() << "\n" << std::flush;
}
