//===- DeviceCopies.cpp - the device layer's byte counts and kernel times -===//
//
// Apart from the device layer (runtime/devices/) so that the trainer, which
// reads the counts of every binary, does not pull Halide's device API into
// host binaries.
//
//===----------------------------------------------------------------------===//

#include "moert/DeviceCopies.h"

#include "Trace.h"

#include <mutex>
#include <string>
#include <vector>

namespace {
thread_local int64_t copied[2];

struct ProfileRow {
  std::string kernel;
  int64_t calls = 0;
  double seconds = 0;
};
thread_local bool profiling = false; // each rank's own (ranks may be threads)
std::mutex profileMutex;
std::vector<ProfileRow> profileRows;
} // namespace

extern "C" void moert_kernel_profile_enable(int on) { profiling = on != 0; }

extern "C" int moert_kernel_profile_enabled(void) { return profiling ? 1 : 0; }

extern "C" void moert_kernel_profile_add(const char *kernel, double seconds) {
  std::lock_guard<std::mutex> lock(profileMutex);
  for (ProfileRow &row : profileRows)
    if (row.kernel == kernel) {
      ++row.calls;
      row.seconds += seconds;
      return;
    }
  profileRows.push_back({kernel, 1, seconds});
}

extern "C" double moert_kernel_profile_clock(void) {
  if (!profiling)
    return 0;
  return 1.0 + moert::nowSeconds(); // offset: a profiling clock is never 0
}

extern "C" void moert_kernel_profile_since(const char *kernel, double start) {
  moert_kernel_profile_add(kernel, moert_kernel_profile_clock() - start);
}

extern "C" int moert_kernel_profile_row(int i, const char **kernel, int64_t *calls,
                                        double *seconds) {
  std::lock_guard<std::mutex> lock(profileMutex);
  if (i < 0 || i >= static_cast<int>(profileRows.size()))
    return 0;
  // A copy: the rows move as they grow. The pointer lasts until this
  // thread's next call.
  static thread_local std::string name;
  name = profileRows[i].kernel;
  *kernel = name.c_str();
  *calls = profileRows[i].calls;
  *seconds = profileRows[i].seconds;
  return 1;
}

extern "C" void moert_device_count(int64_t toDevice, int64_t toHost) {
  copied[0] += toDevice;
  copied[1] += toHost;
}

extern "C" void moert_device_copied(int64_t bytes[2]) {
  bytes[0] = copied[0];
  bytes[1] = copied[1];
  copied[0] = copied[1] = 0;
}
