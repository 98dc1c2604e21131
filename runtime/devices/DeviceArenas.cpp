//===- DeviceArenas.cpp - device-resident arenas for device kernels -------===//
//
// moert/Device.h says what this does. Crops and copies of an arena go
// through Halide's device interface only (halide_device_crop, copies of
// cropped buffers), so any device API Halide drives works unchanged; what
// else differs between APIs is their DeviceKind (runtime/devices/<name>/).
//
//===----------------------------------------------------------------------===//

#include "moert/Device.h"

#include "../lib/ParamSizes.h"
#include "DeviceKind.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

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

/// Disjoint, merged byte ranges [begin, end) of one arena.
class Ranges {
public:
  void add(int64_t b, int64_t e) {
    if (b >= e)
      return;
    remove(b, e);
    auto next = ranges.lower_bound(b);
    if (next != ranges.end() && next->first == e) {
      e = next->second;
      next = ranges.erase(next);
    }
    if (next != ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->second == b) {
        prev->second = e;
        return;
      }
    }
    ranges.emplace(b, e);
  }
  void remove(int64_t b, int64_t e) {
    if (b >= e)
      return;
    auto it = ranges.lower_bound(b);
    if (it != ranges.begin() && std::prev(it)->second > b)
      --it;
    while (it != ranges.end() && it->first < e) {
      auto [rb, re] = *it;
      it = ranges.erase(it);
      if (rb < b)
        ranges.emplace(rb, b);
      if (re > e)
        it = ranges.emplace(e, re).first;
    }
  }
  /// The parts of [b, e) in the set, in order.
  std::vector<std::pair<int64_t, int64_t>> within(int64_t b, int64_t e) const {
    std::vector<std::pair<int64_t, int64_t>> out;
    auto it = ranges.lower_bound(b);
    if (it != ranges.begin() && std::prev(it)->second > b)
      --it;
    for (; it != ranges.end() && it->first < e; ++it)
      out.emplace_back(std::max(b, it->first), std::min(e, it->second));
    return out;
  }
  void clear() { ranges.clear(); }

private:
  std::map<int64_t, int64_t> ranges;
};

/// One arena: its host memory, its device allocation (a 2-D byte buffer of
/// at least `bytes`: a 1-D one could not describe more than 2^31 bytes), and
/// which side holds the newer copy of each range (neither: both agree).
struct Arena {
  uint8_t *host = nullptr;
  int64_t bytes = 0;
  halide_buffer_t buf = {};
  halide_dimension_t dims[2] = {};
  Ranges hostNewer, deviceNewer;
};

constexpr int64_t kRow = int64_t(1) << 20;

struct State {
  const halide_device_interface_t *device = nullptr;
  const char *target = "";
  // A kernel argument's crop starts at a multiple of this in its arena
  // (the device kind's); other arguments are staged.
  int64_t cropAlignment = 1;
  std::vector<Arena> arenas; // by host address
  // The current kernel call's arguments that are crops (else staged).
  std::vector<char> cropped;
  // Kernel profiling: the current call's kernel and when it started.
  const char *profiled = nullptr;
  std::chrono::steady_clock::time_point profileStart;
};

/// Kernel profiling: waits for every kernel already queued on the device
/// (Halide's device sync takes a buffer on the device: any arena's).
int waitForDevice(State *s) {
  for (Arena &a : s->arenas)
    if (a.buf.device)
      return s->device->device_sync(nullptr, &a.buf);
  return 0;
}

State *stateOf(moert_context *ctx) { return static_cast<State *>(ctx->runtime.device); }

/// The arena holding [p, p + bytes), or null.
Arena *find(State *s, const void *p, int64_t bytes) {
  auto *q = static_cast<const uint8_t *>(p);
  auto it = std::upper_bound(s->arenas.begin(), s->arenas.end(), q,
                             [](const uint8_t *x, const Arena &a) { return x < a.host; });
  if (it == s->arenas.begin())
    return nullptr;
  Arena &a = *std::prev(it);
  int64_t offset = q - a.host;
  if (offset >= a.bytes || (bytes > 0 && offset + bytes > a.bytes))
    return nullptr;
  return &a;
}

