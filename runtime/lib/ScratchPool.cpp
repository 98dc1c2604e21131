//===- ScratchPool.cpp - the kernels' scratch allocator -------------------===//

#include "moert/ScratchPool.h"

#include <cstdlib>
#include <map>
#include <mutex>

namespace {

constexpr size_t kHeader = 128; // keeps the payload 128-byte aligned

struct Pool {
  std::mutex mutex;
  std::multimap<size_t, char *> cached; ///< capacity -> block
  int64_t inUse = 0, cachedBytes = 0, peak = 0, limit = 0;

  /// Releases cached blocks, largest first, until `need` more bytes fit.
  void makeRoom(int64_t need) {
    while (!cached.empty() && inUse + cachedBytes + need > limit) {
      auto last = std::prev(cached.end());
      cachedBytes -= static_cast<int64_t>(last->first);
      std::free(last->second);
      cached.erase(last);
    }
  }
};

Pool &pool() {
  static Pool *p = new Pool; // never destroyed: kernels may run at exit
  return *p;
}

/// Capacities are rounded to 4 KiB pages so repeated sizes share blocks.
size_t capacityFor(size_t size) { return (size + 4095) / 4096 * 4096; }

} // namespace

extern "C" void *moert_scratch_alloc(size_t size) {
  Pool &p = pool();
  size_t capacity = capacityFor(size);
  char *block = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    // Reuse a cached block of this capacity, or one at most 25% larger.
    auto it = p.cached.lower_bound(capacity);
    if (it != p.cached.end() && it->first <= capacity + capacity / 4) {
      block = it->second;
      capacity = it->first;
      p.cachedBytes -= static_cast<int64_t>(capacity);
      p.cached.erase(it);
    } else {
      p.makeRoom(static_cast<int64_t>(capacity));
    }
    p.inUse += static_cast<int64_t>(capacity);
    if (p.inUse > p.peak)
      p.peak = p.inUse;
  }
  if (!block) {
    block = static_cast<char *>(std::aligned_alloc(kHeader, kHeader + capacity));
    if (!block) {
      std::lock_guard<std::mutex> lock(pool().mutex);
      p.inUse -= static_cast<int64_t>(capacity);
      return nullptr;
    }
  }
  *reinterpret_cast<size_t *>(block) = capacity;
  return block + kHeader;
}

extern "C" void moert_scratch_free(void *ptr) {
  if (!ptr)
    return;
  char *block = static_cast<char *>(ptr) - kHeader;
  size_t capacity = *reinterpret_cast<size_t *>(block);
  Pool &p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.inUse -= static_cast<int64_t>(capacity);
  if (p.inUse + p.cachedBytes + static_cast<int64_t>(capacity) <= p.limit) {
    p.cached.emplace(capacity, block);
    p.cachedBytes += static_cast<int64_t>(capacity);
  } else {
    std::free(block);
  }
}

extern "C" int64_t moert_scratch_peak(void) {
  std::lock_guard<std::mutex> lock(pool().mutex);
  return pool().peak;
}

extern "C" void moert_scratch_set_limit(int64_t bytes) {
  Pool &p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.limit = bytes;
  p.makeRoom(0);
}
