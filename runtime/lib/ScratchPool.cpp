//===- ScratchPool.cpp - the kernels' scratch allocator -------------------===//
//
// One region of `limit` bytes, mapped once and never unmapped, carved by
// address-ordered first fit with coalescing. Kernels run one at a time and
// free all their scratch before returning, so the region is one free block
// again between kernels: blocks of different kernels (different sizes) share
// the same pages, and a steady-state step maps and faults in nothing. A
// request the region cannot hold (over the bound, or fragmented) falls back
// to the system allocator and goes back to it when freed.
//
//===----------------------------------------------------------------------===//

#include "moert/ScratchPool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace {

constexpr size_t kHeader = 128; // keeps the payload 128-byte aligned

/// Written in front of every payload.
struct Header {
  size_t capacity; ///< bytes of the block, header included
  bool inRegion;
};
static_assert(sizeof(Header) <= kHeader, "header fits its slot");

struct Pool {
  std::mutex mutex;
  char *region = nullptr;
  size_t regionBytes = 0;
  std::map<size_t, size_t> free; ///< offset -> bytes, coalesced
  int64_t inUse = 0, peak = 0;

  /// First fit: the offset of `bytes` taken from the lowest free block
  /// that holds them, or -1.
  long take(size_t bytes) {
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes)
        continue;
      size_t offset = it->first, left = it->second - bytes;
      free.erase(it);
      if (left)
        free.emplace(offset + bytes, left);
      return static_cast<long>(offset);
    }
    return -1;
  }

  /// Returns [offset, offset + bytes) and merges it with its neighbours.
  void give(size_t offset, size_t bytes) {
    auto next = free.lower_bound(offset);
    if (next != free.end() && offset + bytes == next->first) {
      bytes += next->second;
      next = free.erase(next);
    }
    if (next != free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += bytes;
        return;
      }
    }
    free.emplace(offset, bytes);
  }
};

Pool &pool() {
  static Pool *p = new Pool; // never destroyed: kernels may run at exit
  return *p;
}

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

} // namespace

extern "C" void *moert_scratch_alloc(size_t size) {
  if (size > (size_t(1) << 62)) // no such block; and the rounding below can't wrap
    return nullptr;
  Pool &p = pool();
  size_t capacity = kHeader + roundUp(size, kHeader);
  char *block = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    long offset = p.region ? p.take(capacity) : -1;
    if (offset >= 0)
      block = p.region + offset;
    p.inUse += static_cast<int64_t>(capacity);
    if (p.inUse > p.peak)
      p.peak = p.inUse;
  }
  bool inRegion = block != nullptr;
  if (!block)
    block = static_cast<char *>(std::aligned_alloc(kHeader, capacity));
  if (!block) {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.inUse -= static_cast<int64_t>(capacity);
    return nullptr;
  }
  *reinterpret_cast<Header *>(block) = Header{capacity, inRegion};
  return block + kHeader;
}

extern "C" void moert_scratch_free(void *ptr) {
  if (!ptr)
    return;
  char *block = static_cast<char *>(ptr) - kHeader;
  Header h = *reinterpret_cast<Header *>(block);
  Pool &p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.inUse -= static_cast<int64_t>(h.capacity);
    if (h.inRegion) {
      p.give(static_cast<size_t>(block - p.region), h.capacity);
      return;
    }
  }
  std::free(block);
}

extern "C" int64_t moert_scratch_peak(void) {
  std::lock_guard<std::mutex> lock(pool().mutex);
  return pool().peak;
}

extern "C" void moert_scratch_reset_peak(void) {
  std::lock_guard<std::mutex> lock(pool().mutex);
  pool().peak = pool().inUse;
}

extern "C" int moert_scratch_set_limit(int64_t bytes) {
  Pool &p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  // Only between kernels: a block still out may live in the region.
  if (p.region && !(p.free.size() == 1 && p.free.begin()->second == p.regionBytes))
    return -1;
  if (p.region)
    munmap(p.region, p.regionBytes);
  p.region = nullptr;
  p.regionBytes = 0;
  p.free.clear();
  if (bytes <= 0)
    return 0;
  size_t n = roundUp(static_cast<size_t>(bytes), 4096);
  // Reserved, not committed: pages are faulted in on first use and stay.
  void *m =
      mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return -1;
  p.region = static_cast<char *>(m);
  p.regionBytes = n;
  p.free.emplace(0, n);
  return 0;
}
