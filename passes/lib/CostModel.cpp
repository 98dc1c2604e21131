//===- CostModel.cpp - step time and memory of a partitioned step ---------===//

#include "moe/Transforms/CostModel.h"
#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::moe::cost;

namespace {

double number(DictionaryAttr d, StringRef key) {
  if (!d)
    return 0;
  if (auto f = d.getAs<FloatAttr>(key))
    return f.getValueAsDouble();
  if (auto i = d.getAs<IntegerAttr>(key))
    return static_cast<double>(i.getInt());
  return 0;
}

Link linkOf(DictionaryAttr d) {
  Link l;
  l.bandwidth = number(d, "bandwidth");
  l.latency = number(d, "latency");
  if (d)
    if (auto t = d.getAs<StringAttr>("topology"))
      l.topology = t.str();
  return l;
}

double bytesOf(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return 0;
  unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  return static_cast<double>(t.getNumElements()) * std::max(1u, bits / 8);
}

double numel(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? static_cast<double>(t.getNumElements()) : 0;
}

int64_t lastDim(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getRank() ? t.getShape().back() : 1;
}

/// Nodes of `group` with how many of its ranks each holds.
std::map<unsigned, int64_t> nodesOf(const Cluster &c, const Group &group) {
  std::map<unsigned, int64_t> nodes;
  for (int64_t r : group)
    ++nodes[c.rankNode[r]];
  return nodes;
}

/// A collective of `p` members all on one shared host, each member moving
/// `perMember` bytes through the host's memory while every rank of the host
/// does the same in its own group; -1 when the group is not on one shared
/// host.
double sharedHostTime(const Cluster &c, const std::map<unsigned, int64_t> &nodes, int64_t p,
                      double perMember) {
  if (nodes.size() != 1)
    return -1;
  unsigned node = nodes.begin()->first;
  if (node >= c.nodeCores.size() || c.nodeCores[node] <= 0)
    return -1;
  int64_t cores = c.nodeCores[node];
  const Link &l = c.nodeLink[node];
  double s = static_cast<double>(c.nodeRanks[node]);
  double oversubscribed = std::max(1.0, s / static_cast<double>(cores));
  return s * perMember / l.bandwidth + static_cast<double>(p) * l.latency * oversubscribed;
}

} // namespace

FailureOr<Cluster> Cluster::fromAttr(DictionaryAttr attr,
                                     function_ref<InFlightDiagnostic()> emitError,
                                     StringRef precision) {
  Cluster c;
  c.precision = precision.str();
  if (auto n = attr.getAs<StringAttr>("name"))
    c.name = n.str();
  auto kinds = attr.getAs<DictionaryAttr>("device_kinds");
  auto nodes = attr.getAs<ArrayAttr>("nodes");
  if (!kinds || !nodes)
    return emitError() << "moe.cluster needs device_kinds and nodes";
  std::map<std::string, unsigned> kindIndex;
  for (NamedAttribute k : kinds) {
    auto d = dyn_cast<DictionaryAttr>(k.getValue());
    DeviceKind kind{k.getName().str(), number(d, "peak_flops_f32"), number(d, "memory_bandwidth"),
                    number(d, "memory_bytes")};
    if (kind.flopsF32 <= 0 || kind.memoryBandwidth <= 0 || kind.memoryBytes <= 0)
      return emitError() << "moe.cluster device kind '" << kind.name
                         << "' needs positive peak_flops_f32, "
                            "memory_bandwidth and memory_bytes";
    kind.flops = precision == "f32" ? 0 : number(d, ("peak_flops_" + precision).str());
    if (!(kind.flops > 0))
      kind.flops = kind.flopsF32;
    kindIndex[kind.name] = c.kinds.size();
    c.kinds.push_back(kind);
  }
  c.interNode = linkOf(attr.getAs<DictionaryAttr>("inter_node_link"));
  unsigned node = 0;
  for (Attribute a : nodes) {
    auto d = dyn_cast<DictionaryAttr>(a);
    auto device = d ? d.getAs<StringAttr>("device") : StringAttr();
    if (!device || !kindIndex.count(device.str()))
      return emitError() << "moe.cluster node entry names no known device kind";
    int64_t count = static_cast<int64_t>(number(d, "count"));
    int64_t perNode = static_cast<int64_t>(number(d, "devices_per_node"));
    if (count < 1 || perNode < 1)
      return emitError() << "moe.cluster node entry needs count and "
                            "devices_per_node >= 1";
    Link intra = linkOf(d.getAs<DictionaryAttr>("intra_node_link"));
    int64_t cores = static_cast<int64_t>(number(d, "host_cores"));
    for (int64_t n = 0; n < count; ++n, ++node) {
      c.nodeLink.push_back(intra);
      c.nodeCores.push_back(std::max<int64_t>(cores, 0));
      c.nodeRanks.push_back(perNode);
      for (int64_t i = 0; i < perNode; ++i) {
        c.rankKind.push_back(kindIndex[device.str()]);
        c.rankNode.push_back(node);
      }
    }
  }
  for (const Link &l : c.nodeLink)
    if (l.bandwidth <= 0)
      return emitError() << "moe.cluster intra-node links need a positive bandwidth";
  if (node > 1 && c.interNode.bandwidth <= 0)
    return emitError() << "moe.cluster with several nodes needs an "
                          "inter_node_link with a positive bandwidth";
  return c;
}

