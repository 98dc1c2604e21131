//===- Rank.cpp - a rank's set-up and the helpers components share -------===//
//
// Set-up: grid coordinates, initialisation from the seed (element for
// element as the reference interpreter does it), the placement, the planned
// arenas and the step program's context; and the helpers of Rank.h.
//
//===----------------------------------------------------------------------===//

#include "Rank.h"
#include "Shards.h"

#include "../ParamSizes.h"
#include "../Placement.h"

#include <algorithm>
#include <functional>
#include <random>

using namespace moert::trainer;

int64_t moert::trainer::numel(const moert_param_info &p) { return moert::paramElements(p); }

int64_t moert::trainer::zeroShard(const moert_param_info &p) { return moert::zeroShardElements(p); }

int64_t moert::trainer::stateBytes(const moert_param_info &p) {
  return 4 * (moert::paramBufferElements(p) + (p.adamw ? 2 * zeroShard(p) : 0));
}

/// The program data replica `replica` of `binary` runs: its own with
/// unequal token shares, else the binary's.
static const moert_program &replicaProgram(const moert_program &binary, int replica) {
  if (binary.replica_programs && replica >= 0)
    return *binary.replica_programs[replica];
  return binary;
}

/// The program data replica `replica` runs: its own with unequal token
/// shares, else the binary's.
const moert_program &moert::trainer::programOf(int replica) {
  return replicaProgram(moec_program, replica);
}

/// Sequences of the global batch before replica `replica`'s (`replicas`: all).
int64_t moert::trainer::batchBefore(int replica) {
  int64_t before = 0;
  for (int r = 0; r < replica; ++r)
    before += moec_program.replica_batches ? moec_program.replica_batches[r] : moec_program.batch;
  return before;
}

int64_t Rank::sequencesBefore(int replica) const {
  int64_t before = 0;
  for (int r = 0; r < replica; ++r)
    before += binary.replica_batches ? binary.replica_batches[r] : binary.batch;
  return before;
}

namespace {

/// The reference interpreter's initialisation, element for element: the
/// full tensors are drawn in order on every rank, and a shard keeps its
/// rows (`rowsOf`), so every grid starts from the same model.
void initialise(const moert_program &binary, std::vector<moert::AlignedFloats> &params,
                uint64_t seed, const std::function<std::vector<int64_t>(int)> &rowsOf,
                const std::function<int64_t(int)> &fullRows) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < binary.num_params; ++i) {
    const moert_param_info &p = binary.params[i];
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

} // namespace

Rank::Rank(const Shared &sh, moert_comm *comm, const moert_program &binary)
    : sh(sh), o(sh.o), binary(binary),
      prog(replicaProgram(binary, comm ? moert_comm_rank(comm) / std::max(binary.grid_tp, 1) : 0)),
      data(sh.data), comm(comm), rank(comm ? moert_comm_rank(comm) : 0),
      ranks(comm ? moert_comm_size(comm) : 1), tp(std::max(prog.grid_tp, 1)),
      ep(std::max(prog.grid_ep, 1)), replica(rank / tp), replicas(ranks / tp),
      epIndex(replica % ep), lead(rank == 0), globalBatch(sequencesBefore(replicas)),
      sampler(data, 0, sh.split, globalBatch, prog.seq_len, sh.seed) {}

Rank::~Rank() {
  moert_async_free(&ctx); // finishes what is queued, before the arenas go
  moert_codec_states_free(&ctx);
  moert_micro_batches_free(&ctx);
  if (prog.device_free)
    prog.device_free(&ctx);
}

void Rank::deviceSync() {
  if (prog.device_sync && prog.device_sync(&ctx))
    die("rank " + std::to_string(rank) + ": the device state could not be read back");
}

void Rank::deviceWrote() {
  if (prog.device_wrote)
    prog.device_wrote(&ctx);
}

void Rank::initialiseParameters() {
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
      binary, params, sh.seed, [&](int i) { return rowsOf(i, epIndex); },
      [&](int i) { return fullRows(i); });
  for (int i = 0; i < prog.num_params; ++i)
    if (prog.params[i].tp_dim >= 0) {
      moert::AlignedFloats slice(static_cast<size_t>(numel(prog.params[i])));
      sliceTp(*this, params[i].data(), slice, i);
      params[i] = std::move(slice);
    }
  // ZeRO: room for every rank's shard (the tail past the tensor stays 0).
  for (int i = 0; i < prog.num_params; ++i)
    if (prog.params[i].zero_parts > 1)
      params[i].resize(prog.params[i].zero_parts * zeroShard(prog.params[i]), 0.0f);
}

int32_t Rank::positionsOf(int layer) const {
  return prog.layer_positions ? prog.layer_positions[layer] : prog.layer_experts[layer];
}

