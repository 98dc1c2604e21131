//===- Aligned.h - 64-byte aligned storage for kernel buffers ---*- C++ -*-===//
//
// Generated kernels may use aligned vector loads and stores on the buffers
// they are given; every buffer the runtime hands them (parameters, moments,
// arenas, token batches) is therefore 64-byte aligned, like the planner's
// arena offsets.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_ALIGNED_H
#define MOERT_ALIGNED_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

namespace moert {

constexpr size_t kBufferAlignment = 64;

/// A failed allocation of a training buffer: a clear error naming the size,
/// from any rank's thread, instead of an uncaught std::bad_alloc.
[[noreturn]] inline void allocationFailed(size_t bytes) {
  std::fprintf(stderr, "error: out of memory: cannot allocate %zu bytes (%.3f GB)\n", bytes,
               bytes / 1e9);
  std::exit(1);
}

template <typename T> struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U> AlignedAllocator(const AlignedAllocator<U> &) {}
  T *allocate(size_t n) {
    if (n > (SIZE_MAX - kBufferAlignment) / sizeof(T))
      allocationFailed(SIZE_MAX);
    size_t bytes = (n * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    void *p = std::aligned_alloc(kBufferAlignment, bytes ? bytes : kBufferAlignment);
    if (!p)
      allocationFailed(bytes);
    return static_cast<T *>(p);
  }
  void deallocate(T *p, size_t) { std::free(p); }
  template <typename U> bool operator==(const AlignedAllocator<U> &) const { return true; }
  template <typename U> bool operator!=(const AlignedAllocator<U> &) const { return false; }
};

using AlignedFloats = std::vector<float, AlignedAllocator<float>>;
using AlignedInts = std::vector<int32_t, AlignedAllocator<int32_t>>;
using AlignedBytes = std::vector<char, AlignedAllocator<char>>;

} // namespace moert

#endif // MOERT_ALIGNED_H