/// Gives `dst` (host pointer, type and shape set; no device allocation) a
/// device crop of `arena` at byte `offset`: halide_device_crop with a
/// source buffer shaped like `dst` whose minimum puts `dst` at `offset`.
/// Returns false when the offset cannot be written so (not a multiple of
/// the element size, or beyond 2^31 elements for a 1-D `dst`).
bool cropAt(const Arena &arena, int64_t offset, halide_buffer_t *dst, int *rc) {
  const int64_t elem = (dst->type.bits + 7) / 8 * dst->type.lanes;
  if (offset % elem || dst->dimensions < 1 || dst->dimensions > 8)
    return false;
  int64_t q = offset / elem;
  halide_dimension_t dims[8];
  halide_buffer_t src = *dst;
  src.dim = dims;
  for (int d = 0; d < dst->dimensions; ++d)
    dims[d] = dst->dim[d];
  // The crop's byte offset is sum_d (dst.min_d - src.min_d) src.stride_d:
  // the offset in units of 2^30 elements along the last dimension (its
  // stride a placeholder: only the offset reads the source's shape), the
  // rest along the first.
  constexpr int64_t kUnit = int64_t(1) << 30;
  const int64_t hi = q / kUnit, lo = q % kUnit;
  const int last = dst->dimensions - 1;
  if (last == 0) {
    if (q > std::numeric_limits<int32_t>::max() - 1)
      return false;
    dims[0].min = dst->dim[0].min - static_cast<int32_t>(q);
    dims[0].stride = 1;
  } else {
    if (hi > std::numeric_limits<int32_t>::max() - 1)
      return false;
    dims[0].min = dst->dim[0].min - static_cast<int32_t>(lo);
    dims[0].stride = 1;
    dims[last].min = dst->dim[last].min - static_cast<int32_t>(hi);
    dims[last].stride = static_cast<int32_t>(kUnit);
  }
  src.host = arena.host; // unused by the crop
  src.device = arena.buf.device;
  src.device_interface = arena.buf.device_interface;
  src.flags = 0;
  *rc = halide_device_crop(nullptr, &src, dst);
  return true;
}

/// Copies [b, e) of `arena` to the device (toDevice) or to the host.
int copyRange(Arena &arena, int64_t b, int64_t e, bool toDevice) {
  while (b < e) {
    const int64_t n = std::min<int64_t>(e - b, int64_t(1) << 30);
    halide_dimension_t dims[2] = {{0, static_cast<int32_t>(n), 1, 0},
                                  {0, 1, static_cast<int32_t>(n), 0}};
    halide_buffer_t piece = {};
    piece.host = arena.host + b;
    piece.type = {halide_type_uint, 8, 1};
    piece.dimensions = 2;
    piece.dim = dims;
    int rc = 0;
    if (!cropAt(arena, b, &piece, &rc))
      rc = halide_error_code_device_crop_failed;
    if (rc)
      return rc;
    piece.flags = toDevice ? halide_buffer_flag_host_dirty : halide_buffer_flag_device_dirty;
    rc = toDevice ? halide_copy_to_device(nullptr, &piece, arena.buf.device_interface)
                  : halide_copy_to_host(nullptr, &piece);
    int released = halide_device_release_crop(nullptr, &piece);
    if (rc || released)
      return rc ? rc : released;
    moert_device_count(toDevice ? n : 0, toDevice ? 0 : n);
    b += n;
  }
  return 0;
}

/// Makes [b, e) current on one side: the other side's newer bytes there
/// are copied over (toDevice: the host-newer ones to the device).
int bringOver(Arena &a, int64_t b, int64_t e, bool toDevice) {
  Ranges &newer = toDevice ? a.hostNewer : a.deviceNewer;
  for (auto [pb, pe] : newer.within(b, e))
    if (int rc = copyRange(a, pb, pe, toDevice))
      return rc;
  newer.remove(b, e);
  return 0;
}

int toHost(Arena &a, int64_t b, int64_t e) { return bringOver(a, b, e, false); }
int toDevice(Arena &a, int64_t b, int64_t e) { return bringOver(a, b, e, true); }

/// After a kernel call that returned `rc`, a staged buffer: what the device
/// wrote comes back to the host (host-newer in arena `a` at byte `at`, when
/// it lies in one), and its device allocation is released. Returns rc, or
/// the first copy error.
int stagedDone(halide_buffer_t *b, int rc, Arena *a, int64_t at) {
  if (!b->device)
    return rc;
  if (rc == 0 && (b->flags & halide_buffer_flag_device_dirty)) {
    rc = halide_copy_to_host(nullptr, b);
    moert_device_count(0, bytesOf(b));
    if (a)
      a->hostNewer.add(at, at + bytesOf(b));
  }
  int freed = halide_device_free(nullptr, b);
  return rc ? rc : freed;
}

