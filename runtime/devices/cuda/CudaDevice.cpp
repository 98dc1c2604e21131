//===- CudaDevice.cpp - the device layer on CUDA --------------------------===//
//
// Halide's CUDA runtime (halide_cuda_device_interface, which loads the
// driver, libcuda, when the binary starts its first kernel) makes a crop a
// plain device pointer into its buffer: any offset works, so every kernel
// argument in an arena is a crop.
//
//===----------------------------------------------------------------------===//

#include "../DeviceKind.h"

namespace moert {

/// Called by registerAllDevices (DeviceRegistry.cpp).
void registerCudaDevice() {
  static const DeviceKind kind = {"cuda", 1};
  registerDeviceKind(kind);
}

} // namespace moert
