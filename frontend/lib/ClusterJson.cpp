//===- ClusterJson.cpp - reads a JSON cluster description -----------------===//
//
// Schema: docs/ClusterJSON.md.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ClusterSpec.h"
#include "moe/Frontend/ObjectReader.h"

using namespace moec::frontend;
using nlohmann::json;

int64_t ClusterSpec::numNodes() const {
  int64_t n = 0;
  for (const NodeGroup &g : nodes)
    n += g.count;
  return n;
}

int64_t ClusterSpec::numDevices() const {
  int64_t n = 0;
  for (const NodeGroup &g : nodes)
    n += g.count * g.devicesPerNode;
  return n;
}

namespace {
const std::vector<std::string> kIntraTopologies = {"switch", "full-mesh", "ring", "pcie",
                                                   "shared-memory"};
const std::vector<std::string> kInterTopologies = {"fat-tree", "rail", "ring"};

/// Reads a link object at `pointer`, defaulting every field to `base`.
LinkSpec readLink(const JsonDoc &doc, DiagnosticList &diags, const std::string &pointer,
                  const LinkSpec &base, const std::vector<std::string> &topologies) {
  ObjectReader r(doc, diags, pointer);
  LinkSpec link = base;
  if (!r.valid())
    return link;
  std::optional<double> bw;
  if (base.bandwidth > 0)
    bw = base.bandwidth;
  link.bandwidth = r.getNumber("bandwidth", bw, 0.0, 1e15, true);
  link.latency = r.getNumber("latency", base.latency, 0.0, 1.0);
  std::optional<std::string> topo;
  if (!base.topology.empty())
    topo = base.topology;
  link.topology = r.getString("topology", topo, topologies);
  r.finish({"bandwidth", "latency", "topology"});
  return link;
}

DeviceKind readKind(const JsonDoc &doc, DiagnosticList &diags, const std::string &pointer,
                    const std::string &name) {
  ObjectReader r(doc, diags, pointer);
  DeviceKind kind;
  if (!r.valid())
    return kind;
  std::vector<std::string> presetNames;
  for (const DeviceKind &p : devicePresets())
    presetNames.push_back(p.name);
  std::string base = r.getString("base", std::string(""));
  bool inherited = false;
  if (!base.empty()) {
    if (const DeviceKind *preset = findPreset(base)) {
      kind = *preset;
      inherited = true;
    } else {
      std::string hint = closestMatch(base, presetNames);
      r.error("base", "\"" + base + "\" is not a device preset" +
                          (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
      return kind; // the other fields cannot be checked against a base
    }
  }
  kind.name = name;
  kind.source = "declared in " + doc.file();
  auto number = [&](ObjectReader &o, const std::string &key, double current) {
    std::optional<double> fallback;
    if (inherited)
      fallback = current;
    // FLOP/s, bytes and bytes/s: below 1 the cost model's times overflow.
    return o.getNumber(key, fallback, 1.0, 1e21);
  };
  r.claim("peak_flops");
  if (r.has("peak_flops") || !inherited) {
    ObjectReader f(doc, diags, r.at("peak_flops"));
    if (!r.has("peak_flops"))
      r.error("peak_flops", "required field is missing (an object with f32, "
                            "bf16 and f16 FLOP/s)");
    else if (f.valid()) {
      kind.flopsF32 = number(f, "f32", kind.flopsF32);
      kind.flopsBF16 = f.getNumber("bf16", inherited ? kind.flopsBF16 : kind.flopsF32, 1.0, 1e21);
      kind.flopsF16 = f.getNumber("f16", inherited ? kind.flopsF16 : kind.flopsF32, 1.0, 1e21);
      f.finish({"f32", "bf16", "f16"});
    }
  }
  kind.memoryBytes = number(r, "memory_bytes", kind.memoryBytes);
  kind.memoryBandwidth = number(r, "memory_bandwidth", kind.memoryBandwidth);
  kind.nicBandwidth =
      r.getNumber("nic_bandwidth", inherited ? kind.nicBandwidth : 12.5e9, 0.0, 1e15, true);
  kind.devicesPerNode = r.getInt("devices_per_node", kind.devicesPerNode, 1, 1 << 16);
  if (r.has("target"))
    kind.target = r.getString("target", kind.target, {"host", "opencl", "cuda"});
  r.claim("intra_node_link");
  if (r.has("intra_node_link"))
    kind.intraNode =
        readLink(doc, diags, r.at("intra_node_link"), kind.intraNode, kIntraTopologies);
  else if (!inherited)
    kind.intraNode = {kind.memoryBandwidth, 1e-6, "switch"};
  r.finish({"base", "peak_flops", "memory_bytes", "memory_bandwidth", "nic_bandwidth",
            "devices_per_node", "intra_node_link", "target"});
  return kind;
}
} // namespace

std::optional<ClusterSpec> moec::frontend::readClusterJson(std::shared_ptr<const JsonDoc> doc,
                                                           DiagnosticList &diags) {
  ClusterSpec c;
  c.doc = doc;
  ObjectReader r(*doc, diags, "");
  if (!r.valid())
    return std::nullopt;
  c.name = r.getString("name", std::string("cluster"));

  // Kinds declared in the file, then presets on demand.
  std::map<std::string, DeviceKind> declared;
  r.claim("device_kinds");
  if (r.has("device_kinds")) {
    ObjectReader kinds(*doc, diags, "/device_kinds");
    if (kinds.valid())
      for (auto it = doc->root()["device_kinds"].begin(); it != doc->root()["device_kinds"].end();
           ++it) {
        kinds.claim(it.key());
        declared[it.key()] = readKind(*doc, diags, kinds.at(it.key()), it.key());
      }
  }
  std::vector<std::string> known;
  for (const DeviceKind &p : devicePresets())
    known.push_back(p.name);
  for (const auto &entry : declared)
    known.push_back(entry.first);

  r.claim("nodes");
  const json *nodes = doc->root().contains("nodes") ? &doc->root()["nodes"] : nullptr;
  if (!nodes)
    diags.error(doc->file(), doc->valuePos(""),
                "/nodes: required field is missing (an array of node groups)");
  else if (!nodes->is_array() || nodes->empty())
    r.error("nodes",
            "expected a non-empty array of node groups, got " + ObjectReader::show(*nodes));
  else
    for (size_t i = 0; i < nodes->size(); ++i) {
      ObjectReader g(*doc, diags, "/nodes/" + std::to_string(i));
      if (!g.valid())
        continue;
      NodeGroup group;
      group.count = g.getInt("count", 1, 1, 1 << 20);
      group.device = g.getString("device", std::nullopt);
      const DeviceKind *kind = nullptr;
      if (auto it = declared.find(group.device); it != declared.end())
        kind = &it->second;
      else
        kind = findPreset(group.device);
      if (!kind && !group.device.empty()) {
        std::string hint = closestMatch(group.device, known);
        g.error("device", "\"" + group.device +
                              "\" is neither a device preset nor declared in "
                              "/device_kinds" +
                              (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
      }
      group.devicesPerNode =
          g.getInt("devices_per_node", kind ? kind->devicesPerNode : 8, 1, 1 << 16);
      g.claim("intra_node_link");
      if (kind) {
        group.intraNode = kind->intraNode;
        if (g.has("intra_node_link"))
          group.intraNode =
              readLink(*doc, diags, g.at("intra_node_link"), kind->intraNode, kIntraTopologies);
        c.kinds[kind->name] = *kind;
      }
      if (g.has("host_cores"))
        group.hostCores = g.getInt("host_cores", 0, 1, 1 << 16);
      g.finish({"count", "device", "devices_per_node", "intra_node_link", "host_cores"});
      c.nodes.push_back(group);
    }

  // Inter-node link: defaults to the slowest NIC of the kinds in use.
  LinkSpec inter{0, 5e-6, "fat-tree"};
  for (const auto &entry : c.kinds)
    if (inter.bandwidth == 0 || entry.second.nicBandwidth < inter.bandwidth)
      inter.bandwidth = entry.second.nicBandwidth;
  r.claim("inter_node_link");
  if (r.has("inter_node_link"))
    inter = readLink(*doc, diags, "/inter_node_link", inter, kInterTopologies);
  c.interNode = inter;
  r.finish({"name", "device_kinds", "nodes", "inter_node_link"});
  if (!diags.hasErrors() && c.numDevices() > (int64_t(1) << 24))
    r.error("nodes", std::to_string(c.numDevices()) + " devices exceed the supported 16777216");
  if (diags.hasErrors())
    return std::nullopt;
  return c;
}
