//===- OpenCLDevice.cpp - the device layer on OpenCL ----------------------===//
//
// Halide's OpenCL runtime (halide_opencl_device_interface, loaded from the
// ICD loader libOpenCL when the binary starts its first kernel) passes a
// crop to a kernel as a sub-buffer, whose origin must be a multiple of the
// device's base address alignment: 1024 bits on PoCL and Intel, 2048 on
// AMD, 4096 on NVIDIA. moec plans a device target's buffers at 512 bytes
// (codegen/targets/opencl/), so every planned buffer is a crop; a run of
// placed expert rows, at another offset, is staged.
//
//===----------------------------------------------------------------------===//

#include "../DeviceKind.h"

namespace moert {

/// Called by registerAllDevices (DeviceRegistry.cpp).
void registerOpenCLDevice() {
  static const DeviceKind kind = {"opencl", 512};
  registerDeviceKind(kind);
}

} // namespace moert
