//===- DeviceCopies.cpp - the device staging's per-thread byte counts -----===//
//
// Apart from Device.cpp so that the trainer, which reads the counts of
// every binary, does not pull Halide's device API into host binaries.
//
//===----------------------------------------------------------------------===//

#include "moert/DeviceCopies.h"

namespace {
thread_local int64_t copied[2];
} // namespace

extern "C" void moert_device_count(int64_t toDevice, int64_t toHost) {
  copied[0] += toDevice;
  copied[1] += toHost;
}

extern "C" void moert_device_copied(int64_t bytes[2]) {
  bytes[0] = copied[0];
  bytes[1] = copied[1];
  copied[0] = copied[1] = 0;
}
