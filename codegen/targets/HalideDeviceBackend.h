//===- HalideDeviceBackend.h - a device that Halide's runtime drives -*- C++ -*-===//
//
// What the OpenCL and CUDA back ends share, and a base for another device
// target whose Halide runtime provides a halide_device_interface_t: the
// step's arenas resident on the device through moert/Device.h (the step
// program includes the runtime's header and the layer's), every planned
// buffer at 512 bytes, the global norm's partial sums on the device, no
// OpenBLAS extern stages (OpenBLAS runs on the host), no expert chunks (the
// device layer keeps one device copy per value, not views of it), and no
// 16-bit kernels (neither of Halide 14's GPU back ends generates them).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_TARGETS_HALIDEDEVICEBACKEND_H
#define MOE_CODEGEN_TARGETS_HALIDEDEVICEBACKEND_H

#include "moe/Codegen/TargetBackend.h"

namespace moec::codegen {

class HalideDeviceBackend : public TargetBackend {
public:
  llvm::StringRef deviceInterface() const final { return interface; }
  llvm::ArrayRef<llvm::StringRef> preludeIncludes() const final { return headers; }
  /// OpenCL passes a crop of an arena as a sub-buffer, whose origin must be
  /// a multiple of the device's base address alignment: 1024 bits on PoCL
  /// and Intel, 2048 on AMD, 4096 on NVIDIA. 512 bytes suits them all.
  int64_t bufferAlignment() const override { return 512; }
  bool deviceNorm() const override { return true; }
  bool sixteenBitFloats() const override { return false; }
  bool blasGemm() const final { return false; }
  bool expertChunks() const final { return false; }

protected:
  /// `interface`: the Halide runtime function returning the device
  /// interface; `runtimeHeader`: the Halide runtime header declaring it.
  HalideDeviceBackend(llvm::StringLiteral interface, llvm::StringLiteral runtimeHeader)
      : interface(interface), headers{runtimeHeader, "moert/Device.h"} {}

private:
  llvm::StringLiteral interface;
  llvm::StringRef headers[2];
};

} // namespace moec::codegen

#endif // MOE_CODEGEN_TARGETS_HALIDEDEVICEBACKEND_H
