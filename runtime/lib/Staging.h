//===- Staging.h - reusable buffers for packing collectives -----*- C++ -*-===//
//
// Collectives pack their payloads into temporary buffers. Freed large
// vectors go back to the kernel (glibc maps them) and fault back in on the
// next call, every step; a thread's staging buffers instead grow to the
// largest payload and stay, so steady-state steps map nothing. Each rank is
// a thread (or a process): the buffers are per thread. Contents are
// unspecified; `Slot`s keep a routine and the routines it calls apart.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_STAGING_H
#define MOERT_LIB_STAGING_H

#include <cstddef>
#include <vector>

namespace moert {

enum class Slot { Bucket, Send, Receive, Sum, Replica, Count };

/// At least `n` elements of this thread's buffer `slot`.
template <typename T> T *staging(Slot slot, size_t n) {
  thread_local std::vector<T> buffers[static_cast<int>(Slot::Count)];
  std::vector<T> &b = buffers[static_cast<int>(slot)];
  if (b.size() < n)
    b.resize(n);
  return b.data();
}

} // namespace moert

#endif // MOERT_LIB_STAGING_H