void release(State *s) {
  for (Arena &a : s->arenas)
    if (a.buf.device)
      halide_device_free(nullptr, &a.buf);
  s->arenas.clear();
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
  for (int i = 0; i < n; ++i)
    rc = stagedDone(bufs[i], rc, nullptr, 0);
  return rc;
}

extern "C" int moert_device_attach(moert_context *ctx, const halide_device_interface_t *device,
                                   const char *target, const moert_param_info *params,
                                   int num_params, int64_t activation_bytes,
                                   int64_t gradient_bytes) {
  if (int rc = deviceReady(device, target))
    return rc;
  std::vector<std::pair<uint8_t *, int64_t>> want;
  auto add = [&](void *p, int64_t bytes) {
    if (p && bytes > 0)
      want.emplace_back(static_cast<uint8_t *>(p), bytes);
  };
  add(ctx->run.activations, activation_bytes);
  add(ctx->run.gradients, gradient_bytes);
  for (int i = 0; i < num_params; ++i) {
    // As the trainer allocates them.
    add(ctx->run.params[i], 4 * moert::paramBufferElements(params[i]));
    if (params[i].adamw && ctx->run.moments) {
      add(ctx->run.moments[2 * i], 4 * moert::zeroShardElements(params[i]));
      add(ctx->run.moments[2 * i + 1], 4 * moert::zeroShardElements(params[i]));
    }
  }
  std::sort(want.begin(), want.end());
  State *s = stateOf(ctx);
  if (s && s->arenas.size() == want.size() &&
      std::equal(want.begin(), want.end(), s->arenas.begin(), [](const auto &w, const Arena &a) {
        return w.first == a.host && w.second == a.bytes;
      }))
    return 0;
  if (!s) {
    s = new State;
    ctx->runtime.device = s;
  } else {
    // The trainer gave the rank other arenas: their host copies hold the
    // state (it synced before it moved them).
    release(s);
  }
  s->device = device;
  s->target = target;
  s->cropAlignment = moert::deviceKind(target).cropAlignment;
  s->arenas.resize(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    Arena &a = s->arenas[i];
    if (i && want[i].first < want[i - 1].first + want[i - 1].second) {
      std::fprintf(stderr, "kernel error: the step's arenas overlap in host memory\n");
      release(s);
      return halide_error_code_generic_error;
    }
    a.host = want[i].first;
    a.bytes = want[i].second;
    int64_t rows = (a.bytes + kRow - 1) / kRow;
    a.dims[0] = {0, static_cast<int32_t>(std::min(a.bytes, kRow)), 1, 0};
    a.dims[1] = {0, static_cast<int32_t>(rows), static_cast<int32_t>(a.dims[0].extent), 0};
    a.buf.host = nullptr;
    a.buf.type = {halide_type_uint, 8, 1};
    a.buf.dimensions = 2;
    a.buf.dim = a.dims;
    if (int rc = halide_device_malloc(nullptr, &a.buf, device)) {
      std::fprintf(stderr,
                   "kernel error: %s device memory for the step's state ran out (%lld bytes "
                   "for one arena; error %d)\n",
                   target, static_cast<long long>(a.bytes), rc);
      release(s);
      return rc;
    }
    a.hostNewer.add(0, a.bytes);
  }
  return 0;
}

