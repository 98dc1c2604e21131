//===- CostModel.h - step time and memory of a partitioned step -*- C++ -*-===//
//
// The analytical model `moe-plan-sharding` ranks plans with (formulas and
// their sources in docs/CostModel.md):
//   - compute: per op, roofline max(FLOPs / peak, bytes / memory bandwidth)
//     on the device kind that runs it;
//   - collectives: alpha-beta per link, hierarchical (a group within one
//     node uses the node's link; one spanning nodes is bounded by the
//     inter-node link), ring all-reduce and pairwise all-to-all;
//   - memory per device: parameters, gradients and AdamW moments (replicated
//     or expert-sharded) plus the rank's share of activations.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_COSTMODEL_H
#define MOE_TRANSFORMS_COSTMODEL_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"

#include <string>
#include <vector>

namespace mlir::moe::cost {

struct Link {
  double bandwidth = 0; ///< bytes/s per device and direction
  double latency = 0;   ///< seconds per message
  std::string topology;
};

struct DeviceKind {
  std::string name;
  double flopsF32 = 0, memoryBandwidth = 0, memoryBytes = 0;
  /// The peak the cost model computes with: the one of the cluster's
  /// precision (flopsF32 where the kind gives none for it).
  double flops = 0;
};

/// The devices of a cluster in rank order: nodes in file order, devices of
/// a node consecutive (ranks of one node share its intra-node link).
struct Cluster {
  std::string name;
  std::vector<DeviceKind> kinds;
  std::vector<unsigned> rankKind; ///< rank -> index into kinds
  std::vector<unsigned> rankNode; ///< rank -> node
  std::vector<Link> nodeLink;     ///< node -> intra-node link
  /// node -> cores of the host its ranks share (`host_cores`; 0: each rank
  /// is a device of its own).
  std::vector<int64_t> nodeCores;
  std::vector<int64_t> nodeRanks; ///< node -> ranks on it
  Link interNode;
  /// The element type the step computes in ("f32", "bf16", "f16"): it
  /// chooses each kind's peak (DeviceKind::flops).
  std::string precision = "f32";

  int64_t numRanks() const { return static_cast<int64_t>(rankKind.size()); }
  /// Ranks sharing `rank`'s host and its kind's compute and memory (1 for a
  /// dedicated device).
  int64_t sharing(int64_t rank) const {
    unsigned node = rankNode[rank];
    return node < nodeCores.size() && nodeCores[node] ? nodeRanks[node] : 1;
  }
  const DeviceKind &kindOf(int64_t rank) const { return kinds[rankKind[rank]]; }

  /// Reads a `moe.cluster` dictionary (docs/ClusterJSON.md) for a step
  /// computing in `precision` (f32, bf16 or f16: the peaks the kinds give
  /// for it); errors go to `emitError` and return failure.
  static FailureOr<Cluster> fromAttr(DictionaryAttr attr,
                                     function_ref<InFlightDiagnostic()> emitError,
                                     StringRef precision = "f32");
};

/// Work of one op of the unpartitioned step.
struct OpCost {
  double flops = 0, bytes = 0;
  bool expert = false; ///< runs on the expert-parallel side (grouped FFN)
};

/// FLOPs (matmul-like work, 2 per multiply-add) and bytes moved (operands +
/// results) of `op`; elementwise and data-movement ops are bytes only.
OpCost costOf(Operation *op);

/// The precision a module's step computes in: "bf16" or "f16" when its
/// parameters are, else "f32".
std::string precisionOf(ModuleOp module);

/// Roofline time of `c` on `kind` (at the cluster's precision's peak).
double computeTime(const OpCost &c, const DeviceKind &kind);

/// A communicator group: the ranks taking part.
using Group = std::vector<int64_t>;

/// Ring all-reduce of `bytes` per rank: 2 (p-1)/p bytes over the group's
/// slowest link plus 2 (p-1) latencies. On a shared host (ranks as threads
/// of one machine, `host_cores`) the runtime's rendezvous algorithm instead:
/// every member reads all p buffers, so the s ranks of the host move
/// s p bytes through its memory, plus one rendezvous of p members costing
/// p latencies, times s / cores when the ranks oversubscribe the cores.
double allReduceTime(const Cluster &cluster, const Group &group, double bytes);

/// Pairwise all-to-all where each rank sends `bytes` in total, evenly to
/// the other p-1 ranks: (p-1)/p of it leaves the rank; the part that leaves
/// the node goes over the inter-node link. On a shared host: the s ranks'
/// (p-1)/p bytes each through the host's memory plus the rendezvous.
double allToAllTime(const Cluster &cluster, const Group &group, double bytes);

/// The ranks of the group over grid `axes` ("dp", "ep", "tp") that holds
/// rank 0, in the grid's rank order r = (d * ep + e) * tp + t.
Group gridGroup(int64_t dp, int64_t ep, int64_t tp, ArrayRef<StringRef> axes);

/// Time of `passes` codec kernels over `elems` f32 values that each read or
/// write the f32 data and its `encodedBytes` encoding once (memory bound),
/// plus a launch overhead per pass: an encode and a decode for an
/// all-to-all payload, two of each for an all-reduce (partial sums are
/// re-encoded).
double codecTime(const DeviceKind &kind, double elems, double encodedBytes, int passes);

/// Seconds one codec kernel launch costs on top of its memory traffic.
inline constexpr double kCodecLaunch = 5e-6;

} // namespace mlir::moe::cost

#endif // MOE_TRANSFORMS_COSTMODEL_H
