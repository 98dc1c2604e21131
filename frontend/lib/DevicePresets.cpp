//===- DevicePresets.cpp - device kinds from public spec sheets -----------===//
//
// Dense peak FLOP/s (no sparsity), memory, and the usual links of each kind.
// docs/ClusterJSON.md lists every number with its source and says which are
// assumptions; keep the two in step. Link bandwidths are per device and per
// direction.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ClusterSpec.h"

using namespace moec::frontend;

namespace {
/// The back end that runs each preset's kernels (`moec --target`): NVIDIA's
/// GPUs take CUDA; Hygon's DCUs (ROCm) and Moore Threads' GPUs (MUSA) ship
/// OpenCL drivers; Ascend and Cambricon have no back end here yet
/// (docs/Targets.md).
std::vector<DeviceKind> withTargets(std::vector<DeviceKind> presets) {
  for (DeviceKind &kind : presets) {
    const std::string &n = kind.name;
    if (n == "a100" || n == "h100" || n == "h200")
      kind.target = "cuda";
    else if (n == "hygon-k100-ai" || n == "mtt-s4000")
      kind.target = "opencl";
    else if (n == "local-cpu")
      kind.target = "host";
  }
  return presets;
}
} // namespace

const std::vector<DeviceKind> &moec::frontend::devicePresets() {
  static const std::vector<DeviceKind> presets = withTargets({
      // NVIDIA A100 SXM4 80GB datasheet: 19.5 TF FP32, 312 TF BF16/FP16 dense,
      // 2039 GB/s HBM2e; NVLink 3 600 GB/s both ways through NVSwitch;
      // DGX A100: one 200 Gb/s HDR InfiniBand NIC per GPU.
      {"a100",
       19.5e12,
       312e12,
       312e12,
       80e9,
       2039e9,
       {300e9, 2e-6, "switch"},
       25e9,
       8,
       "NVIDIA A100 datasheet; DGX A100 user guide"},
      // NVIDIA H100 SXM5: 67 TF FP32, 989.5 TF BF16/FP16 dense, 80 GB HBM3 at
      // 3.35 TB/s; NVLink 4 900 GB/s both ways; 400 Gb/s NDR per GPU.
      {"h100",
       67e12,
       989.5e12,
       989.5e12,
       80e9,
       3.35e12,
       {450e9, 2e-6, "switch"},
       50e9,
       8,
       "NVIDIA H100 datasheet; DGX H100 reference architecture"},
      // NVIDIA H200 SXM: H100's compute, 141 GB HBM3e at 4.8 TB/s.
      {"h200",
       67e12,
       989.5e12,
       989.5e12,
       141e9,
       4.8e12,
       {450e9, 2e-6, "switch"},
       50e9,
       8,
       "NVIDIA H200 datasheet"},
      // Huawei Ascend 910B3 (Atlas 800T A2): 82 TF FP32, 313 TF FP16, 64 GB
      // HBM2e at 1.6 TB/s; HCCS full mesh of 8 NPUs, 7 links, 56 GB/s both
      // ways per pair; one 200GE RoCE port per NPU. No vendor BF16 figure:
      // taken equal to FP16 (an assumption).
      {"ascend-910b",
       82e12,
       313e12,
       313e12,
       64e9,
       1.6e12,
       {28e9, 2e-6, "full-mesh"},
       25e9,
       8,
       "Huawei Atlas 800T A2 spec (910B3); BF16 assumed = FP16"},
      // Huawei Ascend 910B2: 99 TF FP32, 376 TF FP16, same memory and links.
      {"ascend-910b2",
       99e12,
       376e12,
       376e12,
       64e9,
       1.6e12,
       {28e9, 2e-6, "full-mesh"},
       25e9,
       8,
       "Huawei Atlas 800T A2 spec (910B2); BF16 assumed = FP16"},
      // Cambricon MLU370-X8 (one card, two chips): 32 TF FP32, 96 TF
      // BF16/FP16, 48 GB LPDDR5 at 614.4 GB/s; MLU-Link 200 GB/s per card
      // (direction not stated: taken as both ways); inter-node NIC not
      // published: 200 Gb/s assumed.
      {"mlu370-x8",
       32e12,
       96e12,
       96e12,
       48e9,
       614.4e9,
       {100e9, 2e-6, "ring"},
       25e9,
       8,
       "Cambricon MLU370-X8 launch figures; links partly assumed"},
      // Hygon DCU K100_AI (no public Z100 spec sheet was found): 49 TF FP32,
      // 196 TF BF16/FP16, 64 GB at 896 GB/s; links not published: PCIe 4.0
      // x16 (32 GB/s) and 200 Gb/s assumed.
      {"hygon-k100-ai",
       49e12,
       196e12,
       196e12,
       64e9,
       896e9,
       {32e9, 5e-6, "pcie"},
       25e9,
       8,
       "Hygon K100_AI figures quoted from vendor tables; links assumed"},
      // Moore Threads MTT S4000: 25 TF FP32, 100 TF BF16/FP16, 48 GB GDDR6 at
      // 768 GB/s; MTLink 240 GB/s (taken as both ways); one documented
      // cluster: 2x200 Gb/s InfiniBand per 8-GPU node.
      {"mtt-s4000",
       25e12,
       100e12,
       100e12,
       48e9,
       768e9,
       {120e9, 2e-6, "switch"},
       6.25e9,
       8,
       "Moore Threads S4000 launch figures; links partly assumed"},
      // A 2-core build machine of this project: measured OpenBLAS sgemm
      // 140 GFLOP/s (2 threads), STREAM triad 17.3 GB/s, 24 GiB; no native
      // BF16/FP16 arithmetic, so those run at the FP32 rate. Ranks are
      // threads sharing memory (a node with "host_cores"): bench/CommBench
      // measured the thread communicator's rendezvous at 24 us for 2 ranks
      // (12 us a member) and a 1 MiB all_reduce moving ~8 GB/s of reads.
      {"local-cpu",
       140e9,
       140e9,
       140e9,
       24.0 * (1 << 30),
       17.3e9,
       {8e9, 12e-6, "shared-memory"},
       1.25e9,
       1,
       "measured on the project's 2-core machine (sgemm, STREAM triad)"},
  });
  return presets;
}

const DeviceKind *moec::frontend::findPreset(const std::string &name) {
  for (const DeviceKind &kind : devicePresets())
    if (kind.name == name)
      return &kind;
  return nullptr;
}
