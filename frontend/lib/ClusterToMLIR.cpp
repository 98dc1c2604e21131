//===- ClusterToMLIR.cpp - cluster spec as a module attribute -------------===//

#include "moe/Frontend/ClusterToMLIR.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using ::moec::frontend::ClusterSpec;
using ::moec::frontend::LinkSpec;

static DictionaryAttr linkAttr(Builder &b, const LinkSpec &link) {
  return b.getDictionaryAttr({
      b.getNamedAttr("bandwidth", b.getF64FloatAttr(link.bandwidth)),
      b.getNamedAttr("latency", b.getF64FloatAttr(link.latency)),
      b.getNamedAttr("topology", b.getStringAttr(link.topology)),
  });
}

namespace moec::frontend {
DictionaryAttr clusterAttr(const ClusterSpec &c, MLIRContext &context) {
  Builder b(&context);
  SmallVector<Attribute> groups;
  for (const NodeGroup &g : c.nodes) {
    SmallVector<NamedAttribute> fields = {
        b.getNamedAttr("count", b.getI64IntegerAttr(g.count)),
        b.getNamedAttr("device", b.getStringAttr(g.device)),
        b.getNamedAttr("devices_per_node", b.getI64IntegerAttr(g.devicesPerNode)),
        b.getNamedAttr("intra_node_link", linkAttr(b, g.intraNode))};
    if (g.hostCores > 0)
      fields.push_back(b.getNamedAttr("host_cores", b.getI64IntegerAttr(g.hostCores)));
    groups.push_back(b.getDictionaryAttr(fields));
  }
  SmallVector<NamedAttribute> kinds;
  for (const auto &[name, k] : c.kinds)
    kinds.push_back(b.getNamedAttr(
        name, b.getDictionaryAttr({
                  b.getNamedAttr("peak_flops_f32", b.getF64FloatAttr(k.flopsF32)),
                  b.getNamedAttr("peak_flops_bf16", b.getF64FloatAttr(k.flopsBF16)),
                  b.getNamedAttr("peak_flops_f16", b.getF64FloatAttr(k.flopsF16)),
                  b.getNamedAttr("memory_bytes", b.getF64FloatAttr(k.memoryBytes)),
                  b.getNamedAttr("memory_bandwidth", b.getF64FloatAttr(k.memoryBandwidth)),
              })));
  return b.getDictionaryAttr({
      b.getNamedAttr("name", b.getStringAttr(c.name)),
      b.getNamedAttr("num_nodes", b.getI64IntegerAttr(c.numNodes())),
      b.getNamedAttr("num_devices", b.getI64IntegerAttr(c.numDevices())),
      b.getNamedAttr("nodes", b.getArrayAttr(groups)),
      b.getNamedAttr("device_kinds", b.getDictionaryAttr(kinds)),
      b.getNamedAttr("inter_node_link", linkAttr(b, c.interNode)),
  });
}
} // namespace moec::frontend
