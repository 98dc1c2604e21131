//===- HostStaging.h - a moert_buffer's bytes in host memory ----*- C++ -*-===//
//
// The host backends (threads, MPI) and the codecs work on host memory. A
// device buffer (moert_buffer with MOERT_MEMORY_DEVICE) is staged for the
// length of a call: its bytes are copied into a host copy with its device
// interface's copy_to_host (or read from its host copy when that is the
// newer one), and, when the call wrote them, copied back with
// copy_to_device; the copies count as the device layer's
// (moert_device_count, the metrics' device_copy_bytes). A host buffer is
// used as it is. Only the Halide runtime's function pointers of the
// buffer's device interface are called, so libmoert links no Halide
// runtime: the binary's (the one its kernels use) does the copies.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_HOSTSTAGING_H
#define MOERT_LIB_HOSTSTAGING_H

#include "moert/Comm.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

class HostStaging {
public:
  /// Stages `buffer`: with `read`, its current bytes (else the host copy's
  /// contents are unspecified). False with `error` when it cannot be.
  bool open(const moert_buffer &buffer, bool read, std::string &error);
  /// The bytes in host memory (valid until close).
  void *data() const { return host; }
  /// After the call: with `written`, a device buffer's bytes go back to
  /// the device (its device copy is then the newer one). False with
  /// `error` when the copy failed.
  bool close(bool written, std::string &error);

private:
  moert_buffer buffer{};
  void *host = nullptr;
  std::vector<uint8_t> copy; ///< a device buffer's host copy
};

/// "host" or "device" (messages).
const char *spaceName(moert_memory_space space);

} // namespace moert

#endif // MOERT_LIB_HOSTSTAGING_H
