//===- DeviceRegistry.cpp - the registered device kinds -------------------===//
//
// Each device folder (runtime/devices/<name>/) defines one register
// function; registerAllDevices calls them, once, when the layer first looks
// a kind up (thread ranks attach concurrently: a function-local static).
// No static initialisers: a static library would drop an object nothing
// refers to.
//
//===----------------------------------------------------------------------===//

#include "DeviceKind.h"

#include <cstring>
#include <vector>

namespace moert {
// One per folder, defined there.
void registerOpenCLDevice();
void registerCudaDevice();
} // namespace moert

namespace {

std::vector<const moert::DeviceKind *> &registry() {
  static std::vector<const moert::DeviceKind *> kinds;
  return kinds;
}

void registerAllDevices() {
  moert::registerOpenCLDevice();
  moert::registerCudaDevice();
}

} // namespace

void moert::registerDeviceKind(const DeviceKind &kind) { registry().push_back(&kind); }

const moert::DeviceKind &moert::deviceKind(const char *name) {
  static const bool done = (registerAllDevices(), true);
  (void)done;
  for (const DeviceKind *kind : registry())
    if (std::strcmp(kind->name, name) == 0)
      return *kind;
  static const DeviceKind anyOffset = {"", 1};
  return anyOffset;
}
