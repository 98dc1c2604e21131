//===- CudaBackend.cpp - kernels on an NVIDIA GPU -------------------------===//
//
// Halide's CUDA back end (PTX, made by LLVM inside moe-halide-gen) for one
// compute capability, with the GPU schedule (codegen/generators/
// GpuSchedule.h). The step's arenas stay on the device (moert/Device.h,
// runtime/devices/cuda/); Halide's runtime loads libcuda when the binary
// starts its first kernel. CUDA's crops are plain device pointers, so any
// offset would do; the plan keeps 512 bytes, as on OpenCL. Halide 14's CUDA
// back end fails on bf16 kernels ("Copy one register into another with a
// different width").
//
//===----------------------------------------------------------------------===//

#include "../HalideDeviceBackend.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;

namespace {

/// The compute capabilities Halide 14 has a target feature for.
constexpr StringLiteral kCapabilities[] = {"30", "32", "35", "50", "61", "70", "75", "80", "86"};

class CudaBackend final : public moec::codegen::HalideDeviceBackend {
public:
  CudaBackend() : HalideDeviceBackend("halide_cuda_device_interface", "HalideRuntimeCuda.h") {}
  StringRef name() const override { return "cuda"; }
  StringRef description() const override {
    return "an NVIDIA GPU (Halide's CUDA back end; implies --gemm=halide)";
  }
  ArrayRef<moec::codegen::TargetOption> options() const override {
    static const moec::codegen::TargetOption list[] = {
        {"cuda-capability",
         "With --target=cuda: the compute capability the kernels' PTX targets, one of 30, 32, "
         "35, 50, 61, 70, 75, 80, 86 (default 80: Ampere, Hopper and later GPUs run it)",
         "80"}};
    return list;
  }
  Error checkOption(StringRef, StringRef value) const override {
    if (llvm::is_contained(kCapabilities, value))
      return Error::success();
    return createStringError(inconvertibleErrorCode(),
                             "Halide targets 30, 32, 35, 50, 61, 70, 75, 80 or 86");
  }
  std::string halideFeatures(const moec::codegen::TargetOptionValues &values) const override {
    return "-cuda-cuda_capability_" + option(values, "cuda-capability");
  }
};

} // namespace

namespace moec::codegen {

/// Called by registerAllTargets (TargetRegistry.cpp).
void registerCudaTarget() {
  static const CudaBackend backend;
  registerTarget(backend);
}

} // namespace moec::codegen
