//===- HostStaging.cpp - a moert_buffer's bytes in host memory ------------===//

#include "HostStaging.h"

#include "HalideRuntime.h"
#include "moert/DeviceCopies.h"

#include <climits>
#include <cstdlib>
#include <cstring>

namespace {

/// The bytes a dense buffer's allocation spans.
int64_t spanBytes(const halide_buffer_t &b) {
  int64_t elements = 1;
  for (int d = 0; d < b.dimensions; ++d)
    if (b.dim[d].extent > 0)
      elements += static_cast<int64_t>(b.dim[d].extent - 1) * std::llabs(b.dim[d].stride);
  return elements * ((b.type.bits + 7) / 8) * b.type.lanes;
}

/// A one-dimensional byte view of the first `bytes` bytes of `b`'s device
/// allocation, with `host` as its host memory: the device interface copies
/// between the two. `dim` holds the view's dimension.
halide_buffer_t viewOf(const halide_buffer_t &b, void *host, int64_t bytes,
                       halide_dimension_t &dim) {
  halide_buffer_t view{};
  view.device = b.device;
  view.device_interface = b.device_interface;
  view.host = static_cast<uint8_t *>(host);
  view.type = halide_type_t(halide_type_uint, 8);
  view.dimensions = 1;
  dim = halide_dimension_t(0, static_cast<int32_t>(bytes), 1);
  view.dim = &dim;
  return view;
}

} // namespace

const char *moert::spaceName(moert_memory_space space) {
  return space == MOERT_MEMORY_HOST ? "host" : space == MOERT_MEMORY_DEVICE ? "device" : "unknown";
}

bool moert::HostStaging::open(const moert_buffer &b, bool read, std::string &error) {
  buffer = b;
  host = nullptr;
  if (b.bytes < 0) {
    error = "a buffer of " + std::to_string(b.bytes) + " bytes";
    return false;
  }
  if (b.space == MOERT_MEMORY_HOST) {
    host = b.data;
    if (!host && b.bytes > 0)
      error = "a host buffer of " + std::to_string(b.bytes) + " bytes at null";
    return host || b.bytes == 0;
  }
  if (b.space != MOERT_MEMORY_DEVICE) {
    error =
        "memory space " + std::to_string(static_cast<int>(b.space)) + " is neither host nor device";
    return false;
  }
  const halide_buffer_t *d = b.device;
  if (!d || !d->device || !d->device_interface) {
    error = "a device buffer without a device allocation";
    return false;
  }
  if (b.bytes > spanBytes(*d) || b.bytes > INT32_MAX) {
    error = "a device buffer of " + std::to_string(spanBytes(*d)) + " bytes cannot stage " +
            std::to_string(b.bytes);
    return false;
  }
  copy.resize(static_cast<size_t>(b.bytes));
  host = copy.data();
  if (!read || b.bytes == 0)
    return true;
  if (d->host && (d->flags & halide_buffer_flag_host_dirty)) { // the host copy is the newer
    std::memcpy(host, d->host, static_cast<size_t>(b.bytes));
    return true;
  }
  halide_dimension_t dim;
  halide_buffer_t view = viewOf(*d, host, b.bytes, dim);
  view.flags = halide_buffer_flag_device_dirty;
  if (int rc = d->device_interface->copy_to_host(nullptr, &view)) {
    error = "copying a device buffer to the host failed (Halide error " + std::to_string(rc) + ")";
    return false;
  }
  moert_device_count(0, b.bytes);
  return true;
}

bool moert::HostStaging::close(bool written, std::string &error) {
  if (!written || buffer.space != MOERT_MEMORY_DEVICE || buffer.bytes == 0)
    return true;
  halide_buffer_t *d = buffer.device;
  halide_dimension_t dim;
  halide_buffer_t view = viewOf(*d, host, buffer.bytes, dim);
  view.flags = halide_buffer_flag_host_dirty;
  if (int rc = d->device_interface->copy_to_device(nullptr, &view, d->device_interface)) {
    error = "copying a device buffer back to the device failed (Halide error " +
            std::to_string(rc) + ")";
    return false;
  }
  moert_device_count(buffer.bytes, 0);
  // The device copy is the newer now; a host copy of the buffer is stale.
  d->flags = (d->flags & ~uint64_t(halide_buffer_flag_host_dirty)) |
             uint64_t(halide_buffer_flag_device_dirty);
  return true;
}