std::string mlir::moe::cost::precisionOf(ModuleOp module) {
  // A mixed-precision step computes in the type of its weight copies
  // (moe.cast of the f32 parameters); a hand-written module may hold its
  // parameters in that type.
  std::string precision = "f32";
  auto of = [&](Type t) {
    if (t.isBF16())
      precision = "bf16";
    else if (t.isF16())
      precision = "f16";
  };
  module.walk([&](CastOp c) {
    of(cast<RankedTensorType>(c.getType()).getElementType());
    return precision == "f32" ? WalkResult::advance() : WalkResult::interrupt();
  });
  for (ParamOp p : module.getOps<ParamOp>())
    if (precision == "f32")
      of(p.getTensorType().getElementType());
  return precision;
}

OpCost mlir::moe::cost::costOf(Operation *op) {
  OpCost c;
  for (Value v : op->getOperands())
    c.bytes += bytesOf(v.getType());
  for (Value v : op->getResults())
    c.bytes += bytesOf(v.getType());
  StringRef name = op->getName().getStringRef();
  if (!name.consume_front("moe."))
    return c;
  bool grad = name.consume_back("_grad");
  double scale = grad ? 2.0 : 1.0; // backward: two GEMMs per forward GEMM
  auto in = [&](unsigned i) { return op->getOperand(i).getType(); };
  if (name == "linear") {
    c.flops = 2 * numel(in(0)) * lastDim(in(1)) * scale;
  } else if (name == "attention") {
    // q: [B, S, H*dh]; scores and probabilities x V over the full square.
    auto q = cast<RankedTensorType>(in(0));
    double s = q.getRank() >= 2 ? q.getShape()[q.getRank() - 2] : 1;
    // Backward: recompute probabilities, then dP, dQ, dK, dV: 3x.
    c.flops = 4 * numel(q) * s * (grad ? 3.0 : 1.0);
  } else if (name == "latent_attention") {
    // Scores over q's width, probabilities x V over v's: the full square.
    auto q = cast<RankedTensorType>(in(0));
    double s = q.getShape()[1];
    c.flops = 2 * (numel(q) + numel(in(3))) * s * (grad ? 3.0 : 1.0);
  } else if (name == "ffn" || name == "expert_ffn") {
    // Gated (a gate weight operand): three GEMMs, else two. (An expert
    // FFN's routed-row counts are its one integer operand.)
    unsigned floats = llvm::count_if(op->getOperandTypes(), [](Type t) {
      return isa<FloatType>(cast<RankedTensorType>(t).getElementType());
    });
    bool gated = floats == (grad ? 5u : 4u);
    double rows = numel(in(0)) / lastDim(in(0));
    c.flops = 2 * rows * lastDim(in(0)) * lastDim(in(1)) * (gated ? 3 : 2) * scale;
    c.expert = name == "expert_ffn";
  } else if (name == "router" || name == "fused_gate") {
    c.flops = 2 * numel(in(0)) * lastDim(in(1)) * scale;
  } else if (name == "permute" || name == "unpermute" || name == "dispatch" || name == "combine") {
    c.expert = true;
  }
  return c;
}

