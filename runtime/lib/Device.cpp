//===- Device.cpp - kernels on a device, staged through host memory -------===//

#include "moert/Device.h"

#include <cstdio>
#include <cstring>

namespace {

// The device API reports one error per missing entry point; the check keeps
// the last and prints one line.
char lastError[512];

void keepError(void *, const char *message) {
  std::snprintf(lastError, sizeof lastError, "%s", message);
  if (char *end = std::strchr(lastError, '\n'))
    *end = 0;
}

int64_t bytesOf(const halide_buffer_t *b) {
  int64_t n = (b->type.bits + 7) / 8 * b->type.lanes;
  for (int d = 0; d < b->dimensions; ++d)
    n *= b->dim[d].extent;
  return n;
}

/// Whether `device` answers: 0, or non-zero after one line on stderr.
int deviceReady(const halide_device_interface_t *device, const char *target) {
  static const int rc = [&] {
    halide_reuse_device_allocations(nullptr, true);
    float host[1] = {0};
    halide_dimension_t dim = {0, 1, 1, 0};
    halide_buffer_t probe = {};
    probe.host = reinterpret_cast<uint8_t *>(host);
    probe.type = {halide_type_float, 32, 1};
    probe.dimensions = 1;
    probe.dim = &dim;
    halide_error_handler_t previous = halide_set_error_handler(keepError);
    int r = halide_device_malloc(nullptr, &probe, device);
    if (r == 0)
      halide_device_free(nullptr, &probe);
    halide_set_error_handler(previous);
    if (r)
      std::fprintf(stderr,
                   "kernel error: no %s device answers (this binary was compiled with moec "
                   "--target %s; --target host runs on the CPU): %s\n",
                   target, target, lastError);
    return r;
  }();
  return rc;
}

} // namespace

extern "C" int moert_device_inputs(const halide_device_interface_t *device, const char *target,
                                   const halide_filter_metadata_t *md,
                                   halide_buffer_t *const *bufs) {
  if (int rc = deviceReady(device, target))
    return rc;
  int64_t bytes = 0;
  for (int i = 0; i < md->num_arguments; ++i)
    if (md->arguments[i].kind == halide_argument_kind_input_buffer) {
      bufs[i]->flags |= halide_buffer_flag_host_dirty;
      bytes += bytesOf(bufs[i]);
    }
  moert_device_count(bytes, 0);
  return 0;
}

extern "C" int moert_device_outputs(int rc, halide_buffer_t *const *bufs, int n) {
  for (int i = 0; i < n; ++i) {
    halide_buffer_t *b = bufs[i];
    if (!b->device)
      continue;
    if (rc == 0 && (b->flags & halide_buffer_flag_device_dirty)) {
      rc = halide_copy_to_host(nullptr, b);
      moert_device_count(0, bytesOf(b));
    }
    int freed = halide_device_free(nullptr, b);
    if (rc == 0)
      rc = freed;
  }
  return rc;
}
