//===- DeviceKind.h - what the device layer knows of one device API ------===//
//
// The device layer (DeviceArenas.cpp, moert/Device.h) drives every device
// through Halide's device interface, which the step program passes it. What
// differs between device APIs beyond that interface is a DeviceKind,
// registered by the API's folder (runtime/devices/<name>/) through one
// function that DeviceRegistry.cpp calls. Internal to moert.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_DEVICES_DEVICEKIND_H
#define MOERT_DEVICES_DEVICEKIND_H

#include <cstdint>

namespace moert {

struct DeviceKind {
  /// The `moec --target` whose step programs run on it (the `target` of
  /// moert_device_attach and moert_device_inputs).
  const char *name;
  /// A kernel argument in an arena is a device crop of it only at byte
  /// offsets that are multiples of this; at others it is staged (copied to
  /// an allocation of its own for the call).
  int64_t cropAlignment;
};

/// Adds `kind` to the registry (each device folder's register function
/// calls it once, from registerAllDevices).
void registerDeviceKind(const DeviceKind &kind);

/// The kind named `name`; an unregistered name gets a kind whose crops
/// take any offset.
const DeviceKind &deviceKind(const char *name);

} // namespace moert

#endif // MOERT_DEVICES_DEVICEKIND_H
