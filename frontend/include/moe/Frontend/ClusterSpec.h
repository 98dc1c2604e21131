//===- ClusterSpec.h - what a cluster description says ----------*- C++ -*-===//
//
// Devices, their speed and memory, and the links between them, from a JSON
// cluster description (docs/ClusterJSON.md). Device kinds come from presets
// taken from public spec sheets (DevicePresets.cpp) or are declared in the
// file. Units are SI: FLOP/s, bytes, bytes/s (per direction), seconds.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_CLUSTERSPEC_H
#define MOE_FRONTEND_CLUSTERSPEC_H

#include "moe/Frontend/JsonDoc.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moec::frontend {

struct LinkSpec {
  double bandwidth = 0; ///< bytes/s per device per direction
  double latency = 0;   ///< seconds
  std::string
      topology; ///< intra: switch|full-mesh|ring|pcie|shared-memory; inter: fat-tree|rail|ring
};

struct DeviceKind {
  std::string name;
  double flopsF32 = 0, flopsBF16 = 0, flopsF16 = 0; ///< dense peak FLOP/s
  double memoryBytes = 0;
  double memoryBandwidth = 0; ///< bytes/s
  LinkSpec intraNode;         ///< default link inside a node
  double nicBandwidth = 0;    ///< default inter-node bytes/s per device
  int64_t devicesPerNode = 8; ///< usual node size
  std::string source;         ///< where the numbers come from
  /// The `moec --target` whose kernels run on this kind ("cuda", "opencl",
  /// "host"), or empty when none does (moec then builds for the host).
  std::string target;
};

struct NodeGroup {
  int64_t count = 1; ///< nodes in the group
  int64_t devicesPerNode = 1;
  std::string device; ///< a DeviceKind name
  LinkSpec intraNode;
  /// > 0: each node is one host with this many cores whose devices are
  /// ranks (threads or processes) sharing it; the device kind describes the
  /// whole host.
  int64_t hostCores = 0;
};

struct ClusterSpec {
  std::string name = "cluster";
  std::vector<NodeGroup> nodes;
  std::map<std::string, DeviceKind> kinds; ///< every kind the nodes use
  LinkSpec interNode;
  std::shared_ptr<const JsonDoc> doc;

  int64_t numNodes() const;
  int64_t numDevices() const;
};

/// The built-in device kinds, from public spec sheets.
const std::vector<DeviceKind> &devicePresets();
const DeviceKind *findPreset(const std::string &name);

/// Reads a cluster description. Returns nullopt after reporting errors.
std::optional<ClusterSpec> readClusterJson(std::shared_ptr<const JsonDoc> doc,
                                           DiagnosticList &diags);

} // namespace moec::frontend

#endif // MOE_FRONTEND_CLUSTERSPEC_H