extern "C" int moert_device_call(moert_context *ctx, const halide_filter_metadata_t *md,
                                 halide_buffer_t *const *bufs, int n) {
  State *s = stateOf(ctx);
  if (!s)
    return halide_error_code_generic_error;
  s->cropped.assign(n, 0);
  // Inputs first: an in-place kernel's output is also one of its inputs.
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n && i < md->num_arguments; ++i) {
      const bool input = md->arguments[i].kind == halide_argument_kind_input_buffer;
      if (input != (pass == 0))
        continue;
      halide_buffer_t *b = bufs[i];
      const int64_t bytes = bytesOf(b);
      Arena *a = find(s, b->host, bytes);
      const int64_t at = a ? b->host - a->host : 0;
      int rc = 0;
      if (a && at % s->cropAlignment == 0 && cropAt(*a, at, b, &rc)) {
        if (rc)
          return rc;
        s->cropped[i] = 1;
        b->flags = 0;
        if (input)
          if (int r = toDevice(*a, at, at + bytes))
            return r;
        continue;
      }
      // Staged: the host copy must be the newest, and the kernel copies it.
      if (a)
        if (int r = toHost(*a, at, at + bytes))
          return r;
      if (input) {
        b->flags |= halide_buffer_flag_host_dirty;
        moert_device_count(bytes, 0);
      }
    }
  s->profiled = nullptr;
  if (moert_kernel_profile_enabled()) {
    if (int rc = waitForDevice(s))
      return rc;
    s->profiled = md->name;
    s->profileStart = std::chrono::steady_clock::now();
  }
  return 0;
}

extern "C" int moert_device_called(moert_context *ctx, int rc, halide_buffer_t *const *bufs,
                                   int n) {
  State *s = stateOf(ctx);
  if (s && s->profiled && rc == 0) {
    // From the call (staged inputs' uploads included) to the device's
    // completion, before staged outputs come back.
    rc = waitForDevice(s);
    std::chrono::duration<double> t = std::chrono::steady_clock::now() - s->profileStart;
    moert_kernel_profile_add(s->profiled, t.count());
  }
  if (s)
    s->profiled = nullptr;
  for (int i = 0; i < n; ++i) {
    halide_buffer_t *b = bufs[i];
    const int64_t bytes = bytesOf(b);
    Arena *a = s ? find(s, b->host, bytes) : nullptr;
    const int64_t at = a ? b->host - a->host : 0;
    if (s && i < static_cast<int>(s->cropped.size()) && s->cropped[i]) {
      if (rc == 0 && (b->flags & halide_buffer_flag_device_dirty)) {
        a->hostNewer.remove(at, at + bytes);
        a->deviceNewer.add(at, at + bytes);
      } else if (rc == 0 && (b->flags & halide_buffer_flag_host_dirty)) {
        a->deviceNewer.remove(at, at + bytes);
        a->hostNewer.add(at, at + bytes);
      }
      int released = halide_device_release_crop(nullptr, b);
      b->flags = 0;
      if (rc == 0)
        rc = released;
      continue;
    }
    rc = stagedDone(b, rc, a, at);
  }
  if (s)
    s->cropped.clear();
  return rc;
}

extern "C" int moert_device_host(moert_context *ctx, const void *p, int64_t bytes) {
  State *s = stateOf(ctx);
  Arena *a = s && p ? find(s, p, bytes) : nullptr;
  if (!a)
    return 0;
  const int64_t at = static_cast<const uint8_t *>(p) - a->host;
  if (int rc = toHost(*a, at, bytes < 0 ? a->bytes : at + bytes)) {
    std::fprintf(stderr, "kernel error: copying %s device memory to the host failed (%d)\n",
                 s->target, rc);
    return rc;
  }
  return 0;
}

extern "C" void moert_device_wrote(moert_context *ctx, const void *p, int64_t bytes) {
  State *s = stateOf(ctx);
  Arena *a = s && p ? find(s, p, bytes) : nullptr;
  if (!a)
    return;
  const int64_t at = static_cast<const uint8_t *>(p) - a->host;
  const int64_t end = bytes < 0 ? a->bytes : at + bytes;
  a->deviceNewer.remove(at, end);
  a->hostNewer.add(at, end);
}

extern "C" int moert_device_sync(moert_context *ctx) {
  State *s = stateOf(ctx);
  if (!s)
    return 0;
  for (Arena &a : s->arenas)
    if (int rc = toHost(a, 0, a.bytes)) {
      std::fprintf(stderr, "kernel error: copying %s device memory to the host failed (%d)\n",
                   s->target, rc);
      return rc;
    }
  return 0;
}

extern "C" void moert_device_wrote_all(moert_context *ctx) {
  if (State *s = stateOf(ctx))
    for (Arena &a : s->arenas) {
      a.deviceNewer.clear();
      a.hostNewer.add(0, a.bytes);
    }
}

extern "C" void moert_device_free(moert_context *ctx) {
  State *s = stateOf(ctx);
  if (!s)
    return;
  release(s);
  delete s;
  ctx->runtime.device = nullptr;
}