int64_t Rank::fullRows(int i) const {
  const moert_param_info &p = prog.params[i];
  if (p.shard_layer >= 0 && p.shard_layer < prog.num_moe_layers)
    return prog.layer_experts[p.shard_layer];
  return localRows(p) * std::max(p.shard_parts, 1);
}

int64_t Rank::localRows(const moert_param_info &p) const {
  // A tensor-parallel slice along dimension 0 is a tp-th of the rows.
  return p.rank > 0 ? p.shape[0] * (p.tp_dim == 0 ? tp : 1) : 1;
}

std::vector<int64_t> Rank::rowsOf(int i, int e) const {
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

int64_t Rank::replicaSumBytes() const {
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

void Rank::bindContext() {
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
  ctx = moert_context{};
  ctx.run.params = paramPtrs.data();
  ctx.run.moments = momentPtrs.data();
  ctx.run.activations = act.data();
  ctx.run.gradients = grad.data();
  ctx.run.comm = comm;
  ctx.run.rank = rank;
  ctx.run.dp = prog.grid_dp;
  ctx.run.ep = prog.grid_ep;
  ctx.run.tp = prog.grid_tp;
  ctx.buffers.expert_counts = expertCounts.data();
  ctx.buffers.dropped_slots = droppedSlots.data();
  ctx.buffers.kept_slots = keptCounts.data();
  for (auto &order : expertOrder)
    orderPtrs.push_back(order.data());
  ctx.run.expert_order = orderPtrs.empty() ? nullptr : orderPtrs.data();
  // Per-parameter gradient squares for the metrics' grad_norm_groups (every
  // rank: they are summed over the ranks).
  if (!o.metrics.empty()) {
    gradSquares.assign(prog.num_params, 0.0);
    ctx.buffers.grad_squares = gradSquares.data();
    routerLosses.assign(2 * std::max(prog.num_moe_layers, 1), 0.0f);
    ctx.buffers.router_losses = routerLosses.data();
  }
  if (!restoredCodecs.empty())
    moert::codecStates(&ctx) = std::move(restoredCodecs);
}

void Rank::startBackground() {
  // The ep ranks' speeds, read by the step (replicated experts' slots split
  // by them) and by the rebalancer.
  epSpeedTable = epSpeeds();
  ctx.run.ep_speeds = epSpeedTable.data();
  ctx.run.async_yield = o.commPriority;
  // The background channel now, not inside the first step (under MPI its
  // communicator is a collective over every rank).
  if (comm && prog.async_buckets > 0)
    moert_async_init(&ctx);
}

void Rank::openMetrics() {
  if (o.metrics.empty() || !lead)
    return;
  metrics = std::make_unique<std::ofstream>(o.metrics, std::ios::app);
  if (!*metrics)
    die(o.metrics + ": cannot open the metrics file for writing");
}

double Rank::deviceSpeed(int r) const {
  if (o.rankSpeeds.empty())
    return 1.0;
  return o.rankSpeeds.size() == 1 ? o.rankSpeeds[0] : o.rankSpeeds[r];
}

/// The device speed of each ep rank of this rank's dp group (its slowest tp
/// rank's): --emulate-cluster's, else, on a mixed cluster's binary (unequal
/// token shares), its data replica's share over the largest, as the planner
/// gives each replica sequences in proportion to its devices' speed; else 1.
std::vector<double> Rank::epSpeeds() const {
  std::vector<double> speeds(ep, 1.0);
  int d = replica / ep;
  if (o.rankSpeeds.empty() && binary.replica_batches) {
    int64_t most = 1;
    for (int r = 0; r < replicas; ++r)
      most = std::max(most, binary.replica_batches[r]);
    for (int e = 0; e < ep; ++e)
      speeds[e] = static_cast<double>(std::max<int64_t>(binary.replica_batches[d * ep + e], 1)) /
                  static_cast<double>(most);
    return speeds;
  }
  for (int e = 0; e < ep; ++e)
    for (int t = 0; t < tp; ++t)
      speeds[e] = std::min(speeds[e], deviceSpeed((d * ep + e) * tp + t));
  return speeds;
}

void Rank::commError(const std::string &what) const {
  die(what + (comm ? std::string(": ") + moert_comm_error(comm) : std::string()));
}

std::vector<int32_t> Rank::mine(const std::vector<int32_t> &global) const {
  int64_t rows = prog.batch * prog.seq_len, first = sequencesBefore(replica) * prog.seq_len;
  return std::vector<int32_t>(global.begin() + first, global.begin() + first + rows);
}

const int32_t *Rank::aligned(const std::vector<int32_t> &v, moert::AlignedInts &out) {
  out.assign(v.begin(), v.end());
  return static_cast<const int32_t *>(out.data());
}

void Rank::writeMetrics(const nlohmann::json &line) {
  *metrics << line.dump() << "\n" << std::flush;
}
