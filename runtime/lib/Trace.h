//===- Trace.h - a rank's timeline, written as a Chrome trace ---*- C++ -*-===//
//
// What `--trace FILE` records: per rank, the step's compute between
// collectives, each collective, and the steps themselves, as complete
// events of the Chrome trace format (Perfetto and chrome://tracing read it):
// `pid` is the rank, one `tid` per lane. The trainer gathers every rank's
// events to the lead, which writes one file. Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRACE_H
#define MOERT_LIB_TRACE_H

#include <string>
#include <vector>

namespace moert {

/// Seconds of the monotonic clock (the trace's and the emulation's time).
double nowSeconds();

/// Returns at `deadline` (nowSeconds()'s clock): sleeps until shortly
/// before, then yields until it. A sleep alone overshoots by tens of
/// microseconds, which the emulations (--emulate-cluster, --emulate-link)
/// would add to every short compute and message.
void waitUntil(double deadline);

/// The lanes of a rank (Chrome trace threads).
enum class TraceLane { Compute = 0, Communication = 1, Step = 2, Background = 3 };

} // namespace moert

struct moert_trace {
  struct Event {
    int lane;
    std::string name;
    double start, end; ///< nowSeconds()
  };
  /// Events kept per rank (about 100 bytes each in the file); later ones
  /// are counted in `dropped`.
  static constexpr size_t kMaxEvents = 500000;
  int rank = 0;
  std::vector<Event> events;
  size_t dropped = 0;

  void add(moert::TraceLane lane, std::string name, double start, double end) {
    if (events.size() >= kMaxEvents) {
      ++dropped;
      return;
    }
    events.push_back({static_cast<int>(lane), std::move(name), start, end});
  }
  /// This rank's events as Chrome trace events (a JSON array's items,
  /// comma-separated, without brackets), times in microseconds from
  /// `origin`, with the metadata naming its process and lanes.
  std::string chromeEvents(double origin) const;
};

#endif // MOERT_LIB_TRACE_H
