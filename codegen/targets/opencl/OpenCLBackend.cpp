//===- OpenCLBackend.cpp - kernels on an OpenCL device --------------------===//
//
// Halide's OpenCL back end (OpenCL C, compiled by the driver at run time)
// with the GPU schedule (codegen/generators/GpuSchedule.h). The step's
// arenas stay on the device (moert/Device.h, runtime/devices/opencl/).
// Halide 14's OpenCL back end has no bf16 (f16 needs cl_khr_fp16).
//
//===----------------------------------------------------------------------===//

#include "../HalideDeviceBackend.h"

using namespace llvm;

namespace {

class OpenCLBackend final : public moec::codegen::HalideDeviceBackend {
public:
  OpenCLBackend()
      : HalideDeviceBackend("halide_opencl_device_interface", "HalideRuntimeOpenCL.h") {}
  StringRef name() const override { return "opencl"; }
  StringRef description() const override {
    return "an OpenCL device (Halide's OpenCL back end; implies --gemm=halide)";
  }
  std::string halideFeatures(const moec::codegen::TargetOptionValues &) const override {
    return "-opencl";
  }
};

} // namespace

namespace moec::codegen {

/// Called by registerAllTargets (TargetRegistry.cpp).
void registerOpenCLTarget() {
  static const OpenCLBackend backend;
  registerTarget(backend);
}

} // namespace moec::codegen