double mlir::moe::cost::computeTime(const OpCost &c, const DeviceKind &kind) {
  double peak = kind.flops > 0 ? kind.flops : kind.flopsF32;
  return std::max(c.flops / peak, c.bytes / kind.memoryBandwidth);
}

double mlir::moe::cost::allReduceTime(const Cluster &cluster, const Group &group, double bytes) {
  int64_t p = static_cast<int64_t>(group.size());
  if (p <= 1 || bytes <= 0)
    return 0;
  auto nodes = nodesOf(cluster, group);
  if (double t = sharedHostTime(cluster, nodes, p, bytes * static_cast<double>(p)); t >= 0)
    return t;
  double intraBw = 0, intraLat = 0;
  int64_t local = 0;
  for (auto [node, count] : nodes) {
    const Link &l = cluster.nodeLink[node];
    intraBw = intraBw == 0 ? l.bandwidth : std::min(intraBw, l.bandwidth);
    intraLat = std::max(intraLat, l.latency);
    local = std::max(local, count);
  }
  // The faster of a ring (2 (n-1)/n of the bytes, 2 (n-1) latencies) and
  // a pipelined double binary tree (2x the bytes, 2 log2 n latencies), as
  // NCCL chooses between them by message size.
  auto ring = [](double n, double b, double bw, double lat) {
    if (n <= 1)
      return 0.0;
    double ringTime = 2 * (n - 1) / n * b / bw + 2 * (n - 1) * lat;
    double treeTime = 2 * b / bw + 2 * std::ceil(std::log2(n)) * lat;
    return std::min(ringTime, treeTime);
  };
  if (nodes.size() == 1)
    return ring(static_cast<double>(p), bytes, intraBw, intraLat);
  // Hierarchical: reduce-scatter and all-gather within each node, and a
  // ring all-reduce of each 1/local shard across nodes (every device of a
  // node drives its own share over the network).
  double n = static_cast<double>(nodes.size());
  return ring(static_cast<double>(local), bytes, intraBw, intraLat) +
         ring(n, bytes / static_cast<double>(local), cluster.interNode.bandwidth,
              cluster.interNode.latency);
}

double mlir::moe::cost::allToAllTime(const Cluster &cluster, const Group &group, double bytes) {
  int64_t p = static_cast<int64_t>(group.size());
  if (p <= 1 || bytes <= 0)
    return 0;
  auto nodes = nodesOf(cluster, group);
  if (double t = sharedHostTime(cluster, nodes, p,
                                bytes * static_cast<double>(p - 1) / static_cast<double>(p));
      t >= 0)
    return t;
  double worst = 0;
  double perPeer = bytes / static_cast<double>(p);
  for (auto [node, local] : nodes) {
    const Link &l = cluster.nodeLink[node];
    double intraPeers = static_cast<double>(local - 1);
    double interPeers = static_cast<double>(p - local);
    // A full mesh has one link per pair: peers are served concurrently.
    double intra = l.topology == "full-mesh" ? (intraPeers > 0 ? perPeer / l.bandwidth : 0)
                                             : intraPeers * perPeer / l.bandwidth;
    double inter = interPeers > 0 ? interPeers * perPeer / cluster.interNode.bandwidth : 0;
    double latency = intraPeers * l.latency + interPeers * cluster.interNode.latency;
    worst = std::max(worst, std::max(intra, inter) + latency);
  }
  return worst;
}

mlir::moe::cost::Group mlir::moe::cost::gridGroup(int64_t dp, int64_t ep, int64_t tp,
                                                  ArrayRef<StringRef> axes) {
  auto in = [&](StringRef a) { return llvm::is_contained(axes, a); };
  Group group;
  for (int64_t d = 0; d < (in("dp") ? dp : 1); ++d)
    for (int64_t e = 0; e < (in("ep") ? ep : 1); ++e)
      for (int64_t t = 0; t < (in("tp") ? tp : 1); ++t)
        group.push_back((d * ep + e) * tp + t);
  llvm::sort(group);
  return group;
}

double mlir::moe::cost::codecTime(const DeviceKind &kind, double elems, double encodedBytes,
                                  int passes) {
  return passes * ((4 * elems + encodedBytes) / kind.memoryBandwidth + kCodecLaunch);
}
