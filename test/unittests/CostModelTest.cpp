//===- CostModelTest.cpp - the planner's cost model formulas ---------------===//
//
// The alpha-beta collective formulas and op costs of CostModel.h, checked
// against hand-computed values (docs/CostModel.md).
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/CostModel.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir::moe::cost;

namespace {

/// `nodes` nodes of `perNode` devices; intra-node links of `intraBw` B/s and
/// 1 us, inter-node 10 GB/s and 5 us.
Cluster makeCluster(int nodes, int perNode, double intraBw,
                    const std::string &topology = "switch") {
  Cluster c;
  c.kinds.push_back({"dev", 1e12, 1e11, 8e10});
  for (int n = 0; n < nodes; ++n) {
    c.nodeLink.push_back({intraBw, 1e-6, topology});
    for (int i = 0; i < perNode; ++i) {
      c.rankKind.push_back(0);
      c.rankNode.push_back(n);
    }
  }
  c.interNode = {1e10, 5e-6, "fat-tree"};
  return c;
}

TEST(CostModelTest, RingAllReduceWithinANode) {
  Cluster c = makeCluster(1, 4, 1e11);
  // 2 (p-1)/p bytes / bw + 2 (p-1) latency.
  EXPECT_DOUBLE_EQ(allReduceTime(c, {0, 1, 2, 3}, 1e8), 1.5 * 1e8 / 1e11 + 6e-6);
  EXPECT_EQ(allReduceTime(c, {2}, 1e8), 0.0);
}

TEST(CostModelTest, HierarchicalAllReduceAcrossNodes) {
  Cluster c = makeCluster(2, 4, 1e11);
  // Within each node (4 ranks), then across the 2 nodes on 1/4 shards.
  double intra = 1.5 * 1e8 / 1e11 + 6e-6;
  double inter = 2 * 0.5 * (1e8 / 4) / 1e10 + 2 * 5e-6;
  EXPECT_DOUBLE_EQ(allReduceTime(c, {0, 1, 2, 3, 4, 5, 6, 7}, 1e8), intra + inter);
}

TEST(CostModelTest, SharedHostRendezvous) {
  // 8 thread ranks on a 2-core host: every member of an all-reduce reads all
  // p buffers while the host's 8 ranks do the same; each rendezvous costs p
  // latencies, 8 / 2 = 4 times over for the oversubscribed cores.
  Cluster c = makeCluster(1, 8, 1e10, "shared-memory");
  c.nodeCores = {2};
  c.nodeRanks = {8};
  std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_DOUBLE_EQ(allReduceTime(c, all, 1e6), 8 * 8 * 1e6 / 1e10 + 8 * 1e-6 * 4);
  EXPECT_DOUBLE_EQ(allReduceTime(c, {0, 4}, 1e6), 8 * 2 * 1e6 / 1e10 + 2 * 1e-6 * 4);
  EXPECT_DOUBLE_EQ(allToAllTime(c, all, 8e6), 8 * 7e6 / 1e10 + 8 * 1e-6 * 4);
  EXPECT_EQ(c.sharing(3), 8);
  // The same devices on their own: the ring formula, no sharing.
  Cluster own = makeCluster(1, 8, 1e10, "shared-memory");
  EXPECT_DOUBLE_EQ(allReduceTime(own, all, 1e6), 2 * 7.0 / 8 * 1e6 / 1e10 + 14e-6);
  EXPECT_EQ(own.sharing(3), 1);
}

TEST(CostModelTest, AllToAllSwitchMeshAndNetwork) {
  // Switch: 3 peers of 1/4 of the bytes each share the device's link.
  Cluster sw = makeCluster(1, 4, 1e11);
  EXPECT_DOUBLE_EQ(allToAllTime(sw, {0, 1, 2, 3}, 4e8), 3 * 1e8 / 1e11 + 3e-6);
  // Full mesh: one link per pair, peers in parallel.
  Cluster mesh = makeCluster(1, 4, 1e11, "full-mesh");
  EXPECT_DOUBLE_EQ(allToAllTime(mesh, {0, 1, 2, 3}, 4e8), 1e8 / 1e11 + 3e-6);
  // Two nodes of 2: one peer on the node, two over the network.
  Cluster two = makeCluster(2, 2, 1e11);
  double intra = 1e8 / 1e11, inter = 2 * 1e8 / 1e10;
  EXPECT_DOUBLE_EQ(allToAllTime(two, {0, 1, 2, 3}, 4e8), std::max(intra, inter) + 1e-6 + 2 * 5e-6);
}

TEST(CostModelTest, RooflineTakesTheSlowerOfComputeAndMemory) {
  DeviceKind k{"dev", 1e12, 1e11, 8e10};
  EXPECT_DOUBLE_EQ(computeTime({2e12, 1e9, false}, k), 2.0);  // compute-bound
  EXPECT_DOUBLE_EQ(computeTime({1e9, 1e12, false}, k), 10.0); // memory-bound
}

// The cluster's precision chooses each kind's peak: bf16 where the kind
// gives one, f32 where it does not.
TEST(CostModelTest, PeaksFollowTheStepsPrecision) {
  mlir::MLIRContext context;
  mlir::Builder b(&context);
  auto kind = [&](double f32, double bf16) {
    return b.getDictionaryAttr({b.getNamedAttr("peak_flops_f32", b.getF64FloatAttr(f32)),
                                b.getNamedAttr("peak_flops_bf16", b.getF64FloatAttr(bf16)),
                                b.getNamedAttr("memory_bandwidth", b.getF64FloatAttr(1e12)),
                                b.getNamedAttr("memory_bytes", b.getF64FloatAttr(8e10))});
  };
  auto node = b.getDictionaryAttr(
      {b.getNamedAttr("device", b.getStringAttr("gpu")),
       b.getNamedAttr("count", b.getF64FloatAttr(1)),
       b.getNamedAttr("devices_per_node", b.getF64FloatAttr(2)),
       b.getNamedAttr("intra_node_link", b.getDictionaryAttr({b.getNamedAttr(
                                             "bandwidth", b.getF64FloatAttr(1e11))}))});
  auto attr = b.getDictionaryAttr(
      {b.getNamedAttr("device_kinds",
                      b.getDictionaryAttr({b.getNamedAttr("gpu", kind(6e13, 9.9e14)),
                                           b.getNamedAttr("old", kind(1e13, 0))})),
       b.getNamedAttr("nodes", b.getArrayAttr({node}))});
  auto fail = [&] { return mlir::emitError(mlir::UnknownLoc::get(&context)); };
  mlir::FailureOr<Cluster> f32 = Cluster::fromAttr(attr, fail);
  mlir::FailureOr<Cluster> bf16 = Cluster::fromAttr(attr, fail, "bf16");
  ASSERT_TRUE(mlir::succeeded(f32) && mlir::succeeded(bf16));
  OpCost gemm{9.9e14, 1e6, false};
  EXPECT_DOUBLE_EQ(computeTime(gemm, f32->kinds[0]), 9.9e14 / 6e13);
  EXPECT_DOUBLE_EQ(computeTime(gemm, bf16->kinds[0]), 1.0);
  EXPECT_EQ(bf16->precision, "bf16");
  // A kind without a bf16 peak computes at its f32 peak.
  EXPECT_DOUBLE_EQ(computeTime(gemm, bf16->kinds[1]), 9.9e14 / 1e13);
}

} // namespace
